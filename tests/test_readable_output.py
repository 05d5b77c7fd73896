"""Issue #24 item 18: Python reprs reached people: `git_commit: None` from `regress build`,
`is_drill False` and `pair_swing 0.00936549661293183` on the site's gate pages, `stack None` in
the gate's Markdown and HTML reports for an unpinned stack. Text output now shows None as a dash,
bools as yes/no and floats to a few significant digits (`regress.facts.escape.readable`)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from regress.cli import main
from regress.facts.escape import readable
from regress.facts.results import CaseResult, CaseSpec
from regress.present.site import build_site
from regress.present.site.format import fmt_num, fmt_show
from regress.store.repo import (
    Store,
    add_result,
    finish_run,
    get_or_create_stack,
    record_gate_decision,
    start_run,
)

REPRS = re.compile(r"\b(None|True|False)\b|\d\.\d{8,}")
PARAMS = {"b": 1, "h": 1, "sq": 64, "sk": 64, "d": 64, "layout": "bshd", "mode": "rtne"}


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "—"), (False, "no"), (True, "yes"), (0.9999999999999999, "1"), (0.00936549661293183, "0.009365"),
     (3, "3"), ("text", "text")],
)  # fmt: skip
def test_readable(value: Any, shown: str) -> None:
    assert readable(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [(False, "no"), (None, "–"), (0.9999999999999999, "1"), ([None, 0.123456789], "– → 0.1235"),
     ([True, False, 2], "yes, no, 2")],
)  # fmt: skip
def test_site_report_values(value: Any, shown: str) -> None:
    assert fmt_show(value) == shown
    if isinstance(value, bool):
        assert fmt_num(value) == shown  # jinja's `is number` holds for a bool


def _two_runs(store: Store, name: str | None) -> tuple[str, str]:
    with store.transaction() as s:
        stack_id = get_or_create_stack(s, digest="e" * 64, keys={}, schema_version=1, name=name).id
    ids = []
    for night in range(2):
        rid = start_run(store, stack_id=stack_id, build_id=None, backend="cpu", suites=["perf"])
        times = [1.0 + 0.01 * ((i * 7 + night) % 5) for i in range(40)]
        metrics = {"p50_ms": sorted(times)[20]}
        add_result(
            store, rid, CaseResult(CaseSpec("perf", "c0", PARAMS), "pass", metrics, {"time_ms": times})
        )
        finish_run(store, rid, status="complete", exit_code=0)
        ids.append(rid)
    return ids[0], ids[1]


def _page_text(path: Path) -> str:
    text = re.sub(r"<script.*?</script>", "", path.read_text(), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "\n", text))


def test_site_gate_page_shows_no_python_reprs(store: Store, tmp_path: Path) -> None:
    a, b = _two_runs(store, "s")
    report = {
        "verdict": "pass",
        "baseline": {"id": a, "is_drill": False, "stack": None},
        "aggregate": {"geomean_ratio": 0.9999999999999999, "stack_mde": None, "drill": True},
        "pair": [None, 0.123456789],
        "rows": [{"case": "c0", "ratio": 0.9999999999999999, "flagged": False, "mde": None}],
    }
    with store.transaction() as s:
        gate_id = record_gate_decision(
            s, baseline_run_id=a, candidate_run_id=b, verdict="pass", exit_code=0, report=report
        )
    build_site(store, tmp_path / "site")
    text = _page_text(tmp_path / "site" / "gate" / f"{gate_id}.html")
    assert not REPRS.search(text), REPRS.search(text)
    assert "geomean_ratio\n\n1\n" in text and "is_drill\n\nno" in text


def test_gate_reports_of_an_unpinned_stack_show_no_none(store: Store, tmp_path: Path, capsys: Any) -> None:
    a, b = _two_runs(store, None)
    db = store.engine.url.render_as_string(hide_password=False)
    main(["gate", "--db", db, "--baseline", a, "--candidate", b, "--report-dir", str(tmp_path)])
    capsys.readouterr()
    (md,) = tmp_path.glob("*.md")
    (page,) = tmp_path.glob("*.html")
    for text in (md.read_text(), _page_text(page)):
        assert "stack `—`" in text or "stack —" in text, text[:600]
        assert not REPRS.search(text), REPRS.search(text)


@pytest.mark.slow  # a kernel build in a copied tree (1.8 s CPU)
def test_build_without_git_prints_a_dash(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "no-git"))  # git rev-parse fails: no commit known
    assert main(["build", "--backend", "cpu", "--cache-dir", str(tmp_path / "cache")]) in (0, None)
    out = capsys.readouterr().out
    assert "  git_commit: —" in out and "None" not in out, out
