"""The production HTTP server of `regress serve`: waitress, with deadlines on reading a request.

Why waitress (docs/reliability.md, "The server"): it reads every request, headers and body, in one
non-blocking I/O loop and hands a worker thread only a request that has fully arrived. A client
that sends slowly (slowloris, a trickled body, a chunk that never comes) therefore holds a socket,
never a worker, and /healthz keeps its threads. gunicorn's gthread worker parses a request inside a
worker thread: 16 slow clients took all 2 × 8 threads and /healthz timed out (issue 41 item 3).
werkzeug's server de-chunked in a thread and crashed on a dropped chunk (item 1). waitress is pure
Python, has no dependencies and de-chunks itself, answering 400 to a malformed chunk size.

What waitress lacks is a deadline on a request that keeps arriving slowly: its `channel_timeout`
closes only idle connections, so one byte a second kept a socket for ever. `_DeadlineServer` adds
that: a request whose headers are not complete HEADER_TIMEOUT_S after its first byte, or whose body
is not complete REQUEST_TIMEOUT_S after it, is closed; CONNECTION_LIMIT bounds how many sockets
such clients can hold at once.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from regress.facts.errors import on_stop_signals
from regress.facts.escape import visible

HEADER_TIMEOUT_S = 10.0  # request line and headers: a few hundred bytes
# The whole request: a 64 MiB bundle at 0.5 MiB/s. A runner on a slower link compresses (gzip).
REQUEST_TIMEOUT_S = 120.0
IDLE_TIMEOUT_S = 30.0  # a keep-alive connection with no request in flight
CONNECTION_LIMIT = 1000  # sockets at once; past it new ones wait in the listen backlog
THREADS = 8  # requests handled at once (a request reaches a thread only once fully read)
CHECK_INTERVAL_S = 1  # how often (s) the deadlines are checked (waitress takes whole seconds)
STOP_GRACE_S = 10.0  # how long requests already in a worker thread may take to finish on a stop signal


class _TimedParser(HTTPRequestParser):  # type: ignore[misc]  # waitress has no type information
    """A request parser that remembers when its first byte arrived."""

    def __init__(self, adj: Adjustments) -> None:
        super().__init__(adj)
        self.started = time.monotonic()


class _TimedChannel(HTTPChannel):  # type: ignore[misc]  # waitress has no type information
    parser_class = _TimedParser


@dataclass(frozen=True)
class Limits:
    header_timeout_s: float = HEADER_TIMEOUT_S
    request_timeout_s: float = REQUEST_TIMEOUT_S
    idle_timeout_s: float = IDLE_TIMEOUT_S
    connection_limit: int = CONNECTION_LIMIT
    threads: int = THREADS


class _DeadlineServer(TcpWSGIServer):  # type: ignore[misc]  # waitress has no type information
    channel_class = _TimedChannel
    limits = Limits()

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # idle keep-alive connections
        mono = time.monotonic()
        for channel in list(self.active_channels.values()):
            request = getattr(channel, "request", None)  # the one still arriving, if any
            if request is None or request.completed:
                continue
            age = mono - getattr(request, "started", mono)
            if age > self.limits.request_timeout_s or (
                not request.headers_finished and age > self.limits.header_timeout_s
            ):
                channel.will_close = True  # the I/O loop closes it on its next pass

    stop_signal: int | None = None
    stops = 0

    def request_stop(self, signum: int, _frame: Any = None) -> None:
        """A stop signal's handler: the I/O loop ends on its next pass (a second signal ends the
        wait for answers in flight). It must not raise: the signal runs wherever the main thread
        is, often inside a channel's handler, and waitress's loop catches everything but
        KeyboardInterrupt/SystemExit there (`wasyncore.readwrite`), so a raised Interrupted was
        taken for that channel's error and the server kept serving."""
        self.stop_signal = signum
        self.stops += 1

    def _pass(self, timeout: float) -> None:
        self.asyncore.loop(timeout=timeout, map=self._map, use_poll=self.adj.asyncore_use_poll, count=1)

    def _answering(self) -> bool:
        """Whether a fully read request is queued, being served, or its answer not yet sent."""
        return any(ch.requests or ch.total_outbufs_len for ch in list(self.active_channels.values()))

    def serve_until_stopped(self) -> int:
        """Serves until a stop signal; returns its number. Then it accepts no connection, and the
        I/O loop runs on until every request already read has its answer sent (up to STOP_GRACE_S):
        closing at once cut those answers off and left worker threads writing to the closed
        wake-up pipe (a traceback on a stop under load)."""
        with on_stop_signals(self.request_stop):
            while self.stop_signal is None:
                self._pass(CHECK_INTERVAL_S)
            self.accepting = False
            ends = time.monotonic() + STOP_GRACE_S
            while self.stops == 1 and self._answering() and time.monotonic() < ends:
                self._pass(0.05)
        self.task_dispatcher.shutdown(cancel_pending=True, timeout=1)
        return self.stop_signal if self.stop_signal is not None else 0


def access_log(app: Any, stream: Any = None) -> Any:
    """One line per answer, `ADDR "METHOD PATH PROTOCOL" STATUS` (werkzeug's shape, which the drills
    count): waitress writes none of its own."""
    out = stream or sys.stderr

    def logged(environ: dict[str, Any], start_response: Any) -> Any:
        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            query = f"?{environ['QUERY_STRING']}" if environ.get("QUERY_STRING") else ""
            line = (
                f'{environ.get("REMOTE_ADDR", "-")} "{environ.get("REQUEST_METHOD")} '
                f'{environ.get("PATH_INFO", "")}{query} {environ.get("SERVER_PROTOCOL")}" {status[:3]}'
            )
            print(visible(line), file=out, flush=True)  # a path's ESC never reaches a terminal
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return logged


def make_server(app: Any, host: str, port: int, max_body_bytes: int, limits: Limits | None = None) -> Any:
    """A waitress server bound to host:port (port 0: a free one, see `.effective_port`);
    `.serve_until_stopped()` serves until a stop signal (`.run()` until `.close()`)."""
    limits = limits or Limits()
    app = access_log(app)
    adj = Adjustments(
        host=host,
        port=port,
        threads=limits.threads,
        connection_limit=limits.connection_limit,
        channel_timeout=int(max(1, limits.idle_timeout_s)),
        cleanup_interval=CHECK_INTERVAL_S,
        max_request_body_size=max_body_bytes,
        max_request_header_size=64 * 1024,
        asyncore_use_poll=True,  # select() fails past 1024 descriptors
        ident="regress",
        expose_tracebacks=False,
    )
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    server_class = type("RegressServer", (_DeadlineServer,), {"limits": limits})
    return server_class(app, {}, True, None, dispatcher=dispatcher, adj=adj, sockinfo=adj.listen[0])
