"""The suite interface the nightly orchestrator and the multi-GPU sharder call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from regress.facts.results import CaseResult, CaseSpec

if TYPE_CHECKING:
    from regress.facts.abi import Library
    from regress.kernel.baselines import Baseline


def _silent(_: str) -> None:
    return None


@dataclass
class SuiteContext:
    """Everything a suite needs to produce results; one per (library, device) run."""

    library: Library  # a KernelLibrary, or the emulator's EmuLibrary for a gfx942 code object
    device: str  # "cpu" or "cuda" (ROCm torch also says "cuda")
    baselines: list[Baseline] = field(default_factory=list)
    quick: bool = False
    seed: int = 42
    iterations: int | None = None  # overrides the timed iterations of perf and e2e
    # The rest of the run's options (regress.run.runner.CaseOptions, whose fields these are).
    long_shapes: bool = False
    ab_baseline: str | None = None
    ab_label: str = ""
    log: Callable[[str], None] = _silent

    @property
    def is_gpu(self) -> bool:
        return self.device != "cpu"


class Suite(Protocol):
    name: str

    def cases(self, ctx: SuiteContext) -> list[CaseSpec]: ...

    def run_case(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        """Never raises for a kernel failure: returns status "error" with the message."""
        ...
