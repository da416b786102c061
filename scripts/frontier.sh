#!/usr/bin/env bash
# The lease/cost frontier in the simulator: for each lease duration, each latency model and each
# seed, a crash (at an instant drawn within one lease after balance, so seeds sample the phase of
# the victims' beats), a join, a graceful leave and an hour at rest; the KCL 2.x model at its own
# 10 s beside them. Every run's JSON line goes to OUT (default target/frontier-W-L.jsonl) and
# scripts/frontier.py prints the table BENCHMARKS.md shows.
#
#   scripts/frontier.sh [--workers N] [--leases N] [--seeds N] [--leases-s "1.5 2 3 5 6 10"]
#                       [--scenarios "crash join leave rest"] [--no-kcl] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
# Where cargo builds: $CARGO_TARGET_DIR when set (relative to the repository root), else target/.
target=${CARGO_TARGET_DIR:-target}
workers=10 leases=1000 seeds=5 durations="1.5 2 3 5 6 10" scenarios="crash join leave rest" kcl=true
out=
while [ $# -gt 0 ]; do
  case $1 in
    --workers) workers=$2; shift 2 ;;
    --leases) leases=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --leases-s) durations=$2; shift 2 ;;
    --scenarios) scenarios=$2; shift 2 ;;
    --no-kcl) kcl=false; shift ;;
    --out) out=$2; shift 2 ;;
    *) echo "frontier.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
out=${out:-$target/frontier-$workers-$leases.jsonl}
mkdir -p "$(dirname "$out")"
: >"$out"

cargo build --quiet --release -p shardlease-sim
sim() { "$target"/release/simulate --workers "$workers" --leases "$leases" --json "$@" >>"$out"; }
# One scenario: a crash comes within one lease after balance; a join and a leave need no hour
# at rest after them.
run() {
  local scenario=$1 lease=$2
  shift 2
  case $scenario in
    crash) sim --scenario crash --crash-within "$lease" "$@" ;;
    join | leave) sim --scenario "$scenario" --rest 0 "$@" ;;
    rest) sim --scenario rest "$@" ;;
    *) echo "frontier.sh: unknown scenario $scenario (crash, join, leave, rest)" >&2; exit 2 ;;
  esac
}
for model in lognormal heavy-tail; do
  for seed in $(seq 1 "$seeds"); do
    for d in $durations; do
      for scenario in $scenarios; do
        run "$scenario" "$d" --policy ours --lease-duration "$d" --latency-model "$model" --seed "$seed"
      done
    done
    if $kcl; then
      for scenario in $scenarios; do
        run "$scenario" 10 --policy kcl --latency-model "$model" --seed "$seed"
      done
    fi
  done
  echo "frontier.sh: $model done" >&2
done
python3 scripts/frontier.py "$out"
