"""The upgrade gate: may this candidate (stack, compiler, driver...) ship against the baseline?

`gate(store, baseline_sel, candidate_sel)` resolves both selectors to runs, checks they measured the
same kernel source, judges the perf cases with the pure rule of `regress.detect.verdict` (the same
one the nightly analysis uses) and numerics and determinism as exact gates, writes the reports
(regress/judge/gate/render.py), stores a GateDecision and returns the report. Exit 0 pass (nothing
regressed AND every case could have shown a slowdown of `max_mde`), 1 regression (named, with size
and p), 2 undecided (too noisy, missing, different sources; with what would make it decidable).
`compare` builds the same table without a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from regress.detect import PairwiseConfig
from regress.detect.paired import ABConfig, judge_ab
from regress.detect.verdict import CaseJudgement, Judgement, RuleConfig, judge
from regress.facts.errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED, UserError
from regress.facts.suite_facts import is_exact, is_timed
from regress.store import FINISHED_STATES, Case, Result, Run, queries
from regress.store.queries import find_run
from regress.store.repo import Store, record_gate_decision

from ..analysis import plain_ulp_frac_gt1, rule_for
from ..evidence import PerfPair, ab_inputs, alternating_inputs, perf_evidence, scaled_ulp
from .render import write_reports
from .report import GateReport, GateRow

VERDICT_EXIT = {"pass": EXIT_OK, "regression": EXIT_FAILED, "undecided": EXIT_UNDECIDED}


@dataclass(frozen=True)
class GateConfig:
    """Gate settings. The rule (`regress.detect.verdict.RuleConfig`) holds the statistics: an effect
    floor wider than the nightly one (5 % against 2 %, since two runs on two stacks differ by more
    than two nights on one and a gate that cries wolf gets bypassed), noise_k 4 as the nightly's
    (the band is 4·√2 sigmas of the case's own run-to-run noise: the perf suite now times one
    thread with a passive OpenMP wait, so the 10 % jumps of a 1.3 % sigma case that once asked for
    6 came from the scheduler, not the kernel), and the MDE limits a pass needs. `ab`: the rule
    of an A/B run (`regress gate --ab`)."""

    rule: RuleConfig = field(
        default_factory=lambda: RuleConfig(pairwise=PairwiseConfig(min_effect=0.05, noise_k=4.0))
    )
    ab: ABConfig = field(default_factory=ABConfig)
    history_runs: int = 30
    require_same_source: bool = True
    # Same stack: a case is not flagged when the baseline kernel, timed in the same interleaved
    # rounds, moved as much as ours (a burst on the machine during that case's window, not the
    # kernel; seen on the shared CPU: one 0.3 ms case +11 %). Across stacks the control is part of
    # what is judged (a driver can slow it too), so there is no such veto.
    control_veto_same_stack: bool = True

    @property
    def pairwise(self) -> PairwiseConfig:
        return self.rule.pairwise


def resolve_selector(session: Session, sel: str) -> Run:
    """A run id (or a unique prefix of one), or `stack:NAME`: the latest finished, non-drill run of
    the pinned stack NAME (a run whose suites failed counts: the gate must see that failure)."""
    if sel.startswith("stack:"):
        name = sel.removeprefix("stack:")
        run = queries.latest_finished_run_of_stack(session, name)
        if run is None:
            raise UserError(f"no finished run of stack {name!r} in the database")
        return run
    return find_run(session, sel)


def resolve_pair(session: Session, baseline_sel: str, candidate_sel: str) -> tuple[Run, Run]:
    """Both selectors as runs; the same run twice is refused (a run always passes against itself,
    which says nothing)."""
    base = resolve_selector(session, baseline_sel)
    cand = resolve_selector(session, candidate_sel)
    if base.id == cand.id:
        raise UserError(
            f"baseline and candidate are the same run ({base.id}): a gate needs two runs "
            "(or one A/B run: `regress gate --ab --run RUN`)"
        )
    return base, cand


def _run_info(session: Session, run: Run) -> dict[str, Any]:
    stack = queries.stack_by_id(session, run.stack_id)
    return {
        "id": run.id,
        "status": run.status,
        "is_drill": run.is_drill,
        "backend": run.backend,
        "source_hash": run.source_hash,
        "kernel_commit": run.kernel_commit,
        "stack": stack.name if stack else None,
        "stack_digest": stack.digest if stack else None,
        "started_at": run.started_at.isoformat() if run.started_at else None,
    }


def _results(session: Session, run_id: str) -> dict[str, tuple[Case, Result]]:
    return {case.key: (case, res) for res, case in queries.run_results_with_cases(session, run_id)}


def _perf_row(case: Case, j: CaseJudgement) -> GateRow:
    return GateRow(
        case.suite,
        case.name,
        case.key,
        j.mark,
        j.status,
        "time_ms",
        j.baseline_location,
        j.candidate_location,
        j.ratio,
        j.p_value,
        j.threshold,
        j.note,
        j.mde,
        j.limited_by,
        j.noise,
        j.advice,
    )


def _exact_row(case: Case, b: Result, c: Result) -> GateRow:
    """Numerics and determinism: the candidate must pass its contract, and must not get worse."""
    if case.suite == "ulp":
        metric, bv, cv = "scaled_ulp_max", scaled_ulp(b.metrics), scaled_ulp(c.metrics)
    else:
        metric = "distinct_hashes"
        bv = b.metrics.get("distinct_hashes")
        cv = c.metrics.get("distinct_hashes")
    row = GateRow(
        case.suite,
        case.name,
        case.key,
        " ",
        "same",
        metric,
        float(bv) if isinstance(bv, int | float) else None,
        float(cv) if isinstance(cv, int | float) else None,
    )
    if row.baseline and row.candidate is not None:
        row.ratio = row.candidate / row.baseline
    if c.status == "fail":
        row.mark, row.status, row.note = "x", "regression", c.message or "fails its contract"
    elif case.suite == "ulp":
        fb, fc = plain_ulp_frac_gt1(b.metrics), plain_ulp_frac_gt1(c.metrics)
        if fb is not None and fc is not None and fc > fb + 1e-12:
            row.mark, row.note = "~", f"more outputs > 1 ULP: {fc:.2e} vs {fb:.2e} (flagged, not failing)"
    return row


_UNCOMPARED = ("error", "timeout", "skip")  # statuses a gate cannot compare


def _gap_row(case: Case, key: str, note: str) -> GateRow:
    """A case the gate could not compare (missing, errored, timed out, skipped): undecided."""
    return GateRow(case.suite, case.name, key, "?", "undecided", "", note=note)


def _status_note(res: Result) -> str:
    return f"{res.status}: {res.message}"[:200]


def _gap_reason(n: int) -> str:
    return f"{n} case(s) could not be compared (missing, errored or skipped)"


def _table(
    cfg: GateConfig, session: Session, base: Run, cand: Run
) -> tuple[list[GateRow], Judgement, list[str]]:
    b_res, c_res = _results(session, base.id), _results(session, cand.id)
    rows: list[GateRow] = []
    perf: list[tuple[int, Case]] = []
    pairs: list[PerfPair] = []
    same_stack = base.stack_id == cand.stack_id and cfg.control_veto_same_stack

    def order(k: str) -> tuple[str, str, str]:  # total: perf and ulp cases share names
        case = (b_res.get(k) or c_res[k])[0]
        return case.name, case.suite, k

    for key in sorted(set(b_res) | set(c_res), key=order):
        case = (b_res.get(key) or c_res[key])[0]
        if key not in c_res or key not in b_res:
            side = "candidate" if key not in c_res else "baseline"
            rows.append(_gap_row(case, key, f"missing in {side}"))
            continue
        (_, b), (_, c) = b_res[key], c_res[key]
        if c.status in _UNCOMPARED or b.status in _UNCOMPARED:
            rows.append(_gap_row(case, key, _status_note(c if c.status in _UNCOMPARED else b)))
            continue
        if is_timed(case.suite):
            perf.append((len(rows), case))
            pairs.append(PerfPair(case, base, b, c))
            rows.append(GateRow(case.suite, case.name, key, "?", "undecided", "time_ms"))
        elif is_exact(case.suite):
            rows.append(_exact_row(case, b, c))
    q = cfg.pairwise.location_quantile
    ev = perf_evidence(session, pairs, q=q, history_runs=cfg.history_runs, with_control=same_stack)
    judged = judge(ev.inputs, rule_for(cfg.rule, base.backend))
    for (i, case), j in zip(perf, judged.cases, strict=True):
        rows[i] = _perf_row(case, j)
    return rows, judged, ev.reasons


def _unfinished(runs: list[tuple[str, Run]]) -> list[str]:
    """A reason per run that did not finish (still running, or incomplete: killed or reaped)."""
    return [f"{label} {run.id} is {run.status}" for label, run in runs if run.status not in FINISHED_STATES]


def _decide(regressed: bool, unfinished: bool, unseen: bool) -> tuple[str, list[str]]:
    """The one precedence of every gate mode: regression > unfinished > pass. An unfinished run
    cannot take back a slowdown or a contract failure measured on the cases it did finish; without
    one, what the run did not finish (or anything else unseen) leaves the verdict undecided."""
    if regressed:
        note = ["the regression was measured on the cases the unfinished run finished"] if unfinished else []
        return "regression", note
    return ("undecided" if unfinished or unseen else "pass"), []


def _verdict(
    rows: list[GateRow], judged: Judgement, blocked: bool, unfinished: bool
) -> tuple[str, list[str]]:
    """The verdict and its reasons in words: the perf rule's, then the exact gates' and the gaps.
    `blocked` (different or missing kernel sources) is undecided ahead of everything: the gate
    cannot attribute a difference to the stack; `unfinished` ranks below a regression found."""
    reasons = list(judged.reasons)
    exact = [r for r in rows if r.status == "regression" and r.metric != "time_ms"]
    if exact:
        reasons.append(
            f"{len(exact)} case(s) fail their exact contract: "
            + ", ".join(f"{r.suite}/{r.case} ({r.note})" for r in exact[:10])
        )
    if not rows:
        reasons.append("no cases in common")
    missing = [r for r in rows if r.status == "undecided" and r.metric != "time_ms"]
    if missing:
        reasons.append(_gap_reason(len(missing)))
    if blocked:
        return "undecided", reasons
    unseen = not rows or bool(missing) or judged.verdict == "undecided"
    verdict, notes = _decide(judged.verdict == "regression" or bool(exact), unfinished, unseen)
    return verdict, reasons + notes


def _build_report(cfg: GateConfig, session: Session, base: Run, cand: Run, gating: bool) -> GateReport:
    report = GateReport(
        base.id,
        cand.id,
        None,
        EXIT_OK,
        baseline_info=_run_info(session, base),
        candidate_info=_run_info(session, cand),
    )
    blocked = False
    if gating and cfg.require_same_source:
        if not base.source_hash or not cand.source_hash:
            report.reasons.append("a run has no kernel source hash: cannot tell it is the same kernel")
            blocked = True
        elif base.source_hash != cand.source_hash:
            report.reasons.append(
                f"different kernel sources ({base.source_hash[:12]} vs "
                f"{cand.source_hash[:12]}): a gate compares stacks, not kernels"
            )
            blocked = True
    unfinished = _unfinished([("baseline run", base), ("candidate run", cand)]) if gating else []
    report.reasons += unfinished
    rows, judged, notes = _table(cfg, session, base, cand)
    verdict, reasons = _verdict(rows, judged, blocked, bool(unfinished))
    report.rows, report.reasons, report.aggregate = rows, report.reasons + reasons + notes, judged.aggregate
    rule = cfg.rule
    report.power = {
        "power": rule.power,
        "max_mde": rule.max_mde,
        "max_stack_mde": rule.max_stack_mde,
        "stack_mde": judged.aggregate.get("mde"),
        "too_noisy": judged.too_noisy,
        "alpha": rule.pairwise.alpha,
    }
    if gating:
        report.verdict = verdict
        report.exit_code = VERDICT_EXIT[verdict]
    return report


def gate(
    store: Store,
    baseline_sel: str,
    candidate_sel: str,
    config: GateConfig | None = None,
    report_dir: Path | None = None,
) -> GateReport:
    """Gates the candidate against the baseline; writes reports (if report_dir) and a GateDecision."""
    cfg = config or GateConfig()
    with store.transaction() as session:
        # Unknown, ambiguous or identical selectors raise (one line, exit 2) before anything is
        # written: no report files, no decision.
        base, cand = resolve_pair(session, baseline_sel, candidate_sel)
        report = _build_report(cfg, session, base, cand, gating=True)
        _write_and_record(session, report, base.id, cand.id, report_dir)
    return report


def compare(store: Store, run_a: str, run_b: str, config: GateConfig | None = None) -> GateReport:
    """The gate's table for any two runs (A baseline, B candidate), without a verdict."""
    with store.reader() as session:
        a, b = resolve_pair(session, run_a, run_b)
        return _build_report(config or GateConfig(), session, a, b, gating=False)


