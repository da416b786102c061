#!/usr/bin/env bash
# Requests per minute a fleet of real worker processes sends to dynalite at rest.
#
# usage: scripts/requests_at_rest.sh [--kinesis] [PROCS] [SHARDS] [WARMUP_SECS] [MEASURE_SECS]
#
# Starts the emulators if dynalite is not running (scripts/emulators.sh), puts a counting proxy
# (scripts/count_requests.py) in front of dynalite, starts PROCS workers (default 2) over SHARDS
# shards (default 4), lets them settle WARMUP_SECS (default 30), counts what they send during
# MEASURE_SECS (default 180), stops them with SIGTERM and prints the requests per minute by
# operation.
#
# The workers are `lease_worker` examples, or with --kinesis `kinesis_consumer` examples
# reading a stream of SHARDS shards on kinesalite: 40 records a second are put into it (with
# boto3, from the emulators' environment) for the first half of the warmup, then none, so the
# measure sees consumers whose shards went idle (their load figures decaying) as well as
# consumers at rest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}
kinesis=false
if [ "${1:-}" = --kinesis ]; then kinesis=true; shift; fi
# A first argument naming the protocol (as earlier versions took) is accepted: sessions is
# the only one.
case "${1:-}" in
  sessions) shift ;;
  leases) echo "the lease protocol was removed: sessions is the only protocol" >&2; exit 2 ;;
esac
procs=${1:-2}
shards=${2:-4}
warmup=${3:-30}
measure=${4:-180}
port=${DYNALITE_PORT:-4567}
proxy_port=${COUNT_PROXY_PORT:-4581}
export AWS_REGION=${AWS_REGION:-us-east-1} AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}

if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  scripts/emulators.sh start
fi
kinesis_port=${KINESALITE_PORT:-4569}
if $kinesis; then
  cargo build -q --features kinesis --example kinesis_consumer
else
  cargo build -q --example lease_worker
fi
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
python3 scripts/count_requests.py "$proxy_port" "127.0.0.1:$port" "$work/report.json" &
proxy=$!
pids+=("$proxy")
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$proxy_port") 2>/dev/null && break
  sleep 0.1
done
table="requests-at-rest-$$"
stream="requests-at-rest-$$"
workers=()
for i in $(seq "$procs"); do
  if $kinesis; then
    create=()
    if [ "$i" = 1 ]; then create=(--create-shards "$shards"); fi
    RUST_LOG=${RUST_LOG:-warn} "$target"/debug/examples/kinesis_consumer --worker-id "w$i" \
      --stream "$stream" --table "$table" "${create[@]}" \
      --kinesis-endpoint "http://127.0.0.1:$kinesis_port" \
      --dynamodb-endpoint "http://127.0.0.1:$proxy_port" >"$work/w$i.out" 2>"$work/w$i.err" &
  else
    RUST_LOG=${RUST_LOG:-warn} "$target"/debug/examples/lease_worker --id "w$i" --table "$table" \
      --endpoint "http://127.0.0.1:$proxy_port" --shards "$shards" \
      2>"$work/w$i.err" &
  fi
  workers+=($!)
  pids+=($!)
  # The first one creates the stream and the table.
  if [ "$i" = 1 ]; then sleep 3; fi
done
if $kinesis; then
  .emulators/venv/bin/python - "http://127.0.0.1:$kinesis_port" "$stream" $(( warmup / 2 )) <<'PY'
import sys, time, boto3
endpoint, stream, secs = sys.argv[1], sys.argv[2], int(sys.argv[3])
kinesis = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
end, n = time.time() + secs, 0
while time.time() < end:
    start = time.time()
    kinesis.put_records(StreamName=stream, Records=[
        {"Data": b"x" * 100, "PartitionKey": f"key-{n + i}"} for i in range(40)])
    n += 40
    time.sleep(max(0.0, 1 - (time.time() - start)))
print(f"put {n} records in {secs} s", file=sys.stderr)
PY
  sleep $(( warmup - warmup / 2 ))
else
  sleep "$warmup"
fi
before=$(cat "$work/report.json")
sleep "$measure"
after=$(cat "$work/report.json")
for pid in "${workers[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${workers[@]}"; do wait "$pid" || true; done
python3 - "$before" "$after" "$measure" "$procs" "$shards" <<'PY'
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
minutes = float(sys.argv[3]) / 60
ops = sorted(set(before["counts"]) | set(after["counts"]))
total = 0
print(f"{sys.argv[4]} workers x {sys.argv[5]} shards, at rest for {sys.argv[3]} s:")
for op in ops:
    n = after["counts"].get(op, 0) - before["counts"].get(op, 0)
    total += n
    if n:
        print(f"  {op:<12} {n / minutes:7.1f} per minute")
print(f"  {'total':<12} {total / minutes:7.1f} per minute")
PY
