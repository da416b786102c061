#!/usr/bin/env bash
# Chaos with real processes: `lease_worker` processes on dynalite, each behind a TCP fault
# proxy (scripts/fault_proxy.py: pass, delay, hold, never-answer, refuse), killed, frozen,
# partitioned, slowed and restarted on a seeded schedule, then audited from their events logs
# (overlaps, handover margins, failover and leave times, unprocessed lease-seconds, balance).
#
#   scripts/chaos.sh [seconds] [seed] [-- more scripts/chaos.py options]
#   scripts/chaos.sh 60 7                          # the CI run
#   scripts/chaos.sh 600 1                         # the 10-minute run of BENCHMARKS.md
#   scripts/chaos.sh 0 1 --schedule half-open      # one worker's connections hang
#   scripts/chaos.sh 0 1 --schedule slow           # one worker's requests take 4 to 12 s
#   scripts/chaos.sh 300 1 --protocol leases       # the same faults on the lease protocol
#
# Exits non-zero on any overlap or an unbalanced fleet at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
seed=${2:-1}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift

scripts/emulators.sh install
if [ -z "${SHARDLEASE_DYNALITE_ENDPOINT:-}" ]; then
  trap 'scripts/emulators.sh stop' EXIT
  scripts/emulators.sh start
fi
dynamo=${SHARDLEASE_DYNALITE_ENDPOINT:-http://127.0.0.1:${DYNALITE_PORT:-4567}}
cargo build --quiet --all-features --example lease_worker
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
python3 scripts/chaos.py --binary target/debug/examples/lease_worker \
  --upstream "${dynamo#http://}" --seconds "$seconds" --seed "$seed" "$@"
