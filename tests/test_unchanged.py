"""Behaviour-unchanged guards for moving files (issue 43, phase 2: the folders by layer and
`benchmarks/` as a workshop). Every committed bundle (a headline file in benchmarks/headline/ or a
member of a campaign archive in benchmarks/campaigns/: tests/kit/committed.py reads both), imported
in run-id order into one store (the order of the bundles' own ids, not of their file names, so
renaming or archiving a file cannot change which bundle first states a case's params):

- exports byte for byte as the JSON document it was (a pinned stack's keys read as its pin's);
- renders the golden site: every page and asset `regress site` writes (its `.regress-site/` cache
  aside), with a fixed generation time, has the sha256 recorded in tests/data/unchanged.json;
- gets the golden gate verdicts: each run against the run before it on its stack (cross-night) and
  each run on its own A/B samples, verdict, exit code and every case row's status as recorded.

A change that moves only files changes none of these. A change meant to change what the site
shows or how the gate judges refreshes the golden file on purpose, and the diff of
tests/data/unchanged.json is part of its review:

    REGRESS_UPDATE_GOLDEN=1 python3 -m pytest tests/test_unchanged.py -m ""
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from committed import committed_bundles

from regress.facts.errors import UserError
from regress.judge.gate.core import gate, gate_ab
from regress.machine.pins import pin_for_digest
from regress.present.site import build_site
from regress.store import queries
from regress.store.repo import Store, open_store
from regress.store.transfer import export_bundle, import_files

pytestmark = pytest.mark.slow  # 61 real bundles (41 MB) imported, a site rendered, ~120 gates

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "unchanged.json"
UPDATE = os.environ.get("REGRESS_UPDATE_GOLDEN") == "1"
GENERATED = datetime(2026, 12, 1, tzinfo=UTC)  # what the pages say they were made at


BUNDLES = committed_bundles()


def _import_order(bundle: tuple[str, bytes]) -> tuple[str, str]:
    """A bundle's place in the import: its run id (then its bytes' digest), never its file name."""
    return json.loads(bundle[1])["run"]["id"], hashlib.sha256(bundle[1]).hexdigest()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """Every committed bundle through `regress import`'s path, in run-id order, on SQLite."""
    folder = tmp_path_factory.mktemp("committed")
    paths = []
    for i, (_, data) in enumerate(sorted(BUNDLES, key=_import_order)):
        paths.append(folder / f"{i:03d}.json")
        paths[-1].write_bytes(data)
    opened = open_store(f"sqlite:///{folder / 'regress.db'}")
    try:
        outcomes = import_files(opened, paths, pin_for=pin_for_digest)
        assert {o.state for o in outcomes} <= {"stored", "already stored"}, [o.line() for o in outcomes]
        yield opened
    finally:
        opened.engine.dispose()


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def _check(key: str, got: Any) -> None:
    """got == the golden file's `key`; with REGRESS_UPDATE_GOLDEN=1 the file takes `got` instead."""
    golden = _golden()
    if UPDATE:
        golden[key] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    assert key in golden, f"no golden {key!r} in {GOLDEN}: refresh it (this module's docstring)"
    want = golden[key]
    if isinstance(want, dict) and isinstance(got, dict):
        changed = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
        assert not changed, f"{len(changed)} {key} entries differ from {GOLDEN.name}, e.g. {changed[:8]}"
    assert got == want


def test_every_committed_bundle_is_found() -> None:
    """The guards below prove nothing over a folder they no longer find."""
    names = [n for n, _ in BUNDLES]
    assert len(names) >= 61 and len(set(names)) == len(names)
    _check("bundles", {n: hashlib.sha256(d).hexdigest() for n, d in BUNDLES})


def test_every_committed_bundle_exports_byte_for_byte(store: Store) -> None:
    differ = []
    for name, data in BUNDLES:
        bundle = json.loads(data)
        want = copy.deepcopy(bundle)
        pin = pin_for_digest(bundle["stack"]["digest"])
        if pin is not None:  # a pinned stack's row holds its pin's facts
            want["stack"]["name"] = pin.name
            want["stack"]["keys"].update(pin.expected)
        with store.reader() as session:
            got = export_bundle(session, bundle["run"]["id"])
        if json.dumps(got, sort_keys=True) != json.dumps(want, sort_keys=True):
            differ.append(name)
    assert not differ, f"{len(differ)} of {len(BUNDLES)} bundles export differently: {differ[:5]}"


def test_the_site_renders_the_golden_tree(store: Store, tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site(store, out, generated=GENERATED)
    tree = {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.relative_to(out).parts[0] != ".regress-site"  # its cache, lock, manifest
    }
    assert len(tree) > 100
    _check("site", tree)


def _verdict(run: Any) -> dict[str, Any]:
    try:
        report = run()
    except UserError as exc:
        return {"refused": str(exc)}
    statuses = sorted((r.case_key, r.status) for r in report.rows)
    return {
        "verdict": report.verdict,
        "exit": report.exit_code,
        "rows": dict(sorted(Counter(s for _, s in statuses).items())),
        "rows_sha": hashlib.sha256(json.dumps(statuses).encode()).hexdigest()[:16],
    }


def test_the_gate_gives_the_golden_verdicts(store: Store) -> None:
    with store.reader() as session:
        runs = [(run.id, stack.digest) for run, stack in queries.list_runs(session, limit=10_000)]
    by_stack: dict[str, list[str]] = {}
    for run_id, digest in sorted(runs):  # run ids sort by time
        by_stack.setdefault(digest, []).append(run_id)
    table: dict[str, Any] = {}
    for ids in by_stack.values():
        for base, cand in itertools.pairwise(ids):
            table[f"cross-night {base} {cand}"] = _verdict(lambda b=base, c=cand: gate(store, b, c))
        for run_id in ids:
            table[f"ab {run_id}"] = _verdict(lambda r=run_id: gate_ab(store, r))
    assert len(table) >= 100
    _check("gate", table)
