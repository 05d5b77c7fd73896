"""Property: whatever a runner sends, the service answers 4xx or stores a run every reader can show.

Hypothesis mutates the committed real H200 bundles (benchmarks/headline/*.json, trimmed): one field
replaced by a hostile value (NaN, 1e999, 10**30, NUL, a lone surrogate, strings one past their
column, odd timestamps, the wrong type, 100,000 nested arrays...), deleted, or joined by an unknown
field, or a result repeated. Each mutant goes to the real Flask app on a real SQLite file and a real
PostgreSQL database, once under a fresh run id and once under the id of the already stored
original. Nothing may answer 5xx; a stored run must read back as a valid bundle, and the run list,
export and the static site must all render once every mutant has been sent.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_bundles import real_bundles
from sqlalchemy import select

from regress.cli import main
from regress.facts.bundle import validate_bundle
from regress.judge.gate.core import VERDICT_EXIT
from regress.present.site import build_site
from regress.server import create_app
from regress.server.tokens import create_token
from regress.store import Run
from regress.store.base import new_run_id
from regress.store.repo import Store
from regress.store.transfer import bundle_fingerprint

RUNNER = "fuzz-runner"
DEEP = "__deep_nesting__"  # replaced in the JSON text: json.dumps itself cannot write 100,000 levels
HUGE = "__huge_integer__"  # replaced by a 5,000-digit literal: past Python's int parsing limit
STORED = {200, 201}

_strings = st.sampled_from([7, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 256, 257, 300]).map("x".__mul__)
NASTY = st.one_of(
    st.sampled_from(
        [
            float("nan"),
            float("inf"),
            float("-inf"),
            10**30,
            -(10**30),
            2**31,
            2**63,
            -1,
            0,
            1.5,
            1.0,
            -0.0,
            True,
            None,
            "",
            "x",
            "-1",
            "a\x00b",
            "\ud800",
            "0000-01-01T00:00:00",
            "9999-12-31T23:59:59-12:00",
            "2026-11-29T13:11:11+14:00",
            "1969-12-31T23:59:59",
            {},
            [],
            {"a": 1},
            [1, "x", None],
            {"\x00": 1},
            DEEP,
            HUGE,
        ]
    ),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    _strings,
    st.text(max_size=12),
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
        max_leaves=8,
    ),
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:3]):  # the first items stand for the rest
            yield from _paths(value, (*prefix, i))


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutants(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(original, mutant, what was done)."""
    original = draw(st.sampled_from(real_bundles()))
    mutant = copy.deepcopy(original)
    op = draw(st.sampled_from(["set", "set", "set", "delete", "unknown", "repeat"]))
    path = draw(st.sampled_from(sorted(_paths(original), key=repr)))
    parent = _parent(mutant, path)
    if op == "set":
        parent[path[-1]] = draw(NASTY)
    elif op == "delete":
        del parent[path[-1]]
    elif op == "unknown":
        target = parent[path[-1]] if isinstance(parent[path[-1]], dict) else parent
        target = target if isinstance(target, dict) else mutant
        target[draw(st.text(min_size=1, max_size=8))] = draw(NASTY)
    else:
        mutant["results"].append(copy.deepcopy(mutant["results"][0]))
    return original, mutant, f"{op} {path!r}"


def _body(bundle: Any) -> bytes:
    text = json.dumps(bundle)  # NaN/Infinity as JavaScript does: Python's parser reads them back
    text = text.replace(json.dumps(HUGE), "-" + "7" * 5000)
    return text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000).encode()


COUNTS: dict[str, Counter[str]] = {}


@pytest.fixture
def app(db_url: str, store: Store) -> Iterator[Any]:
    application = create_app({"DATABASE_URL": db_url})
    yield application
    application.extensions["regress.store"].engine.dispose()


def _readable(client: Any, run_id: str) -> dict[str, Any]:
    got = client.get(f"/api/v1/runs/{run_id}")
    assert got.status_code == 200, got.get_data(as_text=True)
    exported: dict[str, Any] = got.get_json()
    validate_bundle(exported)  # what is stored is itself a valid bundle
    return exported


