"""`regress nightly`: stack check → build → suites → store → analysis → bundle → summary.

Every result is stored as it completes, each in its own transaction, so a crash or a kill leaves the
run marked 'incomplete' (by `reap_stale_runs` on the next start) with every finished result intact
and no half-written one.

A stop signal (SIGTERM from a CI cancel, SIGINT, SIGHUP) ends the run the way `--deadline` does:
the cases in flight are stopped, they and the cases not started are recorded 'skip' ("cancelled by
SIGTERM: ..."), the bundle of what finished is written (and spooled for --upload), and the run is
stored as 'cancelled'; the command exits 128 + the signal's number. A second signal exits at once:
the run is marked 'incomplete' and nothing more is written.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

from sqlalchemy.orm import Session

from regress.facts.backends import BACKENDS, torch_gpu_backend
from regress.facts.bundle import write_bundle
from regress.facts.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNDECIDED,
    Interrupted,
    UserError,
    exit_code_for_signal,
    on_stop_signals,
    signal_name,
)
from regress.facts.metrics import summarise
from regress.facts.results import CaseResult, CaseSpec
from regress.facts.stack_keys import Fingerprint
from regress.facts.suite_facts import DEFAULT_SUITES, suites_for
from regress.machine.gpu_state import device_state
from regress.machine.pins import Pin, load_pin, run_drift
from regress.machine.stack import live_fingerprint
from regress.native.build import BuildArtifact, BuildError, build_kernel
from regress.store.queries import case_wall_times, reaped_local_runs
from regress.store.repo import (
    Store,
    add_result,
    finish_run,
    get_or_create_stack,
    open_store,
    reap_stale_runs,
    record_build,
    start_run,
)
from regress.store.transfer import export_bundle

from .runner import DEFAULT_TIME_LIMIT_FLOOR_S, CaseOptions, resolve_backend
from .shard import WorkerPool, parse_gpus

CI_ENV_KEYS = (
    "CI",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITHUB_SHA",
    "GITHUB_REF",
    "GITHUB_WORKFLOW",
    "GITHUB_REPOSITORY",
    "RUNNER_NAME",
)


@dataclass
class NightlyOptions:
    backend: str = "auto"
    stack: str | None = None
    suites: tuple[str, ...] = DEFAULT_SUITES
    quick: bool = False
    db: str | None = None
    out: Path = Path("regress-out")
    inject: dict[str, int] | None = None
    allow_drift: bool = False
    gpus: str | None = None
    upload: str | None = None
    iterations: int | None = None
    seed: int = 42
    trigger: str = "manual"
    runner: str | None = None
    cache_dir: Path | None = None
    # The watchdog's floor: no case is stopped sooner (regress.run.runner.time_limit).
    case_timeout: float = DEFAULT_TIME_LIMIT_FLOOR_S
    # Seconds from the start that bound the whole run: cases still running then are stopped, and
    # they and the cases not started are recorded 'skip' (the build itself is not interrupted).
    deadline: float | None = None
    # A/B: the baseline build the perf suite times beside this run's own in the same rounds
    # ("clean", "stack:NAME", "flags:F1 F2", a library path, or "none"); slowdown drills: "clean".
    compare_build: str | None = None
    # This machine's stack facts when the caller has read them (None: read here, stack.live_fingerprint).
    fingerprint: Fingerprint | None = None

    # The GPU perf suite's longest shapes too (opt-in: ~8 min of device time).
    long_shapes: bool = False

    def case_options(self) -> CaseOptions:
        return CaseOptions(
            quick=self.quick, seed=self.seed, iterations=self.iterations, long_shapes=self.long_shapes
        )


@dataclass
class NightlyOutcome:
    run_id: str | None
    exit_code: int
    summary: dict[str, Any] = field(default_factory=dict)
    bundle_path: Path | None = None
    regressions: list[int] = field(default_factory=list)
    message: str = ""  # how a run that did not end by itself ended ("cancelled by SIGTERM: ...")
    upload: list[str] = field(default_factory=list)  # --upload: one line per bundle (UploadReport)
    upload_refused: bool = False  # the service or the local check refused the bundle


Progress = Callable[[str, int, int, CaseResult | None], None]


def ci_metadata() -> dict[str, str]:
    return {k: os.environ[k] for k in CI_ENV_KEYS if k in os.environ}


def host_facts(fp: Fingerprint) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "os_kernel": platform.release(),  # a host fact, not a stack key (stack_keys.PINNED_KEYS)
        "fingerprint_diagnostics": fp.diagnostics,
    }


def _resolve_pin(opts: NightlyOptions, backend: str) -> tuple[Pin | None, str]:
    pin = load_pin(opts.stack) if opts.stack else None
    if pin is not None and opts.backend == "auto":
        backend = pin.backend
    if pin is not None and pin.backend != backend:
        raise UserError(f"stack {pin.name} is pinned for backend {pin.backend}, not {backend}")
    return pin, backend


def _check_stack(
    opts: NightlyOptions, pin: Pin | None, backend: str
) -> tuple[Fingerprint, Pin | None, list[str]]:
    """The live fingerprint (opts.fingerprint where the caller read it), the pin the run's stack
    is, and the drift the bundle records (regress.machine.pins.run_drift: the one rule)."""
    fp = opts.fingerprint or live_fingerprint(backend, extra_flags=pin.extra_flags if pin else None)
    matched, notes = run_drift(pin, fp, allow_drift=opts.allow_drift)
    return fp, matched, notes


def _require_device(backend: str) -> None:
    """A GPU backend without its GPU cannot run: refuse before anything is built or stored."""
    facts = BACKENDS[backend]
    if facts.gpu is None:
        return
    if torch_gpu_backend() != backend:
        import torch

        hint = f"; {facts.no_gpu_hint}" if facts.no_gpu_hint else ""
        raise UserError(
            f"backend {backend} needs an {facts.gpu} GPU visible to torch "
            f"(torch {torch.__version__}, cuda available: {torch.cuda.is_available()}); "
            f"use --backend cpu to run the suites here{hint}"
        )


class Cancellation:
    """The first stop signal is noted (the case loop ends the run at its next poll, like a deadline);
    the second raises Interrupted at once, wherever the run is."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def reason(self) -> str | None:
        return f"cancelled by {signal_name(self.signum)}" if self.signum is not None else None

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            raise Interrupted(
                signum, f"stopped by a second signal ({signal_name(signum)}); the run is incomplete"
            )
        self.signum = signum
        print(
            f"regress: {signal_name(signum)}: stopping the cases and writing the bundle of what finished "
            "(a second signal exits at once)",
            file=sys.stderr,
            flush=True,
        )

    @contextmanager
    def installed(self) -> Iterator[Cancellation]:
        with on_stop_signals(self.handle):
            yield self


