"""Migrations 0004 (a run is its runner's and its run id) and 0005 (a build row is its whole record)
keep every stored fact across upgrade -> downgrade -> upgrade, on SQLite and PostgreSQL.

Below 0004 a run has no given id and below 0005 an artifact has one build row, so the downgrades
keep what the older schema cannot hold in side tables and the upgrades put it back: after the round
trip every run reads back the bundle it was stored from, a runner's re-send is still a duplicate,
and no result or sample is lost (on SQLite a table rebuild with foreign keys on deleted every
result through their ON DELETE CASCADE; regress.store.db now migrates with them off).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from committed import headline
from sqlalchemy import func, inspect, select

from regress.cli import main
from regress.facts.bundle import canonical
from regress.machine.pins import pin_for_digest
from regress.store import Build, Result, Run, Sample
from regress.store.base import new_run_id
from regress.store.repo import Store, open_store
from regress.store.transfer import export_bundle, import_bundle

BUNDLES = headline()
SIDE_TABLES = {"run_given_ids_kept", "build_records_kept", "build_runs_kept"}


def _trimmed(path: Path) -> dict[str, Any]:
    bundle: dict[str, Any] = json.loads(path.read_text())
    bundle["results"] = bundle["results"][:6]  # enough to count; the round trip is per row
    return bundle


def _bundles() -> list[tuple[dict[str, Any], str | None]]:
    """(bundle, the runner it is imported for): two runners under one run id, and three build
    records of one artifact (the genuine one, one with a stats key dropped, one at another commit)."""
    genuine = next(b for b in map(_trimmed, BUNDLES) if b.get("build") and b["build"].get("stats"))
    genuine["run"]["runner"] = None
    squat = copy.deepcopy(genuine)  # runner a's run under the same id, with another build record
    squat["build"]["stats"].pop(sorted(squat["build"]["stats"])[0])
    later = copy.deepcopy(genuine)
    later["run"]["id"] = new_run_id()
    later["build"]["git_commit"] = "f" * 40
    return [(squat, "a"), (genuine, "b"), (later, "b"), (copy.deepcopy(later), None)]


def _import(store: Store, bundle: dict[str, Any], runner: str | None) -> tuple[str, bool]:
    with store.transaction() as session:
        return import_bundle(session, bundle, pin=pin_for_digest(bundle["stack"]["digest"]), runner=runner)


def _snapshot(store: Store) -> dict[str, Any]:
    with store.reader() as session:
        keys = sorted(session.scalars(select(Run.id)))
        return {
            "bundles": {key: canonical(export_bundle(session, key)) for key in keys},
            "results": session.scalar(select(func.count()).select_from(Result)),
            "samples": session.scalar(select(func.count()).select_from(Sample)),
        }


def _count(store: Store, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() or 0)


def test_run_and_build_keys_survive_a_migration_round_trip(db_url: str) -> None:
    store = open_store(db_url)
    try:
        stored = [(_import(store, bundle, runner), bundle, runner) for bundle, runner in _bundles()]
        keys = [key for (key, created), _, _ in stored]
        assert all(created for (_, created), _, _ in stored) and len(set(keys)) == 4
        assert keys[1] != keys[0]  # runner b's run under runner a's key: a key of its own
        before = _snapshot(store)
        assert _count(store, "builds") == 3  # three records of one artifact

        assert main(["db", "downgrade", "0001", "--db", db_url]) == 0
        assert _count(store, "runs") == 4
        assert _count(store, "builds") == 1  # 0001 holds one row per artifact; the rest kept aside
        assert (_count(store, "results"), _count(store, "samples")) == (before["results"], before["samples"])
        assert set(inspect(store.engine).get_table_names()) >= SIDE_TABLES

        assert main(["db", "upgrade", "--db", db_url]) == 0
        assert _snapshot(store) == before  # every run reads back its own bundle and build
        assert _count(store, "builds") == 3
        for (key, _), bundle, runner in stored:  # and its runner's re-send is a duplicate
            assert _import(store, bundle, runner) == (key, False)
        assert not SIDE_TABLES & set(inspect(store.engine).get_table_names())
        with store.reader() as session:
            assert session.scalar(select(func.count()).select_from(Build)) == 3
    finally:
        store.engine.dispose()


def test_a_downgrade_with_nothing_to_keep_leaves_no_side_table(db_url: str) -> None:
    store = open_store(db_url)
    try:
        bundle, _ = _bundles()[1]
        _import(store, bundle, "b")
        assert main(["db", "downgrade", "0003", "--db", db_url]) == 0
        assert not SIDE_TABLES & set(inspect(store.engine).get_table_names())
        assert main(["db", "upgrade", "--db", db_url]) == 0
        assert _import(store, bundle, "b") == (bundle["run"]["id"], False)
    finally:
        store.engine.dispose()
