"""Running one case, and the options that say how: shared by the orchestrator (nightly), the worker
pool (shard) and `regress build`, so none of them imports another's helpers.

`run_one` is the only place a case is executed: it times the whole case (`wall_s`) and each of
its phases (`phase_<name>_s`, see regress.facts.phases), and turns a suite bug into an 'error' result.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from regress.facts import backends
from regress.facts.errors import UserError
from regress.facts.phases import PhaseRecorder, recording
from regress.facts.results import CaseResult, CaseSpec
from regress.native.build import DRILLS, ROUND_SWAP_BITS, drill_usage

if TYPE_CHECKING:
    from .suites.base import SuiteContext

# Watchdog: a case may take this many times its expected time, and never less than the floor (the
# floor covers first runs, when nothing is expected yet, and a loaded machine's jitter).
TIME_LIMIT_FACTOR = 10.0
DEFAULT_TIME_LIMIT_FLOOR_S = 300.0

# --inject's names (regress.native.build.DRILLS; `slowdown_pct`, the stored key, is taken too).
INJECT_NAMES = {d.name: d.key for d in DRILLS} | {"slowdown_pct": "slowdown_pct"}
# Drills that name the query length of the launch they break.
_NEEDS_SQ = {d.name for d in DRILLS if d.value == "SQ"}


@dataclass(frozen=True)
class CaseOptions:
    """What every case of one run is told (picklable: it travels to the worker processes)."""

    quick: bool = False
    seed: int = 42
    iterations: int | None = None
    # The GPU perf suite's opt-in longest shapes (`regress nightly --long-shapes`; ~8 min of device time).
    long_shapes: bool = False
    # A/B: the library file of the baseline build the perf suite times beside this run's own in the
    # same rounds (`regress nightly --compare-build`, or a slowdown drill's clean build), and what it is.
    ab_baseline: str | None = None
    ab_label: str = ""


def resolve_backend(name: str) -> str:
    """auto → hip on an AMD GPU, cuda on an NVIDIA GPU, else cpu (the table in regress.facts.backends)."""
    try:
        return backends.resolve(name)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def parse_inject(spec: tuple[str, ...] | list[str] | None) -> dict[str, int] | None:
    """'slowdown=10', 'ulp=2', 'nondeterminism', 'hang=SQ', 'crash=SQ', 'swap_rounding=rtne:rtz' →
    the build module's inject dict.

    hang=SQ: every launch whose query length is SQ spins forever (the watchdog's fire drill);
    crash=SQ: it aborts the process (the drill of a worker lost in the middle of a case);
    swap_rounding=A:B: the kernels of modes A and B round with each other's rule (issue 22)."""
    if not spec:
        return None
    out: dict[str, int] = {}
    for item in spec:
        key, _, value = item.partition("=")
        if key not in INJECT_NAMES:
            raise UserError(f"--inject {item!r}: expected {drill_usage()}")
        if key == "swap_rounding":
            out[INJECT_NAMES[key]] = _swap_mask(item, value)
            continue
        if key in _NEEDS_SQ and not value:
            raise UserError(
                f"--inject {item!r}: name the query length of the launches it breaks, e.g. {key}=64"
            )
        try:
            number = int(value) if value else 1
        except ValueError as exc:
            raise UserError(f"--inject {item!r}: {value!r} is not a whole number") from exc
        if number <= 0:
            raise UserError(f"--inject {item!r}: the amount must be positive")
        out[INJECT_NAMES[key]] = number
    return out


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str, option: str = "--deadline") -> float:
    """'90m', '2h', '1h30m', '45s' or '600' (seconds) → seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not text.strip() or match is None or not any(match.groups()):
        raise UserError(f"{option} {text!r}: expected a duration like 90m, 2h, 1h30m, 45s or 600 (seconds)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise UserError(f"{option} {text!r}: the duration must be positive")
    return total


def _swap_mask(item: str, value: str) -> int:
    """'rtne:rtz' → the two modes' bits (regress.native.build.ROUND_SWAP_BITS)."""
    modes = value.split(":")
    if len(modes) != 2 or len(set(modes)) != 2 or not set(modes) <= set(ROUND_SWAP_BITS):
        raise UserError(
            f"--inject {item!r}: name two different modes of {', '.join(ROUND_SWAP_BITS)},"
            " e.g. swap_rounding=rtne:rtz"
        )
    return ROUND_SWAP_BITS[modes[0]] | ROUND_SWAP_BITS[modes[1]]


def make_context(lib_path: Path, device: str, options: CaseOptions, log: Any = None) -> SuiteContext:
    from regress.kernel import load_library
    from regress.kernel.baselines import available_baselines

    from .suites.base import SuiteContext

    library = load_library(lib_path)
    ctx = SuiteContext(
        library=library, device=device, baselines=available_baselines(device), **asdict(options)
    )
    if log is not None:
        ctx.log = log
    return ctx


def run_one(
    ctx: SuiteContext, suite_name: str, spec: CaseSpec, on_phase: Callable[[str], None] | None = None
) -> CaseResult:
    """Runs one case; an unexpected exception becomes an 'error' result, never a lost run."""
    from .suites import get_suite

    recorder = PhaseRecorder(on_enter=on_phase)
    started = time.perf_counter()
    with recording(recorder):
        try:
            result = get_suite(suite_name).run_case(ctx, spec)
        except Exception as exc:  # a suite bug must not discard the other cases
            result = CaseResult(case=spec, status="error", message=f"{type(exc).__name__}: {exc}")
    result.metrics.setdefault("wall_s", round(time.perf_counter() - started, 4))
    result.metrics.update(recorder.metrics())
    return result


def time_limit(expected_s: float | None, floor_s: float) -> float:
    """The watchdog's limit for one case: generous, from the case's own measured time if known."""
    if expected_s is None or expected_s <= 0:
        return floor_s
    return max(floor_s, TIME_LIMIT_FACTOR * expected_s)
