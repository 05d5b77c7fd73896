"""The case catalogue: how a case of each suite is named and parameterised, torch-free.

A case's identity is (kernel, suite, name, params) (`results.CaseSpec.key`), so its name and
params must be made in one place: the suites (which run the cases) and the demo (which writes a
history of them without torch) both build them here, so a demo series has the name, the params
and so the key that a real nightly's has.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from .abi import RA_HEAD_DIM
from .results import CaseSpec, Layout, Rounding

HEAD_DIM = RA_HEAD_DIM  # the ABI's head_dim, under the catalogue's name

BF16_BYTES = 2
# The layout the end-to-end layer runs in: what a projection's [B, S, H·D] output reshapes to
# without a copy.
E2E_LAYOUT: Layout = "bshd"
# The inputs of a case that draws the ANCHORS.md "realistic" distribution.
REALISTIC = "realistic"


# The case tags of the masks (regress.facts.results.MASKS); "none" adds nothing to a case's name.
MASK_TAG = {"none": "", "causal_top_left": "causal-tl", "causal_bottom_right": "causal-br"}


def visible_pairs(mask: str, sq: int, sk: int) -> int:
    """(query row, key) pairs a mask leaves visible in one sequence: row i sees keys [0, n_i) with
    n_i = Sk (none), min(i + 1, Sk) (top-left) or clamp(i + 1 + Sk - Sq, 0, Sk) (bottom-right), the
    rule of regress.kernel.reference.visible_keys and the CPU model, summed in closed form."""
    if mask == "none":
        return sq * sk
    off = 0 if mask == "causal_top_left" else sk - sq  # n_i = clamp(i + 1 + off, 0, sk)
    if mask not in MASK_TAG:
        raise ValueError(f"mask {mask!r} is not one of {', '.join(MASK_TAG)}")
    lo = max(0, -off)  # first row that sees a key
    ramp_end = min(sq, max(lo, sk - off - 1))  # rows lo .. ramp_end-1 see i + 1 + off < sk keys
    n = ramp_end - lo
    ramp = n * (lo + 1 + off) + n * (n - 1) // 2 if n > 0 else 0
    return ramp + (sq - max(ramp_end, lo)) * sk


@dataclass(frozen=True)
class Shape:
    """A call's geometry: batch, query heads, lengths, head_dim, and the v2 axes: K/V heads (0: the
    same as h), the mask, and for a varlen call the (q, k) length of each packed sequence (then b is
    their count and sq, sk the packed totals). The defaults keep a dense case's name and key as
    they were before the axes existed."""

    b: int
    h: int
    sq: int
    sk: int
    d: int = HEAD_DIM
    hkv: int = 0
    mask: str = "none"
    seqs: tuple[tuple[int, int], ...] | None = None

    @classmethod
    def varlen(cls, h: int, seqs: list[tuple[int, int]], *, hkv: int = 0, mask: str = "none") -> Shape:
        """Packed sequences of (q, k) lengths."""
        tq, tk = sum(a for a, _ in seqs), sum(c for _, c in seqs)
        return cls(len(seqs), h, tq, tk, hkv=hkv, mask=mask, seqs=tuple((int(a), int(c)) for a, c in seqs))

    @property
    def heads_kv(self) -> int:
        return self.hkv or self.h

    @property
    def pairs(self) -> int:
        """Visible (query row, key) pairs per head, over the batch or the packed sequences."""
        if self.seqs is not None:
            return sum(visible_pairs(self.mask, a, c) for a, c in self.seqs)
        return self.b * visible_pairs(self.mask, self.sq, self.sk)

    @property
    def flops(self) -> int:
        """Forward FLOPs as FlashAttention counts them: two matmuls of 2·Sq·Sk·D each, over the
        unmasked (query, key) pairs only."""
        return 4 * self.h * self.pairs * self.d

    @property
    def min_bytes(self) -> int:
        """The fewest device-memory bytes a forward moves: bf16 Q, K, V read once, O written once."""
        rows_q, rows_k = (self.sq, self.sk) if self.seqs is not None else (self.b * self.sq, self.b * self.sk)
        return BF16_BYTES * self.d * (2 * self.h * rows_q + 2 * self.heads_kv * rows_k)

    @property
    def tag(self) -> str:
        return f"b{self.b}_h{self.h}_sq{self.sq}_sk{self.sk}"

    @property
    def v2_tags(self) -> list[str]:
        """The v2 axes in a case name, after its layout and mode (none for a dense case)."""
        tags = []
        if self.hkv and self.hkv != self.h:
            tags.append(f"hkv{self.hkv}")
        if MASK_TAG[self.mask]:
            tags.append(MASK_TAG[self.mask])
        if self.seqs is not None:
            tags.append(f"varlen{len(self.seqs)}-{varlen_digest(self.seqs)}")
        return tags

    def dims(self) -> str:
        return f"{self.b},{self.h},{self.sq},{self.sk}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        b, h, sq, sk = (int(x) for x in text.split(","))
        return cls(b, h, sq, sk)


def varlen_digest(seqs: tuple[tuple[int, int], ...]) -> str:
    """A short stable name for a length mix (its full list is in the case's params)."""
    return hashlib.sha256(json.dumps([list(x) for x in seqs]).encode()).hexdigest()[:8]


def case_params(shape: Shape, layout: str, mode: str, **extra: Any) -> dict[str, Any]:
    v2: dict[str, Any] = {}  # only the non-default v2 axes: a dense case's key is unchanged
    if shape.hkv and shape.hkv != shape.h:
        v2["hkv"] = shape.hkv
    if shape.mask != "none":
        v2["mask"] = shape.mask
    if shape.seqs is not None:
        v2["seqs"] = [list(x) for x in shape.seqs]
    return {
        "b": shape.b,
        "h": shape.h,
        "sq": shape.sq,
        "sk": shape.sk,
        "d": shape.d,
        "layout": layout,
        "mode": mode,
        **v2,
        **extra,
    }


def case_name(shape: Shape, layout: str, mode: str, *suffix: str) -> str:
    return "_".join([shape.tag, layout, mode, *shape.v2_tags, *suffix])


def make_spec(suite: str, shape: Shape, layout: str, mode: str, *suffix: str, **extra: Any) -> CaseSpec:
    return CaseSpec(
        suite=suite,
        name=case_name(shape, layout, mode, *suffix),
        params=case_params(shape, layout, mode, **extra),
    )


def spec_shape(spec: CaseSpec) -> Shape:
    p = spec.params
    seqs = p.get("seqs")
    return Shape(
        int(p["b"]),
        int(p["h"]),
        int(p["sq"]),
        int(p["sk"]),
        int(p.get("d", HEAD_DIM)),
        hkv=int(p.get("hkv", 0)),
        mask=str(p.get("mask", "none")),
        seqs=None if seqs is None else tuple((int(a), int(c)) for a, c in seqs),
    )


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


# The end-to-end shapes on a GPU (Wan2.1 text-to-video, see regress/run/suites/e2e.py): (shape, layer).
E2E_GPU_CASES: list[tuple[Shape, str]] = [
    (Shape(2, 12, 4680, 4680), "self"),
    (Shape(2, 40, 4680, 4680), "self"),
    (Shape(1, 12, 32760, 32760), "self"),
    (Shape(1, 40, 32760, 32760), "self"),
    (Shape(1, 12, 32760, 512), "cross"),
    (Shape(1, 40, 32760, 512), "cross"),
]


def serving_mix(
    n_short: int, n_long: int, *, short: tuple[int, int], long: tuple[int, int], seed: int
) -> list[int]:
    """A length mix like real serving traffic: many short sequences and a few long ones, drawn
    log-uniformly in each range from a fixed seed (torch-free: a small LCG, so the catalogue and
    the demo make the same lists)."""
    state = seed & 0xFFFFFFFF
    out = []
    for n, (lo, hi) in ((n_short, short), (n_long, long)):
        for _ in range(n):
            state = (1103515245 * state + 12345) & 0x7FFFFFFF
            u = state / 0x7FFFFFFF
            out.append(round(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))))
    return out


