#!/usr/bin/env python3
"""A small TCP fault proxy for chaos runs: one listening port on 127.0.0.1 forwarding to one
upstream, with a mode read from a control file (its first word; re-read on every chunk, so a
change takes effect at once on open connections too):

  pass            forward both ways (also the mode when the file is missing or empty)
  delay MS        forward both ways, each chunk MS milliseconds late
  hold            hold connections open without answering: requests are swallowed (never
                  applied), nothing comes back, and a connection that swallowed a request stays
                  that way even after the mode changes (a half-open connection); new
                  connections made after the mode changed work
  never-answer    forward requests upstream (they are applied) but swallow every answer; a
                  connection that swallowed an answer never answers again (its framing is
                  broken), even after the mode changes: the client must time out by itself
  refuse          close open connections and refuse new ones (a partition that resets)

  scripts/fault_proxy.py --listen 7001 --upstream 127.0.0.1:4567 --control /tmp/w1.mode

Only loopback addresses are accepted, for the listener and the upstream. Stops on SIGTERM.
"""

import argparse
import asyncio
import ipaddress
import os
import signal
import sys

POLL = 0.05


class Control:
    """The control file's mode, cached by modification time."""

    def __init__(self, path):
        self.path = path
        self.stamp = None
        self.mode = ("pass", 0.0)

    def read(self):
        try:
            stamp = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            self.stamp, self.mode = None, ("pass", 0.0)
            return self.mode
        if stamp != self.stamp:
            self.stamp = stamp
            with open(self.path) as f:
                words = f.read().split()
            name = words[0] if words else "pass"
            if name == "delay":
                self.mode = ("delay", float(words[1]) / 1000 if len(words) > 1 else 0.0)
            elif name in ("pass", "hold", "never-answer", "refuse"):
                self.mode = (name, 0.0)
            else:
                print(f"fault_proxy: unknown mode {name!r}; passing", file=sys.stderr)
                self.mode = ("pass", 0.0)
        return self.mode


class Connection:
    def __init__(self):
        self.poisoned = False
        self.held = False
        self.writers = []

    def close(self):
        for w in self.writers:
            w.close()


async def pump(reader, writer, control, conn, answers):
    """Copies one direction; `answers` is true for upstream -> client."""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            mode, arg = control.read()
            if mode == "refuse":
                conn.close()
                return
            if (mode == "never-answer" and answers) or mode == "hold":
                conn.poisoned = True
            if conn.poisoned and (answers or mode == "hold" or conn.held):
                # Swallowed. A held connection swallows its requests for good.
                conn.held = conn.held or mode == "hold"
                continue
            if mode == "delay":
                await asyncio.sleep(arg)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        # A poisoned connection stays open towards the client: it never answers, never closes.
        if not conn.poisoned:
            writer.close()


async def handle(client_reader, client_writer, control, upstream, conns):
    mode, _ = control.read()
    if mode == "refuse":
        client_writer.close()
        return
    try:
        up_reader, up_writer = await asyncio.open_connection(*upstream)
    except OSError:
        client_writer.close()
        return
    conn = Connection()
    conn.writers = [client_writer, up_writer]
    conns.add(conn)
    try:
        await asyncio.gather(
            pump(client_reader, up_writer, control, conn, answers=False),
            pump(up_reader, client_writer, control, conn, answers=True),
        )
    finally:
        conns.discard(conn)


async def watch_refuse(control, conns):
    while True:
        if control.read()[0] == "refuse":
            for conn in list(conns):
                conn.close()
        await asyncio.sleep(POLL)


def loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    p.add_argument("--upstream", required=True, help="HOST:PORT (loopback only)")
    p.add_argument("--control", required=True, help="file holding the mode")
    args = p.parse_args()
    host, _, port = args.upstream.rpartition(":")
    if not loopback(host):
        sys.exit(f"fault_proxy: upstream {host} is not a loopback address")
    control = Control(args.control)
    conns = set()
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, control, (host, int(port)), conns), "127.0.0.1", args.listen
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(watch_refuse(control, conns))
    async with server:
        await stop.wait()
    watcher.cancel()


if __name__ == "__main__":
    asyncio.run(main())
