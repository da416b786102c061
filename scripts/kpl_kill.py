#!/usr/bin/env python3
"""KPL-aggregated records through kill -9: the Kinesis consumer example, killed at random points,
loses no user record and repeats only what it processed after its last checkpoint.

    scripts/emulators.sh start
    python3 -m venv .venv-kpl && .venv-kpl/bin/pip install aws-kinesis-agg==1.2.3 six protobuf
    cargo build --all-features --example kinesis_consumer
    .venv-kpl/bin/python scripts/kpl_kill.py [--kills 20] [--seed 1]

A one-shard stream on kinesalite gets 50 aggregates of 20 user records each, written by the
kinesis-aggregation project's Python producer. The example (`--max-records 3 --process-ms 200
--checkpoint-every 7`: three aggregates a batch, a checkpoint after every seventh user record, so
most checkpoints fall inside an aggregate) is started, killed
with SIGKILL at a random point after its first record, and started again under a new worker id,
`--kills` times; the last run reads to the end and leaves on SIGTERM. Every user record the
example prints is counted. A kill may repeat, after the next start, only the user records
printed after the killed run's last checkpoint (from its events log). Prints one JSON line.
Needs `CARGO_TARGET_DIR` if the build went elsewhere; the emulators' ports are
`scripts/emulators.sh`'s (override with SHARDLEASE_KINESALITE_ENDPOINT and
SHARDLEASE_DYNALITE_ENDPOINT).
"""

import argparse
import base64
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

from aws_kinesis_agg.aggregator import RecordAggregator

from kinesis_local import DYNAMO, KINESIS, create_stream, example, example_env, kinesis

AGGREGATES = 50
PER_AGGREGATE = 20
TOTAL = AGGREGATES * PER_AGGREGATE


def produce(name):
    """50 aggregates of 20 user records, `u-0000` to `u-0999`, in order; returns the
    aggregates' sequence numbers, in order."""
    sequences = []
    n = 0
    for i in range(AGGREGATES):
        aggregator = RecordAggregator()
        for _ in range(PER_AGGREGATE):
            assert aggregator.add_user_record("key-%d" % (n % 7), b"u-%04d" % n) is None
            n += 1
        data = aggregator.clear_and_get().get_contents()[2]
        put = kinesis(
            "PutRecord",
            {
                "StreamName": name,
                "PartitionKey": "aggregate-%d" % i,
                "Data": base64.b64encode(data).decode(),
            },
        )
        sequences.append(put["SequenceNumber"])
    return sequences


def start(binary, stream, worker, out, events):
    return subprocess.Popen(
        [binary, "--stream", stream, "--worker-id", worker, "--kinesis-endpoint", KINESIS,
         "--dynamodb-endpoint", DYNAMO, "--initial-position", "trim-horizon",
         "--lease-secs", "2", "--max-records", "3", "--process-ms", "200",
         "--checkpoint-every", "7",
         "--events-log", events],
        stdout=out, stderr=subprocess.DEVNULL, env=example_env())


def printed(path):
    """The user records a run printed, in order (`[worker] shard key u-NNNN`)."""
    with open(path) as f:
        return [line.split()[-1] for line in f if line.split()[-1].startswith("u-")]


def last_checkpoint(events):
    """The last checkpoint a run's events log shows: (sequence number, sub-sequence number)."""
    last = None
    if os.path.exists(events):
        with open(events) as f:
            for line in f:
                event = json.loads(line)
                if event.get("event") == "checkpointed":
                    last = (event["sequence_number"], int(event.get("sub_sequence_number", -1)))
    return last


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    binary = example()
    stream = "kpl-kill-%d-%d" % (os.getpid(), args.seed)
    create_stream(stream, 1)
    sequences = produce(stream)
    work = tempfile.mkdtemp(prefix="kpl-kill-")
    seen, bound, resumed_inside = [], 0, 0
    for run in range(args.kills + 1):
        out_path = os.path.join(work, "run-%d.out" % run)
        events = os.path.join(work, "run-%d.jsonl" % run)
        with open(out_path, "w") as out:
            process = start(binary, stream, "w%d" % run, out, events)
            started = time.time()
            while not printed(out_path):
                if time.time() - started > 60:
                    process.kill()
                    sys.exit("run %d printed nothing within 60 s" % run)
                time.sleep(0.05)
            this = printed(out_path)
            if run > 0 and this[0] != "u-0000" and int(this[0][2:]) % PER_AGGREGATE != 0:
                resumed_inside += 1
            if run < args.kills:
                time.sleep(rng.uniform(0.1, 1.5))
                process.send_signal(signal.SIGKILL)
                process.wait()
                this = printed(out_path)
                # What the next run may repeat: printed after the last checkpoint.
                checkpoint = last_checkpoint(events)
                if checkpoint is None:
                    bound += len(this)
                else:
                    sequence, sub = checkpoint
                    covered = sequences.index(sequence) * PER_AGGREGATE + sub
                    bound += sum(1 for u in this if int(u[2:]) > covered)
            else:
                while "u-%04d" % (TOTAL - 1) not in printed(out_path):
                    if time.time() - started > 120:
                        process.kill()
                        sys.exit("the last run did not reach the end within 120 s")
                    time.sleep(0.1)
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=60)
                this = printed(out_path)
        seen.extend(this)
    distinct = set(seen)
    result = {
        "user_records": TOTAL,
        "aggregates": AGGREGATES,
        "kills": args.kills,
        "seed": args.seed,
        "lost": TOTAL - len(distinct & {"u-%04d" % n for n in range(TOTAL)}),
        "duplicates": len(seen) - len(distinct),
        "duplicates_allowed": bound,
        "resumed_inside_an_aggregate": resumed_inside,
    }
    print(json.dumps(result))
    ok = result["lost"] == 0 and result["duplicates"] <= bound
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