def _ab_row(case: Case, j: CaseJudgement) -> GateRow:
    row = _perf_row(case, j)
    row.metric = "time_ms (A/B)"
    row.baseline, row.candidate = j.baseline_location, j.candidate_location
    return row


def _contract_row(case: Case, res: Result) -> GateRow:
    """An exact case the candidate fails: a regression whatever the timings say."""
    return GateRow(case.suite, case.name, case.key, "x", "regression", "contract", note=res.message)


def _ab_gaps(
    runs: list[tuple[Run, list[tuple[Case, Result]]]], judged: set[str], absent: str
) -> tuple[list[GateRow], list[str]]:
    """What an A/B verdict did not see, as the cross-night gate counts it (docs/detection.md): cases
    left out of the judgement, each a row marked undecided: a case of a suite whose other cases were
    judged (its samples missing, or it errored, timed out or was skipped; `absent` says why a passed
    one was not judged), and an exact case that did not run. Unfinished runs: `_unfinished`."""
    judged_suites = {case.suite for _, rows in runs for case, _ in rows if case.key in judged}
    gaps: dict[str, GateRow] = {}
    for _, rows in runs:
        for case, res in rows:
            if case.key in judged or case.key in gaps:
                continue
            if res.status in _UNCOMPARED and (is_exact(case.suite) or case.suite in judged_suites):
                note = _status_note(res)
            elif res.status == "pass" and is_timed(case.suite) and case.suite in judged_suites:
                note = absent
            else:
                continue
            gaps[case.key] = _gap_row(case, case.key, note)
    rows_out = list(gaps.values())
    return rows_out, [_gap_reason(len(rows_out))] if rows_out else []


