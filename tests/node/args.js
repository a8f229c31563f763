'use strict';
// Tiny "--name value" / "--flag" parser shared by send.js and receive.js (no dependency needed).

function parseArgs(argv, spec) {
  const out = {};
  for (const [name, def] of Object.entries(spec)) out[name] = def;
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, '').replace(/-/g, '_');
    if (!(key in spec)) throw new Error(`unknown option ${argv[i]}`);
    if (typeof spec[key] === 'boolean') {
      out[key] = true;
    } else {
      const value = argv[++i];
      if (value === undefined) throw new Error(`missing value for ${argv[i - 1]}`);
      out[key] = typeof spec[key] === 'number' ? Number(value) : value;
    }
  }
  return out;
}

// Split amqp://[user:pass@]host:port into rhea connect options; --user/--password override the URL.
// A ws:// or wss:// URL connects over WebSocket (subprotocol amqp) with Node's ws package.
function connectOptions(opts) {
  const url = new URL(opts.url);
  const conn = {
    host: url.hostname,
    port: Number(url.port || 5672),
    reconnect: false,
    container_id: `rhea-${process.pid}`,
  };
  if (url.protocol === 'ws:' || url.protocol === 'wss:') {
    const WebSocket = require('ws');
    const plain = new URL(opts.url);
    plain.username = '';
    plain.password = '';
    conn.connection_details = require('rhea').websocket_connect(WebSocket)(plain.href, ['amqp'], {});
    conn.hostname = url.hostname;
  }
  const user = opts.user || decodeURIComponent(url.username);
  const password = opts.password || decodeURIComponent(url.password);
  if (user) {
    conn.username = user;
    conn.password = password;
  }
  return conn;
}

// Wall-clock milliseconds with sub-millisecond resolution, comparable across processes on one host.
function nowMs() {
  return performance.timeOrigin + performance.now();
}

module.exports = { parseArgs, connectOptions, nowMs };
