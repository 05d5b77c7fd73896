"""Instruction semantics on hand-computed cases, run as real gfx942 code through the emulator."""

from __future__ import annotations

import numpy as np
import pytest
from emu_asm import PROLOGUE, lane_addr


def f32(x: object) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def test_exec_masking_saveexec_and_cndmask(asm_kernel):
    """Lanes 0..9 take the branch body; the others keep their old value; v_cndmask picks by VCC."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_mov_b32 v10, 7
  v_cmp_gt_u32 vcc, 10, v0
  s_and_saveexec_b64 s[20:21], vcc
  s_cbranch_execz .Lskip
  v_mov_b32 v10, 100
.Lskip:
  s_or_b64 exec, exec, s[20:21]
  v_cndmask_b32 v11, 1, 2, vcc
  v_add_u32 v10, v10, v11
  global_store_dword v[2:3], v10, off
  s_waitcnt vmcnt(0)
""",
    )
    out = np.zeros(64, np.uint32)
    hazards, _ = k(out)
    assert not hazards
    assert out[:10].tolist() == [102] * 10
    assert out[10:].tolist() == [8] * 54


def test_mfma_16x16x16_bf16_lane_layout(asm_kernel):
    """Lane l = 16g + i holds A[i][4g+e], B[4g+e][i], C/D[4g+r][i] (CDNA3 ISA operand tables).
    Integer-valued bf16 inputs, so every product and sum is exact and hand-checkable."""
    k = asm_kernel(
        PROLOGUE
        + lane_addr(1, "v[12:13]")
        + lane_addr(2, "v[14:15]")
        + """
  v_mov_b32 v11, 0
  v_lshlrev_b32 v10, 1, v6
  v_lshl_add_u64 v[16:17], s[4:5], 0, v[10:11]
  v_lshl_add_u64 v[18:19], s[6:7], 0, v[10:11]
  v_lshlrev_b32 v10, 2, v6
  v_lshl_add_u64 v[20:21], s[8:9], 0, v[10:11]
  v_lshl_add_u64 v[22:23], s[10:11], 0, v[10:11]
  global_load_dwordx2 v[24:25], v[16:17], off
  global_load_dwordx2 v[26:27], v[18:19], off
  global_load_dwordx4 v[28:31], v[20:21], off
  s_waitcnt vmcnt(0)
  s_nop 1
  v_mfma_f32_16x16x16_bf16 v[28:31], v[24:25], v[26:27], v[28:31]
  s_nop 7
  global_store_dwordx4 v[22:23], v[28:31], off
  s_waitcnt vmcnt(0)
"""
    )
    rng = np.random.default_rng(1)
    a = rng.integers(-8, 9, (16, 16)).astype(np.float32)
    b = rng.integers(-8, 9, (16, 16)).astype(np.float32)
    c = rng.integers(-100, 100, (16, 16)).astype(np.float32)

    def bf16(x: np.ndarray) -> np.ndarray:
        return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    lanes_a = np.zeros((64, 4), np.uint16)
    lanes_b = np.zeros((64, 4), np.uint16)
    lanes_c = np.zeros((64, 4), np.float32)
    for g in range(4):
        for i in range(16):
            for e in range(4):
                lanes_a[16 * g + i, e] = bf16(a[i, 4 * g + e])
                lanes_b[16 * g + i, e] = bf16(b[4 * g + e, i])
                lanes_c[16 * g + i, e] = c[4 * g + e, i]
    out = np.zeros((64, 4), np.float32)
    hazards, _ = k(lanes_a, lanes_b, lanes_c, out)
    assert not hazards
    d = a @ b + c
    # Hand-picked element: lane 17 = (g 1, i 1), register 2 -> D[6][1].
    assert out[17, 2] == d[6, 1] == sum(a[6, kk] * b[kk, 1] for kk in range(16)) + c[6, 1]
    for g in range(4):
        for i in range(16):
            for r in range(4):
                assert out[16 * g + i, r] == d[4 * g + r, i]


