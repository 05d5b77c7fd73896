"""`regress gate` and `regress compare`: thin shells over regress.judge.gate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
from click.core import ParameterSource

from regress.detect.config import MAX_MDE

from . import options


@click.command("gate")
@click.option("--baseline", "baseline", metavar="SEL", help="Run id or stack:NAME.")
@click.option("--candidate", "candidate", metavar="SEL", help="Run id or stack:NAME.")
@click.option(
    "--ab",
    is_flag=True,
    help="A/B on one device: judge the two builds one run timed in the same rounds (--run), or time "
    "--candidate-stack against --baseline-stack on this machine now and judge that run.",
)
@click.option("--run", "run_sel", metavar="SEL", help="With --ab: a stored run made with --compare-build.")
@click.option(
    "--alternating",
    metavar="SEL,SEL,...",
    help="With --ab: runs of two builds that cannot share a process (two containers), in the order "
    "they ran on one device, A B A B ...; each adjacent pair is one paired block (10 pairs decide).",
)
@click.option("--baseline-stack", metavar="NAME", help="With --ab: the pinned stack to compare against.")
@click.option("--candidate-stack", metavar="NAME", help="With --ab: the pinned stack that wants to ship.")
@click.option("--quick", is_flag=True, help="With --ab and stacks: the quick perf cases.")
@click.option("--iterations", type=click.IntRange(min=1), help="With --ab and stacks: rounds per case.")
@options.db
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("regress-out/gate"),
    show_default=True,
    help="Where the Markdown, HTML, JUnit XML and JSON reports go.",
)
@click.option(
    "--max-mde",
    type=options.FiniteFloatRange(0.001, 10.0),
    default=MAX_MDE,
    show_default=True,
    help="Largest per-case minimum detectable slowdown (0.15 = 15 %) a pass may have.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of the table.")
@click.pass_context
def gate_cmd(
    ctx: click.Context,
    baseline: str | None,
    candidate: str | None,
    ab: bool,
    run_sel: str | None,
    alternating: str | None,
    baseline_stack: str | None,
    candidate_stack: str | None,
    quick: bool,
    iterations: int | None,
    db_url: str | None,
    report_dir: Path,
    max_mde: float,
    as_json: bool,
) -> None:
    """May the candidate ship? Exit 0 pass, 1 regression (cases named), 2 could not decide.

    Cross-night (--baseline, --candidate): pass needs nothing slower AND every perf case able to
    show a slowdown of --max-mde (its minimum detectable effect, from both runs' samples and the
    stack's night-to-night history, or the backend's stated prior); a run too noisy for that is
    undecided, naming the cases and what would make them decidable. SEL is a run id (or a unique
    prefix) or stack:NAME, the latest finished non-drill run of the pinned stack NAME. Both runs
    must have measured the same kernel source, and must be two runs.

    A/B (--ab): both builds timed on one device in the same rounds, judged on their paired
    per-block ratios (Wilcoxon signed-rank); no history needed, the strongest mode for an upgrade.
    """
    from regress.facts.errors import UserError
    from regress.judge.gate import GateConfig, gate, gate_ab, gate_alternating
    from regress.store.repo import open_store

    _refuse_ignored(ctx, ab)
    config = GateConfig(rule=dataclasses.replace(GateConfig().rule, max_mde=max_mde))
    config = dataclasses.replace(config, ab=dataclasses.replace(config.ab, max_mde=max_mde))
    if ab:
        if alternating:
            if run_sel or baseline_stack or candidate_stack:
                raise UserError("--alternating takes the runs themselves, not --run or stacks")
            sels = [x.strip() for x in alternating.split(",") if x.strip()]
            report = gate_alternating(
                open_store(db_url, must_exist=True), sels, config=config, report_dir=report_dir
            )
            _print(report, as_json)
            ctx.exit(report.exit_code)
        if baseline_stack or candidate_stack:
            if not (baseline_stack and candidate_stack) or run_sel:
                raise UserError(
                    "--ab with stacks needs both --baseline-stack and --candidate-stack (and no --run)"
                )
            run_sel = _run_ab(baseline_stack, candidate_stack, db_url, report_dir, quick, iterations)
        if not run_sel:
            raise UserError("--ab needs --run RUN, or --baseline-stack and --candidate-stack")
        report = gate_ab(open_store(db_url, must_exist=True), run_sel, config=config, report_dir=report_dir)
    else:
        if not baseline or not candidate:
            raise UserError("gate needs --baseline and --candidate (or --ab)")
        store = open_store(db_url, must_exist=True)
        report = gate(store, baseline, candidate, config=config, report_dir=report_dir)
    _print(report, as_json)
    ctx.exit(report.exit_code)


# Options one mode reads and the other would ignore (by parameter name). A given option that the
# chosen mode ignores is refused, not dropped: `gate --baseline A --candidate B --alternating ...`
# used to run the cross-night gate and answer for a comparison the user did not ask for.
AB_ONLY = ("run_sel", "alternating", "baseline_stack", "candidate_stack", "quick", "iterations")
CROSS_NIGHT_ONLY = ("baseline", "candidate")
STACKS_ONLY = ("quick", "iterations")  # they shape the run --ab with stacks times now


def _given(ctx: click.Context, names: tuple[str, ...]) -> list[str]:
    """The options among `names` that the user passed (command line or environment, not a default),
    spelled as on the command line."""
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    spelled = {p.name: p.opts[0] for p in ctx.command.params}
    return [spelled[n] for n in names if ctx.get_parameter_source(n) in given]


def _refuse_ignored(ctx: click.Context, ab: bool) -> None:
    """A usage error (exit 2, before the database is opened) naming each given option the chosen
    mode would ignore."""
    if not ab:
        if extra := _given(ctx, AB_ONLY):
            raise click.UsageError(f"only with --ab (A/B mode): {', '.join(extra)}", ctx=ctx)
        return
    if extra := _given(ctx, CROSS_NIGHT_ONLY):
        raise click.UsageError(
            f"not with --ab (cross-night only): {', '.join(extra)}; --ab takes --run, --alternating, "
            "or --baseline-stack and --candidate-stack",
            ctx=ctx,
        )
    stacks = _given(ctx, ("baseline_stack", "candidate_stack"))
    if not stacks and (extra := _given(ctx, STACKS_ONLY)):
        raise click.UsageError(
            "only with --ab and --baseline-stack/--candidate-stack (a new A/B run), not a stored "
            f"run: {', '.join(extra)}",
            ctx=ctx,
        )


def _print(report: object, as_json: bool) -> None:
    from regress.judge.gate import GateReport, format_table, summary_lines

    assert isinstance(report, GateReport)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    if report.rows:
        click.echo(format_table(report))
        click.echo()
    for line in summary_lines(report):
        click.echo(line)
    for kind, path in report.reports.items():
        if kind != "json":
            click.echo(f"  {kind}: {path}")


def _run_ab(
    baseline_stack: str,
    candidate_stack: str,
    db_url: str | None,
    out: Path,
    quick: bool,
    iterations: int | None,
) -> str:
    """One perf run of the candidate stack with the baseline stack's build timed beside it."""
    from regress.facts.errors import UserError
    from regress.run.nightly import NightlyOptions, run_nightly

    outcome = run_nightly(
        NightlyOptions(
            stack=candidate_stack,
            suites=("perf",),
            quick=quick,
            db=db_url,
            out=out,
            iterations=iterations,
            trigger="gate",
            compare_build=f"stack:{baseline_stack}",
            allow_drift=True,
        )
    )
    if outcome.run_id is None:
        raise UserError(f"the A/B run of {candidate_stack} against {baseline_stack} did not start")
    if outcome.exit_code > 128:  # a stop signal ended the A/B run: nothing to judge, say how it ended
        click.echo(outcome.message, err=True)
        raise click.exceptions.Exit(outcome.exit_code)
    return outcome.run_id


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@options.db
@click.option("--json", "as_json", is_flag=True)
def compare_cmd(run_a: str, run_b: str, db_url: str | None, as_json: bool) -> None:
    """The gate's table for RUN_A (before) and RUN_B (after), without a verdict.

    Marks: + slower, - faster, x fails its contract, ~ moved without both significance and size,
    ? could not compare.
    """
    from regress.judge.gate import compare, format_table
    from regress.store.repo import open_store

    report = compare(open_store(db_url, must_exist=True), run_a, run_b)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    click.echo(format_table(report))
    for reason in report.reasons:
        click.echo(f"  {reason}")


COMMANDS = [gate_cmd, compare_cmd]
