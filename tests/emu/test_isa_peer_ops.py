"""Instructions the peers' kernels (MoonMath, AITER v3) use beyond ours, on hand-computed cases run
as real gfx942 code. Semantics from AMD's CDNA3 ISA reference; where it leaves a detail open, the
comment names the source used (LLVM's AMDGPU intrinsic definitions)."""

from __future__ import annotations

import numpy as np
import pytest
from emu_asm import PROLOGUE, lane_addr

from regress.emu.isa import UnsupportedInstruction

# s[20:23] = a raw buffer resource over buffer 0 (base, stride 0, num_records, DATA_FORMAT 32 as
# MoonMath sets it); s[24:27] the same over buffer 2.
RSRC = """\
  s_mov_b32 s20, s4
  s_mov_b32 s21, s5
  s_movk_i32 s22, {nrec0}
  s_mov_b32 s23, 0x20000
  s_mov_b32 s24, s8
  s_mov_b32 s25, s9
  s_movk_i32 s26, {nrec2}
  s_mov_b32 s27, 0x20000
"""


def test_buffer_loads_are_bounds_checked_per_dword(asm_kernel):
    """address = base + soffset + offset + voffset; dword k is in range iff soffset + voffset + offset
    + 4k + 4 <= num_records (CDNA3 counts soffset: Triton's CDNA3 buffer documentation, and AITER v3's
    tail tiles depend on it); out of range reads 0."""
    k = asm_kernel(
        PROLOGUE
        + lane_addr(1, "v[30:31]")
        + RSRC.format(nrec0=404, nrec2=0)
        + """
  v_lshlrev_b32 v8, 3, v0
  s_mov_b32 s28, 8
  buffer_load_dword v10, v8, s[20:23], s28 offen offset:4
  buffer_load_dwordx2 v[12:13], v8, s[20:23], 0 offen
  buffer_load_dwordx4 v[14:17], v8, s[20:23], 0 offen
  s_waitcnt vmcnt(0)
  v_mov_b32 v11, 0
  v_lshlrev_b32 v18, 5, v0
  v_mov_b32 v19, 0
  v_lshl_add_u64 v[30:31], s[6:7], 0, v[18:19]
  global_store_dwordx2 v[30:31], v[10:11], off
  global_store_dwordx2 v[30:31], v[12:13], off offset:8
  global_store_dwordx4 v[30:31], v[14:17], off offset:16
  s_waitcnt vmcnt(0)
"""
    )
    src = np.arange(1000, 1256, dtype=np.uint32)
    out = np.zeros((64, 8), np.uint32)
    hazards, _ = k(src, out)
    assert not hazards
    lane = np.arange(64)
    # dword: byte 8 + 8l + 4 -> element 3 + 2l; in range for 8 + 8l + 4 + 4 <= 404, lanes 0..48.
    want = np.where(lane <= 48, 1003 + 2 * lane, 0)
    assert out[:, 0].tolist() == want.tolist()
    # x2 at byte 8l: lane 50 straddles the bound (dword 0 at 400 in, dword 1 at 404 out).
    assert out[50, 2:4].tolist() == [1100, 0]
    assert out[49, 2:4].tolist() == [1098, 1099] and out[51, 2:4].tolist() == [0, 0]
    # x4 at byte 8l: lane 49 has dwords 392, 396, 400 in range and 404 out.
    assert out[49, 4:8].tolist() == [1098, 1099, 1100, 0]
    assert out[0, 4:8].tolist() == [1000, 1001, 1002, 1003]


def test_buffer_store_drops_out_of_range_dwords(asm_kernel):
    k = asm_kernel(
        PROLOGUE
        + RSRC.format(nrec0=0, nrec2=132)
        + """
  v_lshlrev_b32 v8, 3, v0
  v_mov_b32 v10, v0
  v_add_u32 v11, 100, v0
  buffer_store_dwordx2 v[10:11], v8, s[24:27], 0 offen
  s_waitcnt vmcnt(0)
"""
    )
    dst = np.full(128, 0xDEAD, np.uint32)
    hazards, _ = k(np.zeros(4, np.uint32), np.zeros(4, np.uint32), dst)
    assert not hazards
    pairs = dst.reshape(64, 2)
    assert pairs[:16].tolist() == [[i, 100 + i] for i in range(16)]
    assert pairs[16].tolist() == [16, 0xDEAD]  # byte 128 in range, 132 out
    assert (pairs[17:] == 0xDEAD).all()


