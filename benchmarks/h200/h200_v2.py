"""Issue 40 on the H200: the suites' ABI v2 cases (GQA, causal masks, varlen) of the CUDA library,
with their own code (regress.run.suites), and a table of them against the issue's bars.

  python benchmarks/h200/h200_v2.py --out DIR [--suites ulp,determinism,perf,e2e] [--iterations N]
      [--lib LIB] [--ab-lib OTHER_LIB --ab-label NAME]   (OTHER_LIB timed in the A/B phase of each perf case)
  python benchmarks/h200/h200_v2.py --table DIR/v2-results.json.gz     (the table of a run again)

Runs every case of the named suites whose params carry a v2 axis (hkv, mask, seqs): ULP and
determinism gate the contract; perf times ours, cuDNN and FlashAttention-2 through SDPA (is_causal,
causal_lower_right, enable_gqa) and, for the packed batches, FlashAttention-2's varlen path, in the
same interleaved rounds; e2e runs the Llama-3-8B layer. Writes DIR/v2-results.json.gz (every result
with its samples) and prints the table last: per perf family and mode our TFLOP/s of unmasked work
and our speedup over each baseline, the geomeans per mode by group, and the bars.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from regress.facts.cases import spec_shape  # noqa: E402
from regress.facts.results import CaseResult  # noqa: E402
from regress.facts.stats import geomean  # noqa: E402
from regress.kernel import load_library  # noqa: E402
from regress.kernel.baselines import available_baselines  # noqa: E402
from regress.native.build import build_kernel  # noqa: E402
from regress.run.suites import SuiteContext, get_suite  # noqa: E402

V2_KEYS = {"hkv", "mask", "seqs"}


def group_of(r: CaseResult) -> str:
    """The issue's bar a perf family counts toward."""
    s = spec_shape(r.case)
    if s.seqs is not None:
        return "varlen"
    if s.sq <= 64:
        return "decode"
    return "causal" if s.mask != "none" else "gqa"


def ab_speed(r: CaseResult) -> float:
    """With an A/B arm (--ab-lib, the suite context's ab_baseline): the other build's time over ours
    by the statistic the A/B verdict judges (regress.detect.paired.paired_ratio, both listings where
    the run timed them); > 1: ours faster. NaN without one."""
    from regress.detect.paired import paired_ratio, swap_point
    from regress.facts.results import AB_BASELINE_SAMPLE, AB_CANDIDATE_SAMPLE, AB_SWAP_METRIC

    base, cand = r.samples.get(AB_BASELINE_SAMPLE, []), r.samples.get(AB_CANDIDATE_SAMPLE, [])
    return 1.0 / paired_ratio(base, cand, swap_at=swap_point(r.metrics.get(AB_SWAP_METRIC)))[0]


def table(results: list[CaseResult]) -> list[str]:
    perf = [r for r in results if r.case.suite == "perf" and r.status == "pass"]
    head = "| family | mode | ours TFLOP/s | ours ms | vs cuDNN | vs FA2 | vs FA2 varlen | A/B | plan |"
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    by: dict[tuple[str, str, str], list[float]] = {}
    for r in perf:
        m = r.metrics
        fam = r.case.name.replace(f"_bshd_{r.case.params['mode']}", "")
        cells = [m.get(f"speedup_vs_{b}", math.nan) for b in ("sdpa_cudnn", "sdpa_flash", "fa2_varlen")]
        lines.append(
            f"| {fam} | {r.case.params['mode']} | {m['tflops']:.0f} | {m['p50_ms']:.3f} | "
            + " | ".join("–" if not math.isfinite(c) else f"{c:.3f}" for c in [*cells, ab_speed(r)])
            + f" | {m.get('plan_kind', '')} |"
        )
        for b, c in zip(("sdpa_cudnn", "sdpa_flash", "fa2_varlen"), cells, strict=True):
            by.setdefault((group_of(r), r.case.params["mode"], b), []).append(c)
    lines += ["", "| group | mode | baseline | geomean | min | families |", "|---|---|---|---|---|---|"]
    for (g, mode, b), xs in sorted(by.items()):
        fin = [x for x in xs if math.isfinite(x)]
        if fin:
            lines.append(
                f"| {g} | {mode} | {b} | {geomean(fin) or math.nan:.3f} | {min(fin):.3f} | {len(fin)} |"
            )
    long_causal = [
        r.metrics["tflops"]
        for r in perf
        if group_of(r) == "causal" and spec_shape(r.case).sk >= 8192 and spec_shape(r.case).sq >= 8192
    ]
    lines.append("")
    lines.append(
        "bars: causal and GQA >= 1.05x cuDNN geomean per mode, every family >= 1.00x; causal at S >= 8k "
        f">= 640 TFLOP/s (measured {min(long_causal):.0f}-{max(long_causal):.0f}); varlen >= 1.5x FA2 "
        "varlen geomean, every family >= 1.2x; decode GQA 8k >= 1.00x cuDNN"
        if long_causal
        else "bars: (no causal S >= 8k result)"
    )
    return lines


