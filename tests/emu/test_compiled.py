"""Compiler-generated sequences (clang-19, the project's device flags) checked bit for bit: the IEEE
division the epilogue uses (v_div_scale / v_rcp / v_fma / v_div_fmas / v_div_fixup) and the three
bf16 rounding paths of kernel/common/bf16.h, against numpy and regress.numerics."""

from __future__ import annotations

import numpy as np

from regress.facts import numerics

SOURCE = """
#include "hip/parts/compat.h"
#include "common/bf16.h"
extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(64, 64)))
void k(const float* a, const float* b, float* q, unsigned short* r) {
  const unsigned i = __builtin_amdgcn_workitem_id_x() + 64u * __builtin_amdgcn_workgroup_id_x();
  q[i] = a[i] / b[i];
  r[3 * i + 0] = ra_f32_to_bf16_rtne(a[i]);
  r[3 * i + 1] = ra_f32_to_bf16_rtna(a[i]);
  r[3 * i + 2] = ra_f32_to_bf16_rtz(a[i]);
}
"""


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        np.inf,
        -np.inf,
        np.nan,
        1e-40,
        -1e-42,
        3.0e38,
        1.17549435e-38,
        1.0 + 2**-8,
        1.0 + 2**-9,
        1.0 + 3 * 2**-9,
        -(1.0 + 2**-8),
        65504.0,
        1e-30,
        7.0,
    ]
    a = np.concatenate(
        [
            np.asarray(special, np.float32),
            np.repeat(np.asarray(special, np.float32), len(special)),
            (rng.standard_normal(640) * np.exp2(rng.integers(-140, 120, 640))).astype(np.float32),
        ]
    )
    b = np.concatenate(
        [
            np.asarray(special[::-1], np.float32),
            np.tile(np.asarray(special, np.float32), len(special)),
            (rng.standard_normal(640) * np.exp2(rng.integers(-140, 120, 640))).astype(np.float32),
        ]
    )
    n = -(-a.size // 64) * 64
    return np.resize(a, n).astype(np.float32), np.resize(b, n).astype(np.float32)


def test_division_and_bf16_rounding(hip_kernel):
    k = hip_kernel(SOURCE)
    a, b = _inputs()
    q = np.zeros_like(a)
    r = np.zeros(3 * a.size, np.uint16)
    hazards, trace = k(a, b, q, r, grid=a.size // 64)
    assert not hazards
    assert trace.issued["valu"] > 0
    with np.errstate(all="ignore"):
        want = a / b
    same = (q.view(np.uint32) == want.view(np.uint32)) | (np.isnan(q) & np.isnan(want))
    bad = np.flatnonzero(~same)
    assert not bad.size, [(a[i], b[i], q[i], want[i]) for i in bad[:5]]
    r = r.reshape(-1, 3)
    for col, mode in enumerate(("rtne", "rtna", "rtz")):
        assert (r[:, col] == numerics.f32_to_bf16_bits(a, mode)).all(), mode
