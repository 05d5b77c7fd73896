"""Where a case's time goes: named phases (inputs, reference, kernel, baseline, compare) timed per case.

Suites mark their steps with `with phase("kernel"): ...`; the per-case runner (regress.run.runner) opens
a recorder around each case, so the split is stored in the result's metrics as `phase_<name>_s`.
Outside a recorder `phase` costs a context-variable lookup and nothing else. `on_enter` lets the
worker tell the watchdog which step a case is in, which becomes the evidence of a hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

PHASES: tuple[str, ...] = ("inputs", "reference", "kernel", "baseline", "compare", "timing", "process")
METRIC_PREFIX = "phase_"


@dataclass
class PhaseRecorder:
    """Seconds per phase of one case; nested phases count only in the innermost one."""

    on_enter: Callable[[str], None] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    _stack: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        return {f"{METRIC_PREFIX}{name}_s": round(s, 4) for name, s in self.seconds.items()}


_current: ContextVar[PhaseRecorder | None] = ContextVar("regress_phase_recorder", default=None)


@contextmanager
def recording(recorder: PhaseRecorder) -> Iterator[PhaseRecorder]:
    token = _current.set(recorder)
    try:
        yield recorder
    finally:
        _current.reset(token)


@contextmanager
def phase(name: str) -> Iterator[None]:
    rec = _current.get()
    if rec is None:
        yield
        return
    if rec.on_enter is not None:
        rec.on_enter(name)
    outer = rec._stack[-1] if rec._stack else None
    started = time.perf_counter()
    rec._stack.append(name)
    try:
        yield
    finally:
        rec._stack.pop()
        spent = time.perf_counter() - started
        rec.seconds[name] = rec.seconds.get(name, 0.0) + spent
        if outer is not None:  # the inner phase's time is not the outer one's too
            rec.seconds[outer] = rec.seconds.get(outer, 0.0) - spent
            if rec.on_enter is not None:
                rec.on_enter(outer)


def phase_seconds(metrics: dict[str, object]) -> dict[str, float]:
    """The phase split stored in a result's metrics, by phase name."""
    return {
        k.removeprefix(METRIC_PREFIX).removesuffix("_s"): float(v)
        for k, v in metrics.items()
        if k.startswith(METRIC_PREFIX) and k.endswith("_s") and isinstance(v, int | float)
    }
