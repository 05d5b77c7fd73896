"""Static cost of each gfx942 kernel per 64-key tile, read off the emulator's trace (no timing).

Two launches of one 256-row block (all 8 waves live) that differ only by TILES extra K/V tiles;
their difference, divided by the extra tiles (and by 8 for per-wave figures), is the steady-state
cost of one tile: instructions issued by class, s_nop wait states, LDS bytes and bank-conflict
cycles (the model in machine.Wave._lds_cost), global bytes, and the MFMA share of issue slots
(issued instructions plus the extra wait states of s_nop).

The table: `python benchmarks/mi300x/emu_cost.py [--code-object PATH] [--moonmath-src DIR]`.

`cost_between` takes the two traces of any kernel (ours, a peer's), so a peer's module measures its
own tile the same way (regress.emu.peers.moonmath.tile_cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from regress.emu.isa import CLASSES
from regress.emu.library import BLOCK_Q, EmuLibrary
from regress.emu.machine import Trace

WAVES = 8
TILES = 2
KEYS = 64


@dataclass(frozen=True)
class TileCost:
    kernel: str
    per_wave: dict[str, float]  # instructions per tile per wave, by class
    nop_wait_states: float  # per tile per wave
    lds_bytes: float  # per tile per block
    lds_conflict_cycles: float  # per tile per block: cycles beyond the conflict-free count
    global_bytes: float  # per tile per block
    mfma_issue_share: float  # MFMA / (issued instructions + extra s_nop wait states)


def _launch(lib: EmuLibrary, rounding: str, layout: str, sk: int) -> Trace:
    g = torch.Generator().manual_seed(0)
    shape = (1, BLOCK_Q, 1, 128) if layout == "bshd" else (1, 1, BLOCK_Q, 128)
    kshape = (1, sk, 1, 128) if layout == "bshd" else (1, 1, sk, 128)
    # bshd with one head has seq stride 128 (packed); a second head makes it strided.
    if layout == "bshd":
        shape, kshape = (1, BLOCK_Q, 2, 128), (1, sk, 2, 128)
    q = torch.randn(shape, generator=g).to(torch.bfloat16)
    k = torch.randn(kshape, generator=g).to(torch.bfloat16)
    v = torch.randn(kshape, generator=g).to(torch.bfloat16)
    if layout == "bshd":  # one (batch, head) block: use head 0's views
        q, k, v = q[:, :, :1], k[:, :, :1], v[:, :, :1]
    lib.forward(q, k, v, layout=layout, rounding=rounding)
    assert lib.last_trace is not None
    return lib.last_trace


def tile_cost(lib: EmuLibrary, rounding: str, packed: bool) -> TileCost:
    layout = "bhsd" if packed else "bshd"
    small = _launch(lib, rounding, layout, KEYS)
    big = _launch(lib, rounding, layout, KEYS * (1 + TILES))
    return cost_between(small, big, lib.last_kernel or "?", tiles=TILES, waves=WAVES)


def cost_between(small: Trace, big: Trace, kernel: str, *, tiles: float, waves: int) -> TileCost:
    """The steady-state cost of one key tile of any kernel (ours or a peer's, named `kernel`): the
    difference of two traces of the same launch that differ by `tiles` tiles, per tile, and per wave
    of the `waves` that run the loop. `tiles` may be fractional: a peer's cost is given per 64 keys
    whatever its own tile size (regress.emu.peers.aiter.tile_cost)."""

    def d(attr: str) -> float:
        per_tile: float = (getattr(big, attr) - getattr(small, attr)) / tiles
        return per_tile

    per_wave = {c: (big.issued[c] - small.issued[c]) / tiles / waves for c in CLASSES}
    nops = d("nop_wait_states") / waves
    issued = sum(per_wave.values())
    slots = issued + nops - per_wave["nop"]
    return TileCost(
        kernel=kernel,
        per_wave=per_wave,
        nop_wait_states=nops,
        lds_bytes=d("lds_bytes"),
        lds_conflict_cycles=d("lds_cycles") - d("lds_ideal_cycles"),
        global_bytes=d("global_bytes_read") + d("global_bytes_written"),
        mfma_issue_share=per_wave["mfma"] / slots if slots else 0.0,
    )