def _ab_verdict(
    judged: str, failed: list[GateRow], gaps: list[GateRow], unfinished: bool
) -> tuple[str, list[str]]:
    """The cross-night gate's precedence (`_decide`): a regression found stands, even on an
    unfinished run; otherwise anything unseen leaves the A/B verdict undecided."""
    return _decide(bool(failed) or judged == "regression", unfinished, bool(gaps) or judged == "undecided")


def ab_report(cfg: GateConfig, session: Session, run: Run) -> GateReport:
    """The A/B verdict of one run that timed a baseline build beside its own in the same rounds."""
    rows_in = [(case, res) for res, case in queries.run_results_with_cases(session, run.id)]
    inputs = ab_inputs([(c, r) for c, r in rows_in if is_timed(c.suite)])
    if not inputs:
        raise UserError(
            f"run {run.id} has no A/B samples: it was not run with `regress nightly --compare-build` "
            "(or a slowdown drill)"
        )
    judged = judge_ab(inputs, cfg.ab)
    by_key = {c.key: c for c, _ in rows_in}
    rows = [_ab_row(by_key[j.key], j) for j in judged.cases]
    for case, res in rows_in:  # the candidate's own exact suites still count
        if is_exact(case.suite) and res.status == "fail":
            rows.append(_contract_row(case, res))
    failed = [r for r in rows if r.mark == "x"]
    gaps, gap_reasons = _ab_gaps([(run, rows_in)], {j.key for j in judged.cases}, "no A/B samples")
    rows += gaps
    unfinished = _unfinished([("run", run)])
    verdict, notes = _ab_verdict(judged.verdict, failed, gaps, bool(unfinished))
    reasons = [*judged.reasons, *unfinished, *gap_reasons]
    if failed:
        reasons.append(f"{len(failed)} case(s) of the candidate fail their exact contract")
    reasons += notes
    info = _run_info(session, run)
    metrics = next((res.metrics for c, res in rows_in if is_timed(c.suite)), {})
    report = GateReport(
        run.id,
        run.id,
        verdict,
        VERDICT_EXIT[verdict],
        reasons,
        rows,
        baseline_info={**info, "arm": "baseline build", "build": metrics.get("ab_baseline")},
        candidate_info={**info, "arm": "candidate build (the run's own)"},
        aggregate=judged.aggregate,
    )
    report.power = _ab_power(cfg, judged, "ab")
    return report


