#!/usr/bin/env bash
# The `shardlease` command line on a live fleet, in under a minute once built: starts dynalite,
# two lease_worker processes on one table, then shows `status`, `drain` (worker b leaves and
# exits 0, a takes its leases), `checkpoint set` / `checkpoint reset` on a held lease (--force:
# its owner hands it over gracefully first) and `import-kcl` from a KCL-format table.
#
#   scripts/demo_cli.sh          # dynalite on 127.0.0.1:4577 (DEMO_DYNALITE_PORT moves it)
#
# Everything it started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}

port=${DEMO_DYNALITE_PORT:-4577}
endpoint="http://127.0.0.1:$port"
table="demo-cli-$$"
kcl_table="demo-kcl-$$"
imported="demo-imported-$$"
work=$(mktemp -d)
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

scripts/emulators.sh install
# The same packages and features as the test command's build, so that it reuses it (the
# command line is the package shardlease-cli, the workers an example of the library).
cargo build --quiet --all-features -p shardlease -p shardlease-cli \
  --bin shardlease --example lease_worker
started=$(date +%s)

export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_REGION=us-east-1
unset AWS_ENDPOINT_URL AWS_PROFILE
.emulators/node/node_modules/.bin/dynalite --host 127.0.0.1 --port "$port" >"$work/dynalite.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

sl() { "$target"/debug/shardlease --endpoint "$endpoint" "$@"; }

# Counts the leases each worker holds, from `status --json`: "a=3 b=3".
held() {
  sl --table "$table" --json status | python3 -c '
import collections, json, sys
doc = json.load(sys.stdin)
held = collections.Counter(l["owner"] for l in doc["leases"] if l["owner"])
print(" ".join(f"{w}={n}" for w, n in sorted(held.items())))'
}

step "two workers, a and b, on table $table with 6 shards"
sl --table "$table" create-table
for id in a b; do
  RUST_LOG=warn "$target"/debug/examples/lease_worker --id "$id" --endpoint "$endpoint" \
    --table "$table" --shards 6 --lease-secs 6 >"$work/$id.log" 2>&1 &
  pids+=($!)
  eval "pid_$id=$!"
done
for _ in $(seq 300); do
  [ "$(held)" = "a=3 b=3" ] && break
  sleep 0.1
done
[ "$(held)" = "a=3 b=3" ] || { echo "demo_cli: the workers did not share the leases: $(held)" >&2; exit 1; }

step "shardlease status"
sl --table "$table" status

step "shardlease drain b   (b hands its leases over and leaves; its process exits)"
sl --table "$table" drain b --timeout 60s
# shellcheck disable=SC2154
wait "$pid_b"
echo "worker b exited with status 0"
[ "$(held)" = "a=6" ] || { echo "demo_cli: a does not hold every lease: $(held)" >&2; exit 1; }
sl --table "$table" status | head -4

step "shardlease checkpoint set shard-0000 49590338271490256608559692538361571095921575989136588898"
refused=$(sl --table "$table" checkpoint set shard-0000 4959 2>&1 || true)
echo "without --force: $refused"
sl --table "$table" checkpoint set shard-0000 \
  49590338271490256608559692538361571095921575989136588898 --force
step "shardlease checkpoint reset shard-0000 --force"
sl --table "$table" checkpoint reset shard-0000 --force
sl --table "$table" status | grep -E "^LEASE|^shard-0000"

step "shardlease import-kcl --from $kcl_table --to $imported"
# A lease table as KCL 2.x writes it, made with boto3 (moto's environment has it).
.emulators/venv/bin/python - "$endpoint" "$kcl_table" <<'EOF'
import sys, boto3
endpoint, name = sys.argv[1], sys.argv[2]
ddb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
ddb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                 AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
                 KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}])
ddb.get_waiter("table_exists").wait(TableName=name)
def lease(key, checkpoint, parents=None, owner="kcl-worker-1"):
    item = {"leaseKey": {"S": key}, "leaseOwner": {"S": owner}, "leaseCounter": {"N": "41"},
            "checkpoint": {"S": checkpoint}, "checkpointSubSequenceNumber": {"N": "0"},
            "ownerSwitchesSinceCheckpoint": {"N": "0"}}
    if parents:
        item["parentShardId"] = {"SS": parents}
    ddb.put_item(TableName=name, Item=item)
lease("shardId-000000000000", "SHARD_END")
lease("shardId-000000000001", "49590338271490256608559692538361571095921575989136588898",
      parents=["shardId-000000000000"])
lease("shardId-000000000002", "TRIM_HORIZON", parents=["shardId-000000000000"])
EOF
sl import-kcl --from "$kcl_table" --to "$imported"
sl import-kcl --from "$kcl_table" --to "$imported" --apply
sl --table "$imported" status | grep -E "^LEASE|^shardId"

step "SIGTERM to a: it checkpoints, releases and exits 0"
# shellcheck disable=SC2154
kill -TERM "$pid_a"
wait "$pid_a"
echo "worker a exited with status 0"
echo
echo "demo done in $(($(date +%s) - started)) s after the build"