def run_nightly(opts: NightlyOptions, progress: Progress | None = None) -> NightlyOutcome:
    """The whole nightly loop; returns the outcome (exit 0 all passed, 1 a suite failed, 2 could not
    run, 128 + N cancelled by signal N)."""
    with Cancellation().installed() as cancel:
        return _run_nightly(opts, progress, cancel)


def _run_nightly(opts: NightlyOptions, progress: Progress | None, cancel: Cancellation) -> NightlyOutcome:
    from .suites import get_suite

    ends_at = time.monotonic() + opts.deadline if opts.deadline else None
    if not opts.suites:  # `--suites ''` stored a failed run with no reason
        raise UserError("no suites to run: --suites names none (e.g. --suites perf,ulp,determinism)")
    for name in opts.suites:
        try:
            get_suite(name)  # unknown suite names fail before anything is built or stored
        except KeyError as exc:
            raise UserError(str(exc.args[0])) from None
    if twice := sorted({n for n in opts.suites if opts.suites.count(n) > 1}):
        # a run holds one result per case: a suite run twice failed at the store, mid-run
        raise UserError(f"--suites names {', '.join(twice)} twice: a run holds one result per case")
    pin, backend = _resolve_pin(opts, resolve_backend(opts.backend))
    _require_device(backend)
    if (runnable := suites_for(backend)) != DEFAULT_SUITES:
        if opts.suites == DEFAULT_SUITES:
            opts = replace(opts, suites=runnable)  # the caller's options stay as they were
        elif timed := [s for s in opts.suites if s not in runnable]:
            raise UserError(f"{backend} runs {' and '.join(runnable)} only, not {', '.join(timed)}")
    if opts.upload:  # before anything runs: a token or URL that cannot be sent is found now, not after
        from .upload import ENV_TOKEN, check_token, check_url

        try:
            check_token(os.environ.get(ENV_TOKEN, ""))
            check_url(opts.upload)
        except ValueError as exc:
            raise UserError(f"--upload: {exc}") from exc
    device = BACKENDS[backend].device
    gpus = parse_gpus(opts.gpus, device)
    # Workers start first: their interpreter, torch and device context come up while this process
    # checks the stack and builds the kernel, so a warm start costs the run nothing.
    # The A/B baseline is built first: every worker, replacements included, gets it in its options.
    pool = WorkerPool(
        device,
        gpus,
        _ab_options(opts, backend, pin),
        time_limit_floor_s=opts.case_timeout,
        identify=bool(gpus),
    )
    pool.start()
    try:
        fp, stack_pin, drift_notes = _check_stack(opts, pin, backend)
        store = open_store(opts.db)
        reap_stale_runs(store)
        _adopt_written_bundles(store, opts.out)
        if opts.upload:
            from .upload import flush_spool

            flush_spool(opts.upload)
        run = _run(
            opts, store, pool, backend, device, pin, stack_pin, fp, drift_notes, progress, ends_at, cancel
        )
        return run
    except Interrupted:
        pool.kill()  # a second signal: no waiting for workers to finish their case
        raise
    finally:
        pool.close()


