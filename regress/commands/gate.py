"""`regress gate` and `regress compare`: thin shells over regress.gate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from ..detect.config import MAX_MDE

_db = click.option(
    "--db", "db_url", envvar="REGRESS_DATABASE_URL", help="Database URL (default ./.regress/regress.db)."
)


@click.command("gate")
@click.option("--baseline", "baseline", required=True, metavar="SEL", help="Run id or stack:NAME.")
@click.option("--candidate", "candidate", required=True, metavar="SEL", help="Run id or stack:NAME.")
@_db
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("regress-out/gate"),
    show_default=True,
    help="Where the Markdown, HTML, JUnit XML and JSON reports go.",
)
@click.option(
    "--max-mde",
    type=click.FloatRange(0.001, 10.0),
    default=MAX_MDE,
    show_default=True,
    help="Largest per-case minimum detectable slowdown (0.15 = 15 %) a pass may have.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@click.pass_context
def gate_cmd(
    ctx: click.Context,
    baseline: str,
    candidate: str,
    db_url: str | None,
    report_dir: Path,
    max_mde: float,
    as_json: bool,
) -> None:
    """May the candidate ship? Exit 0 pass, 1 regression (cases named), 2 could not decide.

    Pass needs nothing slower AND every perf case able to show a slowdown of --max-mde (its minimum
    detectable effect, from both runs' samples and the stack's night-to-night history); a run too
    noisy for that is undecided, naming the cases and what would make them decidable.

    SEL is a run id (or a unique prefix) or stack:NAME, the latest finished non-drill run of the
    pinned stack NAME. Both runs must have measured the same kernel source.
    """
    from ..detect.verdict import RuleConfig
    from ..gate import GateConfig, format_table, gate, summary_lines
    from ..store.repo import open_store

    config = GateConfig(rule=dataclasses.replace(RuleConfig(), max_mde=max_mde))
    store = open_store(db_url, must_exist=True)
    report = gate(store, baseline, candidate, config=config, report_dir=report_dir)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        if report.rows:
            click.echo(format_table(report))
            click.echo()
        for line in summary_lines(report):
            click.echo(line)
        for kind, path in report.reports.items():
            if kind != "json":
                click.echo(f"  {kind}: {path}")
    ctx.exit(report.exit_code)


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@_db
@click.option("--json", "as_json", is_flag=True)
def compare_cmd(run_a: str, run_b: str, db_url: str | None, as_json: bool) -> None:
    """The gate's table for RUN_A (before) and RUN_B (after), without a verdict.

    Marks: + slower, - faster, x fails its contract, ~ moved without both significance and size,
    ? could not compare.
    """
    from ..gate import compare, format_table
    from ..store.repo import open_store

    report = compare(open_store(db_url, must_exist=True), run_a, run_b)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    click.echo(format_table(report))
    for reason in report.reasons:
        click.echo(f"  {reason}")


COMMANDS = [gate_cmd, compare_cmd]
