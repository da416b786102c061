#!/usr/bin/env python3
"""Draws per-worker load over time from a simulator load trace.

The trace is what `simulate --load-trace FILE` writes: one row per worker and simulated second,
`scenario,policy,seed,t_s,worker,share`, where share is the worker's held load over its fair
share (1: exactly its share). One panel per policy found in the trace, side by side, every
worker a line; the dashed lines are the 10 % tolerance around the fair share.

    python3 scripts/plot_load.py TRACE.csv OUT.png [--scenario hot-shard] [--title TEXT]

Needs matplotlib (`scripts/plot_load.sh` installs it in a virtual environment).
"""

import argparse
import csv
import sys
from collections import defaultdict


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="the CSV written by simulate --load-trace")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--scenario", help="only rows of this scenario")
    parser.add_argument("--title", default=None, help="the figure's title")
    args = parser.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_load.py: matplotlib is missing; run scripts/plot_load.sh, or pip install matplotlib")

    series = defaultdict(lambda: defaultdict(list))  # policy -> worker -> [(t, share)]
    try:
        with open(args.trace, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        sys.exit(f"plot_load.py: cannot read {args.trace}: {err}")
    expected = {"scenario", "policy", "seed", "t_s", "worker", "share"}
    if rows and not expected <= set(rows[0]):
        sys.exit(f"plot_load.py: {args.trace} is not a load trace (columns {sorted(expected)} expected)")
    for row in rows:
        if args.scenario and row["scenario"] != args.scenario:
            continue
        series[row["policy"]][int(row["worker"])].append((float(row["t_s"]), float(row["share"])))
    if not series:
        sys.exit(f"plot_load.py: no rows{' of scenario ' + args.scenario if args.scenario else ''} in {args.trace}")

    policies = sorted(series)
    top = max(s for workers in series.values() for points in workers.values() for _, s in points)
    fig, axes = plt.subplots(1, len(policies), figsize=(6 * len(policies), 4.5), sharey=True, squeeze=False)
    for ax, policy in zip(axes[0], policies):
        for worker, points in sorted(series[policy].items()):
            points.sort()
            ax.plot([t for t, _ in points], [s for _, s in points], linewidth=0.8)
        for level in (0.9, 1.0, 1.1):
            ax.axhline(level, color="black", linewidth=0.6, linestyle="--" if level != 1.0 else "-")
        ax.set_title(policy)
        ax.set_xlabel("simulated seconds since the start")
        ax.set_ylim(0, max(2.0, top * 1.05))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held load / fair share (one line per worker)")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot_load.py: wrote {args.out} ({len(policies)} policies)")


if __name__ == "__main__":
    main()
