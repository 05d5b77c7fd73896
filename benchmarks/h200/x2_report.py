"""Summarises the x2 sharding runs: cases per GPU, and per-case perf of the same case on each GPU."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

from regress.facts.stats import median
from regress.store.queries import run_results_with_cases, runs_oldest_first
from regress.store.repo import open_store


def main(url: str) -> None:
    store = open_store(url)
    with store.reader() as s:
        runs = runs_oldest_first(s)
        by_case: dict[str, dict[int, float]] = defaultdict(dict)
        for run in runs:
            rows = run_results_with_cases(s, run.id)
            per_gpu: Counter[object] = Counter()
            statuses: Counter[str] = Counter()
            for res, case in rows:
                gpu = res.device.get("gpu_index")
                per_gpu[(gpu, res.device.get("gpu_uuid"))] += 1
                statuses[res.status] += 1
                if case.suite == "perf" and run.trigger in ("x2-sharded", "x2-gpu0") and gpu is not None:
                    by_case[case.name][int(gpu)] = float(res.metrics["p50_ms"])
            workers = sorted(run.gpu_state.get("workers", {}))
            print(
                f"run {run.id} {run.trigger}: status {run.status}, results {dict(statuses)}, "
                f"per GPU {dict(per_gpu)}, worker states {workers}"
            )
        ratios = [v[1] / v[0] for v in by_case.values() if 0 in v and 1 in v]
        if ratios:
            print(
                f"same case, GPU1 p50 / GPU0 p50 over {len(ratios)} cases: "
                f"median {median(ratios):.4f}, min {min(ratios):.4f}, max {max(ratios):.4f}"
            )


if __name__ == "__main__":
    main(sys.argv[1])
