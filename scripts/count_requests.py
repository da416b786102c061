#!/usr/bin/env python3
"""A TCP proxy that counts the DynamoDB requests passing through it, by operation.

usage: count_requests.py LISTEN_PORT UPSTREAM_HOST:UPSTREAM_PORT REPORT_PATH

Every request carries an `X-Amz-Target: DynamoDB_20120810.<Operation>` header; the proxy
counts those headers in what the clients send, and rewrites REPORT_PATH (JSON: counts by
operation, and since when) every second. Binds to 127.0.0.1 only. Stop it with SIGTERM.
"""

import asyncio
import json
import re
import signal
import sys
import time

TARGET = re.compile(rb"x-amz-target:\s*DynamoDB_\d+\.(\w+)", re.IGNORECASE)


class Counter:
    def __init__(self):
        self.counts = {}
        self.since = time.time()

    def add(self, data):
        for match in TARGET.finditer(data):
            op = match.group(1).decode()
            self.counts[op] = self.counts.get(op, 0) + 1


async def pipe(reader, writer, counter=None):
    # Headers may be split across reads: keep the tail of the previous chunk.
    tail = b""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if counter is not None:
                counter.add(tail + data)
                tail = data[-64:] if not TARGET.search(data[-64:]) else b""
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main():
    listen, upstream, report = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    host, port = upstream.rsplit(":", 1)
    counter = Counter()

    async def handle(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, up_writer, counter), pipe(up_reader, client_writer)
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def write_report():
        while not stop.is_set():
            with open(report, "w") as out:
                json.dump({"since": counter.since, "at": time.time(), "counts": counter.counts}, out)
            await asyncio.sleep(1)

    writer = asyncio.create_task(write_report())
    async with server:
        await stop.wait()
    writer.cancel()


if __name__ == "__main__":
    asyncio.run(main())
