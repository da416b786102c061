#!/usr/bin/env python3
"""The fewest moves that balance a fleet by load, solved as an integer program.

Input: the JSON that `simulate --dump-start FILE` writes for the scenarios that start from the
table balanced by count (each lease's load and first holder, each worker's capacity, and the
simulator's tolerance). Output: one JSON object with the best assignment found within the time
limit (`best`: its moves, an upper bound on the minimum) and the solver's proven lower bound
(`lower_bound`); `optimal` when the two meet. On the simulator's starts of 20 workers x 1,000
leases (`skew`, seeds 1-10) it proves the minimum in about half a minute each.

The model is the one the simulator's own bound (`minimum_moves_by_load`) uses:
- a lease heavier than (1 + tolerance) x the largest share of the whole fleet is alone on a
  worker (no worker holding it could be inside its band);
- every other worker ends within the tolerance of its share of the load left, on both sides
  (with unequal capacities, the heavy leases' workers are taken as the largest, as in the
  simulator's bound);
- a move is a lease that ends on another worker than its first holder.

Needs SciPy (`pip install scipy`; its HiGHS solver). Not part of the test suite.

Usage: scripts/minimum_moves.py START.json [--tolerance T] [--time-limit SECS]
"""

import argparse
import json
import sys

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix


def solve(start, tolerance, time_limit):
    loads = np.array(start["loads"], dtype=float)
    holder = start["holder"]
    capacities = np.array(start["capacities"], dtype=float)
    n_leases, n_workers = len(loads), len(capacities)
    total = loads.sum()
    widest = (1 + tolerance) * total / capacities.sum() * capacities.max()
    heavy = [lease for lease in range(n_leases) if loads[lease] > widest]
    light = [lease for lease in range(n_leases) if loads[lease] <= widest]
    largest = sorted(capacities, reverse=True)[: len(heavy)]
    per_weight = (total - loads[heavy].sum()) / (capacities.sum() - sum(largest))

    # Variables: x[lease, worker] (lease ends on worker), then alone[worker] (it holds a heavy
    # lease, and nothing else).
    x = lambda lease, worker: lease * n_workers + worker  # noqa: E731
    alone = lambda worker: n_leases * n_workers + worker  # noqa: E731
    size = n_leases * n_workers + n_workers
    cost = np.zeros(size)
    for lease in range(n_leases):
        for worker in range(n_workers):
            cost[x(lease, worker)] = 0.0 if holder[lease] == worker else 1.0

    # The model is written tight, so that the solver's proven bound means something: "nothing
    # else beside a heavy lease" is one row per light lease and worker (a single row with a
    # big coefficient lets a fraction of a heavy lease clear a worker in the relaxation), the
    # band's two rows vanish on a worker that is alone, and each worker keeps at most as many
    # of its first leases as fit under the top of its band (lightest first).
    first = [[] for _ in range(n_workers)]
    for lease in light:
        first[holder[lease]].append(lease)
    rows = n_leases + n_workers * (4 + len(light))
    a = lil_matrix((rows, size))
    low, high = [], []
    row = 0
    for lease in range(n_leases):  # every lease ends on one worker
        for worker in range(n_workers):
            a[row, x(lease, worker)] = 1
        low.append(1)
        high.append(1)
        row += 1
    for worker in range(n_workers):
        share = per_weight * capacities[worker]
        top, bottom = (1 + tolerance) * share, (1 - tolerance) * share
        for lease in heavy:  # alone[w] = the heavy leases it holds (at most 1)
            a[row, x(lease, worker)] = 1
        a[row, alone(worker)] = -1
        low.append(0)
        high.append(0)
        row += 1
        for lease in light:  # a worker with a heavy lease holds nothing else
            a[row, x(lease, worker)] = 1
            a[row, alone(worker)] = 1
            low.append(-np.inf)
            high.append(1)
            row += 1
        for lease in light:  # at most the top of its band, nothing when alone
            a[row, x(lease, worker)] = loads[lease]
        a[row, alone(worker)] = top
        low.append(-np.inf)
        high.append(top)
        row += 1
        for lease in light:  # at least the bottom of its band, unless alone
            a[row, x(lease, worker)] = loads[lease]
        a[row, alone(worker)] = bottom
        low.append(bottom)
        high.append(np.inf)
        row += 1
        # It keeps at most as many of its first leases as fit under the top of its band.
        kept, fit = 0.0, 0
        for load in sorted(loads[first[worker]]):
            if kept + load > top:
                break
            kept += load
            fit += 1
        for lease in first[worker]:
            a[row, x(lease, worker)] = 1
        a[row, alone(worker)] = fit
        low.append(-np.inf)
        high.append(fit)
        row += 1
    result = milp(
        cost,
        constraints=LinearConstraint(a.tocsr(), low, high),
        bounds=Bounds(0, 1),
        integrality=np.ones(size),
        options={"time_limit": time_limit, "disp": False},
    )
    best = None if result.x is None else int(round(result.fun))
    bound = getattr(result, "mip_dual_bound", None)
    lower = None if bound is None or not np.isfinite(bound) else int(np.ceil(bound - 1e-6))
    return {
        "leases": n_leases,
        "workers": n_workers,
        "tolerance": tolerance,
        "heavy": len(heavy),
        "best": best,
        "lower_bound": lower,
        "optimal": result.status == 0,
        "time_limit_s": time_limit,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("start", help="the JSON of simulate --dump-start")
    parser.add_argument("--tolerance", type=float, help="default: the file's (the simulator's)")
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds (default 120)")
    args = parser.parse_args()
    try:
        with open(args.start) as f:
            start = json.load(f)
        for field in ("loads", "holder", "capacities"):
            if field not in start:
                raise ValueError(f"no {field!r}: not a file of simulate --dump-start")
    except (OSError, ValueError) as err:
        print(f"minimum_moves: {args.start}: {err}", file=sys.stderr)
        return 2
    tolerance = args.tolerance if args.tolerance is not None else start.get("tolerance", 0.10)
    if not 0 < tolerance < 1:
        print(f"minimum_moves: --tolerance must be between 0 and 1, not {tolerance}", file=sys.stderr)
        return 2
    print(json.dumps(solve(start, tolerance, args.time_limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
