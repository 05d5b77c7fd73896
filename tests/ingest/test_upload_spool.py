"""The upload spool against the real service: one bundle answered 500 on every try (a fault injector
in front of the app) never blocks the others, a refused bundle moves to rejected/ with the reason,
and the client checks the schema before sending. SQLite and PostgreSQL (the `db_url` fixture)."""

from __future__ import annotations

import copy
import gzip
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ingest_bundles import make_bundle
from ingest_client import FAST, post, real, set_at
from ingest_server import Service, start_server, stop_server
from sqlalchemy import func, select
from werkzeug.serving import make_server

from regress.run.upload import flush_spool, spooled_files, upload_bundles
from regress.server.tokens import create_token
from regress.store import Run


@pytest.fixture
def poisoned(db_url: str) -> Iterator[tuple[str, str]]:
    """The real service behind a fault injector that answers 500 to one run id, every time."""
    server, thread, app = start_server(db_url)
    poison = "poison00poison00"

    def injector(environ: dict[str, Any], start_response: Any) -> Any:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        raw = gzip.decompress(body) if environ.get("HTTP_CONTENT_ENCODING") == "gzip" else body
        if poison.encode() in raw:
            start_response("500 INTERNAL SERVER ERROR", [("Content-Type", "application/json")])
            return [b'{"error": "injected fault", "status": 500}']
        import io

        environ["wsgi.input"] = io.BytesIO(body)
        return app(environ, start_response)

    front = make_server("127.0.0.1", 0, injector, threaded=True)
    front_thread = threading.Thread(target=front.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    front_thread.start()
    try:
        yield f"http://127.0.0.1:{front.server_port}", poison
    finally:
        front.shutdown()
        front.server_close()
        stop_server(server, thread, app)


def test_poison_bundle_does_not_block_the_others(
    poisoned: tuple[str, str], db_url: str, tmp_path: Path
) -> None:
    from regress.store.repo import open_store

    url, poison = poisoned
    store = open_store(db_url)
    token = create_token(store, "h200-01")[1]
    spool = tmp_path / "spool"
    bad, good, later = make_bundle(poison), make_bundle(), make_bundle()
    paths = [p for b in (bad, good) for p in [tmp_path / f"{b['run']['id']}.json"]]
    for b, p in zip((bad, good), paths, strict=True):
        p.write_text(json.dumps(b))
    report = upload_bundles(paths, url, token, spool, policy=FAST)
    assert [o.state for o in report.outcomes] == ["spooled", "stored"]
    assert [p.stem for p in spooled_files(spool)] == [poison]
    # The next night: the poison bundle is inside its backoff, the new one goes straight out.
    (tmp_path / "later.json").write_text(json.dumps(later))
    assert upload_bundles([tmp_path / "later.json"], url, token, spool, policy=FAST).ok
    waiting = flush_spool(url, token, spool, policy=FAST)
    assert [o.state for o in waiting.outcomes] == ["spooled"] and "waiting" in waiting.outcomes[0].message
    forced = flush_spool(url, token, spool, policy=FAST, force=True)  # `regress upload --flush`
    assert [(o.run_id, o.state) for o in forced.outcomes] == [(poison, "spooled")]
    assert "try 2" in forced.outcomes[0].message
    with store.reader() as session:
        assert sorted(session.scalars(select(Run.id))) == sorted([good["run"]["id"], later["run"]["id"]])
    store.engine.dispose()


def test_refused_bundle_moves_to_rejected_with_the_reason(service: Service, tmp_path: Path) -> None:
    token = service.token("h200-01")
    spool = tmp_path / "spool"
    good = make_bundle()
    stored = make_bundle()
    assert post(service, stored, token).status_code == 201
    clash = copy.deepcopy(stored)
    clash["results"][0]["metrics"]["p50_ms"] += 1.0
    paths = []
    for i, b in enumerate((clash, good)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(b))
    report = upload_bundles(paths, service.url, token, spool, policy=FAST)
    assert [(o.state, o.status) for o in report.outcomes] == [("rejected", 409), ("stored", 201)]
    reason = (spool / "rejected" / f"{stored['run']['id']}.reason.txt").read_text()
    assert reason.startswith("HTTP 409") and "different content" in reason
    assert spooled_files(spool) == []


def test_upload_checks_the_schema_before_sending(service: Service, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(set_at(real(), "run.backend", "x" * 17)))
    report = upload_bundles([bad], service.url, service.token("h200-01"), tmp_path / "spool", policy=FAST)
    assert [o.state for o in report.outcomes] == ["invalid"]
    assert "bundle.run.backend" in report.outcomes[0].message
    with service.store.reader() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0
