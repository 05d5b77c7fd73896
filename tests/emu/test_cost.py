"""The static cost trace of the real kernel: per 64-key tile, exactly the work the design says."""

from __future__ import annotations

import pytest

from regress.build import build_kernel
from regress.emu.cost import WAVES, tile_cost
from regress.emu.library import EmuLibrary


@pytest.mark.slow  # emulates whole tiles of the gfx942 kernel
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "strided"])
def test_tile_cost_matches_the_design(tmp_path_factory: pytest.TempPathFactory, packed: bool) -> None:
    lib = EmuLibrary(build_kernel("hip-emu", cache_dir=tmp_path_factory.mktemp("co")).path)
    c = tile_cost(lib, "rtne", packed)
    assert c.kernel.endswith("packed" if packed else "strided")
    assert c.per_wave["mfma"] == 128  # 64 for S^T = K Q^T, 64 for O^T += V^T P^T
    assert c.per_wave["barrier"] == 1
    k_and_v = 2 * 64 * 128 * 2  # one K and one V tile, bf16, read once per block
    assert c.global_bytes == k_and_v
    # 32 ds_read_b128 per wave (16 B per lane) plus the tile written once.
    assert c.lds_bytes == WAVES * 32 * 64 * 16 + k_and_v
    assert c.lds_conflict_cycles == 0  # the XOR swizzles of layout.h, measured under the bank model
    assert 0 < c.mfma_issue_share < 1
