"""The CDNA3 timing model on hand-written kernels whose cycle counts are known in closed form.

Each test runs a kernel twice with a different repeat count N of its loop body (the bodies are
unrolled with .rept) and checks the clock difference against the rate the model's constant table
gives; the difference cancels the kernel's prologue and the pipeline drain.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from emu_asm import PROLOGUE

from regress.emu import timing
from regress.emu.cdna3 import MFMA_PASSES, C

ISSUE = int(C["issue_clocks"])


def _clocks(
    asm_kernel, body: str, n: int, *, lds: int = 0, block: int = 64, params: dict | None = None
) -> timing.CuRun:
    run = asm_kernel(body.replace("{N}", str(n)), lds=lds)
    run(np.zeros(64 * (block // 64), np.uint32), block=block, record=True)
    assert run.records is not None and len(run.records) == 1
    return timing.replay(run.code.kernels["k"], run.records, params)


def _per_rep(
    asm_kernel,
    body: str,
    *,
    lds: int = 0,
    block: int = 64,
    n: tuple[int, int] = (8, 16),
    params: dict | None = None,
) -> float:
    a, b = (_clocks(asm_kernel, body, k, lds=lds, block=block, params=params) for k in n)
    return (b.clocks - a.clocks) / (n[1] - n[0])


MFMA_CHAIN = """\
  v_mov_b32 v24, 0
  v_mov_b32 v25, 0
  v_mov_b32 v20, 0
  v_mov_b32 v21, 0
  v_mov_b32 v22, 0
  v_mov_b32 v23, 0
  s_nop 2
  .rept {N}
  {mfma} v[20:23], v[24:25], v[24:25], v[20:23]
  .endr
  s_nop 7
  s_nop 7
"""


@pytest.mark.parametrize("mfma", ["v_mfma_f32_16x16x16_bf16"])
def test_dependent_mfma_chain_runs_at_the_matrix_core_rate(asm_kernel, mfma: str) -> None:
    per = _per_rep(asm_kernel, MFMA_CHAIN.replace("{mfma}", mfma))
    assert per == MFMA_PASSES[mfma] * C["mfma_pass_clocks"]  # 16 clocks for 16x16x16 bf16


def _straight(asm_kernel, body: str, n: int) -> timing.CuRun:
    """Replay only: one wave issuing the straight-line kernel once (no emulator semantics needed)."""
    kernel = asm_kernel(body.replace("{N}", str(n))).code.kernels["k"]
    return timing.replay(kernel, [[(list(range(len(kernel.instructions))), {})]])


def test_the_32x32x8_mfma_takes_eight_passes(asm_kernel) -> None:
    body = MFMA_CHAIN.replace("v[20:23]", "v[40:55]").replace("{mfma}", "v_mfma_f32_32x32x8_bf16")
    a, b = _straight(asm_kernel, body, 8), _straight(asm_kernel, body, 16)
    assert (
        (b.clocks - a.clocks) / 8 == 8 * C["mfma_pass_clocks"] == MFMA_PASSES["v_mfma_f32_32x32x8_bf16"] * 4
    )


CO_ISSUE = """\
  v_mov_b32 v24, 0
  v_mov_b32 v25, 0
  v_mov_b32 v41, 0
  s_nop 2
  .rept {N}
  v_mfma_f32_16x16x16_bf16 v[20:23], v[24:25], v[24:25], v[20:23]
{valu}  .endr
  s_nop 7