def test_vop_integer_ops(asm_kernel):
    """v_perm_b32, v_bfe_u32, v_mad_u64_u32 (carry out), v_add3_u32, v_lshl_or_b32, s_mul_hi_u32."""
    k = asm_kernel(
        PROLOGUE
        + lane_addr(1, "v[12:13]")
        + """
  s_mov_b32 s20, 0x5040100
  s_mov_b32 s21, 0x11223344
  s_mov_b32 s22, 0xAABBCCDD
  v_mov_b32 v10, s22
  v_mov_b32 v11, s21
  v_perm_b32 v14, v11, v10, s20
  global_store_dword v[2:3], v14, off offset:0
  v_bfe_u32 v15, v0, 2, 3
  v_mov_b32 v16, 0xFFFFFFFF
  v_mov_b32 v18, 5
  v_mov_b32 v19, 0
  v_mad_u64_u32 v[20:21], s[24:25], v16, v16, v[18:19]
  v_add3_u32 v22, v0, v0, 7
  v_lshl_or_b32 v23, v0, 4, 3
  s_mov_b32 s26, 0x80000001
  s_mul_hi_u32 s27, s26, 6
  v_mov_b32 v24, s27
  v_mov_b32 v25, s24
  global_store_dword v[12:13], v15, off
  s_waitcnt vmcnt(0)
  s_mov_b64 exec, 1
  v_add_u32 v12, 256, v12
  global_store_dwordx4 v[12:13], v[20:23], off
  v_add_u32 v12, 256, v12
  global_store_dwordx2 v[12:13], v[24:25], off
  s_waitcnt vmcnt(0)
"""
    )
    out0 = np.zeros(64, np.uint32)
    out1 = np.zeros(64 + 64 * 4 + 64 * 2, np.uint32)
    hazards, _ = k(out0, out1)
    assert not hazards
    # perm with selector 0x05040100: bytes {S1.b0, S1.b1, S0.b0, S0.b1} = 0x3344CCDD
    assert out0[0] == 0x3344CCDD
    lane = np.arange(64)
    assert out1[:64].tolist() == ((lane >> 2) & 7).tolist()
    first = out1[64:68]  # lane 0 alone (exec = 1) stored v[20:23] at byte 256
    prod = 0xFFFFFFFF * 0xFFFFFFFF + 5
    assert int(first[0]) | (int(first[1]) << 32) == prod & (2**64 - 1)
    assert first[2] == 7 and first[3] == 3
    assert out1[68:128].tolist() == [0] * 60  # lanes 1..63 were off
    assert out1[128] == (0x80000001 * 6) >> 32
    assert out1[129] == 0  # no carry out of 64 bits


