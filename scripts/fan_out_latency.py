#!/usr/bin/env python3
"""Put -> process latency of the Kinesis consumer, polling and enhanced fan-out side by side in
one run, on kinesis-mock (npm `kinesis-local`, the emulator that serves SubscribeToShard).

    scripts/emulators.sh start
    cargo build --all-features --example kinesis_consumer
    python3 scripts/fan_out_latency.py [--records 300] [--per-sec 5] [--runs 3]

A one-shard stream on kinesis-mock; two `examples/kinesis_consumer.rs` processes read it at once,
as two applications with lease tables of their own on dynalite: one polling (the defaults: a
GetRecords every 200 ms while records come, 1 s after an empty answer), one with `--fan-out`.
Once both hold the shard, records carrying the time they were put go in at `--per-sec`; the
script stamps each line a process prints as it reads it. Prints one JSON line per run with
p50/p90/p99/max of put -> printed, per mode, and how many records each mode printed (every
record, once, or the run fails).
"""

import argparse
import base64
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

from kinesis_local import (DYNAMO, KINESIS_MOCK, create_stream, example, example_env, kinesis,
                           stop)


def start(binary, stream, worker, extra, events):
    return subprocess.Popen(
        [binary, "--stream", stream, "--worker-id", worker, "--table", "%s-%s" % (stream, worker),
         "--kinesis-endpoint", KINESIS_MOCK, "--dynamodb-endpoint", DYNAMO,
         "--initial-position", "latest", "--events-log", events] + extra,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=example_env(), text=True, bufsize=1)


def reader(process, mode, lines):
    """Puts (arrival time, mode, line) for every line the process prints."""
    for line in process.stdout:
        lines.put((time.time(), mode, line))


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(binary, args, index):
    stream = "latency-%d-%d" % (os.getpid(), index)
    shard = create_stream(stream, 1, KINESIS_MOCK)[0][0]
    work = tempfile.mkdtemp(prefix="fan-out-latency-")
    modes = {"polling": [], "fan_out": ["--fan-out", "latency-app"]}
    lines = queue.Queue()
    processes = {}
    for mode, extra in modes.items():
        events = os.path.join(work, mode + ".jsonl")
        processes[mode] = start(binary, stream, mode, extra, events)
        threading.Thread(target=reader, args=(processes[mode], mode, lines), daemon=True).start()
    try:
        started = time.time()
        while not all(os.path.exists(os.path.join(work, m + ".jsonl")) and any(
                json.loads(l)["event"] == "acquired"
                for l in open(os.path.join(work, m + ".jsonl"))) for m in modes):
            if time.time() - started > 60:
                sys.exit("the consumers did not both take the shard within 60 s")
            time.sleep(0.1)
        time.sleep(2)  # past the Latest start marker
        sent = {}
        for n in range(args.records):
            tag = "lat-%05d" % n
            sent[tag] = time.time()
            data = base64.b64encode(tag.encode()).decode()
            kinesis("PutRecord", {"StreamName": stream, "PartitionKey": "k", "Data": data},
                    KINESIS_MOCK)
            time.sleep(1 / args.per_sec)
        seen = {mode: {} for mode in modes}
        deadline = time.time() + 30
        while any(len(seen[m]) < args.records for m in modes) and time.time() < deadline:
            try:
                at, mode, line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            tag = line.split()[-1] if line.split() else ""
            if tag in sent:
                if tag in seen[mode]:
                    sys.exit("%s printed %s twice" % (mode, tag))
                seen[mode][tag] = at - sent[tag]
    finally:
        stop(processes, {})
    result = {"run": index, "records": args.records, "per_sec": args.per_sec, "shard": shard}
    for mode in modes:
        latencies = [1000 * v for v in seen[mode].values()]
        result[mode] = {
            "printed": len(latencies),
            "p50_ms": round(percentile(latencies, 50)) if latencies else None,
            "p90_ms": round(percentile(latencies, 90)) if latencies else None,
            "p99_ms": round(percentile(latencies, 99)) if latencies else None,
            "max_ms": round(max(latencies)) if latencies else None,
        }
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--per-sec", type=float, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    binary = example()
    ok = True
    for index in range(args.runs):
        result = run(binary, args, index)
        print(json.dumps(result), flush=True)
        ok &= all(result[m]["printed"] == args.records for m in ("polling", "fan_out"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
