#!/usr/bin/env python3
"""Prints the lease/cost frontier table from the JSON lines scripts/frontier.sh collects.

One row per policy, lease duration and latency model, over the seeds run:

- crash failover: each seed's p50 and max of crash-to-re-held (the `held` failover) over the
  crashed workers' leases; shown as the median of the seeds' p50s (their range) and the worst max;
- join and leave: the step's time to balance (a new worker holding its share; the leaver's
  leases held by others), median and worst over the seeds;
- at rest: writes and read capacity units per lease-hour of the hour at rest, mean over seeds;
- healthy losses: leases lost by workers no fault was injected on, summed over the seeds' hours
  at rest and the hours after each crash (the crashed workers' own leases excluded).

    python3 scripts/frontier.py FRONTIER.jsonl
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict


def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the JSON lines written by scripts/frontier.sh")
    args = parser.parse_args()
    groups = defaultdict(lambda: defaultdict(list))
    with open(args.runs) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                run = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"frontier.py: {args.runs}:{n}: not a JSON line ({e})")
            key = (run["policy"], run["lease_duration_s"], run["latency_model"])
            groups[key][run["scenario"]].append(run)
    if not groups:
        sys.exit(f"frontier.py: {args.runs} holds no runs")

    print(
        "| policy | lease s | latency | seeds | crash failover p50 s (range) | crash max s "
        "| join s median / max | leave s median / max | writes / lease-h | RCU / lease-h "
        "| healthy leases lost |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    order = sorted(groups, key=lambda k: (k[0] != "shardlease", k[2], k[1]))
    for key in order:
        policy, lease, model = key
        by = groups[key]
        crash = [r["steps"][0]["failover"]["held"] for r in by.get("crash", [])]
        p50s = [c["p50"] for c in crash if c["p50"] is not None]
        maxes = [c["max"] for c in crash if c["max"] is not None]
        missing = sum(c["missing"] for c in crash)
        join = [r["steps"][0]["balanced_s"] for r in by.get("join", [])]
        leave = [r["steps"][0]["balanced_s"] for r in by.get("leave", [])]
        rest = by.get("rest", [])
        writes = [r["per_lease_hour"]["writes"] for r in rest]
        rcu = [r["per_lease_hour"]["rcu"] for r in rest]
        lost = sum((r["healthy_leases_lost"] or 0) for r in rest + by.get("crash", []))
        seeds = len({r["seed"] for s in by.values() for r in s})
        crash_cell = "-"
        if p50s:
            crash_cell = f"{fmt(statistics.median(p50s))} ({fmt(min(p50s))}-{fmt(max(p50s))})"
            if missing:
                crash_cell += f", {missing} never re-held"
        print(
            f"| {policy} | {lease:g} | {model} | {seeds} | {crash_cell} "
            f"| {fmt(max(maxes)) if maxes else '-'} "
            f"| {fmt(statistics.median(join)) if join else '-'} / {fmt(max(join)) if join else '-'} "
            f"| {fmt(statistics.median(leave)) if leave else '-'} / {fmt(max(leave)) if leave else '-'} "
            f"| {fmt(statistics.mean(writes), 1) if writes else '-'} "
            f"| {fmt(statistics.mean(rcu), 1) if rcu else '-'} "
            f"| {lost} |"
        )


if __name__ == "__main__":
    main()