def _run(
    opts: NightlyOptions,
    store: Store,
    pool: WorkerPool,
    backend: str,
    device: str,
    pin: Pin | None,
    stack_pin: Pin | None,
    fp: Fingerprint,
    drift_notes: list[str],
    progress: Progress | None,
    ends_at: float | None,
    cancel: Cancellation,
) -> NightlyOutcome:
    started = time.perf_counter()
    is_drill = bool(opts.inject)
    trigger = "drill" if is_drill else opts.trigger
    host = host_facts(fp)
    if drift_notes:
        host["drift"] = drift_notes
    artifact: BuildArtifact | None = None
    build_error = ""
    if progress:  # the build can take minutes (a first gfx942 build): say so before it starts
        progress("building the kernel", 0, 0, None)
    try:
        artifact = build_kernel(
            backend, extra_flags=pin.extra_flags if pin else (), inject=opts.inject, cache_dir=opts.cache_dir
        )
    except BuildError as exc:
        build_error = str(exc)
    with store.transaction() as session:
        stack = get_or_create_stack(
            session,
            digest=fp.digest,
            keys=fp.keys,
            schema_version=fp.schema_version,
            name=stack_pin.name if stack_pin else None,
        )
        stack_id = stack.id
        build_id = record_build(session, stack, artifact.to_dict()).id if artifact else None
        measured = case_wall_times(session, stack_id)

    if artifact is None:  # a build that breaks on a new stack is a result worth keeping
        run_id = start_run(
            store,
            stack_id=stack_id,
            build_id=None,
            backend=backend,
            suites=opts.suites,
            trigger=trigger,
            is_drill=is_drill,
            host=host,
            ci=ci_metadata(),
            runner=opts.runner,
        )
        if (why := cancel.reason()) is not None:  # Ctrl-C reaches the compiler too: not the build's fault
            return _cancelled_before_cases(store, run_id, opts, device, backend, why, cancel)
        failed = f"build failed: {build_error}"
        bundle_path = _finish(store, run_id, opts, status="failed", exit_code=EXIT_UNDECIDED, message=failed)
        return NightlyOutcome(run_id, EXIT_UNDECIDED, {"error": build_error}, bundle_path)

    pool.load(artifact.path)
    run_id = start_run(
        store,
        stack_id=stack_id,
        build_id=build_id,
        backend=backend,
        suites=opts.suites,
        trigger=trigger,
        is_drill=is_drill,
        kernel_commit=artifact.git_commit,
        source_hash=artifact.source_hash,
        runner=opts.runner,
        host=host,
        ci=ci_metadata(),
        gpu_state={"before": device_state(device)},
    )
    results: list[CaseResult] = []
    store_s = 0.0
    cases_started = time.perf_counter()
    plan = plan_cases(opts, device, backend)
    try:
        for result in pool.run(plan, measured, progress, deadline=ends_at, cancelled=cancel.reason):
            t0 = time.perf_counter()
            add_result(store, run_id, result)  # streamed: each result is safe as soon as it exists
            store_s += time.perf_counter() - t0
            results.append(result)
    except Interrupted as stop:
        finish_run(store, run_id, status="incomplete", exit_code=stop.exit_code, message=str(stop))
        raise
    except BaseException as exc:
        finish_run(
            store, run_id, status="incomplete", exit_code=EXIT_UNDECIDED, message=f"interrupted: {exc!r}"
        )
        raise
    cases_s = time.perf_counter() - cases_started

    summary = summarise(results)
    summary["planned"] = len(plan)  # == results: the pool gives every case a status
    summary["timing"] = timing_summary(
        results,
        workers=len(pool.slots),
        cases_wall_s=cases_s,
        setup_s=cases_started - started,
        store_s=store_s,
        pool=pool.stats.to_dict(),
    )
    clean = summary["failed"] == summary["errors"] == summary["timeouts"] == 0 and not pool.stats.skipped
    exit_code = EXIT_OK if clean else EXIT_FAILED  # a case the pool could not run is not a pass
    if not results:
        exit_code = EXIT_UNDECIDED
    why = cancel.reason() if any(k.startswith("cancelled by") for k in pool.stats.skipped) else None
    if why is not None:
        exit_code = exit_code_for_signal(cancel.signum or 0)
    pool.close()  # the workers' after-state belongs in the run record
    bundle_path = _finish(
        store,
        run_id,
        opts,
        status="cancelled" if why else "complete" if exit_code == EXIT_OK else "failed",
        summary=summary,
        exit_code=exit_code,
        message=(ended := _cancel_message(why, summary, pool.stats.skipped, len(plan))),
        gpu_state={"after": device_state(device), **({"workers": pool.states} if pool.states else {})},
    )
    if why is not None:  # the bundle is written and spooled: analysis and upload wait for the next run
        return NightlyOutcome(run_id, exit_code, summary, bundle_path, message=ended)
    regressions = _analyse(store, run_id)
    outcome = NightlyOutcome(run_id, exit_code, summary, bundle_path, regressions)
    if opts.upload:
        from .upload import upload_bundles

        report = upload_bundles([bundle_path], opts.upload)  # said, never silent (issue 41 item 19)
        outcome.upload, outcome.upload_refused = report.lines(), bool(report.rejected)
    return outcome


