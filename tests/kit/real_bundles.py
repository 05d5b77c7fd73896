"""The committed bundles of real H200 runs (the headline ones, committed.headline()), trimmed for fast
tests.

Trimming keeps every field and every kind of value a real runner writes (perf, ULP and determinism
results; device, GPU state and build stats); it only keeps fewer results and fewer raw timings.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from committed import headline

from regress.store.base import new_run_id


@functools.cache
def _loaded() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(p.read_text()) for p in headline())


def _trim(bundle: dict[str, Any], results: int, samples: int) -> dict[str, Any]:
    out = copy.deepcopy({k: v for k, v in bundle.items() if k != "results"})
    by_suite: dict[str, list[dict[str, Any]]] = {}
    for res in bundle["results"]:
        by_suite.setdefault(res["suite"], []).append(res)
    kept = []
    for suite_results in by_suite.values():  # one of each suite first, so every kind is present
        kept.extend(suite_results[: max(1, results // len(by_suite))])
    out["results"] = copy.deepcopy(kept[:results])
    for res in out["results"]:
        res["samples"] = {name: values[:samples] for name, values in res["samples"].items()}
    return out


def real_bundles(results: int = 3, samples: int = 5) -> list[dict[str, Any]]:
    """Every committed real bundle, trimmed, each under a fresh run id and no runner name."""
    out = []
    for bundle in _loaded():
        trimmed = _trim(bundle, results, samples)
        trimmed["run"]["id"] = new_run_id()
        trimmed["run"]["runner"] = None
        out.append(trimmed)
    return out