def test_buffer_load_to_lds(asm_kernel):
    """`lds`: lane l's dword goes to LDS byte M0 + offset + 4l (out of range: 0), counted on vmcnt."""
    k = asm_kernel(
        PROLOGUE
        + RSRC.format(nrec0=404, nrec2=0)
        + lane_addr(1)
        + """
  v_lshlrev_b32 v8, 3, v0
  s_movk_i32 m0, 0x100
  buffer_load_dword v8, s[20:23], 0 offen offset:16 lds
  s_waitcnt vmcnt(0)
  ds_read_b32 v20, v6 offset:272
  s_waitcnt lgkmcnt(0)
  global_store_dword v[2:3], v20, off
  s_waitcnt vmcnt(0)
""",
        lds=1024,
    )
    src = np.arange(1000, 1256, dtype=np.uint32)
    out = np.zeros(64, np.uint32)
    hazards, _ = k(src, out)
    assert not hazards
    lane = np.arange(64)
    # memory byte 16 + 8l -> element 4 + 2l, in range while 8l + 20 <= 404 (lanes 0..48)
    assert out.tolist() == np.where(lane <= 48, 1004 + 2 * lane, 0).tolist()


def test_lds_read_before_the_direct_load_lands_is_a_hazard(asm_kernel):
    k = asm_kernel(
        PROLOGUE
        + RSRC.format(nrec0=404, nrec2=0)
        + """
  v_lshlrev_b32 v8, 3, v0
  s_movk_i32 m0, 0x0
  buffer_load_dword v8, s[20:23], 0 offen lds
  ds_read_b32 v20, v6
  s_waitcnt vmcnt(0) lgkmcnt(0)
""",
        lds=256,
    )
    hazards, _ = k(np.arange(256, dtype=np.uint32), strict=False)
    assert [h.kind for h in hazards] == ["waitcnt"]
    assert "buffer_load ... lds" in hazards[0].detail


def test_ds_read2_and_read2st64(asm_kernel):
    """ds_read2_b64 reads 8-byte elements at addr + 8·offset0 and addr + 8·offset1; the st64 forms
    step 64 elements (512 B for b64, 256 B for b32)."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_mov_b32 v10, v0
  ds_write_b32 v6, v10
  ds_write_b32 v6, v10 offset:256
  ds_write_b32 v6, v10 offset:512
  ds_write_b32 v6, v10 offset:768
  s_waitcnt lgkmcnt(0)
  v_lshlrev_b32 v7, 3, v0
  v_and_b32 v7, 0xf8, v7
  ds_read2_b64 v[12:15], v7 offset1:16
  ds_read2st64_b64 v[16:19], v7 offset1:1
  ds_read2st64_b32 v[20:21], v6 offset0:1 offset1:3
  ds_read2_b32 v[22:23], v6 offset1:1
  s_waitcnt lgkmcnt(0)
  v_mov_b32 v7, 0
"""
        + lane_addr(0, "v[2:3]")
        + """
  v_lshlrev_b32 v24, 5, v0
  v_mov_b32 v25, 0
  v_lshl_add_u64 v[2:3], s[4:5], 0, v[24:25]
  global_store_dwordx4 v[2:3], v[12:15], off
  global_store_dwordx4 v[2:3], v[16:19], off offset:16
  v_lshl_add_u64 v[2:3], s[6:7], 0, v[24:25]
  global_store_dwordx4 v[2:3], v[20:23], off
  s_waitcnt vmcnt(0)
""",
        lds=1024,
    )
    # LDS dword i holds i % 64 (four copies of the lane ids).
    a = np.zeros((64, 8), np.uint32)
    b = np.zeros((64, 8), np.uint32)
    hazards, _ = k(a, b)
    assert not hazards
    for lane in range(64):
        base = (8 * lane & 0xF8) // 4  # dword index of the lane's 8-byte element
        assert a[lane, 0:4].tolist() == [base % 64, (base + 1) % 64, (base + 32) % 64, (base + 33) % 64]
        assert a[lane, 4:8].tolist() == [base % 64, (base + 1) % 64, (base + 128) % 64, (base + 129) % 64]
        # b32 st64: dwords lane + 64 and lane + 192; plain read2_b32: lane and lane + 1
        assert b[lane, 0:4].tolist() == [lane, lane, lane, (lane + 1) % 64]


