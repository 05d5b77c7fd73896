"""`regress nightly`: the main job."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from regress.facts.errors import EXIT_UNDECIDED
from regress.facts.escape import visible
from regress.facts.metrics import drill_tolerance_word
from regress.facts.suite_facts import DEFAULT_SUITES
from regress.run.runner import DEFAULT_TIME_LIMIT_FLOOR_S, parse_duration, parse_inject

from . import options

if TYPE_CHECKING:
    from rich.console import Console

    from regress.facts.results import CaseResult
    from regress.run.nightly import NightlyOptions, NightlyOutcome


def _trigger(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """At most the column's length, no control character: a longer one was a PostgreSQL
    StringDataRightTruncation traceback after the whole run (issue 41 item 12)."""
    from regress.store.run import TRIGGER_LENGTH

    if len(value) > TRIGGER_LENGTH or not value.isprintable() or not value:
        raise click.BadParameter(
            f"must be 1 to {TRIGGER_LENGTH} printable characters, not {visible(value)!r}"
        )
    return value


@click.command()
@options.backend
@click.option("--stack", "stack_name", help="Pinned stack (runners/stacks/NAME.toml) the machine must match.")
@click.option("--allow-drift", is_flag=True, help="Run even if the machine drifted from its pin (recorded).")
@click.option("--suites", default=",".join(DEFAULT_SUITES), show_default=True, help="Comma-separated suites.")
@click.option("--quick", is_flag=True, help="Smoke subset (under a minute on the CPU).")
@options.db
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("regress-out"),
    show_default=True,
    help="Where bundles (and reports) are written.",
)
@options.inject
@click.option(
    "--case-timeout",
    type=options.FiniteFloatRange(min=1),
    default=DEFAULT_TIME_LIMIT_FLOOR_S,
    show_default=True,
    help="Watchdog floor in seconds: a case is stopped after max(this, 10x its measured time) and "
    "recorded as 'timeout'.",
)
@click.option(
    "--deadline",
    metavar="DURATION",
    help="Bound the whole run (90m, 2h, 1h30m, 600 = seconds, counted from the start): cases still "
    "running then are stopped, and they and the cases not started are recorded 'skip' (exit 1).",
)
@click.option(
    "--gpus",
    help="Shard cases over GPUs: 'all' or '0,1,...' (one worker process per GPU; on the CPU backend, "
    "worker slots).",
)
@click.option(
    "--upload", "upload_url", help="Results service URL to upload the bundle to (token in REGRESS_TOKEN)."
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    help="Minimum timed rounds per perf case (default 40 quick, 100 full; on the CPU a case also spans "
    "about 0.1 s quick, 0.25 s full, from its FLOPs).",
)
@click.option(
    "--compare-build",
    metavar="BUILD",
    help="A/B on this device: also time BUILD beside this run's build, in the same rounds, and store "
    "both arms (judge with `regress gate --ab --run RUN`). BUILD: clean (this stack's flags, no fault; the "
    "default for --inject slowdown), stack:NAME (a second pinned stack's flags), 'flags:F1 F2', a "
    "built library file, or none.",
)
@click.option(
    "--long-shapes",
    is_flag=True,
    help="Also the GPU perf suite's longest shapes (S = 32k at B·H = 48 and 32, S = 128k): about 8 more "
    "minutes of device time on an H200.",
)
@click.option("--seed", default=42, show_default=True, type=int)
@click.option(
    "--trigger",
    default="manual",
    show_default=True,
    callback=_trigger,
    help="Why this run happened (nightly, gate, ...); at most 32 characters.",
)
@click.option("--runner", help="Runner name recorded with the run.")
@click.pass_context
def nightly(
    ctx: click.Context,
    backend: str,
    stack_name: str | None,
    allow_drift: bool,
    suites: str,
    quick: bool,
    db_url: str | None,
    out: Path,
    inject: tuple[str, ...],
    case_timeout: float,
    deadline: str | None,
    gpus: str | None,
    upload_url: str | None,
    iterations: int | None,
    compare_build: str | None,
    long_shapes: bool,
    seed: int,
    trigger: str,
    runner: str | None,
) -> None:
    """Stack check, build, run the suites, store every result, print a summary.

    Exit 0: every suite passed; 1: a suite failed; 2: could not run; 128 + N: stopped by signal N
    (143 SIGTERM, 130 SIGINT, 129 SIGHUP), the cases left recorded 'skip' and the bundle of what
    finished written and spooled (a second signal exits at once, the run left 'incomplete').
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from regress.run.nightly import NightlyOptions, run_nightly

    opts = NightlyOptions(
        backend=backend,
        stack=stack_name,
        suites=tuple(s.strip() for s in suites.split(",") if s.strip()),
        quick=quick,
        db=db_url,
        out=out,
        inject=parse_inject(inject),
        allow_drift=allow_drift,
        gpus=gpus,
        upload=upload_url,
        iterations=iterations,
        seed=seed,
        trigger=trigger,
        runner=runner,
        case_timeout=case_timeout,
        deadline=parse_duration(deadline) if deadline is not None else None,
        compare_build=compare_build,
        long_shapes=long_shapes,
    )
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=None)

        def progress(label: str, done: int, total: int, result: CaseResult | None) -> None:
            if not console.is_terminal:  # piped (a CI log): plain lines, one a step, not a bar
                said = result is None or label.startswith(result.status)  # the pool's own "skip ..."
                status = "" if said or result is None else f"{result.status} "
                width = len(str(total))
                count = f"[{done:>{width}}/{total}] " if total else ""
                click.echo(f"{count}{status}{label}", err=True)
                return
            bar.update(task, description=label[:60], completed=done, total=total or None)
            if result is not None and result.status in ("fail", "error", "timeout"):
                bar.console.print(
                    f"[red]{result.status}[/] {result.case.suite}/{result.case.name}: "
                    f"{(result.message.splitlines() or [''])[0]}"
                )

        outcome = run_nightly(opts, progress)
    print_summary(outcome, Console(), next_command=next_gate_command(opts, outcome))
    for line in outcome.upload:
        click.echo(f"upload: {visible(line)}", err=True)
    # A refused bundle is a run the service will never hold: not a success (the spool keeps it aside).
    ctx.exit(EXIT_UNDECIDED if outcome.upload_refused and outcome.exit_code == 0 else outcome.exit_code)


