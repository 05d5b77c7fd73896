"""Planted bugs the emulator must catch, each in a small llvm-mc kernel next to its fixed twin:
a missing s_waitcnt, a missing s_barrier between LDS traffic of two waves, a missing s_nop after
an MFMA (and before one). Strict mode raises; non-strict collects the reports.

The MFMA rules are planted once per rule, each kernel breaking exactly one, and judged by both
checkers that read regress.emu.hazards.RULES: the emulator on the path run, and the static scan
on the code object's instructions; each must name that rule and no other, and the fixed twin
(one s_nop more) must pass both."""

from __future__ import annotations

import numpy as np
import pytest
from emu_asm import PROLOGUE

from regress.emu.hazards import BRANCH_RULE, RULES, regs, scan, wait
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
    assert "[valu-write-mfma-read] v24 written by a VALU 1 wait states before the MFMA reads it" in details
    assert "[valu-write-mfma-read] v25 written by a VALU 0 wait states before the MFMA reads it" in details
    assert not asm_kernel(MFMA.format(pre="s_nop 1", post="s_nop 7"))(np.zeros(64, np.float32))[0]


# One kernel per MFMA rule. {gap} is where the planted window is: "" plants the hazard, the fix
# pads it with s_nop to exactly the rule's wait states. Every other window is kept wide.
_OPERANDS = """
  v_mov_b32 v20, 0
  v_mov_b32 v21, 0
  v_mov_b32 v22, 0
  v_mov_b32 v23, 0
  v_mov_b32 v24, 0x3f803f80
  v_mov_b32 v25, 0x3f803f80
  v_mov_b32 v26, 0x3f803f80
  v_mov_b32 v27, 0x3f803f80
  v_mov_b32 v28, -1
  s_nop 4
"""
_STORE = """
  s_nop 7
  v_add_f32 v10, 1.0, v20
  v_add_f32 v10, v10, v30
  global_store_dword v[2:3], v10, off
  s_waitcnt vmcnt(0)
"""
PLANTED = {
    # VALU reads the result right after the MFMA
    "mfma-result-read": """
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[24:25], v[20:23]
  {gap}
  v_add_f32 v30, 1.0, v21
""",
    # a second MFMA takes the first one's result as its A operand
    "mfma-result-srcab": """
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[24:25], v[20:23]
  {gap}
  v_mfma_f32_16x16x16_bf16 v[30:33], v[22:23], v[26:27], v[30:33]
""",
    # a VALU writes B two instructions short of the MFMA that reads it
    "valu-write-mfma-read": """
  v_mov_b32 v27, 0x3f803f80
  {gap}
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[26:27], v[20:23]
""",
    # a second MFMA's SrcC v[22:25] half-overlaps the first one's result v[20:23]
    "mfma-srcc-overlap": """
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[24:25], v[20:23]
  {gap}
  v_mfma_f32_16x16x16_bf16 v[30:33], v[26:27], v[26:27], v[22:25]
""",
    # EXEC written by a VALU just before an MFMA (all lanes stay on: the value is -1)
    "exec-write-mfma": """
  v_readfirstlane_b32 exec_lo, v28
  {gap}
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[24:25], v[20:23]
""",
    # an MFMA reads SrcC v[30:33] (its result goes to v[20:23]); a VALU overwrites v30 at once
    "mfma-srcc-war": """
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[24:25], v[30:33]
  {gap}
  v_mov_b32 v30, 0
""",
}


def _planted(rule: str, gap: str) -> str:
    pre = "  v_mov_b32 v30, 0\n  v_mov_b32 v31, 0\n  v_mov_b32 v32, 0\n  v_mov_b32 v33, 0\n"
    return PROLOGUE + pre + _OPERANDS + PLANTED[rule].format(gap=gap) + _STORE


def _nops(wait_states: int) -> str:
    return f"s_nop {wait_states - 1}"


def _dynamic_rules(hazards: list) -> set[str]:
    return {h.detail.split("]")[0].lstrip("[") for h in hazards if h.kind == "mfma"}


def test_every_rule_is_planted_once() -> None:
    assert set(PLANTED) == set(RULES)


@pytest.mark.parametrize("rule", sorted(PLANTED))
def test_planted_hazard_is_caught_by_its_rule_only(asm_kernel, rule: str) -> None:
    """Static scan and emulator both name exactly the planted rule; the twin padded to the rule's
    wait states passes both (so the rule's number is exact, not merely large)."""
    bad = asm_kernel(_planted(rule, ""))
    static = {f.rule for f in scan(bad.code.kernels["k"].instructions)}
    assert static == {rule}, [str(f) for f in scan(bad.code.kernels["k"].instructions)]
    hazards, _ = bad(np.zeros(64, np.float32), strict=False)
    assert _kinds(hazards) == {"mfma"} and _dynamic_rules(hazards) == {rule}, [h.detail for h in hazards]

    short = asm_kernel(_planted(rule, _nops(wait(rule) - 1)))  # one wait state short
    assert {f.rule for f in scan(short.code.kernels["k"].instructions)} == {rule}
    assert _dynamic_rules(short(np.zeros(64, np.float32), strict=False)[0]) == {rule}

    fixed = asm_kernel(_planted(rule, _nops(wait(rule))))
    assert not scan(fixed.code.kernels["k"].instructions)
    hazards, _ = fixed(np.zeros(64, np.float32))
    assert not hazards


def test_static_scan_reads_register_ranges() -> None:
    """The old scanner's pattern ended in \\b after ']', so v[0:3] named no register at all."""
    assert regs("v[20:23], v[24:25], a[0:1], s[4:5], v7") == {
        *(("v", r) for r in (20, 21, 22, 23, 24, 25, 7)),
        ("a", 0),
        ("a", 1),
        ("s", 4),
        ("s", 5),
    }
    assert not regs("vcc, exec_lo, src0_sel:WORD_1, sext(0x10), offset:16, vmcnt(0)")


@pytest.mark.parametrize(("scc", "taken"), [("1", True), ("0", False)])
def test_static_scan_follows_both_ways_of_a_branch(asm_kernel, scc: str, taken: bool) -> None:
    """The fall-through pads the window, the taken branch skips the padding: the scan reports the
    taken path's hazard whatever the condition; the emulator, on the path run, only when taken."""
    gap = f"s_cmp_eq_u32 {scc}, 1\n  s_cbranch_scc1 .Lskip\n  s_nop 7\n.Lskip:"
    kernel = asm_kernel(_planted("mfma-result-read", gap))
    assert {f.rule for f in scan(kernel.code.kernels["k"].instructions)} == {"mfma-result-read"}
    dynamic = _dynamic_rules(kernel(np.zeros(64, np.float32), strict=False)[0])
    assert dynamic == ({"mfma-result-read"} if taken else set())
    padded = asm_kernel(_planted("mfma-result-read", gap.replace(".Lskip:", ".Lskip:\n  s_nop 4")))
    assert not scan(padded.code.kernels["k"].instructions)


def test_static_scan_flags_jumps_it_cannot_follow(asm_kernel) -> None:
    """s_setpc inside an MFMA's window: where it lands is a register value, so it is a finding."""
    gap = "s_getpc_b64 s[20:21]\n  s_add_u32 s20, s20, 4\n  s_addc_u32 s21, s21, 0\n  s_setpc_b64 s[20:21]"
    kernel = asm_kernel(_planted("mfma-result-read", gap))
    assert BRANCH_RULE in {f.rule for f in scan(kernel.code.kernels["k"].instructions)}
