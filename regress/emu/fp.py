"""Bit-exact fp32 / bf16 arithmetic over numpy lanes, as the gfx942 VALU and matrix cores define it.

Everything works on float32 arrays (or float64 where a wider intermediate is the definition). Each
function says which ISA behaviour it models; tests/emu/test_fp.py checks each on hand-computed cases.
"""

from __future__ import annotations

import numpy as np

F32_MIN_NORMAL = np.float32(2.0**-126)


def f32_bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def bits_f32(u: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(u, dtype=np.uint32).view(np.float32)


def _round_to_odd_f64(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """hi + lo (hi = fl(hi + lo), |lo| <= ulp(hi)/2) rounded to odd at fp64's 53 bits: truncate toward
    zero, then set the last bit when inexact. Rounding that to fp32 (24 bits) is then the correctly
    rounded fp32 of hi + lo (53 >= 24 + 2), which plain double rounding is not."""
    bits = hi.view(np.int64).copy()
    inexact = lo != 0
    # hi was rounded away from zero when lo points back toward zero: step one ulp toward zero.
    away = inexact & (np.signbit(hi) != np.signbit(lo)) & (hi != 0)
    bits[away] -= 1
    bits[inexact] |= 1
    return bits.view(np.float64)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray, scale: np.ndarray | float = 1.0) -> np.ndarray:
    """IEEE fused multiply-add, one rounding (v_fma_f32, v_fmac_f32), optionally times a power of two
    before that one rounding (v_div_fmas_f32).

    The fp64 product of two fp32 values is exact; the sum is made exact with TwoSum and rounded to
    odd at 53 bits, scaling by 2^k is exact in fp64, so the final fp32 conversion is the single
    correct rounding (53 >= 24 + 2)."""
    a64 = np.asarray(a, dtype=np.float32).astype(np.float64)
    b64 = np.asarray(b, dtype=np.float32).astype(np.float64)
    c64 = np.asarray(c, dtype=np.float32).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64
        s = p + c64
        bb = s - p
        lo = (p - (s - bb)) + (c64 - bb)
    finite = np.isfinite(s)
    lo = np.where(finite, lo, 0.0)
    # The sum is exact in fp64 (the common case: the 48-bit product and c overlap): one rounding.
    r = np.atleast_1d(s) if not lo.any() else _round_to_odd_f64(np.atleast_1d(s), np.atleast_1d(lo))
    r = r * scale
    with np.errstate(over="ignore"):
        out = r.astype(np.float32)
    return out.reshape(np.shape(r))


def flush_denorm(x: np.ndarray) -> np.ndarray:
    """Denormal -> zero of the same sign."""
    x = np.asarray(x, dtype=np.float32)
    return np.where(np.abs(x) < F32_MIN_NORMAL, np.copysign(np.float32(0), x), x).astype(np.float32)


def exp2_f32(x: np.ndarray) -> np.ndarray:
    """v_exp_f32: 2^x. The ISA guarantees 1 ULP and no denormal results (LLVM scales the input when
    denormals matter); modelled as the correctly rounded 2^x with denormal inputs read as 0 and
    denormal results flushed to +0. exp2(-inf) = 0, exp2(+inf) = +inf, NaN stays NaN."""
    x = flush_denorm(x)
    with np.errstate(over="ignore", under="ignore"):
        r = np.exp2(x.astype(np.float64)).astype(np.float32)
    return flush_denorm(r)


def rcp_f32(x: np.ndarray) -> np.ndarray:
    """v_rcp_f32: 1/x, 1 ULP in the ISA; modelled as the correctly rounded reciprocal with denormal
    inputs read as signed 0 (-> signed Inf) and denormal results flushed to signed 0."""
    x = flush_denorm(x)
    with np.errstate(divide="ignore", over="ignore", under="ignore"):
        r = (np.float64(1.0) / x.astype(np.float64)).astype(np.float32)
    return flush_denorm(r)


def _exponent(x: np.ndarray) -> np.ndarray:
    """Biased fp32 exponent field."""
    return ((f32_bits(x) >> 23) & 0xFF).astype(np.int32)


def div_scale_f32(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """v_div_scale_f32 D, VCC = (S0, S1 = denominator, S2 = numerator): the pre-scaling step of the
    IEEE division sequence, so that v_rcp_f32 and the Newton steps never see a denormal. Returns
    (D, VCC lanes). Cases, first match wins (CDNA3 ISA pseudo-code):
      S1 or S2 zero                         D = NaN
      exp(S2) - exp(S1) >= 96 (huge q)      VCC; scale the denominator by 2^64
      S1 denormal                           scale both by 2^64
      1/S1 and S2/S1 denormal               VCC; scale the denominator by 2^-64
      1/S1 denormal                         scale both by 2^-64
      S2/S1 denormal (tiny q)               VCC; scale the numerator by 2^64
      exp(S2) <= 23 (tiny numerator)        scale both by 2^64
    "Scale the denominator" scales D only when S0 is S1 (the call that prepares the denominator), and
    likewise for the numerator; otherwise D = S0."""
    s0 = np.asarray(s0, np.float32)
    s1 = np.asarray(s1, np.float32)
    s2 = np.asarray(s2, np.float32)
    e1, e2 = _exponent(s1), _exponent(s2)
    # Fast path: every lane normal, quotient and reciprocal well inside the normal range.
    if ((e1 > 1) & (e1 < 253) & (e2 > 23) & (e2 < 255) & (e2 - e1 < 96) & (e2 - e1 > -100)).all():
        return s0.copy(), np.zeros(np.shape(s0), dtype=bool)
    d = s0.astype(np.float64)
    vcc = np.zeros(np.shape(s0), dtype=bool)
    done = ~(np.isfinite(s1) & np.isfinite(s2))
    zero = ((s1 == 0) | (s2 == 0)) & ~done
    d = np.where(zero, np.nan, d)
    done = done | zero
    with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
        r64 = 1.0 / s1.astype(np.float64)
        q64 = s2.astype(np.float64) / s1.astype(np.float64)
    tiny = 2.0**-126
    rcp_denorm = np.abs(r64) < tiny
    q_denorm = (np.abs(q64) < tiny) & (q64 != 0)
    rules = (
        (e2 - e1 >= 96, s0 == s1, 64, True),
        (e1 == 0, None, 64, False),
        (rcp_denorm & q_denorm, s0 == s1, -64, True),
        (rcp_denorm, None, -64, False),
        (q_denorm, s0 == s2, 64, True),
        (e2 <= 23, None, 64, False),
    )
    for cond, only_if, exp, sets_vcc in rules:
        c = cond & ~done
        if sets_vcc:
            vcc |= c
        sc = c if only_if is None else c & only_if
        d = np.where(sc, d * 2.0**exp, d)
        done = done | c
    with np.errstate(over="ignore"):
        return d.astype(np.float32), vcc


def div_fmas_f32(s0: np.ndarray, s1: np.ndarray, s2: np.ndarray, vcc: np.ndarray) -> np.ndarray:
    """v_div_fmas_f32 = fma(S0, S1, S2), and where VCC is set the one-sided scaling of div_scale is
    undone inside the same rounding: x2^64 when the quotient estimate S2 is large (only the
    denominator was scaled up), x2^-64 when it is small (the numerator scaled up, or the denominator
    down)."""
    big = _exponent(np.asarray(s2, np.float32)) >= 127
    scale = np.where(vcc, np.where(big, 2.0**64, 2.0**-64), 1.0)
    return fma_f32(s0, s1, s2, scale)


def div_fixup_f32(q: np.ndarray, den: np.ndarray, num: np.ndarray) -> np.ndarray:
    """v_div_fixup_f32 (S0 = quotient, S1 = denominator, S2 = numerator): the special cases of IEEE
    division, first match wins: NaN operand -> quiet NaN; 0/0 and Inf/Inf -> NaN; x/0 and Inf/x ->
    signed Inf; x/Inf and 0/x -> signed 0; exp(num) - exp(den) < -150 -> signed 0 (underflow); a
    quotient with exponent field 255 (it overflowed) -> signed Inf; else |S0| with the sign of
    num/den."""
    q = np.asarray(q, np.float32)
    den = np.asarray(den, np.float32)
    num = np.asarray(num, np.float32)
    neg = np.signbit(den) ^ np.signbit(num)
    en, ed, eq = _exponent(num), _exponent(den), _exponent(q)
    # Fast path: no special operand (exponent field 0 with a zero, or 255) and no over/underflow.
    if ((en > 0) & (en < 255) & (ed > 0) & (ed < 255) & (eq < 255) & (en - ed >= -150)).all():
        fast: np.ndarray = np.where(neg, -np.abs(q), np.abs(q)).astype(np.float32)
        return fast
    inf = np.where(neg, -np.inf, np.inf).astype(np.float32)
    zero = np.where(neg, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
    out = np.where(neg, -np.abs(q), np.abs(q)).astype(np.float32)
    cases = (
        (np.isnan(num), num + np.float32(0)),
        (np.isnan(den), den + np.float32(0)),
        (((den == 0) & (num == 0)) | (np.isinf(den) & np.isinf(num)), np.float32(np.nan)),
        ((den == 0) | np.isinf(num), inf),
        (np.isinf(den) | (num == 0), zero),
        (_exponent(num) - _exponent(den) < -150, zero),
        (_exponent(q) == 255, inf),
    )
    done = np.zeros(np.shape(out), dtype=bool)
    for cond, val in cases:
        c = cond & ~done
        out = np.where(c, val, out)
        done = done | c
    fixed: np.ndarray = out.astype(np.float32)
    return fixed


def bf16_to_f32(h: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16 / uint32 low halves) -> fp32, exact."""
    return (np.asarray(h, np.uint32) << 16).view(np.float32)


def mfma_f32_16x16x16_bf16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A·B + C for one wave64 of v_mfma_f32_16x16x16_bf16.

    a, b: [64, 2] uint32 (each lane's two VGPRs = 4 bf16, element e in bits 16(e%2).. of register e//2);
    c: [64, 4] float32. Lane l = 16g + i holds A[i][4g + e], B[4g + e][i] and D[4g + r][i] in register r
    (CDNA3 ISA, matrix core operand layouts). Summation model: every bf16 product is exact in fp64,
    the 16 products and C are summed in fp64 and rounded once to fp32 (hardware sums in a different
    order with its own internal precision; the two differ by fp32 rounding, which the ULP contract
    covers)."""
    fa = bf16_to_f32(np.ascontiguousarray(a, dtype=np.uint32).view(np.uint16)).astype(np.float64)  # [64, 4]
    fb = bf16_to_f32(np.ascontiguousarray(b, dtype=np.uint32).view(np.uint16)).astype(np.float64)
    # A[i][k]: lane 16g + i, e = k - 4g  ->  fa.reshape(g, i, e) -> A[i, 4g + e]
    am = fa.reshape(4, 16, 4).transpose(1, 0, 2).reshape(16, 16)
    # B[k][j]: lane 16g + j, e  ->  B[4g + e, j]
    bm = fb.reshape(4, 16, 4).transpose(0, 2, 1).reshape(16, 16)
    # C/D[r_row][j]: lane 16g + j, register r -> row 4g + r
    cm = np.asarray(c, np.float32).astype(np.float64).reshape(4, 16, 4).transpose(0, 2, 1).reshape(16, 16)
    with np.errstate(invalid="ignore", over="ignore"):
        dm = am @ bm + cm
        # matmul over Inf operands can produce NaN from 0*Inf exactly like the hardware's IEEE products,
        # and Inf-Inf -> NaN; fp64 overflow cannot happen for bf16 products.
        d = dm.reshape(4, 4, 16).transpose(0, 2, 1).reshape(64, 4).astype(np.float32)
    return d


def mfma_f32_32x32x8_bf16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A·B + C for one wave64 of v_mfma_f32_32x32x8_bf16 (one 32x32 block, cbsz = abid = blgp = 0).

    a, b: [64, 2] uint32 (4 bf16 per lane, as for 16x16x16); c: [64, 16] float32. Lane l = 32g + i
    holds A[i][4g + e] and B[4g + e][i]; register r of lane 32g + j holds D[8(r // 4) + 4g + r % 4][j]
    (CDNA3 ISA matrix operand layout, as AMD's matrix instruction calculator prints it). Summation
    model as mfma_f32_16x16x16_bf16: exact products, one fp64 sum with C, one rounding to fp32."""
    fa = bf16_to_f32(np.ascontiguousarray(a, dtype=np.uint32).view(np.uint16)).astype(np.float64)  # [64, 4]
    fb = bf16_to_f32(np.ascontiguousarray(b, dtype=np.uint32).view(np.uint16)).astype(np.float64)
    am = fa.reshape(2, 32, 4).transpose(1, 0, 2).reshape(32, 8)  # A[i, 4g + e]
    bm = fb.reshape(2, 32, 4).transpose(0, 2, 1).reshape(8, 32)  # B[4g + e, j]
    # c[32g + j, 4rb + rr] -> row 8rb + 4g + rr, column j
    cm = (
        np.asarray(c, np.float32)
        .astype(np.float64)
        .reshape(2, 32, 4, 4)
        .transpose(2, 0, 3, 1)
        .reshape(32, 32)
    )
    with np.errstate(invalid="ignore", over="ignore"):
        dm = am @ bm + cm
    return dm.reshape(4, 2, 4, 32).transpose(1, 3, 0, 2).reshape(64, 16).astype(np.float32)


def log2_f32(x: np.ndarray) -> np.ndarray:
    """v_log_f32: log2(x), 1 ULP in the ISA; modelled as the correctly rounded log2 with denormal inputs
    read as signed 0: log2(±0) = -inf, log2(x < 0) = NaN, log2(+inf) = +inf, NaN stays NaN."""
    x = flush_denorm(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(x.astype(np.float64)).astype(np.float32)


# Register-major form of the same operation, for the emulator's hot path: gathers through fixed
# index tables instead of transposes. Operand registers as the register file holds them:
# a, b [2, 64] uint32 (viewed as [2, 128] bf16: lane l's element e at [e // 2, 2 l + e % 2]),
# c and the result [4, 64] float32 (register r, lane l).
with np.errstate(invalid="ignore"):
    _BF16_F64 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)
_i, _k = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
# A[i][k], k = 4g + e, from lane 16g + i; B[k][j], k = 4g + e, from lane 16g + j.
_A_IDX = ((_k % 4) // 2) * 128 + 2 * (16 * (_k // 4) + _i) + (_k % 4) % 2
_B_IDX = ((_i % 4) // 2) * 128 + 2 * (16 * (_i // 4) + _k) + (_i % 4) % 2  # rows k = _i, cols j = _k
# C/D[row][j] in register row % 4 of lane 16 (row // 4) + j.
_C_IDX = (_i % 4) * 64 + 16 * (_i // 4) + _k
_r, _l = np.meshgrid(np.arange(4), np.arange(64), indexing="ij")
_D_IDX = (4 * (_l // 16) + _r) * 16 + _l % 16


def mfma_16x16x16_bf16_regs(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """mfma_f32_16x16x16_bf16 on register-major operands (see above); the same summation model."""
    fa = _BF16_F64[np.ascontiguousarray(a).view(np.uint16).ravel()]
    fb = _BF16_F64[np.ascontiguousarray(b).view(np.uint16).ravel()]
    cm = np.asarray(c, np.float32).ravel()[_C_IDX].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        dm = fa[_A_IDX] @ fb[_B_IDX] + cm
    d: np.ndarray = dm.ravel()[_D_IDX].astype(np.float32)
    return d
