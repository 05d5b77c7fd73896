"""`regress gate` and `regress compare`: thin shells over regress.gate."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..gate import compare, format_table, gate
from ..store.repo import open_store

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
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@click.pass_context
def gate_cmd(
    ctx: click.Context, baseline: str, candidate: str, db_url: str | None, report_dir: Path, as_json: bool
) -> None:
    """May the candidate ship? Exit 0 pass, 1 regression (cases named), 2 could not decide.

    SEL is a run id (or a unique prefix) or stack:NAME, the latest finished non-drill run of the
    pinned stack NAME. Both runs must have measured the same kernel source.
    """
    report = gate(open_store(db_url, must_exist=True), baseline, candidate, report_dir=report_dir)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        if report.rows:
            click.echo(format_table(report))
            click.echo()
        click.echo(f"verdict: {report.verdict} (exit {report.exit_code})")
        for reason in report.reasons:
            click.echo(f"  {reason}")
        for row in report.regressions:
            click.echo(f"  regression: {row.suite}/{row.case}: {row.note}")
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
    report = compare(open_store(db_url, must_exist=True), run_a, run_b)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    click.echo(format_table(report))
    for reason in report.reasons:
        click.echo(f"  {reason}")


COMMANDS = [gate_cmd, compare_cmd]
