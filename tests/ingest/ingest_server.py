"""A real results service on 127.0.0.1 (werkzeug, threaded, on a free or given port)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server

from regress.server import create_app
from regress.server.tokens import create_token
from regress.store.repo import Store

# Small enough that the oversized-bundle test stays fast, large enough for a realistic bundle.
TEST_LIMIT_BYTES = 512 * 1024


@dataclass
class Service:
    url: str
    store: Store
    server: BaseWSGIServer | None

    def token(self, runner: str) -> str:
        return create_token(self.store, runner)[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(db_url: str, port: int = 0) -> tuple[BaseWSGIServer, threading.Thread, Any]:
    app = create_app({"DATABASE_URL": db_url, "MAX_CONTENT_LENGTH": TEST_LIMIT_BYTES})
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread, app


def stop_server(server: BaseWSGIServer, thread: threading.Thread, app: Any) -> None:
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
    app.extensions["regress.store"].engine.dispose()
