#!/usr/bin/env bash
# Runs every simulator scenario for BENCHMARKS.md, ours (the defaults: sessions) and the KCL 2.x
# baseline (a model of KCL's own lease coordination) side by side.
# Usage: scripts/simulate_all.sh [WORKERS] [LEASES] [REST_SECS] [extra simulate flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}
workers=${1:-10}
leases=${2:-1000}
rest=${3:-3600}
shift $(( $# < 3 ? $# : 3 ))
cargo build --release -p shardlease-sim
for scenario in cold-start join crash leave rolling-restart shards pause cut-off autoscale; do
    n=$workers
    # The autoscaling wave goes from 4 workers to the peak and back.
    if [ "$scenario" = autoscale ]; then n=$(( workers < 64 ? 64 : workers )); fi
    echo "\$ cargo run --release -p shardlease-sim -- --scenario $scenario --workers $n --leases $leases --rest $rest --step-limit 3600 $*"
    "$target"/release/simulate --scenario "$scenario" --workers "$n" --leases "$leases" --rest "$rest" --step-limit 3600 "$@"
done
