"""What the benchmark scripts of the Kinesis consumer share: Kinesis calls on kinesalite, a
stream created and waited for, and the example binary with its environment.

The emulators' ports are `scripts/emulators.sh`'s (override with SHARDLEASE_KINESALITE_ENDPOINT
and SHARDLEASE_DYNALITE_ENDPOINT); the example is looked for under CARGO_TARGET_DIR (default
`target`).
"""

import json
import os
import signal
import sys
import time
import urllib.request

KINESIS = os.environ.get("SHARDLEASE_KINESALITE_ENDPOINT", "http://127.0.0.1:4569")
# kinesis-mock (npm `kinesis-local`), for enhanced fan-out: its plain port.
KINESIS_MOCK = os.environ.get("SHARDLEASE_KINESIS_MOCK_ENDPOINT", "http://127.0.0.1:4570")
DYNAMO = os.environ.get("SHARDLEASE_DYNALITE_ENDPOINT", "http://127.0.0.1:4567")


def kinesis(action, body, endpoint=KINESIS):
    """One Kinesis API call on an emulator (kinesalite by default; they check that a signature
    is there, not its value)."""
    request = urllib.request.Request(
        endpoint,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.1",
            "X-Amz-Target": "Kinesis_20131202." + action,
            "X-Amz-Date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
            "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/kinesis/"
            "aws4_request, SignedHeaders=host, Signature=0",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"{}")


def create_stream(name, shards, endpoint=KINESIS):
    """Creates the stream with `shards` shards and waits until it is ACTIVE; returns its shards
    as (shard id, starting hash key), in hash key order."""
    kinesis("CreateStream", {"StreamName": name, "ShardCount": shards}, endpoint)
    for _ in range(200):
        summary = kinesis("DescribeStreamSummary", {"StreamName": name}, endpoint)
        if summary["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
            listed = kinesis("ListShards", {"StreamName": name}, endpoint)["Shards"]
            found = [(s["ShardId"], int(s["HashKeyRange"]["StartingHashKey"])) for s in listed]
            return sorted(found, key=lambda s: s[1])
        time.sleep(0.05)
    sys.exit("the stream did not become ACTIVE")


def example():
    """The path of the Kinesis consumer example, built beforehand."""
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    path = os.path.join(target, "debug", "examples", "kinesis_consumer")
    if not os.path.exists(path):
        sys.exit(path + " is missing: cargo build --all-features --example kinesis_consumer")
    return path


def example_env():
    """The example's environment: test credentials for the emulators, warnings only."""
    return dict(os.environ, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="test",
                AWS_SECRET_ACCESS_KEY="test", RUST_LOG="warn")


def stop(processes, outs):
    """Sends every process SIGTERM (they leave gracefully), waits for each, closes the outputs."""
    for process in processes.values():
        process.send_signal(signal.SIGTERM)
    for process in processes.values():
        process.wait(timeout=60)
    for out in outs.values():
        out.close()
