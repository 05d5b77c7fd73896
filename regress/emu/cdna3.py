"""Every number the CDNA3 timing model (regress.emu.timing) uses, each with its public source.

One table, `CONSTANTS`; the model reads values only through `C` (by name). `FITTED` holds the
two parameters fitted to published times (benchmarks/mi300x/mi300x_model.py --fit; only the RTNE rows of AITER
and MoonMath at (2,24,8192), (2,24,32768), (1,16,131072) are used to fit them, leaving 48 of the 54
published times for validation), with the fitted values committed here.

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
MAF = (
    "AMD ROCm blog, Measuring Max-Achievable FLOPs - Part 2"
    " (https://rocm.blogs.amd.com/software-tools-optimization/measuring-max-achievable-flops-part2/README.html)"
)
SCHED_LAT = (
    "LLVM AMDGPU SISchedule.td SICommonWriteRes (latencies in issue cycles, 'taken from AMD Accelerated"
    " Parallel Processing guide'; llvm/lib/Target/AMDGPU/SISchedule.td)"
)
# Measured MI300X latencies exist but their figures were not in the reference material this model could
# read; until they are, the latencies are LLVM's and the VMEM range is an assumed factor of two each way.
UNREAD_NOTE = (
    "MI300X latency measurements found but not readable here: chipsandcheese.com/p/testing-amds-giant-mi300x;"
    " SC25 workshop paper 'The MALL is Open: Exploring Shared Caches and Latency in AMD CDNA 3 GPUs'"
    " (sc25.conference-program.com/presentation/?id=ws_memo102&sess=sess201)"
)
UNREAD = f"assumed x/÷2 around SISchedule's WriteVMEM ({UNREAD_NOTE})"
CMOS = "CMOS dynamic power P = a C V^2 f with V ~ f on the DVFS curve (P ~ a f^3: beta = 1/3)"


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
        "lds_latency",
        5 * 4,
        "clocks",
        SCHED_LAT,
        "WriteLDS = 5 issue cycles ('can be between 2 and 64'); past the bank cycles of machine's bank model",
    ),
    Constant("lds_latency_low", 2 * 4, "clocks", SCHED_LAT, "WriteLDS's low end, 2 issue cycles"),
    Constant("lds_latency_high", 64 * 4, "clocks", SCHED_LAT, "WriteLDS's high end, 64 issue cycles"),
    Constant("vmem_latency", 80 * 4, "clocks", SCHED_LAT, "WriteVMEM = 80 issue cycles, global load to data"),
    Constant("vmem_latency_low", 40 * 4, "clocks", UNREAD, "the band's low end"),
    Constant("vmem_latency_high", 160 * 4, "clocks", UNREAD, "the band's high end"),
    # --- the power-managed clock (timing.clock_ghz) ---
    Constant(
        "clock_gemm_ghz",
        1.207,
        "GHz",
        MAF,
        "median engine clock of MI300X under dense BF16 GEMM (hipBLASLt-bench, amd-smi): 0.575 x 2.1 GHz",
    ),
    Constant(
        "gemm_mfma_busy",
        0.94,
        "share",
        MAF,
        "matrix-core busy share of that GEMM: MAF / peak at the measured median clock, 'up to 94 %'",
    ),
    Constant(
        "boost_headroom",
        1.25,
        "x",
        MAF,
        "boost 'can improve performance by over 25 % in lightly-loaded scenarios': clock_ghz of a light"
        " load / clock_gemm_ghz must be >= this (checked in tests/emu/test_timing.py)",
    ),
    Constant(
        "clock_beta",
        1 / 3,
        "exponent",
        CMOS,
        "clock ~ activity^-beta under the power cap; not fitted: the fit rows cannot identify it (a free"
        " beta runs to its bound, 2.0, and puts AITER's RTZ rows 32-44 % slow)",
    ),
    Constant(
        "clock_beta_low", 0.25, "exponent", CMOS, "the band: P ~ a f^4 (V rising faster than f near the top)"
    ),
    Constant("clock_beta_high", 0.5, "exponent", CMOS, "the band: P ~ a f^2 (V rising slower than f)"),
    Constant(
        "barrier_clocks", 4, "clocks", ISA, "release on the next issue cycle once every wave has arrived"
    ),
)


# The fitted parameters; values from `benchmarks/mi300x/mi300x_model.py --fit` on the six rows named there
# (AITER and MoonMath, RTNE, at (2,24,8192), (2,24,32768), (1,16,131072)); `--fit` prints their confidence.
FITTED: dict[str, Constant] = {
    c.name: c
    for c in (
        Constant(
            "mfma_power_16x16x16",
            0.6122,
            "x 32x32x8",
            "fitted",
            "power per busy matrix-core clock of a 16x16x16 bf16 MFMA relative to a 32x32x8 (AMD: less)",
        ),
        Constant(
            "clock_eff",
            0.8132,
            "x issue rate",
            "fitted",
            "real issue rate / the model's at the power-managed clock: all the model misses",
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
