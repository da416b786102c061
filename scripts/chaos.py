#!/usr/bin/env python3
"""Chaos with real processes: `lease_worker` processes on dynalite (or on redis-server with
--store redis), each behind its own TCP fault proxy (scripts/fault_proxy.py), killed, frozen, partitioned, slowed and restarted on a
seeded schedule; then an audit of their events logs (JSON lines, wall-clock nanoseconds).

Run it through scripts/chaos.sh, which installs and starts the emulators and builds the
example and the shardlease command line (which reads the table at the end).

Every worker checkpoints its leases every --checkpoint-secs (lease_worker --checkpoint-secs):
a counter that resumes from the lease's checkpoint and only grows, logged when acknowledged.

Schedules (--schedule):
  mixed       random faults (kill -9 and restart, SIGTERM and restart, SIGSTOP/SIGCONT,
              partition, hold, never-answer, delay) over the run, then a quiet end to heal
  half-open   one worker's connections hold for 3 lease durations (accepted, never answered)
  slow        every request of one worker is delayed by 0.4 to 1.2 lease durations for 6
              lease durations
  late        spells of 1 to 3 lease durations in which one worker's requests land late: its
              proxy in "late MS" mode (MS from 3 to 8 s: past the store's 2 s attempt timeout,
              mostly past the worker's 5 s store deadline), armed again every half lease, so
              that each connection open then delivers its next request MS late, after the
              worker's retry and later writes on new connections; among the spells, SIGTERM or
              kill -9 and restart of a worker, so that leases move while late writes land
  steal       every worker runs KCL 2.x's policy (lease_worker --balance kcl: one steal per
              round from the most loaded worker); half the workers start, the others join one
              every 2 lease durations from the warm-up on, and random mixed faults (restarts
              are joins too) run among the started ones

The audit prints one line per figure and a JSON summary (--json FILE), and fails (exit 1) on
any overlap (two processes processing one lease at one wall-clock instant), any checkpoint
regression, a worker that exited by itself or did not leave on SIGTERM, a fleet not balanced
at the end (max - min <= 1, every lease held), and the schedule's own target: half-open, the
worker has its share back within two taker intervals of the heal; slow, its leases are
processed >= 90 % of the time.

A checkpoint regression is, per lease: a process that started it ("acquired") from a
checkpoint smaller than one acknowledged ("checkpointed") to any process before that start; or
a checkpoint in the table at the end (read with `shardlease --json status` once every worker
has left) smaller than the largest acknowledged. The summary also counts the proxies' late
deliveries ("late delivered" lines of their logs, with the operations held and the answers
they got) and the steals: takes the workers logged as forced ("lease taken" with forced=true,
from a live owner) from another worker.

Where an overlap is judged: a process is processing a lease from its "acquired" event to the
first "stopped", "lost", "handed_off" or "released" event of that lease, or until it was killed
with SIGKILL; a process frozen by SIGSTOP processes nothing while frozen, so the frozen time is
cut out of its intervals; and a thawed process whose first act for a lease is to report it
"lost" (its fence: the lease was taken while it was frozen) did not process it after the thaw,
if it did so within 100 ms of SIGCONT (the time to be scheduled again; the largest such delay is
reported as thaw_fence_max_secs, and a slower fence counts as processing).
"""

import argparse
import collections
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time

STOPS = ("stopped", "lost", "handed_off", "released")


