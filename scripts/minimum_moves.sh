#!/usr/bin/env bash
# The fewest moves that balance the simulator's start (the table balanced by count) by load,
# for each seed given: `simulate --dump-start` writes the start, `scripts/minimum_moves.py`
# solves it as an integer program (SciPy's HiGHS) within a time limit and prints the best
# assignment found and the proven lower bound, one JSON object per seed. Installs SciPy in
# .venv-plot (from PyPI) the first time.
#
#   scripts/minimum_moves.sh [--scenario NAME] [--workers N] [--leases N] [--tolerance T]
#                            [--time-limit SECS] SEED...
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}
scenario=skew workers=20 leases=1000 time_limit=120 tolerance=()
while [ $# -gt 0 ]; do
  case $1 in
    --scenario) scenario=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --leases) leases=$2; shift 2 ;;
    --tolerance) tolerance=(--tolerance "$2"); shift 2 ;;
    --time-limit) time_limit=$2; shift 2 ;;
    -*) echo "minimum_moves.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "minimum_moves.sh: give at least one seed" >&2
  exit 2
fi
start=$(mktemp --suffix=.json)
trap 'rm -f "$start"' EXIT

cargo build --quiet -p shardlease-sim
if [ ! -x .venv-plot/bin/python ] || ! .venv-plot/bin/python -c 'import scipy' 2>/dev/null; then
  [ -x .venv-plot/bin/python ] || python3 -m venv .venv-plot
  .venv-plot/bin/pip install --quiet scipy
fi
for seed in "$@"; do
  "$target"/debug/simulate --scenario "$scenario" --workers "$workers" \
    --leases "$leases" --policy load --seed "$seed" --rest 0 --dump-start "$start" >/dev/null
  printf '{"seed": %s, "solution": ' "$seed"
  .venv-plot/bin/python scripts/minimum_moves.py "$start" --time-limit "$time_limit" \
    "${tolerance[@]}" | tr -d '\n'
  echo '}'
done
