'use strict';
// Send --count messages of --size bytes to --address and print one JSON line of results.
// Each message carries application property sent_at_ms (wall clock) so a receiver can measure latency.
// With --rate N the sender paces itself to N msgs/s (for latency runs); otherwise it sends as fast as
// credit allows. With --priorities each message's header priority cycles 0-9 (else none: the default 4).
// Exits 0 only if every message was accepted.
const rhea = require('rhea');
const { parseArgs, connectOptions, nowMs } = require('./args');

const opts = parseArgs(process.argv.slice(2), {
  url: 'amqp://127.0.0.1:5672', address: 'bench', count: 100, size: 1024, durable: false,
  user: '', password: '', rate: 0, timeout: 60, priorities: false,
});

const payload = Buffer.alloc(opts.size, 'x');
const counts = { sent: 0, accepted: 0, rejected: 0, released: 0, modified: 0 };
const started = nowMs();
let connection;
let done = false;

function finish(error) {
  if (done) return; // close() and timers may report again after we are finished
  done = true;
  const result = { ...counts, elapsed_s: (nowMs() - started) / 1000 };
  if (error) result.error = String(error);
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exitCode = !error && counts.accepted === opts.count ? 0 : 1;
  if (connection) connection.close();
  setImmediate(() => process.exit());
}

// How many messages the pacing allows by now (everything, when unpaced).
function allowed() {
  if (!opts.rate) return opts.count;
  return Math.min(opts.count, Math.floor(((nowMs() - started) / 1000) * opts.rate) + 1);
}

function pump(sender) {
  while (sender.sendable() && counts.sent < allowed()) {
    const message = {
      durable: opts.durable,
      application_properties: { sent_at_ms: nowMs(), seq: counts.sent },
      body: rhea.message.data_section(payload),
    };
    if (opts.priorities) message.priority = counts.sent % 10;
    sender.send(message);
    counts.sent++;
  }
}

const container = rhea.create_container();
container.on('sendable', (ctx) => pump(ctx.sender));
container.on('accepted', () => { counts.accepted++; if (counts.accepted === opts.count) finish(); });
container.on('rejected', () => counts.rejected++);
container.on('released', () => counts.released++);
container.on('modified', () => counts.modified++);
container.on('error', (ctx) => finish(ctx.error || 'error'));
container.on('disconnected', (ctx) => finish(ctx.error || 'disconnected'));
container.on('connection_error', (ctx) => finish(ctx.connection.error || 'connection error'));

setTimeout(() => finish(`timeout after ${opts.timeout}s`), opts.timeout * 1000).unref();
connection = container.connect(connectOptions(opts));
const sender = connection.open_sender(opts.address);
if (opts.rate) setInterval(() => pump(sender), 2);
if (opts.count === 0) finish();
