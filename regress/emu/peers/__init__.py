"""Peer kernels (AITER v3, MoonMath) run in hip-emu from their own public code objects or sources.

Nothing of a peer is committed: its source or code object is given at run time (a checkout, an
unpacked snapshot, a wheel). What lives here is ours: how to build or load it, its launch
description learned from its public host code, and the host side written again in Python.

    moonmath   build MoonMath's dense kernel from csrc/, its launches, and an emulated forward
    aiter      AITER v3's bf16 forward code objects from the amd-aiter wheel, their argument struct
               from its header, the launch plan, and an emulated forward

`kernarg` packs a kernel's argument block from its metadata, for any code object.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from regress.emu.codeobject import Kernel

# Hidden arguments (code object v5) the emulator can fill; the others are zero.
_HIDDEN = ("block_count", "group_size", "remainder")


def kernarg(kernel: Kernel, values: Sequence[int | float], grid: tuple[int, int, int], block: int) -> bytes:
    """The argument block of `kernel`: `values` for its explicit arguments in order (ints for
    pointers and integers, floats for 4-byte float arguments), then the hidden ones its metadata
    lists (block counts, group sizes, remainders; grid is in workgroups, block in threads)."""
    args = kernel.args
    explicit = [a for a in args if not str(a[".value_kind"]).startswith("hidden_")]
    if len(explicit) != len(values):
        raise ValueError(f"{kernel.name}: {len(explicit)} explicit arguments, {len(values)} given")
    out = bytearray(kernel.kernarg_size)
    for a, v in zip(explicit, values, strict=True):
        off, size = int(a[".offset"]), int(a[".size"])
        if isinstance(v, float):
            if size != 4:
                raise ValueError(f"{kernel.name}: float for a {size}-byte argument at {off}")
            out[off : off + 4] = struct.pack("<f", v)
        else:
            out[off : off + size] = (int(v) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    group = (block, 1, 1)
    for a in args:
        kind = str(a[".value_kind"])
        if not kind.startswith("hidden_"):
            continue
        off, size = int(a[".offset"]), int(a[".size"])
        what, _, axis = kind.removeprefix("hidden_").rpartition("_")
        if what in _HIDDEN and axis in "xyz":
            i = "xyz".index(axis)
            v = {"block_count": grid[i], "group_size": group[i], "remainder": 0}[what]
            out[off : off + size] = v.to_bytes(size, "little")
        elif kind == "hidden_grid_dims":
            out[off : off + size] = (1 + (grid[1] > 1) + (grid[2] > 1)).to_bytes(size, "little")
    return bytes(out)