def prefill_seqs(lengths: list[int]) -> list[tuple[int, int]]:
    """Packed prefill: each sequence's queries attend its own keys (Sq = Sk per sequence)."""
    return [(n, n) for n in lengths]


# Llama-3-8B's attention: 32 query heads, 8 K/V heads, head_dim 128, causal prefill and decode.
LLAMA3_8B_HEADS, LLAMA3_8B_KV_HEADS = 32, 8
# The varlen length mixes ("many short + a few long", as serving traffic): packed prefill, Sq = Sk per
# sequence. The GPU mix is the FlashAttention-2 comparison (64 sequences of 16-8000 tokens).
VARLEN_MIX_GPU: list[tuple[int, int]] = prefill_seqs(
    serving_mix(60, 4, short=(16, 512), long=(2000, 8000), seed=7)
)
VARLEN_MIX_CPU: list[tuple[int, int]] = prefill_seqs(
    serving_mix(12, 2, short=(8, 96), long=(300, 600), seed=7)
)
# A continuous-batching decode step: 64 sequences of one new token against caches of 128-8000 keys
# (most short, a few long), and a chunked-prefill step: 16 prompt chunks of 32-2048 tokens against
# what their sequences already hold (0-6000 keys) plus themselves (causal bottom-right per sequence).
VARLEN_DECODE_GPU: list[tuple[int, int]] = [
    (1, n) for n in serving_mix(56, 8, short=(128, 2048), long=(4000, 8000), seed=11)
]
VARLEN_CHUNK_GPU: list[tuple[int, int]] = [
    (q, q + c)
    for q, c in zip(
        serving_mix(12, 4, short=(32, 512), long=(1024, 2048), seed=13),
        serving_mix(10, 6, short=(1, 600), long=(2000, 6000), seed=17),
        strict=True,
    )
]
