"""The case catalogue (regress/facts/cases.py): torch-free, and the one maker of case names and params,
so the demo's cases are cases a real nightly runs."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from regress.present.demo import demo_cases
from regress.run.suites import SUITES
from regress.run.suites.base import SuiteContext


def _real(device: str, quick: bool = False, backend: str = "cuda") -> dict[str, dict[str, object]]:
    ctx = SuiteContext(
        library=SimpleNamespace(backend=backend),  # type: ignore[arg-type]  # cases() reads .backend only
        device=device,
        quick=quick,
        seed=42,
        iterations=None,
    )
    return {s.key: s.params for suite in SUITES.values() for s in suite.cases(ctx)}


def test_the_catalogue_and_the_demo_import_no_torch() -> None:
    code = "import sys, regress.facts.cases, regress.present.demo; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_demo_writes_the_e2e_cases_of_a_gpu_nightly() -> None:
    real = _real("cuda")
    e2e = [s for s in demo_cases(300) if s.suite == "e2e"]
    assert len(e2e) == 18 and all(s.key in real for s in e2e)  # same name and params, so the same key


def test_every_demo_case_has_the_params_of_its_suites_cases() -> None:
    """A demo case's params have the keys a real case of its suite has (the demo's shapes are its
    own, its naming is not)."""
    by_suite: dict[str, set[frozenset[str]]] = {}
    for ctx_device in ("cuda", "cpu"):
        ctx = SuiteContext(
            library=SimpleNamespace(backend="cuda"),  # type: ignore[arg-type]
            device=ctx_device,
            quick=False,
            seed=42,
            iterations=None,
        )
        for name, suite in SUITES.items():
            by_suite.setdefault(name, set()).update(frozenset(s.params) for s in suite.cases(ctx))
    specs = demo_cases(300)
    assert {s.suite for s in specs} == set(SUITES)
    for s in specs:
        assert frozenset(s.params) in by_suite[s.suite], (s.suite, s.name, sorted(s.params))
