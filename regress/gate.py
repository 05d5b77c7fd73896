"""The upgrade gate: may this candidate (stack, compiler, driver...) ship against the baseline?

`gate(store, baseline_sel, candidate_sel)` resolves both selectors to runs, checks they measured the
same kernel source, compares every case (perf by `regress.detect.compare_samples`, numerics and
determinism as exact gates), writes Markdown, HTML and JUnit XML reports, stores a GateDecision and
returns the report; its exit code is 0 pass, 1 regression, 2 undecided. `compare` builds the same
table without a verdict.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from scipy import stats
from sqlalchemy import select
from sqlalchemy.orm import Session

from .analysis import FINISHED, PERF_SAMPLE, perf_levels, plain_ulp_frac_gt1, pooled_noise, series_history
from .detect import PairwiseConfig, compare_samples, historical_noise
from .errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED, UserError
from .store import Case, GateDecision, Result, Run, Stack
from .store.repo import Store

VERDICT_EXIT = {"pass": EXIT_OK, "regression": EXIT_FAILED, "undecided": EXIT_UNDECIDED}


@dataclass(frozen=True)
class GateConfig:
    """Gate thresholds. The effect floor is wider than the nightly one (5 % against 2 %): two runs on
    two stacks differ by more than two nights on one, and a gate that cries wolf gets bypassed."""

    # noise_k 6 (about 8.5 sigma of one run): one case on a busy runner can jump 10 % with a 1.3 %
    # sigma (measured on a shared 2-core CPU); stack-wide shifts are the aggregate's job below.
    pairwise: PairwiseConfig = field(default_factory=lambda: PairwiseConfig(min_effect=0.05, noise_k=6.0))
    history_runs: int = 30
    require_same_source: bool = True
    # Same stack: a case is not flagged when the baseline kernel, timed in the same interleaved
    # rounds, moved as much as ours (a burst on the machine during that case's window, not the
    # kernel; seen on the shared CPU: one 0.3 ms case +11 %). Across stacks the control is part of
    # what is judged (a driver can slow it too), so there is no such veto.
    control_veto_same_stack: bool = True
    perf_suites: tuple[str, ...] = ("perf", "e2e")
    # A systematic slowdown: the geometric mean ratio over all perf cases at least this much...
    aggregate_min_effect: float = 0.03
    # ...and a one-sided Wilcoxon signed-rank test on the per-case log ratios below this p-value.
    # One case can be disturbed by a busy machine; a whole stack cannot hide in 18 noisy cases.
    aggregate_alpha: float = 0.001
    aggregate_min_cases: int = 8
    # ...and beyond the stack's own night-to-night swing: the one-sided (1 - alpha) prediction bound
    # of the geomean change between consecutive baseline nights (a runner whose clocks drift 2 % a
    # night must not fail on 3 %).
    aggregate_noise_alpha: float = 0.01


@dataclass
class GateRow:
    """One case of the table. mark: + slower, - faster, ~ unclear, ? missing/insufficient, x failed."""

    suite: str
    case: str
    case_key: str
    mark: str
    status: str  # regression | improvement | same | undecided
    metric: str
    baseline: float | None = None
    candidate: float | None = None
    ratio: float | None = None
    p_value: float | None = None
    threshold: float | None = None
    note: str = ""


@dataclass
class GateReport:
    baseline_run: str | None
    candidate_run: str | None
    verdict: str | None  # None for `compare`
    exit_code: int
    reasons: list[str] = field(default_factory=list)
    rows: list[GateRow] = field(default_factory=list)
    baseline_info: dict[str, Any] = field(default_factory=dict)
    candidate_info: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    decision_id: int | None = None
    aggregate: dict[str, Any] = field(default_factory=dict)

    @property
    def regressions(self) -> list[GateRow]:
        return [r for r in self.rows if r.status == "regression"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_run": self.baseline_run,
            "candidate_run": self.candidate_run,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "reasons": self.reasons,
            "baseline": self.baseline_info,
            "candidate": self.candidate_info,
            "aggregate": self.aggregate,
            "rows": [asdict(r) for r in self.rows],
            "reports": self.reports,
        }


def resolve_selector(session: Session, sel: str) -> Run:
    """A run id (or a unique prefix of one), or `stack:NAME`: the latest finished, non-drill run of
    the pinned stack NAME (a run whose suites failed counts: the gate must see that failure)."""
    if sel.startswith("stack:"):
        name = sel.removeprefix("stack:")
        run = session.scalars(
            select(Run)
            .join(Stack, Stack.id == Run.stack_id)
            .where(Stack.name == name, Run.status.in_(FINISHED), Run.is_drill.is_(False))
            .order_by(Run.started_at.desc(), Run.id.desc())
            .limit(1)
        ).first()
        if run is None:
            raise UserError(f"no finished run of stack {name!r} in the database")
        return run
    run = session.get(Run, sel)
    if run is not None:
        return run
    matches = session.scalars(select(Run).where(Run.id.startswith(sel)).limit(2)).all()
    if len(matches) == 1:
        return matches[0]
    raise UserError(f"run {sel!r} not found" if not matches else f"run prefix {sel!r} is ambiguous")


def _run_info(session: Session, run: Run) -> dict[str, Any]:
    stack = session.get(Stack, run.stack_id)
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
    rows = session.execute(
        select(Result, Case).join(Case, Case.id == Result.case_id).where(Result.run_id == run_id)
    ).all()
    return {case.key: (case, res) for res, case in rows}


def _samples(res: Result, name: str = PERF_SAMPLE) -> list[float]:
    return next((list(s.values) for s in res.samples if s.name == name), [])


def control_ratio(b: Result, c: Result, q: float) -> tuple[str, float] | None:
    """(control name, candidate/baseline location ratio) of the first baseline kernel that both
    runs timed interleaved with ours; None when there is none."""
    shared = {s.name for s in b.samples} & {s.name for s in c.samples}
    for name in sorted(n for n in shared if n.startswith("baseline:") and n.endswith(":time_ms")):
        xb, xc = _samples(b, name), _samples(c, name)
        if xb and xc:
            lb, lc = float(np.quantile(xb, q)), float(np.quantile(xc, q))
            if lb > 0 and lc > 0:
                return name.split(":")[1], lc / lb
    return None


def _scaled(res: Result) -> float | None:
    v = res.metrics.get("scaled_ulp_max", res.metrics.get("max_scaled_ulp"))
    return float(v) if isinstance(v, int | float) else None


def _history_levels(cfg: GateConfig, session: Session, base_run: Run, case: Case, b: Result) -> list[float]:
    """The baseline series' locations, oldest first, ending with the baseline run itself."""
    q = cfg.pairwise.location_quantile
    past = [res for _, res in series_history(session, base_run, case.id, cfg.history_runs)]
    levels = [perf_levels(res, q) for res in [*past[::-1], b] if res.status == "pass"]
    return [v for v in levels if v is not None]


