"""After every run: each case against the baseline of its series, as Regression records.

A series is (case key, stack digest). Its baseline is the most recent earlier finished, non-drill
run on the same stack that has a result for the case; its history the last `history_runs` of them.
What is flagged (DESIGN §6):

- perf: the rule of `regress.detect.verdict.judge` over all perf cases of the run, the one the gate
  uses (per case: rank test AND effect floor AND noise band, the interleaved control's veto; a shift
  of every case judged once, against the stack's night-to-night band and the controls). A night too
  noisy to judge (some case's minimum detectable effect above `max_mde`) opens nothing for what it
  could not see and says so in the run's summary["analysis"];
- numerics: a ULP result failing its contract (max scaled ULP above the limit, non-finite mismatch),
  and a plain-ULP histogram worse than every run in the history (more elements > 1 ULP);
- determinism: any determinism failure (more than one distinct output hash);
- build: spills appearing, or registers jumping by more than `register_jump`, against the previous
  build of the same stack.

One open (or acknowledged) regression per (case, stack, kind, metric) is updated rather than
duplicated; it resolves itself when the series returns to its old level. Regressions found in fire
drills are stored already acknowledged (visible, never alerting) with details["drill"] = True.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from regress.detect import PairwiseConfig, compare_samples
from regress.detect.config import prior_noise
from regress.detect.verdict import CaseJudgement, RuleConfig, judge, pooled_sigma
from regress.facts.errors import UserError
from regress.facts.escape import readable
from regress.facts.results import CaseSpec
from regress.facts.suite_facts import is_timed
from regress.store import Case, Regression, Result, Run, queries, utcnow
from regress.store.queries import series_histories
from regress.store.repo import Store, add_regression, get_or_create_case

from .evidence import PerfEvidence, PerfPair, perf_evidence, samples, scaled_ulp, usable


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds of the nightly analysis (defaults documented in docs/detection.md): the gate's rule
    with the nightly's tighter per-case floor (2 %) and noise multiple (4)."""

    rule: RuleConfig = field(default_factory=lambda: RuleConfig(pairwise=PairwiseConfig(), max_mde=0.10))
    history_runs: int = 30  # runs of the series used for the noise band and the ULP-histogram history
    register_jump: float = 0.10  # relative register growth that flags a build

    @property
    def pairwise(self) -> PairwiseConfig:
        return self.rule.pairwise


@dataclass
class _Finding:
    case_id: int
    kind: str
    metric: str
    magnitude: float | None
    p_value: float | None
    baseline_run_id: str | None
    details: dict[str, Any]


def plain_ulp_frac_gt1(metrics: dict[str, Any]) -> float | None:
    """Fraction of finite outputs more than 1 plain ULP from the reference, from the histogram."""
    keys = [f"plain_ulp_hist_{k}" for k in ("0", "1", "2", "3", "gt3")]
    if not all(isinstance(metrics.get(k), int | float) for k in keys):
        return None
    total = sum(float(metrics[k]) for k in keys)
    return sum(float(metrics[k]) for k in keys[2:]) / total if total else None


def _perf_pair(case: Case, result: Result, history: Sequence[tuple[Run, Result]]) -> PerfPair | None:
    """This result against the latest earlier usable result of its series (None: nothing to judge)."""
    if not usable(result):
        return None
    for r, res in history:
        if usable(res):
            return PerfPair(case, r, res, result)
    return None


def night_evidence(cfg: AnalysisConfig, session: Session, run: Run) -> PerfEvidence:
    """The rule's inputs for this run's perf cases, each against its series' latest run."""
    timed = [
        (res, case) for res, case in queries.run_results_with_cases(session, run.id) if is_timed(case.suite)
    ]
    histories = series_histories(session, run, [case.id for _, case in timed], cfg.history_runs)
    pairs = [p for result, case in timed if (p := _perf_pair(case, result, histories[case.id]))]
    q = cfg.pairwise.location_quantile
    return perf_evidence(session, pairs, q=q, history_runs=cfg.history_runs, with_control=True)


def rule_for(cfg: RuleConfig, backend: str) -> RuleConfig:
    """The rule with the backend's stated noise prior (detect/config.py) where it has one."""
    case, stack = prior_noise(backend)
    return replace(cfg, prior_sigma=cfg.prior_sigma or case, prior_stack_sigma=cfg.prior_stack_sigma or stack)