def test_transcendental_compare_packed_and_lane_ops(asm_kernel):
    """v_exp_f32, v_rcp_f32, v_max3_f32 (maxNum), v_cmp_neq_f32 (unordered), v_pk_mul_f32 with
    op_sel_hi:[0,1] (src0's low half for both halves), ds_bpermute_b32, v_readfirstlane_b32 under a
    partial EXEC, v_cvt_f32_u32 / v_cvt_u32_f32."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_lshlrev_b32 v8, 4, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[12:13], s[6:7], 0, v[8:9]
  v_lshl_add_u64 v[14:15], s[8:9], 0, v[8:9]
  global_load_dword v10, v[2:3], off
  s_waitcnt vmcnt(0)
  v_exp_f32 v16, v10
  v_rcp_f32 v17, v10
  v_max3_f32 v18, v10, -1.0, 0.5
  v_cmp_neq_f32 vcc, v10, v10
  v_cndmask_b32 v19, 0, 1, vcc
  v_mov_b32 v20, 2.0
  v_mov_b32 v21, 4.0
  v_mov_b32 v22, v10
  v_mov_b32 v23, v10
  v_pk_mul_f32 v[22:23], v[20:21], v[22:23] op_sel_hi:[0,1]
  v_xor_b32 v24, 16, v0
  v_lshlrev_b32 v24, 2, v24
  ds_bpermute_b32 v25, v24, v0
  s_waitcnt lgkmcnt(0)
  v_cvt_f32_u32 v26, v0
  v_cvt_u32_f32 v27, v10
  s_mov_b64 exec, 0xff00
  v_readfirstlane_b32 s20, v0
  s_mov_b64 exec, -1
  v_mov_b32 v28, s20
  global_store_dwordx4 v[12:13], v[16:19], off
  global_store_dwordx4 v[14:15], v[22:25], off
  global_store_dwordx4 v[14:15], v[26:29], off offset:1024
  s_waitcnt vmcnt(0)
"""
    )
    x = np.zeros(64, np.float32)
    x[:8] = [0.0, 1.0, -1.0, -np.inf, np.nan, 3.0, 1e-40, 2.5]
    x[8:] = np.arange(8, 64)
    a = np.zeros((64, 4), np.float32)
    b = np.zeros((128, 4), np.uint32)
    hazards, _ = k(x, a, b)
    assert not hazards
    ex, rc, mx, neq = a[:, 0], a[:, 1], a[:, 2], a[:, 3].view(np.uint32)
    assert ex[:4].tolist() == [1.0, 2.0, 0.5, 0.0] and np.isnan(ex[4]) and ex[6] == 1.0
    assert rc[0] == np.inf and rc[1] == 1.0 and rc[2] == -1.0 and rc[5] == np.float32(1 / 3)
    assert rc[3] == 0.0 and np.signbit(rc[3])  # 1 / -Inf = -0
    assert mx[2] == 0.5 and mx[3] == 0.5 and mx[4] == 0.5 and mx[5] == 3.0  # NaN loses to numbers
    assert neq.tolist() == [1 if i == 4 else 0 for i in range(64)]
    pk_lo, pk_hi = b[:64, 0].view(np.float32), b[:64, 1].view(np.float32)
    assert pk_lo[5] == 6.0 and pk_hi[5] == 6.0  # 2.0 (src0's low half) times x in both halves
    assert b[:64, 3].tolist() == [lane ^ 16 for lane in range(64)]  # ds_bpermute from lane ^ 16
    cvt_f, cvt_u, first = b[64:, 0].view(np.float32), b[64:, 1], b[64:, 2]
    assert cvt_f.tolist() == [float(i) for i in range(64)]
    assert cvt_u[:8].tolist() == [0, 1, 0, 0, 0, 3, 0, 2] and cvt_u[63] == 63
    assert first.tolist() == [8] * 64  # first active lane of exec 0xff00