class Proc:
    """One worker id: its proxy, and the lease_worker processes run under that id in turn."""

    def __init__(self, args, index, work):
        self.id = f"w{index}"
        self.args = args
        self.work = work
        self.port = args.proxy_base + index
        self.control = os.path.join(work, f"{self.id}.mode")
        self.runs = []  # (run number, Popen, log path)
        self.events = []  # (wall ns, what) for the audit: kill, term, stop, cont, mode
        self.frozen_since = None
        self.frozen = []  # (run, from ns, to ns)
        self.proxy = None

    def set_mode(self, mode):
        tmp = self.control + ".tmp"
        with open(tmp, "w") as f:
            f.write(mode + "\n")
        os.replace(tmp, self.control)
        self.events.append((time.time_ns(), f"mode {mode}"))

    def start_proxy(self):
        self.set_mode("pass")
        self.proxy = subprocess.Popen(
            [sys.executable, os.path.join(self.args.scripts, "fault_proxy.py"),
             "--listen", str(self.port), "--upstream", self.args.upstream,
             "--control", self.control],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, f"{self.id}.proxy.log"), "w"))

    def start(self):
        run = len(self.runs)
        log = os.path.join(self.work, f"{self.id}.{run}.jsonl")
        out = open(self.output(run), "w")
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "shardlease=info"))
        balance = "kcl" if self.args.schedule == "steal" else "count"
        p = subprocess.Popen(
            [self.args.binary, "--id", self.id, "--table", self.args.table,
             *self.store_args(), "--shards", str(self.args.shards),
             "--lease-secs", str(self.args.lease_secs), "--balance", balance,
             "--checkpoint-secs", str(self.args.checkpoint_secs), "--events-log", log],
            stdout=out, stderr=subprocess.STDOUT, env=env)
        self.runs.append((run, p, log))

    def output(self, run):
        """What run `run` printed (its stdout and the library's log)."""
        return os.path.join(self.work, f"{self.id}.{run}.log")

    def store_args(self):
        """The lease_worker options that point it at its proxy, for the store under test."""
        if self.args.store == "redis":
            return ["--redis", f"redis://127.0.0.1:{self.port}"]
        return ["--endpoint", f"http://127.0.0.1:{self.port}"]

    @property
    def current(self):
        return self.runs[-1][1] if self.runs else None

    def alive(self):
        return self.current is not None and self.current.poll() is None

    def signal(self, sig, name):
        if self.alive():
            self.events.append((time.time_ns(), name))
            self.current.send_signal(sig)
            if sig == signal.SIGSTOP:
                self.frozen_since = time.time_ns()
            if sig == signal.SIGCONT and self.frozen_since is not None:
                self.frozen.append((len(self.runs) - 1, self.frozen_since, time.time_ns()))
                self.frozen_since = None


def held_counts(procs):
    """Leases each live process holds now, from its current events log."""
    counts = {}
    for p in procs:
        if not p.alive() or p.frozen_since is not None:
            continue
        held = set()
        for e in read_log(p.runs[-1][2]):
            if e["event"] == "acquired":
                held.add(e["lease"])
            elif e["event"] in STOPS:
                held.discard(e["lease"])
        counts[p.id] = len(held)
    return counts


def read_log(path):
    try:
        with open(path) as f:
            out = []
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut by a kill
            return out
    except FileNotFoundError:
        return []


def wait_port(port, limit=20.0):
    """Waits until something accepts connections on 127.0.0.1:port."""
    end = time.time() + limit
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"chaos: nothing listens on 127.0.0.1:{port} after {limit} s")


def balanced(counts, shards):
    return bool(counts) and sum(counts.values()) == shards and \
        max(counts.values()) - min(counts.values()) <= 1


# Fault kinds and their spans in lease durations, for the random faults of mixed and steal.
MIXED_SPANS = {
    "kill": (0.2, 1.0),
    "term": (0.2, 1.0),
    "freeze": (0.3, 2.5),
    "partition": (0.5, 2.5),
    "hold": (0.5, 3.0),
    "never-answer": (0.2, 1.5),
    "slow": (1.0, 4.0),
}
# How late a late spell delivers (ms): past the store's attempt timeout (2 s), so the worker
# has given up on the attempt and retried, and mostly past its store deadline (5 s).
LATE_MS = (3000, 8000)


def plan(args, rng):
    """The schedule: (offset s, worker index, action, duration s, argument)."""
    lease = args.lease_secs
    if args.schedule == "half-open":
        return [(args.warmup, 0, "hold", 3 * lease, None)]
    if args.schedule == "slow":
        return [(args.warmup, 0, "slow", 6 * lease, None)]
    end = args.seconds - args.heal
    if args.schedule == "steal":
        # Half the fleet starts; the others join one every 2 lease durations.
        steps = [(args.warmup + k * 2 * lease, i, "join", 0.0, None)
                 for k, i in enumerate(range(initial_workers(args), args.workers))]
        joined = {i: at for (at, i, _, _, _) in steps}
        steps += random_faults(args, rng, end, ["kill", "term", "freeze", "partition", "hold",
                                                "never-answer", "slow"], (1.0, 3.0), joined)
        return sorted(steps, key=lambda s: s[0])
    if args.schedule == "late":
        return random_faults(args, rng, end, ["late", "late", "late", "term", "kill"],
                             (0.25, 1.0), {})
    return random_faults(args, rng, end, list(MIXED_SPANS), (0.5, 2.0), {})


