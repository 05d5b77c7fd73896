"""Issue 41 items 8 and 9: an upload that committed while `regress site` read the store crashed the
render with a KeyError (its results were read, its run row was not); a truncated results.npz in the
site's cache gave a BadZipFile traceback on every render until --full."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from regress.cli import main
from regress.present.site import data as site_data
from regress.store.repo import open_store

sys.path.insert(0, str(Path(__file__).parents[1] / "ingest"))
from ingest_bundles import make_bundle


def _import(url: str, tmp_path: Path, day: int) -> str:
    bundle = make_bundle()
    bundle["run"]["started_at"] = f"2026-11-{day:02d}T00:00:00"
    bundle["run"]["finished_at"] = f"2026-11-{day:02d}T01:00:00"
    path = tmp_path / f"b{day}.json"
    path.write_text(json.dumps(bundle))
    assert main(["import", str(path), "--db", url]) == 0
    return str(bundle["run"]["id"])


def test_a_run_stored_during_the_read_is_left_for_the_next_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = _import(url, tmp_path, 1)
    read_rows = site_data._load_rows
    late: list[str] = []

    def rows_then_an_upload(engine):  # type: ignore[no-untyped-def]
        out = read_rows(engine)
        late.append(_import(url, tmp_path, 2))  # a real write, committed between the two reads
        return out

    monkeypatch.setattr(site_data, "_load_rows", rows_then_an_upload)
    store = open_store(url)
    try:
        loaded = site_data.load(store.engine, None, full=True)
    finally:
        store.engine.dispose()
    assert late and set(loaded.run_order) == {first}
    assert len(loaded.table["run"]) > 0 and (loaded.table["run"] == 0).all()


def test_a_truncated_results_cache_is_read_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _import(url, tmp_path, 1)
    out = tmp_path / "site"
    assert main(["site", "--out", str(out), "--db", url]) == 0
    caches = list(out.rglob("results.npz"))
    assert caches
    for cache in caches:
        cache.write_bytes(cache.read_bytes()[: cache.stat().st_size // 2])
    _import(url, tmp_path, 2)  # a new run: the render reads the cache for the old one
    assert main(["site", "--out", str(out), "--db", url]) == 0
