#!/usr/bin/env bash
# The whole test suite: installs and starts the emulators (dynalite and moto for DynamoDB,
# kinesalite and kinesis-mock for Kinesis, redis-server for the Redis store, loghub-emulator for
# LogHub) on 127.0.0.1, runs every test with every feature (in-memory store,
# both DynamoDB emulators, the Kinesis consumer), and stops the emulators it started.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/emulators.sh install
if [ -z "${SHARDLEASE_DYNALITE_ENDPOINT:-}${SHARDLEASE_MOTO_ENDPOINT:-}${SHARDLEASE_KINESALITE_ENDPOINT:-}" ]; then
  trap 'scripts/emulators.sh stop' EXIT
  scripts/emulators.sh start
  # The tests find the emulators on the ports they were started on (DYNALITE_PORT / MOTO_PORT
  # move both, for a machine where the defaults are taken).
  export SHARDLEASE_DYNALITE_ENDPOINT="http://127.0.0.1:${DYNALITE_PORT:-4567}"
  export SHARDLEASE_MOTO_ENDPOINT="http://127.0.0.1:${MOTO_PORT:-4568}"
  export SHARDLEASE_KINESALITE_ENDPOINT="http://127.0.0.1:${KINESALITE_PORT:-4569}"
  export SHARDLEASE_KINESIS_MOCK_ENDPOINT="http://127.0.0.1:${KINESIS_MOCK_PORT:-4570}"
  export SHARDLEASE_REDIS_URL="${SHARDLEASE_REDIS_URL:-redis://127.0.0.1:${REDIS_PORT:-6390}}"
  export SHARDLEASE_REDIS_TLS_URL="rediss://127.0.0.1:${REDIS_TLS_PORT:-6391}"
  export SHARDLEASE_REDIS_TLS_CA="$PWD/.emulators/tls/ca.pem"
  # The LogHub emulator: a client's HTTP proxy (docs/TESTING.md, "The LogHub emulator").
  export SHARDLEASE_LOGHUB_ENDPOINT="http://127.0.0.1:${LOGHUB_PORT:-4580}"
fi

# The library, the command line (cli/), the simulator (sim/: its library's unit tests,
# tests/simulate.rs, tests/campaign_holes.rs) and the LogHub emulator (loghub-emulator/: its
# tests run the SDK against an emulator of their own), in one build so that the library is built
# once, with every feature (the demo, demo/, has no tests).
packages=(-p shardlease -p shardlease-cli -p shardlease-sim -p shardlease-loghub-emulator)
# Tests and scripts that run example processes (example_sigterm, chaos.sh) or the command line
# (demo_cli.sh) find them built with the same packages and features.
cargo build --all-features "${packages[@]}" --bins --examples
cargo test --all-features "${packages[@]}" --all-targets "$@"
cargo test --all-features --doc "$@"
# Real processes under faults for 60 s: lease_worker processes on dynalite behind fault
# proxies, killed, frozen, partitioned, slowed and restarted (BENCHMARKS.md has 10 minutes).
scripts/chaos.sh 60 7
# The same on Redis: lease_worker processes on redis-server behind the fault proxies.
scripts/chaos.sh 60 7 --store redis
# The command line on two lease_worker processes: status, drain, checkpoints, import-kcl.
scripts/demo_cli.sh
# The LogHub consumer end to end: loghub_consumer processes on redis-server against the LogHub
# emulator through a kill -9, a join, a SIGTERM, a split and a merge (4 s leases, a 1 s hold).
python3 scripts/loghub_e2e.py --lease-secs 4 --hold-secs 1
echo "conformance targets run: in-memory (conformance_memory), dynalite (conformance_dynalite), moto (conformance_moto), redis (conformance_redis)"
