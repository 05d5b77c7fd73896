"""`regress nightly`: stack check → build → suites → store → analysis → bundle → summary.

Every result is stored as it completes, each in its own transaction, so a crash or a kill leaves the
run marked 'incomplete' (by the signal handler here, or by `reap_stale_runs` on the next start) with
every finished result intact and no half-written one.
"""

from __future__ import annotations

import math
import os
import platform
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from .build import BuildArtifact, BuildError, build_kernel
from .bundle import write_bundle
from .errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED, UserError
from .gpu_state import device_state
from .results import CaseResult, CaseSpec
from .stack import Fingerprint, Pin, check_pin, format_drift, live_fingerprint, load_pin
from .store.repo import (
    Store,
    add_result,
    export_bundle,
    finish_run,
    get_or_create_stack,
    open_store,
    reap_stale_runs,
    record_build,
    start_run,
)

DEFAULT_SUITES: tuple[str, ...] = ("determinism", "ulp", "perf", "e2e")
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


@dataclass
class NightlyOutcome:
    run_id: str | None
    exit_code: int
    summary: dict[str, Any] = field(default_factory=dict)
    bundle_path: Path | None = None
    regressions: list[int] = field(default_factory=list)


Progress = Callable[[str, int, int, CaseResult | None], None]


def resolve_backend(name: str) -> str:
    """auto → hip on an AMD GPU, cuda on an NVIDIA GPU, else cpu."""
    if name in ("cpu", "cuda", "hip"):
        return name
    if name != "auto":
        raise UserError(f"unknown backend {name!r}; expected auto, cpu, cuda or hip")
    try:
        import torch

        if torch.cuda.is_available():
            return "hip" if getattr(torch.version, "hip", None) else "cuda"
    except ImportError:
        pass
    return "cpu"


def parse_inject(spec: tuple[str, ...] | list[str] | None) -> dict[str, int] | None:
    """'slowdown=10', 'ulp=2', 'nondeterminism' → the build module's inject dict."""
    if not spec:
        return None
    names = {
        "slowdown": "slowdown_pct",
        "slowdown_pct": "slowdown_pct",
        "ulp": "ulp",
        "nondeterminism": "nondeterminism",
    }
    out: dict[str, int] = {}
    for item in spec:
        key, _, value = item.partition("=")
        if key not in names:
            raise UserError(f"--inject {item!r}: expected slowdown=PCT, ulp=N or nondeterminism")
        try:
            number = int(value) if value else 1
        except ValueError as exc:
            raise UserError(f"--inject {item!r}: {value!r} is not a whole number") from exc
        if number <= 0:
            raise UserError(f"--inject {item!r}: the amount must be positive")
        out[names[key]] = number
    return out


def ci_metadata() -> dict[str, str]:
    return {k: os.environ[k] for k in CI_ENV_KEYS if k in os.environ}


def host_facts(fp: Fingerprint) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "fingerprint_diagnostics": fp.diagnostics,
    }


def _resolve_stack(opts: NightlyOptions, backend: str) -> tuple[Pin | None, Fingerprint, list[str]]:
    pin = load_pin(opts.stack) if opts.stack else None
    if pin is not None and opts.backend == "auto":
        backend = pin.backend
    if pin is not None and pin.backend != backend:
        raise UserError(f"stack {pin.name} is pinned for backend {pin.backend}, not {backend}")
    fp = live_fingerprint(backend, extra_flags=pin.extra_flags if pin else None)
    notes: list[str] = []
    if pin is not None:
        drifts = check_pin(pin, fp)
        if drifts:
            text = format_drift(pin, drifts)
            if not opts.allow_drift:
                raise UserError(text + "\n(pass --allow-drift to run anyway, recorded under the live digest)")
            notes.append(text)
    return pin, fp, notes


def _require_device(backend: str) -> None:
    """A GPU backend without its GPU cannot run: refuse before anything is built or stored."""
    if backend == "cpu":
        return
    import torch

    vendor_hip = bool(getattr(torch.version, "hip", None))
    if not torch.cuda.is_available() or vendor_hip != (backend == "hip"):
        raise UserError(
            f"backend {backend} needs {'an AMD' if backend == 'hip' else 'an NVIDIA'} GPU visible to torch "
            f"(torch {torch.__version__}, cuda available: {torch.cuda.is_available()}); "
            "use --backend cpu, or `regress build --backend hip --compile-only` to check the gfx942 code"
        )