def _perf_finding(s: PerfPair, j: CaseJudgement, cfg: AnalysisConfig) -> _Finding:
    return _Finding(
        s.case.id,
        "perf",
        "time_ms",
        (j.ratio or 1.0) - 1.0,
        j.p_value,
        s.base_run.id,
        {
            "ratio": j.ratio,
            "threshold": j.threshold,
            "noise": j.noise,
            "mde": j.mde,
            "note": j.note,
            "location_quantile": cfg.pairwise.location_quantile,
            "baseline_location": j.baseline_location,
            "candidate_location": j.candidate_location,
        },
    )


def _perf_recovered(
    cfg: AnalysisConfig,
    session: Session,
    reg: Regression,
    result: Result,
    levels: Sequence[float] | None,
    pooled: float | None,
) -> bool:
    """Back to the old level: the new run is no longer slower than the regression's baseline run."""
    if reg.baseline_run_id is None or result.status != "pass":
        return False
    base = queries.run_result_of_case(session, reg.baseline_run_id, reg.case_id)
    if base is None:
        return False
    cmp = compare_samples(
        samples(base), samples(result), history=levels, config=cfg.pairwise, pooled_noise=pooled
    )
    # Hysteresis: within half the threshold of the old level, so a borderline case does not flap.
    return cmp.verdict == "faster" or abs(cmp.relative_change) < cmp.threshold / 2


def _numerics(cfg: AnalysisConfig, result: Result, hist: Sequence[tuple[Run, Result]]) -> list[_Finding]:
    out: list[_Finding] = []
    m = result.metrics
    su, limit = scaled_ulp(m), m.get("scaled_ulp_limit")
    if result.status == "fail":
        mag = (
            (su / float(limit) - 1.0) if su is not None and isinstance(limit, int | float) and limit else None
        )
        out.append(
            _Finding(
                result.case_id,
                "numerics",
                "ulp_contract",
                mag,
                None,
                None,
                {
                    "scaled_ulp_max": su,
                    "limit": limit,
                    "nonfinite_mismatches": m.get("nonfinite_mismatches"),
                    "message": result.message,
                },
            )
        )
    frac = plain_ulp_frac_gt1(m)
    if frac is not None:
        past = [f for _, res in hist if (f := plain_ulp_frac_gt1(res.metrics)) is not None]
        # Same stack, same seed, same inputs: the histogram is exact, so any growth is a change.
        if past and frac > max(past) + 1e-12:
            out.append(
                _Finding(
                    result.case_id,
                    "numerics",
                    "plain_ulp_frac_gt1",
                    (frac - max(past)),
                    None,
                    hist[0][0].id,
                    {"frac_gt1": frac, "history_max": max(past), "history_runs": len(past)},
                )
            )
    return out


def _determinism(result: Result) -> list[_Finding]:
    distinct = result.metrics.get("distinct_hashes")
    if result.status == "fail" or (isinstance(distinct, int | float) and distinct > 1):
        return [
            _Finding(
                result.case_id,
                "determinism",
                "distinct_hashes",
                float(distinct) - 1.0 if isinstance(distinct, int | float) else None,
                None,
                None,
                {
                    "distinct_hashes": distinct,
                    "differing_elements": result.metrics.get("differing_elements"),
                    "message": result.message,
                },
            )
        ]
    return []


def _build_case(session: Session, run: Run) -> Case:
    # Build resources are not a suite result; they get one case per backend so they fit the
    # Regression model (which needs a case) and show up beside the others.
    return get_or_create_case(
        session, CaseSpec(suite="build", name=f"{run.backend}_resources", params={"backend": run.backend})
    )


def build_findings(
    cfg: AnalysisConfig, new: dict[str, Any], old: dict[str, Any]
) -> list[tuple[str, float, dict[str, Any]]]:
    """(metric, magnitude, details) for spills appearing and registers jumping, per kernel and overall."""
    out: list[tuple[str, float, dict[str, Any]]] = []
    pairs: list[tuple[str, dict[str, Any], dict[str, Any]]] = [("", new, old)]
    for name, k in (new.get("kernels") or {}).items():
        prev = (old.get("kernels") or {}).get(name)
        if isinstance(prev, dict) and isinstance(k, dict):
            pairs.append((name, k, prev))
    for name, n, o in pairs:
        label = f"{name}:" if name else ""
        spill_keys = (
            ["max_spill"]
            if not name
            else [k for k in ("spill_store_bytes", "spill_load_bytes", "sgpr_spill", "vgpr_spill") if k in n]
        )
        new_spill = sum(int(n.get(k, 0) or 0) for k in spill_keys)
        old_spill = sum(int(o.get(k, 0) or 0) for k in spill_keys)
        if spill_keys and new_spill > 0 and old_spill == 0:
            out.append((f"{label}spills", float(new_spill), {"kernel": name or None, "spills": new_spill}))
        for reg_key in ("max_registers",) if not name else ("registers", "vgprs", "agprs", "sgprs"):
            a, b = o.get(reg_key), n.get(reg_key)
            if isinstance(a, int | float) and isinstance(b, int | float) and a > 0:
                jump = b / a - 1.0
                if jump > cfg.register_jump:
                    out.append((f"{label}{reg_key}", jump, {"kernel": name or None, "before": a, "after": b}))
    return out


