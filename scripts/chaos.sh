#!/usr/bin/env bash
# Chaos with real processes: `lease_worker` processes on dynalite (or on redis-server), each
# behind a TCP fault proxy (scripts/fault_proxy.py: pass, delay, hold, never-answer, refuse,
# late), killed, frozen, partitioned, slowed, made late and restarted on a seeded schedule,
# then audited from their events logs and the table (overlaps, checkpoint regressions,
# handover margins, failover and leave times, unprocessed lease-seconds, balance, late
# deliveries, steals).
#
#   scripts/chaos.sh [seconds] [seed] [-- more scripts/chaos.py options]
#   scripts/chaos.sh 60 7                          # the CI run
#   scripts/chaos.sh 600 1                         # the 10-minute run of BENCHMARKS.md
#   scripts/chaos.sh 0 1 --schedule half-open      # one worker's connections hang
#   scripts/chaos.sh 0 1 --schedule slow           # one worker's requests take 4 to 12 s
#   scripts/chaos.sh 60 1 --schedule late          # requests land 3 to 8 s late, after retries
#   scripts/chaos.sh 60 1 --schedule steal         # KCL 2.x's stealing policy, workers join
#   scripts/chaos.sh 60 7 --store redis            # the lease table on redis-server
#
# Exits non-zero on any overlap, checkpoint regression or an unbalanced fleet at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
seed=${2:-1}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
store=dynamodb
prev=
for arg in "$@"; do
  case "$arg" in
    --store=*) store=${arg#--store=} ;;
    *) [ "$prev" = --store ] && store=$arg ;;
  esac
  prev=$arg
done

scripts/emulators.sh install
# The emulators are started here unless the store's address is given (as scripts/test.sh does).
given=$([ "$store" = redis ] && echo "${SHARDLEASE_REDIS_URL:-}" || echo "${SHARDLEASE_DYNALITE_ENDPOINT:-}")
if [ -z "$given" ]; then
  trap 'scripts/emulators.sh stop' EXIT
  scripts/emulators.sh start
fi
case "$store" in
  redis)
    redis=${SHARDLEASE_REDIS_URL:-redis://127.0.0.1:${REDIS_PORT:-6390}}
    upstream=${redis#redis://}
    upstream=${upstream%%/*}
    case "$upstream" in
      *@*) echo "chaos.sh: SHARDLEASE_REDIS_URL with a password is not supported here" >&2; exit 2 ;;
    esac
    ;;
  dynamodb)
    dynamo=${SHARDLEASE_DYNALITE_ENDPOINT:-http://127.0.0.1:${DYNALITE_PORT:-4567}}
    upstream=${dynamo#http://}
    ;;
  *) echo "chaos.sh: --store $store: expected dynamodb or redis" >&2; exit 2 ;;
esac
# The command line is the package shardlease-cli; the workers are an example of the library.
# The same packages and features as the test command's build, so that it reuses it.
cargo build --quiet --all-features -p shardlease -p shardlease-cli \
  --example lease_worker --bin shardlease
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
target=${CARGO_TARGET_DIR:-target}
python3 scripts/chaos.py --binary "$target/debug/examples/lease_worker" \
  --cli "$target/debug/shardlease" --upstream "$upstream" --seconds "$seconds" --seed "$seed" "$@"