def test_ds_swizzle_mbcnt_setprio(asm_kernel):
    """ds_swizzle_b32 SWAP 16 (MoonMath's 0x401F), QUAD_PERM and BROADCAST; v_mbcnt_lo/hi counting
    the lanes below this one (the lane id for mask -1, and bits of a partial mask); s_setprio changes
    no result."""
    k = asm_kernel(
        PROLOGUE
        + lane_addr(1, "v[12:13]")
        + """
  s_setprio 3
  v_mov_b32 v10, v0
  ds_swizzle_b32 v20, v10 offset:swizzle(SWAP,16)
  ds_swizzle_b32 v21, v10 offset:swizzle(QUAD_PERM,3,2,1,0)
  ds_swizzle_b32 v22, v10 offset:swizzle(BROADCAST,8,5)
  ds_swizzle_b32 v23, v10 offset:0x401f
  s_waitcnt lgkmcnt(0)
  s_setprio 0
  v_mbcnt_lo_u32_b32 v24, -1, 0
  v_mbcnt_hi_u32_b32 v24, -1, v24
  s_mov_b32 s30, 0x55555555
  v_mbcnt_lo_u32_b32 v25, s30, 10
  v_mbcnt_hi_u32_b32 v26, s30, 0
  v_lshlrev_b32 v8, 4, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[2:3], s[4:5], 0, v[8:9]
  v_lshl_add_u64 v[12:13], s[6:7], 0, v[8:9]
  global_store_dwordx4 v[2:3], v[20:23], off
  global_store_dwordx4 v[12:13], v[24:27], off
  s_waitcnt vmcnt(0)
"""
    )
    a = np.zeros((64, 4), np.uint32)
    b = np.zeros((64, 4), np.uint32)
    hazards, _ = k(a, b)
    assert not hazards
    lane = np.arange(64)
    assert a[:, 0].tolist() == (lane ^ 16).tolist()
    assert a[:, 1].tolist() == ((lane & ~3) | (3 - (lane & 3))).tolist()
    assert a[:, 2].tolist() == ((lane & ~7) | 5).tolist()  # within 8-lane groups, lane 5 of each
    assert a[:, 3].tolist() == (lane ^ 16).tolist()
    assert b[:, 0].tolist() == lane.tolist()
    # 0x55555555 has the even bits: lanes below l in 0..31 with even index = ceil(l / 2).
    assert b[:, 1].tolist() == (10 + np.minimum((lane + 1) // 2, 16)).tolist()
    assert b[:, 2].tolist() == np.clip((lane - 32 + 1) // 2, 0, 16).tolist()


def test_mfma_with_inline_constant_c(asm_kernel):
    """v_mfma_f32_16x16x16_bf16 with C = literal 0 (MoonMath's first accumulation): D = A·B."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_mov_b32 v10, 0x3f803f80
  v_mov_b32 v11, 0x3f803f80
  v_mov_b32 v12, 0x40004000
  v_mov_b32 v13, 0x40004000
  s_nop 1
  v_mfma_f32_16x16x16_bf16 v[20:23], v[10:11], v[12:13], 0
  v_mfma_f32_16x16x16_bf16 v[24:27], v[10:11], v[12:13], 1.0
  s_nop 7
  s_nop 2
  v_lshlrev_b32 v8, 5, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[2:3], s[4:5], 0, v[8:9]
  global_store_dwordx4 v[2:3], v[20:23], off
  global_store_dwordx4 v[2:3], v[24:27], off offset:16
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros((64, 8), np.float32)
    hazards, _ = k(out)
    assert not hazards
    assert (out[:, :4] == 32.0).all()  # 16 products of 1.0 x 2.0
    assert (out[:, 4:] == 33.0).all()


def test_scalar_ops_of_the_peers(asm_kernel):
    """s_ashr_i32 (arithmetic), s_abs_i32, s_mul_hi_i32 (signed high half), s_addk_i32 / s_mulk_i32
    (sign-extended 16-bit constant), s_max_i32 (SCC = S0 chosen), s_cmp_lg_u64 (all 64 bits),
    s_or_saveexec_b64 and s_andn2_saveexec_b64 (D = old EXEC)."""
    k = asm_kernel(
        PROLOGUE
        + """
  s_mov_b32 s20, 0x80000010
  s_ashr_i32 s21, s20, 4
  s_abs_i32 s22, -7
  s_mov_b32 s23, -3
  s_mul_hi_i32 s24, s23, 0x40000000
  s_mov_b32 s25, 10
  s_addk_i32 s25, 0xfffe
  s_mov_b32 s26, 6
  s_mulk_i32 s26, 0xfffd
  s_max_i32 s27, -5, 3
  s_cselect_b32 s28, 1, 0
  s_mov_b32 s30, 0
  s_mov_b32 s31, 1
  s_mov_b64 s[32:33], 0
  s_cmp_lg_u64 s[30:31], s[32:33]
  s_cselect_b32 s29, 1, 0
  s_mov_b64 exec, 0xff
  s_mov_b64 s[34:35], 0xf00
  s_or_saveexec_b64 s[36:37], s[34:35]
  s_mov_b64 s[38:39], exec
  s_mov_b64 s[40:41], 0xfff0
  s_andn2_saveexec_b64 s[42:43], s[40:41]
  s_mov_b64 s[44:45], exec
  s_mov_b64 exec, -1
  v_mov_b32 v10, s21
  v_mov_b32 v11, s22
  v_mov_b32 v12, s24
  v_mov_b32 v13, s25
  v_mov_b32 v14, s26
  v_mov_b32 v15, s27
  v_mov_b32 v16, s28
  v_mov_b32 v17, s29
  v_mov_b32 v18, s36
  v_mov_b32 v19, s38
  v_mov_b32 v20, s42
  v_mov_b32 v21, s44
  v_lshlrev_b32 v8, 6, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[2:3], s[4:5], 0, v[8:9]
  global_store_dwordx4 v[2:3], v[10:13], off
  global_store_dwordx4 v[2:3], v[14:17], off offset:16
  global_store_dwordx4 v[2:3], v[18:21], off offset:32
  s_waitcnt vmcnt(0)
"""
    )
    out = np.zeros((64, 16), np.uint32)
    hazards, _ = k(out)
    assert not hazards
    r = out[0].view(np.int32).tolist()
    assert r[0] == -134217727  # 0x80000010 >> 4, sign kept: 0xF8000001
    assert r[1] == 7
    assert r[2] == -1  # (-3 * 2^30) >> 32
    assert r[3] == 8 and r[4] == -18
    assert r[5] == 3 and r[6] == 0  # max picked S1
    assert r[7] == 1  # the high dwords differ
    assert r[8] == 0xFF and r[9] == 0xFFF  # old EXEC; EXEC = 0xf00 | 0xff
    assert r[10] == 0xFFF and r[11] == 0xF000  # old EXEC; EXEC = 0xfff0 & ~0xfff


def test_vector_integer_and_packed_ops_of_the_peers(asm_kernel):
    """v_or3_b32, v_mad_u32_u24 (24-bit operands), v_ashrrev_i32, v_subrev_u32, v_pk_add_f32,
    v_pk_fma_f32 (per-half fma)."""
    k = asm_kernel(
        PROLOGUE
        + lane_addr(1, "v[12:13]")
        + """
  global_load_dword v10, v[2:3], off
  s_waitcnt vmcnt(0)
  v_mov_b32 v40, 0x100
  v_mov_b32 v41, 0x10000
  v_or3_b32 v20, v0, v40, v41
  v_mov_b32 v21, 0x1000003
  v_mad_u32_u24 v21, v21, 5, v0
  v_mov_b32 v22, -64
  v_ashrrev_i32 v22, 3, v22
  v_mov_b32 v42, 100
  v_subrev_u32 v23, v0, v42
  v_mov_b32 v26, 1.0
  v_mov_b32 v27, 2.0
  v_mov_b32 v28, 0.5
  v_mov_b32 v29, 4.0
  v_pk_add_f32 v[30:31], v[26:27], v[28:29]
  v_pk_fma_f32 v[32:33], v[26:27], v[28:29], v[26:27]
  v_lshlrev_b32 v8, 5, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[12:13], s[6:7], 0, v[8:9]
  global_store_dwordx4 v[12:13], v[20:23], off
  global_store_dwordx4 v[12:13], v[30:33], off offset:16
  s_waitcnt vmcnt(0)
"""
    )
    x = np.arange(64, dtype=np.float32)
    x[3] = np.nan
    out = np.zeros((64, 8), np.uint32)
    hazards, _ = k(x, out)
    assert not hazards
    lane = np.arange(64)
    assert out[:, 0].tolist() == (lane | 0x10100).tolist()
    assert out[:, 1].tolist() == (3 * 5 + lane).tolist()  # 0x1000003's bit 24 is dropped
    assert out[:, 2].view(np.int32).tolist() == [-8] * 64
    assert out[:, 3].tolist() == (100 - lane).tolist()
    f = out[:, 4:8].view(np.float32)
    assert f[0].tolist() == [1.5, 6.0, 1.5, 10.0]


def test_vector_compare_writes_lanes(asm_kernel):
    """v_cmp_gt_i32 (signed), v_cmp_u_f32 (unordered: NaN lanes only)."""
    k = asm_kernel(
        PROLOGUE
        + """
  global_load_dword v10, v[2:3], off
  s_waitcnt vmcnt(0)
  v_sub_u32 v24, v0, 32
  v_cmp_gt_i32 vcc, 0, v24
  v_cndmask_b32 v24, 0, 1, vcc
  v_cmp_u_f32 vcc, v10, v10
  v_cndmask_b32 v25, 0, 1, vcc
  v_lshlrev_b32 v8, 3, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[12:13], s[6:7], 0, v[8:9]
  global_store_dwordx2 v[12:13], v[24:25], off
  s_waitcnt vmcnt(0)
"""
    )
    x = np.arange(64, dtype=np.float32)
    x[3] = np.nan
    out = np.zeros((64, 2), np.uint32)
    hazards, _ = k(x, out)
    assert not hazards
    assert out[:, 0].tolist() == [1] * 32 + [0] * 32  # lane - 32 < 0 (signed) for lanes 0..31
    assert out[:, 1].tolist() == [1 if i == 3 else 0 for i in range(64)]


def test_scratch_is_private_per_lane(asm_kernel):
    """scratch_store/load_dword with vaddr and saddr off: one private dword per lane at `offset`;
    vmcnt-counted."""
    k = asm_kernel(
        PROLOGUE
        + """
  v_add_u32 v10, 1000, v0
  v_add_u32 v11, 2000, v0
  scratch_store_dword off, v10, off
  scratch_store_dword off, v11, off offset:4
  v_mov_b32 v10, 0
  scratch_load_dword v12, off, off offset:4
  scratch_load_dword v13, off, off
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v8, 3, v0
  v_mov_b32 v9, 0
  v_lshl_add_u64 v[2:3], s[4:5], 0, v[8:9]
  global_store_dwordx2 v[2:3], v[12:13], off
  s_waitcnt vmcnt(0)
""",
        scratch=8,
    )
    out = np.zeros((64, 2), np.uint32)
    hazards, _ = k(out)
    assert not hazards
    lane = np.arange(64)
    assert out[:, 0].tolist() == (2000 + lane).tolist() and out[:, 1].tolist() == (1000 + lane).tolist()


def test_a_refusal_names_the_instruction_and_the_object(asm_kernel):
    k = asm_kernel(PROLOGUE + "  v_sin_f32 v10, v6\n")
    with pytest.raises(UnsupportedInstruction) as e:
        k(np.zeros(64, np.uint32))
    msg = str(e.value)
    assert "v_sin_f32" in msg and "kernel k at +0x" in msg and str(k.code.path) in msg