def load_results(path: Path) -> list[CaseResult]:
    """The results a run wrote (v2-results.json.gz), for the table again."""
    from regress.facts.results import CaseSpec

    with gzip.open(path, "rt") as f:
        blob = json.load(f)
    return [
        CaseResult(
            case=CaseSpec(suite=x["suite"], name=x["case"], params=x["params"]),
            status=x["status"],
            metrics=x["metrics"],
            samples=x["samples"],
            message=x["message"],
        )
        for x in blob
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--table", type=Path, default=None, help="print the table of a v2-results.json.gz and stop"
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--suites", default="ulp,determinism,perf,e2e")
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--lib", type=Path, default=None, help="a built library (default: regress build's)")
    ap.add_argument(
        "--ab-lib", type=Path, default=None, help="a second build timed in each perf case's A/B phase"
    )
    ap.add_argument("--ab-label", default="", help="the A/B build's name in the results")
    args = ap.parse_args()
    if args.table is not None:
        print("\n".join(table(load_results(args.table))))
        return 0
    if args.out is None:
        ap.error("--out is required (or --table FILE)")
    if os.environ.get("REGRESS_AB_BASELINE_LIB"):  # read before 6965d8b; ignoring it lost an A/B arm once
        ap.error("$REGRESS_AB_BASELINE_LIB is not read any more: pass the A/B build as --ab-lib")
    if args.ab_lib is not None and not args.ab_lib.is_file():
        ap.error(f"--ab-lib {args.ab_lib}: no such library")
    args.out.mkdir(parents=True, exist_ok=True)
    lib = load_library(args.lib or build_kernel("cuda").path)
    ctx = SuiteContext(
        library=lib,
        device="cuda",
        baselines=available_baselines("cuda"),
        quick=False,
        iterations=args.iterations,
        ab_baseline=str(args.ab_lib.resolve()) if args.ab_lib else None,
        ab_label=args.ab_label or (args.ab_lib.name if args.ab_lib else ""),
    )
    ab = f" A/B against {ctx.ab_baseline}" if ctx.ab_baseline else ""
    print(f"{lib!r} baselines={[b.name for b in ctx.baselines]}{ab}", flush=True)
    results: list[CaseResult] = []
    for name in args.suites.split(","):
        suite = get_suite(name)
        for spec in suite.cases(ctx):
            if not V2_KEYS & set(spec.params):
                continue
            t0 = time.perf_counter()
            r = suite.run_case(ctx, spec)
            results.append(r)
            m = r.metrics
            shown = {
                k: m[k]
                for k in ("scaled_ulp_max", "nonfinite_mismatches", "distinct_hashes", "tflops")
                if k in m
            }
            shown |= {k: round(v, 3) for k, v in m.items() if k.startswith("speedup_vs_")}
            print(
                f"{name:11s} {spec.name[:70]:70s} {r.status:5s} {time.perf_counter() - t0:6.1f}s {shown} "
                f"{r.message[:160]}",
                flush=True,
            )
    blob = [{"case": r.case.name, "suite": r.case.suite, "params": r.case.params, "status": r.status,
             "message": r.message, "metrics": r.metrics, "samples": r.samples} for r in results]  # fmt: skip
    with gzip.open(args.out / "v2-results.json.gz", "wt") as f:
        json.dump(blob, f, default=str)
    bad = [r for r in results if r.status not in ("pass",)]
    print(f"\n{len(results)} v2 cases: {sum(r.status == 'pass' for r in results)} pass, {len(bad)} not")
    for r in bad:
        print(f"  {r.case.suite} {r.case.name}: {r.status} {r.message[:300]}")
    print("\n".join(table(results)))
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