def _cancel_message(why: str | None, summary: dict[str, Any], skipped: dict[str, int], planned: int) -> str:
    if why is None:
        return ""
    not_run = sum(skipped.values())
    ran = summary["results"] - not_run
    return f"{why}: {ran} of {planned} cases ran, {not_run} case(s) not run (recorded 'skip')"


def _cancelled_before_cases(
    store: Store, run_id: str, opts: NightlyOptions, device: str, backend: str, why: str, cancel: Cancellation
) -> NightlyOutcome:
    """A signal during the build: every planned case is recorded 'skip' with the reason."""
    plan = plan_cases(opts, device, backend)
    for _, spec in plan:
        add_result(store, run_id, CaseResult(case=spec, status="skip", message=f"{why}: during the build"))
    summary = summarise([CaseResult(case=spec, status="skip", message=why) for _, spec in plan])
    summary["planned"] = len(plan)
    summary["timing"] = {"not_run": {why: len(plan)}}
    code = exit_code_for_signal(cancel.signum or 0)
    bundle_path = _finish(
        store,
        run_id,
        opts,
        status="cancelled",
        summary=summary,
        exit_code=code,
        message=(
            ended := f"{why}: during the build; 0 of {len(plan)} cases ran, {len(plan)} case(s) not run"
        ),
    )
    return NightlyOutcome(run_id, code, summary, bundle_path, message=ended)


