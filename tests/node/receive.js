'use strict';
// Receive --count messages from --address (accepting each) and print one JSON line of results,
// including latency percentiles computed from the sender's sent_at_ms application property.
// --ready-file PATH is created once the receiving link is attached, so a driver can start senders
// only after the consumer exists. Exits 0 only if exactly --count messages arrived.
const fs = require('fs');
const rhea = require('rhea');
const { parseArgs, connectOptions, nowMs } = require('./args');

const opts = parseArgs(process.argv.slice(2), {
  url: 'amqp://127.0.0.1:5672', address: 'bench', count: 100, user: '', password: '',
  credit: 500, timeout: 60, ready_file: '',
});

const latencies = [];
let received = 0;
let firstAt = null;
let lastAt = null;
let connection;
let done = false;

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

function finish(error) {
  if (done) return; // close() and timers may report again after we are finished
  done = true;
  latencies.sort((a, b) => a - b);
  const result = {
    received,
    first_at_ms: firstAt,
    last_at_ms: lastAt,
    elapsed_s: firstAt === null ? 0 : (lastAt - firstAt) / 1000,
    latency_ms: {
      n: latencies.length, p50: percentile(latencies, 50), p99: percentile(latencies, 99),
      max: percentile(latencies, 100),
    },
  };
  if (error) result.error = String(error);
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exitCode = !error && received === opts.count ? 0 : 1;
  if (connection) connection.close();
  setImmediate(() => process.exit());
}

// Manual credit, never more than the messages still wanted: a receiver sharing a queue with others
// must not prefetch (and then drop on close) messages that another receiver is waiting for.
// Topping up only below half the window keeps flow frames rare.
function topUpCredit(receiver) {
  const wanted = Math.min(opts.credit, opts.count - received);
  if (receiver.credit <= wanted / 2) receiver.add_credit(wanted - receiver.credit);
}

const container = rhea.create_container();
container.on('receiver_open', () => { if (opts.ready_file) fs.writeFileSync(opts.ready_file, 'ready\n'); });
container.on('message', (ctx) => {
  const now = nowMs();
  if (firstAt === null) firstAt = now;
  lastAt = now;
  received++;
  const props = ctx.message.application_properties;
  if (props && typeof props.sent_at_ms === 'number') latencies.push(now - props.sent_at_ms);
  if (received === opts.count) finish();
  else topUpCredit(ctx.receiver);
});
container.on('error', (ctx) => finish(ctx.error || 'error'));
container.on('disconnected', (ctx) => finish(ctx.error || 'disconnected'));
container.on('connection_error', (ctx) => finish(ctx.connection.error || 'connection error'));

setTimeout(() => finish(`timeout after ${opts.timeout}s`), opts.timeout * 1000).unref();
connection = container.connect(connectOptions(opts));
topUpCredit(connection.open_receiver({ source: opts.address, credit_window: 0, autoaccept: true }));
if (opts.count === 0) finish();
