"""Issue 41 items 20, 21: the upload client took any HTTP 200 for "stored" and deleted the spooled
bundle (an HTML maintenance page counted as a duplicate), had no overall deadline (one attempt held
150 s against a 60 s timeout) and accepted a torn answer. Against real HTTP servers on loopback
that answer wrongly, the bundle now stays in the spool; against the real service it is stored."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ingest_bundles import make_bundle
from ingest_server import Service

from regress.facts.bundle import write_bundle
from regress.run.upload import RetryPolicy, spooled_files, upload_bundles

POLICY = RetryPolicy(attempts=2, base_s=0.01, cap_s=0.02, timeout_s=2, deadline_s=6)
TOKEN = "r" * 40


def _serve(answer: Callable[[BaseHTTPRequestHandler, dict], None]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            answer(self, json.loads(body))

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _reply(handler: BaseHTTPRequestHandler, body: bytes, length: int | None = None, ctype: str = "") -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", ctype or "application/json")
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    handler.end_headers()
    handler.wfile.write(body)
    handler.wfile.flush()


def html_page(h: BaseHTTPRequestHandler, _doc: dict) -> None:
    _reply(h, b"<html><body>Down for maintenance</body></html>", ctype="text/html")


def other_run(h: BaseHTTPRequestHandler, _doc: dict) -> None:
    _reply(h, json.dumps({"run_id": "somebody-else", "created": False}).encode())


def no_digest(h: BaseHTTPRequestHandler, doc: dict) -> None:
    _reply(h, json.dumps({"run_id": doc["run"]["id"], "created": False}).encode())


def torn(h: BaseHTTPRequestHandler, doc: dict) -> None:
    body = json.dumps({"run_id": doc["run"]["id"], "created": True}).encode()
    _reply(h, body[:10], length=len(body))  # declared whole, cut off
    h.connection.shutdown(socket.SHUT_RDWR)


def dripped(h: BaseHTTPRequestHandler, doc: dict) -> None:
    body = json.dumps({"run_id": doc["run"]["id"], "created": True}).encode()
    h.send_response(200)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    for i in range(len(body)):  # a byte every 0.3 s: each read is quick, the whole is not
        try:
            h.wfile.write(body[i : i + 1])
            h.wfile.flush()
        except OSError:
            return
        time.sleep(0.3)


# dripped waits out two attempts' timeouts (~4 s): CI's full tier; torn is its plain-tier twin (a
# body that never arrives whole)
@pytest.mark.parametrize(
    "answer", [html_page, other_run, no_digest, torn, pytest.param(dripped, marks=pytest.mark.slow)]
)
def test_an_answer_that_does_not_name_the_stored_bundle_keeps_it(
    answer: Callable[[BaseHTTPRequestHandler, dict], None], tmp_path: Path
) -> None:
    path = write_bundle(make_bundle(), tmp_path / "out")
    spool = tmp_path / "spool"
    for url in _serve(answer):
        started = time.monotonic()
        report = upload_bundles([path], url, TOKEN, spool, policy=POLICY)
        took = time.monotonic() - started
    assert [o.state for o in report.outcomes] == ["spooled"], report.lines()
    assert len(spooled_files(spool)) == 1
    assert not report.ok
    assert took < POLICY.deadline_s + 3  # the overall deadline bounds it (dripped: 30 s on main)


def test_the_real_service_answer_confirms_the_bundle(service: Service, tmp_path: Path) -> None:
    path = write_bundle(make_bundle(), tmp_path / "out")
    report = upload_bundles([path], service.url, service.token("r1"), tmp_path / "spool", policy=POLICY)
    assert [o.state for o in report.outcomes] == ["stored"] and spooled_files(tmp_path / "spool") == []
