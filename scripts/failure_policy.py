#!/usr/bin/env python3
"""The Kinesis consumer's failure policy with a poison record, consumer processes on the
emulators: a poison batch is delivered `--batch-attempts` times, then skipped (its checkpoint
advances, reading goes on, no lease moves) or the shard is halted (the lease stays held by its
owner, /healthz names it, nothing after it is processed, and a worker joining the fleet takes
its share from the other leases, not from the halted one).

    scripts/emulators.sh start
    cargo build --all-features --example kinesis_consumer
    python3 scripts/failure_policy.py [--on-failure skip|stop] [--runs 3] [--hold 30]

Each run creates a four-shard stream on kinesalite and starts `examples/kinesis_consumer.rs`
twice (workers a and b, `--max-records 1 --batch-attempts 3 --retry-backoff-ms 200
--fail-on POISON`, 10 s leases, `/healthz` served by each). Once each worker holds two shards,
five records go to the last shard, then five, `POISON` and five more to the first. With skip,
the run waits for the last of them to be checkpointed. With stop, it waits for the halt, starts
a third worker c (which takes one of the four leases for balance), and holds `--hold` seconds
(three lease durations by default) before it looks again. Every process leaves on SIGTERM.
Prints one JSON line per run; exits 1 if a run breaks what the policy promises.
"""

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from kinesis_local import (DYNAMO, KINESIS, create_stream, example, example_env, kinesis,
                           stop)

ATTEMPTS = 3
PORTS = {"a": 19411, "b": 19412, "c": 19413}


def start(binary, stream, worker, mode, out, events):
    return subprocess.Popen(
        [binary, "--stream", stream, "--worker-id", worker, "--kinesis-endpoint", KINESIS,
         "--dynamodb-endpoint", DYNAMO, "--initial-position", "trim-horizon",
         "--lease-secs", "10", "--max-records", "1", "--batch-attempts", str(ATTEMPTS),
         "--retry-backoff-ms", "200", "--on-failure", mode, "--fail-on", "POISON",
         "--health", "127.0.0.1:%d" % PORTS[worker], "--events-log", events],
        stdout=out, stderr=subprocess.DEVNULL, env=example_env())


def events(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def health(worker):
    """(status, body) of the worker's /healthz."""
    url = "http://127.0.0.1:%d/healthz" % PORTS[worker]
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode().strip()


def holder(logs, shard):
    """The worker whose events show it acquired `shard` last."""
    acquired = [(e["ts_unix_nanos"], worker) for worker, path in logs.items()
                for e in events(path) if e["lease"] == shard and e["event"] == "acquired"]
    return max(acquired)[1] if acquired else None


def wait(what, done, limit=90):
    started = time.time()
    while not done():
        if time.time() - started > limit:
            sys.exit("not reached within %d s: %s" % (limit, what))
        time.sleep(0.1)


def put(stream, hash_key, data):
    return kinesis("PutRecord", {
        "StreamName": stream, "PartitionKey": "k", "ExplicitHashKey": str(hash_key),
        "Data": base64.b64encode(data.encode()).decode(),
    })["SequenceNumber"]


def printed(path, shard):
    """The data of the records a process printed for `shard` (`[worker] shard key data`)."""
    with open(path) as f:
        return [line.split()[3] for line in f
                if len(line.split()) == 4 and line.split()[1] == shard]


def run(binary, mode, hold, index):
    stream = "failure-%s-%d-%d" % (mode, os.getpid(), index)
    shards = create_stream(stream, 4)
    (poisoned, first_key), other_key = shards[0], shards[-1][1]
    work = tempfile.mkdtemp(prefix="failure-policy-")
    logs = {w: os.path.join(work, w + ".jsonl") for w in PORTS}
    outs = {w: open(os.path.join(work, w + ".out"), "w") for w in PORTS}
    processes = {w: start(binary, stream, w, mode, outs[w], logs[w]) for w in ("a", "b")}
    moves = lambda lease=None: sum(
        1 for w in PORTS for e in events(logs[w])
        if e["event"] in ("handed_off", "released", "lost", "acquired")
        and lease in (None, e["lease"]))
    try:
        wait("each worker holds two shards",
             lambda: sorted(holder(logs, s) or "-" for s, _ in shards) == ["a", "a", "b", "b"])
        owner = holder(logs, poisoned)
        moves_before, poisoned_before = moves(), moves(poisoned)
        for n in range(5):
            put(stream, other_key, "other-%d" % n)
            put(stream, first_key, "before-%d" % n)
        poison = put(stream, first_key, "POISON")
        after = [put(stream, first_key, "after-%d" % n) for n in range(5)]
        failed = lambda: [e for e in events(logs[owner])
                          if e["event"] == "batch_failed" and e["lease"] == poisoned]
        checkpoints = lambda: [e["sequence_number"] for e in events(logs[owner])
                               if e["event"] == "checkpointed" and e["lease"] == poisoned]
        if mode == "skip":
            wait("the last record after the poison checkpointed",
                 lambda: after[-1] in checkpoints())
        else:
            wait("the shard halted", lambda: any(e["then"] == "stop" for e in failed()))
            halted_health = health(owner)
            # A worker joins: it takes its share from the leases that are not halted.
            processes["c"] = start(binary, stream, "c", mode, outs["c"], logs["c"])
            wait("the third worker took a lease",
                 lambda: any(e["event"] == "acquired" for e in events(logs["c"])))
            time.sleep(hold)
        result = {
            "mode": mode,
            "run": index,
            "attempts": len(failed()),
            "then": [e["then"] for e in failed()],
            "lease_moves": moves() - moves_before,
            "poisoned_lease_moves": moves(poisoned) - poisoned_before,
            "processed_after_poison": sum(
                1 for w in PORTS for d in printed(os.path.join(work, w + ".out"), poisoned)
                if d.startswith("after-")),
        }
        if mode == "skip":
            result["checkpoint_advanced_past_poison"] = poison in checkpoints() and (
                checkpoints().index(poison) < checkpoints().index(after[-1]))
            ok = (result["attempts"] == ATTEMPTS and result["then"][-1] == "skip"
                  and result["checkpoint_advanced_past_poison"] and result["lease_moves"] == 0
                  and result["processed_after_poison"] == 5)
        else:
            later = health(owner)
            result.update({
                "held_by_owner_after_hold": holder(logs, poisoned) == owner,
                "hold_s": hold,
                "healthz_at_halt": halted_health,
                "healthz_after_hold": later,
                "healthz_other": health("b" if owner == "a" else "a")[0],
                "leases_of_the_joiner": [s for s, _ in shards if holder(logs, s) == "c"],
                "checkpoint_before_poison": poison not in checkpoints(),
            })
            ok = (result["attempts"] == ATTEMPTS and result["then"][-1] == "stop"
                  and result["poisoned_lease_moves"] == 0 and result["held_by_owner_after_hold"]
                  and len(result["leases_of_the_joiner"]) == 1
                  and halted_health[0] == 503 and poisoned in halted_health[1]
                  and "Halted" in halted_health[1] and later[0] == 503
                  and result["healthz_other"] == 200 and result["processed_after_poison"] == 0
                  and result["checkpoint_before_poison"])
        result["ok"] = ok
        return result
    finally:
        stop(processes, outs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--on-failure", choices=["skip", "stop"], default="stop")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hold", type=float, default=30.0)
    args = parser.parse_args()
    binary = example()
    ok = True
    for index in range(args.runs):
        result = run(binary, args.on_failure, args.hold, index)
        print(json.dumps(result), flush=True)
        ok &= result["ok"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