def test_scalar_carry_chain_and_selects(asm_kernel):
    """s_add_u32/s_addc_u32 (64-bit add through SCC), s_cselect_b32, s_bitset1_b32, s_lshl_b64,
    s_andn2_b64, s_movk_i32 (sign-extended), s_cmp_lt_u32."""
    k = asm_kernel(
        PROLOGUE
        + """
  s_mov_b32 s20, 0xffffffff
  s_mov_b32 s21, 1
  s_add_u32 s22, s20, 2
  s_addc_u32 s23, s21, 0
  s_cmp_lt_u32 s21, 2
  s_cselect_b32 s24, 11, 22
  s_mov_b32 s25, 0
  s_bitset1_b32 s25, 5
  s_mov_b64 s[26:27], 3
  s_lshl_b64 s[26:27], s[26:27], 31
  s_mov_b64 s[28:29], -1
  s_andn2_b64 s[28:29], s[28:29], s[26:27]
  s_movk_i32 s30, 0x8000
  s_mov_b32 s31, 0
  v_mov_b32 v16, s22
  v_mov_b32 v17, s23
  v_mov_b32 v18, s24
  v_mov_b32 v19, s25
  v_mov_b32 v20, s26
  v_mov_b32 v21, s27
  v_mov_b32 v22, s28
  v_mov_b32 v23, s30
  v_mov_b32 v10, 0
  v_mov_b32 v11, 0
  v_mov_b32 v12, 16
  v_mov_b32 v13, 0
  v_lshl_add_u64 v[24:25], s[4:5], 0, v[10:11]
  v_lshl_add_u64 v[26:27], s[4:5], 0, v[12:13]
  s_mov_b64 exec, 1
  global_store_dwordx4 v[24:25], v[16:19], off
  global_store_dwordx4 v[26:27], v[20:23], off
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros(8, np.uint32)
    assert not k(out)[0]
    assert out[0] == 1 and out[1] == 2  # 0x1_ffffffff + 2 = 0x2_00000001
    assert out[2] == 11 and out[3] == 32
    assert (int(out[5]) << 32 | int(out[4])) == 3 << 31
    assert out[6] == 0xFFFFFFFF & ~(3 << 31)
    assert out[7] == 0xFFFF8000


U32 = np.uint32
F32 = np.float32
_RNG = np.random.default_rng(11)
_X = _RNG.integers(0, 2**32, 64, dtype=np.uint64).astype(U32)
_Y = _RNG.integers(0, 2**32, 64, dtype=np.uint64).astype(U32)
_FX = (_RNG.standard_normal(64) * 100).astype(F32)
_FY = (_RNG.standard_normal(64) * 100).astype(F32)


def _f(x: np.ndarray) -> np.ndarray:
    return x.view(F32)


# (instruction with v10 = x, v11 = y, result in v12 (v12 = 1.5 beforehand), x, y, expected v12)
VALU_CASES = [
    ("v_add_f32 v12, v10, v11", _FX, _FY, _FX + _FY),
    ("v_sub_f32 v12, v10, v11", _FX, _FY, _FX - _FY),
    ("v_mul_f32 v12, v10, v11", _FX, _FY, _FX * _FY),
    ("v_max_f32 v12, v10, v11", _FX, _FY, np.maximum(_FX, _FY)),
    ("v_fmac_f32 v12, v10, v11", _FX, _FY, (_FX.astype(np.float64) * _FY + 1.5).astype(F32)),
    ("v_lshrrev_b32 v12, v10, v11", _X, _Y, _Y >> (_X & 31)),
    ("v_lshlrev_b32 v12, v10, v11", _X, _Y, _Y << (_X & 31)),
    ("v_and_b32 v12, v10, v11", _X, _Y, _X & _Y),
    ("v_or_b32 v12, v10, v11", _X, _Y, _X | _Y),
    ("v_xor_b32 v12, v10, v11", _X, _Y, _X ^ _Y),
    ("v_add_u32 v12, v10, v11", _X, _Y, _X + _Y),
    ("v_mul_lo_u32 v12, v10, v11", _X, _Y, _X * _Y),
    ("v_and_or_b32 v12, v10, v11, 5", _X, _Y, (_X & _Y) | 5),
    ("v_lshl_add_u32 v12, v10, 3, v11", _X, _Y, (_X << 3) + _Y),
    ("v_bfe_u32 v12, v10, 7, 9", _X, _Y, (_X >> 7) & 511),
    ("v_not_b32 v12, v10", _X, _Y, ~_X),
]


@pytest.mark.parametrize(("line", "x", "y", "want"), VALU_CASES, ids=[c[0].split()[0] for c in VALU_CASES])
def test_valu_binary_ops(asm_kernel, line, x, y, want):
    """Each VALU op on 64 random lanes against numpy. The v_fmac expectation is rounded from fp64;
    for this fixed seed no lane sits on a double-rounding boundary (fp.fma_f32 itself is checked
    against exact rationals in test_fp.py)."""
    k = asm_kernel(
        PROLOGUE
        + lane_addr(1, "v[14:15]")
        + lane_addr(2, "v[16:17]")
        + f"""
  global_load_dword v10, v[2:3], off
  global_load_dword v11, v[14:15], off
  v_mov_b32 v12, 1.5
  s_waitcnt vmcnt(0)
  {line}
  global_store_dword v[16:17], v12, off
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros(64, x.dtype)
    assert not k(x.copy(), y.copy(), out)[0]
    with np.errstate(over="ignore"):
        assert (out.view(U32) == np.asarray(want, dtype=x.dtype).view(U32)).all()


def test_branches_on_scc_and_vcc(asm_kernel):
    """s_cbranch_scc0/scc1/vccz/vccnz and s_branch take or skip exactly as their condition says."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_mov_b32 v10, 0
  s_cmp_eq_u32 1, 1
  s_cbranch_scc0 .La
  v_or_b32 v10, 1, v10
.La:
  s_cmp_gt_u32 1, 2
  s_cbranch_scc1 .Lb
  v_or_b32 v10, 2, v10
.Lb:
  v_cmp_gt_u32 vcc, 0, v0
  s_cbranch_vccnz .Lc
  v_or_b32 v10, 4, v10
.Lc:
  v_cmp_gt_u32 vcc, 1, v0
  s_cbranch_vccz .Ld
  v_or_b32 v10, 8, v10
  s_branch .Le
.Ld:
  v_or_b32 v10, 16, v10
.Le:
  global_store_dword v[2:3], v10, off
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros(64, U32)
    assert not k(out)[0]
    assert out.tolist() == [1 | 2 | 4 | 8] * 64


def test_carry_ops_write_and_read_their_lane_masks(asm_kernel):
    """v_add_co_u32 (e32: carry to VCC; e64: to an SGPR pair), v_addc_co_u32 (carry in), v_sub_co_u32 /
    v_subrev_co_u32 (borrow out) and v_subb_co_u32 (borrow in): a 64-bit add and subtract of
    lane-dependent values, checked against Python integers."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_lshlrev_b32 v8, 4, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[30:31], s[4:5], 0, v[8:9]
  v_lshl_add_u64 v[32:33], s[6:7], 0, v[8:9]
  v_mov_b32 v20, 0xFFFFFFF0
  v_mov_b32 v21, 7
  v_add_co_u32_e32 v22, vcc, v20, v0
  v_addc_co_u32_e32 v23, vcc, 0, v21, vcc
  v_add_co_u32_e64 v24, s[20:21], v0, 3
  v_sub_co_u32_e64 v25, vcc, v0, 32
  v_subb_co_u32_e64 v26, vcc, v21, 0, vcc
  v_subrev_co_u32_e64 v27, s[22:23], v0, 40
  v_mov_b32 v28, s20
  v_mov_b32 v29, s23
  global_store_dwordx4 v[30:31], v[22:25], off
  global_store_dwordx4 v[32:33], v[26:29], off
  s_waitcnt vmcnt(0)
""",
    )
    out0 = np.zeros((64, 4), np.uint32)
    out1 = np.zeros((64, 4), np.uint32)
    hazards, _ = k(out0, out1)
    assert not hazards
    lane = np.arange(64, dtype=np.int64)
    total = (7 << 32) + 0xFFFFFFF0 + lane  # the 64-bit add
    assert out0[:, 0].tolist() == (total & 0xFFFFFFFF).tolist()
    assert out0[:, 1].tolist() == (total >> 32).tolist()  # 7, or 8 from lane 16 on
    assert out0[:, 2].tolist() == (lane + 3).tolist()
    assert out0[:, 3].tolist() == ((lane - 32) & 0xFFFFFFFF).tolist()
    assert out1[:, 0].tolist() == (7 - (lane < 32)).tolist()  # the borrow of lane - 32 taken
    assert out1[:, 1].tolist() == ((40 - lane) & 0xFFFFFFFF).tolist()
    assert out1[0, 2] == 0  # v0 + 3 never carries
    assert out1[0, 3] == 0xFFFFFE00  # 40 - v0 borrows in lanes 41..63: the high word's bits 9..31


def test_pk_fma_f32_neg_lo_and_neg_hi(asm_kernel):
    """neg_lo / neg_hi negate, per source, the operand of the low / the high result."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_mov_b32 v20, 2.0
  v_mov_b32 v21, 3.0
  v_mov_b32 v22, 4.0
  v_mov_b32 v23, 5.0
  v_mov_b32 v24, 0.5
  v_mov_b32 v25, 1.0
  v_pk_fma_f32 v[26:27], v[20:21], v[22:23], v[24:25] neg_lo:[1,0,0] neg_hi:[0,0,1]
  v_lshlrev_b32 v8, 3, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[30:31], s[4:5], 0, v[8:9]
  global_store_dwordx2 v[30:31], v[26:27], off
  s_waitcnt vmcnt(0)
""",
    )
    out = np.zeros((64, 2), np.float32)
    hazards, _ = k(out)
    assert not hazards
    assert out.tolist() == [[-2.0 * 4.0 + 0.5, 3.0 * 5.0 - 1.0]] * 64


def test_every_mnemonic_has_exactly_one_family() -> None:
    """The instruction table (isa.family): no exact mnemonic is also matched by a pattern family, and
    no two pattern families match the same sized form, so the order of registration decides nothing;
    a mnemonic outside the subset has no family (refused at load)."""
    from regress.emu import isa

    sized = [
        *(f"buffer_{op}_dword{n}" for op in ("load", "store") for n in ("", "x2", "x3", "x4")),
        *(f"global_{op}_dword{n}" for op in ("load", "store") for n in ("", "x2", "x3", "x4")),
        *(f"scratch_{op}_dword{n}" for op in ("load", "store") for n in ("", "x2", "x3", "x4")),
        *(f"s_load_dword{n}" for n in ("", "x2", "x4", "x8", "x16")),
        *(f"s_cmp_{rel}_{t}" for rel in ("lt", "le", "gt", "ge", "eq", "lg") for t in ("i32", "u32", "u64")),
        *(f"s_cmpk_{rel}_{t}" for rel in ("lt", "le", "gt", "ge", "eq", "lg") for t in ("i32", "u32")),
        "v_add_u32_sdwa",
        "v_cmp_eq_u32_sdwa",
    ]
    for name in [*isa._BY_NAME, *sized]:
        matches = [p.pattern for p, _ in isa._BY_PATTERN if p.fullmatch(name)]
        assert len(matches) + (name in isa._BY_NAME) == 1, (name, matches)
        assert isa.family_of(name) is not None
    for name in ("v_mfma_f32_4x4x4_16b_f16", "s_cmp_bitcmp0_b32", "global_load_dwordx5", "s_sleep"):
        assert isa.family_of(name) is None, name


def test_sopk_compares_bit_compare_not_and_u64_compares(asm_kernel):
    """s_cmpk_*_u32 (SIMM16 zero-extended) and _i32 (sign-extended), s_bitcmp0/1_b32, s_not_b32 (SCC
    = result != 0), v_cmp_eq/ne_u64 on a VGPR pair against an SGPR pair (all 64 bits): the key loop of
    step 13 compiles to them (docs/hip-gfx942.md)."""
    k = asm_kernel(
        PROLOGUE
        + """
  s_mov_b32 s20, 0x80
  s_cmpk_lt_u32 s20, 0x81
  s_cselect_b32 s21, 1, 0
  s_cmpk_gt_u32 s20, 0x7f
  s_cselect_b32 s22, 1, 0
  s_cmpk_lt_u32 s20, 0xffff
  s_cselect_b32 s23, 1, 0
  s_cmpk_lt_i32 s20, 0xffff
  s_cselect_b32 s24, 1, 0
  s_mov_b32 s25, 0x20
  s_bitcmp1_b32 s25, 5
  s_cselect_b32 s26, 1, 0
  s_bitcmp0_b32 s25, 5
  s_cselect_b32 s27, 1, 0
  s_not_b32 s28, 0x0000ffff
  s_cselect_b32 s29, 1, 0
  s_mov_b32 s30, 3
  s_mov_b32 s31, 7
  v_mov_b32 v12, 3
  v_cmp_gt_u32 vcc, 2, v0
  v_cndmask_b32 v13, 0, 7, vcc
  v_cmp_eq_u64 vcc, s[30:31], v[12:13]
  v_cndmask_b32 v14, 0, 1, vcc
  v_cmp_ne_u64 s[32:33], s[30:31], v[12:13]
  v_cndmask_b32 v15, 0, 1, s[32:33]
  v_mov_b32 v16, s21
  v_mov_b32 v17, s22
  v_mov_b32 v18, s23
  v_mov_b32 v19, s24
  v_mov_b32 v20, s26
  v_mov_b32 v21, s27
  v_mov_b32 v22, s28
  v_mov_b32 v23, s29
  v_lshlrev_b32 v8, 6, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[24:25], s[4:5], 0, v[8:9]
  global_store_dwordx4 v[24:25], v[16:19], off
  global_store_dwordx4 v[24:25], v[20:23], off offset:16
  global_store_dwordx2 v[24:25], v[14:15], off offset:32
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros((64, 16), np.uint32)
    assert not k(out)[0]
    # 0x80 < 0x81, 0x80 > 0x7f, 0x80 < 0xffff unsigned; as i32 0xffff is -1 and 0x80 < -1 is false.
    assert out[0, :4].tolist() == [1, 1, 1, 0]
    assert out[0, 4:6].tolist() == [1, 0]  # bit 5 of 0x20 is set
    assert out[0, 6:8].tolist() == [0xFFFF0000, 1]
    # lanes 0, 1 hold 0x7_00000003 == s[30:31]; the others 0x0_00000003
    assert out[:, 8].tolist() == [1, 1] + [0] * 62
    assert out[:, 9].tolist() == [0, 0] + [1] * 62


def test_xad_u32_xors_then_adds_modulo_2_32(asm_kernel):
    """v_xad_u32 D = (S0 ^ S1) + S2 (CDNA3 ISA, VOP3), wrapping at 2^32; an SGPR and a VGPR source."""
    k = asm_kernel(
        PROLOGUE
        + """
  s_mov_b32 s20, 0xf0
  v_mov_b32 v10, 0xfffffff0
  v_xad_u32 v11, s20, v0, v10
  global_store_dword v[2:3], v11, off
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros(64, np.uint32)
    assert not k(out)[0]
    lane = np.arange(64, dtype=np.uint64)
    assert out.tolist() == (((lane ^ 0xF0) + 0xFFFFFFF0) & 0xFFFFFFFF).tolist()


def test_add_u16_and_min_u16_take_low_halves_and_zero_the_high_half(asm_kernel):
    """v_add_u16 / v_min_u16 (VOP2): the sources' low 16 bits, the sum wrapping at 2^16, the result's
    high half zeroed (gfx9; LLVM GCNSubtarget::zeroesHigh16BitsOfDest); a literal and a VGPR source."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_or_b32 v10, 0xabcd7ff0, v0
  v_add_u16_e32 v11, 0x8080, v10
  v_min_u16_e32 v12, 0x7ffa, v10
  v_or_b32 v14, v11, v12
  v_lshrrev_b32 v14, 16, v14
  v_lshlrev_b32 v12, 16, v12
  v_or_b32 v11, v11, v12
  v_xor_b32 v11, v11, v14
  global_store_dword v[2:3], v11, off
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros(64, np.uint32)
    assert not k(out)[0]
    lo = 0x7FF0 | np.arange(64, dtype=np.uint64)  # the low half of v10 per lane
    add = (lo + 0x8080) & 0xFFFF
    mn = np.minimum(lo, 0x7FFA)
    assert out.tolist() == (add | (mn << 16)).tolist()  # and both high halves were 0 (v14)
