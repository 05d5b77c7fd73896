"""Issue 41 items 1-4: requests that killed or starved `regress serve`, against the real process on
loopback (the default server, waitress with read deadlines; regress/server/wsgi.py).

Every loop here is bounded in count and in time; a wait that runs out fails the test."""

from __future__ import annotations

import contextlib
import gzip
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from ingest_server import free_port

HEADER_TIMEOUT_S = 5.0  # longer than the 3 s attack below
REQUEST_TIMEOUT_S = 8.0


class Served:
    def __init__(self, tmp: Path, *, dev_server: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        db = f"sqlite:///{tmp / 'served.db'}"
        argv = [sys.executable, "-m", "regress", "serve", "--port", str(self.port), "--db", db]
        argv += ["--max-bundle-mb", "16", "--header-timeout", str(HEADER_TIMEOUT_S)]
        argv += ["--request-timeout", str(REQUEST_TIMEOUT_S)]
        argv += ["--dev-server"] if dev_server else []
        self.log = tmp / "serve.log"
        self.proc = subprocess.Popen(argv, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"{self.url}/healthz", timeout=2).raise_for_status()
                break
            except requests.ConnectionError:
                assert self.proc.poll() is None, self.log.read_text()
                assert time.monotonic() < deadline, "regress serve did not come up"
                time.sleep(0.2)
        self.token = subprocess.run(
            [sys.executable, "-m", "regress", "token", "create", "runner-1", "--db", db],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def alive(self) -> bool:
        return self.proc.poll() is None and requests.get(f"{self.url}/healthz", timeout=5).status_code == 200

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return sock

    def head(self, extra: str = "", method: str = "POST /api/v1/runs") -> bytes:
        return (
            f"{method} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n"
        ).encode()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    svc = Served(tmp_path_factory.mktemp("served"))
    try:
        yield svc
    finally:
        svc.proc.terminate()
        svc.proc.wait(timeout=30)


def _status(sock: socket.socket) -> int:
    answer = b""
    while b"\r\n" not in answer:
        piece = sock.recv(4096)
        if not piece:
            break
        answer += piece
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def _drop_large_chunks(served: Served, *, half_close: bool) -> list[int]:
    """Item 1: chunked POSTs (valid token) that declare one chunk larger than the server reads at a
    time (it reads 1 MiB), send 4 KiB of it and end the connection. The answers' statuses (0: none).

    Under werkzeug (the default before issue 41, `--dev-server` now) this was SIGSEGV: its
    DechunkedInput.readinto assigns the short read into the bytearray CPython's RawIOBase.read
    handed it (which shrinks it) and still returns the length it asked for, so CPython copies that
    many bytes out of the shrunk buffer: a heap over-read that killed the process (3 of 3 here with a
    2 MiB chunk; a chunk no larger than the read, as this test sent before, ends in an OSError on
    the missing terminator first and never crashed, which is why it passed on main), or a 413 for
    4 KiB when the read stays in mapped memory."""
    statuses = []
    for size in (0x200000, 0x1000000, 0x100000):  # 2 MiB, 16 MiB (the limit), 1 MiB
        if served.proc.poll() is not None:
            break
        with served.connect() as sock:
            sock.sendall(served.head("Transfer-Encoding: chunked\r\n"))
            sock.sendall(f"{size:x}\r\n".encode() + b"{" * 4096)
            if half_close:  # a client still reading: the answer, if any, is seen
                sock.shutdown(socket.SHUT_WR)
                statuses.append(_status(sock))
        time.sleep(0.2)
    return statuses


def test_a_dropped_large_chunk_does_not_kill_the_server(served: Served) -> None:
    for half_close in (False, True, False, True):
        statuses = _drop_large_chunks(served, half_close=half_close)
        assert served.alive(), served.log.read_text()[-2000:]
        # never an answer about bytes the client did not send (413 for a 4 KiB body), never a 5xx
        assert all(code in (0, 400, 408) for code in statuses), statuses


@pytest.mark.xfail(reason="the old default path (werkzeug, now --dev-server): SIGSEGV or a 413 for 4 KiB")
def test_the_same_chunks_break_the_dev_server(tmp_path: Path) -> None:
    """The attack above against `regress serve --dev-server` (werkzeug), the server regress ran by
    default before issue 41: it fails there, which is why the development server is only a flag."""
    served = Served(tmp_path, dev_server=True)
    try:
        statuses = _drop_large_chunks(served, half_close=True)
        assert served.proc.poll() is None, f"exit {served.proc.returncode}"  # -11 (SIGSEGV) here
        assert served.alive()
        assert all(code in (0, 400, 408) for code in statuses), statuses
    finally:
        served.proc.kill()
        served.proc.wait(timeout=30)


@pytest.mark.parametrize("size", [b"ZZ", b"-5", b"1x", b""])
def test_a_malformed_chunk_size_is_400(served: Served, size: bytes) -> None:
    # Item 2: 500 under werkzeug and gunicorn.
    with served.connect() as sock:
        sock.sendall(served.head("Transfer-Encoding: chunked\r\n") + size + b"\r\n{}\r\n0\r\n\r\n")
        assert _status(sock) == 400
    assert served.alive()


def _slow_attack(
    served: Served, loris_n: int, tricklers_n: int, rounds: int
) -> tuple[list[socket.socket], float]:
    """`loris_n` slowloris connections (headers never finished) and `tricklers_n` clients trickling a
    body, every attacker sending a byte each round, /healthz asked once a round: its median wait must
    stay under the issue's 1 s. Returns the attackers' sockets and when the attack began."""
    loris = []
    for _ in range(loris_n):
        sock = served.connect()
        sock.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        loris.append(sock)
    tricklers = []
    for i in range(tricklers_n):
        sock = served.connect()
        token = "wrong" if i % 2 else served.token
        sock.sendall(
            f"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            "Content-Length: 100000\r\n\r\n".encode()
        )
        tricklers.append(sock)
    waits = []
    started = time.monotonic()
    for _ in range(rounds):  # every attacker sending a byte each round, 0.5 s apart
        for sock, byte in [(sock, b"X") for sock in loris] + [(sock, b"{") for sock in tricklers]:
            with contextlib.suppress(OSError):  # one the server closed early is counted below
                sock.sendall(byte)
        t0 = time.monotonic()
        assert requests.get(f"{served.url}/healthz", timeout=5).status_code == 200
        waits.append(time.monotonic() - t0)
        time.sleep(0.5)
    assert sorted(waits)[len(waits) // 2] < 1.0, waits  # the bound: /healthz within 1 s
    return loris + tricklers, started


def test_a_few_slow_clients_leave_healthz_answering(served: Served) -> None:
    """The plain tier's twin of the next test: a smaller attack, without waiting out its deadline."""
    socks, _ = _slow_attack(served, 20, 6, 2)
    for sock in socks:
        sock.close()


@pytest.mark.slow  # waits out the request deadline (8 s); its twin above runs in plain pytest
def test_slow_clients_leave_healthz_answering_and_are_closed(served: Served) -> None:
    # Item 3: 100 slowloris connections (headers never finished) and 30 clients trickling a body
    # kept every thread; /healthz timed out. They now hold sockets only, and lose them at a deadline.
    socks, started = _slow_attack(served, 100, 30, 6)  # ~3 s of attack
    # Each attacker is closed by the server once its deadline passes (headers 5 s, request 8 s).
    closed = 0
    deadline = started + REQUEST_TIMEOUT_S + 10
    for sock in socks:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            while True:
                sock.sendall(b"X")
                if not sock.recv(65536):
                    closed += 1
                    break
        except (BrokenPipeError, ConnectionResetError):
            closed += 1
        except TimeoutError:
            pass
        finally:
            sock.close()
    assert closed == 130
    assert served.alive()


def test_many_empty_gzip_members_are_refused_quickly(served: Served) -> None:
    # Item 4: 1 / 2 / 4 MiB of empty members took 1.2 / 9.6 / 44 s (quadratic); 64 MiB hours.
    body = gzip.compress(b"", mtime=0) * (4 * 1024 * 1024 // 20)
    headers = {"Authorization": f"Bearer {served.token}", "Content-Encoding": "gzip"}
    # 60 s is a bound on the wait, not a measurement: on main this body took about 44 s of CPU.
    resp = requests.post(f"{served.url}/api/v1/runs", data=body, headers=headers, timeout=60)
    assert resp.status_code == 400
    assert "gzip members" in resp.json()["error"]
    parts = [gzip.compress(part, mtime=0) for part in (b'{"schema"', b": ", b"1}")]
    resp = requests.post(f"{served.url}/api/v1/runs", data=b"".join(parts), headers=headers, timeout=10)
    assert resp.status_code == 400 and "invalid bundle" in resp.json()["error"]  # a few members: read


def test_the_dev_server_is_only_a_flag(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "regress", "serve", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--dev-server" in out and "--request-timeout" in out