"""


@pytest.mark.parametrize("k", [0, 2, 3, 5])
def test_independent_valu_co_issues_under_an_mfma(asm_kernel, k: int) -> None:
    body = CO_ISSUE.replace("{valu}", "  v_add_u32 v40, 1, v41\n" * k)
    per = _per_rep(asm_kernel, body)
    # The MFMA holds the VALU port one issue cycle, the matrix core 4 passes: up to 3 VALU ops are free.
    assert per == max(MFMA_PASSES["v_mfma_f32_16x16x16_bf16"] * C["mfma_pass_clocks"], ISSUE * (1 + k))


@pytest.mark.parametrize(("hold_8pass", "k"), [(1, 7), (1, 8), (2, 6), (2, 7)])
def test_an_8_pass_mfma_leaves_passes_minus_its_hold_for_valu(asm_kernel, hold_8pass: int, k: int) -> None:
    """Under a 32x32x8 MFMA (8 passes) 8 - hold VALU ops are free; the 4-pass hold is unchanged."""
    body = CO_ISSUE.replace("v[20:23]", "v[40:55]").replace("v40", "v60").replace("v41", "v61")
    body = body.replace("v_mfma_f32_16x16x16_bf16", "v_mfma_f32_32x32x8_bf16")
    body = body.replace("{valu}", "  v_add_u32 v60, 1, v61\n" * k)
    per = _per_rep(asm_kernel, body, params={"mfma_valu_hold_cycles_8pass": hold_8pass})
    assert per == ISSUE * max(8, hold_8pass + k)


def test_an_instruction_crossing_a_fetch_window_stalls_only_in_the_sensitivity(asm_kernel) -> None:
    """Four 8-byte VALU ops fill one 32-byte window: 4-byte aligned, one of them crosses a window
    boundary each repeat, and with fetch_straddle_cycles=1 it costs one more issue cycle (PR 203934's
    rule); 8-byte aligned none does. The committed value (0) charges nothing either way."""
    body = "  .rept {N}\n" + "  v_add_u32_e64 v40, 1, v41\n" * 4 + "  .endr\n  s_endpgm\n"
    per: dict[tuple[str, int], float] = {}
    for pad in ("", "  s_nop 0\n"):
        for stall in (0, 1):
            runs = []
            for n in (8, 16):
                kernel = asm_kernel(pad + body.replace("{N}", str(n))).code.kernels["k"]
                rec = [[(list(range(len(kernel.instructions))), {})]]
                runs.append(timing.replay(kernel, rec, {"fetch_straddle_cycles": stall}).clocks)
            per[(pad, stall)] = (runs[1] - runs[0]) / 8
    assert per[("", 0)] == per[("  s_nop 0\n", 0)] == 4 * ISSUE
    assert sorted([per[("", 1)], per[("  s_nop 0\n", 1)]]) == [4 * ISSUE, 5 * ISSUE]


@pytest.mark.parametrize("knob", ["mfma_valu_block", "mfma_own_valu_block"])
def test_the_co_issue_sensitivity_knobs_serialise_valu_behind_the_mfma(asm_kernel, knob: str) -> None:
    # One wave: blocking the SIMD's VALU or only the issuing wave's gives the same serial sum.
    body = CO_ISSUE.replace("{valu}", "  v_add_u32 v40, 1, v41\n" * 2)
    per = _per_rep(asm_kernel, body, params={knob: 1.0})
    assert per == MFMA_PASSES["v_mfma_f32_16x16x16_bf16"] * C["mfma_pass_clocks"] + 2 * ISSUE


@pytest.mark.parametrize(("op", "cycles"), [("v_add_u32 v40, 1, v41", 1), ("v_exp_f32 v40, v41", 4)])
def test_valu_rates(asm_kernel, op: str, cycles: int) -> None:
    body = "  v_mov_b32 v41, 0\n  .rept {N}\n  " + op + "\n  .endr\n"
    assert _per_rep(asm_kernel, body) == ISSUE * cycles
    if cycles > 1:
        assert cycles == C["trans_issue_cycles"]


def test_s_nop_holds_the_wave_for_its_wait_states(asm_kernel) -> None:
    assert _per_rep(asm_kernel, "  .rept {N}\n  s_nop 3\n  .endr\n") == 4 * ISSUE


LDS_ROUND_TRIP = (
    PROLOGUE
    + """\
  v_lshlrev_b32 v8, {shift}, v0
  ds_write_b32 v8, v7
  s_waitcnt lgkmcnt(0)
  .rept {N}
  ds_read_b32 v10, v8
  s_waitcnt lgkmcnt(0)
  .endr
