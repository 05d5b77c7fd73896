"""The packed-bf16 staircase helpers of kernel/common/bf16.h (ra_bf16x2_nonfinite_sum, _sum_flags,
_nonfinite, _halves, _zero_nonfinite), compiled by the system C compiler from the header the kernels
include and checked against numpy's isfinite on every bf16 pattern in both halves of a word."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from c_probe import build_c

SHIM = r"""
#include <stddef.h>
#include "common/bf16.h"
void pairs(const uint32_t* x, uint32_t* nf, uint32_t* halves, uint32_t* zeroed, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    nf[i] = ra_bf16x2_nonfinite(x[i]);
    halves[i] = ra_bf16x2_halves(nf[i]);
    zeroed[i] = ra_bf16x2_zero_nonfinite(x[i]);
  }
}
/* the kernels' vote: the words' sums OR-ed, then one mask */
uint32_t vote(const uint32_t* x, size_t n) {
  uint32_t acc = 0u;
  for (size_t i = 0; i < n; ++i) acc |= ra_bf16x2_nonfinite_sum(x[i]);
  return ra_bf16x2_sum_flags(acc);
}
"""

U32P = np.ctypeslib.ndpointer(np.uint32, flags="C_CONTIGUOUS")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = build_c(SHIM, tmp_path_factory.mktemp("bf16pairs"), shared=True, flags=("-O2", "-Wall", "-Werror"))
    lib = ctypes.CDLL(str(out))
    lib.pairs.argtypes = [U32P, U32P, U32P, U32P, ctypes.c_size_t]
    lib.pairs.restype = None
    lib.vote.argtypes = [U32P, ctypes.c_size_t]
    lib.vote.restype = ctypes.c_uint32
    return lib


def _half_nonfinite(h: np.ndarray) -> np.ndarray:
    """numpy's own answer: a bf16 is its fp32 with the low 16 bits zero."""
    return ~np.isfinite((h.astype(np.uint32) << 16).view(np.float32))


def _words() -> np.ndarray:
    """Every bf16 pattern in the low half beside three partners in the high half (itself, a
    permutation, and +Inf), and the same with the halves swapped."""
    i = np.arange(1 << 16, dtype=np.uint32)
    partners = [i, (i * 40503 + 12345) & 0xFFFF, np.full_like(i, 0x7F80)]
    low = [i | (p << 16) for p in partners]
    return np.concatenate(low + [(w >> 16) | (w << 16) for w in low]).astype(np.uint32)


def test_every_pattern_in_both_halves(shim: ctypes.CDLL) -> None:
    x = _words()
    nf, halves, zeroed = (np.empty_like(x) for _ in range(3))
    shim.pairs(x, nf, halves, zeroed, x.size)
    lo_bad, hi_bad = _half_nonfinite(x & 0xFFFF), _half_nonfinite(x >> 16)
    want_nf = np.where(lo_bad, 0x8000, 0) | np.where(hi_bad, 0x80000000, 0)
    want_halves = np.where(lo_bad, 0xFFFF, 0) | np.where(hi_bad, 0xFFFF0000, 0)
    np.testing.assert_array_equal(nf, want_nf.astype(np.uint32))
    np.testing.assert_array_equal(halves, want_halves.astype(np.uint32))
    # a non-finite half becomes +0; a finite half (-0 and subnormals included) keeps its bits
    np.testing.assert_array_equal(zeroed, (x & ~want_halves.astype(np.uint32)).astype(np.uint32))
    assert np.isfinite((zeroed << 16).view(np.float32)).all()
    assert np.isfinite((zeroed & 0xFFFF0000).view(np.float32)).all()


def test_or_of_sums_is_the_or_of_flags(shim: ctypes.CDLL) -> None:
    """The kernels OR several words' unmasked sums before one mask: that equals OR-ing the masked
    flags, for finite words mixed with a few non-finite ones (no sum carries across halves)."""
    rng = np.random.default_rng(20261206)
    finite = rng.integers(0, 1 << 32, size=(4000, 16), dtype=np.uint64).astype(np.uint32)
    # a non-finite half loses its exponent's lowest bit: every half finite, exponents up to 0xfe
    finite &= ~(
        np.where(_half_nonfinite(finite & 0xFFFF), 0x0080, 0)
        | np.where(_half_nonfinite(finite >> 16), 0x00800000, 0)
    ).astype(np.uint32)
    assert not (_half_nonfinite(finite & 0xFFFF) | _half_nonfinite(finite >> 16)).any()
    bad = np.array([0x7F80, 0xFF80, 0x7FC0, 0x7FFF, 0xFFFF], dtype=np.uint32)
    for row, w in enumerate(finite):
        words = w.copy()
        if row % 3:
            k = rng.integers(0, 16)
            shift = 16 * int(rng.integers(0, 2))
            words[k] = (words[k] & ~np.uint32(0xFFFF << shift)) | (bad[row % bad.size] << shift)
        nf = np.empty_like(words)
        shim.pairs(words, nf, np.empty_like(words), np.empty_like(words), words.size)
        assert shim.vote(words, words.size) == int(np.bitwise_or.reduce(nf)), [hex(v) for v in words]
