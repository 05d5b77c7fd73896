"""The case catalogue: how a case of each suite is named and parameterised, torch-free.

A case's identity is (kernel, suite, name, params) (`results.CaseSpec.key`), so its name and
params must be made in one place: the suites (which run the cases) and the demo (which writes a
history of them without torch) both build them here, so a demo series has the name, the params
and so the key that a real nightly's has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .results import CaseSpec, Layout, Rounding

HEAD_DIM = 128
BF16_BYTES = 2
# The layout the end-to-end layer runs in: what a projection's [B, S, H·D] output reshapes to
# without a copy.
E2E_LAYOUT: Layout = "bshd"
# The inputs of a case that draws the ANCHORS.md "realistic" distribution.
REALISTIC = "realistic"


@dataclass(frozen=True)
class Shape:
    b: int
    h: int
    sq: int
    sk: int
    d: int = HEAD_DIM

    @property
    def flops(self) -> int:
        """Forward FLOPs as FlashAttention counts them: two matmuls of 2·Sq·Sk·D each."""
        return 4 * self.b * self.h * self.sq * self.sk * self.d

    @property
    def min_bytes(self) -> int:
        """The fewest device-memory bytes a forward moves: bf16 Q, K, V read once, O written once."""
        return BF16_BYTES * self.d * self.b * self.h * (2 * self.sq + 2 * self.sk)

    @property
    def tag(self) -> str:
        return f"b{self.b}_h{self.h}_sq{self.sq}_sk{self.sk}"

    def dims(self) -> str:
        return f"{self.b},{self.h},{self.sq},{self.sk}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        b, h, sq, sk = (int(x) for x in text.split(","))
        return cls(b, h, sq, sk)


def case_params(shape: Shape, layout: str, mode: str, **extra: Any) -> dict[str, Any]:
    return {
        "b": shape.b,
        "h": shape.h,
        "sq": shape.sq,
        "sk": shape.sk,
        "d": shape.d,
        "layout": layout,
        "mode": mode,
        **extra,
    }


def case_name(shape: Shape, layout: str, mode: str, *suffix: str) -> str:
    return "_".join([shape.tag, layout, mode, *suffix])


def make_spec(suite: str, shape: Shape, layout: str, mode: str, *suffix: str, **extra: Any) -> CaseSpec:
    return CaseSpec(
        suite=suite,
        name=case_name(shape, layout, mode, *suffix),
        params=case_params(shape, layout, mode, **extra),
    )


def spec_shape(spec: CaseSpec) -> Shape:
    p = spec.params
    return Shape(int(p["b"]), int(p["h"]), int(p["sq"]), int(p["sk"]), int(p.get("d", HEAD_DIM)))


# --- one constructor per suite: the suites' `cases()` and the demo call these -------------------


def perf_case(shape: Shape, layout: Layout, mode: Rounding) -> CaseSpec:
    return make_spec("perf", shape, layout, mode)


def ulp_case(
    shape: Shape, layout: Layout, mode: Rounding, *suffix: str, input: str = REALISTIC, **extra: Any
) -> CaseSpec:
    """A ULP case; `input` names the input kind (an edge case's kind is also its suffix)."""
    return make_spec("ulp", shape, layout, mode, *suffix, input=input, **extra)


def determinism_case(shape: Shape, layout: Layout, mode: Rounding, variant: str = "repeat") -> CaseSpec:
    return make_spec("determinism", shape, layout, mode, variant, input=REALISTIC, variant=variant)


def e2e_case(shape: Shape, layer: str, mode: Rounding) -> CaseSpec:
    """An attention layer ("self" or "cross") of model width h·d around the kernel."""
    return make_spec("e2e", shape, E2E_LAYOUT, mode, layer, layer=layer, dim=shape.h * shape.d)


# The end-to-end shapes on a GPU (Wan2.1 text-to-video, see regress/suites/e2e.py): (shape, layer).
E2E_GPU_CASES: list[tuple[Shape, str]] = [
    (Shape(2, 12, 4680, 4680), "self"),
    (Shape(2, 40, 4680, 4680), "self"),
    (Shape(1, 12, 32760, 32760), "self"),
    (Shape(1, 40, 32760, 32760), "self"),
    (Shape(1, 12, 32760, 512), "cross"),
    (Shape(1, 40, 32760, 512), "cross"),
]
