"""Bundle transfer on the committed real runs (benchmarks/headline/*.json): what `regress import`
stores, `export_bundle` gives back, byte for byte, and the pin alone decides the stack's facts.

The proof that moving transfer out of repo.py (issue 25) changed no bundle: every real bundle goes
in through `import_files` (the `regress import` path) and comes out as the same JSON document, the
one exception being named: a pinned stack's row keeps its pin's values for keys the run declared as
drifted (`run.host.drift`), so those keys read back as the pin's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from committed import headline, headline_sample
from hypothesis import example, given, settings
from hypothesis import strategies as st

from regress.machine.pins import pin_for_digest
from regress.store import queries
from regress.store.base import new_run_id
from regress.store.repo import Store, open_store
from regress.store.transfer import (
    BundleConflict,
    bundle_fingerprint,
    export_bundle,
    import_bundle,
    import_files,
)

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = headline()
# What the module's store holds in plain pytest: one headline bundle of each kind (tests/kit/committed.py);
# every headline bundle goes through the same round trip in test_every_headline_bundle_comes_back (CI's
# full tier), and every committed bundle through tests/test_unchanged.py.
SAMPLED = headline_sample()


@pytest.fixture(scope="module")
def stored(module_db_url: str) -> Iterator[Store]:
    """The sampled real bundles through `regress import`'s path, once per database (COPY on PostgreSQL)."""
    store = open_store(module_db_url)
    try:
        outcomes = import_files(store, SAMPLED, pin_for=pin_for_digest)
        assert [o.state for o in outcomes] == ["stored"] * len(SAMPLED), [o.line() for o in outcomes]
        yield store
    finally:
        store.engine.dispose()  # else DROP DATABASE waits on pooled connections


def expected_export(bundle: dict[str, Any]) -> dict[str, Any]:
    """The bundle as the store gives it back: a pinned stack's keys are its pin's."""
    out = copy.deepcopy(bundle)
    pin = pin_for_digest(bundle["stack"]["digest"])
    if pin is not None:
        out["stack"]["name"] = pin.name
        out["stack"]["keys"].update(pin.expected)  # every fact the pin states, compared or not
    return out


def test_a_real_bundle_imported_again_is_already_stored(stored: Store) -> None:
    """Idempotent, drift-declaring runs included (their stack row holds the pin's keys)."""
    outcomes = import_files(stored, SAMPLED, pin_for=pin_for_digest)
    assert [o.state for o in outcomes] == ["already stored"] * len(SAMPLED), [o.line() for o in outcomes]


def test_an_import_that_loses_the_race_to_another_is_already_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two imports of one bundle at once: both looked the run up before either stored it, and the
    loser's insert raised IntegrityError (a traceback; its remaining files were never read). Here
    the other importer's transaction commits inside the first look-up's."""
    from sqlalchemy.exc import IntegrityError

    from regress.store import transfer

    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    real, raced = transfer.import_bundle, []

    def racing(session: Any, bundle: dict[str, Any], **kw: Any) -> tuple[str, bool]:
        if not raced:  # the other importer wins between this one's look-up and its insert
            raced.append(bundle["run"]["id"])
            with store.transaction() as other:
                real(other, bundle, **kw)
            raise IntegrityError("INSERT INTO runs", {}, Exception("UNIQUE constraint failed: runs.id"))
        return real(session, bundle, **kw)

    monkeypatch.setattr(transfer, "import_bundle", racing)
    outcomes = import_files(store, SAMPLED[:2], pin_for=pin_for_digest)
    assert [o.state for o in outcomes] == ["already stored", "stored"], [o.line() for o in outcomes]
    with store.reader() as session:
        assert len(queries.list_runs(session, limit=10)) == 2


def test_real_bundles_are_there() -> None:
    assert len(BUNDLES) >= 9  # the committed H200 runs; fewer means the proof below proves less


def _comes_back(store: Store, path: Path) -> None:
    bundle = json.loads(path.read_text())
    with store.reader() as session:
        exported = export_bundle(session, bundle["run"]["id"])
    # sort_keys: the export builds each object in its own key order (samples: in insertion order).
    assert json.dumps(exported, sort_keys=True) == json.dumps(expected_export(bundle), sort_keys=True)
    assert bundle_fingerprint(exported) == bundle_fingerprint(bundle)


@pytest.mark.parametrize("path", SAMPLED, ids=[p.stem for p in SAMPLED])
def test_a_real_bundle_comes_back_byte_for_byte(stored: Store, path: Path) -> None:
    _comes_back(stored, path)


@pytest.mark.slow  # every headline bundle, 19 MB (plain pytest: the sample above)
def test_every_headline_bundle_comes_back(db_url: str) -> None:
    store = open_store(db_url)
    try:
        outcomes = import_files(store, BUNDLES, pin_for=pin_for_digest)
        assert [o.state for o in outcomes] == ["stored"] * len(BUNDLES), [o.line() for o in outcomes]
        again = import_files(store, BUNDLES, pin_for=pin_for_digest)
        assert [o.state for o in again] == ["already stored"] * len(BUNDLES), [o.line() for o in again]
        for path in BUNDLES:
            _comes_back(store, path)
    finally:
        store.engine.dispose()


def test_a_results_series_come_back_in_the_order_the_run_wrote_them(stored: Store) -> None:
    """The export lists each result's sample series as stored (the bundles write the baselines'
    series before the kernel's), on PostgreSQL too, whose selectin load has no order of its own."""
    bundle = json.loads(SAMPLED[0].read_text())
    with stored.reader() as session:
        exported = export_bundle(session, bundle["run"]["id"])
    want = {r["case_key"]: list(r["samples"]) for r in bundle["results"]}
    got = {r["case_key"]: list(r["samples"]) for r in exported["results"]}
    assert got == want and any(len(v) > 1 and v != sorted(v, reverse=True) for v in want.values())


