"""A/A controls for a perf A/B verdict: is a few-percent gap between two builds the builds, or the
measurement? Times named libraries in pairs, each pair a run of its own with the perf suite's method
(interleaved ABBA rounds behind a GPU spin, input sets rotated past the L2, regress.run.suites.timing)
and judges each pair with the gate's statistic (median of paired ABBA block log-ratios,
regress.detect.paired, and its Wilcoxon p). Name a byte-identical copy of a library as a second
library (a distinct file, so the loader gives it its own module) and the pair is an A/A: the spread
of A/A ratios is what the measurement alone produces for that shape.

  python benchmarks/h200/h200_ab_control.py --lib old=OLD.so --lib old2=COPY.so --lib new=NEW.so \
      --pair old:old2 --pair old:new --shape 2:40:1024:77 --layout bhsd --rounds 200 --out DIR

Writes DIR/ab_control.json (every raw sample) and prints a table: pair, shape, mode, each arm's
median, the paired ratio (second over first: > 1 the second is slower) and its p.
--dry-run: the CPU backend and its library (checks the harness without a GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from regress.facts.cases import Shape  # noqa: E402
from regress.facts.results import LAYOUTS, ROUNDING_MODES  # noqa: E402


def parse_lib(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--lib {text!r} is not NAME=PATH")
    return name, Path(path)


def parse_pair(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(":")
    if not sep or not a or not b or a == b:
        raise argparse.ArgumentTypeError(f"--pair {text!r} is not FIRST:SECOND (two names)")
    return a, b


def parse_shape(text: str) -> Shape:
    parts = text.split(":")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"--shape {text!r} is not B:H:SQ:SK (positive integers)")
    b, h, sq, sk = (int(p) for p in parts)
    return Shape(b, h, sq, sk)


def judge(first: list[float], second: list[float]) -> tuple[float, float]:
    """second over first (> 1: second slower) and its Wilcoxon p: the gate's case statistic."""
    from regress.detect.paired import paired_ratio

    return paired_ratio(first, second)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", type=parse_lib, action="append", required=True, help="NAME=PATH (repeat)")
    ap.add_argument("--pair", type=parse_pair, action="append", required=True, help="FIRST:SECOND (repeat)")
    ap.add_argument("--shape", type=parse_shape, action="append", required=True, help="B:H:SQ:SK (repeat)")
    ap.add_argument("--layout", choices=LAYOUTS, default="bhsd")
    ap.add_argument("--modes", default="rtne", help="comma-separated rounding modes")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--prime-cycles", type=int, default=None, help="GPU spin before each round (default: the suite's)"
    )
    ap.add_argument(
        "--block-seed",
        type=int,
        default=None,
        help="random ABBA/BAAB orientation per block (default: alternate)",
    )
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    libs_arg = dict(args.lib)
    if len(libs_arg) != len(args.lib):
        ap.error("--lib names must differ")
    for a, b in args.pair:
        for n in (a, b):
            if n not in libs_arg:
                ap.error(f"--pair names {n!r}, which no --lib defines")
    modes = tuple(filter(None, args.modes.split(",")))
    if not modes or any(m not in ROUNDING_MODES for m in modes):
        ap.error(f"--modes {args.modes!r}: each one of {', '.join(ROUNDING_MODES)}")
    if args.rounds < 2:
        ap.error("--rounds must be >= 2 (one ABBA block)")

    import torch

    from regress.facts.stats import median
    from regress.kernel import load_library
    from regress.run.suites import SuiteContext
    from regress.run.suites.common import make_inputs, output_like
    from regress.run.suites.perf import input_sets, warmup_iterations
    from regress.run.suites.timing import interleaved_rounds

    dev = "cpu" if args.dry_run else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (--dry-run checks the harness on the CPU backend)", file=sys.stderr)
        return 2
    libs = {name: load_library(path) for name, path in libs_arg.items()}  # in --lib order
    ctx = SuiteContext(library=next(iter(libs.values())), device=dev, baselines=[], quick=False)
    warm = warmup_iterations(ctx)
    method: dict[str, Any] = {"block_seed": args.block_seed}  # the round loop's variant, every pair alike
    if args.prime_cycles is not None:
        method["prime_cycles"] = args.prime_cycles
    rows: list[dict[str, Any]] = []
    for shape in args.shape:
        n_sets = input_sets(ctx, shape)
        sets = [make_inputs(shape, args.layout, seed=7000 + i, device=dev) for i in range(n_sets)]
        outs = [output_like(s[0]) for s in sets]
        for mode in modes:

            def call(lib: Any, mode: str = mode, sets: list[Any] = sets, outs: list[Any] = outs) -> Any:
                def fn(rnd: int) -> object:
                    q, k, v = sets[rnd % len(sets)]
                    return lib.forward(q, k, v, layout=args.layout, rounding=mode, out=outs[rnd % len(sets)])

                return fn

            for first, second in args.pair:
                s = interleaved_rounds(
                    dev,
                    [(first, call(libs[first])), (second, call(libs[second]))],
                    warm,
                    args.rounds,
                    thread_clock=True,
                    **method,
                )
                ratio, p = judge(s[first], s[second])
                rows.append(
                    {
                        "pair": f"{first}:{second}",
                        "shape": [shape.b, shape.h, shape.sq, shape.sk],
                        "layout": args.layout,
                        "mode": mode,
                        "input_sets": n_sets,
                        "method": {"prime_cycles": args.prime_cycles, "block_seed": args.block_seed},
                        "median_ms": {k: median(v) for k, v in s.items()},
                        "min_ms": {k: min(v) for k, v in s.items()},
                        "second_over_first": ratio,
                        "wilcoxon_p": p,
                        "samples_ms": s,
                    }
                )
                r = rows[-1]
                print(
                    f"| {r['pair']} | {shape.dims()} {args.layout} | {mode} | "
                    f"{1e3 * r['median_ms'][first]:.2f} | {1e3 * r['median_ms'][second]:.2f} | "
                    f"{ratio:.4f} | {p:.2g} |",
                    flush=True,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ab_control.json").write_text(
        json.dumps({"device": dev, "libs": {k: str(v) for k, v in libs_arg.items()}, "rows": rows})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
