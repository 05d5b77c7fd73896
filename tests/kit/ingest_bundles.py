"""Realistic run bundles for the ingest tests and benchmark, built with the store's own functions.

One template run (perf, ULP and determinism cases with raw samples) is recorded in a temp SQLite
store and exported once per process; `make_bundle` copies it under a fresh run id.
"""

from __future__ import annotations

import copy
import functools
import random
import tempfile
from pathlib import Path
from typing import Any

from regress.facts.results import CaseResult, CaseSpec
from regress.facts.stack_keys import stack_digest
from regress.store.base import new_run_id
from regress.store.repo import (
    add_result,
    finish_run,
    get_or_create_stack,
    open_store,
    start_run,
)
from regress.store.transfer import export_bundle

STACK_KEYS = {
    "backend": "hip",
    "gpu_arch": "gfx942:sramecc+:xnack-",
    "gpu_product": "AMD Instinct MI300X",
    "driver": "6.12.12",
    "firmware": "113-M3000100-102",
    "toolkit": "rocm 6.4.1-83",
    "compiler": "AMD clang version 19.0.0git",
    "build_flags": "--offload-arch=gfx942 -O3",
}
STACK_DIGEST = stack_digest(STACK_KEYS)


def _cases(rng: random.Random) -> list[CaseResult]:
    out = []
    for mode in ("rtne", "rtna", "rtz"):
        for sq in (512, 4096):
            params = {"b": 2, "h": 16, "sq": sq, "sk": sq, "d": 128, "layout": "bshd", "mode": mode}
            base = 0.02 * (sq / 512) ** 2
            times = [round(base * rng.uniform(0.98, 1.05), 6) for _ in range(100)]
            ref = [round(base * 1.15 * rng.uniform(0.98, 1.05), 6) for _ in range(100)]
            out.append(
                CaseResult(
                    CaseSpec("perf", f"b2h16s{sq}-{mode}", params),
                    "pass",
                    metrics={"p50_ms": sorted(times)[50], "tflops": 300.0, "speedup": 1.15},
                    samples={"time_ms": times, "baseline:aiter:time_ms": ref},
                    device={"index": 0},
                )
            )
            out.append(
                CaseResult(
                    CaseSpec("ulp", f"b2h16s{sq}-{mode}", params),
                    "pass",
                    metrics={"scaled_ulp_max": 0.9, "max_ulp": 3, "hist": [90, 8, 1, 1, 0]},
                )
            )
    out.append(
        CaseResult(
            CaseSpec("determinism", "repeat-10", {"b": 1, "h": 8, "sq": 1024, "sk": 1024, "d": 128}),
            "pass",
            metrics={"distinct_hashes": 1, "launches": 10},
        )
    )
    return out


@functools.cache
def _template() -> dict[str, Any]:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'template.db'}")
        with store.transaction() as session:
            stack_id = get_or_create_stack(
                session, digest=STACK_DIGEST, keys=STACK_KEYS, schema_version=1, name="mi300x-rocm6.4"
            ).id
        run_id = start_run(
            store,
            stack_id=stack_id,
            build_id=None,
            backend="hip",
            suites=["perf", "ulp", "determinism"],
            trigger="nightly",
            kernel_commit="0123456789abcdef0123456789abcdef01234567",
        )
        for result in _cases(rng):
            add_result(store, run_id, result)
        finish_run(store, run_id, status="complete", summary={"passed": 13, "failed": 0}, exit_code=0)
        with store.reader() as session:
            bundle = export_bundle(session, run_id)
        store.engine.dispose()
    return bundle


def make_bundle(run_id: str | None = None, runner: str | None = None) -> dict[str, Any]:
    """A complete, valid bundle under a new (or the given) run id, optionally naming its runner."""
    bundle = copy.deepcopy(_template())
    bundle["run"]["id"] = run_id or new_run_id()
    bundle["run"]["runner"] = runner
    return bundle


def conflicting(bundle: dict[str, Any]) -> dict[str, Any]:
    """The same run id with different numbers: what a server must refuse with 409."""
    other = copy.deepcopy(bundle)
    other["results"][0]["samples"]["time_ms"][0] += 1.0
    other["results"][0]["metrics"]["p50_ms"] += 1.0
    return other