def _build(cfg: AnalysisConfig, session: Session, run: Run) -> tuple[list[_Finding], int | None]:
    if run.build_id is None:
        return [], None
    build = queries.build_by_id(session, run.build_id)
    prev_run = queries.previous_built_run(session, run)
    if build is None or prev_run is None or not build.stats:
        return [], None
    prev = queries.build_by_id(session, prev_run.build_id)
    if prev is None or not prev.stats:
        return [], None
    case = _build_case(session, run)
    findings = [
        _Finding(case.id, "build", metric, mag, None, prev_run.id, details)
        for metric, mag, details in build_findings(cfg, build.stats, prev.stats)
    ]
    return findings, case.id


def _upsert(session: Session, run: Run, f: _Finding) -> Regression:
    existing = queries.active_regression(
        session, case_id=f.case_id, stack_id=run.stack_id, kind=f.kind, metric=f.metric
    )
    now = utcnow()
    details = {**f.details, **({"drill": True} if run.is_drill else {})}
    if existing is not None:
        if run.is_drill and not existing.details.get("drill"):
            return existing  # a drill must not touch a real regression's record
        existing.last_run_id = run.id
        existing.magnitude = f.magnitude
        existing.p_value = f.p_value
        existing.details = {**existing.details, **details, "runs": int(existing.details.get("runs", 1)) + 1}
        existing.updated_at = now
        return existing
    return add_regression(
        session,
        case_id=f.case_id,
        stack_id=run.stack_id,
        kind=f.kind,
        metric=f.metric,
        state="acknowledged" if run.is_drill else "open",
        first_run_id=run.id,
        baseline_run_id=f.baseline_run_id,
        last_run_id=run.id,
        magnitude=f.magnitude,
        p_value=f.p_value,
        details={**details, "runs": 1},
        note=f"fire drill: {_injected(session, run)} injected on purpose" if run.is_drill else "",
        created_at=now,
        updated_at=now,
    )


def _injected(session: Session, run: Run) -> str:
    build = queries.build_by_id(session, run.build_id)
    inject = build.inject if build is not None else {}
    return ", ".join(f"{k}={readable(v)}" for k, v in sorted(inject.items())) or "a fault"


def _resolve(reg: Regression, run: Run, why: str) -> None:
    reg.state = "resolved"
    reg.resolved_at = reg.updated_at = utcnow()
    reg.last_run_id = run.id
    reg.details = {**reg.details, "resolved_by": run.id, "resolution": why}


