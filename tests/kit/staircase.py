"""Non-finite V on a causal mask's diagonal (docs/numerics.md §1b): the inputs the staircase tests of
the CPU golden model, the gfx942 kernels on hip-emu and the sm_90a kernels on a GPU share."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from regress.facts import numerics as nm


def plant_nonfinite(v: torch.Tensor, sk: int, key0: int = 0) -> list[tuple[int, int]]:
    """NaN, +-Inf (one pair in one column, so a row that sees both gets NaN) and Inf in V rows of one
    sequence (keys key0 .. key0 + sk of a (tokens, heads, 128) or (1, tokens, heads, 128) tensor, every
    K/V head): keys on the causal diagonal that some rows of a q-block see and others do not, one
    just past a 64-key tile's start, the last key. Returns the (key, dim) pairs."""
    keys = sorted({min(k, sk - 1) for k in (3, sk // 3, sk // 3 + 1, 64 + sk // 5, sk - 2, sk - 1)})
    vals = [float("nan"), float("inf"), float("-inf"), float("inf"), float("-inf"), float("nan")]
    dims = [0, 9, 9, 64, 127, 40]
    t = v if v.dim() == 3 else v[0]
    placed = []
    for key, val, dim in zip(keys, vals, dims, strict=False):
        t[key0 + key, :, dim] = val
        placed.append((key, dim))
    return placed


def finite_in_reference(ref: Any, mode: str) -> np.ndarray:
    """Where the fp64 reference (reference.Reference) rounds to a finite bf16 in `mode`."""
    return ~nm.is_nonfinite_bits(nm.reference_bits(ref.ref, mode))


def assert_finite_bits_kept(o_bits: np.ndarray, clean_bits: np.ndarray, ref: Any, mode: str) -> None:
    """The staircase tests' second half: the planted V reaches some elements (the reference is not all
    finite) but not all, and every element whose reference is finite has the bits of the same call
    with V finite (`clean_bits`)."""
    fin = finite_in_reference(ref, mode)
    assert (~fin).any() and fin.any()
    assert np.array_equal(o_bits[fin], clean_bits[fin])
