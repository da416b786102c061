// Starts kinesalite (a Kinesis emulator) bound to one address: its command line has no --host
// flag, so it would listen on every interface. Streams become ACTIVE at once.
//
//   NODE_PATH=.emulators/node/node_modules node scripts/kinesalite.js [port] [host]
const kinesalite = require('kinesalite');

const port = Number(process.argv[2] || 4569);
const host = process.argv[3] || '127.0.0.1';
const server = kinesalite({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000 });
server.listen(port, host, (err) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log(`kinesalite listening on ${host}:${port}`);
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
