"""Prints the perf suite of one run bundle as a Markdown table (per shape, layout and mode: TFLOP/s
and speedup vs each baseline), then the geomean speedup per mode.

    python benchmarks/h200/perf_table.py benchmarks/headline/<bundle>.json
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from regress.facts.metrics import geomean
from regress.facts.results import ROUNDING_MODES


def perf_results(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    """The bundle's perf results that were timed (every status but skip): the rows of every table
    here and of benchmarks/h200/h200_ceiling.py."""
    return [r for r in bundle["results"] if r["suite"] == "perf" and r["status"] != "skip"]


def baselines_of(perf: list[dict[str, Any]]) -> list[str]:
    """The baselines some perf row has a speedup against, sorted."""
    return sorted(
        {k.removeprefix("speedup_vs_") for r in perf for k in r["metrics"] if k.startswith("speedup_vs_")}
    )


def family(params: dict[str, Any]) -> str:
    """A row's shape family: its (B,H,Sq,Sk), both layouts."""
    return f"{params['b']},{params['h']},{params['sq']},{params['sk']}"


def family_order(fams: Iterable[str]) -> list[str]:
    return sorted(set(fams), key=lambda f: [int(x) for x in f.split(",")])


def speedup(row: dict[str, Any], baseline: str) -> float | None:
    """The row's speedup against `baseline` (its p50 over ours), None when it has none."""
    s = row["metrics"].get(f"speedup_vs_{baseline}")
    return float(s) if isinstance(s, int | float) and not isinstance(s, bool) and s > 0 else None


def lower_layout(perf: list[dict[str, Any]], baseline: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(family, mode) -> the row of the layout with the lower speedup against `baseline`."""
    low: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
    for r in perf:
        s = speedup(r, baseline)
        key = (family(r["params"]), r["params"]["mode"])
        if s is not None and (key not in low or s < low[key][0]):
            low[key] = (s, r)
    return {key: r for key, (_, r) in low.items()}


def families(perf: list[dict[str, Any]], baselines: list[str]) -> None:
    """Per shape family (one (B,H,Sq,Sk), both layouts): the lower layout's speedup per mode, and
    how many families are below 1.00x in each mode."""
    low: dict[tuple[str, str, str], float] = {}
    for b in baselines:
        for (fam, mode), r in lower_layout(perf, b).items():
            low[(fam, mode, b)] = speedup(r, b) or math.nan
    fams = family_order(k[0] for k in low)
    modes = ROUNDING_MODES
    for b in baselines:
        print(f"\n| family (lower layout) vs {b} | " + " | ".join(modes) + " |")
        print("|---|" + "---|" * len(modes))
        for f in fams:
            cells = [f"{low[(f, m, b)]:.3f}×" if (f, m, b) in low else "—" for m in modes]
            print(f"| {f} | " + " | ".join(cells) + " |")
        below = [sum(1 for f in fams if low.get((f, m, b), 2.0) < 1.0) for m in modes]
        worst = [min((low[(f, m, b)], f) for f in fams if (f, m, b) in low) for m in modes]
        cells = [f"{n} of {len(fams)}; {w[0]:.3f}× ({w[1]})" for n, w in zip(below, worst, strict=True)]
        print("| below 1.00× / min | " + " | ".join(cells) + " |")


def main(path: str) -> None:
    bundle = json.loads(Path(path).read_text())
    perf = perf_results(bundle)
    baselines = baselines_of(perf)
    print(
        f"run {bundle['run']['id']} on {bundle['stack']['keys'].get('gpu_product')} "
        f"({bundle['stack']['keys'].get('toolkit')}), status {bundle['run']['status']}\n"
    )
    head = [
        "B,H,Sq,Sk",
        "layout",
        "mode",
        "p50 ms",
        "TFLOP/s",
        *(f"{b} TFLOP/s" for b in baselines),
        *(f"vs {b}" for b in baselines),
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    speed: dict[tuple[str, str], list[float]] = {}
    for r in sorted(perf, key=lambda r: (r["params"]["b"] * r["params"]["sq"], r["name"])):
        p, m = r["params"], r["metrics"]
        row = [
            f"{p['b']},{p['h']},{p['sq']},{p['sk']}",
            p["layout"],
            p["mode"],
            f"{m.get('p50_ms', float('nan')):.3f}",
            f"{m.get('tflops', float('nan')):.0f}",
        ]
        row += [f"{m.get(f'baseline:{b}:tflops', float('nan')):.0f}" for b in baselines]
        for b in baselines:
            s = speedup(r, b)
            row.append(f"{s:.2f}×" if s is not None else "—")
            if s is not None:
                speed.setdefault((p["mode"], b), []).append(s)
        print("| " + " | ".join(row) + " |")
    print("\n| mode | " + " | ".join(f"geomean vs {b} | min vs {b}" for b in baselines) + " |")
    print("|---|" + "---|---|" * len(baselines))
    for mode in ROUNDING_MODES:
        cells = []
        for b in baselines:
            v = speed.get((mode, b), [])
            cells += [
                f"{geomean(v):.3f}×" if v else "—",
                f"{min(v):.2f}×" if v else "—",
            ]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    families(perf, baselines)
    counts: dict[str, dict[str, int]] = {}
    for r in bundle["results"]:
        counts.setdefault(r["suite"], {}).setdefault(r["status"], 0)
        counts[r["suite"]][r["status"]] += 1
    print("\nsuites:", json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1])