def _ab_power(cfg: GateConfig, judged: Judgement, mode: str) -> dict[str, Any]:
    """What an A/B verdict could have seen: the rule's power and MDE limits beside the stack's MDE."""
    return {
        "power": cfg.ab.power,
        "max_mde": cfg.ab.max_mde,
        "max_stack_mde": cfg.ab.max_stack_mde,
        "stack_mde": judged.aggregate.get("mde"),
        "too_noisy": judged.too_noisy,
        "alpha": cfg.ab.alpha,
        "mode": mode,
    }


def _write_and_record(
    session: Session, report: GateReport, baseline_run_id: str, candidate_run_id: str, report_dir: Path | None
) -> None:
    """The reports (if report_dir) and the stored GateDecision, in the caller's transaction."""
    if report_dir is not None:
        write_reports(report, report_dir)
    report.decision_id = record_gate_decision(
        session,
        baseline_run_id=baseline_run_id,
        candidate_run_id=candidate_run_id,
        verdict=report.verdict or "undecided",
        exit_code=report.exit_code,
        report=report.to_dict(),
    )


def gate_ab(
    store: Store, run_sel: str, config: GateConfig | None = None, report_dir: Path | None = None
) -> GateReport:
    """A/B: gates the run's own build against the baseline build timed in the same rounds on the
    same device (`regress nightly --compare-build`); writes reports and a GateDecision."""
    cfg = config or GateConfig()
    with store.transaction() as session:
        run = resolve_selector(session, run_sel)
        report = ab_report(cfg, session, run)
        _write_and_record(session, report, run.id, run.id, report_dir)
    return report


