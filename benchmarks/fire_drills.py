"""Fire-drill rates on real timings (a benchmark, not a test: timing noise decides its outcome).

Runs N clean quick perf nights on the CPU backend (single-threaded, as tests/test_fire_drills.py),
gates every consecutive pair after a history of H nights, then gates a slowdown drill of each size
against the last clean night; prints false alarms per clean gate and which drills were caught.

    python benchmarks/fire_drills.py --nights 16 --history 10 --drills 10,30
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nights", type=int, default=16)
    ap.add_argument("--history", type=int, default=10)
    ap.add_argument("--drills", default="10,30", help="slowdown percentages, comma-separated")
    ap.add_argument("--iterations", type=int, default=30)
    args = ap.parse_args()

    os.environ.setdefault("REGRESS_CPU_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from regress.gate import gate
    from regress.nightly import NightlyOptions, run_nightly
    from regress.store.repo import open_store

    tmp = Path(tempfile.mkdtemp(prefix="regress-drills-"))
    url = f"sqlite:///{tmp / 'drills.db'}"

    def night(inject: dict[str, int] | None = None) -> str:
        outcome = run_nightly(
            NightlyOptions(
                backend="cpu",
                suites=("perf",),
                quick=True,
                db=url,
                out=tmp / "out",
                inject=inject,
                iterations=args.iterations,
                allow_drift=True,
                trigger="nightly",
            )
        )
        assert outcome.run_id is not None
        return outcome.run_id

    clean = [night() for _ in range(args.nights)]
    store = open_store(url)
    alarms = []
    pairs = list(itertools.pairwise(clean[args.history - 1 :]))
    for base, cand in pairs:
        report = gate(store, base, cand)
        if report.exit_code != 0:
            alarms.append([(r.case, round(r.ratio or 0, 3), r.note) for r in report.regressions])
    drills = {}
    for pct in (int(x) for x in args.drills.split(",") if x):
        report = gate(store, clean[-1], night({"slowdown_pct": pct}))
        drills[pct] = {
            "exit_code": report.exit_code,
            "named": len(report.regressions),
            "geomean_ratio": report.aggregate.get("geomean_ratio"),
            "threshold": report.aggregate.get("threshold"),
        }
    print(
        json.dumps(
            {
                "clean_gates": len(pairs),
                "false_alarms": len(alarms),
                "alarm_details": alarms,
                "drills": drills,
            },
            indent=1,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
