"""Planted bugs the emulator must catch, each in a small llvm-mc kernel next to its fixed twin:
a missing s_waitcnt, a missing s_barrier between LDS traffic of two waves, a missing s_nop after
an MFMA (and before one). Strict mode raises; non-strict collects the reports."""

from __future__ import annotations

import numpy as np
import pytest
from emu_asm import PROLOGUE

from regress.emu.machine import EmuHazard


def _kinds(hazards: list) -> set[str]:
    return {h.kind for h in hazards}


LOAD_USE = (
    PROLOGUE
    + """
  global_load_dword v10, v[2:3], off
  {wait}
  v_add_u32 v11, 1, v10
  global_store_dword v[2:3], v11, off
  s_waitcnt vmcnt(0)
"""
)


def test_missing_waitcnt_on_global_load(asm_kernel):
    buf = np.arange(64, dtype=np.uint32)
    hazards, _ = asm_kernel(LOAD_USE.format(wait=""))(buf, strict=False)
    assert _kinds(hazards) == {"waitcnt"}
    assert "v10" in hazards[0].detail and hazards[0].text.startswith("v_add_u32")
    assert (buf == 0x7FBADBAD + 1).all()  # the read saw the poison, not the data early
    with pytest.raises(EmuHazard, match="waitcnt hazard"):
        asm_kernel(LOAD_USE.format(wait=""))(np.arange(64, dtype=np.uint32))
    buf = np.arange(64, dtype=np.uint32)
    hazards, _ = asm_kernel(LOAD_USE.format(wait="s_waitcnt vmcnt(0)"))(buf)
    assert not hazards and buf.tolist() == list(range(1, 65))


def test_waitcnt_counts_in_order(asm_kernel):
    """vmcnt(1) after two loads covers the older one only."""
    body = (
        PROLOGUE
        + """
  global_load_dword v10, v[2:3], off
  global_load_dword v11, v[2:3], off offset:256
  s_waitcnt vmcnt(1)
  v_mov_b32 v12, v{reg}
  s_waitcnt vmcnt(0)
"""
    )
    buf = np.zeros(128, np.uint32)
    assert not asm_kernel(body.format(reg=10))(buf)[0]
    assert _kinds(asm_kernel(body.format(reg=11))(buf, strict=False)[0]) == {"waitcnt"}


def test_missing_waitcnt_on_lds_read(asm_kernel):
    body = (
        PROLOGUE
        + """
  ds_write_b32 v6, v0
  s_waitcnt lgkmcnt(0)
  ds_read_b32 v10, v6
  {wait}
  global_store_dword v[2:3], v10, off
  s_waitcnt vmcnt(0)
"""
    )
    buf = np.zeros(64, np.uint32)
    assert _kinds(asm_kernel(body.format(wait=""), lds=256)(buf, strict=False)[0]) == {"waitcnt"}
    hazards, _ = asm_kernel(body.format(wait="s_waitcnt lgkmcnt(0)"), lds=256)(buf)
    assert not hazards and buf.tolist() == list(range(64))


LDS_HANDOFF = (
    PROLOGUE
    + """
  v_readfirstlane_b32 s12, v0
  s_lshr_b32 s12, s12, 6
  v_and_b32 v8, 63, v0
  v_lshlrev_b32 v8, 2, v8
  s_cmp_eq_u32 s12, 0
  s_cbranch_scc0 .Lnot_writer
  v_add_u32 v9, 1000, v0
  ds_write_b32 v8, v9
  s_waitcnt lgkmcnt(0)
.Lnot_writer:
  {barrier}
  s_cmp_eq_u32 s12, 1
  s_cbranch_scc0 .Lnot_reader
  ds_read_b32 v10, v8
  s_waitcnt lgkmcnt(0)
  global_store_dword v[2:3], v10, off
  s_waitcnt vmcnt(0)
.Lnot_reader:
"""
)


def test_missing_barrier_between_waves(asm_kernel):
    """Wave 0 writes LDS, wave 1 reads it: without s_barrier that is a race (reported whichever
    wave the scheduler runs first); with it, wave 1 sees wave 0's values."""
    buf = np.zeros(128, np.uint32)
    racy = asm_kernel(LDS_HANDOFF.format(barrier=""), lds=256)
    hazards, _ = racy(buf, block=128, strict=False)
    assert _kinds(hazards) == {"lds-race"}
    assert "no s_barrier" in hazards[0].detail
    buf = np.zeros(128, np.uint32)
    fixed = asm_kernel(LDS_HANDOFF.format(barrier="s_barrier"), lds=256)
    hazards, _ = fixed(buf, block=128)
    assert not hazards
    assert buf[64:].tolist() == [1000 + t for t in range(64)]


def test_barrier_before_lds_writes_complete(asm_kernel):
    """s_barrier orders issue, not completion: without s_waitcnt lgkmcnt(0) before it, the writer's
    data may not be in LDS when the reader passes the barrier."""
    body = LDS_HANDOFF.replace("  ds_write_b32 v8, v9\n  s_waitcnt lgkmcnt(0)\n", "  ds_write_b32 v8, v9\n")
    hazards, _ = asm_kernel(body.format(barrier="s_barrier"), lds=256)(
        np.zeros(128, np.uint32), block=128, strict=False
    )
    assert _kinds(hazards) == {"lds-barrier"}
    assert "s_barrier while this wave's LDS writes" in hazards[0].detail


def test_lds_read_of_unwritten_memory(asm_kernel):
    body = PROLOGUE + "  ds_read_b32 v10, v6 offset:128\n  s_waitcnt lgkmcnt(0)\n"
    assert _kinds(asm_kernel(body, lds=512)(strict=False)[0]) == {"lds-race"}


MFMA = (
    PROLOGUE
    + """
  v_mov_b32 v20, 0
  v_mov_b32 v21, 0
  v_mov_b32 v22, 0
  v_mov_b32 v23, 0
  v_mov_b32 v24, 0x3f803f80
  v_mov_b32 v25, 0x3f803f80
  {pre}
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[24:25], v[20:23]
  {post}
  v_add_f32 v10, 1.0, v20
  global_store_dword v[2:3], v10, off
  s_waitcnt vmcnt(0)
"""
)


def test_missing_nop_after_mfma(asm_kernel):
    buf = np.zeros(64, np.float32)
    hazards, _ = asm_kernel(MFMA.format(pre="s_nop 1", post=""))(buf, strict=False)
    assert _kinds(hazards) == {"mfma"}
    assert "v20 is an MFMA result only 0 wait states old" in hazards[0].detail
    hazards, _ = asm_kernel(MFMA.format(pre="s_nop 1", post="s_nop 5"))(buf, strict=False)
    assert _kinds(hazards) == {"mfma"}  # 6 wait states: one short
    hazards, _ = asm_kernel(MFMA.format(pre="s_nop 1", post="s_nop 6"))(buf)
    assert not hazards
    assert (buf == 17.0).all()  # 16 products of 1 * 1, plus 1


def test_missing_nop_before_mfma(asm_kernel):
    """A VALU write read by the next MFMA needs 2 wait states."""
    hazards, _ = asm_kernel(MFMA.format(pre="", post="s_nop 7"))(np.zeros(64, np.float32), strict=False)
    assert _kinds(hazards) == {"mfma"}
    details = [h.detail for h in hazards]
    assert "v24 written by a VALU 1 wait states before the MFMA reads it" in details
    assert "v25 written by a VALU 0 wait states before the MFMA reads it" in details
    assert not asm_kernel(MFMA.format(pre="s_nop 1", post="s_nop 7"))(np.zeros(64, np.float32))[0]
