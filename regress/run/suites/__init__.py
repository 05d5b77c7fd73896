"""The four suites (DESIGN.md §3): determinism, ulp, perf, e2e.

Each suite lists its cases for a device (`cases`) and runs one case at a time (`run_case`), so the
nightly orchestrator runs them in order and the multi-GPU sharder can deal them out across devices.
`run_case` never raises for a kernel failure: the case comes back with status "error" and the message.
"""

from __future__ import annotations

from regress.facts.metrics import geomean_speedups
from regress.facts.results import CaseResult
from regress.run.suites.base import Suite, SuiteContext
from regress.run.suites.determinism import DeterminismSuite
from regress.run.suites.e2e import E2eSuite
from regress.run.suites.perf import PerfSuite
from regress.run.suites.ulp import UlpSuite

SUITES: dict[str, Suite] = {
    "determinism": DeterminismSuite(),
    "ulp": UlpSuite(),
    "perf": PerfSuite(),
    "e2e": E2eSuite(),
}


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise KeyError(f"unknown suite {name!r}; known: {', '.join(SUITES)}") from None


def run_suite(name: str, ctx: SuiteContext) -> list[CaseResult]:
    """Every case of one suite, in order (the plain loop; the orchestrator adds storage and sharding)."""
    suite = get_suite(name)
    results = []
    for spec in suite.cases(ctx):
        ctx.log(f"{name}: {spec.name}")
        results.append(suite.run_case(ctx, spec))
    return results


__all__ = ["SUITES", "Suite", "SuiteContext", "geomean_speedups", "get_suite", "run_suite"]
