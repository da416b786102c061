// Starts kinesis-mock (npm `kinesis-local`, a Kinesis emulator that serves SubscribeToShard and
// stream consumers) bound to one address: it has no setting for the address, so it would listen
// on every interface. Every server it opens is made to listen on `host` instead. Its ports and
// certificate come from its own environment variables (KINESIS_MOCK_PLAIN_PORT,
// KINESIS_MOCK_TLS_PORT, KINESIS_MOCK_CERT_PATH).
//
//   node scripts/kinesis_mock.js <path of kinesis-local's main.js> [host]
const net = require('net');

const main = process.argv[2];
const host = process.argv[3] || '127.0.0.1';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args[0] !== null && typeof args[0] === 'object') {
    args[0] = { ...args[0], host };
  } else if (typeof args[1] === 'string') {
    args[1] = host;
  } else {
    args.splice(1, 0, host);
  }
  return listen.apply(this, args);
};
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => process.exit(0));
}
require(main);
