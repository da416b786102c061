"""Runs moto's server with one request at a time.

moto serves requests on many threads and does not lock a DynamoDB item between checking a
condition expression and applying the write, so two concurrent conditional writes on one item
can both succeed (seen with 16 concurrent takers of one lease, moto 5.2.5). DynamoDB applies
each single-item write atomically. This wrapper keeps moto's threads for I/O but runs the
application under one lock, which restores per-item atomicity. Arguments are moto_server's.
"""

import sys
import threading

import moto.server

_lock = threading.Lock()
_Dispatcher = moto.server.DomainDispatcherApplication


class SerialDispatcher(_Dispatcher):
    def __call__(self, environ, start_response):
        with _lock:
            # Materialise the body under the lock: WSGI apps may return lazy iterables.
            return list(super().__call__(environ, start_response))


moto.server.DomainDispatcherApplication = SerialDispatcher

if __name__ == "__main__":
    sys.exit(moto.server.main())
