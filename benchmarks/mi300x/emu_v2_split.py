"""The v2 tail split (kernel/hip/parts/plan.h, gfx942_v2_split) on hip-emu, measured: per call and
mode, the max scaled ULP of the split and the unsplit launch against fp64, their LSE against fp64 in
fp32 ulps of max(|lse|, 1) (docs/numerics.md §1b's unit; its bound is 64), the split LSE against the
unsplit one in the same unit, and the share of output elements with equal bits. The split runs on a
small emulated device (`cus`) so a small call has a partial last round; the unsplit launch on 1 CU
(whole rounds only, never split). Realistic inputs (the suites' generator), BSHD.

    PYTHONPATH=. python3 benchmarks/mi300x/emu_v2_split.py [--seed 1]

One JSON line per (call, mode). Takes a few minutes: the emulator runs every wave on this CPU.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from regress.emu.library import EmuLibrary
from regress.facts import numerics as nm
from regress.facts.cases import Shape
from regress.facts.results import ROUNDING_MODES
from regress.kernel import reference
from regress.native.build import build_kernel
from regress.run.suites.common import make_inputs_bhsd

# (shape, cus): GQA prefill 6/2 on 4 CUs (the last round's two q-blocks split); MHA with 2 q-blocks a
# head on 304 CUs (every q-block split)
CALLS = [(Shape(1, 6, 40, 777, hkv=2), 4), (Shape(1, 3, 300, 777), 304)]


def lse_ulps(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> float:
    """max |a - b| in fp32 ulps of max(|ref|, 1), over ref's finite rows."""
    fin = np.isfinite(ref)
    unit = np.spacing(np.maximum(np.abs(ref[fin]), 1.0).astype(np.float32)).astype(np.float64)
    return float((np.abs(a[fin].astype(np.float64) - b[fin]) / unit).max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    path = build_kernel("hip", compile_only=True).path
    for shape, cus in CALLS:
        split, whole = EmuLibrary(path, cus=cus), EmuLibrary(path, cus=1)
        q, k, v = (
            t.transpose(1, 2).contiguous() for t in make_inputs_bhsd(shape, seed=args.seed, device="cpu")
        )
        ref = reference.reference_full(q, k, v, layout="bshd")
        for mode in ROUNDING_MODES:
            lse = {n: torch.empty(shape.b, shape.h, shape.sq) for n in ("split", "whole")}
            outs = {
                n: reference.to_bhsd_bits(lib.forward(q, k, v, rounding=mode, lse=lse[n]), "bshd")
                for n, lib in (("split", split), ("whole", whole))
            }
            assert split.last_plan is not None and whole.last_plan is not None
            su = {n: float(nm.scaled_ulp(o, ref.ref, ref.mag).max()) for n, o in outs.items()}
            row = {
                "call": [shape.b, shape.h, shape.heads_kv, shape.sq, shape.sk],
                "cus": cus,
                "mode": mode,
                "plans": [split.last_plan["kind"], whole.last_plan["kind"]],
                "scaled_ulp_split": round(su["split"], 3),
                "scaled_ulp_unsplit": round(su["whole"], 3),
                "lse_vs_fp64_ulps_split": round(lse_ulps(lse["split"].numpy(), ref.lse, ref.lse), 2),
                "lse_vs_fp64_ulps_unsplit": round(lse_ulps(lse["whole"].numpy(), ref.lse, ref.lse), 2),
                "lse_vs_fp64_abs_split": float(np.abs(lse["split"].numpy() - ref.lse).max()),
                "lse_split_vs_unsplit_ulps": round(
                    lse_ulps(lse["split"].numpy(), lse["whole"].numpy().astype(np.float64), ref.lse), 2
                ),
                "equal_bits": round(float((outs["split"] == outs["whole"]).mean()), 3),
            }
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