def test_pinned_stacks_are_named_by_the_pin_the_caller_passes(stored: Store) -> None:
    digests = {json.loads(p.read_text())["stack"]["digest"] for p in SAMPLED}
    with stored.reader() as session:
        for digest in digests:
            pin = pin_for_digest(digest)
            row = queries.stack_by_digest(session, digest)
            assert row is not None
            assert row.name == (pin.name if pin else None)


def test_an_unpinned_import_keeps_the_uploaded_keys_and_no_name(tmp_path: Path) -> None:
    """The store decides no name: with no pin passed, the stack row is nameless and keeps every
    key the bundle sent (the name in the bundle is the uploader's word, never stored)."""
    path = SAMPLED[0]
    bundle = json.loads(path.read_text())
    store = open_store(f"sqlite:///{tmp_path / 'unpinned.db'}")
    [outcome] = import_files(store, [path], pin_for=lambda digest: None)
    assert outcome.state == "stored"
    with store.reader() as session:
        exported = export_bundle(session, bundle["run"]["id"])
    assert exported["stack"]["name"] is None
    assert exported["stack"]["keys"] == bundle["stack"]["keys"]
    store.engine.dispose()


# --- integers past 2**53 ---------------------------------------------------------------------------

INT64 = st.integers(min_value=-(2**63) + 2, max_value=2**63 - 3)  # a + delta stays a 64-bit integer


def _one_perf_result(value: int, sample: int) -> dict[str, Any]:
    """The smallest real bundle cut to one perf result, with `value` in a metric of its own and
    `sample` as its first raw timing."""
    bundle = json.loads(min(SAMPLED, key=lambda p: p.stat().st_size).read_text())
    perf = copy.deepcopy(next(r for r in bundle["results"] if r["suite"] == "perf"))
    perf["metrics"]["cycles"] = value
    perf["samples"]["time_ms"][0] = abs(sample) or 1  # a timing is > 0 (both doors refuse others)
    return {**bundle, "results": [perf]}


def test_integers_one_float_apart_are_a_conflict_on_import(tmp_path: Path) -> None:
    """2**53 and 2**53 + 1 are the same float: the re-import compared every number as a float, so a
    bundle that differed only there was "already stored" and its value silently dropped."""
    paths = []
    for name, value in (("a", 2**53), ("same", 2**53), ("b", 2**53 + 1)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(_one_perf_result(value, 2**53 + 1)))
    store = open_store(f"sqlite:///{tmp_path / 'ints.db'}")
    outcomes = import_files(store, paths, pin_for=pin_for_digest)
    states = [o.state for o in outcomes]
    assert states == ["stored", "already stored", "refused"], [o.line() for o in outcomes]
    assert "already stored with different content" in outcomes[2].reason
    assert outcomes[2].reason.endswith("metrics.cycles)")  # the first difference, named
    with store.reader() as session:
        stored = export_bundle(session, outcomes[0].run_id or "")
    assert stored["results"][0]["metrics"]["cycles"] == 2**53
    store.engine.dispose()


def test_a_reimport_is_already_stored_exactly_when_its_integers_are_equal(tmp_path: Path) -> None:
    """Over 64-bit integers and their neighbours: the same value again is "already stored" (raw
    samples too, which the store keeps as floats), any other is a conflict."""
    store = open_store(f"sqlite:///{tmp_path / 'ints.db'}")

    @settings(max_examples=40, deadline=None, database=None)
    @given(value=INT64, delta=st.integers(min_value=-2, max_value=2))
    @example(value=2**53, delta=1)
    @example(value=2**53 + 1, delta=0)  # a sample no float equals: stored rounded, still the same run
    @example(value=2**63 - 3, delta=-1)
    def check(value: int, delta: int) -> None:
        first, second = _one_perf_result(value, value), _one_perf_result(value + delta, value)
        first["run"]["id"] = second["run"]["id"] = new_run_id()
        with store.transaction() as session:
            assert import_bundle(session, first, pin=None)[1]
        with store.transaction() as session:
            if delta == 0:
                assert import_bundle(session, second, pin=None) == (first["run"]["id"], False)
            else:
                with pytest.raises(BundleConflict, match=r"metrics\.cycles"):
                    import_bundle(session, second, pin=None)

    try:
        check()
    finally:
        store.engine.dispose()
