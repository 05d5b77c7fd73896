"""Issue #42 item 5: one output convention for every listing, progress when piped, next commands.

The real CLI in child processes with stdout piped (no terminal), as a CI job or `| less` sees it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from committed import headline_bundle

from regress.cli import main
from regress.cli.commands.nightly import next_gate_command
from regress.judge.gate.render import summary_lines
from regress.judge.gate.report import GateReport, GateRow
from regress.run.nightly import NightlyOptions, NightlyOutcome

ROOT = Path(__file__).resolve().parents[2]
SHARDED = headline_bundle("h200x2-full-sharded-01a22bb6efff5a4d06bc5e7d")


def _regress(args: list[str], columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "regress", *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def sharded_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('out') / 'r.db'}"
    assert main(["import", str(SHARDED), "--db", url]) == 0
    return url


@pytest.mark.slow  # CLI subprocesses
def test_runs_show_piped_keeps_every_case_name_whole(sharded_db: str) -> None:
    """At 80 columns main cut `..._bshd_rtna`, `_rtne`, `_rtz` to one `..._bs…`."""
    bundle = json.loads(SHARDED.read_text())
    for columns in (None, 80):
        shown = _regress(["runs", "show", bundle["run"]["id"], "--db", sharded_db], columns)
        assert shown.returncode == 0, shown.stderr
        assert "…" not in shown.stdout
        words = set(shown.stdout.split())
        assert {r["name"] for r in bundle["results"]} <= words


@pytest.mark.slow
def test_listings_are_tables_and_take_tsv_and_json(sharded_db: str) -> None:
    run_id = json.loads(SHARDED.read_text())["run"]["id"]
    piped = _regress(["runs", "list", "--db", sharded_db])
    assert piped.returncode == 0 and "\t" not in piped.stdout  # the same table as on a terminal
    row = next(line for line in piped.stdout.splitlines() if run_id in line)
    assert "h200-cuda13.0" in row and "complete" in row  # one row a line, piped
    tsv = _regress(["runs", "list", "--tsv", "--db", sharded_db]).stdout.splitlines()
    assert tsv[0].split("\t")[0] == "id" and tsv[1].split("\t")[0] == run_id
    shown = _regress(["runs", "show", run_id, "--tsv", "--db", sharded_db]).stdout.splitlines()
    assert shown[0] == "suite\tcase\tstatus\theadline" and len(shown) == 1 + 303
    listed = _regress(["regressions", "list", "--tsv", "--db", sharded_db])
    assert listed.returncode == 0, listed.stderr


@pytest.mark.slow
def test_regressions_list_is_sized_to_the_width(tmp_path: Path) -> None:
    """main printed it 200 columns wide whatever the terminal."""
    from regress.present.demo import demo_history
    from regress.store.repo import open_store

    url = f"sqlite:///{tmp_path / 'demo.db'}"
    store = open_store(url)
    demo_history(store, nights=20, stacks=1, cases=24, seed=3, samples=8)
    store.engine.dispose()
    listed = _regress(["regressions", "list", "--db", url], columns=100)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) > 3 and max(len(line) for line in lines) <= 100
    tsv = _regress(["regressions", "list", "--tsv", "--db", url]).stdout.splitlines()
    change = tsv[0].split("\t").index("change")
    changes = [line.split("\t")[change] for line in tsv[1:]]
    assert changes and all(c.endswith(("× the limit", "% time")) for c in changes), changes  # units


@pytest.mark.slow
def test_help_lists_each_command_with_its_whole_first_sentence() -> None:
    shown = _regress(["--help"], columns=80)
    commands = shown.stdout.split("Commands:")[1]
    assert "..." not in commands and "(e.g." not in commands
    flat = " ".join(commands.split())
    assert "import Store run bundles, such as benchmarks/headline/*.json, through the service's own " in flat


def test_the_same_run_twice_hints_the_ab_gate(sharded_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = json.loads(SHARDED.read_text())["run"]["id"]
    assert main(["gate", "--baseline", run_id, "--candidate", run_id, "--db", sharded_db]) == 2
    assert "`regress gate --ab --run RUN`" in capsys.readouterr().err


def test_undecided_advice_is_grouped_not_repeated() -> None:
    shared = "3 more night(s) of history would replace the noise estimate borrowed from the other cases"
    rows = [
        GateRow(
            suite="perf",
            case=f"case{i}",
            case_key=f"k{i}",
            mark="?",
            status="undecided",
            metric="time_ms",
            advice=f"MDE {5 + i / 10:.1f} % (limit 5.0 %): a smaller slowdown could be missed; {shared}",
        )
        for i in range(40)
    ]
    report = GateReport(baseline_run="a", candidate_run="b", verdict="undecided", exit_code=2, rows=rows)
    lines = summary_lines(report)
    text = "\n".join(lines)
    assert text.count(shared) == 1 and "40 case(s): " + shared in text
    assert text.count("a smaller slowdown could be missed") == 1
    assert all(f"perf/case{i}: MDE" in text for i in range(40))
    assert len(lines) <= 40 + 5


def test_drills_and_ab_runs_print_the_gate_command() -> None:
    done = NightlyOutcome(run_id="01abc", exit_code=1)
    slow = NightlyOptions(inject={"slowdown_pct": 30}, suites=("perf",))
    assert next_gate_command(slow, done) == "regress gate --ab --run 01abc"
    ab = NightlyOptions(compare_build="stack:h200-cuda13.0", db="sqlite:///x y.db")
    assert next_gate_command(ab, done) == "regress gate --ab --run 01abc --db 'sqlite:///x y.db'"
    ulp = NightlyOptions(inject={"ulp": 3}, stack="cpu-local", suites=("ulp",))
    assert next_gate_command(ulp, done) == "regress gate --baseline stack:cpu-local --candidate 01abc"
    assert next_gate_command(NightlyOptions(), done) is None  # a plain nightly is judged by its analysis


@pytest.mark.slow
def test_demo_history_says_how_far_it_is_when_piped(tmp_path: Path) -> None:
    done = _regress(["demo-history", "--nights", "2", "--stacks", "1", "--cases", "12",
                     "--db", f"sqlite:///{tmp_path / 'd.db'}"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "[1/2] night written and judged" in done.stderr and "[2/2]" in done.stderr
