"""Issue 40's close on the H200 (benchmarks/h200/h200_issue40_close.sh runs it): the GQA decode against
an 8k cache, the default library (v2 kernels) against a -DRA_CUDA_GQA_ROWS=1 build (the decode as a
dense call, kernel/common/gqa_rows.h) and cuDNN, and the short table of the whole close.

  python benchmarks/h200/h200_issue40_close.py decode --out DIR [--rows-lib SO] [--iterations N]
      [--shapes B:H:HKV:SK,...] [--modes rtne,rtna,rtz] [--dry-run]
  python benchmarks/h200/h200_issue40_close.py table DIR       (the close's short table, from DIR's files)

decode: per shape and mode, the three arms in the same interleaved rounds (regress.run.suites.timing;
input sets rotated past the L2 as the perf suite does), each arm's median, the rows build's speed over
the default's as the median over paired ABBA blocks (regress.detect.paired, the gate's statistic),
both against cuDNN (SDPA, enable_gqa, causal_lower_right spelled as SDPA takes one row); and the bits:
the two builds' outputs compared (equal fraction, largest ULP gap) and each against the fp64 reference
under the contract (scaled ULP <= 1.5 / 1.5 / 2.0, NaN/Inf positions). Writes DIR/decode.json.
--dry-run runs the same code on the CPU backend (a dry run: both arms the CPU library unless
--rows-lib names another, SDPA on the CPU as the baseline) so the harness is checked without a GPU.

table: one line per item of the close from what DIR holds (decode.json, gate.json of `regress gate
--ab --json`, the kept bundles ab-RUN.json.gz and nightly-RUN.json.gz), and the decision rule's
verdict for the flag.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from regress.facts.cases import Shape  # noqa: E402
from regress.facts.metrics import scaled_ulp_limit  # noqa: E402
from regress.facts.results import ROUNDING_MODES  # noqa: E402

# issue 40's decode rows: 16 sequences (the suite's case), and 1 and 4, where the v2 kernel's 8 and 32
# packed tiles leave most of the 132 SMs idle and the dense view splits over keys
SHAPES: tuple[Shape, ...] = tuple(
    Shape(b, 32, 1, 8192, hkv=8, mask="causal_bottom_right") for b in (16, 1, 4)
)
ROWS_FLAG = "-DRA_CUDA_GQA_ROWS=1"


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """'B:H:HKV:SK,...' -> decode shapes (one query row, causal bottom-right, as the suite's)."""
    out = []
    for item in filter(None, text.split(",")):
        parts = item.split(":")
        if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"shape {item!r} is not B:H:HKV:SK (positive integers)")
        b, h, hk, sk = (int(p) for p in parts)
        if h % hk:
            raise argparse.ArgumentTypeError(f"shape {item!r}: HKV={hk} does not divide H={h}")
        out.append(Shape(b, h, 1, sk, hkv=hk, mask="causal_bottom_right"))
    if not out:
        raise argparse.ArgumentTypeError("no shape given")
    return tuple(out)


def parse_modes(text: str) -> tuple[str, ...]:
    modes = tuple(filter(None, text.split(",")))
    bad = [m for m in modes if m not in ROUNDING_MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"modes {text!r}: each one of {', '.join(ROUNDING_MODES)}")
    return modes


def paired_speed(baseline: list[float], candidate: list[float]) -> float:
    """baseline time over candidate time, the median over paired ABBA blocks (> 1: candidate faster)."""
    from regress.detect.paired import block_log_ratios
    from regress.facts.stats import median

    d = block_log_ratios(baseline, candidate)
    return math.exp(-median(d)) if d else math.nan


def make_runners(
    libs: dict[str, Any],
    base: list[Any],
    sets: list[Any],
    outs: dict[str, list[Any]],
    layout: str,
    mode: str,
    mask: str,
) -> list[tuple[str, Any]]:
    """The timed calls of one row: each build into its own outputs, then each baseline (at its own
    rounding where it lacks `mode`), every call on the round's input set."""

    def build_call(lib: Any, arm: str) -> Any:
        def call(i: int) -> object:
            q, k, v = sets[i % len(sets)]
            return lib.forward(q, k, v, layout=layout, rounding=mode, out=outs[arm][i % len(sets)], mask=mask)

        return call

    def baseline_call(bl: Any) -> Any:
        bmode = mode if mode in bl.modes else bl.modes[0]

        def call(i: int) -> object:
            q, k, v = sets[i % len(sets)]
            return bl(q, k, v, layout=layout, rounding=bmode, mask=mask)

        return call

    runners = [(arm, build_call(lib, arm)) for arm, lib in libs.items()]
    return runners + [(f"baseline:{bl.name}", baseline_call(bl)) for bl in base]


