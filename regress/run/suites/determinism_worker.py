"""Second-process determinism check: rebuild the inputs from the seed, launch, print the hashes.

    python -m regress.run.suites.determinism_worker --lib PATH --seed 42 --shape 1,2,256,256 \
        --layout bshd --mode rtne [--device cpu] [--input realistic] [--launches 1] [--out FILE]

Prints one JSON line {"hashes": [...]} on stdout; --out also writes the last output's raw bytes
(in the layout of Q), so the parent can count differing elements, not just see that hashes differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from regress.facts.cases import Shape
from regress.facts.results import LAYOUTS, ROUNDING_MODES
from regress.run.suites.common import INPUT_KINDS, bits, make_inputs, output_like, sha256_bits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m regress.run.suites.determinism_worker")
    ap.add_argument("--lib", required=True, help="path of the kernel library")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--shape", required=True, help="B,H,Sq,Sk")
    ap.add_argument("--layout", choices=LAYOUTS, default="bshd")
    ap.add_argument("--mode", choices=ROUNDING_MODES, default="rtne")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--input", choices=INPUT_KINDS, default="realistic")
    ap.add_argument("--launches", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from regress.kernel import load_library

    lib = load_library(args.lib)
    shape = Shape.parse(args.shape)
    q, k, v = make_inputs(shape, args.layout, seed=args.seed, device=args.device, kind=args.input)
    hashes: list[str] = []
    out = output_like(q)
    for _ in range(max(1, args.launches)):
        lib.forward(q, k, v, layout=args.layout, rounding=args.mode, out=out)
        if args.device != "cpu":
            import torch

            torch.cuda.synchronize()
        hashes.append(sha256_bits(out))
    if args.out is not None:
        args.out.write_bytes(bits(out).cpu().numpy().tobytes())
    print(json.dumps({"hashes": hashes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