def _perf_row(
    cfg: GateConfig,
    case: Case,
    b: Result,
    c: Result,
    levels: list[float],
    pooled: float | None,
    same_stack: bool = False,
) -> GateRow:
    row = GateRow(case.suite, case.name, case.key, "?", "undecided", "time_ms")
    cmp = compare_samples(_samples(b), _samples(c), history=levels, config=cfg.pairwise, pooled_noise=pooled)
    row.baseline, row.candidate = cmp.baseline_location, cmp.candidate_location
    row.ratio = None if math.isnan(cmp.ratio) else cmp.ratio
    row.p_value, row.threshold, row.mark = cmp.p_value, cmp.threshold, cmp.mark
    row.status = {"slower": "regression", "faster": "improvement", "same": "same"}.get(
        cmp.verdict, "undecided"
    )
    if cmp.verdict == "insufficient":
        row.note = f"too few samples ({cmp.n_baseline} vs {cmp.n_candidate})"
    elif cmp.verdict == "slower":
        row.note = f"{(cmp.ratio - 1) * 100:+.1f}% (threshold {cmp.threshold * 100:.1f}%)"
        control = control_ratio(b, c, cfg.pairwise.location_quantile) if same_stack else None
        if cfg.control_veto_same_stack and control and cmp.ratio / control[1] - 1.0 < cmp.threshold:
            row.status, row.mark = "same", "~"
            row.note += (
                f", but {control[0]} moved {(control[1] - 1) * 100:+.1f}% in the same rounds (machine)"
            )
    return row