def analyse_run(store: Store, run_id: str, config: AnalysisConfig | None = None) -> list[int]:
    """Analyses one stored run; returns the ids of the regressions it created or updated (not resolved).

    One transaction: the records change together or not at all.
    """
    cfg = config or AnalysisConfig()
    touched: list[Regression] = []
    with store.transaction() as session:
        run = queries.run_by_id(session, run_id)
        if run is None:
            raise KeyError(f"run {run_id} does not exist")
        rows = queries.run_results_with_cases(session, run_id)
        findings: list[_Finding] = []
        checked: dict[int, Result] = {}  # case id -> result that was judged (for auto-resolve)
        ulp = [
            case.id
            for result, case in rows
            if case.suite == "ulp" and plain_ulp_frac_gt1(result.metrics) is not None
        ]
        ulp_history = series_histories(session, run, ulp, cfg.history_runs)
        for result, case in rows:
            if result.status in ("skip", "error", "timeout"):
                continue
            checked[case.id] = result
            if case.suite == "ulp":
                findings += _numerics(cfg, result, ulp_history.get(case.id, []))
            elif case.suite == "determinism":
                findings += _determinism(result)
        ev = night_evidence(cfg, session, run)
        rule = rule_for(cfg.rule, run.backend)
        pooled = pooled_sigma(ev.inputs, rule.pairwise) or rule.prior_sigma
        levels_by_case = {p.case.id: inp.history for p, inp in zip(ev.pairs, ev.inputs, strict=True)}
        if ev.inputs:
            judged = judge(ev.inputs, rule)
            findings += [
                _perf_finding(s, j, cfg)
                for s, j in zip(ev.pairs, judged.cases, strict=True)
                if j.status == "regression"
            ]
            # Recorded on the run: what the night could see, and a night too noisy to judge as such.
            run.summary = {
                **(run.summary or {}),
                "analysis": {
                    "verdict": judged.verdict,
                    "reasons": ev.reasons + judged.reasons,
                    "too_noisy": judged.too_noisy,
                    "max_mde": cfg.rule.max_mde,
                    "mde": {j.name: round(j.mde, 4) for j in judged.cases if j.mde is not None},
                    "stack_mde": judged.aggregate.get("mde"),
                    "noisy_nights": ev.dropped_nights,
                },
            }
        build_found, build_case_id = _build(cfg, session, run)
        findings += build_found

        flagged = {(f.case_id, f.kind, f.metric) for f in findings}
        for f in findings:
            touched.append(_upsert(session, run, f))

        # Auto-resolve: active regressions of this stack whose case was judged and is now clean.
        # Drills never resolve anything: a broken build says nothing about the real series.
        if not run.is_drill:
            for reg in queries.active_regressions_of_stack(session, run.stack_id):
                if (reg.case_id, reg.kind, reg.metric) in flagged:
                    continue
                last = checked.get(reg.case_id)
                if reg.details.get("drill"):
                    _resolve(reg, run, "drill over: a clean run followed")
                elif reg.kind == "perf" and last is not None:
                    levels = levels_by_case.get(reg.case_id)
                    if _perf_recovered(cfg, session, reg, last, levels, pooled):
                        _resolve(reg, run, "back to the baseline level")
                    else:  # still slow against its own baseline: the record follows the series
                        reg.last_run_id, reg.updated_at = run.id, utcnow()
                        reg.details = {**reg.details, "runs": int(reg.details.get("runs", 1)) + 1}
                        touched.append(reg)
                elif reg.kind in ("numerics", "determinism") and last is not None:
                    if last.status == "pass":
                        _resolve(reg, run, "passes again")
                elif reg.kind == "build" and reg.case_id == build_case_id:
                    _resolve(reg, run, "resources back within bounds")
        session.flush()
        return [r.id for r in touched]


def regressions_for_run(store: Store, run_id: str) -> Sequence[Regression]:
    """Regressions first seen or last updated by this run."""
    with store.reader() as session:
        return queries.regressions_touched_by_run(session, run_id)


def list_regressions(store: Store, state: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
    """Regressions newest first, each with its case, stack and runs, as plain dicts."""
    with store.reader() as session:
        return [
            {
                "id": reg.id,
                "state": reg.state,
                "kind": reg.kind,
                "metric": reg.metric,
                "suite": case.suite,
                "case": case.name,
                "case_key": case.key,
                "stack": stack.name,
                "stack_digest": stack.digest,
                "magnitude": reg.magnitude,
                "p_value": reg.p_value,
                "first_run": reg.first_run_id,
                "baseline_run": reg.baseline_run_id,
                "last_run": reg.last_run_id,
                "note": reg.note,
                "drill": bool(reg.details.get("drill")),
                "details": reg.details,
                "created_at": reg.created_at.isoformat(),
                "updated_at": reg.updated_at.isoformat(),
                "resolved_at": reg.resolved_at.isoformat() if reg.resolved_at else None,
            }
            for reg, case, stack in queries.regressions_with_case_and_stack(session, state=state, limit=limit)
        ]


def acknowledge(store: Store, regression_id: int, note: str) -> None:
    """A known regression: it stops alerting (gates and the site's open list) but stays visible."""
    if not note.strip():
        raise UserError("an acknowledgement needs a note saying why (e.g. an issue link)")
    with store.transaction() as session:
        reg = _get_regression(session, regression_id)
        if reg.state == "resolved":
            raise UserError(f"regression {regression_id} is already resolved")
        reg.state, reg.note, reg.updated_at = "acknowledged", note.strip(), utcnow()


def resolve(store: Store, regression_id: int, note: str = "") -> None:
    """Closes a regression by hand (it also closes itself when its series returns to the old level)."""
    with store.transaction() as session:
        reg = _get_regression(session, regression_id)
        if reg.state == "resolved":
            raise UserError(f"regression {regression_id} is already resolved")
        reg.state = "resolved"
        reg.resolved_at = reg.updated_at = utcnow()
        reg.details = {**reg.details, "resolution": "resolved by hand"}
        if note.strip():
            reg.note = note.strip()


def _get_regression(session: Session, regression_id: int) -> Regression:
    reg = queries.regression_by_id(session, regression_id)
    if reg is None:
        raise UserError(f"no regression with id {regression_id}")
    return reg