class _Terminated(BaseException):  # not Exception: per-case error handling must not swallow it
    pass


@contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """SIGTERM (CI cancellation, timeouts) unwinds like an exception so the run is marked."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise _Terminated(f"signal {signum}")

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_nightly(opts: NightlyOptions, progress: Progress | None = None) -> NightlyOutcome:
    """The whole nightly loop; returns the outcome (exit 0 all passed, 1 a suite failed, 2 could not run)."""
    from .suites import get_suite

    for name in opts.suites:
        try:
            get_suite(name)  # unknown suite names fail before anything is built or stored
        except KeyError as exc:
            raise UserError(str(exc.args[0])) from None
    backend = resolve_backend(opts.backend)
    pin, fp, drift_notes = _resolve_stack(opts, backend)
    backend = fp.keys["backend"]
    _require_device(backend)
    if opts.upload and not os.environ.get("REGRESS_TOKEN"):
        raise UserError("--upload needs the runner's token in $REGRESS_TOKEN (`regress token create RUNNER`)")
    store = open_store(opts.db)
    reap_stale_runs(store)
    if opts.upload:
        from .upload import flush_spool

        flush_spool(opts.upload)

    is_drill = bool(opts.inject)
    trigger = "drill" if is_drill else opts.trigger
    host = host_facts(fp)
    if drift_notes:
        host["drift"] = drift_notes
    artifact: BuildArtifact | None = None
    build_error = ""
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
            name=pin.name if pin else None,
        )
        stack_id = stack.id
        build_id = record_build(session, stack, artifact.to_dict()).id if artifact else None

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
        finish_run(
            store, run_id, status="failed", exit_code=EXIT_UNDECIDED, message=f"build failed: {build_error}"
        )
        bundle_path = _write_bundle(store, run_id, opts.out)
        return NightlyOutcome(run_id, EXIT_UNDECIDED, {"error": build_error}, bundle_path)

    device = "cpu" if backend == "cpu" else "cuda"
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
    worker_states: dict[str, Any] = {}
    try:
        with _terminate_as_exception(), _drill_control(opts, backend, pin):
            for result in _execute(opts, artifact, device, progress, worker_states):
                add_result(store, run_id, result)
                results.append(result)
    except BaseException as exc:
        finish_run(
            store, run_id, status="incomplete", exit_code=EXIT_UNDECIDED, message=f"interrupted: {exc!r}"
        )
        raise

    summary = summarise(results)
    exit_code = EXIT_OK if summary["failed"] == 0 and summary["errors"] == 0 else EXIT_FAILED
    if not results:
        exit_code = EXIT_UNDECIDED
    finish_run(
        store,
        run_id,
        status="complete" if exit_code == EXIT_OK else "failed",
        summary=summary,
        exit_code=exit_code,
        gpu_state={"after": device_state(device), **({"workers": worker_states} if worker_states else {})},
    )
    regressions = _analyse(store, run_id)
    bundle_path = _write_bundle(store, run_id, opts.out)
    if opts.upload:
        from .upload import upload_bundles

        upload_bundles([bundle_path], opts.upload)
    return NightlyOutcome(run_id, exit_code, summary, bundle_path, regressions)


@contextmanager
def _drill_control(opts: NightlyOptions, backend: str, pin: Any) -> Iterator[None]:
    """A slowdown drill also builds the clean kernel (same flags, no fault) and names it in
    $REGRESS_DRILL_CONTROL_LIB, so the perf suite times it interleaved with the drill and records
    what the drill really cost (workers of a sharded run inherit the variable)."""
    if not (opts.inject or {}).get("slowdown_pct"):
        yield
        return
    from .suites.perf import DRILL_CONTROL_ENV

    clean = build_kernel(backend, extra_flags=pin.extra_flags if pin else (), cache_dir=opts.cache_dir)
    previous = os.environ.get(DRILL_CONTROL_ENV)
    os.environ[DRILL_CONTROL_ENV] = str(clean.path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DRILL_CONTROL_ENV, None)
        else:
            os.environ[DRILL_CONTROL_ENV] = previous


def _analyse(store: Store, run_id: str) -> list[int]:
    try:
        from .analysis import analyse_run
    except ImportError:  # detection not installed in this build of the package
        return []
    return list(analyse_run(store, run_id))


def _write_bundle(store: Store, run_id: str, out: Path) -> Path:
    with store.reader() as session:
        bundle = export_bundle(session, run_id)
    return write_bundle(bundle, out / "bundles")


def _execute(
    opts: NightlyOptions,
    artifact: BuildArtifact,
    device: str,
    progress: Progress | None,
    worker_states: dict[str, Any],
) -> Iterator[CaseResult]:
    from .shard import parse_gpus, run_sharded

    workers = parse_gpus(opts.gpus, device)
    if workers:
        yield from run_sharded(opts, artifact.path, device, workers, progress, worker_states)
        return
    from .shard import make_context
    from .suites import get_suite

    ctx = make_context(artifact.path, device, quick=opts.quick, seed=opts.seed, iterations=opts.iterations)
    plan = [(name, spec) for name in opts.suites for spec in get_suite(name).cases(ctx)]
    total = len(plan)
    for done, (name, spec) in enumerate(plan):
        if progress:
            progress(f"{name}: {spec.name}", done, total, None)
        result = run_one(ctx, name, spec)
        if progress:
            progress(f"{name}: {spec.name}", done + 1, total, result)
        yield result


def run_one(ctx: Any, suite_name: str, spec: CaseSpec) -> CaseResult:
    """Runs one case; an unexpected exception becomes an 'error' result, never a lost run."""
    from .suites import get_suite

    started = time.perf_counter()
    try:
        result = get_suite(suite_name).run_case(ctx, spec)
    except Exception as exc:  # a suite bug must not discard the other cases
        result = CaseResult(case=spec, status="error", message=f"{type(exc).__name__}: {exc}")
    result.metrics.setdefault("wall_s", round(time.perf_counter() - started, 4))
    return result


def summarise(results: list[CaseResult]) -> dict[str, Any]:
    """Counts per suite and status, and the geomean speedup per (mode, baseline) of the perf suite."""
    per_suite: dict[str, dict[str, int]] = {}
    for r in results:
        counts = per_suite.setdefault(r.case.suite, {"pass": 0, "fail": 0, "error": 0, "skip": 0})
        counts[r.status] = counts.get(r.status, 0) + 1
    speedups: dict[str, dict[str, list[float]]] = {}
    for r in results:
        if r.case.suite != "perf":
            continue
        mode = str(r.case.params.get("mode"))
        for key, value in r.metrics.items():
            if key.startswith("speedup_vs_") and isinstance(value, int | float) and value > 0:
                speedups.setdefault(mode, {}).setdefault(key.removeprefix("speedup_vs_"), []).append(
                    float(value)
                )
    geomean = {
        mode: {b: round(math.exp(sum(map(math.log, v)) / len(v)), 4) for b, v in per_base.items()}
        for mode, per_base in speedups.items()
    }
    failing = [f"{r.case.suite}/{r.case.name}" for r in results if r.status in ("fail", "error")]
    drill = drill_costs(results)
    return {
        **({"drill": drill} if drill else {}),
        "results": len(results),
        "failed": sum(r.status == "fail" for r in results),
        "errors": sum(r.status == "error" for r in results),
        "suites": per_suite,
        "geomean_speedup": geomean,
        "failing_cases": failing[:200],
    }


def drill_costs(results: list[CaseResult]) -> dict[str, Any]:
    """A slowdown drill's cost per perf case, measured against the clean build timed interleaved in
    the same rounds (regress/suites/perf.py), beside what was requested; {} when not a drill."""
    per_case = {
        r.case.name: float(r.metrics["drill_measured_pct"])
        for r in results
        if r.case.suite == "perf" and isinstance(r.metrics.get("drill_measured_pct"), int | float)
    }
    requested = next(
        (r.metrics["drill_requested_pct"] for r in results if "drill_requested_pct" in r.metrics), None
    )
    if not per_case or requested is None:
        return {}
    tolerance = max(1.0, float(requested) / 5.0)
    logs = [math.log1p(v / 100.0) for v in per_case.values()]
    return {
        "requested_pct": requested,
        "tolerance_pct": tolerance,
        "measured_pct_geomean": round(math.expm1(sum(logs) / len(logs)) * 100.0, 2),
        "measured_pct_min": round(min(per_case.values()), 2),
        "measured_pct_max": round(max(per_case.values()), 2),
        "within_tolerance": sum(abs(v - requested) <= tolerance for v in per_case.values()),
        "cases": len(per_case),
        "per_case_pct": {k: round(v, 2) for k, v in sorted(per_case.items())},
    }
