"""Issue 40's close on the H200 (benchmarks/h200/h200_issue40_close.sh runs it): the GQA decode against
an 8k cache, our default library (RA_CUDA_GQA_ROWS=1 since call 1 of 2026-12-05: the decode as a dense
call, kernel/common/gqa_rows.h) against a -DRA_CUDA_GQA_ROWS=0 build (the v2 kernels) and cuDNN, and the
short table of the whole close.

  python benchmarks/h200/h200_issue40_close.py decode --out DIR [--v2-lib SO] [--iterations N]
      [--shapes B:H:HKV:SK,...] [--modes rtne,rtna,rtz] [--dry-run]
  python benchmarks/h200/h200_issue40_close.py table DIR       (the close's short table, from DIR's files)

decode: per shape and mode, ours against each other arm in a run of its own (two arms, interleaved
ABBA rounds, regress.run.suites.timing), every arm on its own copies of the input sets, rotated past
the L2 as the perf suite does. So each arm takes each position of a block equally often, and none
reads a K/V cache the arm before it left in the L2. (Call 1 timed three arms in one round: the middle arm
always ran second, on a cache the first had just read, and a 33.5 MB cache fits the H200's 50 MB L2.)
Reported: each arm's median, and ours over each other arm as the median over paired ABBA blocks
(regress.detect.paired, the gate's statistic), cuDNN being SDPA with enable_gqa and causal_lower_right
spelled as SDPA takes one row. Bits: the two builds' outputs compared (equal fraction, largest ULP gap),
each against the fp64 reference under the contract (scaled ULP <= 1.5 / 1.5 / 2.0, NaN/Inf
positions). DIR/decode.json keeps every raw sample. --dry-run runs the same code on the CPU backend (a
dry run: both builds are the CPU library unless --v2-lib names another, SDPA on the CPU as the
baseline), so the harness is checked without a GPU.

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
NO_ROWS_FLAG = "-DRA_CUDA_GQA_ROWS=0"  # the v2 kernels for a GQA decode (the default is 1)


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
    from regress.detect.paired import paired_ratio

    return 1.0 / paired_ratio(baseline, candidate)[0]


def pair_runners(
    arms: dict[str, Any],
    sets: dict[str, list[Any]],
    outs: dict[str, list[Any]],
    layout: str,
    mode: str,
    mask: str,
) -> dict[str, Any]:
    """One timed call per arm, each on the round's input set of its own copy: a build is a library
    (lib.forward into its own outputs), a baseline a regress.kernel.baselines entry (at its own
    rounding where it lacks `mode`). Own copies, so no arm finds the K/V cache the arm before it read in
    the L2 (a decode step's cache is cold: the other layers' traffic evicted it)."""

    def build_call(lib: Any, arm: str) -> Any:
        def call(i: int) -> object:
            q, k, v = sets[arm][i % len(sets[arm])]
            return lib.forward(
                q, k, v, layout=layout, rounding=mode, out=outs[arm][i % len(sets[arm])], mask=mask
            )

        return call

    def baseline_call(bl: Any, arm: str) -> Any:
        bmode = mode if mode in bl.modes else bl.modes[0]

        def call(i: int) -> object:
            q, k, v = sets[arm][i % len(sets[arm])]
            return bl(q, k, v, layout=layout, rounding=bmode, mask=mask)

        return call

    return {
        arm: (baseline_call(x, arm) if arm.startswith("baseline:") else build_call(x, arm))
        for arm, x in arms.items()
    }


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
    ours = load_library(build_kernel(dev).path)
    if args.v2_lib is not None:
        v2 = load_library(args.v2_lib)
    elif dev == "cuda":
        v2 = load_library(build_kernel("cuda", extra_flags=tuple(args.other_flags.split())).path)
    else:
        v2 = ours  # the CPU backend has no such flag: the dry run's v2 arm is an A/A
    base = [bl for bl in available_baselines(dev) if bl.name in ("sdpa_cudnn", "sdpa_cpu")]
    ctx = SuiteContext(library=ours, device=dev, baselines=base, quick=False, iterations=args.iterations)
    iters = args.iterations
    warm = warmup_iterations(ctx)
    print(f"ours {ours!r}\nv2   {v2!r}\nbaseline {[b.name for b in base]}", flush=True)
    rows_out: list[dict[str, Any]] = []
    for shape in args.shapes:
        layout = "bshd"
        n_sets = input_sets(ctx, shape)
        arms: dict[str, Any] = {"ours": ours, "v2": v2, **{f"baseline:{bl.name}": bl for bl in base}}
        # each arm its own copies of the same seeded sets (make_inputs is deterministic per seed)
        sets = {
            arm: [make_inputs(shape, layout, seed=1000 + i, device=dev) for i in range(n_sets)]
            for arm in arms
        }
        outs = {arm: [output_like(s[0]) for s in sets[arm]] for arm in ("ours", "v2")}
        ref, mag = reference.reference_attention(*sets["ours"][0], layout=layout, mask=shape.mask)  # type: ignore[arg-type]
        for mode in args.modes:
            kw = dict(layout=layout, rounding=mode, mask=shape.mask)
            plans = {
                arm: (lib.plan(shape.b, shape.h, 1, shape.sk, heads_kv=shape.heads_kv, **kw) or {}).get(
                    "kind", "?"
                )
                for arm, lib in (("ours", ours), ("v2", v2))
            }
            calls = pair_runners(arms, sets, outs, layout, mode, shape.mask)
            # two arms a run, ABBA: each arm takes each position of a block once, so the paired
            # statistic cancels a position's bias (a third arm would sit in the middle of every round)
            pairs = [("v2", "ours")] + [(b, "ours") for b in arms if b.startswith("baseline:")]
            samples: dict[str, dict[str, list[float]]] = {}
            for first, second in pairs:
                got = interleaved_rounds(
                    dev, [(a, calls[a]) for a in (first, second)], warm, iters, thread_clock=True
                )
                samples[f"{second} vs {first}"] = got
            # bits: both builds on set 0, against each other and the fp64 reference
            o = {arm: calls[arm](0) for arm in ("ours", "v2")}
            if dev == "cuda":
                torch.cuda.synchronize()
            b = {arm: reference.to_bhsd_bits(t, layout) for arm, t in o.items()}  # type: ignore[arg-type]
            equal = float(np.mean(b["ours"] == b["v2"]))
            gap = int(np.max(np.abs(nm.ulp_distance(b["ours"], b["v2"])))) if equal < 1.0 else 0
            limit = scaled_ulp_limit(mode) or math.inf
            su = {arm: float(np.max(nm.scaled_ulp(bits, ref, mag))) for arm, bits in b.items()}
            ref_bits = nm.reference_bits(ref, mode)
            nonfinite_ok = {
                arm: bool(np.array_equal(nm.is_nonfinite_bits(bits), nm.is_nonfinite_bits(ref_bits)))
                for arm, bits in b.items()
            }
            row: dict[str, Any] = {
                "shape": f"({shape.b}, {shape.h}/{shape.heads_kv}, 1, {shape.sk})",
                "mode": mode,
                "plans": plans,
                "rounds": iters,
                "input_sets": n_sets,
                "inputs": "each arm its own copies (cold L2 for every arm)",
                "median_ms": {pair: {a: median(v) for a, v in s.items()} for pair, s in samples.items()},
                "samples_ms": samples,
                "other_build": args.other_flags if args.v2_lib is None else str(args.v2_lib),
                "ours_speed_vs_v2": paired_speed(samples["ours vs v2"]["v2"], samples["ours vs v2"]["ours"]),
                "bits_equal_fraction": equal,
                "max_ulp_gap": gap,
                "scaled_ulp_max": su,
                "nonfinite_positions_equal": nonfinite_ok,
                "contract_limit": limit,
                "contract_ok": all(su[a] <= limit and nonfinite_ok[a] for a in su),
            }
            for bl in base:
                s = samples[f"ours vs baseline:{bl.name}"]
                row[f"ours_vs_{bl.name}"] = paired_speed(s[f"baseline:{bl.name}"], s["ours"])
            rows_out.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "samples_ms"}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decode.json").write_text(json.dumps({"device": dev, "rows": rows_out}, indent=1))
    print("\n".join(decode_table(rows_out)))
    return 0 if all(r["contract_ok"] for r in rows_out) else 1


def decode_table(rows: list[dict[str, Any]]) -> list[str]:
    bl = next((k.removeprefix("ours_vs_") for r in rows for k in r if k.startswith("ours_vs_")), None)
    # the other build: the v2 kernels (NO_ROWS_FLAG) unless the run named other flags or a library
    other = next((r["other_build"] for r in rows if r.get("other_build") not in (None, NO_ROWS_FLAG)), "v2")
    lines = [
        f"| decode | mode | ours µs | {other} µs | ours / other | ours µs | {bl} µs | ours vs {bl} | "
        "bits equal | max gap | scaled ULP ours / v2 | contract | plans ours / v2 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a = r["median_ms"]["ours vs v2"]
        c = r["median_ms"].get(f"ours vs baseline:{bl}", {})
        lines.append(
            f"| {r['shape']} | {r['mode']} | {1e3 * a['ours']:.1f} | {1e3 * a['v2']:.1f} | "
            f"{r['ours_speed_vs_v2']:.3f} | {1e3 * c.get('ours', math.nan):.1f} | "
            f"{1e3 * c.get(f'baseline:{bl}', math.nan):.1f} | {r.get(f'ours_vs_{bl}', math.nan):.3f} | "
            f"{100 * r['bits_equal_fraction']:.1f} % | {r['max_ulp_gap']} | "
            f"{r['scaled_ulp_max']['ours']:.2f} / {r['scaled_ulp_max']['v2']:.2f} | "
            f"{'ok' if r['contract_ok'] else 'FAIL'} | {r['plans']['ours']} / {r['plans']['v2']} |"
        )
    return lines


def verdict(rows: list[dict[str, Any]]) -> str:
    """docs/perf-notes.md's rule, now that RA_CUDA_GQA_ROWS=1 is the default (call 1 of 2026-12-05 met
    it): it stays the default only while it is >= 1.00x the v2 kernels (the =0 build) on every decode
    row and both builds' bits meet the contract."""
    if not rows:
        return "no decode rows: no verdict"
    slow = [f"{r['shape']} {r['mode']}" for r in rows if not r["ours_speed_vs_v2"] >= 1.0]
    bad = [f"{r['shape']} {r['mode']}" for r in rows if not r["contract_ok"]]
    if slow or bad:
        why = f"slower: {', '.join(slow) or 'none'}; contract: {', '.join(bad) or 'ok'}"
        return f"revert RA_CUDA_GQA_ROWS to 0 ({why})"
    return "keep RA_CUDA_GQA_ROWS=1 the default (>= 1.00x the v2 kernels on every decode row, contract met)"


