"""What an accepted bundle becomes in the store: readers survive odd runs an older server let in, a
resend with integer samples is the same run, an uploaded 'running' run is not reaped as this host's,
a stack takes its name from the pin and not from the uploader, and the bulk and the row-by-row paths
store the same rows. SQLite and PostgreSQL (the `db_url` fixture)."""

from __future__ import annotations

import copy
import socket
from pathlib import Path
from typing import Any

import pytest
from ingest_bundles import make_bundle
from ingest_client import post, real
from ingest_server import Service
from real_bundles import real_bundles
from sqlalchemy import func, select, update

from regress.cli import main
from regress.facts.bundle import validate_bundle
from regress.facts.stack_keys import Fingerprint
from regress.machine.pins import pin_for_digest, write_pin
from regress.present.site import build_site
from regress.store import Result, Run, Sample, Stack
from regress.store.repo import reap_stale_runs
from regress.store.transfer import export_bundle, import_bundle

# PostgreSQL copies in plain pytest: these (COPY on PostgreSQL against executemany on SQLite);
# the module's others in CI (tests/conftest.py)
POSTGRES_IN_PLAIN = {"test_bulk_and_row_by_row_store_the_same"}


def test_readers_survive_odd_stored_runs(service: Service, db_url: str, tmp_path: Path) -> None:
    bundle = real()
    assert post(service, bundle, service.token("h200-01")).status_code == 201
    with service.store.transaction() as session:  # what an older server let in
        session.execute(
            update(Run).where(Run.id == bundle["run"]["id"]).values(host="x", summary=-1, gpu_state=[1])
        )
    build_site(service.store, tmp_path / "site")
    assert main(["runs", "list", "--db", db_url, "--json"]) == 0
    assert main(["runs", "list", "--db", db_url]) == 0
    assert main(["runs", "show", bundle["run"]["id"], "--db", db_url]) == 0
    assert main(["export", "--db", db_url, "-o", str(tmp_path / "x.jsonl")]) == 0


def test_resend_with_integer_samples_is_identical(service: Service) -> None:
    token = service.token("h200-01")
    bundle = make_bundle()
    bundle["results"][0]["samples"]["time_ms"] = [1, 2, 3]
    bundle["results"][0]["metrics"]["p50_ms"] = 2
    assert post(service, bundle, token).status_code == 201
    assert post(service, bundle, token).status_code == 200


def test_uploaded_running_run_is_not_reaped(service: Service) -> None:
    bundle = make_bundle()
    bundle["run"].update(status="running", hostname=socket.gethostname(), finished_at=None)
    assert post(service, bundle, service.token("h200-01")).status_code == 201
    assert reap_stale_runs(service.store) == []
    with service.store.reader() as session:
        assert session.get(Run, bundle["run"]["id"]).status == "running"


def test_stack_name_comes_from_the_pin(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = service.token("h200-01")
    fp = Fingerprint(keys={k: f"value-{k}" for k in _all_keys()})
    monkeypatch.setenv("REGRESS_STACKS_DIR", str(tmp_path / "stacks"))
    first = make_bundle()
    first["stack"].update(digest=fp.digest, keys=fp.keys, name="whoever-came-first")
    assert post(service, first, token).status_code == 201
    with service.store.reader() as session:
        assert session.scalars(select(Stack.name).where(Stack.digest == fp.digest)).one() is None
    write_pin("team-pin", fp, stacks_dir=tmp_path / "stacks")
    other_fp_bundle = make_bundle()
    other_fp_bundle["stack"].update(digest=fp.digest, keys=fp.keys, name="yet-another")
    assert post(service, other_fp_bundle, token).status_code == 201
    with service.store.reader() as session:
        assert session.scalars(select(Stack.name).where(Stack.digest == fp.digest)).one() == "team-pin"


def _all_keys() -> tuple[str, ...]:
    from regress.facts.stack_keys import HASHED_KEYS, PINNED_KEYS

    return (*HASHED_KEYS, *PINNED_KEYS)


def test_bulk_and_row_by_row_store_the_same(store: Any) -> None:
    bundles = real_bundles(results=40, samples=50)
    for i, bundle in enumerate(bundles):
        twin = copy.deepcopy(bundle)
        twin["run"]["id"] = bundle["run"]["id"][:-1] + "x"
        with store.transaction() as session:
            import_bundle(
                session, bundle, pin=pin_for_digest(bundle["stack"]["digest"]), row_by_row=i % 2 == 0
            )
        with store.transaction() as session:
            import_bundle(session, twin, pin=pin_for_digest(twin["stack"]["digest"]), row_by_row=i % 2 == 1)
        with store.reader() as session:
            a, b = export_bundle(session, bundle["run"]["id"]), export_bundle(session, twin["run"]["id"])
        b["run"]["id"] = a["run"]["id"]
        assert a == b
        assert len(a["results"]) == len(bundle["results"])
        validate_bundle(a)
    with store.reader() as session:
        assert session.scalar(select(func.count()).select_from(Sample)) == 2 * sum(
            len(r["samples"]) for b in bundles for r in b["results"]
        )
        assert session.scalar(select(func.count()).select_from(Result)) == 2 * sum(
            len(b["results"]) for b in bundles
        )
