"""Fixtures for the suite tests: the real CPU golden model, clean and with injected faults."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from regress.kernel import KernelLibrary, load_library
from regress.kernel.baselines import available_baselines
from regress.native.build import build_kernel
from regress.run.suites import SuiteContext


@pytest.fixture(scope="session")
def cpu_lib() -> KernelLibrary:
    return load_library(build_kernel("cpu").path)


@pytest.fixture(scope="session")
def ulp_drill_lib() -> KernelLibrary:
    """Every finite non-zero output moved 2 ULPs away from zero."""
    return load_library(build_kernel("cpu", inject={"ulp": 2}).path)


@pytest.fixture(scope="session")
def nondet_drill_lib() -> KernelLibrary:
    """Odd-numbered launches flip the lowest bit of one output element."""
    return load_library(build_kernel("cpu", inject={"nondeterminism": 1}).path)


@pytest.fixture
def make_ctx() -> Callable[..., SuiteContext]:
    def make(
        library: KernelLibrary, *, quick: bool = True, baselines: bool = True, iterations: int | None = None
    ) -> SuiteContext:
        return SuiteContext(
            library=library,
            device="cpu",
            baselines=available_baselines("cpu") if baselines else [],
            quick=quick,
            iterations=iterations,
        )

    return make
