"""Fixtures: a real results service on 127.0.0.1 per test (helpers in ingest_server.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ingest_server import Service, start_server, stop_server
from werkzeug.serving import BaseWSGIServer

from regress.store.repo import Store


@pytest.fixture
def service(db_url: str, store: Store) -> Iterator[Service]:
    server, thread, app = start_server(db_url)
    try:
        yield Service(f"http://127.0.0.1:{server.server_port}", store, server)
    finally:
        stop_server(server, thread, app)


@pytest.fixture
def server_factory(db_url: str) -> Iterator[Callable[[int], str]]:
    """Starts a service on a given port later in the test (the 'service comes back' case)."""
    started: list[tuple[BaseWSGIServer, threading.Thread, Any]] = []

    def start(port: int) -> str:
        started.append(start_server(db_url, port))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread, app in started:
        stop_server(server, thread, app)