def compare_build_spec(opts: NightlyOptions) -> str | None:
    """What the A/B phase times beside this run's build: --compare-build, else the clean build for a
    slowdown drill (its verdict and its measured cost), else nothing."""
    spec = opts.compare_build
    if spec is None and (opts.inject or {}).get("slowdown_pct"):
        spec = "clean"
    return None if spec in (None, "", "none") else spec


def _baseline_artifact(spec: str, opts: NightlyOptions, backend: str, pin: Any) -> tuple[Path, str]:
    """(library path, label) of the A/B baseline build named by `spec`."""
    flags: tuple[str, ...] = tuple(pin.extra_flags) if pin else ()
    if spec == "clean":
        label = "the clean build (same flags, no fault)"
    elif spec.startswith("stack:"):
        other = load_pin(spec.removeprefix("stack:"))
        if other.backend != backend:
            raise UserError(f"--compare-build {spec}: pinned for {other.backend}, this run is {backend}")
        flags, label = (
            tuple(other.extra_flags),
            f"stack {other.name} ({' '.join(other.extra_flags) or 'no extra flags'})",
        )
    elif spec.startswith("flags:"):
        flags = tuple(spec.removeprefix("flags:").split())
        label = f"flags {' '.join(flags) or '(none)'}"
    else:
        path = Path(spec)
        if not path.is_file():
            raise UserError(
                f"--compare-build {spec!r}: not 'clean', 'stack:NAME', 'flags:...', 'none' nor a library file"
            )
        return path.resolve(), f"library {path.name}"
    try:
        art = build_kernel(backend, extra_flags=flags, cache_dir=opts.cache_dir)
    except BuildError as exc:
        raise UserError(f"--compare-build {spec}: the baseline build failed: {str(exc)[:300]}") from exc
    return art.path, label


def _ab_options(opts: NightlyOptions, backend: str, pin: Any) -> CaseOptions:
    """The cases' options, with the A/B baseline built and named in them when the run has one, so
    the perf suite times it beside this run's build in the same rounds. A slowdown drill's clean
    build that fails leaves the drill without its A/B phase; the drill's own build then reports why."""
    options = opts.case_options()
    spec = compare_build_spec(opts)
    if spec is None or "perf" not in opts.suites:
        return options
    try:
        path, label = _baseline_artifact(spec, opts, backend, pin)
    except UserError:
        if opts.compare_build:
            raise
        return options
    return replace(options, ab_baseline=str(path), ab_label=label)


def _analyse(store: Store, run_id: str) -> list[int]:
    from regress.judge.analysis import (
        analyse_run,  # here, not at the top: scipy costs the CLI a second (issue 11)
    )

    return list(analyse_run(store, run_id))


