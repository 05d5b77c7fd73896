"""The instructions and modes AITER v3's hand-written objects use, on hand-computed cases (CDNA3 ISA
semantics), run as real gfx942 code through the emulator."""

from __future__ import annotations

import numpy as np
from emu_asm import PROLOGUE


def bf16(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_mfma_32x32x8_bf16_lane_layout_and_zero_c(asm_kernel):
    """Lane 32g + i holds A[i][4g+e] and B[4g+e][i]; register r of lane 32g + j holds
    D[8(r//4) + 4g + r%4][j] (AMD's matrix instruction calculator). C as the inline 0 starts a fresh
    accumulator. Integer inputs: every product and sum is exact."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_mov_b32 v11, 0
  v_lshlrev_b32 v10, 1, v6
  v_lshl_add_u64 v[16:17], s[4:5], 0, v[10:11]
  v_lshl_add_u64 v[18:19], s[6:7], 0, v[10:11]
  v_lshlrev_b32 v10, 4, v6
  v_lshl_add_u64 v[20:21], s[8:9], 0, v[10:11]
  v_lshl_add_u64 v[22:23], s[10:11], 0, v[10:11]
  global_load_dwordx2 v[24:25], v[16:17], off
  global_load_dwordx2 v[26:27], v[18:19], off
  global_load_dwordx4 v[32:35], v[20:21], off
  global_load_dwordx4 v[36:39], v[20:21], off offset:16
  global_load_dwordx4 v[40:43], v[20:21], off offset:32
  global_load_dwordx4 v[44:47], v[20:21], off offset:48
  s_waitcnt vmcnt(0)
  v_mfma_f32_32x32x8_bf16 v[32:47], v[24:25], v[26:27], v[32:47]
  v_mfma_f32_32x32x8_bf16 v[48:63], v[24:25], v[26:27], 0
  s_nop 10
  global_store_dwordx4 v[22:23], v[32:35], off
  global_store_dwordx4 v[22:23], v[36:39], off offset:16
  global_store_dwordx4 v[22:23], v[40:43], off offset:32
  global_store_dwordx4 v[22:23], v[44:47], off offset:48
  global_store_dwordx4 v[20:21], v[48:51], off
  global_store_dwordx4 v[20:21], v[52:55], off offset:16
  global_store_dwordx4 v[20:21], v[56:59], off offset:32
  global_store_dwordx4 v[20:21], v[60:63], off offset:48
  s_waitcnt vmcnt(0)
"""
    )
    rng = np.random.default_rng(3)
    a = rng.integers(-8, 9, (32, 8)).astype(np.float32)
    b = rng.integers(-8, 9, (8, 32)).astype(np.float32)
    c = rng.integers(-100, 100, (32, 32)).astype(np.float32)
    lanes_a = np.zeros((64, 4), np.uint16)
    lanes_b = np.zeros((64, 4), np.uint16)
    lanes_c = np.zeros((64, 16), np.float32)
    for g in range(2):
        for i in range(32):
            for e in range(4):
                lanes_a[32 * g + i, e] = bf16(a[i, 4 * g + e])
                lanes_b[32 * g + i, e] = bf16(b[4 * g + e, i])
            for r in range(16):
                lanes_c[32 * g + i, r] = c[8 * (r // 4) + 4 * g + r % 4, i]
    out = np.zeros((64, 16), np.float32)
    hazards, _ = k(lanes_a, lanes_b, lanes_c, out)
    assert not hazards
    d = a @ b + c
    # Hand-picked: lane 37 = (g 1, j 5), register 6 -> row 8 + 4 + 2 = 14, column 5.
    assert out[37, 6] == d[14, 5] == sum(a[14, kk] * b[kk, 5] for kk in range(8)) + c[14, 5]
    fresh = lanes_c  # the kernel overwrote buffer 2 with A·B + 0
    for g in range(2):
        for j in range(32):
            for r in range(16):
                row = 8 * (r // 4) + 4 * g + r % 4
                assert out[32 * g + j, r] == d[row, j]
                assert fresh[32 * g + j, r] == d[row, j] - c[row, j]


def test_mfma_32x32_result_needs_eleven_wait_states(asm_kernel):
    """The 8-pass MFMA's result read by a VALU needs passes + 3 = 11 wait states (LLVM's gfx940
    hazard recognizer); 10 is reported."""
    body = (
        PROLOGUE
        + """
  v_mov_b32 v24, 0
  v_mov_b32 v25, 0
  s_nop 1
  v_mfma_f32_32x32x8_bf16 v[32:47], v[24:25], v[24:25], 0
  s_nop {n}
  v_mov_b32 v10, v32
"""
    )
    hazards, _ = asm_kernel(body.format(n=9))(strict=False)
    assert {h.kind for h in hazards} == {"mfma"} and "needs 11" in hazards[0].detail
    hazards, _ = asm_kernel(body.format(n=10))()
    assert not hazards


def test_integer_compare_and_scalar_ops(asm_kernel):
    """v_cmp_u_f32 (unordered), v_cmp_lt_i32 (signed), v_mul_i32_i24 (low 24 bits, signed),
    v_mul_hi_u32, v_sub_i32 / v_subrev_u32 (wrapping), v_log_f32, s_addk_i32 (sign-extended
    immediate, SCC = signed overflow), v_nop and s_setprio (no effect on results)."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_lshlrev_b32 v8, 6, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[12:13], s[6:7], 0, v[8:9]
  global_load_dword v10, v[2:3], off
  s_waitcnt vmcnt(0)
  s_setprio 3
  v_nop
  v_cmp_u_f32_e64 s[20:21], v10, v10
  v_cndmask_b32_e64 v16, 0, 1, s[20:21]
  v_cmp_lt_i32_e64 s[22:23], 0, v10
  v_cndmask_b32_e64 v17, 0, 1, s[22:23]
  v_mul_i32_i24_e32 v18, -3, v10
  v_mul_hi_u32 v19, v10, v10
  s_mov_b32 s24, 10
  v_sub_i32 v20, s24, v10
  v_subrev_u32_e32 v21, s24, v10
  v_log_f32_e32 v22, v10
  s_mov_b32 s25, 5
  s_addk_i32 s25, 0x8000
  s_cselect_b32 s26, 1, 0
  s_mov_b32 s27, 0x7fffffff
  s_addk_i32 s27, 1
  s_cselect_b32 s28, 1, 0
  v_mov_b32 v23, s25
  v_mov_b32 v24, s26
  v_mov_b32 v25, s27
  v_mov_b32 v26, s28
  s_setprio 0
  global_store_dwordx4 v[12:13], v[16:19], off
  global_store_dwordx4 v[12:13], v[20:23], off offset:16
  global_store_dwordx2 v[12:13], v[24:25], off offset:32
  global_store_dword v[12:13], v26, off offset:40
  s_waitcnt vmcnt(0)
"""
    )
    x = np.zeros(64, np.uint32)
    x[:8] = [0x7FC00000, 0x3F800000, 0xFFFFFFFB, 0x80000000, 0x00FFFFFF, 0x40800000, 0x00000001, 0xFF800000]
    x[8:] = np.arange(8, 64)
    out = np.zeros((64, 16), np.uint32)
    hazards, _ = k(x, out)
    assert not hazards
    un, lt, m24, mhi = out[:, 0], out[:, 1], out[:, 2], out[:, 3]
    assert un[:8].tolist() == [1, 0, 1, 0, 0, 0, 0, 0]  # the NaNs (0xFFFFFFFB is one too); -inf is ordered
    assert lt[:8].tolist() == [1, 1, 0, 0, 1, 1, 1, 0]  # 0xFFFFFFFB = -5, 0x80000000 and -inf bits < 0
    # i24(0x3F800000) = 0x800000 -> -2^23; i24(0x00FFFFFF) = -1; i24(-5) = -5
    assert m24[1] == (-3 * -(2**23)) & 0xFFFFFFFF and m24[4] == 3 and m24[2] == 15
    assert mhi[3] == (0x80000000 * 0x80000000) >> 32 and mhi[2] == (0xFFFFFFFB**2) >> 32
    sub, subrev, log2 = out[:, 4], out[:, 5], out[:, 6].view(np.float32)
    assert sub[2] == 15 and sub[10] == 0 and sub[11] == 0xFFFFFFFF  # 10 - x, wrapping
    assert subrev[2] == 0xFFFFFFF1 and subrev[11] == 1  # x - 10
    assert log2[1] == 0.0 and log2[5] == 2.0  # log2(1), log2(4)
    assert log2[6] == -np.inf  # a denormal input reads as 0
    assert np.isnan(log2[2]) and np.isnan(log2[0])  # negative (as float: NaN), NaN
    assert out[0, 7] == (5 - 32768) & 0xFFFFFFFF  # s_addk_i32 sign-extends 0x8000
    assert out[0, 8] == 0 and out[0, 9] == 0x80000000 and out[0, 10] == 1  # no overflow, then overflow


def test_ds_permute_forward_highest_lane_wins(asm_kernel):
    """ds_permute_b32: lane l sends src[l] to lane addr[l] / 4; lanes 2k and 2k + 1 both send to k
    and the higher wins; lanes nobody sends to read 0."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_lshrrev_b32 v10, 1, v0
  v_lshlrev_b32 v10, 2, v10
  v_add_u32 v11, 100, v0
  ds_permute_b32 v12, v10, v11
  s_waitcnt lgkmcnt(0)
  global_store_dword v[2:3], v12, off
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros(64, np.uint32)
    hazards, _ = k(out)
    assert not hazards
    assert out[:32].tolist() == [100 + 2 * i + 1 for i in range(32)]
    assert out[32:].tolist() == [0] * 32


BUFFER_RSRC = """
  s_mov_b32 s20, s6
  s_and_b32 s21, s7, 0xffff
  s_mov_b32 s22, {records}
  s_mov_b32 s23, 0x20000
"""


def test_buffer_loads_range_checked_with_soffset(asm_kernel):
    """Raw buffer loads: vaddr + offset + soffset against num_records (162 bytes = 40 dwords and a
    half), soffset counted (CDNA3): out-of-range dwords read 0. The `lds` form writes M0 + 4·lane."""
    k = asm_kernel(
        PROLOGUE
        + BUFFER_RSRC.format(records=162)
        + """
  v_lshlrev_b32 v8, 4, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[12:13], s[8:9], 0, v[8:9]
  s_mov_b32 s24, 8
  buffer_load_dword v16, v6, s[20:23], 0 offen
  buffer_load_dword v17, v6, s[20:23], s24 offen
  buffer_load_dword v18, v6, s[20:23], 0 offen offset:4
  s_mov_b32 m0, 256
  buffer_load_dword v6, s[20:23], 0 offen lds
  s_waitcnt vmcnt(0)
  ds_read_b32 v19, v6 offset:256
  s_waitcnt lgkmcnt(0)
  global_store_dwordx4 v[12:13], v[16:19], off
  s_waitcnt vmcnt(0)
""",
        lds=512,
    )
    data = np.arange(1000, 1064, dtype=np.uint32)
    out = np.zeros((64, 4), np.uint32)
    hazards, _ = k(np.zeros(4, np.uint32), data, out)
    assert not hazards
    lane = np.arange(64)
    assert out[:, 0].tolist() == np.where(lane < 40, 1000 + lane, 0).tolist()
    assert out[:, 1].tolist() == np.where(lane < 38, 1002 + lane, 0).tolist()  # soffset 8 counted
    assert out[:, 2].tolist() == np.where(lane < 39, 1001 + lane, 0).tolist()
    assert out[:, 3].tolist() == np.where(lane < 40, 1000 + lane, 0).tolist()  # via LDS


def test_buffer_store_dwordx4_drops_out_of_range_dwords(asm_kernel):
    """num_records 168: lanes 0-9 store all four dwords; lane 10's access crosses the bound and only
    its two dwords that end at or below it are stored; later lanes store nothing."""
    k = asm_kernel(
        PROLOGUE
        + BUFFER_RSRC.format(records=168)
        + """
  v_lshlrev_b32 v8, 4, v0
  v_lshlrev_b32 v30, 1, v0
  v_lshl_add_u32 v30, v0, 3, v30
  v_add_u32 v31, 1, v30
  v_add_u32 v32, 2, v30
  v_add_u32 v33, 3, v30
  buffer_store_dwordx4 v[30:33], v8, s[20:23], 0 offen
  s_waitcnt vmcnt(0)
"""
    )
    out = np.full((64, 4), 7, np.uint32)
    hazards, _ = k(np.zeros(4, np.uint32), out)
    assert not hazards
    for lane in range(10):
        assert out[lane].tolist() == [10 * lane + j for j in range(4)]
    assert out[10].tolist() == [100, 101, 7, 7]
    assert (out[11:] == 7).all()


def test_fp32_denormals_flushed_when_the_descriptor_says_so(asm_kernel):
    """FLOAT_DENORM_MODE_32 = 0 (AITER's objects): a denormal VALU source reads as 0 of its sign and a
    denormal result is written as 0 of its sign; mode 3 keeps both."""
    body = (
        PROLOGUE
        + """
  v_lshlrev_b32 v8, 3, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[12:13], s[6:7], 0, v[8:9]
  global_load_dword v10, v[2:3], off
  s_waitcnt vmcnt(0)
  v_mul_f32 v16, 1.0, v10
  v_mul_f32 v17, v10, v10
  global_store_dwordx2 v[12:13], v[16:17], off
  s_waitcnt vmcnt(0)
"""
    )
    x = np.zeros(64, np.float32)
    x[:4] = [1e-40, -1e-40, 1e-20, 3.0]
    for denorm, keep in ((0, False), (3, True)):
        out = np.zeros((64, 2), np.float32)
        hazards, _ = asm_kernel(body, denorm=denorm)(x, out)
        assert not hazards
        tiny = np.float32(1e-20) * np.float32(1e-20)  # 1e-40, a denormal
        assert out[0, 0] == (np.float32(1e-40) if keep else 0.0)
        assert np.signbit(out[1, 0]) and out[1, 0] == (np.float32(-1e-40) if keep else 0.0)
        assert out[2, 1] == (tiny if keep else 0.0)
        assert out[3, 1] == 9.0


def test_hand_written_object_three_dimensional_grid(asm_kernel):
    """An object as AITER's assembler leaves it (function symbol size 0, a local label symbol inside
    the code, no amdhsa.target, descriptor kernarg size 0) loads, and a (2, 3, 2) grid gives each
    workgroup its x, y, z ids in s2, s3, s4."""
    k = asm_kernel(
        """
  s_load_dwordx2 s[6:7], s[0:1], 0x0
  s_mul_i32 s8, s4, 100
  s_mul_i32 s9, s3, 10
  s_add_u32 s8, s8, s9
  s_add_u32 s8, s8, s2
  s_mul_i32 s9, s4, 6
  s_mul_i32 s10, s3, 2
  s_add_u32 s9, s9, s10
  s_add_u32 s9, s9, s2
  s_lshl_b32 s9, s9, 2
  s_cmp_eq_u32 s9, 0
  s_cbranch_scc1 label_go
label_go:
  v_mov_b32 v1, s8
  v_mov_b32 v2, s9
  s_mov_b64 exec, 1
  s_waitcnt lgkmcnt(0)
  global_store_dword v2, v1, s[6:7]
  s_waitcnt vmcnt(0)
""",
        directives="  .amdhsa_system_sgpr_workgroup_id_y 1\n  .amdhsa_system_sgpr_workgroup_id_z 1",
        hand_written=True,
    )
    assert k.code.kernels["k"].descriptor.kernarg_size == 0
    out = np.zeros(12, np.uint32)
    hazards, _ = k(out, grid=(2, 3, 2))
    assert not hazards
    assert out.tolist() == [100 * z + 10 * y + x for z in range(2) for y in range(3) for x in range(2)]


def test_refusal_names_the_instruction_and_the_object(asm_kernel):
    """An instruction outside the modelled subset is refused when the kernel is first launched, with
    the object file, the kernel, the offset and the instruction in the message."""
    import pytest

    from regress.emu.isa import UnsupportedInstruction

    k = asm_kernel(PROLOGUE + "  v_sin_f32 v10, v6\n")
    with pytest.raises(UnsupportedInstruction) as err:
        k()
    msg = str(err.value)
    assert "v_sin_f32_e32 v10, v6" in msg and "kernel k at +0x" in msg and ".co" in msg


def test_forms_aiter_uses_of_instructions_ours_uses_too(asm_kernel):
    """The operand forms AITER's objects use of instructions the emulator already had: ds_write_b64 /
    ds_read_b64 / ds_read_b128 with offsets, v_fma_f32 with an SGPR and a negated source,
    v_rcp_iflag_f32, v_cmp_eq_f32 into an SGPR pair against the inline 0, v_cmp_le_u32 with an SGPR,
    and s_cmp_lt_i32 / s_sub_i32 / s_add_i32 (signed compare; SCC = signed overflow)."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_lshlrev_b32 v8, 5, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[12:13], s[6:7], 0, v[8:9]
  global_load_dword v10, v[2:3], off
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v14, 3, v0
  v_mov_b32 v16, v0
  v_add_u32 v17, 1000, v0
  ds_write_b64 v14, v[16:17] offset:512
  s_waitcnt lgkmcnt(0)
  ds_read_b64 v[18:19], v14 offset:512
  v_and_b32 v15, 31, v0
  v_lshlrev_b32 v15, 4, v15
  ds_read_b128 v[20:23], v15 offset:512
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s20, 2.0
  v_mov_b32 v25, 1.0
  v_fma_f32 v26, v10, s20, -v25
  v_rcp_iflag_f32 v27, v10
  v_cmp_eq_f32_e64 s[22:23], v10, 0
  v_cndmask_b32_e64 v28, 0, 1, s[22:23]
  s_mov_b32 s24, 5
  v_cmp_le_u32 vcc, s24, v0
  v_cndmask_b32 v29, 0, 1, vcc
  s_mov_b32 s25, -3
  s_cmp_lt_i32 s25, 2
  s_cselect_b32 s26, 1, 0
  s_mov_b32 s27, 0x80000000
  s_sub_i32 s28, s27, 1
  s_cselect_b32 s29, 1, 0
  s_add_i32 s30, s25, 7
  s_cselect_b32 s31, 1, 0
  v_mov_b32 v32, s26
  v_mov_b32 v33, s28
  v_mov_b32 v34, s29
  v_mov_b32 v35, s30
  v_mov_b32 v36, s31
  global_store_dwordx2 v[12:13], v[18:19], off
  global_store_dwordx2 v[12:13], v[26:27], off offset:8
  global_store_dwordx2 v[12:13], v[28:29], off offset:16
  s_mov_b64 exec, 1
  global_store_dwordx4 v[12:13], v[20:23], off offset:2048
  global_store_dwordx4 v[12:13], v[32:35], off offset:2064
  global_store_dword v[12:13], v36, off offset:2080
  s_waitcnt vmcnt(0)
""",
        lds=2048,
    )
    x = np.zeros(64, np.float32)
    x[:4] = [0.0, 4.0, -0.5, 3.0]
    x[4:] = np.arange(4, 64)
    out = np.zeros(64 * 8 + 16, np.uint32)
    hazards, _ = k(x, out)
    assert not hazards
    rows = out[: 64 * 8].reshape(64, 8)
    lane = np.arange(64)
    assert rows[:, 0].tolist() == lane.tolist() and rows[:, 1].tolist() == (1000 + lane).tolist()
    fma, rcp = rows[:, 2].view(np.float32), rows[:, 3].view(np.float32)
    assert fma[:4].tolist() == [-1.0, 7.0, -2.0, 5.0]  # 2x - 1
    assert rcp[1] == 0.25 and rcp[3] == np.float32(1 / 3) and rcp[0] == np.inf
    assert rows[:, 4].tolist() == [1] + [0] * 63  # only x = 0 equals 0
    assert rows[:, 5].tolist() == (lane >= 5).astype(int).tolist()  # 5 <= lane
    tail = out[64 * 8 :]  # lane 0's ds_read_b128 at byte 512: lanes 0 and 1 of the b64 writes
    assert tail[:4].tolist() == [0, 1000, 1, 1001]
    assert tail[4] == 1  # -3 < 2 signed
    assert tail[5] == 0x7FFFFFFF and tail[6] == 1  # INT_MIN - 1 overflows
    assert tail[7] == 4 and tail[8] == 0  # -3 + 7, no overflow
