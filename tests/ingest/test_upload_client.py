"""`regress upload` against a real service: spool while it is down, flush when it is back."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from ingest_bundles import conflicting, make_bundle
from ingest_server import TEST_LIMIT_BYTES, Service, free_port
from sqlalchemy import func, select

from regress.cli import main
from regress.facts.bundle import write_bundle
from regress.run.upload import RetryPolicy, flush_spool, spooled_files, upload_bundles
from regress.server.tokens import create_token
from regress.store import Run
from regress.store.repo import open_store

FAST = RetryPolicy(attempts=3, base_s=0.01, cap_s=0.05, timeout_s=10)


def write(tmp: Path, bundles: list[dict[str, Any]]) -> list[Path]:
    return [write_bundle(b, tmp / "out") for b in bundles]


def stored_ids(store_url_or_service: Any) -> list[str]:
    store = store_url_or_service.store
    with store.reader() as session:
        return sorted(session.scalars(select(Run.id)))


def test_upload_then_duplicate_leaves_nothing_spooled(service: Service, tmp_path: Path) -> None:
    token = service.token("mi300x-01")
    paths = write(tmp_path, [make_bundle(), make_bundle()])
    spool = tmp_path / "spool"
    report = upload_bundles(paths, service.url, token, spool, policy=FAST)
    assert report.ok and len(report.stored) == 2
    assert [o.state for o in report.outcomes] == ["stored", "stored"]
    again = upload_bundles(paths, service.url, token, spool, policy=FAST)
    assert [o.state for o in again.outcomes] == ["duplicate", "duplicate"]
    assert spooled_files(spool) == []
    assert len(stored_ids(service)) == 2


def test_refused_bundles_move_aside(service: Service, tmp_path: Path) -> None:
    token = service.token("mi300x-01")
    first = make_bundle()
    assert upload_bundles(write(tmp_path, [first]), service.url, token, tmp_path / "spool").ok
    clash = conflicting(first)
    big = make_bundle()
    for res in big["results"][:12:2]:  # over the body limit, within the samples per result
        res["samples"]["time_ms"] = [float(i + 1) / 7 for i in range(TEST_LIMIT_BYTES // 32)]
    (tmp_path / "bad.json").write_text("{}")
    paths = [*write(tmp_path / "c", [clash]), *write(tmp_path / "b", [big]), tmp_path / "bad.json"]
    report = upload_bundles(paths, service.url, token, tmp_path / "spool", policy=FAST)
    assert [(o.state, o.status) for o in report.outcomes] == [
        ("invalid", None),
        ("rejected", 409),
        ("rejected", 413),
    ]
    assert spooled_files(tmp_path / "spool") == []  # a flush will not resend them forever
    rejected = tmp_path / "spool" / "rejected"
    assert (rejected / f"{clash['run']['id']}.reason.txt").read_text().startswith("HTTP 409")
    assert stored_ids(service) == [first["run"]["id"]]


def test_revoked_token_keeps_bundle_spooled(service: Service, tmp_path: Path) -> None:
    token = service.token("mi300x-01")
    from regress.server.tokens import revoke_tokens

    revoke_tokens(service.store, runner="mi300x-01")
    report = upload_bundles(write(tmp_path, [make_bundle()]), service.url, token, tmp_path / "spool")
    assert [(o.state, o.status) for o in report.outcomes] == [("spooled", 403)]
    # A fresh token fixes it: the spooled bundle goes out on the next flush.
    fresh = service.token("mi300x-01")
    assert flush_spool(service.url, fresh, tmp_path / "spool").ok
    assert len(stored_ids(service)) == 1


def test_service_down_then_up_every_run_lands_once(
    db_url: str, tmp_path: Path, server_factory: Callable[[int], str]
) -> None:
    store = open_store(db_url)
    token = create_token(store, "mi300x-01")[1]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    bundles = [make_bundle() for _ in range(5)]
    paths = write(tmp_path, bundles)

    down = upload_bundles(paths[:3], url, token, spool, policy=FAST)
    assert [o.state for o in down.outcomes] == ["spooled"] * 3
    assert "unreachable" in down.outcomes[0].message
    later = upload_bundles(paths[3:], url, token, spool, policy=FAST)
    assert len(later.spooled) == 2
    assert len(spooled_files(spool)) == 5
    for p in paths:
        p.unlink()  # the nightly's output may be gone; the spool alone must be enough

    assert server_factory(port) == url
    waiting = flush_spool(url, token, spool, policy=FAST)  # each bundle is inside its own backoff
    assert [o.state for o in waiting.outcomes] == ["spooled"] * 5
    assert all("waiting: failed 1x" in o.message for o in waiting.outcomes)
    flushed = flush_spool(url, token, spool, policy=FAST, force=True)
    assert flushed.ok and len(flushed.stored) == 5
    assert spooled_files(spool) == []
    assert flush_spool(url, token, spool, policy=FAST).outcomes == []  # nothing left to send

    # A resend after a lost answer (the bundle back in the spool) is counted once, not twice.
    write_bundle(bundles[0], spool)
    assert [o.state for o in flush_spool(url, token, spool, policy=FAST).outcomes] == ["duplicate"]
    with store.reader() as session:
        ids = sorted(session.scalars(select(Run.id)))
        assert session.scalar(select(func.count()).select_from(Run)) == 5
    assert ids == sorted(b["run"]["id"] for b in bundles)
    store.engine.dispose()


def test_upload_cli(service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGRESS_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.delenv("REGRESS_TOKEN", raising=False)
    [path] = write(tmp_path, [make_bundle()])
    assert main(["upload", str(path), "--url", service.url]) == 2  # no token: one line, exit 2
    monkeypatch.setenv("REGRESS_TOKEN", service.token("mi300x-01"))
    assert main(["upload", str(path), "--url", service.url]) == 0
    assert main(["upload", "--flush", "--url", service.url]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "nope"}))
    assert main(["upload", str(bad), "--url", service.url]) == 1
    assert main(["upload", "--url", service.url]) == 2


def test_token_cli(db_url: str, capsys: pytest.CaptureFixture[str], service: Service) -> None:
    assert main(["token", "create", "h200-01", "--db", db_url]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("rgr_")
    ok = requests.post(
        f"{service.url}/api/v1/runs",
        json=make_bundle(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert ok.status_code == 201
    assert main(["token", "list", "--db", db_url]) == 0
    listing = capsys.readouterr().out
    assert "h200-01" in listing and token not in listing
    assert main(["token", "revoke", "--runner", "h200-01", "--db", db_url]) == 0
    assert main(["token", "revoke", "--runner", "h200-01", "--db", db_url]) == 2  # nothing live left
    denied = requests.post(
        f"{service.url}/api/v1/runs",
        json=make_bundle(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert denied.status_code == 403