def _finish(store: Store, run_id: str, opts: NightlyOptions, **how: Any) -> Path:
    """Marks the run finished in the transaction that first writes its bundle (and spools it for
    --upload): a kill before the commit leaves a 'running' run, reaped as incomplete and then
    restored from its bundle by `_adopt_written_bundles`; after it, the bundle is on disk."""
    written: list[Path] = []

    def write(session: Session) -> None:
        bundle = export_bundle(session, run_id)
        written.append(write_bundle(bundle, opts.out / "bundles"))
        if opts.upload:
            from .upload import spool_bundle

            spool_bundle(bundle)

    try:
        finish_run(store, run_id, before_commit=write, **how)
    except Interrupted as stop:  # a second signal before the commit: the finish rolled back
        finish_run(store, run_id, status="incomplete", exit_code=stop.exit_code, message=str(stop))
        raise
    return written[0]


def _adopt_written_bundles(store: Store, out: Path) -> list[str]:
    """A run killed between writing its bundle and committing its end reads 'incomplete' here while
    its bundle (maybe uploaded already) says how it ended: the bundle is restored as the record."""
    from regress.facts.bundle import BundleError, parse_timestamp, read_bundle

    adopted = []
    with store.reader() as session:
        reaped = reaped_local_runs(session)
    for run_id in reaped:
        path = out / "bundles" / f"{run_id}.json"
        try:
            run = read_bundle(path)["run"] if path.is_file() else None
        except BundleError:
            continue
        if run is None or run["status"] not in ("complete", "failed", "cancelled"):
            continue
        finish_run(
            store,
            run_id,
            status=run["status"],
            summary=run.get("summary"),
            exit_code=run.get("exit_code"),
            message=run.get("message") or "",
            gpu_state=run.get("gpu_state"),
            finished_at=parse_timestamp(run["finished_at"]) if run.get("finished_at") else None,
        )
        adopted.append(run_id)
    return adopted


def plan_cases(opts: NightlyOptions, device: str, backend: str) -> list[tuple[str, CaseSpec]]:
    """Every case of the chosen suites, in suite order. Case lists depend on the device kind and the
    backend's name only, so the parent plans without loading a library or touching a GPU."""
    from .suites import get_suite
    from .suites.base import SuiteContext

    probe = SuiteContext(
        library=SimpleNamespace(backend=backend),  # only .backend is read
        device=device,
        **asdict(opts.case_options()),
    )
    return [(name, spec) for name in opts.suites for spec in get_suite(name).cases(probe)]


def timing_summary(
    results: list[CaseResult],
    *,
    workers: int,
    cases_wall_s: float,
    setup_s: float,
    store_s: float,
    pool: dict[str, Any],
) -> dict[str, Any]:
    """Where the run's time went: per phase summed over cases, per suite, per worker, set-up and store."""
    from regress.facts.phases import phase_seconds

    phases: dict[str, float] = {}
    per_suite: dict[str, float] = {}
    per_worker: dict[str, float] = {}
    for r in results:
        wall = float(r.metrics.get("wall_s", 0.0) or 0.0)
        per_suite[r.case.suite] = per_suite.get(r.case.suite, 0.0) + wall
        worker = f"worker{r.device.get('worker', 0)}"
        per_worker[worker] = per_worker.get(worker, 0.0) + wall
        split = phase_seconds(r.metrics)
        for name, sec in split.items():
            phases[name] = phases.get(name, 0.0) + sec
        phases["other"] = phases.get("other", 0.0) + wall - sum(split.values())

    def rounded(d: dict[str, float]) -> dict[str, float]:
        return {k: round(v, 3) for k, v in sorted(d.items())}

    return {
        "workers": workers,
        "setup_s": round(setup_s, 3),
        "cases_wall_s": round(cases_wall_s, 3),
        "case_seconds": round(sum(per_suite.values()), 3),
        "store_s": round(store_s, 3),
        "phases_s": rounded(phases),
        "suites_s": rounded(per_suite),
        "workers_s": rounded(per_worker),
        **pool,
    }
