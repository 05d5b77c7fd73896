"""The static cost of each gfx942 kernel per 64-key tile, as a Markdown table.

Read off the emulator's trace by regress.emu.cost (no timing); the table in docs/hip-gfx942.md.
Ours (a given code object, or today's build), AITER v3's three objects (`--aiter-wheel`, `auto` for
the cached/downloaded wheel) and MoonMath's dense kernel (`--moonmath-src`); `--kernel` keeps the
rows whose kernel name contains the text, and names what exists when none does.

    python benchmarks/mi300x/emu_cost.py [--code-object PATH] [--aiter-wheel FILE|auto] [--moonmath-src DIR]
                                  [--kernel TEXT] [--no-ours]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from regress.emu.cost import TileCost, tile_cost
from regress.emu.library import EmuLibrary
from regress.facts.results import LAYOUTS, ROUNDING_MODES


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
    ap.add_argument(
        "--aiter-wheel", help="also AITER v3's three bf16 forward objects (a wheel file, or 'auto')"
    )
    ap.add_argument("--kernel", help="only the rows whose kernel name contains this text")
    ap.add_argument("--no-ours", action="store_true", help="only the peers' rows")
    args = ap.parse_args(argv)
    costs: list[TileCost] = []
    sha = ""
    if not args.no_ours:
        path = args.code_object
        if path is None:
            from regress.native.build import build_kernel

            path = build_kernel("hip-emu").path
        lib = EmuLibrary(path)
        sha = f"code object sha256 {lib.code.sha256}\n"
        costs += [tile_cost(lib, r, p) for p in (True, False) for r in ROUNDING_MODES]
    if args.aiter_wheel is not None:
        from regress.emu.peers import aiter

        try:
            peer = aiter.Aiter.load(None if args.aiter_wheel == "auto" else args.aiter_wheel)
        except aiter.PeerUnavailable as exc:
            raise SystemExit(f"emu_cost: AITER unavailable: {exc}") from None
        costs += [aiter.tile_cost(peer, mode) for mode in ROUNDING_MODES]
    if args.moonmath_src is not None:
        from regress.emu.peers import moonmath

        for mode in ROUNDING_MODES:
            b = moonmath.build(args.moonmath_src, mode)
            costs += [moonmath.tile_cost(b, layout) for layout in LAYOUTS]
    if args.kernel is not None:
        names = sorted({c.kernel for c in costs})
        costs = [c for c in costs if args.kernel in c.kernel]
        if not costs:
            raise SystemExit(f"emu_cost: no kernel matching {args.kernel!r} (have: {', '.join(names)})")
    print(sha + table(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
