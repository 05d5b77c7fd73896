"""Run metrics: every fact derived from results is computed here, once, and imported elsewhere.

What lives here: the headline metric of each suite (the result's trend value, its label and unit),
the timing summary of a kernel and its interleaved baselines, the geomean speedup per rounding mode
and baseline (one shape: ``{mode: {baseline: x}}``), the run summary a nightly stores, and the
numerics contract read from ``regress/facts/contract.toml``. The one percentile (q in 0–100, numpy's
linear method) and the geometric mean are defined in `stats` and read from here as well.

Pure: no torch, no database, no files but the packaged contract. Before this module the geomean
was computed five times in three shapes and the site's copy disagreed with the nightly's, so every
real run showed "–" (issue 12).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from .results import CaseResult
from .stats import geomean, percentile  # the one definition of each; callers read them here or there

SPEEDUP_PREFIX = "speedup_vs_"
GeomeanTable = dict[str, dict[str, float]]  # rounding mode -> baseline -> geomean speedup


@dataclass(frozen=True)
class Headline:
    """The one number of a result that its trend shows (stored as results.value)."""

    metric: str
    label: str
    unit: str


HEADLINE: dict[str, Headline] = {
    "perf": Headline("p50_ms", "p50 time", "ms"),
    "e2e": Headline("p50_ms", "p50 layer time", "ms"),
    "ulp": Headline("scaled_ulp_max", "max scaled ULP", "ULP"),
    "determinism": Headline("distinct_hashes", "distinct output hashes", "hashes"),
}


def headline_value(suite: str, metrics: Any) -> float | None:
    """The suite's headline number from a result's metrics; None when absent or not a number (a
    stored result of any shape is read, never trusted)."""
    h = HEADLINE.get(suite)
    v = metrics.get(h.metric) if h and isinstance(metrics, Mapping) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


# --- statistics -------------------------------------------------------------------------------


def plan_label(metrics: Any) -> str:
    """How a result's launch plan reads (the suites record it, regress.native.plan.summary): its kind and,
    where the keys are split, the split counts; "" for a result that recorded none (a CPU run, a
    result stored before plans were recorded, a non-object)."""
    if not isinstance(metrics, Mapping) or not isinstance(metrics.get("plan_kind"), str):
        return ""
    parts = [metrics["plan_kind"]]
    for key, word in (("plan_splits", "splits"), ("plan_tail_splits", "tail parts")):
        n = metrics.get(key)
        if isinstance(n, int) and not isinstance(n, bool) and n > 1:
            parts.append(f"{n} {word}")
    return ", ".join(parts)


def summarize_times(times_ms: Sequence[float]) -> dict[str, float]:
    n = len(times_ms)
    mean = math.fsum(times_ms) / n if n else math.nan
    # Sample stdev in floats (fsum keeps it exact enough); statistics.stdev's exact fractions cost
    # 0.6 ms a series, which was most of the demo history's time.
    var = math.fsum((x - mean) ** 2 for x in times_ms) / (n - 1) if n > 1 else 0.0
    return {
        "p5_ms": percentile(times_ms, 5),  # the low edge of the site's band (site/data.py reads it)
        "p50_ms": percentile(times_ms, 50),
        "p95_ms": percentile(times_ms, 95),
        "mean_ms": mean,
        "stdev_ms": math.sqrt(var),
    }


def timing_metrics(
    samples: Mapping[str, Sequence[float]], rate_name: str, rate: Callable[[float], float]
) -> dict[str, Any]:
    """Summary of the kernel's "time_ms" series and of each interleaved "baseline:<name>:time_ms":
    percentiles, a throughput at p50 (`rate` of milliseconds, e.g. TFLOP/s or tokens/s), and
    speedup_vs_<name> = baseline p50 / kernel p50."""
    kernel = summarize_times(samples["time_ms"])
    metrics: dict[str, Any] = {**kernel, rate_name: rate(kernel["p50_ms"])}
    for key, values in samples.items():
        if not (key.startswith("baseline:") and key.endswith(":time_ms")):
            continue
        name = key.split(":")[1]
        s = summarize_times(values)
        metrics[f"baseline:{name}:p50_ms"] = s["p50_ms"]
        metrics[f"baseline:{name}:p95_ms"] = s["p95_ms"]
        metrics[f"baseline:{name}:{rate_name}"] = rate(s["p50_ms"])
        metrics[f"{SPEEDUP_PREFIX}{name}"] = (
            s["p50_ms"] / kernel["p50_ms"] if kernel["p50_ms"] > 0 else math.nan
        )
    return metrics


def speedups(metrics: Mapping[str, Any]) -> dict[str, float]:
    """baseline -> speedup of one result (finite, positive ones only)."""
    return {
        k.removeprefix(SPEEDUP_PREFIX): float(v)
        for k, v in metrics.items()
        if k.startswith(SPEEDUP_PREFIX)
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and v > 0
        and math.isfinite(v)
    }


def geomean_by_mode(rows: Iterable[tuple[str, Mapping[str, Any]]], digits: int = 4) -> GeomeanTable:
    """{mode: {baseline: geomean speedup}} over (mode, metrics) rows of passing perf results."""
    per: dict[str, dict[str, list[float]]] = {}
    for mode, metrics in rows:
        for base, x in speedups(metrics).items():
            per.setdefault(mode, {}).setdefault(base, []).append(x)
    return {
        mode: {b: round(g, digits) for b, v in sorted(bases.items()) if (g := geomean(v)) is not None}
        for mode, bases in sorted(per.items())
    }


def geomean_speedups(results: Iterable[CaseResult]) -> GeomeanTable:
    """The headline of the perf suite: geomean speedup per (mode, baseline) over passing cases
    (an error has no timing; a failed case's timing is not the kernel's)."""
    return geomean_by_mode(
        (str(r.case.params.get("mode")), r.metrics)
        for r in results
        if r.case.suite == "perf" and r.status == "pass"
    )


def summarise(results: list[CaseResult]) -> dict[str, Any]:
    """The run summary a nightly stores: counts per suite and status, and the geomean speedups."""
    per_suite: dict[str, dict[str, int]] = {}
    for r in results:
        counts = per_suite.setdefault(
            r.case.suite, {"pass": 0, "fail": 0, "error": 0, "timeout": 0, "skip": 0}
        )
        counts[r.status] = counts.get(r.status, 0) + 1
    failing = [f"{r.case.suite}/{r.case.name}" for r in results if r.status in ("fail", "error", "timeout")]
    drill = drill_costs(results)
    return {
        **({"drill": drill} if drill else {}),
        "results": len(results),
        "failed": sum(r.status == "fail" for r in results),
        "errors": sum(r.status == "error" for r in results),
        "timeouts": sum(r.status == "timeout" for r in results),
        "suites": per_suite,
        "geomean_speedup": geomean_speedups(results),
        "failing_cases": failing[:200],
    }


def drill_costs(results: list[CaseResult]) -> dict[str, Any]:
    """A slowdown drill's cost per perf case, measured against the clean build timed interleaved in
    the same rounds (regress/run/suites/perf.py), beside what was requested; {} when not a drill."""
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
    ratio = geomean(1.0 + v / 100.0 for v in per_case.values())
    return {
        "requested_pct": requested,
        "tolerance_pct": tolerance,
        "measured_pct_geomean": round((ratio - 1.0) * 100.0, 2) if ratio is not None else None,
        "measured_pct_min": round(min(per_case.values()), 2),
        "measured_pct_max": round(max(per_case.values()), 2),
        "within_tolerance": sum(abs(v - requested) <= tolerance for v in per_case.values()),
        "cases": len(per_case),
        "per_case_pct": {k: round(v, 2) for k, v in sorted(per_case.items())},
    }


def describe_change(kind: str, metric: str, magnitude: float | None) -> str:
    """A regression's magnitude in words with its unit: the one reading the CLI, the site and the
    feed show (a numerics regression once showed a bare 0.08667 under a "% for perf" heading).
    What `magnitude` is per kind and metric is set by regress.judge.analysis."""
    if magnitude is None or not math.isfinite(magnitude):
        return ""
    if kind == "perf":  # relative change of the time
        return f"{magnitude * 100:+.1f} % time"
    if kind == "numerics" and metric == "ulp_contract":  # scaled ULP / limit - 1
        return f"{magnitude + 1:.3g}× the limit"
    if kind == "numerics" and metric == "plain_ulp_frac_gt1":  # growth of the fraction > 1 ULP
        return f"{magnitude * 100:+.3g} points of elements > 1 ULP"
    if kind == "determinism":  # distinct output hashes - 1
        return f"{magnitude + 1:.0f} distinct outputs"
    if kind == "build" and metric.endswith("spills"):
        return f"{magnitude:.0f} spilled (was 0)"
    if kind == "build":  # register count b / a - 1
        return f"{magnitude * 100:+.0f} % registers"
    return f"{magnitude:.4g}"


def drill_tolerance_word(drill: Mapping[str, Any], measured_pct: float | None) -> str:
    """ "within tolerance" or "outside tolerance" for a measured drill cost (a 30 % request read
    +58.8 % was once printed "geomean (within tolerance)")."""
    if measured_pct is None:
        return "not measured"
    inside = abs(float(measured_pct) - float(drill["requested_pct"])) <= float(drill["tolerance_pct"])
    return "within tolerance" if inside else "outside tolerance"


def stored_geomean(summary: Any) -> GeomeanTable:
    """The geomean table of a stored run summary, {} if absent or not of the one shape."""
    geo = summary.get("geomean_speedup") if isinstance(summary, Mapping) else None
    if not isinstance(geo, Mapping):
        return {}
    return {
        str(mode): {str(b): float(x) for b, x in per.items() if isinstance(x, int | float)}
        for mode, per in geo.items()
        if isinstance(per, Mapping)
    }


# --- the numerics contract ----------------------------------------------------------------------

SUPPORTED_CONTRACT_VERSIONS = (2,)


@dataclass(frozen=True)
class Contract:
    version: int
    scaled_ulp_max: dict[str, float]
    nonfinite_mismatch_max: int
    distinct_hashes_max: int
    rounding_mismatch_max: int
    rounding_bias_ulp: dict[str, float]
    rounding_bias_tolerance: float

    def scaled_ulp_limit(self, mode: str) -> float:
        return self.scaled_ulp_max[mode]

    def rounding_bias_band(self, mode: str) -> tuple[float, float]:
        """The mean (|out| - |exact|) in ULPs a correct kernel of `mode` lands in."""
        centre = self.rounding_bias_ulp[mode]
        return centre - self.rounding_bias_tolerance, centre + self.rounding_bias_tolerance


def parse_contract(data: dict[str, Any]) -> Contract:
    version = int(data["version"])
    if version not in SUPPORTED_CONTRACT_VERSIONS:
        raise ValueError(
            f"numerics contract version {version} is not supported ({SUPPORTED_CONTRACT_VERSIONS})"
        )
    return Contract(
        version=version,
        scaled_ulp_max={str(k): float(v) for k, v in data["scaled_ulp_max"].items()},
        nonfinite_mismatch_max=int(data["nonfinite"]["mismatch_max"]),
        distinct_hashes_max=int(data["determinism"]["distinct_hashes_max"]),
        rounding_mismatch_max=int(data["rounding"]["rule_mismatch_max"]),
        rounding_bias_ulp={str(k): float(v) for k, v in data["rounding"]["bias_ulp"].items()},
        rounding_bias_tolerance=float(data["rounding"]["bias_tolerance"]),
    )


@cache
def load_contract() -> Contract:
    """regress/facts/contract.toml: the one copy of the limits (suites, site, demo, benchmarks read it)."""
    text = resources.files("regress.facts").joinpath("contract.toml").read_text(encoding="utf-8")
    return parse_contract(tomllib.loads(text))


def scaled_ulp_limit(mode: str | None) -> float | None:
    return load_contract().scaled_ulp_max.get(mode or "")


__all__ = [
    "HEADLINE",
    "SPEEDUP_PREFIX",
    "Contract",
    "GeomeanTable",
    "Headline",
    "geomean",
    "geomean_by_mode",
    "geomean_speedups",
    "headline_value",
    "load_contract",
    "parse_contract",
    "percentile",
    "scaled_ulp_limit",
    "speedups",
    "stored_geomean",
    "summarise",
    "summarize_times",
    "timing_metrics",
]