def _alternating_arms(session: Session, sels: list[str]) -> tuple[list[Run], list[Run]]:
    """Runs given in the order they ran, A B A B ...; each arm must be one build (one artifact)."""
    if len(sels) < 2 or len(sels) % 2:
        raise UserError(
            f"--alternating needs an even number of runs in the order they ran (A B A B ...), got {len(sels)}"
        )
    runs = [resolve_selector(session, s) for s in sels]
    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise UserError(f"--alternating: run {dup} is given twice; each block is its own run")
    a_runs, b_runs = runs[0::2], runs[1::2]

    def artifact(run: Run) -> tuple[str, str] | None:
        # The artifact, not the build row: a row is one runner's whole record of a build
        # (store/build.py), and two records of one artifact are one build to measure.
        build = queries.build_by_id(session, run.build_id)
        return None if build is None else (build.backend, build.artifact_hash)

    arms = []
    for arm, name in ((a_runs, "A (baseline)"), (b_runs, "B (candidate)")):
        builds = {artifact(r) for r in arm}
        if len(builds) != 1:
            raise UserError(
                f"--alternating: the {name} runs measured {len(builds)} different builds, not one"
            )
        arms.append(builds.pop())
    if arms[0] == arms[1]:
        raise UserError("--alternating: both arms ran the same build; there is nothing to compare")
    return a_runs, b_runs