"""
)


@pytest.mark.parametrize(("shift", "bank_cycles"), [(2, 2), (7, 64)])
def test_a_waitcnt_on_lds_waits_for_bank_cycles_and_latency(asm_kernel, shift: int, bank_cycles: int) -> None:
    # shift 2: lane l reads dword l (2 groups of 32 lanes, 1 cycle each); shift 7: every lane of a
    # group hits bank 0 (32 cycles a group).
    body = LDS_ROUND_TRIP.replace("{shift}", str(shift))
    per = _per_rep(asm_kernel, body, lds=65536 if shift == 7 else 256)
    ready = bank_cycles + C["lds_latency"]
    assert per == -(-ready // ISSUE) * ISSUE + ISSUE  # data back on an issue boundary, then the waitcnt


def test_lds_bandwidth_is_shared_by_the_waves_of_a_cu(asm_kernel) -> None:
    # 8 waves each issue N conflict-free ds_read_b128 (8 bank cycles each) before one waitcnt: the
    # LDS, not issue, is the limit (8 waves x 8 cycles per round > one issue cycle).
    def body(n: int) -> str:
        reads = "".join(f"  ds_read_b128 v[{10 + 4 * i}:{13 + 4 * i}], v8\n" for i in range(n))
        return PROLOGUE + (
            "  v_lshlrev_b32 v8, 4, v0\n  v_and_b32 v8, 0x3ff0, v8\n  v_mov_b32 v4, 0\n  v_mov_b32 v5, 0\n"
            "  ds_write_b128 v8, v[4:7]\n  s_waitcnt lgkmcnt(0)\n  s_barrier\n"
            + reads
            + "  s_waitcnt lgkmcnt(0)\n"
        )

    a, b = (_clocks(asm_kernel, body(n), n, lds=16384, block=512) for n in (8, 16))
    assert b.lds_busy - a.lds_busy == 8 * 8 * 8  # 8 waves x 8 more reads x 8 bank cycles
    assert (b.clocks - a.clocks) / 8 == 8 * 8  # the LDS, not issue, is the limit


def test_oldest_wave_first_and_s_setprio_reverses_it(asm_kernel) -> None:
    # Waves 0 and 4 share SIMD 0 and issue N VALU ops each: one VALU per SIMD per issue cycle, so the
    # favoured wave finishes N issue cycles before the other. Only the replay runs this kernel (the
    # streams are straight-line), so wave 4's stream starts at the s_setprio and wave 0's after it.
    n = 16
    kernel = asm_kernel("  s_setprio 3\n" + "  v_add_u32 v40, 1, v41\n" * n).code.kernels["k"]
    last = len(kernel.instructions) - 1  # s_endpgm
    plain = list(range(1, last + 1))
    raised = list(range(0, last + 1))
    empty: dict[int, int] = {}
    for wave4, favoured in ((plain, 0), (raised, 4)):
        recs = [(plain, empty)] * 4 + [(wave4, empty)]
        run = timing.replay(kernel, [recs])
        other = 4 - favoured
        assert run.wave_end[other] - run.wave_end[favoured] >= (n - 1) * ISSUE
    assert timing.static_ops(kernel)[0] == timing.Op(timing.PRIO, 3)


def test_barrier_releases_when_every_wave_arrives(asm_kernel) -> None:
    # Wave 1 spins N s_nops before the barrier; wave 0 waits for it there.
    kernel = asm_kernel("  s_nop 0\n  s_barrier\n  v_add_u32 v40, 1, v41\n").code.kernels["k"]
    idx = list(range(len(kernel.instructions)))
    empty: dict[int, int] = {}
    run = timing.replay(kernel, [[(idx[1:], empty), (idx, empty)]])
    assert run.wave_end[0] == run.wave_end[1]
    assert run.waves_cost["barrier"] >= ISSUE


def test_occupancy_of_our_descriptor_fields(asm_kernel) -> None:
    k = asm_kernel("  v_add_u32 v40, 1, v41\n", lds=65536).code.kernels["k"]
    occ = timing.occupancy(k, 512)
    assert occ.vgprs == 128 and occ.waves_per_simd == 4 and occ.wgs_per_cu == 1 and occ.limit == "lds"
    k = asm_kernel("  v_add_u32 v40, 1, v41\n", lds=16384).code.kernels["k"]
    assert timing.occupancy(k, 512).wgs_per_cu == 2  # 4 waves per SIMD, 2 per workgroup


@pytest.mark.parametrize("k", [1, 2])
def test_packed_f32_valu_waits_passes_plus_two_after_an_xdl_mfma(asm_kernel, k: int) -> None:
    # A v_pk_mul_f32 issues NumPasses + 2 issue cycles after the MFMA (the plain VALU op above: 1),
    # and the next MFMA of the in-order wave follows it.
    body = CO_ISSUE.replace("{valu}", "  v_pk_mul_f32 v[40:41], v[42:43], v[42:43]\n" * k)
    a, b = _straight(asm_kernel, body, 8), _straight(asm_kernel, body, 16)
    passes = MFMA_PASSES["v_mfma_f32_16x16x16_bf16"]
    assert (b.clocks - a.clocks) / 8 == ISSUE * (passes + C["mfma_pk_f32_extra_cycles"] + k)


# --- the power-managed clock ---------------------------------------------------------------------


def test_a_replay_books_matrix_core_clocks_by_mfma_flavour(asm_kernel) -> None:
    for mfma, name in (
        ("v_mfma_f32_16x16x16_bf16", "mfma_16x16x16_bf16_passes"),
        ("v_mfma_f32_32x32x8_bf16", "mfma_32x32x8_bf16_passes"),
    ):
        body = MFMA_CHAIN.replace("{mfma}", mfma)
        if "32x32" in mfma:
            body = body.replace("v[20:23]", "v[40:55]")
        a, b = _straight(asm_kernel, body, 4), _straight(asm_kernel, body, 8)
        passes = int(C[name])
        assert set(b.xdl_by_passes) == {passes}
        assert b.xdl_by_passes[passes] - a.xdl_by_passes[passes] == 4 * passes * C["mfma_pass_clocks"]
        assert sum(b.xdl_by_passes.values()) == sum(b.xdl_busy)


def _busy(share_16: float = 0.0, share_32: float = 0.0) -> timing.SteadyState:
    by = {int(C["mfma_16x16x16_bf16_passes"]): share_16, int(C["mfma_32x32x8_bf16_passes"]): share_32}
    return timing.SteadyState("k", 1, 0.0, 100.0, share_16 + share_32, {}, {}, mfma_busy_by_passes=by)


def test_the_clock_meets_amds_published_points() -> None:
    # dense BF16 GEMM: the median clock AMD measured; an idle chip: the peak; lightly loaded: boost
    # headroom of over 25 % (the MAF blog's three statements, cdna3's source column)
    assert timing.clock_ghz(C["gemm_mfma_busy"]) == pytest.approx(C["clock_gemm_ghz"])
    assert timing.clock_ghz(0.0) == C["clock_ghz"]
    light = timing.clock_ghz(0.1 * C["gemm_mfma_busy"])
    assert light / C["clock_gemm_ghz"] >= C["boost_headroom"]
    loads = [i / 20 for i in range(21)]
    clocks = [timing.clock_ghz(a) for a in loads]
    assert all(x >= y for x, y in itertools.pairwise(clocks))  # more activity, never faster
    assert max(clocks) <= C["clock_ghz"]


def test_a_16x16x16_mfma_draws_less_power_than_a_32x32x8_at_the_same_busy_share() -> None:
    assert 0 < C["mfma_power_16x16x16"] < 1
    a16, a32 = timing.matrix_activity(_busy(share_16=0.8)), timing.matrix_activity(_busy(share_32=0.8))
    assert a16 == pytest.approx(0.8 * C["mfma_power_16x16x16"]) and a32 == pytest.approx(0.8)
    assert timing.clock_ghz(a16) > timing.clock_ghz(a32)


def test_a_partial_round_with_idle_cus_runs_at_a_higher_clock() -> None:
    cus = int(C["cus"])
    st = _busy(share_32=0.9)
    full = timing.launch_time(timing.Grid("g", cus, 10, 0.0, 0.0), st)
    tail = timing.launch_time(timing.Grid("g", cus // 4, 10, 0.0, 0.0), st)
    assert tail.clock_ghz > full.clock_ghz
    assert full.clock_ghz == pytest.approx(timing.clock_ghz(0.9))
    assert tail.clock_ghz == pytest.approx(timing.clock_ghz(0.9 * (cus // 4) / cus))
    # same clocks of work, so the time falls by the clock ratio
    assert tail.ms / full.ms == pytest.approx(full.clock_ghz / tail.clock_ghz)
    both = timing.launch_time(timing.Grid("g", cus + cus // 4, 10, 0.0, 0.0), st)
    assert both.ms == pytest.approx(full.ms + tail.ms)
    assert full.clock_ghz < both.clock_ghz < tail.clock_ghz


def test_every_constant_names_its_source() -> None:
    from regress.emu.cdna3 import CONSTANTS, FITTED

    for c in (*CONSTANTS, *FITTED.values()):
        assert c.source.strip() and c.unit.strip(), c.name
    clock = {c.name: c for c in CONSTANTS}
    for name in ("clock_gemm_ghz", "gemm_mfma_busy", "boost_headroom"):
        assert "https://rocm.blogs.amd.com/" in clock[name].source, name
    assert set(FITTED) == {"mfma_power_16x16x16", "clock_eff"}
    for name in ("lds_latency", "vmem_latency"):  # from a source now, not the fit
        assert name in clock and name not in FITTED


def test_the_docs_show_the_constants_table_as_the_code_has_it() -> None:
    from pathlib import Path

    from regress.emu.cdna3 import table_markdown

    doc = (Path(__file__).resolve().parents[2] / "docs/hip-gfx942.md").read_text()
    assert table_markdown() in doc
