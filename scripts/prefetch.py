#!/usr/bin/env python3
"""Reading ahead, measured: a catching-up shard read by a slow processor, with and without
prefetch, side by side in one run.

    scripts/emulators.sh start
    cargo build --all-features --example kinesis_consumer
    python3 scripts/prefetch.py [--records 100000] [--process-ms 10] [--max-records 10000] [--runs 3]

Two one-shard streams on kinesalite get the same `--records` records (100 bytes each) before
any consumer starts. Then `examples/kinesis_consumer.rs` reads each from its trim horizon,
both at once: one with `--prefetch-records 0`, one with the default (30,000), both with
`--process-ms` of work per batch of up to `--max-records`. The time from a consumer's first
printed batch to its last record gives its records per second (the records after the first
batch, over that time). Also measured alone, before the
consumers start: how long `GetRecords` of `--max-records` records takes on this kinesalite
(median of five), the read latency that prefetch hides. Prints one JSON line per run.
"""

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from kinesis_local import (DYNAMO, KINESIS, create_stream, example, example_env, kinesis,
                           stop)


def fill(stream, records):
    payload = base64.b64encode(b"x" * 100).decode()
    for start in range(0, records, 500):
        entries = [{"PartitionKey": "k-%d" % n, "Data": payload}
                   for n in range(start, min(start + 500, records))]
        answer = kinesis("PutRecords", {"StreamName": stream, "Records": entries})
        if answer.get("FailedRecordCount"):
            sys.exit("PutRecords failed for %d records" % answer["FailedRecordCount"])


def read_latency(stream, shard, limit):
    """The median time of five GetRecords calls of `limit` records from the trim horizon."""
    times = []
    for _ in range(5):
        iterator = kinesis("GetShardIterator", {
            "StreamName": stream, "ShardId": shard,
            "ShardIteratorType": "TRIM_HORIZON"})["ShardIterator"]
        started = time.time()
        kinesis("GetRecords", {"ShardIterator": iterator, "Limit": limit})
        times.append(time.time() - started)
    return statistics.median(times)


def start(binary, stream, prefetch, args, out):
    return subprocess.Popen(
        [binary, "--stream", stream, "--worker-id", "w", "--kinesis-endpoint", KINESIS,
         "--dynamodb-endpoint", DYNAMO, "--initial-position", "trim-horizon",
         "--max-records", str(args.max_records), "--process-ms", str(args.process_ms),
         "--prefetch-records", str(prefetch)],
        stdout=out, stderr=subprocess.DEVNULL, env=example_env())


class Progress:
    """Counts the records a consumer printed, reading only what was added since the last look."""

    def __init__(self, path):
        self.file = open(path, "rb")
        self.count = 0
        self.partial = b""

    def look(self):
        lines = (self.partial + self.file.read()).split(b"\n")
        self.partial = lines.pop()
        self.count += sum(1 for line in lines if line.startswith(b"[w] shardId-"))
        return self.count


def run(binary, args, index):
    streams = {}
    for prefetch in (0, 30000):
        name = "prefetch-%d-%d-%d" % (prefetch, os.getpid(), index)
        shard = create_stream(name, 1)[0][0]
        fill(name, args.records)
        streams[prefetch] = (name, shard)
    latency = read_latency(*streams[0], args.max_records)
    work = tempfile.mkdtemp(prefix="prefetch-")
    outs, processes, first, last = {}, {}, {}, {}
    for prefetch, (name, _) in streams.items():
        outs[prefetch] = open(os.path.join(work, "%d.out" % prefetch), "w")
        processes[prefetch] = start(binary, name, prefetch, args, outs[prefetch])
    started = time.time()
    progress = {p: Progress(os.path.join(work, "%d.out" % p)) for p in streams}
    try:
        while len(last) < len(streams):
            if time.time() - started > 600:
                sys.exit("not every consumer read its %d records within 600 s" % args.records)
            now = time.time()
            for prefetch in streams:
                count = progress[prefetch].look()
                if count and prefetch not in first:
                    first[prefetch] = (now, count)
                if count >= args.records and prefetch not in last:
                    last[prefetch] = now
            time.sleep(0.01)
    finally:
        stop(processes, outs)
    # From the first batch seen to the last record: the records after the first batch.
    rate = {p: (args.records - first[p][1]) / max(last[p] - first[p][0], 1e-3) for p in streams}
    return {
        "run": index,
        "records": args.records,
        "max_records": args.max_records,
        "process_ms_per_batch": args.process_ms,
        "get_records_s_median": round(latency, 3),
        "records_per_s_without_prefetch": round(rate[0]),
        "records_per_s_with_prefetch": round(rate[30000]),
        "speedup": round(rate[30000] / rate[0], 2),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100000)
    parser.add_argument("--process-ms", type=int, default=10)
    parser.add_argument("--max-records", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    binary = example()
    for index in range(args.runs):
        print(json.dumps(run(binary, args, index)), flush=True)


if __name__ == "__main__":
    main()
