#!/usr/bin/env bash
# Measures Kinesis failover with real processes: two `kinesis_consumer` examples on kinesalite
# and dynalite, one killed with SIGKILL; prints, for each shard the killed one held, the time
# from the kill to the survivor's first checkpoint on it (it checkpoints after every batch, so
# that is its first batch of that shard processed).
#
#   scripts/kinesis_failover.sh [lease-secs]      # default 10 (the library default)
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}
lease=${1:-10}

scripts/emulators.sh install
if [ -z "${SHARDLEASE_KINESALITE_ENDPOINT:-}" ]; then
  trap 'scripts/emulators.sh stop' EXIT
  scripts/emulators.sh start
fi
kinesis=${SHARDLEASE_KINESALITE_ENDPOINT:-http://127.0.0.1:${KINESALITE_PORT:-4569}}
dynamo=${SHARDLEASE_DYNALITE_ENDPOINT:-http://127.0.0.1:${DYNALITE_PORT:-4567}}
cargo build --quiet --features kinesis --example kinesis_consumer
bin="$target"/debug/examples/kinesis_consumer
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
work=$(mktemp -d)
stream="failover-$$-$RANDOM"
common=(--stream "$stream" --kinesis-endpoint "$kinesis" --dynamodb-endpoint "$dynamo" --lease-secs "$lease")

# a creates the stream; b, the survivor, also writes records so that data keeps coming.
"$bin" --worker-id a "${common[@]}" --create-shards 4 \
  --events-log "$work/a.jsonl" >"$work/a.log" 2>&1 &
a=$!
sleep 3
"$bin" --worker-id b "${common[@]}" --produce-per-sec 40 \
  --events-log "$work/b.jsonl" >"$work/b.log" 2>&1 &
b=$!
sleep $((lease + 8))  # b joins and the fleet balances
kill -9 "$a"
killed=$(date +%s%N)
sleep $((lease * 2 + 8))
kill -INT "$b"
wait "$b" || true

python3 - "$work" "$killed" <<'PY'
import json, sys
work, killed = sys.argv[1], int(sys.argv[2])
events = lambda w: [json.loads(l) for l in open(f"{work}/{w}.jsonl")]
held = {}
for e in events("a"):
    if e["ts_unix_nanos"] > killed:
        continue
    if e["event"] == "acquired":
        held[e["lease"]] = True
    elif e["event"] in ("handed_off", "released", "lost", "stopped"):
        held.pop(e["lease"], None)
if not held:
    sys.exit("worker a held no shard when it was killed")
times = []
for shard in sorted(held):
    first = min((e["ts_unix_nanos"] for e in events("b")
                 if e["lease"] == shard and e["event"] == "checkpointed"
                 and e["ts_unix_nanos"] > killed), default=None)
    if first is None:
        sys.exit(f"the survivor never processed {shard}")
    times.append((first - killed) / 1e9)
    print(f"{shard}: kill -> first batch on the survivor {times[-1]:.2f} s")
print(f"FIGURE kinesis failover, SIGKILL, {len(times)} orphaned shards: max {max(times):.2f} s")
PY
rm -rf "$work"
