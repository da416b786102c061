#!/usr/bin/env python3
"""A consumer of several streams, three consumer processes on the emulators, the library's
default settings (10 s lease, a discovery round every 10 s, retire_after 60 s): how the leases
of three streams spread over three workers, how soon the leases of a stream added at run time
are held, and how soon those of a stream removed are retired.

    scripts/emulators.sh start
    cargo build --all-features --example kinesis_consumer
    python3 scripts/multi_stream.py [--runs 3] [--shards 3]

Each run creates four streams of `--shards` shards on kinesalite, writes three of their names
to a streams file and starts `examples/kinesis_consumer.rs` three times (workers a, b, c,
`--streams-file`, one lease table on dynalite). It waits until every lease of the three
streams is held and reads the spread from the workers' events logs; appends the fourth stream
to the file and waits until its leases are held; then removes the first stream from the file
and waits until none of its leases is held. Every process leaves on SIGTERM. Prints one JSON
line per run (seconds from the file's change); exits 1 if a spread is more than one lease
apart.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from kinesis_local import DYNAMO, KINESIS, create_stream, example, example_env, stop

WORKERS = ("a", "b", "c")
# A lease stops being held here when its record loop stops (a handoff, a release, a loss, a
# retirement all end with "stopped").
LET_GO = ("stopped", "handed_off", "released", "lost", "retired")


def events(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def held(logs):
    """The leases each worker holds now, by its events log."""
    holding = {}
    for worker, path in logs.items():
        mine = set()
        for event in events(path):
            lease = event.get("lease")
            if lease is None:
                continue
            if event["event"] == "acquired":
                mine.add(lease)
            elif event["event"] in LET_GO:
                mine.discard(lease)
        holding[worker] = mine
    return holding


def of_stream(leases, stream):
    """The leases of `stream` (keys `<account>:<stream>:<epoch>:<shard>`)."""
    return {lease for lease in leases if lease.split(":")[1] == stream}


def wait(what, done, limit):
    started = time.time()
    while not done():
        if time.time() - started > limit:
            sys.exit("not reached within %d s: %s" % (limit, what))
        time.sleep(0.1)
    return time.time() - started


def spread(logs, streams):
    counts = [len({l for s in streams for l in of_stream(leases, s)})
              for leases in held(logs).values()]
    return sorted(counts)


def run(binary, shards, index):
    base = "multi-%d-%d" % (os.getpid(), index)
    streams = ["%s-%d" % (base, n) for n in range(4)]
    for stream in streams:
        create_stream(stream, shards)
    work = tempfile.mkdtemp(prefix="multi-stream-")
    listing = os.path.join(work, "streams.txt")
    with open(listing, "w") as f:
        f.write("\n".join(streams[:3]) + "\n")
    logs = {w: os.path.join(work, w + ".jsonl") for w in WORKERS}
    outs = {w: open(os.path.join(work, w + ".out"), "w") for w in WORKERS}
    processes = {
        w: subprocess.Popen(
            [binary, "--streams-file", listing, "--table", base + "-leases", "--worker-id", w,
             "--kinesis-endpoint", KINESIS, "--dynamodb-endpoint", DYNAMO,
             "--initial-position", "trim-horizon", "--events-log", logs[w]],
            stdout=outs[w], stderr=subprocess.DEVNULL, env=example_env())
        for w in WORKERS
    }
    all_held = lambda names: sum(len({l for s in names for l in of_stream(leases, s)})
                                 for leases in held(logs).values())
    try:
        started = wait("every lease of three streams held",
                       lambda: all_held(streams[:3]) == 3 * shards, 120)
        # Settled: one more discovery round and beat of balance.
        time.sleep(15)
        first = spread(logs, streams[:3])
        with open(listing, "a") as f:
            f.write(streams[3] + "\n")
        added = wait("every lease of the added stream held",
                     lambda: all_held(streams[3:]) == shards, 120)
        time.sleep(15)
        second = spread(logs, streams)
        with open(listing, "w") as f:
            f.write("\n".join(streams[1:]) + "\n")
        removed = wait("no lease of the removed stream held",
                       lambda: all_held(streams[:1]) == 0, 240)
        third = spread(logs, streams[1:])
    finally:
        stop(processes, outs)
    result = {
        "run": index, "shards_per_stream": shards,
        "all_held_s": round(started, 2), "spread_3_streams": first,
        "added_stream_held_s": round(added, 2), "spread_4_streams": second,
        "removed_stream_retired_s": round(removed, 2), "spread_after_removal": third,
    }
    print(json.dumps(result), flush=True)
    return all(max(s) - min(s) <= 1 for s in (first, second, third))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shards", type=int, default=3)
    args = parser.parse_args()
    binary = example()
    ok = all([run(binary, args.shards, index) for index in range(1, args.runs + 1)])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
