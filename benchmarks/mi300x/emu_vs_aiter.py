"""Our gfx942 code object against AITER v3's, both on hip-emu: the ULP suite's vs_aiter cases.

    python benchmarks/mi300x/emu_vs_aiter.py [--full] [--out FILE] [--aiter-wheel FILE]

Runs every `vs_aiter` case of the ULP suite (the quick set, or with --full the full one) on the
compile-only code object, writes one JSON row per case (status, seconds, metrics, message) to --out,
and prints a table: our scaled ULP and AITER's against fp64, the plain-ULP histogram between the two
outputs and their largest difference in scaled ULP, and whether their NaN/Inf positions and bits
are identical. CPU only; the full set takes
tens of minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from regress.native.build import build_kernel
from regress.run.runner import CaseOptions, make_context
from regress.run.suites import get_suite

HIST = ("0", "1", "2", "3", "gt3")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the full vs_aiter set, not the quick one")
    ap.add_argument("--out", type=Path, default=Path("emu-vs-aiter.json"))
    ap.add_argument("--aiter-wheel", help="the amd-aiter wheel (default: the cached or a downloaded one)")
    args = ap.parse_args()
    if args.aiter_wheel:
        os.environ["REGRESS_AITER_WHEEL"] = args.aiter_wheel
    art = build_kernel("hip", compile_only=True)
    ctx = make_context(art.path, "cpu", CaseOptions(quick=not args.full, seed=42, iterations=None))
    suite = get_suite("ulp")
    rows = []
    head = f"{'case':52s} {'status':6s} {'ours':>6s} {'aiter':>6s} {'max':>6s}"
    print(f"{head}  hist 0/1/2/3/>3            scaled  nf pos bits")
    for spec in (s for s in suite.cases(ctx) if s.params.get("peer")):
        t0 = time.perf_counter()
        r = suite.run_case(ctx, spec)
        m = r.metrics
        rows.append(
            {
                "name": spec.name,
                "status": r.status,
                "seconds": round(time.perf_counter() - t0, 1),
                "metrics": m,
                "message": r.message,
            }
        )
        if r.status != "pass":
            print(f"{spec.name:52s} {r.status:6s} {r.message}")
            continue
        hist = "/".join(str(m[f"vs_aiter:plain_ulp_hist_{k}"]) for k in HIST)
        print(
            f"{spec.name:52s} {r.status:6s} {m['scaled_ulp_max']:6.3f} {m['aiter:scaled_ulp_max']:6.3f} "
            f"{m['vs_aiter:plain_ulp_max']:6d}  {hist:26s} {m['vs_aiter:scaled_ulp_max']:6.3f} "
            f"{m['vs_aiter:nonfinite']:4d} "
            f"{m['vs_aiter:nonfinite_positions_identical']:3d} {m['vs_aiter:nonfinite_bits_identical']:4d}",
            flush=True,
        )
    args.out.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
