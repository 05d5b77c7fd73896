"""The static cost of each gfx942 kernel per 64-key tile, as a Markdown table.

Read off the emulator's trace by regress.emu.cost (no timing); the table in docs/hip-gfx942.md.

    python benchmarks/emu_cost.py [--code-object PATH] [--moonmath-src DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from regress.emu.cost import TileCost, tile_cost
from regress.emu.library import EmuLibrary


def table(costs: list[TileCost]) -> str:
    cols = ("mfma", "valu", "lds", "global", "smem", "salu", "branch", "waitcnt", "barrier", "nop")
    head = [
        "kernel",
        *cols,
        "s_nop wait states",
        "LDS B/tile",
        "LDS conflict cycles",
        "global B/tile",
        "MFMA share",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in costs:
        row = [
            f"`{c.kernel}`",
            *(f"{c.per_wave[k]:g}" for k in cols),
            f"{c.nop_wait_states:g}",
            f"{c.lds_bytes:g}",
            f"{c.lds_conflict_cycles:g}",
            f"{c.global_bytes:g}",
            f"{100 * c.mfma_issue_share:.1f}%",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--code-object", type=Path, help="default: build it (regress build --backend hip --compile-only)"
    )
    ap.add_argument(
        "--moonmath-src",
        type=Path,
        help="also MoonMath's dense kernel, built from this checkout (regress.emu.peers.moonmath)",
    )
    args = ap.parse_args(argv)
    path = args.code_object
    if path is None:
        from regress.build import build_kernel

        path = build_kernel("hip-emu").path
    lib = EmuLibrary(path)
    costs = [tile_cost(lib, r, p) for p in (True, False) for r in ("rtne", "rtna", "rtz")]
    if args.moonmath_src is not None:
        from regress.emu.peers import moonmath

        for mode in moonmath.MODES:
            b = moonmath.build(args.moonmath_src, mode)
            costs += [moonmath.tile_cost(b, layout) for layout in moonmath.LAYOUTS]
    print(f"code object sha256 {lib.code.sha256}\n")
    print(table(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
