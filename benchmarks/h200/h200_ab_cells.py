"""Where an A/A gap sits: splits the raw samples of h200_ab_control.py's pairs by round parity, slot
in the round (first or second call after the round's GPU spin) and arm (listed first or second), and
prints each cell's median (µs) and count. The ABBA statistic cancels a slot effect that is the same
in every round; a gap that survives it lives in a cell that one arm occupies more than the other.
With the default alternation each arm has one slot per parity, so "the arm listed second" and "the
first slot of the odd rounds" are the same cells; a --block-seed run fills all eight and tells them
apart. Reads the orientation of each round from regress.run.suites.timing.round_orders.

  python benchmarks/h200/h200_ab_cells.py DIR/ab_control.json[.gz] [--pair old:old2] [--mode rtne]
  python benchmarks/h200/h200_ab_cells.py BUNDLE.json[.gz] [--case b2_h40_sq1024_sk77]

A run bundle (`regress nightly --compare-build`) gives the perf suite's A/B cases as pairs
candidate:baseline (the candidate is listed first there), its rounds in the default alternation.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from regress.facts.results import AB_BASELINE_SAMPLE, AB_CANDIDATE_SAMPLE  # noqa: E402
from regress.facts.stats import median  # noqa: E402
from regress.run.suites.timing import round_orders  # noqa: E402

CELLS = [(par, slot, arm) for par in ("even", "odd") for slot in ("first", "second") for arm in ("A", "B")]


def load(path: Path) -> list[dict[str, Any]]:
    """The pairs of an ab_control.json, or the A/B cases of a run bundle in the same form."""
    raw = path.read_bytes()
    blob = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if "rows" in blob:
        return list(blob["rows"])
    return [
        {
            "pair": "candidate:baseline",
            "name": r["name"],
            "shape": [r["params"][k] for k in ("b", "h", "sq", "sk")],
            "mode": r["params"]["mode"],
            "input_sets": r["metrics"].get("input_sets"),
            "samples_ms": {
                "candidate": r["samples"][AB_CANDIDATE_SAMPLE],
                "baseline": r["samples"][AB_BASELINE_SAMPLE],
            },
        }
        for r in blob["results"]
        if AB_CANDIDATE_SAMPLE in r.get("samples", {}) and AB_BASELINE_SAMPLE in r["samples"]
    ]


def cells(row: dict[str, Any]) -> dict[tuple[str, str, str], list[float]]:
    """Each call's time (ms) by (round parity, slot, arm) for one pair's row."""
    first, second = row["pair"].split(":")
    arms = {"A": row["samples_ms"][first], "B": row["samples_ms"][second]}
    n = min(len(v) for v in arms.values())
    out: dict[tuple[str, str, str], list[float]] = {c: [] for c in CELLS}
    for i, listed in enumerate(round_orders(n, (row.get("method") or {}).get("block_seed"))):
        parity = "even" if i % 2 == 0 else "odd"
        for arm, t in arms.items():
            slot = "first" if (arm == "A") == listed else "second"
            out[(parity, slot, arm)].append(t[i])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="ab_control.json or .json.gz")
    ap.add_argument("--pair", default=None, help="only this FIRST:SECOND pair")
    ap.add_argument("--mode", default=None, help="only this rounding mode")
    ap.add_argument("--case", default=None, help="a bundle's cases whose name starts so")
    args = ap.parse_args(argv)
    if not args.path.is_file():
        ap.error(f"{args.path}: no such file")
    try:
        rows = load(args.path)
    except (OSError, ValueError, KeyError) as e:
        ap.error(f"{args.path}: not an h200_ab_control.py result ({type(e).__name__}: {e})")
    head = " | ".join(f"{p} {s} {a}" for p, s, a in CELLS)
    print(f"| pair | shape | mode | {head} |")
    print("|---|---|---|" + "---|" * len(CELLS))
    for r in rows:
        if (args.pair and r["pair"] != args.pair) or (args.mode and r["mode"] != args.mode):
            continue
        if args.case and not r.get("name", "").startswith(args.case):
            continue
        c = cells(r)
        vals = " | ".join(f"{1e3 * median(v):.2f} ({len(v)})" if v else "-" for v in c.values())
        print(f"| {r['pair']} | {tuple(r['shape'])} | {r['mode']} | {vals} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