def gate_alternating(
    store: Store, sels: list[str], config: GateConfig | None = None, report_dir: Path | None = None
) -> GateReport:
    """A/B by alternated processes: runs of two builds that cannot share a process (two ROCm
    containers) taken A B A B ... on one device; each adjacent (A_i, B_i) pair is one paired block,
    judged by the same rule as an in-process A/B run (`regress.detect.paired`)."""
    cfg = config or GateConfig()
    with store.transaction() as session:
        a_runs, b_runs = _alternating_arms(session, sels)

        def results(run: Run) -> list[tuple[Case, Result]]:
            return [(case, res) for res, case in queries.run_results_with_cases(session, run.id)]

        every = {run.id: results(run) for run in (*a_runs, *b_runs)}

        def perf_rows(run: Run) -> list[tuple[Case, Result]]:
            return [(case, res) for case, res in every[run.id] if is_timed(case.suite)]

        arms = [(perf_rows(a), perf_rows(b)) for a, b in zip(a_runs, b_runs, strict=True)]
        inputs = alternating_inputs(arms, cfg.pairwise.location_quantile)
        if not inputs:
            raise UserError("--alternating: no perf case passed with samples in every run of both arms")
        judged = judge_ab(inputs, cfg.ab)
        by_key = {c.key: c for rows in arms for c, _ in rows[1]}
        rows = [_ab_row(by_key[j.key], j) for j in judged.cases]
        for row in rows:
            row.metric = "time_ms (A/B, alternated runs)"
        for run in b_runs:  # the candidate arm's exact suites still count, as in ab_report
            for case, res in every[run.id]:
                if (
                    is_exact(case.suite)
                    and res.status == "fail"
                    and case.key not in {r.case_key for r in rows}
                ):
                    rows.append(_contract_row(case, res))
        failed = [r for r in rows if r.mark == "x"]
        runs = [(run, every[run.id]) for run in (*a_runs, *b_runs)]
        gaps, gap_reasons = _ab_gaps(
            runs, {j.key for j in judged.cases}, "not passed with samples in every run of both arms"
        )
        rows += gaps
        unfinished = _unfinished([("run", run) for run, _ in runs])
        verdict, notes = _ab_verdict(judged.verdict, failed, gaps, bool(unfinished))
        reasons = [
            f"A/B by {len(a_runs)} alternated pairs of runs (A {a_runs[0].id}…, B {b_runs[0].id}…)",
            *judged.reasons,
            *unfinished,
            *gap_reasons,
        ]
        if failed:
            reasons.append(f"{len(failed)} case(s) of arm B fail their exact contract")
        reasons += notes
        report = GateReport(
            a_runs[0].id,
            b_runs[0].id,
            verdict,
            VERDICT_EXIT[verdict],
            reasons,
            rows,
            baseline_info={**_run_info(session, a_runs[0]), "arm": "A", "runs": [r.id for r in a_runs]},
            candidate_info={**_run_info(session, b_runs[0]), "arm": "B", "runs": [r.id for r in b_runs]},
            aggregate=judged.aggregate,
        )
        report.power = _ab_power(cfg, judged, "ab-alternating")
        _write_and_record(session, report, a_runs[0].id, b_runs[0].id, report_dir)
    return report
