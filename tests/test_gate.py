"""The upgrade gate on hand-built runs: verdicts, exit codes, selectors and the three reports."""

from __future__ import annotations

import itertools
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest

from regress.cli import main
from regress.facts.errors import UserError
from regress.facts.results import CaseResult, CaseSpec
from regress.judge.gate import GateConfig, compare, gate, render_html
from regress.store import GateDecision
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, record_build, start_run

CASES = [f"b1_h{h}_sq{s}_sk{s}_bshd_rtne" for h in (1, 2) for s in (128, 256, 512, 1024, 2048)]
_rng = np.random.default_rng(0)


def _perf(name: str, level: float, cv: float = 0.005, n: int = 60) -> CaseResult:
    times = level * (1 + cv * np.abs(_rng.standard_normal(n)))  # timing noise only adds time
    return CaseResult(
        case=CaseSpec("perf", name, {"b": 1, "mode": "rtne"}),
        status="pass",
        metrics={"p50_ms": float(np.median(times))},
        samples={"time_ms": [float(t) for t in times]},
    )


def add_run(
    store: Store,
    results: list[CaseResult],
    *,
    stack: str = "rocm-a",
    source: str = "src-1",
    drill: bool = False,
    status: str = "complete",
) -> str:
    with store.transaction() as session:
        st = get_or_create_stack(session, digest=f"digest-{stack}", keys={}, schema_version=1, name=stack)
        build = record_build(
            session,
            st,
            {
                "backend": "cpu",
                "source_hash": source,
                "compiler": "c++",
                "compiler_version": "1",
                "flags": [],
                "artifact_hash": f"{stack}-{source}-{drill}",
                "stats": {},
                "inject": {"slowdown_pct": 10} if drill else {},
            },
        )
        stack_id, build_id = st.id, build.id
    rid = start_run(
        store,
        stack_id=stack_id,
        build_id=build_id,
        backend="cpu",
        suites=["perf"],
        source_hash=source,
        is_drill=drill,
        trigger="drill" if drill else "nightly",
    )
    for r in results:
        add_result(store, rid, r)
    finish_run(store, rid, status=status)
    return rid


def history(store: Store, nights: int = 6, stack: str = "rocm-a", **levels: float) -> list[str]:
    return [add_run(store, [_perf(c, levels.get(c, 1.0)) for c in CASES], stack=stack) for _ in range(nights)]


def test_slowed_cases_are_named_and_exit_1(store: Store, tmp_path: Path) -> None:
    runs = history(store)
    slowed = CASES[:3]
    cand = add_run(store, [_perf(c, 1.10 if c in slowed else 1.0) for c in CASES], stack="rocm-b")
    report = gate(store, runs[-1], cand, report_dir=tmp_path)
    assert (report.verdict, report.exit_code) == ("regression", 1)
    assert sorted(r.case for r in report.regressions) == sorted(slowed)
    assert all(r.mark == "+" for r in report.regressions)
    with store.reader() as session:
        decision = session.get(GateDecision, report.decision_id)
        assert decision is not None and decision.exit_code == 1 and decision.verdict == "regression"


def test_clean_against_clean_passes(store: Store) -> None:
    runs = history(store, nights=8)
    for base, cand in itertools.pairwise(runs[5:]):
        report = gate(store, base, cand)
        assert (report.verdict, report.exit_code) == ("pass", 0), report.regressions


def test_a_small_systematic_slowdown_is_caught_by_the_aggregate(store: Store) -> None:
    runs = history(store)
    cand = add_run(store, [_perf(c, 1.04) for c in CASES], stack="rocm-b")
    report = gate(store, runs[-1], cand)  # 4 % is below the 5 % per-case floor
    assert report.exit_code == 1
    assert report.aggregate["verdict"] == "slower"
    assert len(report.regressions) == len(CASES)
    assert "systematic slowdown" in report.regressions[0].note