@settings(
    # CI default; docs/reliability.md's counts come from REGRESS_FUZZ_EXAMPLES=1000.
    max_examples=int(os.environ.get("REGRESS_FUZZ_EXAMPLES", "120")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=mutants())
def _property(
    app: Any, token: str, counts: Counter[str], case: tuple[dict[str, Any], dict[str, Any], str]
) -> None:
    original, mutant, what = case
    client = app.test_client()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    # 1. The mutant under a fresh run id (unless the mutation is to the run id itself).
    run = mutant.get("run")
    same_id = isinstance(run, dict) and run.get("id") == original["run"]["id"]
    fresh = copy.deepcopy(mutant)
    if same_id:
        fresh["run"]["id"] = new_run_id()
    resp = client.post("/api/v1/runs", data=_body(fresh), headers=headers)
    assert resp.status_code < 500, f"{what}: {resp.status_code} {resp.get_data(as_text=True)[:300]}"
    if resp.status_code in STORED:
        counts["stored"] += 1
        _readable(client, resp.get_json()["run_id"])
    else:
        counts["refused"] += 1
        assert resp.get_json()["error"]

    # 2. The original stored first, then the mutant under the original's run id: only "identical"
    # (200, e.g. 3 sent as 3.0) or a refusal, and the stored run is untouched either way.
    if same_id:
        first = client.post("/api/v1/runs", data=_body(original), headers=headers)
        if first.status_code == 409 and "stored with other facts" in first.get_json()["error"]:
            # An earlier mutant of a shared row (this build's stats, an unpinned stack's keys) was
            # stored first: the genuine bundle is refused, never read back with the mutant's facts.
            counts["same id: shared row conflict"] += 1
            return
        assert first.status_code == 201, first.get_data(as_text=True)
        again = client.post("/api/v1/runs", data=_body(mutant), headers=headers)
        assert again.status_code in {200, 400, 403, 409, 413}, f"{what}: {again.status_code}"
        counts["same id: " + ("identical" if again.status_code == 200 else "refused")] += 1
        assert bundle_fingerprint(_readable(client, original["run"]["id"])) == bundle_fingerprint(original)


@pytest.mark.slow  # 120 hypothesis examples against the real app
def test_mutated_bundles_are_refused_or_stored_and_readable(
    app: Any,
    store: Store,
    db_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = create_token(store, RUNNER)[1]
    counts: Counter[str] = Counter()
    _property(app, token, counts)
    COUNTS[request.node.callspec.id] = counts
    with capsys.disabled():  # the counts docs/reliability.md quotes, shown under `pytest -s`
        print(f"\nmutants on {request.node.callspec.id}: {dict(counts)}")
    assert counts["stored"] + counts["refused"] >= 100

    # Every reader over everything that was stored: the site, the run list, show, export.
    build_site(store, tmp_path / "site")
    assert main(["runs", "list", "--db", db_url, "--json", "--limit", "1000"]) == 0
    assert main(["export", "--db", db_url, "-o", str(tmp_path / "export.jsonl")]) == 0
    assert main(["export", "--db", db_url, "--format", "csv", "-o", str(tmp_path / "export.csv")]) == 0
    with store.reader() as session:
        run_ids = list(session.scalars(select(Run.id)))
    for run_id in run_ids[:20]:
        assert main(["runs", "show", run_id, "--db", db_url]) == 0
    # The gate's reports over stored runs (Markdown, HTML, JUnit XML, JSON): a verdict whose exit
    # code its report states, or a refusal in one line, never a crash, and every report well-formed.
    capsys.readouterr()
    for base, cand in itertools.pairwise(run_ids[:21]):
        reports = tmp_path / f"gate-{cand}"
        argv = ["gate", "--db", db_url, "--baseline", base, "--candidate", cand, "--report-dir", str(reports)]
        rc = main(argv)
        err = capsys.readouterr().err
        for junit in reports.glob("*.junit.xml"):
            ElementTree.parse(junit)
        docs = [json.loads(report.read_text()) for report in reports.glob("*.json")]
        if docs:
            assert [(d["exit_code"], VERDICT_EXIT[d["verdict"]]) for d in docs] == [(rc, rc)], err
        else:
            assert rc == 2 and err.startswith("regress: error:") and err.count("\n") == 1, err
