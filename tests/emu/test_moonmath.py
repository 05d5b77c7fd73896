"""MoonMath's dense kernel in hip-emu: its launch plan (always), and, given its public source
(REGRESS_MOONMATH_SRC = a checkout or unpacked snapshot), its build's resources and its emulated
output against the fp64 reference under our contract. Nothing of MoonMath is in this repository."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from regress.emu.peers import moonmath as mm
from regress.facts.metrics import load_contract
from regress.facts.numerics import scaled_ulp
from regress.facts.results import ROUNDING_MODES
from regress.kernel.reference import reference_attention, to_bhsd_bits


def test_tail_plan_follows_moonmaths_cost_rule() -> None:
    """Hand-computed from the rule: (2, 24, 8192): 22 q-blocks x 48 = 1056 workgroups, 144 left in
    the last round of 304; G = 2 gives 1 round x 64 blocks + 3 = 67 < 128 + 3 (G = 4 ties at 67,
    the first minimum stays)."""
    assert mm.tail_plan(22, 48, 128) == mm.TailPlan(912, 144, 2, 288)
    # (2, 24, 16384): 2064 % 304 = 240, G <= 608 // 240 = 2 gives 2 x 128 + 3 = 259, no better than 259.
    assert mm.tail_plan(43, 48, 256).tail == 0
    assert mm.tail_plan(342, 16, 2048).tail == 0  # 5472 = 18 x 304: the grid tiles evenly
    assert mm.tail_plan(22, 48, 47).tail == 0  # under 48 key blocks the merge does not pay
    assert mm.tail_plan(1, 290, 128).tail == 0  # last round 290 > 95 % of 304
    assert mm.tail_plan(22, 48, 128, enabled=False).tail == 0  # no workspace
    # One q-block alone: the parts are capped by 4 key blocks each (48 // 12 = 4).
    assert mm.tail_plan(1, 1, 48) == mm.TailPlan(0, 1, 12, 12)


def test_plan_lists_every_launch_a_call_makes() -> None:
    roles = [(x.role, x.grid, x.block, x.kv_blocks_per_wg) for x in mm.plan((2, 24, 8192, 8192))]
    assert roles == [
        ("v_transpose", (2 * 24 * 128, 1), 256, 0),
        ("forward", (912, 1), 512, 128),
        ("split", (288, 1), 512, 64),
        ("merge", (144 * 48, 1), 256, 0),
    ]
    dense = mm.plan((1, 2, 517, 451), "rtna", "bshd")
    assert [(x.role, x.grid) for x in dense] == [("v_transpose", (16, 1)), ("forward", (2, 2))]
    assert dense[1].args["scale_log2e"] == pytest.approx(1.4426950408889634 / 128**0.5, rel=1e-7)


def test_schedule_table_matches_the_plan() -> None:
    tp = mm.tail_plan(3, 2, 64)  # 6 workgroups, all stranded
    sched = mm.tail_schedule(3, 2, tp)
    assert tp.tail == 6 and tp.parts == 6 * tp.split_ways
    assert sched[mm.MAX_PARTS + 4].tolist() == [1, 1, 4 * tp.split_ways, tp.split_ways]
    assert sched[4 * tp.split_ways, :2].tolist() == [1, 1]


def _source() -> str:
    src = os.environ.get(mm.SRC_ENV)
    if not src:
        pytest.skip(f"MoonMath source not given (set {mm.SRC_ENV} to a checkout or unpacked snapshot)")
    return src


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, mm.Build]:
    src = _source()
    root = tmp_path_factory.mktemp("moonmath")
    return {m: mm.build(src, m, cache_dir=root) for m in ROUNDING_MODES}


@pytest.mark.slow
def test_build_resources(builds: dict[str, mm.Build]) -> None:
    """The dense kernel as the issue measured it under clang 19: 256 VGPRs, 88 SGPRs, 64 KiB LDS,
    2 VGPRs spilled (12 B of scratch per lane)."""
    r = builds["rtne"].dense("bhsd")
    assert (r["vgprs"], r["sgprs"], r["lds_bytes"], r["vgpr_spill"]) == (256, 88, 65536, 2)
    assert r["scratch_bytes"] > 0


CASES = [
    pytest.param("rtne", "bhsd", (1, 1, 384, 384), id="rtne-bhsd-384"),
    pytest.param("rtna", "bshd", (1, 2, 517, 451), id="rtna-bshd-517x451"),
    pytest.param("rtz", "bhsd", (1, 1, 100, 3072), id="rtz-bhsd-100x3072-tail-split"),
    pytest.param("rtne", "bhsd", (1, 1, 391, 200), id="rtne-bhsd-391x200-nan-inf"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "layout", "shape"), CASES)
def test_emulated_output_meets_the_contract(
    builds: dict[str, mm.Build], mode: str, layout: str, shape: tuple[int, int, int, int]
) -> None:
    b, h, sq, sk = shape
    g = torch.Generator().manual_seed(sq * 7 + sk)

    def make(s: int) -> torch.Tensor:
        dims = (b, h, s, 128) if layout == "bhsd" else (b, s, h, 128)
        return torch.randn(dims, generator=g).to(torch.bfloat16)

    q, k, v = make(sq), make(sk), make(sk)
    if sq == 391:  # a NaN query element, a +Inf key element, a -Inf value element
        q[0, 0, 5, 3], k[0, 0, 17, 9], v[0, 0, 40, 0] = float("nan"), float("inf"), float("-inf")
    emu = mm.MoonMathEmu(builds[mode])
    out = emu.forward(q, k, v, layout=layout)
    roles = [r for r, _ in emu.traces]
    assert roles == [x.role for x in mm.plan(shape, mode, layout)]
    ref, mag = reference_attention(q, k, v, layout=layout)  # type: ignore[arg-type]
    err = scaled_ulp(to_bhsd_bits(out, layout), ref, mag)  # type: ignore[arg-type]
    # Non-finite positions score 0 only when they match the reference (NaN canonicalised), else inf.
    assert np.isfinite(err).all()
    if sq == 391:
        assert not np.isfinite(ref).all()
    assert err.max() <= load_contract().scaled_ulp_limit(mode)


@pytest.mark.slow
def test_tile_cost_matches_moonmaths_design(builds: dict[str, mm.Build]) -> None:
    """Per 64-key tile and wave: 3 q-tiles x 4 key sub-tiles x 8 head-dim tiles of QK^T plus
    16 V chunks x 2 x 3 q-tiles of PV = 192 MFMAs, two barriers (the mid-iteration swap and the
    end), and per block K once by DMA (16 KiB) plus V_t read by each of the 8 waves (8 x 16 KiB)
    and its L1 prefetch (16 KiB)."""
    c = mm.tile_cost(builds["rtne"], "bhsd")
    assert c.per_wave["mfma"] == 192
    assert c.per_wave["barrier"] == 2
    assert c.global_bytes == 16384 + 8 * 16384 + 16384
    assert c.lds_conflict_cycles == 0  # its XOR-swizzled K layout, under the emulator's bank model