def next_gate_command(opts: NightlyOptions, outcome: NightlyOutcome) -> str | None:
    """The gate command that judges a drill or an A/B run (neither is judged by the nightly)."""
    from regress.run.nightly import compare_build_spec

    if outcome.run_id is None or outcome.exit_code > 128:
        return None
    db = f" --db {shlex.quote(opts.db)}" if opts.db else ""
    if compare_build_spec(opts) is not None and "perf" in opts.suites:  # both builds in one run
        return f"regress gate --ab --run {outcome.run_id}{db}"
    if opts.inject:
        baseline = f"stack:{opts.stack}" if opts.stack else "CLEAN_RUN"
        return f"regress gate --baseline {baseline} --candidate {outcome.run_id}{db}" + (
            "  (CLEAN_RUN: a run without --inject, from `regress runs list`)" if not opts.stack else ""
        )
    return None


def print_summary(outcome: NightlyOutcome, console: Console, next_command: str | None = None) -> None:
    from rich.table import Table

    summary = outcome.summary
    if "error" in summary:
        console.print(f"[red]run {outcome.run_id} could not run:[/] {summary['error']}")
        return
    table = Table(title=f"run {outcome.run_id}")
    for col in ("suite", "pass", "fail", "error", "timeout", "skip"):
        table.add_column(col, justify="left" if col == "suite" else "right")
    for suite, counts in summary.get("suites", {}).items():
        table.add_row(suite, *(str(counts.get(k, 0)) for k in ("pass", "fail", "error", "timeout", "skip")))
    console.print(table)
    pool = summary.get("timing", {})
    if "planned" in summary:
        console.print(f"{summary['results']} of {summary['planned']} cases have a status")
    if pool.get("timeouts") or pool.get("crashes"):
        console.print(
            f"watchdog: {pool.get('timeouts', 0)} timed out, {pool.get('crashes', 0)} worker(s) died, "
            f"{pool.get('replaced', 0)} replaced"
        )
    for reason in pool.get("unhealthy", {}).values():
        console.print(f"[red]device given up[/]: {reason}")
    not_run = pool.get("not_run", {})
    if not_run:
        console.print(
            "[red]not run[/]: "
            + ", ".join(f"{n} case(s) skipped ({why})" for why, n in sorted(not_run.items()))
        )
    geo = summary.get("geomean_speedup", {})
    if geo:
        speed = Table(title="geomean speedup vs baseline")
        baselines = sorted({b for per in geo.values() for b in per})
        speed.add_column("mode")
        for b in baselines:
            speed.add_column(b, justify="right")
        for mode in sorted(geo):
            speed.add_row(mode, *(f"{geo[mode][b]:.3f}×" if b in geo[mode] else "—" for b in baselines))
        console.print(speed)
    drill = summary.get("drill")
    if drill:
        cost = Table(
            title=f"fire drill: slowdown {drill['requested_pct']} % requested, measured against the clean "
            f"build in the same rounds (tolerance ±{drill['tolerance_pct']:g} points)"
        )
        cost.add_column("perf case")
        cost.add_column("measured", justify="right")
        cost.add_column("", justify="left")
        for name, pct in drill["per_case_pct"].items():
            cost.add_row(name, f"{pct:+.1f} %", drill_tolerance_word(drill, pct))
        geo = drill["measured_pct_geomean"]
        cost.add_row(
            "geomean",
            f"{geo:+.1f} %",
            f"{drill_tolerance_word(drill, geo)} ({drill['within_tolerance']}/{drill['cases']} cases within)",
        )
        console.print(cost)
    for name in summary.get("failing_cases", [])[:20]:
        console.print(f"[red]failing[/] {name}")
    if outcome.regressions:
        console.print(
            f"[yellow]{len(outcome.regressions)} regression(s) flagged[/]: `regress regressions list`"
        )
    console.print(f"bundle: {outcome.bundle_path}", soft_wrap=True)
    if next_command:
        console.print(f"judge it: {next_command}", soft_wrap=True, markup=False)
    if outcome.exit_code > 128:  # a stop signal: the one line that says how the run ended
        console.print(f"[red]{outcome.message}[/]", soft_wrap=True)
        return
    verdict = {0: "[green]all suites passed[/]", 1: "[red]a suite failed[/]", 2: "[red]could not run[/]"}
    if outcome.exit_code == 1 and not_run and summary.get("failing_cases") == []:
        verdict[1] = "[red]not every case ran[/]"
    console.print(verdict.get(outcome.exit_code, str(outcome.exit_code)))


COMMANDS = [nightly]