@dataclass(frozen=True)
class StackNoise:
    """Night-to-night swing of a whole stack: sigma of the mean-over-cases log change between
    consecutive baseline nights, and how many changes it was estimated from."""

    sigma: float
    changes: int

    def band(self, alpha: float) -> float:
        """One-sided prediction bound for the next night's stack-wide shift (Student t, so five
        nights of history give a wide band and thirty a tight one)."""
        t = float(stats.t.ppf(1.0 - alpha, self.changes - 1))
        return math.expm1(t * self.sigma * math.sqrt(1.0 + 1.0 / self.changes))


def aggregate_history_noise(levels: Sequence[Sequence[float]]) -> StackNoise | None:
    """The stack's swing from the cases' level histories (oldest first, baseline last), on the
    nights every case has; None below 3 changes."""
    usable = [lv for lv in levels if lv and min(lv) > 0]
    nights = min((len(lv) for lv in usable), default=0)
    if not usable or nights < 4:
        return None
    arr = np.log(np.array([lv[-nights:] for lv in usable], dtype=float))
    steps = np.diff(arr, axis=1).mean(axis=0)
    return StackNoise(float(np.std(steps, ddof=1)), len(steps))


def _aggregate(cfg: GateConfig, rows: list[GateRow], history: StackNoise | None = None) -> dict[str, Any]:
    """Geometric-mean ratio over the perf cases and a one-sided Wilcoxon signed-rank test on them;
    a systematic slowdown names every case that moved past the aggregate floor significantly.
    The floor is the larger of aggregate_min_effect and the stack's own night-to-night band."""
    perf = [
        r for r in rows if r.suite in cfg.perf_suites and r.ratio and r.ratio > 0 and r.p_value is not None
    ]
    if len(perf) < cfg.aggregate_min_cases:
        return {"cases": len(perf), "verdict": "too few cases"}
    logs = np.log([r.ratio for r in perf if r.ratio])
    geomean = float(np.exp(logs.mean()))
    p_slower = float(stats.wilcoxon(logs, alternative="greater").pvalue) if np.any(logs) else 1.0
    floor = cfg.aggregate_min_effect
    if history is not None:
        floor = max(floor, history.band(cfg.aggregate_noise_alpha))
    systematic = geomean - 1.0 >= floor and p_slower < cfg.aggregate_alpha
    agg = {
        "cases": len(perf),
        "geomean_ratio": geomean,
        "p_value": p_slower,
        "threshold": floor,
        "history_sigma": history.sigma if history else None,
        "history_changes": history.changes if history else 0,
        "verdict": "slower" if systematic else "same",
    }
    if systematic:
        for r in perf:
            if (
                r.status == "same"
                and r.ratio
                and r.ratio - 1.0 >= floor
                and r.p_value is not None
                and r.p_value < cfg.pairwise.alpha
            ):
                r.status, r.mark = "regression", "+"
                r.note = (
                    f"{(r.ratio - 1) * 100:+.1f}%, part of a systematic slowdown "
                    f"(geomean {(geomean - 1) * 100:+.1f}% over {len(perf)} cases)"
                )
    return agg


def _separate_common_mode(cfg: GateConfig, rows: list[GateRow]) -> float | None:
    """A case flagged only because the whole stack moved is left to the aggregate test.

    Per case, what counts is the move beyond the stack-wide (geomean) shift: a night on which every
    case is 8 % slower is one event, judged once against the stack's own night-to-night band, not
    eighteen. Returns the common shift (geomean ratio) when there are enough cases to estimate it."""
    perf = [r for r in rows if r.suite in cfg.perf_suites and r.ratio and r.ratio > 0]
    if len(perf) < cfg.aggregate_min_cases:
        return None
    common = float(np.exp(np.mean(np.log([r.ratio for r in perf if r.ratio]))))
    if common <= 1.0:
        return common
    for r in perf:
        if (
            r.status == "regression"
            and r.ratio
            and r.threshold is not None
            and r.ratio / common - 1.0 < r.threshold
        ):
            r.status, r.mark = "same", "~"
            r.note = (
                f"{(r.ratio - 1) * 100:+.1f}%, with the stack-wide shift of {(common - 1) * 100:+.1f}% "
                "(judged by the aggregate test)"
            )
    return common


