#!/usr/bin/env python3
"""Writes the KPL-aggregated records the de-aggregation tests read (tests/data/kpl/), made by
the kinesis-aggregation project's Python producer, so that the format is checked against
code no one here wrote.

    python3 -m venv .venv-kpl && .venv-kpl/bin/pip install aws-kinesis-agg==1.2.3 six protobuf
    .venv-kpl/bin/python scripts/kpl_fixtures.py tests/data/kpl

Each file is one Kinesis record's data, as `PutRecord` would store it; `expected.json` lists
the user records each holds, as the same project's de-aggregator reads them back (`many.bin`
is checked against its rule here instead).
"""

import json
import os
import sys

from aws_kinesis_agg.aggregator import RecordAggregator
from aws_kinesis_agg.deaggregator import deaggregate_records


def aggregate(records):
    """One aggregated record of (partition key, explicit hash key or None, data) triples."""
    aggregator = RecordAggregator()
    for partition_key, explicit_hash_key, data in records:
        full = aggregator.add_user_record(partition_key, data, explicit_hash_key)
        assert full is None, "the fixture fits in one aggregate"
    return aggregator.clear_and_get().get_contents()[2]


def read_back(data):
    """The user records in `data`: the project's de-aggregator checks the magic and the digest
    and splits the records, and its protobuf module (`messages_pb2`) says which records carry
    an explicit hash key. (Its de-aggregator gives every record of an aggregate whose table is
    not empty the key at index 0, where KCL reads a record's key only if it has an index:
    KCL's reading is what consumers rely on, so the expected values follow it.)"""
    import base64

    from aws_kinesis_agg import messages_pb2

    record = {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": "outer",
            "sequenceNumber": "49590338271490256608559692538361571095921575989136588898",
            "data": base64.b64encode(data).decode(),
            "approximateArrivalTimestamp": 1.0,
        }
    }
    parsed = messages_pb2.AggregatedRecord()
    parsed.ParseFromString(data[4:-16])
    out = []
    for user, message in zip(deaggregate_records([record]), parsed.records):
        kinesis = user["kinesis"]
        has_key = message.HasField("explicit_hash_key_index")
        out.append(
            {
                "partition_key": kinesis["partitionKey"],
                "explicit_hash_key": kinesis.get("explicitHashKey") if has_key else None,
                "sub_sequence_number": kinesis.get("subSequenceNumber"),
                "data": base64.b64decode(kinesis["data"]).decode(),
            }
        )
    assert len(out) == len(parsed.records)
    return out


FIXTURES = {
    # Three user records, two partition keys (the table holds each once), one with an
    # explicit hash key.
    "three.bin": [
        ("pk-0", None, b"record-0"),
        ("pk-1", None, b"record-1"),
        ("pk-0", "12345678901234567890", b"record-2"),
    ],
    # Explicit hash keys 10, 20 and 30: a shard whose range ends at 25 holds the first two.
    "hashed.bin": [
        ("a", "10", b"ten"),
        ("b", "20", b"twenty"),
        ("c", "30", b"thirty"),
    ],
    # A thousand small records in one aggregate.
    "many.bin": [("key-%d" % (i % 7), None, b"%d" % i) for i in range(1000)],
}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/kpl"
    os.makedirs(out_dir, exist_ok=True)
    expected = {}
    for name, records in FIXTURES.items():
        data = aggregate(records)
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        read = read_back(data)
        if name == "many.bin":
            # The rule is in the test (record i: partition key key-(i % 7), data i); the
            # read-back is checked against it here.
            assert [r["data"] for r in read] == [str(i) for i in range(1000)]
            assert [r["partition_key"] for r in read] == ["key-%d" % (i % 7) for i in range(1000)]
            continue
        expected[name] = read
    # The first fixture with its digest's last byte changed: not a valid aggregate.
    data = bytearray(aggregate(FIXTURES["three.bin"]))
    data[-1] ^= 0xFF
    with open(os.path.join(out_dir, "bad-digest.bin"), "wb") as f:
        f.write(bytes(data))
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
