"""The static cost trace of the real kernel: per 64-key tile, exactly the work the design says."""

from __future__ import annotations

import pytest

from regress.emu.cost import WAVES, tile_cost
from regress.emu.library import EmuLibrary
from regress.facts.results import ROUNDING_MODES
from regress.native.build import build_kernel


@pytest.mark.slow  # emulates whole tiles of the gfx942 kernel
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "strided"])
def test_tile_cost_matches_the_design(tmp_path_factory: pytest.TempPathFactory, packed: bool) -> None:
    lib = EmuLibrary(build_kernel("hip-emu", cache_dir=tmp_path_factory.mktemp("co")).path)
    c = tile_cost(lib, "rtne", packed)
    assert c.kernel.endswith("packed" if packed else "strided")
    assert c.per_wave["mfma"] == 128  # 64 for S^T = K Q^T, 64 for O^T += V^T P^T
    assert c.per_wave["barrier"] == 2  # step 13: one a phase, an M and an X phase a tile
    k_and_v = 2 * 64 * 128 * 2  # one K and one V tile, bf16, read once per block
    assert c.global_bytes == k_and_v
    # 32 ds_read_b128 per wave (16 B per lane) plus the tile written once.
    assert c.lds_bytes == WAVES * 32 * 64 * 16 + k_and_v
    assert c.lds_conflict_cycles == 0  # the XOR swizzles of layout.h, measured under the bank model
    assert 0 < c.mfma_issue_share < 1


@pytest.mark.slow  # emulates AITER's tile loop three times
def test_aiter_tile_cost_per_64_keys() -> None:
    """AITER v3's tile per 64 keys per wave: 64 v_mfma_f32_32x32x8_bf16 (32 rows x 64 keys x 128,
    twice), the same memory traffic in every mode, and the rounding mode's VALU work rtz < rtna < rtne."""
    from regress.emu.peers import aiter as peer

    try:
        a = peer.Aiter.load()
    except peer.PeerUnavailable as exc:
        pytest.skip(f"AITER wheel unavailable: {exc}")
    c = {m: peer.tile_cost(a, m) for m in ROUNDING_MODES}
    assert {x.per_wave["mfma"] for x in c.values()} == {64}
    assert len({(x.lds_bytes, x.global_bytes) for x in c.values()}) == 1
    assert c["rtz"].per_wave["valu"] < c["rtna"].per_wave["valu"] < c["rtne"].per_wave["valu"]
    assert c["rtne"].kernel == "aiter _ZN5aiter24fmha_fwd_hd128_bf16_rtneE"


def test_the_cost_table_names_what_exists_when_no_kernel_matches() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "mi300x"))
    import emu_cost

    with pytest.raises(SystemExit, match="no kernel matching 'nope'"):
        emu_cost.main(["--no-ours", "--kernel", "nope"])
