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
  late MS         deliver requests late: each connection open when the mode was written (or
                  written again) holds the first request it carries after that for MS
                  milliseconds, then delivers it upstream (it is applied then) with whatever
                  followed it on that connection (TCP keeps the order); connections opened
                  since pass at once. A client that gave up on the request (its timeout is
                  below MS) retries on a new connection, which passes: the held request lands
                  after the retry and after the client's later requests. Its answer goes back
                  if the client is still connected; if it has closed, the proxy waits for the
                  answer (up to 10 s) before closing upstream, so that the request is applied
                  whole. If the server closed the connection while the request was held
                  (dynalite closed one idle for 7 s, not one idle for 5.2 s), or closed it as
                  the request arrived, unanswered, the request goes upstream on a new
                  connection of its own, as one that waited in a queue in front of the server.
                  Writing the mode again arms it again for the connections open then.
                  One line per late request on stderr: "late delivered conn=N held_ms=MS
                  bytes=B request=WHAT" when it goes upstream, "late answered conn=N
                  answer=FIRST-LINE" (or "late unanswered") when its answer came, and "late
                  redelivered conn=N" when it goes again after a close instead of an answer

  scripts/fault_proxy.py --listen 7001 --upstream 127.0.0.1:4567 --control /tmp/w1.mode

Only loopback addresses are accepted, for the listener and the upstream. Stops on SIGTERM.
"""

import argparse
import asyncio
import ipaddress
import itertools
import os
import re
import signal
import sys

POLL = 0.05
# How long a late request's connection waits upstream for its answer once its client is gone.
LATE_ANSWER_WAIT = 10.0


class Control:
    """The control file's mode, cached by modification time."""

    def __init__(self, path):
        self.path = path
        self.stamp = None
        self.mode = ("pass", 0.0)
        # How many times "late" was written: a connection open before the last time holds
        # its next request.
        self.arms = 0

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
            if name in ("delay", "late"):
                self.mode = (name, float(words[1]) / 1000 if len(words) > 1 else 0.0)
                if name == "late":
                    self.arms += 1
            elif name in ("pass", "hold", "never-answer", "refuse"):
                self.mode = (name, 0.0)
            else:
                print(f"fault_proxy: unknown mode {name!r}; passing", file=sys.stderr)
                self.mode = ("pass", 0.0)
        return self.mode


class Connection:
    ids = itertools.count(1)

    def __init__(self, arms):
        self.id = next(Connection.ids)
        self.poisoned = False
        self.held = False
        self.writers = []
        # The arming of "late" this connection has already held a request for (or was opened
        # after), and whether a late request waits for its answer.
        self.armed = arms
        self.late_waiting = False
        self.late_answered = asyncio.Event()
        self.late_request = None
        self.upstream = None  # (host, port)
        self.upstream_closed = False

    def close(self):
        for w in self.writers:
            w.close()


def log(line):
    print(f"fault_proxy: {line}", file=sys.stderr, flush=True)


def request_name(data):
    """What a request asks, for the log: the DynamoDB operation (X-Amz-Target), or the Redis
    command (the first bulk string of a RESP array)."""
    target = re.search(rb"x-amz-target:\s*[\w.]*\.(\w+)", data, re.IGNORECASE)
    if target:
        return target.group(1).decode()
    if data.startswith(b"*"):
        parts = data.split(b"\r\n", 3)
        if len(parts) >= 3:
            return parts[2].decode(errors="replace")
    return "?"


def answer_summary(data):
    """An answer's first line, and the DynamoDB error type (ConditionalCheckFailedException...)
    when its body names one."""
    first = data.split(b"\r\n", 1)[0][:60].decode(errors="replace")
    error = re.search(rb'"__type"\s*:\s*"[^"#]*#(\w+)"', data)
    return f"answer={first!r}" + (f" error={error.group(1).decode()}" if error else "")


async def deliver_late(data, delay, conn, writer):
    """Holds one request for `delay` s, then sends it upstream. Whatever the client sent after
    it on this connection waits in the socket meanwhile, and follows it."""
    await asyncio.sleep(delay)
    if writer.is_closing():
        log(f"late dropped conn={conn.id} (the connection was closed meanwhile)")
        return
    delivered = (f"late delivered conn={conn.id} held_ms={delay * 1000:.0f} bytes={len(data)} "
                 f"request={request_name(data)}")
    if conn.upstream_closed:
        await deliver_alone(data, conn, delivered)
        return
    conn.late_waiting = True
    conn.late_request = data
    conn.late_answered.clear()
    writer.write(data)
    await writer.drain()
    log(delivered)


# Late requests sent again on a connection of their own (kept here until they are answered).
REDELIVERIES = set()


async def deliver_alone(data, conn, delivered):
    """Sends a late request on a new upstream connection (the server closed the one it came
    on while it was held, or as it arrived), logs its answer and closes."""
    try:
        reader, writer = await asyncio.open_connection(*conn.upstream)
    except OSError as err:
        log(f"late dropped conn={conn.id} (no new connection upstream: {err})")
        return
    try:
        writer.write(data)
        await writer.drain()
        log(f"{delivered} on=new-connection")
        answer = await asyncio.wait_for(reader.read(65536), LATE_ANSWER_WAIT)
        if answer:
            log(f"late answered conn={conn.id} {answer_summary(answer)}")
        else:
            log(f"late unanswered conn={conn.id} (closed)")
    except asyncio.TimeoutError:
        log(f"late unanswered conn={conn.id} after {LATE_ANSWER_WAIT:.0f} s")
    except ConnectionError as err:
        log(f"late unanswered conn={conn.id} ({err})")
    finally:
        writer.close()


async def pump(reader, writer, control, conn, answers):
    """Copies one direction; `answers` is true for upstream -> client."""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                conn.upstream_closed = conn.upstream_closed or answers
                if answers and conn.late_waiting:
                    # Closed as the late request arrived (an idle timeout that fired just
                    # then): it was not applied; it goes again, alone.
                    conn.late_waiting = False
                    conn.late_answered.set()
                    task = asyncio.create_task(deliver_alone(
                        conn.late_request, conn, f"late redelivered conn={conn.id} (the server "
                        "closed the connection instead of answering)"))
                    REDELIVERIES.add(task)
                    task.add_done_callback(REDELIVERIES.discard)
                break
            mode, arg = control.read()
            if mode == "refuse":
                conn.close()
                return
            if answers and conn.late_waiting:
                conn.late_waiting = False
                conn.late_answered.set()
                log(f"late answered conn={conn.id} {answer_summary(data)}")
            if mode == "late" and not answers and control.arms > conn.armed:
                conn.armed = control.arms
                await deliver_late(data, arg, conn, writer)
                continue
            if answers and writer.is_closing():
                continue  # the client has gone (it gave up on a late request)
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
        if not answers and conn.late_waiting:
            # The client is gone; the late request is upstream: let it be answered (applied
            # whole) before closing.
            try:
                await asyncio.wait_for(conn.late_answered.wait(), LATE_ANSWER_WAIT)
            except asyncio.TimeoutError:
                conn.late_waiting = False
                log(f"late unanswered conn={conn.id} after {LATE_ANSWER_WAIT:.0f} s")
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
    conn = Connection(control.arms)
    conn.upstream = upstream
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
