"""Issue #24 item 14 (the site part): every case page listed (and the model paired) every case
sharing its shape, so one accepted bundle of 1,000 such results gave 99 MB of pages. Now a page
lists at most MAX_RELATED of them and counts the rest, and the output grows linearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from regress.facts.results import CaseResult, CaseSpec
from regress.present.site import build_site
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, start_run

PARAMS = {"b": 1, "h": 1, "sq": 64, "sk": 64, "d": 64, "layout": "bshd", "mode": "rtne"}


def _site_bytes(store: Store, tmp_path: Path, n: int) -> tuple[int, str]:
    with store.transaction() as s:
        stack_id = get_or_create_stack(s, digest=f"{n:064x}", keys={}, schema_version=1, name=None).id
    rid = start_run(store, stack_id=stack_id, build_id=None, backend="cpu", suites=["perf", "ulp"])
    for i in range(n):
        suite = "ulp" if i % 2 else "perf"
        metrics = {"scaled_ulp_max": 0.5} if suite == "ulp" else {"p50_ms": 1.0}
        add_result(store, rid, CaseResult(CaseSpec(suite, f"case-{i:05d}", PARAMS), "pass", metrics, {}))
    finish_run(store, rid, status="complete", exit_code=0)
    out = tmp_path / f"site-{n}"
    build_site(store, out)
    page = (out / "case").glob("*.html")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return total, next(page).read_text()


@pytest.mark.slow  # two demo histories and two full renders
def test_related_cases_are_bounded_and_counted(tmp_path: Path) -> None:
    from regress.store.repo import open_store

    small, large = open_store(f"sqlite:///{tmp_path / 'a.db'}"), open_store(f"sqlite:///{tmp_path / 'b.db'}")
    size_200, _ = _site_bytes(small, tmp_path, 200)
    size_800, text = _site_bytes(large, tmp_path, 800)
    assert "more cases at this shape" in text  # counted, not listed
    # Linear: four times the results, at most ~4x the bytes (quadratic gave 16x).
    assert size_800 < 6 * size_200, (size_200, size_800)