def _exact_row(case: Case, b: Result, c: Result) -> GateRow:
    """Numerics and determinism: the candidate must pass its contract, and must not get worse."""
    if case.suite == "ulp":
        metric, bv, cv = "scaled_ulp_max", _scaled(b), _scaled(c)
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


def _table(
    cfg: GateConfig, session: Session, base: Run, cand: Run
) -> tuple[list[GateRow], list[str], dict[str, Any]]:
    b_res, c_res = _results(session, base.id), _results(session, cand.id)
    rows: list[GateRow] = []
    reasons: list[str] = []
    perf_inputs: list[tuple[int, Case, Result, Result, list[float]]] = []
    for key in sorted(set(b_res) | set(c_res), key=lambda k: (b_res.get(k) or c_res[k])[0].name):
        case = (b_res.get(key) or c_res[key])[0]
        if key not in c_res or key not in b_res:
            side = "candidate" if key not in c_res else "baseline"
            rows.append(GateRow(case.suite, case.name, key, "?", "undecided", "", note=f"missing in {side}"))
            continue
        (_, b), (_, c) = b_res[key], c_res[key]
        if c.status in ("error", "timeout", "skip") or b.status in ("error", "timeout", "skip"):
            what = c if c.status in ("error", "timeout", "skip") else b
            rows.append(
                GateRow(
                    case.suite,
                    case.name,
                    key,
                    "?",
                    "undecided",
                    "",
                    note=f"{what.status}: {what.message}"[:200],
                )
            )
            continue
        if case.suite in cfg.perf_suites:
            perf_inputs.append((len(rows), case, b, c, _history_levels(cfg, session, base, case, b)))
            rows.append(GateRow(case.suite, case.name, key, "?", "undecided", "time_ms"))
        elif case.suite in ("ulp", "determinism"):
            rows.append(_exact_row(case, b, c))
    pooled = pooled_noise([historical_noise(levels) for *_, levels in perf_inputs])
    for i, case, b, c, levels in perf_inputs:
        rows[i] = _perf_row(cfg, case, b, c, levels, pooled, base.stack_id == cand.stack_id)
    _separate_common_mode(cfg, rows)
    aggregate = _aggregate(cfg, rows, aggregate_history_noise([levels for *_, levels in perf_inputs]))
    if aggregate.get("verdict") == "slower":
        reasons.append(
            f"systematic slowdown: geomean ratio {aggregate['geomean_ratio']:.3f} over "
            f"{aggregate['cases']} perf cases (Wilcoxon p = {aggregate['p_value']:.1e})"
        )
    if not rows:
        reasons.append("no cases in common")
    missing = [r for r in rows if r.status == "undecided"]
    if missing:
        reasons.append(f"{len(missing)} case(s) could not be compared (missing, errored or too few samples)")
    return rows, reasons, aggregate


def _verdict(rows: list[GateRow], blocked: bool) -> str:
    if blocked:
        return "undecided"
    if any(r.status == "regression" for r in rows):
        return "regression"
    return "undecided" if not rows or any(r.status == "undecided" for r in rows) else "pass"


def _fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4g}ms" if metric == "p50_ms" else f"{v:.4g}"


def format_table(report: GateReport) -> str:
    """Plain-text table in the style of `asv compare`: mark, before, after, ratio, p, case."""
    lines = [
        f"{'':2}{'baseline':>14} {'candidate':>14} {'ratio':>7} {'p':>9}  case",
        f"{'':2}{'[' + (report.baseline_run or '?')[:12] + ']':>14} "
        f"{'[' + (report.candidate_run or '?')[:12] + ']':>14}",
    ]
    for r in report.rows:
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else "n/a"
        p = f"{r.p_value:.1e}" if r.p_value is not None else ""
        note = f"  ({r.note})" if r.note else ""
        lines.append(
            f"{r.mark:<2}{_fmt(r.baseline, r.metric):>14} {_fmt(r.candidate, r.metric):>14} "
            f"{ratio:>7} {p:>9}  {r.suite}/{r.case}{note}"
        )
    return "\n".join(lines)


