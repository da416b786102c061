#!/usr/bin/env python3
"""The LogHub consumer end to end: consumer processes (`examples/loghub_consumer.rs`) on a
Redis lease table, against the LogHub emulator, through a kill -9, a join, a SIGTERM, a split
and a merge, audited from their events logs.

    scripts/emulators.sh start
    cargo build --all-features --example loghub_consumer
    python3 scripts/loghub_e2e.py [--runs 1] [--lease-secs 10] [--hold-secs 2] [--shards 8]

Each run creates a logstore of `--shards` shards and starts a producer (the example with
`--produce-only`, 20 log groups a second) and three consumers a, b and c. Once the shards are
spread it kills a with SIGKILL, starts d, sends b SIGTERM, splits a shard, merges two, stops
the producer, waits until every log group written was processed, and sends SIGTERM to the
rest. Then it checks, from the events logs:

- lost: every log group written was processed;
- overlap: no two processes held one shard at once (a shard's tenures, from `started` to
  `stopped`, or to the kill, never overlap);
- duplicates: a log group processed twice is one the killed process processed after its last
  checkpoint of that shard (none after a graceful move);
- lineage: a split's and a merge's children start only after their parents ended;
- hold: after every graceful move the new owner starts at least `--hold-secs` after the old
  owner stopped.

Prints one JSON line per run (times in seconds: the first spread after the start, the failover
after the kill, the join's share after its start, the leave's handover after the SIGTERM) and
exits 1 if a run breaks any rule.
"""

import argparse
import base64
import email.utils
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

EMULATOR = os.environ.get("SHARDLEASE_LOGHUB_ENDPOINT", "http://127.0.0.1:4580")
REDIS = os.environ.get("SHARDLEASE_REDIS_URL", "redis://127.0.0.1:6390")
PRODUCE_PER_SEC = 20
# A shard stops being held here when its record loop ends (every move ends with "stopped").
ENDS = ("stopped",)


def example():
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    path = os.path.join(target, "debug", "examples", "loghub_consumer")
    if not os.path.exists(path):
        sys.exit(path + " is missing: cargo build --all-features --example loghub_consumer")
    return path


def env():
    return dict(os.environ, ALIBABA_CLOUD_ACCESS_KEY_ID="test",
                ALIBABA_CLOUD_ACCESS_KEY_SECRET="test", RUST_LOG="warn")


