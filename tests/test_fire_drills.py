"""Fire drills end to end on the CPU backend: break the kernel on purpose, prove the gate sees it.

What decides each test is deterministic: output bits, what is recorded, and the gate's rule, whose
statistics are tested on controlled noise in tests/detect/test_verdict.py. The slowdown drill's
gate may answer 1 (caught, cases named) or 2 (too noisy to tell, cases named, with the MDE) on a
loaded CI machine, never 0: a pass needs every case's MDE within 15 %, and a 30 % drill is caught at
that power with near certainty. How often it is 1 rather than 2 depends on the machine's load and
is a measurement (benchmarks/service/fire_drills.py, docs/detection.md), not a test. Clean-against-clean on
real timings is a rate too, for the same reason.

Each test builds its own temp SQLite database through `run_nightly` (the real path: build, suites,
store, analysis). Timing runs single-threaded: on a 2-core runner shared with other jobs, the
two-thread kernel's times turn bimodal (measured: ±40 % between clean runs).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from regress.facts.cases import Shape
from regress.facts.results import AB_BASELINE_SAMPLE, AB_CANDIDATE_SAMPLE
from regress.judge.analysis import list_regressions
from regress.judge.gate import gate, gate_ab
from regress.kernel import load_library
from regress.native.build import build_kernel
from regress.run.nightly import NightlyOptions, plan_cases, run_nightly
from regress.run.suites.common import make_inputs
from regress.store import Case, Result, Run
from regress.store.repo import Store, open_store

# Two clean nights: the baseline and one night of history. Too short a history for the cross-night
# rule on the CPU (no stated prior: it says how many nights would decide); the A/B verdict of the
# drill run decides without history (regress/detect/paired.py).
HISTORY_NIGHTS = 2
DRILL_SLOWDOWN_PCT = 30
AB_ARMS = (AB_BASELINE_SAMPLE, AB_CANDIDATE_SAMPLE)
ITERATIONS = 30


@pytest.fixture
def quiet_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import torch

    monkeypatch.setenv("REGRESS_CPU_THREADS", "1")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    url = f"sqlite:///{tmp_path / 'drills.db'}"
    store = open_store(url)
    try:
        yield url, store
    finally:
        store.engine.dispose()


def _opts(url: str, tmp_path: Path, inject: dict[str, int] | None = None) -> NightlyOptions:
    return NightlyOptions(
        backend="cpu",
        suites=("perf",),
        quick=True,
        db=url,
        out=tmp_path / "out",
        inject=inject,
        iterations=ITERATIONS,
        allow_drift=True,
        trigger="nightly",
    )


def _night(url: str, tmp_path: Path, suites: tuple[str, ...], inject: dict[str, int] | None = None) -> str:
    opts = _opts(url, tmp_path, inject)
    opts.suites = suites
    outcome = run_nightly(opts)
    assert outcome.run_id is not None
    if inject:
        assert outcome.summary, outcome
    return outcome.run_id


def _is_drill(store: Store, run_id: str) -> tuple[bool, str]:
    with store.reader() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.is_drill, run.trigger


@pytest.mark.slow  # two kernel builds (1.9 s CPU)
def test_slowdown_drill_changes_no_output_bit() -> None:
    """The drill adds work, never a different answer: same bits as the clean build."""
    clean = load_library(build_kernel("cpu").path)
    drill = load_library(build_kernel("cpu", inject={"slowdown_pct": DRILL_SLOWDOWN_PCT}).path)
    assert drill.build_info()["inject"]["slowdown_pct"] == DRILL_SLOWDOWN_PCT
    for shape in (Shape(1, 2, 130, 77), Shape(1, 1, 64, 300)):
        q, k, v = make_inputs(shape, "bshd", seed=3, device="cpu")
        a = clean.forward(q, k, v, layout="bshd", rounding="rtne")
        b = drill.forward(q, k, v, layout="bshd", rounding="rtne")
        assert torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.slow
def test_slowdown_drill_is_never_passed_and_records_its_cost(
    quiet_cpu: None, db: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = db
    clean = [_night(url, tmp_path, ("perf",)) for _ in range(HISTORY_NIGHTS)]
    outcome = run_nightly(_opts(url, tmp_path, {"slowdown_pct": DRILL_SLOWDOWN_PCT}))
    drill = str(outcome.run_id)
    assert _is_drill(store, drill) == (True, "drill")

    # A/B by default: the drill build and the clean build timed in the same rounds, both arms stored,
    # in a phase of their own, so the drill's first phase has the clean nights' round structure.
    with store.reader() as session:
        perf = [r for r in session.query(Result).filter(Result.run_id == drill) if r.status == "pass"]
        assert perf and all(r.metrics["drill_requested_pct"] == DRILL_SLOWDOWN_PCT for r in perf)
        assert all(math.isfinite(r.metrics["drill_measured_pct"]) for r in perf)
        # Every passing perf case stores both arms; the SDPA control too, except on varlen cases,
        # which no baseline takes (ABI v2).
        for r in perf:
            case = session.get(Case, r.case_id)
            assert case is not None
            control = set() if "seqs" in case.params else {"baseline:sdpa_cpu:time_ms"}
            assert {s.name for s in r.samples} == {"time_ms", *control, *AB_ARMS}, case.name
        clean_names = {
            s.name for r in session.query(Result).filter(Result.run_id == clean[-1]) for s in r.samples
        }
        assert clean_names == {"time_ms", "baseline:sdpa_cpu:time_ms"}
    cost = outcome.summary["drill"]
    assert cost["requested_pct"] == DRILL_SLOWDOWN_PCT and cost["cases"] == len(perf)

    ab = gate_ab(store, drill, report_dir=tmp_path / "ab")
    assert ab.exit_code in (1, 2), ab.to_dict()  # never a pass; 1 vs 2 is the machine's load
    assert ab.power["mode"] == "ab" and len(ab.rows) == len(perf)
    assert all(r.mde is not None or r.advice for r in ab.rows)
    assert Path(ab.reports["markdown"]).is_file()

    # Cross-night with one night of history on the CPU (no stated prior): undecided by construction,
    # never judged on this pair's own spread, and it says how many nights would decide.
    report = gate(store, clean[-1], drill, report_dir=tmp_path / "gate")
    assert report.exit_code == 2, report.to_dict()
    assert any("more clean night(s) of this stack would decide" in r for r in report.reasons)
    markdown = Path(report.reports["markdown"]).read_text()
    assert "| MDE |" in markdown
    doc = json.loads(Path(report.reports["json"]).read_text())
    assert doc["power"]["max_mde"] == 0.15 and doc["verdict"] == "undecided"
    # The drill's own regressions are stored acknowledged: visible, never alerting.
    drill_regs = [r for r in list_regressions(store) if r["first_run"] == drill]
    assert all(r["drill"] and r["state"] == "acknowledged" for r in drill_regs)
    with store.reader() as session:
        run = session.get(Run, drill)
        assert run is not None and run.summary["analysis"]["verdict"] == "undecided"


@pytest.mark.slow
def test_ulp_drill_fails_the_ulp_suite_and_the_gate(db: tuple[str, Store], tmp_path: Path) -> None:
    url, store = db
    clean = _night(url, tmp_path, ("ulp",))
    outcome = run_nightly(
        NightlyOptions(
            backend="cpu",
            suites=("ulp",),
            quick=True,
            db=url,
            out=tmp_path / "out",
            inject={"ulp": 2},
            allow_drift=True,
        )
    )
    assert outcome.exit_code == 1
    assert outcome.summary["failed"] > 0
    assert all(name.startswith("ulp/") for name in outcome.summary["failing_cases"])
    report = gate(store, clean, str(outcome.run_id))
    assert report.exit_code == 1
    assert {r.suite for r in report.regressions} == {"ulp"}
    assert all(r.mark == "x" for r in report.regressions)


# The directed rounding cases of the two swapped modes (regress.run.suites.rounding.SHAPES x layouts).
SWAPPED_ROUNDING_CASES = {
    f"ulp/b1_h3_sq4_sk{sk}_{layout}_{mode}_rounding"
    for sk in (128, 4)
    for layout in ("bshd", "bhsd")
    for mode in ("rtne", "rtz")
}


@pytest.mark.slow
def test_rounding_swap_drill_fails_the_directed_cases_only(db: tuple[str, Store], tmp_path: Path) -> None:
    """`--inject swap_rounding=rtne:rtz`: the quick CPU nightly exits 1, and the cases that fail are
    exactly the directed rounding cases of the two swapped modes (every scaled-ULP case still
    passes: the blind spot these cases close); the clean build passes them all."""
    url, _ = db
    clean = run_nightly(
        NightlyOptions(backend="cpu", quick=True, db=url, out=tmp_path / "clean", allow_drift=True)
    )
    assert clean.exit_code == 0, clean.summary
    drill = run_nightly(
        NightlyOptions(
            backend="cpu",
            quick=True,
            db=url,
            out=tmp_path / "drill",
            inject={"round_swap": 5},
            allow_drift=True,
        )
    )
    assert drill.exit_code == 1
    assert set(drill.summary["failing_cases"]) == SWAPPED_ROUNDING_CASES


@pytest.mark.slow
def test_nondeterminism_drill_fails_the_determinism_suite(db: tuple[str, Store], tmp_path: Path) -> None:
    url, store = db
    clean = _night(url, tmp_path, ("determinism",))
    outcome = run_nightly(
        NightlyOptions(
            backend="cpu",
            suites=("determinism",),
            quick=True,
            db=url,
            out=tmp_path / "out",
            inject={"nondeterminism": 1},
            allow_drift=True,
        )
    )
    assert outcome.exit_code == 1
    assert any(name.startswith("determinism/") for name in outcome.summary["failing_cases"])
    report = gate(store, clean, str(outcome.run_id))
    assert report.exit_code == 1
    assert {r.suite for r in report.regressions} == {"determinism"}
    assert _is_drill(store, str(outcome.run_id)) == (True, "drill")


def test_a_compare_build_that_is_no_build_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from regress.cli import main

    db = f"sqlite:///{tmp_path / 'r.db'}"
    missing = str(tmp_path / "missing.so")
    args = ["nightly", "--backend", "cpu", "--quick", "--suites", "perf", "--db", db, "--out", str(tmp_path)]
    code = main([*args, "--compare-build", missing])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--compare-build" in err[0] and "missing.so" in err[0]


@pytest.mark.slow
def test_gate_ab_on_two_pinned_stacks_runs_and_judges_one_ab_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI plumbing on a real CPU run: `regress gate --ab --baseline-stack X --candidate-stack Y`
    times Y's build against X's in the same rounds, stores both arms, and judges them; `--ab --run`
    judges the same stored run again. What the verdict is depends on this machine's load, so the
    test checks what was stored and reported, not the outcome."""
    from regress.cli import main
    from regress.judge.gate.core import VERDICT_EXIT

    db = f"sqlite:///{tmp_path / 'r.db'}"
    args = ["gate", "--ab", "--db", db, "--report-dir", str(tmp_path / "gate"), "--json"]
    code = main(
        [
            *args,
            "--baseline-stack",
            "cpu-local",
            "--candidate-stack",
            "cpu-local",
            "--quick",
            "--iterations",
            "10",
        ]
    )
    first = json.loads(capsys.readouterr().out)
    store = open_store(db)
    with store.reader() as session:
        run = session.query(Run).one()
        perf = list(session.query(Result).filter(Result.run_id == run.id))
        quick_perf = [spec for _, spec in plan_cases(NightlyOptions(backend="cpu", quick=True), "cpu", "cpu")]
        assert run.trigger == "gate" and len(perf) == sum(spec.suite == "perf" for spec in quick_perf)
        passed = [r for r in perf if r.status == "pass"]
        assert all({s.name for s in r.samples} >= set(AB_ARMS) for r in passed)
        assert all(r.metrics["ab_baseline"].startswith("stack cpu-local") for r in passed)
    store.engine.dispose()
    assert first["power"]["mode"] == "ab" and first["exit_code"] == code == VERDICT_EXIT[first["verdict"]]
    assert len(first["rows"]) == len(perf) and first["candidate_run"] == run.id
    assert main([*args, "--run", run.id[:10]]) == code  # the same samples, the same verdict
    again = json.loads(capsys.readouterr().out)
    assert again["rows"] == first["rows"]