def close_table(out: Path) -> list[str]:
    """The short table of the close, from what `out` holds; an item whose files are missing says so."""
    lines = ["| item | result |", "|---|---|"]
    dec = out / "decode.json"
    rows: list[dict[str, Any]] = json.loads(dec.read_text())["rows"] if dec.is_file() else []
    if rows:
        speeds = [r["ours_speed_vs_v2"] for r in rows]
        base = [v for r in rows for k, v in r.items() if k.startswith("ours_vs_")]
        lines.append(
            f"| (i) decode, ours / v2 kernels | {min(speeds):.3f}-{max(speeds):.3f}x over {len(rows)} rows; "
            f"ours vs baseline {min(base, default=math.nan):.3f}-{max(base, default=math.nan):.3f}x |"
        )
        lines.append(
            f"| (i) decode, contract | {sum(r['contract_ok'] for r in rows)} of {len(rows)} rows ok |"
        )
    else:
        lines.append("| (i) decode | no decode.json |")
    gate = out / "gate.json"
    if gate.is_file():
        g = json.loads(gate.read_text())
        against = (g.get("baseline") or {}).get("build") or "the baseline build"
        lines.append(f"| gate A/B against {against} | {gate_summary(g)} |")
    else:
        lines.append("| gate A/B | no gate.json |")
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
    d = sub.add_parser(
        "decode", help="ours against the v2 build and cuDNN on the decode rows; DIR/decode.json"
    )
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--v2-lib", type=Path, default=None, help="the other build's library (default: built)")
    d.add_argument(
        "--other-flags",
        default=NO_ROWS_FLAG,
        help=f"nvcc flags of the other build (default {NO_ROWS_FLAG}, the v2 kernels; or -DRA_CUDA_SPLIT=4)",
    )
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
