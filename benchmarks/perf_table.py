"""Prints the perf suite of one run bundle as a Markdown table (per shape, layout and mode: TFLOP/s
and speedup vs each baseline), then the geomean speedup per mode.

    python benchmarks/perf_table.py benchmarks/results/<run-id>.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from regress.metrics import geomean
from regress.results import ROUNDING_MODES


def families(perf: list[dict], baselines: list[str]) -> None:
    """Per shape family (one (B,H,Sq,Sk), both layouts): the lower layout's speedup per mode, and
    how many families are below 1.00x in each mode."""
    low: dict[tuple[str, str, str], float] = {}
    for r in perf:
        p = r["params"]
        fam = f"{p['b']},{p['h']},{p['sq']},{p['sk']}"
        for b in baselines:
            s = r["metrics"].get(f"speedup_vs_{b}")
            if isinstance(s, int | float) and s > 0:
                key = (fam, p["mode"], b)
                low[key] = min(low.get(key, s), s)
    fams = sorted({k[0] for k in low}, key=lambda f: [int(x) for x in f.split(",")])
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
    perf = [r for r in bundle["results"] if r["suite"] == "perf" and r["status"] != "skip"]
    baselines = sorted(
        {k.removeprefix("speedup_vs_") for r in perf for k in r["metrics"] if k.startswith("speedup_vs_")}
    )
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
            s = m.get(f"speedup_vs_{b}")
            row.append(f"{s:.2f}×" if isinstance(s, int | float) else "—")
            if isinstance(s, int | float) and s > 0:
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
