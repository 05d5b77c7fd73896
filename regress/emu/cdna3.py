"""Every number the CDNA3 timing model (regress.emu.timing) uses, each with its public source.

One table, `CONSTANTS`; the model reads values only through `C` (by name). `FITTED` holds the at most
three parameters fitted to published times (benchmarks/mi300x_model.py --fit; only AITER's RTNE rows
(2,24,8192), (2,24,32768), (1,16,131072) are used to fit them), with the fitted values committed here.

Units: a *clock* is one cycle of the CU clock; an *issue cycle* is 4 clocks, the interval at which the
CU's sequencer returns to the same SIMD (a wave64 VALU op occupies a 16-lane SIMD for 4 clocks).
"""

from __future__ import annotations

from dataclasses import dataclass

ISA = "AMD Instinct MI300 CDNA 3 Instruction Set Architecture reference guide"
WHITE = "AMD CDNA 3 architecture white paper (AMD Instinct MI300 series)"
CALC = "AMD matrix instruction calculator (amd_matrix_instruction_calculator, --architecture cdna3)"
SCHED = "LLVM AMDGPU SISchedule.td (SICommonWriteRes; gfx940 models Write4PassMAI/Write8PassMAI)"
HAZ = "LLVM AMDGPU GCNHazardRecognizer.cpp (GFX940_XDL_N_PassWriteVgprVALUWawWaitStates)"
COEXEC = (
    "LLVM AMDGPU getVALUIssueCycle/getPackedVALUIssueCycle (llvm-project PR 233721: rules fit to ATT "
    "thread traces of gfx942, MI300X / MI308X with its peak TOPS limiter)"
)
PR_8PASS = (
    "LLVM AMDGPU PRs 181778 and 184084 (not merged: an 8-pass XDL MFMA leaves 6 co-executing VALU, not 7;"
    " the VALU is blocked its first 2 passes)"
)
FETCH = (
    "LLVM AMDGPU PR 203934 (not merged; AMDGPUAlignVALURuns: 8-byte VALU runs that straddle 32-byte"
    " fetch windows stall about a quad each, measured on MI210 and MI300)"
)
USAGE = "LLVM AMDGPUUsage (gfx90a/gfx942: unified VGPR/AGPR file, allocation granule 8)"


@dataclass(frozen=True)
class Constant:
    name: str
    value: float
    unit: str
    source: str
    note: str = ""


CONSTANTS: tuple[Constant, ...] = (
    # --- the device ---
    Constant("cus", 304, "CUs", WHITE, "8 XCDs x 38 active CUs (MI300X)"),
    Constant("clock_ghz", 2.1, "GHz", WHITE, "peak engine clock; 304 x 2.1 GHz x 2048 = 1307 TFLOP/s bf16"),
    Constant("hbm_tb_s", 5.3, "TB/s", WHITE, "8 HBM3 stacks"),
    Constant("l2_bytes_per_clk_xcd", 2048, "B/clk per XCD", WHITE, "16 channels x 128 B; 4 MB L2 per XCD"),
    Constant("xcds", 8, "XCDs", WHITE),
    Constant("mall_tb_s", 17.2, "TB/s", WHITE, "256 MB Infinity Cache peak bandwidth"),
    # --- one CU ---
    Constant("simds", 4, "SIMDs per CU", ISA),
    Constant("waves_per_simd_max", 8, "waves", ISA, "wave slots per SIMD on CDNA3"),
    Constant("vgprs_per_lane", 512, "registers", USAGE, "VGPR + AGPR, per SIMD lane"),
    Constant("vgpr_granule", 8, "registers", USAGE),
    Constant("sgprs_per_simd", 800, "registers", ISA, "scalar register file per SIMD"),
    Constant(
        "sgpr_granule",
        8,
        "registers",
        USAGE,
        "GRANULATED_WAVEFRONT_SGPR_COUNT unit as gfx942 objects encode it",
    ),
    Constant("lds_bytes", 65536, "B per CU", ISA),
    Constant(
        "lds_bytes_per_clk", 128, "B/clk", ISA, "32 banks x 4 B; the bank model is machine.Wave._lds_cost"
    ),
    Constant("l1_bytes_per_clk", 64, "B/clk", WHITE, "vector L1 (TA/TD) return path per CU"),
    # --- issue and pipelines ---
    Constant(
        "issue_clocks", 4, "clocks", ISA, "one issue opportunity per SIMD every 4 clocks; wave64 on 16 lanes"
    ),
    Constant(
        "trans_issue_cycles",
        4,
        "issue cycles",
        SCHED,
        "WriteTrans32 = 4 = 1 / (ops per cycle) / 4: quarter rate, VALU held 16 clocks",
    ),
    Constant("mfma_pass_clocks", 4, "clocks", CALC, "one pass = 4 clocks"),
    Constant("mfma_16x16x16_bf16_passes", 4, "passes", CALC, "16 cycles; SISchedule Write4PassMAI"),
    Constant("mfma_32x32x8_bf16_passes", 8, "passes", CALC, "32 cycles; SISchedule Write8PassMAI"),
    Constant(
        "mfma_valu_read_extra_ws", 3, "wait states", HAZ, "an XDL result is read by VALU after passes + 3"
    ),
    Constant(
        "mfma_valu_block",
        0.0,
        "share",
        SCHED,
        "share of an MFMA's run its SIMD's VALU cannot issue: 0, MFMA holds only HWXDL (full co-issue)",
    ),
    Constant(
        "mfma_own_valu_block",
        0.0,
        "share",
        SCHED,
        "share of an MFMA's run its own wave cannot issue VALU (other waves can): 0, full co-issue",
    ),
    Constant(
        "mfma_valu_hold_cycles",
        1,
        "issue cycles",
        COEXEC,
        "an XDL MFMA holds the SIMD's VALU for 1 + (widest A/B source bytes) / 16 cycles: 1 for the"
        " 8-byte bf16/f16 sources here",
    ),
    Constant(
        "mfma_valu_hold_cycles_8pass",
        1,
        "issue cycles",
        CALC,
        "the same hold for an 8-pass XDL MFMA (coexec_delay 4 clocks for v_mfma_f32_32x32x8_bf16);"
        f" 2 in {PR_8PASS} (the sensitivity)",
    ),
    Constant(
        "mfma_pk_f32_extra_cycles",
        2,
        "issue cycles",
        COEXEC,
        "a packed-F32 VALU op (v_pk_add/fma/mul_f32, v_pk_mov_b32) or DOT issues NumPasses + 2 cycles"
        " after an XDL MFMA of its own wave (what a wave's thread trace shows)",
    ),
    Constant(
        "mfma_pk_f32_simd_wide",
        0,
        "flag",
        COEXEC,
        "1: the packed-F32 hold also applies to the SIMD's other waves (a reading the source leaves open;"
        " a sensitivity)",
    ),
    Constant(
        "fetch_window_bytes",
        32,
        "B",
        FETCH,
        "the SQC fills a wave's instruction buffer in 32-byte aligned windows",
    ),
    Constant(
        "fetch_straddle_cycles",
        0,
        "issue cycles",
        FETCH,
        "stall of an instruction whose bytes cross a window (the PR: about one quad; 0 here, 1 the"
        " sensitivity)",
    ),
    Constant("branch_issue_cycles", 2, "issue cycles", SCHED, "WriteBranch = 8 clocks for a taken branch"),
    # --- memory latencies (issue to data in VGPRs) ---
    Constant("smem_latency", 5 * 4, "clocks", SCHED, "WriteSMEM = 5 issue cycles"),
    Constant(
        "barrier_clocks", 4, "clocks", ISA, "release on the next issue cycle once every wave has arrived"
    ),
)


