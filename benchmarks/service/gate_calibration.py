"""The gate's calibration table from a database made by benchmarks/service/gate_calibration.sh.

Clean nights (non-drill runs, oldest first) and slowdown drills (drill runs, with their requested
percent) are gated in both modes:

- cross-night: each clean night against the one before; each drill against the last clean night
  (the whole clean history) and against the first (a single clean night: the backend's prior);
- A/B: each run's own verdict, its build against the build timed beside it in the same rounds
  (clean nights: the clean build against itself; drills: the drill against the clean build).

Prints one Markdown table (exit codes counted per row) and writes the per-gate details as JSON.

    python benchmarks/service/gate_calibration.py --db sqlite:///regress-out/cal/cal.db [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

from regress.facts.stats import upper_median


def _runs(url: str) -> list[tuple[str, bool, int]]:
    """(run id, is drill, requested slowdown %) oldest first; finished runs only (a night killed by
    its timeout is left out and said so)."""
    from regress.store import FINISHED_STATES
    from regress.store.queries import build_by_id, runs_oldest_first
    from regress.store.repo import open_store

    out = []
    with open_store(url).reader() as session:
        for r in runs_oldest_first(session):
            if r.status not in FINISHED_STATES:
                print(f"left out: run {r.id} is {r.status}")
                continue
            build = build_by_id(session, r.build_id) if r.build_id else None
            pct = int((build.inject or {}).get("slowdown_pct", 0)) if build else 0
            out.append((r.id, r.is_drill, pct))
    return out


def drill_costs(url: str) -> list[str]:
    """Per drill run: requested vs measured cost (A/B phase, median paired block ratio)."""
    from regress.store.queries import runs_oldest_first
    from regress.store.repo import open_store

    lines = []
    with open_store(url).reader() as session:
        for r in runs_oldest_first(session):
            d = (r.summary or {}).get("drill")
            if r.is_drill and d:
                lines.append(
                    f"drill {d['requested_pct']} %: measured {d['measured_pct_geomean']:+.1f} % geomean "
                    f"({d['measured_pct_min']:+.1f} to {d['measured_pct_max']:+.1f}; {d['within_tolerance']}/"
                    f"{d['cases']} within ±{d['tolerance_pct']:g})"
                )
    return lines


def _entry(report: Any) -> dict[str, Any]:
    mdes = [r.mde for r in report.rows if r.mde is not None]
    return {
        "baseline": report.baseline_run,
        "candidate": report.candidate_run,
        "exit": report.exit_code,
        "regressed": len(report.regressions),
        "worst_mde": max(mdes) if mdes else None,
        "stack_mde": report.power.get("stack_mde"),
        "geomean": report.aggregate.get("geomean_ratio"),
        "reasons": report.reasons,
    }


def calibrate(url: str) -> dict[str, list[dict[str, Any]]]:
    from regress.facts.errors import UserError
    from regress.judge.gate import gate, gate_ab
    from regress.store.repo import open_store

    store = open_store(url)
    runs = _runs(url)
    clean = [rid for rid, drill, _ in runs if not drill]
    rows: dict[str, list[dict[str, Any]]] = {}

    def add(label: str, report: Any) -> None:
        rows.setdefault(label, []).append(_entry(report))

    for before, after in itertools.pairwise(clean):
        add("cross-night: clean vs the night before", gate(store, before, after))
    for rid, drill, pct in runs:
        if not drill or not clean:
            continue
        add(f"cross-night: {pct} % drill vs the last clean night", gate(store, clean[-1], rid))
        add(f"cross-night: {pct} % drill vs the first clean night", gate(store, clean[0], rid))
    for rid, drill, pct in runs:
        label = f"A/B: {f'{pct} % drill' if drill else 'clean (the build against itself)'}"
        try:
            add(label, gate_ab(store, rid))
        except UserError as exc:  # a run without A/B samples: counted, with why
            rows.setdefault(label, []).append({"exit": "n/a", "reasons": [str(exc)]})
    return rows


def table(rows: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| comparison | gates | exit 0 | exit 1 | exit 2 | worst case MDE (median) |",
        "|---|---|---|---|---|---|",
    ]
    for label, entries in rows.items():
        counts = Counter(e["exit"] for e in entries)
        mdes = sorted(e["worst_mde"] for e in entries if e.get("worst_mde") is not None)
        mde = f"{upper_median(mdes) * 100:.1f} %" if mdes else "–"
        exits = " | ".join(str(counts.get(code, 0)) for code in (0, 1, 2))
        lines.append(f"| {label} | {len(entries)} | {exits} | {mde} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = calibrate(args.db)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    print(table(rows))
    for line in drill_costs(args.db):
        print(line)


if __name__ == "__main__":
    main()
