"""`regress serve` stops on a stop signal wherever the signal finds its I/O loop.

The signal's handler runs in the main thread at whatever it is doing; under load that is often a
channel's read or write handler rather than the wait in poll(). waitress's loop catches everything
there but KeyboardInterrupt and SystemExit (`wasyncore.readwrite`), so the Interrupted the command
raised was taken for that one channel's error and the server kept serving: CI saw `regress serve`
outlive SIGTERM by 30 s, and a traceback from worker threads writing to the closed wake-up pipe.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any

import pytest

from regress.server.wsgi import make_server


def _ok(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    time.sleep(0.3)  # still in its worker thread when the signal arrives
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def _get(port: int, answers: list[bytes]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answers.append(s.recv(4096))


def test_a_stop_signal_inside_a_channel_handler_stops_the_server(capfd: pytest.CaptureFixture[str]) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed only in the main thread")
    server = make_server(_ok, "127.0.0.1", 0, 1 << 20)
    delivered: list[float] = []

    class SignalledInTheHandler(server.channel_class):  # type: ignore[name-defined,misc]
        """Sends SIGTERM from inside the I/O loop's read handler (after the request is read), the
        one place where the race CI lost can be made certain."""

        def handle_read(self) -> None:
            super().handle_read()
            if not delivered and self.requests:
                delivered.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGTERM)

    server.channel_class = SignalledInTheHandler
    answers: list[bytes] = []
    client = threading.Thread(target=_get, args=(server.effective_port, answers), daemon=True)
    watchdog = threading.Timer(20, server.request_stop, args=(0,))  # the old loop never ends: fail, not hang
    client.start()
    watchdog.start()
    try:
        signum = server.serve_until_stopped()
    finally:
        watchdog.cancel()
        server.close()
    client.join(10)
    assert delivered, "the request never reached the server"
    assert signum == signal.SIGTERM, f"the server did not stop on the signal (stopped by {signum})"
    assert time.monotonic() - delivered[0] < 10
    assert answers and answers[0].startswith(b"HTTP/1.1 200"), answers  # the request in flight finished
    assert "Traceback" not in capfd.readouterr().err