def initial_workers(args):
    """How many workers start at once: all, but half (at least 1) for the steal schedule."""
    return max(1, args.workers // 2) if args.schedule == "steal" else args.workers


def random_faults(args, rng, end, kinds, gaps, joined):
    """Faults of `kinds` at random workers, gaps of `gaps` lease durations apart, from the
    warm-up to `end`; a worker rests a lease duration after each fault, and one that joins
    later (`joined`: index -> offset) is left alone until a lease duration after it joined."""
    lease = args.lease_secs
    steps = []
    t = args.warmup
    busy = {i: at + lease for i, at in joined.items()}
    while True:
        t += rng.uniform(*gaps) * lease
        if t >= end:
            break
        i = rng.randrange(args.workers)
        if busy.get(i, 0) > t:
            continue
        kind = rng.choice(kinds)
        # Every kind's span is drawn, used or not, as the mixed schedule always did: a seed
        # gives the faults it always gave.
        spans = {k: rng.uniform(a, b) * lease for k, (a, b) in MIXED_SPANS.items()}
        arg = None
        if kind == "late":
            span = rng.uniform(1.0, 3.0) * lease
            arg = int(rng.uniform(*LATE_MS))
        else:
            span = spans[kind]
        span = min(span, max(0.5, end - t))
        steps.append((t, i, kind, span, arg))
        busy[i] = t + span + lease
    return steps


def run_schedule(args, procs, steps, t0, rng):
    """Applies the steps at their times; returns when the run's time is over."""
    timeline = []  # (at, proc, action, arg)
    for (at, i, kind, span, arg) in steps:
        p = procs[i]
        if kind == "join":
            timeline.append((at, p, "start", None))
        elif kind == "late":
            # Armed again every half lease: the connections opened since hold a request too.
            s = 0.0
            while s < span:
                timeline.append((at + s, p, "mode", f"late {arg}"))
                s += args.lease_secs / 2
            timeline.append((at + span, p, "mode", "pass"))
        elif kind == "kill":
            timeline += [(at, p, "kill", None), (at + span, p, "start", None)]
        elif kind == "term":
            timeline += [(at, p, "term", None), (at + span, p, "start", None)]
        elif kind == "freeze":
            timeline += [(at, p, "stop", None), (at + span, p, "cont", None)]
        elif kind == "partition":
            timeline += [(at, p, "mode", "refuse"), (at + span, p, "mode", "pass")]
        elif kind in ("hold", "never-answer"):
            timeline += [(at, p, "mode", kind), (at + span, p, "mode", "pass")]
        elif kind == "slow":
            # The delay changes every lease/2 within 0.4 to 1.2 lease durations.
            s = 0.0
            while s < span:
                ms = int(rng.uniform(0.4, 1.2) * args.lease_secs * 1000)
                timeline.append((at + s, p, "mode", f"delay {ms}"))
                s += args.lease_secs / 2
            timeline.append((at + span, p, "mode", "pass"))
    timeline.sort(key=lambda x: x[0])
    for (at, p, action, arg) in timeline:
        wait = t0 + at - time.time()
        if wait > 0:
            time.sleep(wait)
        print(f"chaos: +{at:6.1f} s {p.id} {action} {arg or ''}".rstrip(), flush=True)
        if action == "kill":
            p.signal(signal.SIGKILL, "kill")
            if p.current is not None:
                p.current.wait()
        elif action == "term":
            p.signal(signal.SIGTERM, "term")
        elif action == "stop":
            p.signal(signal.SIGSTOP, "stop")
        elif action == "cont":
            p.signal(signal.SIGCONT, "cont")
        elif action == "start":
            if p.alive():
                try:
                    p.current.wait(timeout=args.lease_secs * 3 + 35)
                except subprocess.TimeoutExpired:
                    print(f"chaos: {p.id} did not exit after SIGTERM; killing it", flush=True)
                    p.signal(signal.SIGKILL, "kill")
                    p.current.wait()
                    p.events.append((time.time_ns(), "term-hung"))
            p.start()
        elif action == "mode":
            p.set_mode(arg)


# Intervals that ended with the process's own fence ("lost"): (proc id, run, end ns).
FENCED = set()
# How long a process took, after SIGCONT, to report a lease lost while it was frozen (s).
THAW_REACTIONS = []
# The most a thawed process may take to report such a lease lost, its first act after the
# thaw, before the time counts as processing: it has to be scheduled to run at all.
THAW_REACTION_LIMIT_NS = 100_000_000


def intervals(procs, end_ns):
    """Processing intervals per lease: (start, end, proc id, run)."""
    by_lease = {}
    for p in procs:
        kills = sorted(ns for ns, what in p.events if what == "kill")
        for run, popen, log in p.runs:
            events = read_log(log)
            first = events[0]["ts_unix_nanos"] if events else None
            death = next((k for k in kills if first is None or k >= first), None) \
                if popen.returncode == -signal.SIGKILL else None
            open_ = {}
            for i, e in enumerate(events):
                lease, ts = e["lease"], e["ts_unix_nanos"]
                if e["event"] == "acquired":
                    open_[lease] = ts
                elif e["event"] in STOPS and lease in open_:
                    by_lease.setdefault(lease, []).append((open_.pop(lease), ts, p.id, run))
                    # The fence: "lost", or the application's "stopped" with "lost" the next
                    # event of that lease (the two are written in either order).
                    after = next((x["event"] for x in events[i + 1:] if x["lease"] == lease), None)
                    if e["event"] == "lost" or (e["event"] == "stopped" and after == "lost"):
                        FENCED.add((p.id, run, ts))
            for lease, start in open_.items():
                stop = death if death is not None and death >= start else end_ns
                by_lease.setdefault(lease, []).append((start, stop, p.id, run))
    return by_lease


def cut_frozen(ivs, procs):
    """Removes the frozen windows of each process from its intervals, and the moment after a
    thaw in which a process reports lost a lease it held when frozen (its fence, as the first
    thing it does for that lease, within THAW_REACTION_LIMIT_NS: the time it takes to be
    scheduled again; a slower fence counts as processing)."""
    frozen = {(p.id, run): [(a, b) for (r, a, b) in p.frozen if r == run] for p in procs
              for run, _, _ in p.runs}
    out = []
    for (a, b, pid, run) in ivs:
        pieces = [(a, b)]
        thawed = None
        for (fa, fb) in frozen.get((pid, run), []):
            nxt = []
            for (x, y) in pieces:
                if fb <= x or fa >= y:
                    nxt.append((x, y))
                    continue
                if x < fa:
                    nxt.append((x, fa))
                if fb < y:
                    nxt.append((fb, y))
                    thawed = fb
            pieces = nxt
        if thawed is not None and (pid, run, b) in FENCED and pieces and pieces[-1][0] == thawed:
            reaction = b - thawed
            THAW_REACTIONS.append(reaction / 1e9)
            if reaction <= THAW_REACTION_LIMIT_NS:
                pieces.pop()
        out += [(x, y, pid, run) for (x, y) in pieces if y > x]
    return out


def audit(args, procs, t0_ns, end_ns, heal_ns):
    by_lease = intervals(procs, end_ns)
    overlaps, margins = [], []
    uncovered = 0.0
    uncovered_healthy = 0.0
    for lease, ivs in sorted(by_lease.items()):
        ivs = cut_frozen(ivs, procs)
        ivs.sort()
        for i, (a, b, pid, run) in enumerate(ivs):
            for (c, d, qid, qrun) in ivs[i + 1:]:
                if c >= b:
                    break
                if (pid, run) != (qid, qrun):
                    overlaps.append({"lease": lease, "first": f"{pid}.{run}", "second": f"{qid}.{qrun}",
                                     "seconds": (min(b, d) - c) / 1e9})
        # Gaps, and the margin between one holder's stop and the next one's start.
        cursor = t0_ns + int(args.warmup * 1e9)
        for (a, b, pid, run) in ivs:
            if a > cursor:
                gap = (a - cursor) / 1e9
                uncovered += gap
                healthy_from = max(cursor, heal_ns)
                if a > healthy_from:
                    uncovered_healthy += (a - healthy_from) / 1e9
            cursor = max(cursor, b)
        if end_ns > cursor:
            uncovered += (end_ns - cursor) / 1e9
            uncovered_healthy += (end_ns - max(cursor, heal_ns)) / 1e9
        for prev, nxt in zip(ivs, ivs[1:]):
            if (prev[2], prev[3]) != (nxt[2], nxt[3]):
                margins.append((nxt[0] - prev[1]) / 1e9)
    span = (end_ns - t0_ns) / 1e9 - args.warmup
    return by_lease, overlaps, margins, uncovered, uncovered_healthy, span


def first_acquire_after(by_lease, lease, after_ns, exclude, killed_run):
    """When `lease` was next acquired after `after_ns` by anyone but the run `killed_run` of
    process `exclude` (its own restart counts: it takes its leases back)."""
    return min((a for (a, b, pid, run) in by_lease.get(lease, [])
                if a > after_ns and (pid != exclude or run > killed_run)), default=None)


def number(checkpoint):
    """A counter checkpoint as a number; None for none, or for one that is not a number."""
    try:
        return int(checkpoint)
    except (TypeError, ValueError):
        return None


def checkpoint_regressions(procs, table):
    """Per lease, every start ("acquired") from a checkpoint smaller than the largest one
    acknowledged ("checkpointed") to any process before it, and every final checkpoint of
    the table (`table`: key -> checkpoint, None when it could not be read) smaller than the
    largest acknowledged. Returns (regressions, figures)."""
    by_lease = collections.defaultdict(list)  # lease -> (ns, "ack" | "start", value, run, tenure)
    for p in procs:
        for run, _, log in p.runs:
            for e in read_log(log):
                kind = {"checkpointed": "ack", "acquired": "start"}.get(e["event"])
                if kind:
                    by_lease[e["lease"]].append((e["ts_unix_nanos"], kind, e.get("checkpoint"),
                                                 f"{p.id}.{run}", e.get("tenure")))
    regressions = []
    figures = {"checkpoints_acknowledged": 0, "starts_after_an_acknowledged_checkpoint": 0,
               "final_checkpoints_checked": 0}
    for lease, events in sorted(by_lease.items()):
        events.sort(key=lambda x: x[0])
        best = None  # the largest acknowledged so far: (value, run, tenure, ns)
        for ns, kind, checkpoint, run, tenure in events:
            value = number(checkpoint)
            if kind == "ack":
                figures["checkpoints_acknowledged"] += 1
                if value is not None and (best is None or value > best[0]):
                    best = (value, run, tenure, ns)
            elif best is not None:
                figures["starts_after_an_acknowledged_checkpoint"] += 1
                # None: started with no checkpoint (or one not a number) after one was stored.
                if value is None or value < best[0]:
                    regressions.append({
                        "lease": lease, "what": "started from an older checkpoint",
                        "run": run, "tenure": tenure, "started_from": checkpoint,
                        "acknowledged": best[0], "acknowledged_to": best[1],
                        "acknowledged_tenure": best[2],
                        "secs_after_the_acknowledgement": round((ns - best[3]) / 1e9, 3)})
        if best is not None and table is not None:
            figures["final_checkpoints_checked"] += 1
            final = table.get(lease)
            if number(final) is None or number(final) < best[0]:
                regressions.append({
                    "lease": lease, "what": "the table's final checkpoint is older",
                    "final": final, "acknowledged": best[0], "acknowledged_to": best[1],
                    "acknowledged_tenure": best[2]})
    return regressions, figures


def read_table(args):
    """The table's checkpoints by key, read with `shardlease --json status` from the store
    itself (not through a proxy); (None, error) when that failed."""
    store = ["--redis", f"redis://{args.upstream}"] if args.store == "redis" \
        else ["--endpoint", f"http://{args.upstream}"]
    try:
        out = subprocess.run([args.cli, "--table", args.table, *store, "--json", "status"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, str(err)
    if out.returncode != 0:
        return None, out.stderr.strip() or f"exit status {out.returncode}"
    return {lease["key"]: lease["checkpoint"] for lease in json.loads(out.stdout)["leases"]}, None


def late_deliveries(procs):
    """What the proxies' "late" mode did, from their logs: requests delivered late (by
    operation), their answers, those sent again because the server closed instead of
    answering, those dropped before delivery (the connection closed) and those unanswered."""
    requests, answers = collections.Counter(), collections.Counter()
    dropped = unanswered = redelivered = 0
    for p in procs:
        try:
            with open(os.path.join(p.work, f"{p.id}.proxy.log"), errors="replace") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            if "late delivered" in line:
                requests[re.search(r"request=(\S+)", line).group(1)] += 1
            elif "late answered" in line:
                answers[line.split(" answer=", 1)[1]] += 1
            elif "late redelivered" in line:
                redelivered += 1
            elif "late dropped" in line:
                dropped += 1
            elif "late unanswered" in line:
                unanswered += 1
    return {"late_deliveries": sum(requests.values()), "late_requests": dict(requests),
            "late_answers": dict(answers.most_common(8)), "late_redelivered": redelivered,
            "late_dropped": dropped, "late_unanswered": unanswered}


# The library's "lease taken" line, colours and all (the log goes to a file with ANSI codes).
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TAKEN = re.compile(r'lease taken.*previous=Some\("([^"]*)"\).*forced=true')


def steals(procs):
    """Takes the workers logged as forced (from the live owner's session: a steal, or a
    handoff forced after its timeout) from another worker id, per thief."""
    out = collections.Counter()
    for p in procs:
        for run, _, _ in p.runs:
            try:
                with open(p.output(run), errors="replace") as f:
                    for line in f:
                        if "lease taken" not in line:
                            continue
                        taken = TAKEN.search(ANSI.sub("", line))
                        if taken and taken.group(1) != p.id:
                            out[p.id] += 1
            except FileNotFoundError:
                continue
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--binary", required=True, help="the built lease_worker example")
    ap.add_argument("--cli", required=True,
                    help="the built shardlease command line (reads the table at the end)")
    ap.add_argument("--upstream", required=True,
                    help="the store's HOST:PORT (loopback): dynalite, or redis-server")
    ap.add_argument("--store", choices=["dynamodb", "redis"], default="dynamodb",
                    help="the lease table's backend: DynamoDB (dynalite) or Redis")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schedule", choices=["mixed", "half-open", "slow", "late", "steal"],
                    default="mixed")
    ap.add_argument("--workers", type=int, default=5)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--lease-secs", type=float, default=4.0)
    ap.add_argument("--checkpoint-secs", type=float, default=1.0,
                    help="how often each worker checkpoints each lease it holds (above 0)")
    ap.add_argument("--warmup", type=float, default=None, help="s before the first fault")
    ap.add_argument("--heal", type=float, default=None, help="quiet s at the end")
    ap.add_argument("--proxy-base", type=int, default=17000)
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args()
    if not args.checkpoint_secs > 0:
        ap.error("--checkpoint-secs must be above 0: the checkpoint audit needs checkpoints")
    args.scripts = os.path.dirname(os.path.abspath(__file__))
    args.warmup = args.warmup if args.warmup is not None else max(8.0, 2 * args.lease_secs)
    args.heal = args.heal if args.heal is not None else max(20.0, 5 * args.lease_secs)
    args.table = f"chaos-{os.getpid()}-{args.seed}"
    work = os.environ.get("CHAOS_WORK") or f"/tmp/chaos-{os.getpid()}"
    os.makedirs(work, exist_ok=True)
    rng = random.Random(args.seed)
    procs = [Proc(args, i, work) for i in range(args.workers)]
    steps = plan(args, rng)
    if args.schedule != "mixed" and steps:
        args.seconds = max(args.seconds, max(at + span for (at, _, _, span, _) in steps) + args.heal)
    print(f"chaos: {args.workers} workers on {args.store}, {args.shards} leases, "
          f"lease {args.lease_secs} s, "
          f"{args.seconds:.0f} s, schedule {args.schedule}, seed {args.seed}, logs in {work}",
          flush=True)
    for p in procs:
        p.start_proxy()
    for p in procs:
        wait_port(p.port)
    t0 = time.time()
    t0_ns = time.time_ns()
    try:
        for p in procs[:initial_workers(args)]:
            p.start()
        run_schedule(args, procs, steps, t0, rng)
        heal_at = max((at + span for (at, _, _, span, _) in steps), default=args.warmup)
        heal_ns = t0_ns + int(heal_at * 1e9)
        # The heal: wait for the rest of the run, noting when the fleet is balanced again.
        balanced_at = None
        while time.time() < t0 + args.seconds:
            time.sleep(0.25)
            if balanced_at is None and time.time() > t0 + heal_at and \
                    balanced(held_counts(procs), args.shards):
                balanced_at = time.time() - (t0 + heal_at)
        final = held_counts(procs)
        # Every worker must be running at the end: one that exited by itself is a failure.
        exited = {p.id: p.current.returncode if p.current else "never started"
                  for p in procs if not p.alive()}
        end_ns = time.time_ns()
    finally:
        # The end: SIGTERM to every worker; each must leave within its shutdown timeout.
        hung = []
        for p in procs:
            if p.frozen_since is not None:
                p.signal(signal.SIGCONT, "cont")
            if p.alive():
                p.current.send_signal(signal.SIGTERM)
        for p in procs:
            if p.current is not None:
                try:
                    p.current.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    print(f"chaos: {p.id} did not exit 40 s after SIGTERM", flush=True)
                    hung.append(p.id)
                    p.current.kill()
                    p.current.wait()
            if p.proxy is not None:
                p.proxy.terminate()
                p.proxy.wait()
    # Every worker has left: what the table holds now is final.
    table, table_error = read_table(args)

    by_lease, overlaps, margins, uncovered, uncovered_healthy, span = \
        audit(args, procs, t0_ns, end_ns, heal_ns)
    summary = {
        "store": args.store, "schedule": args.schedule, "seed": args.seed,
        "workers": args.workers,
        "leases": args.shards, "lease_secs": args.lease_secs, "seconds": round(span, 1),
        "faults": [dict({"at": round(a, 1), "worker": f"w{i}", "kind": k, "secs": round(s, 1)},
                        **({"late_ms": arg} if k == "late" else {}))
                   for (a, i, k, s, arg) in steps],
        "overlaps": overlaps,
        "margin_min_secs": round(min(margins), 3) if margins else None,
        "margin_p50_secs": round(pct(margins, 0.5), 3) if margins else None,
        "handovers": len(margins),
        "thaw_fence_max_secs": round(max(THAW_REACTIONS), 4) if THAW_REACTIONS else None,
        "unprocessed_lease_secs": round(uncovered, 1),
        "unprocessed_fraction": round(uncovered / (span * args.shards), 4),
        "unprocessed_after_heal_lease_secs": round(uncovered_healthy, 1),
        "balanced_after_heal_secs": None if balanced_at is None else round(balanced_at, 1),
        "final_counts": final,
        "exited_by_themselves": exited,
        "not_exiting_on_sigterm": hung,
    }
    regressions, figures = checkpoint_regressions(procs, table)
    summary["checkpoint_regressions"] = regressions
    summary.update(figures)
    summary["table_read_error"] = table_error
    summary.update(late_deliveries(procs))
    stolen = steals(procs)
    summary["steals"] = sum(stolen.values())
    summary["steals_by_worker"] = dict(sorted(stolen.items()))
    # Per fault kind: failover after kill -9, leave after SIGTERM, back to a share after
    # half-open / slow, processed fraction of the faulted worker's leases.
    failovers, leaves = [], []
    for p in procs:
        for (ns, what) in p.events:
            if what not in ("kill", "term"):
                continue
            # What the run alive at the fault held: an earlier run of this process was killed
            # without logging its stops, and its leases were failed over long before (counting
            # them measured the next move of those leases: 43 s at seed 1 with sessions).
            held = set()
            killed_run = None
            for run, popen, log in p.runs:
                run_held = set()
                seen = False
                for e in read_log(log):
                    if e["ts_unix_nanos"] > ns:
                        continue
                    seen = True
                    if e["event"] == "acquired":
                        run_held.add(e["lease"])
                    elif e["event"] in STOPS:
                        run_held.discard(e["lease"])
                if seen:
                    killed_run, held = run, run_held
            for lease in held:
                at = first_acquire_after(by_lease, lease, ns, p.id, killed_run)
                if at is not None:
                    (failovers if what == "kill" else leaves).append((at - ns) / 1e9)
    if failovers:
        summary["failover_secs"] = {"n": len(failovers), "p50": round(pct(failovers, 0.5), 2),
                                    "max": round(max(failovers), 2)}
    if leaves:
        summary["leave_secs"] = {"n": len(leaves), "p50": round(pct(leaves, 0.5), 2),
                                 "max": round(max(leaves), 2)}
    if args.schedule in ("half-open", "slow"):
        at, i, kind, secs, _ = steps[0]
        a_ns, b_ns = t0_ns + int(at * 1e9), t0_ns + int((at + secs) * 1e9)
        # The leases the faulted worker held when the fault began: how much of the fault's
        # time someone processed them.
        held = set()
        for run, popen, log in procs[i].runs:
            for e in read_log(log):
                if e["ts_unix_nanos"] > a_ns:
                    continue
                if e["event"] == "acquired":
                    held.add(e["lease"])
                elif e["event"] in STOPS:
                    held.discard(e["lease"])
        covered = 0.0
        for lease in held:
            ivs = sorted(cut_frozen(by_lease.get(lease, []), procs))
            cursor = a_ns
            for (x, y, pid, run) in ivs:
                x, y = max(x, cursor), min(y, b_ns)
                if y > x:
                    covered += (y - x) / 1e9
                    cursor = y
        total = len(held) * secs
        summary["faulted_worker_leases"] = len(held)
        summary["faulted_leases_processed_fraction"] = round(covered / total, 4) if total else None
        # Back to its share: its held count reaches the floor of a fair share after the heal.
        share = args.shards // args.workers
        back = None
        for run, popen, log in procs[i].runs:
            held_now, acquired = set(), []
            for e in read_log(log):
                if e["event"] == "acquired":
                    held_now.add(e["lease"])
                elif e["event"] in STOPS:
                    held_now.discard(e["lease"])
                if e["ts_unix_nanos"] >= b_ns and len(held_now) >= share and back is None:
                    back = (e["ts_unix_nanos"] - b_ns) / 1e9
        if back is None:
            # Already at its share when the fault ended, or never again.
            counts = held_counts(procs)
            back = 0.0 if counts.get(procs[i].id, 0) >= share else None
        summary["share_back_after_heal_secs"] = None if back is None else round(back, 2)

    for key in ("overlaps", "checkpoint_regressions"):
        print(f"chaos: {key}: {len(summary[key])}")
        for o in summary[key][:20]:
            print(f"chaos:   {o}")
    for key, value in summary.items():
        if key not in ("overlaps", "checkpoint_regressions", "faults"):
            print(f"chaos: {key}: {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    ok = not overlaps and not regressions and table_error is None and not exited and not hung \
        and balanced(final, args.shards)
    # The targets of the two single-fault schedules: after a half-open spell the worker has
    # its share back within two taker intervals (lease / 2 each) of the heal; a slow worker's
    # leases are processed by someone at least 90 % of the time.
    if args.schedule == "half-open":
        back = summary["share_back_after_heal_secs"]
        ok = ok and back is not None and back <= args.lease_secs
    if args.schedule == "slow":
        ok = ok and (summary["faulted_leases_processed_fraction"] or 0) >= 0.9
    print(f"chaos: {'ok' if ok else 'FAILED'} (seed {args.seed}, schedule {args.schedule})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
