"""Fire drills on real CPU timings (benchmarks, not tests: timing noise decides their outcome).

# the gate on a (loaded) machine: clean, then (30 % drill, clean) x N quick perf nights with the
# default thread count, as a new user runs them; gates every clean night against the previous
# clean one and every drill against the clean night before it; verdicts, MDEs and reasons
python benchmarks/service/fire_drills.py gates --pairs 10 --drill 30 --db sqlite:////tmp/drills.db
python benchmarks/service/fire_drills.py gates --db sqlite:////tmp/drills.db --regate   # re-judge only

# calibration: the clean and the drill builds timed interleaved on the perf shapes, single-thread,
# the cost of each requested slowdown as the perf suite records it (median paired ABBA block ratio)
python benchmarks/service/fire_drills.py calibrate --drills 2,3,5,10 --rounds 200
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from regress.facts.stats import geomean, upper_median


def _night(url: str, out: Path, inject: dict[str, int] | None, iterations: int | None) -> str:
    from regress.run.nightly import NightlyOptions, run_nightly

    outcome = run_nightly(
        NightlyOptions(
            backend="cpu",
            suites=("perf",),
            quick=True,
            db=url,
            out=out,
            inject=inject,
            iterations=iterations,
            allow_drift=True,
            trigger="nightly",
        )
    )
    assert outcome.run_id is not None
    return outcome.run_id


def _runs(url: str) -> list[tuple[str, bool]]:
    from regress.store.queries import runs_oldest_first
    from regress.store.repo import open_store

    with open_store(url).reader() as session:
        return [(r.id, r.is_drill) for r in runs_oldest_first(session)]


def gates(url: str, pairs: int, drill: int, iterations: int | None, regate: bool) -> dict[str, Any]:
    from regress.judge.gate import gate
    from regress.store.repo import open_store

    if not regate:
        out = Path(tempfile.mkdtemp(prefix="regress-drills-"))
        _night(url, out, None, iterations)
        for i in range(pairs):
            _night(url, out, {"slowdown_pct": drill}, iterations)
            _night(url, out, None, iterations)
            print(f"pair {i + 1}/{pairs}", flush=True)
    runs = _runs(url)
    store = open_store(url)
    clean_gates, drill_gates = [], []
    last_clean: str | None = None
    for run_id, is_drill in runs:
        if last_clean is not None:
            report = gate(store, last_clean, run_id)
            mdes = [r.mde for r in report.rows if r.mde is not None]
            entry = {
                "exit": report.exit_code,
                "regressed": len(report.regressions),
                "too_noisy": len(report.too_noisy),
                "mde_median": upper_median(mdes) if mdes else None,
                "stack_mde": report.power.get("stack_mde"),
                "geomean": report.aggregate.get("geomean_ratio"),
                "ratios": [round(r.ratio, 2) for r in report.rows if r.ratio is not None],
                "reasons": report.reasons,
            }
            (drill_gates if is_drill else clean_gates).append(entry)
        if not is_drill:
            last_clean = run_id
    result = {
        "clean_vs_clean": dict(Counter(g["exit"] for g in clean_gates)),
        "drill_vs_clean": dict(Counter(g["exit"] for g in drill_gates)),
        "clean": clean_gates,
        "drills": drill_gates,
    }
    print(json.dumps(result, indent=1, default=str))
    return result


def table(url: str) -> None:
    """Clean-vs-clean gates and, per drill run, requested vs measured cost and the gate's verdicts
    (cross-night against the clean night before, and A/B: the run's own two builds)."""
    from regress.judge.gate import gate, gate_ab
    from regress.store.queries import run_by_id, run_results_with_cases
    from regress.store.repo import open_store

    store = open_store(url)
    runs = _runs(url)
    cleans = [r for r, drill in runs if not drill]
    print("clean vs clean:")
    for base, cand in itertools.pairwise(cleans):
        report = gate(store, base, cand)
        why = "; ".join(report.reasons)
        print(f"  {base[:12]} -> {cand[:12]}: exit {report.exit_code} ({report.verdict}); {why}")
    print(f"{'drill':>6} {'cases':>5} {'geomean':>8} {'min':>7} {'max':>7} {'in tol':>7}  gate")
    for run_id, is_drill in runs:
        if not is_drill:
            continue
        base = [r for r, d in runs[: [x for x, _ in runs].index(run_id)] if not d]
        with store.reader() as session:
            rows = run_results_with_cases(session, run_id)
            cost = {
                c.name: (float(r.metrics["drill_requested_pct"]), float(r.metrics["drill_measured_pct"]))
                for r, c in rows
                if c.suite == "perf" and "drill_measured_pct" in r.metrics
            }
            run = run_by_id(session, run_id)
            assert run is not None
        if not cost or not base:
            continue
        req = next(iter(cost.values()))[0]
        measured = [m for _, m in cost.values()]
        tol = max(1.0, req / 5)
        geo = ((geomean(1 + m / 100 for m in measured) or math.nan) - 1) * 100
        report = gate(store, base[-1], run_id)
        ab = gate_ab(store, run_id)  # the drill build against the clean build, same rounds
        print(
            f"{req:>5.0f}% {len(cost):>5} {geo:>7.1f}% {min(measured):>6.1f}% {max(measured):>6.1f}% "
            f"{sum(abs(m - req) <= tol for m in measured):>3}/{len(measured):<3}  cross-night exit "
            f"{report.exit_code} ({report.verdict}, {len(report.regressions)} named); "
            f"A/B exit {ab.exit_code} ({ab.verdict}, {len(ab.regressions)} named)"
        )
        for name, (_, m) in sorted(cost.items()):
            print(f"         {m:>6.1f}%  {name}")


def calibrate(drills: list[int], rounds: int, threads: int) -> dict[str, dict[str, dict[str, float]]]:
    """Requested vs measured cost per shape: both builds on the same inputs, alternating order, the
    cost computed as the perf suite records it (`regress.run.suites.perf.drill_cost`)."""
    os.environ["REGRESS_CPU_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    from regress.facts.results import AB_BASELINE_SAMPLE, AB_CANDIDATE_SAMPLE
    from regress.kernel import load_library
    from regress.native.build import build_kernel
    from regress.run.suites.common import make_inputs
    from regress.run.suites.perf import CPU_QUICK, CPU_SHAPES, drill_cost
    from regress.run.suites.timing import interleaved_rounds

    clean = load_library(build_kernel("cpu").path)
    shapes = list(dict.fromkeys([*CPU_QUICK, *CPU_SHAPES]))
    table: dict[str, dict[str, dict[str, float]]] = {}
    for pct in drills:
        lib = load_library(build_kernel("cpu", inject={"slowdown_pct": pct}).path)
        for shape in shapes:
            qkv = make_inputs(shape, "bhsd", seed=1, device="cpu")
            runners = [
                (name, lambda _i, one=one, x=qkv: one.forward(*x, layout="bhsd", rounding="rtne"))
                for name, one in (("clean", clean), ("drill", lib))
            ]
            # CPU time of this thread (the single-threaded kernel runs on it): the work done, which a
            # preempting neighbour cannot stretch. Wall time on a loaded 2-core VM made a 0.12 s
            # call's fastest round a matter of luck (measured: -69 % "cost").
            times = interleaved_rounds("cpu", runners, 0, rounds, thread_clock=True)
            cost = drill_cost({AB_CANDIDATE_SAMPLE: times["drill"], AB_BASELINE_SAMPLE: times["clean"]}, pct)
            # Beside the suite's estimator, the median of the per-round paired ratios: CPU time is
            # not one-sided like wall time, so the paired median is the steadier one here.
            paired = sorted(d / c for d, c in zip(times["drill"], times["clean"], strict=True) if c > 0)
            table.setdefault(f"{shape.b}x{shape.h}x{shape.sq}x{shape.sk}", {})[str(pct)] = {
                "paired_blocks": round(cost["drill_measured_pct"], 2),
                "paired_median": round((upper_median(paired) - 1) * 100, 2),
            }
    print(json.dumps({"threads": threads, "rounds": rounds, "measured_pct": table}, indent=1))
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gates")
    g.add_argument("--db", required=True)
    g.add_argument("--pairs", type=int, default=10)
    g.add_argument("--drill", type=int, default=30)
    g.add_argument("--iterations", type=int, default=None)
    g.add_argument("--regate", action="store_true", help="Judge the runs already in --db again.")
    t = sub.add_parser("table")
    t.add_argument("--db", required=True)
    c = sub.add_parser("calibrate")
    c.add_argument("--drills", default="2,3,5,10")
    c.add_argument("--rounds", type=int, default=200)
    c.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.cmd == "gates":
        gates(args.db, args.pairs, args.drill, args.iterations, args.regate)
    elif args.cmd == "table":
        table(args.db)
    else:
        calibrate([int(x) for x in args.drills.split(",") if x], args.rounds, args.threads)


if __name__ == "__main__":
    main()