def decode(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from regress.facts import numerics as nm
    from regress.facts.stats import median
    from regress.kernel import load_library, reference
    from regress.kernel.baselines import available_baselines
    from regress.native.build import build_kernel
    from regress.run.suites import SuiteContext
    from regress.run.suites.common import make_inputs, output_like
    from regress.run.suites.perf import input_sets, warmup_iterations
    from regress.run.suites.timing import interleaved_rounds

    dev = "cpu" if args.dry_run else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: --dry-run runs the harness on the CPU backend", file=sys.stderr)
        return 2
    default = load_library(build_kernel(dev).path)
    if args.rows_lib is not None:
        rows = load_library(args.rows_lib)
    elif dev == "cuda":
        rows = load_library(build_kernel("cuda", extra_flags=(ROWS_FLAG,)).path)
    else:
        rows = default  # the CPU backend has no such flag: the dry run's rows arm is an A/A
    base = [bl for bl in available_baselines(dev) if bl.name in ("sdpa_cudnn", "sdpa_cpu")]
    ctx = SuiteContext(library=default, device=dev, baselines=base, quick=False, iterations=args.iterations)
    iters = args.iterations
    warm = warmup_iterations(ctx)
    print(f"default {default!r}\nrows    {rows!r}\nbaseline {[b.name for b in base]}", flush=True)
    rows_out: list[dict[str, Any]] = []
    for shape in args.shapes:
        layout = "bshd"
        n_sets = input_sets(ctx, shape)
        sets = [make_inputs(shape, layout, seed=1000 + i, device=dev) for i in range(n_sets)]
        outs = {arm: [output_like(s[0]) for s in sets] for arm in ("default", "rows")}
        ref, mag = reference.reference_attention(*sets[0], layout=layout, mask=shape.mask)  # type: ignore[arg-type]
        for mode in args.modes:
            kw = dict(layout=layout, rounding=mode, mask=shape.mask)
            plans = {
                arm: (lib.plan(shape.b, shape.h, 1, shape.sk, heads_kv=shape.heads_kv, **kw) or {}).get(
                    "kind", "?"
                )
                for arm, lib in (("default", default), ("rows", rows))
            }

            runners = make_runners(
                {"default": default, "rows": rows}, base, sets, outs, layout, mode, shape.mask
            )
            samples = interleaved_rounds(dev, runners, warm, iters, thread_clock=True)
            # bits: both builds on set 0, against each other and the fp64 reference
            o = {arm: fn(0) for arm, fn in runners[:2]}
            if dev == "cuda":
                torch.cuda.synchronize()
            b = {arm: reference.to_bhsd_bits(t, layout) for arm, t in o.items()}  # type: ignore[arg-type]
            equal = float(np.mean(b["default"] == b["rows"]))
            gap = int(np.max(np.abs(nm.ulp_distance(b["default"], b["rows"])))) if equal < 1.0 else 0
            limit = scaled_ulp_limit(mode) or math.inf
            su = {arm: float(np.max(nm.scaled_ulp(bits, ref, mag))) for arm, bits in b.items()}
            ref_bits = nm.reference_bits(ref, mode)
            nonfinite_ok = {
                arm: bool(np.array_equal(nm.is_nonfinite_bits(bits), nm.is_nonfinite_bits(ref_bits)))
                for arm, bits in b.items()
            }
            med = {k: median(v) for k, v in samples.items()}
            row: dict[str, Any] = {
                "shape": f"({shape.b}, {shape.h}/{shape.heads_kv}, 1, {shape.sk})",
                "mode": mode,
                "plans": plans,
                "rounds": iters,
                "input_sets": n_sets,
                "median_ms": med,
                "rows_speed_vs_default": paired_speed(samples["default"], samples["rows"]),
                "bits_equal_fraction": equal,
                "max_ulp_gap": gap,
                "scaled_ulp_max": su,
                "nonfinite_positions_equal": nonfinite_ok,
                "contract_limit": limit,
                "contract_ok": all(su[a] <= limit and nonfinite_ok[a] for a in su),
            }
            for bl in base:
                key = f"baseline:{bl.name}"
                row[f"default_vs_{bl.name}"] = paired_speed(samples[key], samples["default"])
                row[f"rows_vs_{bl.name}"] = paired_speed(samples[key], samples["rows"])
            rows_out.append(row)
            print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode.json").write_text(json.dumps({"device": dev, "rows": rows_out}, indent=1))
    print("\n".join(decode_table(rows_out)))
    return 0 if all(r["contract_ok"] for r in rows_out) else 1


def decode_table(rows: list[dict[str, Any]]) -> list[str]:
    bl = next((k.removeprefix("default_vs_") for r in rows for k in r if k.startswith("default_vs_")), None)
    lines = [
        f"| decode | mode | default µs | rows µs | rows / default | default vs {bl} | rows vs {bl} | "
        "bits equal | max gap | scaled ULP d / r | contract | plans d / r |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r["median_ms"]
        lines.append(
            f"| {r['shape']} | {r['mode']} | {1e3 * m['default']:.1f} | {1e3 * m['rows']:.1f} | "
            f"{r['rows_speed_vs_default']:.3f} | {r.get(f'default_vs_{bl}', math.nan):.3f} | "
            f"{r.get(f'rows_vs_{bl}', math.nan):.3f} | {100 * r['bits_equal_fraction']:.1f} % | "
            f"{r['max_ulp_gap']} | {r['scaled_ulp_max']['default']:.2f} / "
            f"{r['scaled_ulp_max']['rows']:.2f} | "
            f"{'ok' if r['contract_ok'] else 'FAIL'} | {r['plans']['default']} / {r['plans']['rows']} |"
        )
    return lines


def verdict(rows: list[dict[str, Any]]) -> str:
    """docs/perf-notes.md's rule: the flag becomes the default only if the rows build is >= 1.00x the
    default on every decode row and both builds' bits meet the contract."""
    if not rows:
        return "no decode rows: no verdict"
    slow = [f"{r['shape']} {r['mode']}" for r in rows if not r["rows_speed_vs_default"] >= 1.0]
    bad = [f"{r['shape']} {r['mode']}" for r in rows if not r["contract_ok"]]
    if slow or bad:
        why = f"slower: {', '.join(slow) or 'none'}; contract: {', '.join(bad) or 'ok'}"
        return f"keep RA_CUDA_GQA_ROWS=0 ({why})"
    return "make RA_CUDA_GQA_ROWS=1 the default (>= 1.00x on every decode row, contract met)"


def close_table(out: Path) -> list[str]:
    """The short table of the close, from what `out` holds; an item whose files are missing says so."""
    lines = ["| item | result |", "|---|---|"]
    dec = out / "decode.json"
    rows: list[dict[str, Any]] = json.loads(dec.read_text())["rows"] if dec.is_file() else []
    if rows:
        speeds = [r["rows_speed_vs_default"] for r in rows]
        base = [v for r in rows for k, v in r.items() if k.startswith("rows_vs_")]
        lines.append(
            f"| (i) decode, rows / default | {min(speeds):.3f}-{max(speeds):.3f}x over {len(rows)} rows; "
            f"rows vs baseline {min(base, default=math.nan):.3f}-{max(base, default=math.nan):.3f}x |"
        )
        lines.append(
            f"| (i) decode, contract | {sum(r['contract_ok'] for r in rows)} of {len(rows)} rows ok |"
        )
    else:
        lines.append("| (i) decode | no decode.json |")
    gate = out / "gate.json"
    if gate.is_file():
        g = json.loads(gate.read_text())
        lines.append(f"| (ii) gate A/B vs 4cc9352 | {gate_summary(g)} |")
    else:
        lines.append("| (ii) gate A/B vs 4cc9352 | no gate.json |")
    for tag in ("ab", "nightly"):  # the bundles the calls kept (h200_issue40_close.sh's keep_bundle)
        for path in sorted(glob.glob(str(out / f"{tag}-*.json.gz"))):
            with gzip.open(path, "rt") as f:
                lines.append(f"| bundle {Path(path).name} | {bundle_summary(json.load(f))} |")
    dry = dec.is_file() and json.loads(dec.read_text()).get("device") != "cuda"
    lines.append(f"| verdict | {'none: a dry run off the H200' if dry else verdict(rows)} |")
    return lines


def gate_summary(g: dict[str, Any]) -> str:
    """`regress gate --ab --json`'s verdict and counts, whatever further keys it holds."""
    keys = ("verdict", "status", "decision", "exit_code")
    head = ", ".join(f"{k} {g[k]}" for k in keys if k in g and not isinstance(g[k], (dict, list)))
    cases = g.get("cases")
    if isinstance(cases, list):
        head += f"; {len(cases)} cases"
    return head or ", ".join(sorted(g))[:200]


def bundle_summary(b: dict[str, Any]) -> str:
    by: dict[tuple[str, str], int] = {}
    for r in b.get("results", []):
        key = (r.get("suite", "?"), r.get("status", "?"))
        by[key] = by.get(key, 0) + 1
    run = b.get("run", {})
    counts = "; ".join(f"{s} {st} {n}" for (s, st), n in sorted(by.items()))
    return f"run {run.get('id', '?')} {run.get('status', '?')} exit {run.get('exit_code', '?')}: {counts}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("decode", help="the three arms on the decode rows; DIR/decode.json")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--rows-lib", type=Path, default=None, help=f"the {ROWS_FLAG} library (default: built)")
    d.add_argument("--iterations", type=int, default=100)
    d.add_argument("--shapes", type=parse_shapes, default=SHAPES, help="B:H:HKV:SK,... (default: issue 40's)")
    d.add_argument("--modes", type=parse_modes, default=tuple(ROUNDING_MODES))
    d.add_argument("--dry-run", action="store_true", help="on the CPU backend, no GPU (checks the harness)")
    t = sub.add_parser("table", help="the close's short table from DIR's files")
    t.add_argument("dir", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "table":
        print("\n".join(close_table(args.dir)))
        return 0
    if args.iterations < 2:
        ap.error("--iterations must be >= 2 (one ABBA block)")
    return decode(args)


if __name__ == "__main__":
    raise SystemExit(main())