# The fitted parameters (at most three); values from `benchmarks/mi300x_model.py --fit`.
FITTED: dict[str, Constant] = {
    c.name: c
    for c in (
        Constant("vmem_latency", 200.0, "clocks", "fitted", "global load issue to data; grid 200-1400"),
        Constant("lds_latency", 32.0, "clocks", "fitted", "LDS issue to data past bank cycles; grid 32-160"),
        Constant(
            "clock_eff", 0.5142, "x clock_ghz", "fitted", "sustained clock / peak, and all the model misses"
        ),
    )
}

C: dict[str, float] = {c.name: c.value for c in CONSTANTS} | {k: v.value for k, v in FITTED.items()}

MFMA_PASSES = {
    "v_mfma_f32_16x16x16_bf16": int(C["mfma_16x16x16_bf16_passes"]),
    "v_mfma_f32_16x16x16bf16_1k": int(C["mfma_16x16x16_bf16_passes"]),
    "v_mfma_f32_16x16x16_f16": int(C["mfma_16x16x16_bf16_passes"]),
    "v_mfma_f32_32x32x8_bf16": int(C["mfma_32x32x8_bf16_passes"]),
    "v_mfma_f32_32x32x8bf16_1k": int(C["mfma_32x32x8_bf16_passes"]),
    "v_mfma_f32_32x32x8_f16": int(C["mfma_32x32x8_bf16_passes"]),
}

# Quarter-rate VALU ops (SISchedule: WriteTrans32, WriteQuarterRate32).
QUARTER_RATE = frozenset(
    {
        "v_exp_f32",
        "v_log_f32",
        "v_rcp_f32",
        "v_rcp_iflag_f32",
        "v_rsq_f32",
        "v_sqrt_f32",
        "v_sin_f32",
        "v_cos_f32",
        "v_exp_f16",
        "v_log_f16",
        "v_rcp_f16",
        "v_mul_lo_u32",
        "v_mul_hi_u32",
        "v_mul_hi_i32",
        "v_mad_u64_u32",
        "v_mad_i64_i32",
    }
)


# VALU ops that issue only NumPasses + 2 cycles after an XDL MFMA (mfma_pk_f32_extra_cycles).
PACKED_F32 = frozenset({"v_pk_add_f32", "v_pk_fma_f32", "v_pk_mul_f32", "v_pk_mov_b32"})


def table_markdown() -> str:
    """The constants table as it appears in docs/hip-gfx942.md."""
    rows = ["| constant | value | unit | source | note |", "|---|---|---|---|---|"]
    for c in (*CONSTANTS, *FITTED.values()):
        rows.append(f"| `{c.name}` | {c.value:g} | {c.unit} | {c.source} | {c.note} |")
    return "\n".join(rows)
