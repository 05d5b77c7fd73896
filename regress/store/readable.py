"""Which stored rows a reader can use: the one rule of `runs list/show`, `export`, the API, the
site and the gate (issue 41 items 6, 7).

A row is unreadable when a JSON column holds no JSON (base.Unreadable), when one of its durations
is zero or negative (regress.facts.bundle.unusable_duration, the rule the doors apply to new bundles), or
when its headline value is not a finite number. Readers skip such a row, name it and count it;
none crashes on it and none turns it into a verdict."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .base import Unreadable

if TYPE_CHECKING:
    from .result import Result
    from .run import Run

_RUN_JSON = ("suites", "host", "ci", "gpu_state", "summary")


def unreadable_column(row: Any, columns: tuple[str, ...]) -> str | None:
    """'COLUMN holds no JSON (TEXT...)' for the first such column of the row, else None."""
    for name in columns:
        value = getattr(row, name, None)
        if isinstance(value, Unreadable):
            return f"{name} holds no JSON ({value.text})"
    return None


def run_problem(run: Run) -> str | None:
    return unreadable_column(run, _RUN_JSON)


def result_problem(result: Result, samples: bool = True) -> str | None:
    """Why no reader can use this result row, or None. samples=False: the caller reads none of
    its samples (they are not loaded)."""
    from regress.facts.bundle import unusable_duration

    problem = unreadable_column(result, ("metrics", "device"))
    if problem is not None:
        return problem
    if result.value is not None and not math.isfinite(result.value):
        return f"value {result.value!r} is not a finite number"
    for name, value in result.metrics.items():
        if unusable_duration(name, value):
            return f"metrics[{name!r}] = {value!r} is not a duration"
    if samples:
        for sample in result.samples:
            problem = series_problem(sample.name, sample.values)
            if problem is not None:
                return problem
    return None


def series_problem(name: str, values: Any) -> str | None:
    """Why a stored samples series is unusable (no JSON, not a list, a duration <= 0), or None."""
    from regress.facts.bundle import unusable_duration

    if isinstance(values, Unreadable):
        return f"samples[{name!r}] holds no JSON ({values.text})"
    if not isinstance(values, list):
        return f"samples[{name!r}] is not a list"
    for v in values:
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            return f"samples[{name!r}] holds {v!r}, not a finite number"
        if unusable_duration(name, v):
            return f"samples[{name!r}] holds {v!r}, not a duration"
    return None


def describe_skipped(what: str, skipped: list[tuple[str, str]], shown: int = 3) -> str:
    """One line: 'skipped 2 unreadable runs: 01ab... (summary holds no JSON ('{bad')), ...'."""
    names = "; ".join(f"{key} ({why})" for key, why in skipped[:shown])
    more = f"; and {len(skipped) - shown} more" if len(skipped) > shown else ""
    plural = what if len(skipped) == 1 else f"{what}s"
    return f"skipped {len(skipped)} unreadable {plural}: {names}{more}"
