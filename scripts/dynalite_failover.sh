#!/usr/bin/env bash
# Crash failover with real processes on dynalite: PROCS `lease_worker` processes share SHARDS
# leases; once they are balanced one is killed with SIGKILL. Prints, for each lease it held,
# the time from the kill to a survivor acquiring it.
#
#   scripts/dynalite_failover.sh [procs] [shards] [lease-secs]     # default 4 64 10
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}
procs=${1:-4}
shards=${2:-64}
lease=${3:-10}

scripts/emulators.sh install
if [ -z "${SHARDLEASE_DYNALITE_ENDPOINT:-}" ]; then
  trap 'scripts/emulators.sh stop' EXIT
  scripts/emulators.sh start
fi
dynamo=${SHARDLEASE_DYNALITE_ENDPOINT:-http://127.0.0.1:${DYNALITE_PORT:-4567}}
cargo build --quiet --example lease_worker
export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
work=$(mktemp -d)
table="failover-$$-$RANDOM"
pids=()
for i in $(seq 1 "$procs"); do
  "$target"/debug/examples/lease_worker --id "w$i" --table "$table" --endpoint "$dynamo" \
    --shards "$shards" --lease-secs "$lease" --events-log "$work/w$i.jsonl" \
    >"$work/w$i.log" 2>&1 &
  pids+=($!)
done

# Held counts per worker from the event logs.
held() {
  python3 - "$work" "$procs" <<'PY'
import json, sys
work, procs = sys.argv[1], int(sys.argv[2])
counts = []
for i in range(1, procs + 1):
    held = set()
    try:
        for line in open(f"{work}/w{i}.jsonl"):
            e = json.loads(line)
            if e["event"] == "acquired":
                held.add(e["lease"])
            elif e["event"] in ("handed_off", "released", "lost", "stopped"):
                held.discard(e["lease"])
    except FileNotFoundError:
        pass
    counts.append(len(held))
print(" ".join(map(str, counts)))
PY
}
balanced=""
for _ in $(seq 1 240); do
  sleep 0.5
  read -r -a counts <<<"$(held)"
  total=0; min=${counts[0]}; max=${counts[0]}
  for c in "${counts[@]}"; do
    total=$((total + c)); ((c < min)) && min=$c; ((c > max)) && max=$c
  done
  if ((total == shards && max - min <= 1)); then balanced=yes; break; fi
done
[ -n "$balanced" ] || { echo "not balanced: ${counts[*]}"; exit 1; }
echo "balanced: ${counts[*]}"
sleep 2
kill -9 "${pids[0]}"
killed=$(date +%s%N)
sleep $((lease * 3 + 5))
for pid in "${pids[@]:1}"; do kill -INT "$pid"; done
for pid in "${pids[@]:1}"; do wait "$pid" || true; done

python3 - "$work" "$procs" "$killed" <<'PY'
import json, sys
work, procs, killed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
events = lambda w: [json.loads(l) for l in open(f"{work}/{w}.jsonl")]
held = set()
for e in events("w1"):
    if e["ts_unix_nanos"] > killed:
        continue
    if e["event"] == "acquired":
        held.add(e["lease"])
    elif e["event"] in ("handed_off", "released", "lost", "stopped"):
        held.discard(e["lease"])
if not held:
    sys.exit("w1 held nothing when it was killed")
times = []
for lease in sorted(held):
    first = min((e["ts_unix_nanos"] for w in range(2, procs + 1) for e in events(f"w{w}")
                 if e["lease"] == lease and e["event"] == "acquired"
                 and e["ts_unix_nanos"] > killed), default=None)
    if first is None:
        sys.exit(f"no survivor acquired {lease}")
    times.append((first - killed) / 1e9)
times.sort()
p50 = times[(len(times) - 1) // 2]
print(f"FIGURE dynalite failover, SIGKILL, {procs} processes, {len(times)} orphaned leases: "
      f"min {times[0]:.2f} s, p50 {p50:.2f} s, max {times[-1]:.2f} s")
PY
rm -rf "$work"
