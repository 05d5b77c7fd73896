"""Reads the runs of benchmarks/h200/x2_scale.sh back from their database: where the time went in each, the
ULP suite sharded against one GPU, per-GPU agreement of the same case, the 8-GPU prediction, and a
short table last.

    python3 benchmarks/h200/x2_scale_report.py sqlite:///out/x2.db out/walls.txt
    python3 benchmarks/h200/x2_scale_report.py --bundles A.json B.json   # the committed bundles instead
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from regress.facts.results import CaseSpec
from regress.facts.stats import median, percentile
from regress.facts.suite_facts import is_timed
from regress.run.shard import make_units, predict_wall


def _load_db(url: str) -> list[dict[str, Any]]:
    from regress.store.queries import run_ids
    from regress.store.repo import open_store
    from regress.store.transfer import export_bundle

    store = open_store(url)
    with store.reader() as s:
        return [export_bundle(s, run_id) for run_id in run_ids(s)]


def _walls(path: str | None) -> dict[str, tuple[float, int]]:
    out: dict[str, tuple[float, int]] = {}
    if path and Path(path).exists():
        for line in Path(path).read_text().splitlines():
            name, wall, rc = line.split()
            out[name] = (float(wall), int(rc))
    return out


def _spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    v = values
    return f"median {median(v):.4f}, p5 {percentile(v, 5):.4f}, p95 {percentile(v, 95):.4f}, n {len(v)}"


def _workers(bundle: dict[str, Any]) -> int:
    return int(bundle["run"].get("summary", {}).get("timing", {}).get("workers", 1))


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--bundles":
        bundles = [json.loads(Path(p).read_text()) for p in argv[1:]]
        walls: dict[str, tuple[float, int]] = {}
    else:
        bundles = _load_db(argv[0])
        walls = _walls(argv[1] if len(argv) > 1 else None)
    rows = []
    for b in bundles:
        run, timing = b["run"], b["run"].get("summary", {}).get("timing", {})
        trig = run.get("trigger", "?")
        statuses = Counter(r["status"] for r in b["results"])
        wall = walls.get(trig, (math.nan, -1))[0]
        ulp = sum(r["metrics"].get("wall_s", 0.0) for r in b["results"] if r["suite"] == "ulp")
        print(f"== run {run['id']} {trig}: {run.get('status')} {dict(statuses)}, command wall {wall} s")
        for key in ("setup_s", "cases_wall_s", "case_seconds", "store_s", "scheduled_by", "timeouts"):
            print(f"  {key}: {timing.get(key)}")
        for key in ("phases_s", "suites_s", "workers_s", "startup_s", "startup_wait_s"):
            print(f"  {key}: {json.dumps(timing.get(key, {}))}")
        for worker, split in timing.get("startup_split", {}).items():
            print(f"  start-up {worker}: {json.dumps(split)}")
        rows.append((trig, wall, timing, ulp, statuses))

    sharded = [b for b in bundles if _workers(b) > 1]
    single = [b for b in bundles if _workers(b) == 1]
    if sharded and single:
        sh, one = sharded[-1], single[-1]
        one_by = {r["case_key"]: r for r in one["results"]}
        ulp_ratio = [
            r["metrics"]["wall_s"] / one_by[r["case_key"]]["metrics"]["wall_s"]
            for r in sh["results"]
            if r["suite"] == "ulp"
            and r["case_key"] in one_by
            and one_by[r["case_key"]]["metrics"].get("wall_s")
        ]
        print(f"ULP case wall time, sharded / one GPU, same case: {_spread(ulp_ratio)}")
        per_gpu: dict[Any, list[float]] = {}
        same_ulp = differ_ulp = 0
        for r in sh["results"]:
            o = one_by.get(r["case_key"])
            if o is None:
                continue
            gpu = r["device"].get("gpu_index")
            if is_timed(r["suite"]) and r["metrics"].get("p50_ms") and o["metrics"].get("p50_ms"):
                per_gpu.setdefault(gpu, []).append(r["metrics"]["p50_ms"] / o["metrics"]["p50_ms"])
            if r["suite"] == "ulp":
                keys = [k for k in r["metrics"] if "ulp" in k and not k.startswith("phase_")]
                same = all(r["metrics"].get(k) == o["metrics"].get(k) for k in keys)
                same_ulp += same
                differ_ulp += not same
        for gpu, ratios in sorted(per_gpu.items(), key=lambda kv: str(kv[0])):
            print(f"perf/e2e p50, sharded on GPU {gpu} / one-GPU run on GPU 0: {_spread(ratios)}")
        print(f"ULP measures identical across the two runs: {same_ulp} cases, differing: {differ_ulp}")

    if single:
        one = single[-1]
        plan = [
            (r["suite"], CaseSpec(r["suite"], r["name"], r["params"], r.get("kernel", "attention_fwd")))
            for r in one["results"]
        ]
        costs = {r["case_key"]: float(r["metrics"].get("wall_s", 0.0)) for r in one["results"]}
        units = [u.cost for u in make_units(plan, costs)]
        setup = float(one["run"]["summary"]["timing"].get("setup_s", 0.0))
        print("predicted wall from the one-GPU run's measured case costs (set-up + longest-first makespan):")
        for n in (1, 2, 4, 8):
            print(
                f"  {n} GPU(s): {setup + predict_wall(units, n):.1f} s (cases {predict_wall(units, n):.1f} s)"
            )

    print()
    head = f"{'run':<14}{'wall s':>8}{'setup s':>9}{'cases s':>9}{'case-sum s':>11}{'ULP s':>8}{'start s':>9}"
    print(head + "  status (start s: worker start-up the run waited for)")
    for trig, wall, timing, ulp, statuses in rows:
        start = max(timing.get("startup_wait_s", {"-": 0.0}).values())
        print(
            f"{trig:<14}{wall:>8.1f}{timing.get('setup_s', 0):>9.1f}{timing.get('cases_wall_s', 0):>9.1f}"
            f"{timing.get('case_seconds', 0):>11.1f}{ulp:>8.1f}{start:>9.1f}  {dict(statuses)}"
        )
    if sharded and single:
        w_sh = walls.get(sharded[-1]["run"]["trigger"], (math.nan, 0))[0]
        w_one = walls.get(single[-1]["run"]["trigger"], (math.nan, 0))[0]
        c_sh = sharded[-1]["run"]["summary"]["timing"]["cases_wall_s"]
        c_one = single[-1]["run"]["summary"]["timing"]["cases_wall_s"]
        print(f"ratio one-GPU / sharded: command wall {w_one / w_sh:.3f}, case phase {c_one / c_sh:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
