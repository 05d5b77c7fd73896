"""The gate's reports: terminal table, Markdown and HTML (jinja2 templates in web/templates/
gate_report.*.j2), JUnit XML (ElementTree, so it is always well-formed) and JSON.

Every format carries the verdict, its reasons in words, and per case the threshold and the minimum
detectable effect (MDE): what this comparison could have seen.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from functools import cache
from pathlib import Path

import jinja2

from regress.facts import escape
from regress.facts.escape import xml_text
from regress.facts.resources import web_dir

from .report import GateReport, GateRow

LEGEND = (
    "Marks: + slower (regression), - faster, x fails its contract, ~ moved without both significance "
    "and size, ? could not compare. MDE: the smallest slowdown this comparison would have caught "
    "(80 % power); a case whose MDE exceeds the limit keeps the verdict undecided."
)


def fmt_value(v: float | None, metric: str) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4g}ms" if metric == "time_ms" else f"{v:.4g}"


def fmt_pct(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v * 100:.1f}%" if v <= 10.0 else ">1000%"


def fmt_ratio(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def fmt_p(v: float | None) -> str:
    return "" if v is None else f"{v:.1e}"


def row_note(r: GateRow) -> str:
    return "; ".join(x for x in (r.note, r.advice) if x)


def _markdown_value(value: object) -> str:
    return escape.markdown(escape.readable(value))


@cache
def _env(kind: str = "html") -> jinja2.Environment:
    """HTML is autoescaped; in Markdown every printed value is escaped (`finalize`): a case name
    holding a newline and `- **verdict: pass**` once forged verdict lines in the job summary."""
    env = jinja2.Environment(
        # None, bools and raw floats as a person reads them (`stack None` for an unpinned stack).
        finalize=_markdown_value if kind == "md" else escape.readable,
        loader=jinja2.FileSystemLoader(str(web_dir() / "templates")),
        autoescape=jinja2.select_autoescape(["html.j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(value=fmt_value, pct=fmt_pct, ratio=fmt_ratio, p=fmt_p)
    env.globals.update(note=row_note, legend=LEGEND)
    return env


def _context(report: GateReport) -> dict[str, object]:
    return {
        "kind": "gate" if report.verdict else "compare",
        "r": report,
        "b": report.baseline_info,
        "c": report.candidate_info,
    }


def format_table(report: GateReport) -> str:
    """Plain-text table in the style of `asv compare`: mark, before, after, ratio, p, MDE, case."""
    lines = [
        f"{'':2}{'baseline':>14} {'candidate':>14} {'ratio':>7} {'p':>9} {'thresh':>7} {'MDE':>7}  case",
        f"{'':2}{'[' + (report.baseline_run or '?')[:12] + ']':>14} "
        f"{'[' + (report.candidate_run or '?')[:12] + ']':>14}",
    ]
    for r in report.rows:
        # The advice of a too-noisy case is said once, grouped, under the table (summary_lines):
        # repeated on every row, an undecided verdict took 166 lines (issue 42).
        note = r.note + (" (too noisy: see below)" if r.advice else "")
        lines.append(
            f"{r.mark:<2}{fmt_value(r.baseline, r.metric):>14} {fmt_value(r.candidate, r.metric):>14} "
            f"{fmt_ratio(r.ratio) or 'n/a':>7} {fmt_p(r.p_value):>9} {fmt_pct(r.threshold):>7} "
            f"{fmt_pct(r.mde):>7}  {r.suite}/{r.case}{f'  ({note})' if note else ''}"
        )
    return escape.visible_lines("\n".join(lines))


def summary_lines(report: GateReport) -> list[str]:
    """The verdict and its reasons, for the terminal."""
    out = [f"verdict: {report.verdict} (exit {report.exit_code})"] if report.verdict else []
    out += [f"  reason: {r}" for r in report.reasons]
    out += [f"  regression: {r.suite}/{r.case}: {r.note}" for r in report.regressions]
    out += grouped_advice(report.too_noisy)
    return [escape.visible(line) for line in out]


def grouped_advice(rows: list[GateRow]) -> list[str]:
    """The too-noisy cases' advice, each phrase once. Advice is "; "-separated phrases, some of the
    form "HEAD: TEXT" (HEAD the case's own numbers, "MDE 7.1 % (limit 5.0 %)"): a phrase, or a TEXT,
    that two or more cases share heads a group with its count; what is a case's own (its MDE, the
    rounds it would need) follows its name."""
    if not rows:
        return []
    parts = {id(r): [p.strip() for p in r.advice.split("; ") if p.strip()] for r in rows}
    whole = Counter(p for ps in parts.values() for p in set(ps))
    tails = Counter(p.split(": ", 1)[1] for ps in parts.values() for p in set(ps) if ": " in p)

    def split(phrase: str) -> tuple[str, str]:
        """(the case's own part, the shared part) of one phrase."""
        if whole[phrase] > 1:
            return "", phrase
        head, _, tail = phrase.partition(": ")
        return (head, tail) if tail and tails[tail] > 1 else (phrase, "")

    shared = Counter(s for ps in parts.values() for s in {split(p)[1] for p in ps} if s)
    out = [f"  too noisy to pass: {len(rows)} case(s)"]
    out += [f"    {n} case(s): {phrase}" for phrase, n in shared.most_common()]
    for r in rows:
        own = [head for head, _ in map(split, parts[id(r)]) if head]
        out.append(f"    {r.suite}/{r.case}" + (f": {'; '.join(own)}" if own else ""))
    return out


def render_markdown(report: GateReport) -> str:
    return _env("md").get_template("gate_report.md.j2").render(_context(report))


def render_html(report: GateReport) -> str:
    return _env().get_template("gate_report.html.j2").render(_context(report))


def render_junit(report: GateReport) -> str:
    """JUnit XML: one testcase per case; a regression is a failure, an undecided or too-noisy case is
    skipped with its reason; the verdict, its reasons and the MDE limits are properties."""
    suite = ET.Element(
        "testsuite",
        name="regress gate",
        tests=str(len(report.rows)),
        failures=str(len(report.regressions)),
        skipped=str(sum(r.status == "undecided" or bool(r.advice) for r in report.rows)),
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (
        ("baseline_run", report.baseline_run),
        ("candidate_run", report.candidate_run),
        ("verdict", report.verdict),
        ("exit_code", report.exit_code),
        ("max_mde", report.power.get("max_mde")),
        ("stack_mde", report.power.get("stack_mde")),
    ):
        ET.SubElement(props, "property", name=k, value=str(v))
    for i, reason in enumerate(report.reasons):
        ET.SubElement(props, "property", name=f"reason.{i}", value=reason)
    if not report.rows and report.reasons:
        case = ET.SubElement(suite, "testcase", classname="regress.gate", name="comparable runs")
        ET.SubElement(case, "failure", message="; ".join(report.reasons))
        suite.set("tests", "1")
        suite.set("failures", "1")
    for r in report.rows:
        case = ET.SubElement(suite, "testcase", classname=f"regress.{r.suite}", name=r.case)
        text = (
            f"{r.metric}: baseline {fmt_value(r.baseline, r.metric)}, candidate "
            f"{fmt_value(r.candidate, r.metric)}, ratio {fmt_ratio(r.ratio) or 'n/a'}, p {fmt_p(r.p_value)}, "
            f"threshold {fmt_pct(r.threshold)}, MDE {fmt_pct(r.mde)}; {row_note(r)}"
        )
        if r.status == "regression":
            ET.SubElement(case, "failure", message=r.note or "regression").text = text
        elif r.status == "undecided" or r.advice:
            ET.SubElement(case, "skipped", message=row_note(r) or "could not compare")
        else:
            ET.SubElement(case, "system-out").text = text
    for element in suite.iter():  # names and notes are uploaded text: XML 1.0 forbids most C0
        element.text = None if element.text is None else xml_text(element.text)
        for key, value in element.attrib.items():
            element.set(key, xml_text(value))
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