def events(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def loghub(method, project, path, query):
    """One call to the emulator (its host names the project; the headers a signed call
    carries, which it checks are there)."""
    url = EMULATOR + path + "?" + urllib.parse.urlencode(query)
    request = urllib.request.Request(url, method=method, data=b"", headers={
        "Host": project + ".loghub.emulator",
        "Date": email.utils.formatdate(usegmt=True),
        "x-log-apiversion": "0.6.0",
        "x-log-signaturemethod": "hmac-sha1",
        "x-log-bodyrawsize": "0",
        "Authorization": "LOG test:" + base64.b64encode(b"unchecked").decode(),
    })
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


def shards(project, logstore):
    return loghub("GET", project, "/logstores/%s/shards" % logstore, {})


class Run:
    def __init__(self, binary, args, index):
        self.binary, self.args = binary, args
        self.project = "e2e-%d-%d" % (os.getpid(), index)
        self.logstore = "orders"
        self.table = "loghub-e2e-%d-%d" % (os.getpid(), index)
        self.work = tempfile.mkdtemp(prefix="loghub-e2e-")
        self.logs, self.outs, self.processes = {}, {}, {}
        self.killed = {}

    def start(self, name, extra):
        log = os.path.join(self.work, name + ".jsonl")
        out = open(os.path.join(self.work, name + ".out"), "w")
        command = [self.binary, "--emulator", EMULATOR, "--project", self.project,
                   "--logstore", self.logstore, "--redis", REDIS, "--table", self.table,
                   "--worker-id", name, "--lease-secs", str(self.args.lease_secs),
                   "--hold-secs", str(self.args.hold_secs), "--events-log", log] + extra
        self.logs[name], self.outs[name] = log, out
        self.processes[name] = subprocess.Popen(command, stdout=out, stderr=out, env=env())

    def held(self):
        """The shards each running process holds now (started and not stopped)."""
        holding = {}
        for name, path in self.logs.items():
            if name == "producer" or name in self.killed:
                continue
            mine = set()
            for event in events(path):
                if event["event"] == "started":
                    mine.add(event["lease"])
                elif event["event"] in ENDS:
                    mine.discard(event["lease"])
            holding[name] = mine
        return holding

    def spread(self):
        return sorted(len(s) for s in self.held().values())

    def open_shards(self):
        return {str(s["shardID"]) for s in shards(self.project, self.logstore)
                if s["status"] == "readwrite"}

    def all_held_evenly(self):
        held = self.held()
        wanted = self.open_shards()
        owned = [s for shards in held.values() for s in shards]
        counts = [len(s) for s in held.values()]
        return set(owned) >= wanted and len(owned) == len(set(owned)) \
            and max(counts) - min(counts) <= 1

    def wait(self, what, done, limit=180):
        started = time.time()
        while not done():
            if time.time() - started > limit:
                raise SystemExit("run %s: not reached within %d s: %s (held %s)"
                                 % (self.project, limit, what, self.held()))
            time.sleep(0.2)
        return time.time() - started

    def written(self):
        return {e["value"] for e in events(self.logs["producer"]) if e["event"] == "written"}

    def processed(self):
        return {v for name, path in self.logs.items() if name != "producer"
                for e in events(path) if e["event"] == "processed" for v in e["values"]}

    def scenario(self):
        self.start("producer", ["--create-shards", str(self.args.shards), "--produce-only",
                                "--produce-per-sec", str(PRODUCE_PER_SEC)])
        self.wait("the producer writes", lambda: self.written())
        began = time.time()
        for name in ("a", "b", "c"):
            self.start(name, [])
        first = self.wait("the shards spread over a, b, c",
                          lambda: len(self.held()) == 3 and self.all_held_evenly())
        time.sleep(2)
        orphans = set(self.held()["a"])
        self.processes["a"].send_signal(signal.SIGKILL)
        self.processes["a"].wait()
        self.killed["a"] = time.time()
        failover = self.wait("a's shards taken over",
                             lambda: orphans <= {s for h in self.held().values() for s in h})
        self.start("d", [])
        join = self.wait("d has its share",
                         lambda: len(self.held().get("d", ())) >= self.args.shards // 3
                         and self.all_held_evenly())
        leaving = set(self.held()["b"])
        asked = time.time()
        self.processes["b"].send_signal(signal.SIGTERM)
        self.processes["b"].wait(timeout=60)
        self.wait("b's shards handed over",
                  lambda: leaving <= {s for n, h in self.held().items() if n != "b" for s in h})
        leave = time.time() - asked
        listed = sorted(shards(self.project, self.logstore), key=lambda s: s["shardID"])
        parent = listed[0]
        middle = "%032x" % ((int(parent["inclusiveBeginKey"], 16)
                             + int(parent["exclusiveEndKey"], 16)) // 2)
        after = loghub("POST", self.project, "/logstores/%s/shards/%d"
                       % (self.logstore, parent["shardID"]), {"action": "split", "key": middle})
        children = sorted(s["shardID"] for s in after if s["status"] == "readwrite"
                          and s["inclusiveBeginKey"] in (parent["inclusiveBeginKey"], middle)
                          and s["shardID"] != parent["shardID"])
        self.wait("the split's children started", lambda: all(
            any(e["event"] == "started" and e["lease"] == str(c)
                for path in self.logs.values() for e in events(path)) for c in children))
        merged = loghub("POST", self.project, "/logstores/%s/shards/%d"
                        % (self.logstore, children[0]), {"action": "merge"})
        merge_child = max(s["shardID"] for s in merged)
        self.wait("the merge's child started", lambda: any(
            e["event"] == "started" and e["lease"] == str(merge_child)
            for path in self.logs.values() for e in events(path)))
        time.sleep(3)
        self.processes["producer"].send_signal(signal.SIGTERM)
        self.processes["producer"].wait(timeout=30)
        self.wait("every log group written processed",
                  lambda: self.written() <= self.processed(), limit=120)
        lineage = {str(c): [str(parent["shardID"])] for c in children}
        lineage[str(merge_child)] = [str(c) for c in children]
        return {"first_spread_s": round(first, 2), "failover_s": round(failover, 2),
                "join_s": round(join, 2), "leave_s": round(leave, 2),
                "began": began, "lineage": lineage}

    def stop(self):
        for name, process in self.processes.items():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        for out in self.outs.values():
            out.close()

    def audit(self, lineage):
        """The rules, from the events logs: a list of what broke them."""
        broken = []
        written, processed = self.written(), self.processed()
        lost = written - processed
        if lost:
            broken.append("%d log groups lost: %s" % (len(lost), sorted(lost)[:5]))
        tenures = {}  # shard -> [(start, end, worker)]
        firsts = {}  # shard -> first start
        ended = {}  # shard -> when its lease was finished at SHARD_END
        stops = {}  # shard -> [(stopped at, worker)]
        seen = {}  # value -> how many times
        for name, path in self.logs.items():
            if name == "producer":
                continue
            open_tenure = {}
            for e in events(path):
                at, shard = e["ts_unix_nanos"] / 1e9, e["lease"]
                if e["event"] == "started":
                    open_tenure[shard] = at
                    firsts[shard] = min(firsts.get(shard, at), at)
                elif e["event"] == "stopped" and shard in open_tenure:
                    tenures.setdefault(shard, []).append((open_tenure.pop(shard), at, name))
                    stops.setdefault(shard, []).append((at, name))
                elif e["event"] == "ended":
                    ended[shard] = at
                elif e["event"] == "processed":
                    for value in e["values"]:
                        seen[value] = seen.get(value, 0) + 1
            end = self.killed.get(name, float("inf"))
            for shard, start in open_tenure.items():
                tenures.setdefault(shard, []).append((start, end, name))
        for shard, spans in tenures.items():
            spans.sort()
            for (s1, e1, w1), (s2, e2, w2) in zip(spans, spans[1:]):
                if s2 < e1 and w1 != w2:
                    broken.append("shard %s held by %s and %s at once" % (shard, w1, w2))
        # Duplicates: only what the killed process processed after its last checkpoint.
        allowed = set()
        for name in self.killed:
            batches, checkpointed = [], set()
            for e in events(self.logs[name]):
                if e["event"] == "processed":
                    batches.append(e)
                elif e["event"] == "checkpointed":
                    checkpointed.add((e["lease"], e["cursor"]))
            for batch in batches:
                if (batch["lease"], batch["next_cursor"]) not in checkpointed:
                    allowed.update(batch["values"])
        twice = {v for v, n in seen.items() if n > 1}
        if twice - allowed:
            broken.append("%d duplicates not after the kill's last checkpoint: %s"
                          % (len(twice - allowed), sorted(twice - allowed)[:5]))
        for child, parents in lineage.items():
            for parent in parents:
                if parent not in ended:
                    broken.append("shard %s never ended (parent of %s)" % (parent, child))
                elif firsts.get(child, 0) < ended[parent]:
                    broken.append("shard %s started before its parent %s ended" % (child, parent))
        holds = []
        for shard, spans in tenures.items():
            for (s1, e1, w1), (s2, e2, w2) in zip(spans, spans[1:]):
                if w1 in self.killed and e1 == self.killed[w1]:
                    continue  # a failover, not a graceful move
                holds.append(s2 - e1)
        short = [h for h in holds if h < self.args.hold_secs]
        if short:
            broken.append("%d moves held less than %d s: %s"
                          % (len(short), self.args.hold_secs, sorted(short)[:3]))
        return broken, {"written": len(written), "lost": len(lost), "duplicates": len(twice),
                        "duplicates_allowed": len(allowed), "graceful_moves": len(holds),
                        "shortest_hold_s": round(min(holds), 2) if holds else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--lease-secs", type=int, default=10)
    parser.add_argument("--hold-secs", type=int, default=2)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    binary = example()
    ok = True
    for index in range(1, args.runs + 1):
        run = Run(binary, args, index)
        try:
            times = run.scenario()
        finally:
            run.stop()
        broken, counts = run.audit(times.pop("lineage"))
        times.pop("began")
        print(json.dumps(dict(run=index, lease_secs=args.lease_secs, hold_secs=args.hold_secs,
                              **times, **counts, broken=broken)), flush=True)
        if broken:
            ok = False
            print("events logs kept in " + run.work, file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
