"""How each shape family's ratio to a baseline moves between runs: per family and mode, the lower
layout's speedup in each bundle (perf_table.py's family table), its range over the bundles, and in
how many runs it read below 1.00. A family whose sign changes between runs of the same kernel is
at parity within the device's run-to-run spread, which one run's table cannot say.

    python benchmarks/h200/family_spread.py BUNDLE.json BUNDLE.json ... [--baseline sdpa_cudnn]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf_table import family, family_order, lower_layout, perf_results, speedup

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from regress.facts.results import ROUNDING_MODES


def spread(bundles: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """One row per (family, mode) timed in every bundle: the lower layout's speedup per bundle, in
    the bundles' order, with its min, max and the runs below 1.00."""
    lows = [lower_layout(perf_results(b), baseline) for b in bundles]
    fams = family_order(family(r["params"]) for low in lows for r in low.values())
    rows = []
    for fam in fams:
        for mode in ROUNDING_MODES:
            timed = [low[(fam, mode)] for low in lows if (fam, mode) in low]
            if len(timed) < len(lows):  # not in every bundle
                continue
            # lower_layout keeps only rows that have a speedup, so none is dropped here
            values = [x for r in timed if (x := speedup(r, baseline)) is not None]
            rows.append(
                {
                    "family": fam,
                    "mode": mode,
                    "ratios": values,
                    "min": min(values),
                    "max": max(values),
                    "runs_below_1": sum(x < 1.0 for x in values),
                }
            )
    return rows


def table(rows: list[dict[str, Any]], runs: int, baseline: str) -> str:
    lines = [
        f"| family (lower layout) vs {baseline} | mode | per run | min – max | runs < 1.00 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        per_run = " / ".join(f"{x:.3f}" for x in r["ratios"])
        lines.append(
            f"| {r['family']} | {r['mode']} | {per_run} | {r['min']:.3f} – {r['max']:.3f} "
            f"| {r['runs_below_1']} of {runs} |"
        )
    flips = sorted({r["family"] for r in rows if 0 < r["runs_below_1"] < runs})
    always = sorted({r["family"] for r in rows if r["runs_below_1"] == runs})
    lines += [
        "",
        f"below 1.00 in some runs but not all: {', '.join(flips) or 'none'}",
        f"below 1.00 in every run: {', '.join(always) or 'none'}",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="+", type=Path)
    ap.add_argument("--baseline", default="sdpa_cudnn")
    args = ap.parse_args()
    bundles = []
    for path in args.bundles:
        try:
            bundles.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"family_spread: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    rows = spread(bundles, args.baseline)
    if not rows:
        print(f"family_spread: no family has a {args.baseline} speedup in every bundle", file=sys.stderr)
        return 2
    print(table(rows, len(bundles), args.baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
