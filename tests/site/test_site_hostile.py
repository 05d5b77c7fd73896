"""Issue #24 items 11, 12: a stored run the door would refuse today (rows from before the rules, or
written locally) must not break the site: a `time_unix` past the datetime range froze every render
(OverflowError), and a huge finite metric became `Infinity` in the embedded JSON, so JSON.parse
dropped the run's table and the case's whole trend chart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regress.facts.results import CaseResult, CaseSpec
from regress.present.site import build_site
from regress.present.site.pages.run import kernel_table
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, start_run

PARAMS = {"b": 1, "h": 1, "sq": 64, "sk": 64, "d": 64, "layout": "bshd", "mode": "rtne"}


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"JSON.parse refuses {name}")

    return json.loads(text, parse_constant=refuse)


def _run(store: Store, stack_id: int, **kw: object) -> str:
    rid = start_run(store, stack_id=stack_id, build_id=None, backend="cpu", suites=["perf", "ulp"], **kw)  # type: ignore[arg-type]
    return rid


@pytest.mark.parametrize("stamp", [1e300, -1e12, 4e10])
def test_site_renders_runs_with_unshowable_values(store: Store, tmp_path: Path, stamp: float) -> None:
    with store.transaction() as s:
        stack_id = get_or_create_stack(s, digest="f" * 64, keys={}, schema_version=1, name="s").id
    genuine = []
    for night in range(3):
        rid = _run(store, stack_id, gpu_state={"before": {"time_unix": 1.7e9 + night}})
        add_result(
            store,
            rid,
            CaseResult(
                CaseSpec("perf", "p", PARAMS), "pass", {"p50_ms": 1.0 + night / 100}, {"time_ms": [1.0, 1.01]}
            ),
        )
        add_result(store, rid, CaseResult(CaseSpec("ulp", "u", PARAMS), "pass", {"scaled_ulp_max": 0.5}, {}))
        finish_run(store, rid, status="complete", exit_code=0)
        genuine.append(rid)
    bad = _run(store, stack_id, gpu_state={"before": {"time_unix": stamp}})
    add_result(
        store,
        bad,
        CaseResult(CaseSpec("perf", "p", PARAMS), "pass", {"p50_ms": 1.7e308}, {"time_ms": [1e308, 1e308]}),
    )
    add_result(store, bad, CaseResult(CaseSpec("ulp", "u", PARAMS), "pass", {"scaled_ulp_max": 1.7e308}, {}))
    finish_run(store, bad, status="complete", exit_code=0)

    out = tmp_path / "site"
    build_site(store, out)  # raised OverflowError on main
    pages = list(out.rglob("*.html"))
    assert pages
    blobs = 0
    for page in pages:
        for blob in re.findall(
            r'<script[^>]*type="application/json"[^>]*>(.*?)</script>', page.read_text(), re.S
        ):
            _strict(blob)  # every embedded JSON parses as JSON.parse would
            blobs += 1
    assert blobs > 0
    assert (out / "run" / f"{bad}.html").is_file()
    assert all((out / "run" / f"{rid}.html").is_file() for rid in genuine)


_json = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(stats=_json, kernels=st.dictionaries(st.text(max_size=8), _json, max_size=5))
def test_kernel_table_takes_any_stored_stats(stats: object, kernels: dict[str, object]) -> None:
    """A build's `stats` is a free-form object in the bundle schema, so whatever a runner stored
    there (the bundle fuzz stored kernels whose reports were floats) gives a table, never a raise:
    rows only for the entries that are a kernel's report."""
    for given_stats in (stats, {"kernels": kernels}, {"kernels": stats}):
        table = kernel_table({"stats": given_stats})
        assert set(table) == {"columns", "rows"}
    rows = kernel_table({"stats": {"kernels": kernels}})["rows"]
    assert [name for name, _ in rows] == sorted(n for n, r in kernels.items() if isinstance(r, dict))