def test_speedup_is_not_a_regression(store: Store) -> None:
    runs = history(store)
    cand = add_run(store, [_perf(c, 0.8) for c in CASES], stack="rocm-b")
    report = gate(store, runs[-1], cand)
    assert report.exit_code == 0
    assert {r.mark for r in report.rows} == {"-"}


def test_stack_selector_takes_the_latest_finished_non_drill_run(store: Store) -> None:
    history(store)
    add_run(store, [_perf(c, 1.0) for c in CASES], stack="rocm-b")
    latest = add_run(store, [_perf(c, 1.0) for c in CASES], stack="rocm-b")
    add_run(store, [_perf(c, 1.3) for c in CASES], stack="rocm-b", drill=True)
    add_run(store, [_perf(c, 1.3) for c in CASES], stack="rocm-b", status="incomplete")
    report = gate(store, "stack:rocm-a", "stack:rocm-b")
    assert report.candidate_run == latest
    assert report.exit_code == 0


@pytest.mark.parametrize(
    ("sel", "reason"),
    [("stack:nope", "no finished run of stack"), ("ffff", "not found"), ("0", "ambiguous")],
)
def test_unknown_or_ambiguous_selectors_are_one_line_exit_2_and_no_files(
    store: Store, tmp_path: Path, sel: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped run id used to write gate-none-vs-none.* report files and a decision."""
    runs = history(store, nights=2)
    with pytest.raises(UserError, match=reason):
        gate(store, runs[0], sel, report_dir=tmp_path / "api")
    url = store.engine.url.render_as_string(hide_password=False)
    out_dir = tmp_path / "reports"
    code = main(
        ["gate", "--db", url, "--report-dir", str(out_dir), "--baseline", runs[0], "--candidate", sel]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and reason in err[0]
    assert not out_dir.exists() and not (tmp_path / "api").exists()
    with store.reader() as session:
        assert session.query(GateDecision).count() == 0


def test_the_same_run_twice_is_refused(store: Store, tmp_path: Path) -> None:
    """A run gated against itself used to pass (or, on noisy runs, exit 2): it says nothing."""
    runs = history(store, nights=2)
    with pytest.raises(UserError, match="same run"):
        gate(store, runs[-1], runs[-1][:14], report_dir=tmp_path / "reports")
    with pytest.raises(UserError, match="same run"):
        compare(store, runs[-1], runs[-1])
    assert not (tmp_path / "reports").exists()


def test_different_kernel_sources_are_undecided(store: Store) -> None:
    runs = history(store)
    cand = add_run(store, [_perf(c, 1.5) for c in CASES], stack="rocm-b", source="src-2")
    report = gate(store, runs[-1], cand)
    assert (report.verdict, report.exit_code) == ("undecided", 2)
    assert "different kernel sources" in report.reasons[0]


def test_missing_cases_are_undecided(store: Store) -> None:
    runs = history(store)
    cand = add_run(store, [_perf(c, 1.0) for c in CASES[:-2]], stack="rocm-b")
    report = gate(store, runs[-1], cand)
    assert report.exit_code == 2
    assert sum("missing in candidate" in r.note for r in report.rows) == 2


def _exact(suite: str, name: str, status: str, **metrics: Any) -> CaseResult:
    return CaseResult(case=CaseSpec(suite, name, {"mode": "rtne"}), status=status, metrics=metrics)  # type: ignore[arg-type]


def test_numerics_and_determinism_are_exact_gates(store: Store) -> None:
    ulp_ok = _exact("ulp", "u1", "pass", scaled_ulp_max=0.5, scaled_ulp_limit=1.5)
    det_ok = _exact("determinism", "d1", "pass", distinct_hashes=1)
    base = add_run(store, [ulp_ok, det_ok])
    cand = add_run(
        store,
        [
            _exact("ulp", "u1", "fail", scaled_ulp_max=4.2, scaled_ulp_limit=1.5),
            _exact("determinism", "d1", "fail", distinct_hashes=2),
        ],
        stack="rocm-b",
    )
    report = gate(store, base, cand)
    assert report.exit_code == 1
    assert {(r.suite, r.mark) for r in report.regressions} == {("ulp", "x"), ("determinism", "x")}
    assert gate(store, base, add_run(store, [ulp_ok, det_ok], stack="rocm-b")).exit_code == 0


def test_rows_come_in_one_order_when_suites_share_case_names(store: Store) -> None:
    # Cases of different suites share names; the order must not depend on set iteration (a
    # process's string hashes), or two renders of the same gate differ.
    names = [f"b1_h1_sq{s}_sk{s}_bshd_rtne" for s in (64, 128, 256, 512, 1024, 2048, 77, 99, 300, 4096)]

    def night() -> list[CaseResult]:
        return [
            r
            for n in names
            for r in (
                _perf(n, 1.0),
                _exact("ulp", n, "pass", scaled_ulp_max=0.5, scaled_ulp_limit=1.5),
                _exact("determinism", n, "pass", distinct_hashes=1),
            )
        ]

    base, cand = add_run(store, night()), add_run(store, night(), stack="rocm-b")
    rows = [(r.case, r.suite) for r in gate(store, base, cand).rows]
    assert len(rows) == 3 * len(names)
    assert rows == sorted(rows)


def test_reports_markdown_html_junit(store: Store, tmp_path: Path) -> None:
    runs = history(store)
    weird = "<script>alert(1)</script>"
    base = add_run(store, [*(_perf(c, 1.0) for c in CASES), _perf(weird, 1.0)])
    cand = add_run(store, [*(_perf(c, 1.2 if c == CASES[0] else 1.0) for c in CASES), _perf(weird, 1.0)])
    assert runs
    report = gate(store, base, cand, report_dir=tmp_path)
    md = Path(report.reports["markdown"]).read_text()
    assert "verdict: regression" in md and CASES[0] in md
    html = Path(report.reports["html"]).read_text()
    assert weird not in html and "&lt;script&gt;" in html
    suite = ET.parse(report.reports["junit"]).getroot()
    assert suite.get("failures") == "1"
    failed = [tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert failed == [CASES[0]]
    assert json.loads(Path(report.reports["json"]).read_text())["exit_code"] == 1
    assert "<script>" not in render_html(report)


def test_a_noisy_stack_is_undecided_in_every_format_with_mde_and_reason(store: Store, tmp_path: Path) -> None:
    """Nights that wander 10-30 % per case: nothing is called slower, but a pass would be a guess,
    so exit 2, naming the cases, their MDE and what would make them decidable."""
    rng = np.random.default_rng(4)
    runs = [
        add_run(store, [_perf(c, float(np.exp(0.2 * rng.standard_normal()))) for c in CASES])
        for _ in range(7)
    ]
    report = gate(store, runs[-2], runs[-1], report_dir=tmp_path)
    assert (report.verdict, report.exit_code) == ("undecided", 2), report.reasons
    assert report.too_noisy and all(r.mde is not None and r.mde > 0.15 for r in report.too_noisy)
    assert any("too noisy" in r for r in report.reasons)
    md = Path(report.reports["markdown"]).read_text()
    assert "| MDE |" in md and "verdict: undecided" in md and report.too_noisy[0].advice in md
    html = Path(report.reports["html"]).read_text()
    assert "MDE" in html and "too noisy" in html
    suite = ET.parse(report.reports["junit"]).getroot()
    skipped = [tc for tc in suite.iter("testcase") if tc.find("skipped") is not None]
    assert len(skipped) == len(report.too_noisy)
    assert any(p.get("name") == "reason.0" for p in suite.iter("property"))
    doc = json.loads(Path(report.reports["json"]).read_text())
    assert doc["power"]["too_noisy"] and all("mde" in row for row in doc["rows"])


def test_compare_has_no_verdict(store: Store) -> None:
    a, b = history(store, nights=2)
    report = compare(store, a, b)
    assert report.verdict is None and len(report.rows) == len(CASES)


def test_cli_exit_codes(store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = history(store)
    url = store.engine.url.render_as_string(hide_password=False)
    slow = add_run(store, [_perf(c, 1.2) for c in CASES], stack="rocm-b")
    args = ["gate", "--db", url, "--report-dir", str(tmp_path)]
    assert main([*args, "--baseline", runs[-1], "--candidate", slow]) == 1
    out = capsys.readouterr().out
    assert "verdict: regression" in out and CASES[0] in out
    assert main([*args, "--baseline", runs[-2], "--candidate", runs[-1]]) == 0
    assert main([*args, "--baseline", runs[-1], "--candidate", "stack:missing"]) == 2
    assert main(["compare", runs[-1], slow, "--db", url]) == 0
    assert "+" in capsys.readouterr().out


def test_gate_config_floor_is_documented_default() -> None:
    """docs/detection.md's RuleConfig table states the gate's floor, noise k, alpha and location:
    read the row and hold the code's defaults to it (a changed default or a stale doc fails)."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "detection.md").read_text(encoding="utf-8")
    row = re.search(r"^\| per-case floor / noise k / rank-test alpha / location \| ([^|]+)\|", doc, re.M)
    assert row, "docs/detection.md lost the RuleConfig row of floor, noise k, alpha and location"
    floor, noise_k, alpha, location = (part.strip() for part in row.group(1).split(" / "))
    cfg = GateConfig().pairwise
    assert float(floor.rstrip(" %")) / 100 == pytest.approx(cfg.min_effect)
    assert float(noise_k) == cfg.noise_k
    assert float(alpha) == cfg.alpha
    assert {"lower quartile": 0.25, "median": 0.5}[location] == cfg.location_quantile


def _with_control(result: CaseResult, control_level: float) -> CaseResult:
    times = control_level * (1 + 0.005 * np.abs(_rng.standard_normal(len(result.samples["time_ms"]))))
    result.samples["baseline:sdpa_cpu:time_ms"] = [float(t) for t in times]
    return result


def test_a_case_whose_interleaved_control_moved_too_is_not_flagged(store: Store) -> None:
    """Same stack: one case 12 % slower while the baseline kernel in the same rounds is 12 % slower
    too is the machine; 12 % slower with the control unchanged is the kernel."""
    runs = [add_run(store, [_with_control(_perf(c, 1.0), 2.0) for c in CASES]) for _ in range(6)]
    burst = add_run(
        store,
        [
            _with_control(_perf(c, 1.12 if c == CASES[0] else 1.0), 2.24 if c == CASES[0] else 2.0)
            for c in CASES
        ],
    )
    report = gate(store, runs[-1], burst)
    assert report.exit_code == 0, report.regressions
    row = next(r for r in report.rows if r.case == CASES[0])
    assert row.mark == "~" and "sdpa_cpu moved" in row.note
    kernel = add_run(store, [_with_control(_perf(c, 1.12 if c == CASES[0] else 1.0), 2.0) for c in CASES])
    report = gate(store, runs[-1], kernel)
    assert report.exit_code == 1 and [r.case for r in report.regressions] == [CASES[0]]


def _alternated(store: Store, pairs: int, slowdown: float) -> list[str]:
    """Runs of two builds in the order they ran, A B A B ...: the drill flag gives arm B its own
    build (artifact), as a second container's build would be."""
    out: list[str] = []
    for _ in range(pairs):
        out.append(add_run(store, [_perf(c, 1.0) for c in CASES]))
        out.append(add_run(store, [_perf(c, 1.0 + slowdown) for c in CASES], drill=True))
    return out


@pytest.mark.slow  # two alternated nights written and gated (1.7 s CPU a database)
def test_alternated_runs_decide_a_slowdown_and_a_clean_pair(store: Store, tmp_path: Path) -> None:
    from regress.judge.gate import gate_alternating

    slow = gate_alternating(store, _alternated(store, 10, 0.10), report_dir=tmp_path / "slow")
    assert slow.exit_code == 1, slow.reasons
    assert all(r.status == "regression" for r in slow.rows)
    assert slow.power["mode"] == "ab-alternating"
    clean = gate_alternating(store, _alternated(store, 10, 0.0))
    assert clean.exit_code == 0, clean.reasons
    assert clean.reasons[0].startswith("A/B by 10 alternated pairs of runs")


def test_too_few_alternated_pairs_are_undecided_naming_how_many_would_decide(
    db_url: str, store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = _alternated(store, 3, 0.10)
    args = ["gate", "--ab", "--alternating", ",".join(runs), "--db", db_url, "--report-dir", str(tmp_path)]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 2
    assert "at least 10 alternated pairs of runs would let it decide" in out


def test_alternated_runs_that_do_not_alternate_two_builds_are_refused(store: Store) -> None:
    from regress.judge.gate import gate_alternating

    runs = _alternated(store, 2, 0.0)
    with pytest.raises(UserError, match="even number of runs"):
        gate_alternating(store, runs[:3])
    with pytest.raises(UserError, match="given twice"):
        gate_alternating(store, [runs[0], runs[1], runs[0], runs[3]])
    with pytest.raises(UserError, match="same build"):
        gate_alternating(store, [runs[0], runs[2]])
    with pytest.raises(UserError, match="different builds"):
        gate_alternating(store, [runs[0], runs[1], runs[3], runs[2]])


def _ab_perf(name: str, slowdown: float = 0.0, status: str = "pass", n: int = 60) -> CaseResult:
    """A perf case of an A/B run: both builds timed in the same rounds (noise only adds time)."""
    from regress.facts.results import AB_BASELINE_SAMPLE, AB_CANDIDATE_SAMPLE

    base = 1.0 + 0.005 * np.abs(_rng.standard_normal(n))
    cand = (1.0 + slowdown) * (1.0 + 0.005 * np.abs(_rng.standard_normal(n)))
    if status != "pass":
        return CaseResult(CaseSpec("perf", name, {"b": 1}), status, message=f"the case {status}")  # type: ignore[arg-type]
    return CaseResult(
        case=CaseSpec("perf", name, {"b": 1, "mode": "rtne"}),
        status="pass",
        metrics={"p50_ms": float(np.median(cand))},
        samples={
            "time_ms": cand.tolist(),
            AB_BASELINE_SAMPLE: base.tolist(),
            AB_CANDIDATE_SAMPLE: cand.tolist(),
        },
    )


def test_an_ab_run_with_a_case_it_could_not_time_is_undecided_naming_it(store: Store) -> None:
    """A/B gating counts what it did not see as the cross-night gate does: a timed-out case, a passed
    case without both arms' samples, or an unfinished run is undecided (exit 2), never a pass."""
    from regress.judge.gate import gate_ab

    clean = add_run(store, [_ab_perf(c) for c in CASES])
    assert gate_ab(store, clean).exit_code == 0
    hung = add_run(store, [_ab_perf(c, status="timeout" if c == CASES[3] else "pass") for c in CASES])
    report = gate_ab(store, hung)
    assert report.exit_code == 2, report.reasons
    gap = [r for r in report.rows if r.status == "undecided"]
    assert [r.case for r in gap] == [CASES[3]] and gap[0].note.startswith("timeout")
    assert "1 case(s) could not be compared" in " ".join(report.reasons)
    bare = [_ab_perf(c) for c in CASES]
    bare[0].samples = {"time_ms": bare[0].samples["time_ms"]}  # one arm's samples lost
    report = gate_ab(store, add_run(store, bare))
    assert report.exit_code == 2 and [r.note for r in report.rows if r.case == CASES[0]] == ["no A/B samples"]
    cut = add_run(store, [_ab_perf(c) for c in CASES[:6]], status="incomplete")
    report = gate_ab(store, cut)
    assert report.exit_code == 2 and f"run {cut} is incomplete" in report.reasons


def test_an_ab_regression_stands_beside_a_case_it_could_not_time(store: Store) -> None:
    from regress.judge.gate import gate_ab

    rows = [_ab_perf(c, slowdown=0.10) for c in CASES[:-1]] + [_ab_perf(CASES[-1], status="error")]
    assert gate_ab(store, add_run(store, rows)).exit_code == 1


@pytest.mark.slow  # ten alternated pairs written and gated
def test_alternated_runs_with_a_case_missing_from_one_run_are_undecided(store: Store) -> None:
    from regress.judge.gate import gate_alternating

    runs = _alternated(store, 10, 0.0)
    assert gate_alternating(store, runs).exit_code == 0
    runs = []
    for i in range(10):
        runs.append(add_run(store, [_perf(c, 1.0) for c in CASES]))
        b = [_perf(c, 1.0) for c in CASES if not (i == 4 and c == CASES[2])]  # B4 lost a case
        runs.append(add_run(store, b, drill=True))
    report = gate_alternating(store, runs)
    assert report.exit_code == 2, report.reasons
    assert [(r.case, r.note) for r in report.rows if r.status == "undecided"] == [
        (CASES[2], "not passed with samples in every run of both arms")
    ]


def test_a_regression_on_an_unfinished_run_stands_and_names_the_run(store: Store) -> None:
    """Precedence regression > unfinished > pass: an unfinished run made the cross-night gate
    undecided even over the slowdown it had measured on the cases it finished (the A/B gate called
    it). Different kernel sources still come first: the gate cannot blame the stack for them."""
    runs = history(store)
    slowed = CASES[:3]
    cut = add_run(
        store,
        [_perf(c, 1.10 if c in slowed else 1.0) for c in CASES[:-2]],
        stack="rocm-b",
        status="incomplete",
    )
    report = gate(store, runs[-1], cut)
    assert (report.verdict, report.exit_code) == ("regression", 1), report.reasons
    assert sorted(r.case for r in report.regressions) == sorted(slowed)
    assert f"candidate run {cut} is incomplete" in report.reasons
    assert any("unfinished run finished" in r for r in report.reasons)

    ulp_ok = _exact("ulp", "u1", "pass", scaled_ulp_max=0.5, scaled_ulp_limit=1.5)
    ulp_bad = _exact("ulp", "u1", "fail", scaled_ulp_max=4.2, scaled_ulp_limit=1.5)
    base = add_run(store, [ulp_ok])
    assert gate(store, base, add_run(store, [ulp_bad], stack="rocm-b", status="incomplete")).exit_code == 1

    clean = add_run(store, [_perf(c, 1.0) for c in CASES], stack="rocm-b", status="incomplete")
    report = gate(store, runs[-1], clean)
    assert (report.verdict, report.exit_code) == ("undecided", 2), report.reasons
    assert f"candidate run {clean} is incomplete" in report.reasons

    other = add_run(
        store, [_perf(c, 1.10 if c in slowed else 1.0) for c in CASES], stack="rocm-b", source="src-2"
    )
    report = gate(store, runs[-1], other)
    assert (report.verdict, report.exit_code) == ("undecided", 2)
    assert "different kernel sources" in report.reasons[0]


def test_both_gate_modes_rank_regression_over_unfinished_over_pass(store: Store) -> None:
    """The same unfinished night judged cross-night and A/B: a regression it measured is 1 in both,
    naming the unfinished run; the same night without the slowdown is 2 in both, never 0."""
    from regress.judge.gate import gate_ab

    runs = history(store)
    for slowdown, verdict in ((0.10, "regression"), (0.0, "undecided")):
        night = [_ab_perf(c, slowdown=slowdown) for c in CASES[:-2]]
        cut = add_run(store, night, stack="rocm-b", status="incomplete")
        cross, ab = gate(store, runs[-1], cut), gate_ab(store, cut)
        assert (cross.verdict, ab.verdict) == (verdict, verdict), (cross.reasons, ab.reasons)
        assert f"candidate run {cut} is incomplete" in cross.reasons
        assert f"run {cut} is incomplete" in ab.reasons
        noted = [any("unfinished run finished" in r for r in x.reasons) for x in (cross, ab)]
        assert noted == [verdict == "regression"] * 2


def _cli_runs(store: Store) -> tuple[str, list[str], str]:
    """A clean cross-night pair (that passes) and a clean A/B run, and the URL of their database."""
    runs = history(store, nights=6)
    ab_run = add_run(store, [_ab_perf(c) for c in CASES])
    return store.engine.url.render_as_string(hide_password=False), runs, ab_run


@pytest.mark.parametrize(
    "extra",
    [
        ["--alternating", "RUNS"],
        ["--run", "AB"],
        ["--baseline-stack", "rocm-a", "--candidate-stack", "rocm-b"],
        ["--quick", "--iterations", "5"],
        ["--run", "AB", "--alternating", "RUNS", "--quick"],
    ],
)
def test_ab_only_options_without_ab_are_a_usage_error_naming_each(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    """`gate --baseline A --candidate B --alternating ...` ran the cross-night gate and ignored the
    A/B options (exit 0 here, a decision stored); now exit 2 before the database is read."""
    url, runs, ab_run = _cli_runs(store)
    extra = [{"RUNS": ",".join(runs[:2]), "AB": ab_run}.get(x, x) for x in extra]
    out_dir = tmp_path / "reports"
    args = [
        "gate",
        "--db",
        url,
        "--report-dir",
        str(out_dir),
        "--baseline",
        runs[-2],
        "--candidate",
        runs[-1],
    ]
    code = main([*args, *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Usage: regress gate" in err
    ab_only = ("--run", "--alternating", "--baseline-stack", "--candidate-stack", "--quick", "--iterations")
    named = ", ".join(o for o in ab_only if o in extra)
    assert err.rsplit("Error:", 1)[1].strip() == f"only with --ab (A/B mode): {named}"
    assert not out_dir.exists()
    with store.reader() as session:
        assert session.query(GateDecision).count() == 0
    assert main(args) == 0  # the same gate without them: defaults are never counted as given
    absent = tmp_path / "absent.db"  # refused before the database is opened: none is created
    assert main([*args[:2], f"sqlite:///{absent}", *args[3:], *extra]) == 2
    assert "only with --ab" in capsys.readouterr().err and not absent.exists()


@pytest.mark.parametrize(
    ("extra", "named", "why"),
    [
        (["--baseline", ""], ["--baseline"], "not with --ab"),
        (
            ["--baseline", "RUN", "--candidate", "RUN"],
            ["--baseline", "--candidate"],
            "not with --ab",
        ),
        (["--quick"], ["--quick"], "not a stored run"),
        (["--iterations", "5"], ["--iterations"], "not a stored run"),
    ],
)
def test_options_ab_would_ignore_are_a_usage_error_naming_each(
    store: Store,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    named: list[str],
    why: str,
) -> None:
    """With --ab: the cross-night selectors (an empty --baseline slipped past the old check and was
    ignored), and --quick/--iterations beside a stored run (they shape a new run only), were
    ignored; now exit 2, naming each, with nothing stored."""
    url, runs, ab_run = _cli_runs(store)
    extra = [runs[-1] if x == "RUN" else x for x in extra]
    out_dir = tmp_path / "reports"
    args = ["gate", "--ab", "--run", ab_run, "--db", url, "--report-dir", str(out_dir)]
    code = main([*args, *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Usage: regress gate" in err and why in err
    message = err.rsplit("Error:", 1)[1].strip()
    assert message.split(": ", 1)[1].split(";")[0] == ", ".join(named)
    assert not out_dir.exists()
    with store.reader() as session:
        assert session.query(GateDecision).count() == 0
    assert main(args) == 0


def test_the_ab_only_options_are_the_ones_whose_help_says_with_ab() -> None:
    """One list to refuse by, kept in step with the help that tells the user."""
    from regress.cli.commands.gate import AB_ONLY, STACKS_ONLY, gate_cmd

    with_ab = {
        p.name
        for p in gate_cmd.params
        if isinstance(p, click.Option) and (p.help or "").startswith("With --ab")
    }
    assert with_ab == set(AB_ONLY)
    assert set(STACKS_ONLY) == {
        p.name
        for p in gate_cmd.params
        if isinstance(p, click.Option) and "With --ab and stacks" in (p.help or "")
    }