def _summary_lines(report: GateReport) -> list[str]:
    out = []
    if report.verdict:
        out.append(f"verdict: {report.verdict} (exit {report.exit_code})")
    out += [f"reason: {r}" for r in report.reasons]
    out += [f"regression: {r.suite}/{r.case}: {r.note}" for r in report.regressions]
    return out


def render_markdown(report: GateReport) -> str:
    b, c = report.baseline_info, report.candidate_info
    head = [
        "# regress gate" if report.verdict else "# regress compare",
        "",
        f"- baseline: `{b.get('id')}` stack `{b.get('stack')}` ({b.get('stack_digest', '')[:12]}),"
        f" source `{(b.get('source_hash') or '')[:12]}`",
        f"- candidate: `{c.get('id')}` stack `{c.get('stack')}` ({c.get('stack_digest', '')[:12]}),"
        f" source `{(c.get('source_hash') or '')[:12]}`",
    ]
    if report.verdict:
        head.append(f"- **verdict: {report.verdict}** (exit {report.exit_code})")
    head += [f"- {r}" for r in report.reasons]
    table = [
        "",
        "| | case | metric | baseline | candidate | ratio | p | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report.rows:
        ratio = f"{r.ratio:.3f}" if r.ratio is not None else ""
        p = f"{r.p_value:.1e}" if r.p_value is not None else ""
        mark = r.mark.strip() or "·"
        note = r.note.replace("|", "\\|")
        table.append(
            f"| {mark} | {r.suite}/{r.case} | {r.metric} | {_fmt(r.baseline, r.metric)} | "
            f"{_fmt(r.candidate, r.metric)} | {ratio} | {p} | {note} |"
        )
    legend = [
        "",
        "Marks: `+` slower (regression), `-` faster, `x` fails its contract, "
        "`~` moved without both significance and size, `?` could not compare.",
    ]
    return "\n".join(head + table + legend) + "\n"


_HTML = jinja2.Environment(autoescape=True).from_string(
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>regress {{ kind }}: {{ verdict or "table" }}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td.l,th.l{text-align:left}
tr.regression{background:#fdd}tr.improvement{background:#dfd}tr.undecided{background:#ffd}
.pass{color:#060}.regression{color:#a00}.undecided{color:#a60}
</style></head><body>
<h1>regress {{ kind }}{% if verdict %}: <span class="{{ verdict }}">{{ verdict }}</span>
 (exit {{ exit_code }}){% endif %}</h1>
<ul>
<li>baseline: <code>{{ b.id }}</code>, stack {{ b.stack }} ({{ (b.stack_digest or "")[:12] }}),
 source {{ (b.source_hash or "")[:12] }}</li>
<li>candidate: <code>{{ c.id }}</code>, stack {{ c.stack }} ({{ (c.stack_digest or "")[:12] }}),
 source {{ (c.source_hash or "")[:12] }}</li>
{% for r in reasons %}<li>{{ r }}</li>{% endfor %}
</ul>
<table><tr><th></th><th class="l">case</th><th>metric</th><th>baseline</th><th>candidate</th>
<th>ratio</th><th>p</th><th class="l">note</th></tr>
{% for r in rows %}<tr class="{{ r.status }}"><td>{{ r.mark }}</td>
<td class="l">{{ r.suite }}/{{ r.case }}</td>
<td>{{ r.metric }}</td><td>{{ fmt(r.baseline, r.metric) }}</td><td>{{ fmt(r.candidate, r.metric) }}</td>
<td>{{ "%.3f"|format(r.ratio) if r.ratio is not none else "" }}</td>
<td>{{ "%.1e"|format(r.p_value) if r.p_value is not none else "" }}</td><td class="l">{{ r.note }}</td></tr>
{% endfor %}</table>
<p>Marks: + slower (regression), - faster, x fails its contract, ~ moved without both significance
and size, ? could not compare.</p>
</body></html>
"""
)


def render_html(report: GateReport) -> str:
    return _HTML.render(
        kind="gate" if report.verdict else "compare",
        verdict=report.verdict,
        exit_code=report.exit_code,
        b=report.baseline_info,
        c=report.candidate_info,
        reasons=report.reasons,
        rows=report.rows,
        fmt=_fmt,
    )


def render_junit(report: GateReport) -> str:
    """JUnit XML: one testcase per case; a regression is a failure, an undecided case is skipped."""
    suite = ET.Element(
        "testsuite",
        name="regress gate",
        tests=str(len(report.rows)),
        failures=str(len(report.regressions)),
        skipped=str(sum(r.status == "undecided" for r in report.rows)),
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (
        ("baseline_run", report.baseline_run),
        ("candidate_run", report.candidate_run),
        ("verdict", report.verdict),
    ):
        ET.SubElement(props, "property", name=k, value=str(v))
    if not report.rows and report.reasons:
        case = ET.SubElement(suite, "testcase", classname="regress.gate", name="comparable runs")
        ET.SubElement(case, "failure", message="; ".join(report.reasons))
        suite.set("tests", "1")
        suite.set("failures", "1")
    for r in report.rows:
        case = ET.SubElement(suite, "testcase", classname=f"regress.{r.suite}", name=r.case)
        text = (
            f"{r.metric}: baseline {_fmt(r.baseline, r.metric)}, candidate {_fmt(r.candidate, r.metric)}"
            f", ratio {r.ratio if r.ratio is not None else 'n/a'}; {r.note}"
        )
        if r.status == "regression":
            ET.SubElement(case, "failure", message=r.note or "regression").text = text
        elif r.status == "undecided":
            ET.SubElement(case, "skipped", message=r.note or "could not compare")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def write_reports(report: GateReport, out_dir: Path) -> dict[str, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"gate-{(report.candidate_run or 'none')[:12]}-vs-{(report.baseline_run or 'none')[:12]}"
    paths = {
        "markdown": out_dir / f"{stem}.md",
        "html": out_dir / f"{stem}.html",
        "junit": out_dir / f"{stem}.junit.xml",
        "json": out_dir / f"{stem}.json",
    }
    paths["markdown"].write_text(render_markdown(report))
    paths["html"].write_text(render_html(report))
    paths["junit"].write_text(render_junit(report))
    report.reports = {k: str(v) for k, v in paths.items()}
    paths["json"].write_text(json.dumps(report.to_dict(), indent=2, default=str))
    return report.reports


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
    for run, side in ((base, "baseline"), (cand, "candidate")):
        if gating and run.status not in FINISHED:
            report.reasons.append(f"{side} run {run.id} is {run.status}")
            blocked = True
    rows, reasons, aggregate = _table(cfg, session, base, cand)
    report.rows, report.reasons, report.aggregate = rows, report.reasons + reasons, aggregate
    if gating:
        report.verdict = _verdict(rows, blocked)
        report.exit_code = VERDICT_EXIT[report.verdict]
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
        try:
            base = resolve_selector(session, baseline_sel)
            cand = resolve_selector(session, candidate_sel)
        except UserError as err:
            report = GateReport(None, None, "undecided", EXIT_UNDECIDED, reasons=[str(err)])
            if report_dir is not None:
                write_reports(report, report_dir)
            return report
        report = _build_report(cfg, session, base, cand, gating=True)
        if report_dir is not None:
            write_reports(report, report_dir)
        decision = GateDecision(
            baseline_run_id=base.id,
            candidate_run_id=cand.id,
            verdict=report.verdict or "undecided",
            exit_code=report.exit_code,
            report=report.to_dict(),
        )
        session.add(decision)
        session.flush()
        report.decision_id = decision.id
    return report


def compare(store: Store, run_a: str, run_b: str, config: GateConfig | None = None) -> GateReport:
    """The gate's table for any two runs (A baseline, B candidate), without a verdict."""
    with store.reader() as session:
        a, b = resolve_selector(session, run_a), resolve_selector(session, run_b)
        return _build_report(config or GateConfig(), session, a, b, gating=False)
