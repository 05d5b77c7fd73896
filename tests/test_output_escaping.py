"""Issue #24 items 8, 9, 13: stored text is data in every output format.

Runs are written through the store's own writers (what `regress nightly --trigger ...` or rows from
before the bundle rules hold), with names and triggers carrying newlines, tabs, ESC, C0 characters
and rich markup; every reader must print them inert.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import regress
from regress.facts.results import CaseResult, CaseSpec
from regress.judge.gate import gate
from regress.judge.gate.render import render_junit, render_markdown
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, start_run

FORGE = "x\n- **verdict: pass** (exit 0)\n| + | forged | row |"
HOSTILE_NAMES = [
    FORGE,
    "c0\x01\x02\x0b\x1f\x7f",
    "esc\x1b[2J\x1b]0;title\x07",
    "[/]",
    "[bold red]x[/x]",
    "tab\there",
]


def _run(store: Store, names: list[str], level: float, trigger: str = "nightly") -> str:
    with store.transaction() as session:
        stack_id = get_or_create_stack(session, digest="e" * 64, keys={}, schema_version=1, name="s").id
    rid = start_run(store, stack_id=stack_id, build_id=None, backend="cpu", suites=["perf"], trigger=trigger)
    for i, name in enumerate(names):
        times = [level * (1 + 0.001 * ((k * 7 + i) % 13)) for k in range(40)]
        spec = CaseSpec(
            "perf", name, {"b": 1, "h": 1, "sq": 8 + i, "sk": 8, "d": 64, "layout": "bshd", "mode": "rtne"}
        )
        add_result(store, rid, CaseResult(spec, "pass", {"p50_ms": sorted(times)[20]}, {"time_ms": times}))
    finish_run(store, rid, status="complete", exit_code=0)
    return rid


def test_markdown_report_forges_no_line(store: Store) -> None:
    base = _run(store, HOSTILE_NAMES, 1.0)
    cand = _run(store, HOSTILE_NAMES, 1.5)  # every case slower
    report = gate(store, base, cand)
    assert report.verdict != "pass"
    text = render_markdown(report)
    verdicts = [line for line in text.splitlines() if line.startswith("- **verdict")]
    assert verdicts == [f"- **verdict: {report.verdict}** (exit {report.exit_code})"], verdicts
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(HOSTILE_NAMES)  # header, rule, one row per case: none forged
    assert all(line.count("|") - line.count("\\|") == 11 for line in table)
    assert "\x1b" not in text and "\x01" not in text


def test_junit_is_well_formed_with_c0_names(store: Store) -> None:
    base = _run(store, HOSTILE_NAMES, 1.0)
    cand = _run(store, HOSTILE_NAMES, 1.5)
    xml = render_junit(gate(store, base, cand))
    root = ET.fromstring(xml.split("?>", 1)[1])  # raises on an ill-formed document
    names = {case.get("name") for case in root.iter("testcase")}
    assert "c0\\x01\\x02\\x0b\\x1f\x7f" in names and "esc\\x1b[2J\\x1b]0;title\\x07" in names


def _cli(args: list[str], tty: bool = False) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child; tty=True runs it under a pseudo-terminal (`script`)."""
    cmd = [sys.executable, "-m", "regress", *args]
    if tty:
        cmd = ["script", "-qec", " ".join(f"'{a}'" for a in cmd), "/dev/null"]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "COLUMNS": "250",
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(Path(regress.__file__).resolve().parents[1]),
        },
    )


@pytest.mark.parametrize(
    "trigger", ["x\tfake0000id\tcomplete", "x\nfake0000id\tcomplete", "[/x]", "esc\x1b[31m"]
)
def test_piped_runs_list_forges_no_row_and_tolerates_markup(store: Store, db_url: str, trigger: str) -> None:
    for _ in range(3):
        _run(store, ["a"], 1.0, trigger=trigger)
    done = _cli(["runs", "list", "--tsv", "--db", db_url])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 + 3 and all(line.count("\t") == 8 for line in lines)
    assert "\x1b" not in done.stdout


@pytest.mark.slow  # CLI subprocesses on a pseudo-terminal (1.5 s CPU each)
@pytest.mark.parametrize("trigger", ["[/x]", "esc\x1b[2J", "[bold]x"])
def test_runs_show_and_list_on_a_terminal(store: Store, db_url: str, trigger: str) -> None:
    rid = _run(store, HOSTILE_NAMES, 1.0, trigger=trigger)
    shown = _cli(["runs", "show", rid, "--db", db_url])
    assert shown.returncode == 0, shown.stderr
    assert "\x1b[2J" not in shown.stdout and "\x1b]0" not in shown.stdout
    assert "[/]" in shown.stdout and trigger.replace("\x1b", "\\x1b") in shown.stdout
    listed = _cli(["runs", "list", "--db", db_url], tty=True)
    assert listed.returncode == 0, listed.stdout
    assert "\x1b[2J" not in listed.stdout and "MarkupError" not in listed.stdout


def test_escapes_are_inert() -> None:
    from regress.facts.escape import markdown, visible, xml_text

    assert visible("a\tb\nc\x1b") == "a\\x09b\\x0ac\\x1b"
    assert "\n" not in markdown(FORGE) and "\\*\\*verdict" in markdown(FORGE) and "\\|" in markdown(FORGE)
    assert xml_text("a\x01b\tc") == "a\\x01b\tc"
