#!/usr/bin/env bash
# Draws docs/hot-shard-load.png: per-worker load over time in the simulator's hot-shard scenario
# (20 workers x 1,000 leases of like loads, one lease turning 20 times hotter 300 s into the
# rest), balance by load against the KCL 3.x-style policy. Installs matplotlib in .venv-plot
# (from PyPI) the first time.
#
#   scripts/plot_load.sh [SEED] [OUT.png]
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}
seed=${1:-1}
out=${2:-docs/hot-shard-load.png}
trace=$(mktemp --suffix=.csv)
trap 'rm -f "$trace"' EXIT

cargo build --quiet -p shardlease-sim
rm -f "$trace"
"$target"/debug/simulate --scenario hot-shard --workers 20 --leases 1000 \
  --policy load --seed "$seed" --rest 900 --load-trace "$trace" >/dev/null
"$target"/debug/simulate --scenario hot-shard --workers 20 --leases 1000 \
  --policy kcl3 --seed "$seed" --rest 900 --load-trace "$trace" >/dev/null

if [ ! -x .venv-plot/bin/python ]; then
  python3 -m venv .venv-plot
  .venv-plot/bin/pip install --quiet matplotlib
fi
.venv-plot/bin/python scripts/plot_load.py "$trace" "$out" --scenario hot-shard \
  --title "hot-shard, 20 workers x 1,000 leases of like loads, seed $seed: one turns 20x hotter 300 s into the rest"
