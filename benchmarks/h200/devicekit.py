"""What the H200 harnesses share (one copy each): the fire-drill check of a set of builds.

The harnesses of this folder (h200_op.py, h200_split.py, ...) run in one device call each; they
import this module by its bare name (their folder is on sys.path), as they import one another.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from regress.facts.cases import Shape
from regress.facts.results import Layout, Rounding
from regress.kernel import KernelLibrary
from regress.run.suites.common import make_inputs


def check_drills(
    clean: KernelLibrary,
    ulp2: KernelLibrary,
    nondet: KernelLibrary,
    shape: Shape,
    layouts: Sequence[Layout],
    modes: Sequence[Rounding],
    failures: list[str],
) -> int:
    """The drill builds do what their names say, on `shape`: ULP=2 moves every finite non-zero output
    of the clean build by exactly 2 ULP; NONDET flips bit 0 of O[0,0,0,0] on every other launch and
    touches nothing else. Appends one line per broken drill to `failures`; returns how many."""
    before = len(failures)
    for layout in layouts:
        q, k, v = make_inputs(shape, layout, seed=11, device="cuda")
        for mode in modes:
            base = clean.forward(q, k, v, layout=layout, rounding=mode)
            moved = ulp2.forward(q, k, v, layout=layout, rounding=mode)
            c, m = base.view(torch.int16).int(), moved.view(torch.int16).int()
            finite = torch.isfinite(base.float()) & (base.float() != 0)
            if not torch.equal((m - c)[finite].abs(), torch.full_like((m - c)[finite], 2)):
                failures.append(f"drill ulp2 {layout} {mode}: not every finite output moved by 2 ULP")
            a = nondet.forward(q, k, v, layout=layout, rounding=mode)
            b = nondet.forward(q, k, v, layout=layout, rounding=mode)
            flips = a.view(torch.int16) ^ b.view(torch.int16)
            where = flips.nonzero().tolist()
            if where != [[0, 0, 0, 0]] or int(flips.flatten()[0]) != 1:
                failures.append(f"drill nondet {layout} {mode}: launches differ at {where[:4]}")
            unflipped = a if torch.equal(a.view(torch.int16), base.view(torch.int16)) else b
            if not torch.equal(unflipped.view(torch.int16), base.view(torch.int16)):
                failures.append(f"drill nondet {layout} {mode}: neither launch equals the clean build")
    return len(failures) - before
