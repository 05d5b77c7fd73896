"""Detection quality benchmark: our change points against asv's step detection and Otava.

Synthetic nightly series whose noise is drawn from real stored timing samples (a noise profile in
benchmarks/data/), with injected slowdowns of 1, 2, 3, 5 and 10 % and one-night outliers. Reports,
per detector: recall within 2 nights of a step, recall on the whole year, mean delay in nights,
false alarms per 1000 series-nights, and the runtime over 1 year × 500 series.

    python benchmarks/detection.py run [--profile benchmarks/data/noise_h200.json] [--markdown]
    python benchmarks/detection.py measure-db --db URL --out benchmarks/data/noise_cpu.json
    python benchmarks/detection.py measure-gpu --out benchmarks/data/noise_h200.json   # needs CUDA
    python benchmarks/detection.py measure-bundle benchmarks/results/h200-nightly-*.json \
        --out benchmarks/data/noise_h200_kernel.json

asv (asv.step_detect) and Otava (otava.analysis) are optional: install them next to regress (not
as its dependencies) and they are measured too; when absent the script says so and skips them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from regress.detect import detect_change_points
from regress.detect.changepoint import robust_sigma

DATA = Path(__file__).resolve().parent / "data"
STEPS = (0.01, 0.02, 0.03, 0.05, 0.10)
TOLERANCE = 2  # a change point within ±2 nights of the true step counts as found
MAX_DELAY = 10
OUTLIER_RATE = 0.01  # one night in a hundred is disturbed (and returns the next night)
OUTLIER_SIZE = (0.05, 0.30)

# A detector sees the nightly values and, where it wants them, the raw samples of each night.
Detector = Callable[[np.ndarray, np.ndarray], list[int]]


# --- noise profiles -------------------------------------------------------------------------------


@dataclass
class Profile:
    name: str
    source: str
    cases: list[list[np.ndarray]]  # per case, per run: samples relative to the case's median
    block: int = 1  # block length of the bootstrap: > 1 keeps the serial structure of a run's samples

    @classmethod
    def load(cls, path: Path) -> Profile:
        doc = json.loads(path.read_text())
        cases = [[np.asarray(run, dtype=float) for run in case["runs"]] for case in doc["cases"]]
        return cls(doc["name"], doc["source"], cases, int(doc.get("block", 1)))

    def night_sigma(self) -> float:
        """Median over cases of the run-to-run relative sigma of the run medians."""
        sig = [float(np.std([np.median(r) for r in runs], ddof=1)) for runs in self.cases if len(runs) > 2]
        return float(np.median(sig))


def _write_profile(
    path: Path, name: str, source: str, cases: dict[str, list[list[float]]], block: int = 1
) -> None:
    out = []
    for case, runs in sorted(cases.items()):
        flat = np.concatenate([np.asarray(r, dtype=float) for r in runs])
        med = float(np.median(flat))
        out.append({"case": case, "runs": [[round(v / med, 5) for v in r] for r in runs]})
    doc: dict[str, Any] = {"name": name, "source": source, "cases": out}
    if block > 1:
        doc["block"] = block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {path}: {len(out)} cases, {sum(len(c['runs']) for c in out)} runs")


def measure_db(url: str, out: Path) -> None:
    """Noise profile from the perf samples ("time_ms") of every non-drill run stored in a database."""
    from sqlalchemy import select

    from regress.store import Case, Result, Run
    from regress.store.repo import open_store

    store = open_store(url)
    cases: dict[str, list[list[float]]] = {}
    with store.reader() as session:
        rows = session.execute(
            select(Result, Case, Run)
            .join(Case, Case.id == Result.case_id)
            .join(Run, Run.id == Result.run_id)
            .where(Case.suite == "perf", Run.is_drill.is_(False), Result.status == "pass")
        ).all()
        for res, case, _ in rows:
            times = next((s.values for s in res.samples if s.name == "time_ms"), None)
            if times:
                cases.setdefault(case.name, []).append(list(times))
    _write_profile(out, "cpu-shared", f"{len(rows)} stored CPU perf results (regress nightly --quick)", cases)


def measure_bundle(bundles: list[Path], out: Path, block: int) -> None:
    """Noise profile from run bundles: the raw "time_ms" samples of OUR kernel in every perf case
    (the "baseline:<name>:time_ms" samples of the vendor kernels are not used), one run per bundle.
    From a single bundle the profile holds within-run noise only: between-run spread is not measured."""
    cases: dict[str, list[list[float]]] = {}
    ids, gpu = [], "GPU"
    for bundle in bundles:
        doc = json.loads(bundle.read_text())
        ids.append(doc["run"]["id"])
        gpu = doc["run"].get("gpu_state", {}).get("before", {}).get("gpu", {}).get("name", gpu)
        for res in doc["results"]:
            times = res.get("samples", {}).get("time_ms")
            if res.get("suite") == "perf" and res.get("status", "pass") == "pass" and times:
                cases.setdefault(res["name"], []).append(list(times))
    n = len(next(iter(cases.values()))[0])
    source = (
        f"the kernel's own raw samples: {len(cases)} perf cases × {n} event-timed launches, "
        f"{len(ids)} nightly run(s) ({', '.join(ids)}) on {gpu}; "
        + ("within-run noise only" if len(ids) == 1 else "between-run spread included")
        + f", bootstrapped in blocks of {block} to keep the samples' serial structure"
    )
    _write_profile(out, "h200-kernel", source, cases, block)


GPU_WORKER = r"""
import json, sys, torch
import torch.nn.functional as F
shapes = [(16, 16, 1024, 1024), (4, 16, 4096, 4096), (2, 16, 8192, 8192), (2, 40, 1024, 77)]
out = {}
for b, h, sq, sk in shapes:
    g = torch.Generator(device="cuda").manual_seed(42)
    q = torch.randn(b, h, sq, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, h, sk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, h, sk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    for _ in range(10):
        F.scaled_dot_product_attention(q, k, v)
    times = []
    for _ in range(int(sys.argv[1])):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); F.scaled_dot_product_attention(q, k, v); e.record(); e.synchronize()
        times.append(s.elapsed_time(e))
    out[f"sdpa_b{b}_h{h}_sq{sq}_sk{sk}"] = times
print(json.dumps(out))
"""


def measure_gpu(out: Path, runs: int, iterations: int, pause: float) -> None:
    """Noise profile from `runs` separate processes timing torch SDPA on the GPU (a stand-in for the
    kernel: same shapes, same event timing as the perf suite)."""
    cases: dict[str, list[list[float]]] = {}
    for i in range(runs):
        got = subprocess.run(
            [sys.executable, "-c", GPU_WORKER, str(iterations)], check=True, capture_output=True, text=True
        )
        for name, times in json.loads(got.stdout.strip().splitlines()[-1]).items():
            cases.setdefault(name, []).append(times)
        print(f"run {i + 1}/{runs}", flush=True)
        time.sleep(pause)
    import torch

    _write_profile(
        out,
        "h200",
        f"{runs} processes × {iterations} event-timed SDPA launches on {torch.cuda.get_device_name()}",
        cases,
    )


# --- synthetic series -----------------------------------------------------------------------------


@dataclass
class Series:
    values: np.ndarray  # one value per night: the median of its samples, as the nightly stores p50
    samples: np.ndarray  # nights × samples (float32)
    step_at: int | None
    step: float


def _resample(run: np.ndarray, rng: np.random.Generator, block: int) -> np.ndarray:
    """A bootstrap resample of one run: i.i.d. (block 1) or moving blocks of `block` samples."""
    n = run.size
    if block <= 1 or n <= block:
        return run[rng.integers(n, size=n)]
    starts = rng.integers(n - block + 1, size=-(-n // block))
    return run[(starts[:, None] + np.arange(block)).ravel()[:n]]


def synth(
    profile: Profile,
    rng: np.random.Generator,
    nights: int,
    step: float,
    step_at: int | None,
    within_run: bool = False,
) -> Series:
    """One series: a real case; each night one of its real runs, bootstrapped (so nights vary
    continuously; in blocks when the profile says so), × the level; the night's value is the median
    of its samples; a step multiplies the level from `step_at` on; one-night outliers multiply a
    night by 1.05–1.30 and are gone the next night. `within_run` draws every night from one run:
    only the sampling noise, as on a machine with no drift."""
    runs = profile.cases[rng.integers(len(profile.cases))]
    if within_run:
        runs = [runs[rng.integers(len(runs))]]
    level = 1.0 + 0.5 * rng.random()
    size = min(len(r) for r in runs)
    samples = np.empty((nights, size), dtype=np.float32)
    for t in range(nights):
        run = runs[rng.integers(len(runs))]
        night = _resample(run, rng, profile.block)[:size] * level
        if step_at is not None and t >= step_at:
            night *= 1.0 + step
        if rng.random() < OUTLIER_RATE:
            night *= 1.0 + rng.uniform(*OUTLIER_SIZE)
        samples[t] = night
    return Series(np.median(samples, axis=1).astype(float), samples, step_at, step)


# --- detectors ------------------------------------------------------------------------------------


def ours(values: np.ndarray, samples: np.ndarray) -> list[int]:
    return [cp.index for cp in detect_change_points(values)]


def ours_samples(values: np.ndarray, samples: np.ndarray) -> list[int]:
    return [cp.index for cp in detect_change_points(values, samples=samples)]


def load_peers() -> dict[str, Detector]:
    peers: dict[str, Detector] = {}
    try:
        from asv.step_detect import detect_steps

        def asv_steps(values: np.ndarray, samples: np.ndarray) -> list[int]:
            return [int(left) for left, *_ in detect_steps(list(values))[1:]]

        def asv_5pct(values: np.ndarray, samples: np.ndarray) -> list[int]:
            # asv reports a step only when the jump is at least its regressions_thresholds default (5 %).
            steps = detect_steps(list(values))
            return [
                int(cur[0])
                for prev, cur in itertools.pairwise(steps)
                if prev[2] and abs(cur[2] - prev[2]) / abs(prev[2]) >= 0.05
            ]

        peers["asv detect_steps"] = asv_steps
        peers["asv + 5% threshold"] = asv_5pct
    except ImportError:
        print("asv is not installed: its step detection is skipped", file=sys.stderr)
    try:
        from otava.analysis import compute_change_points

        def otava(values: np.ndarray, samples: np.ndarray) -> list[int]:
            cps, _ = compute_change_points(list(values), window_len=50, max_pvalue=0.001)
            return [int(cp.index) for cp in cps]

        peers["Otava (window 50, p 0.001)"] = otava
    except ImportError:
        print("apache-otava is not installed: Otava is skipped", file=sys.stderr)
    return peers


# --- evaluation -----------------------------------------------------------------------------------


def _hit(cps: Sequence[int], at: int) -> bool:
    return any(abs(c - at) <= TOLERANCE for c in cps)


@dataclass
class Scores:
    recall2: dict[float, float]
    recall_year: dict[float, float]
    delay: dict[float, float]
    false_alarms_per_1000: float
    runtime_s: float


def evaluate(
    detector: Detector, nulls: list[Series], steps: dict[float, list[Series]], nights: int
) -> Scores:
    started = time.perf_counter()
    false_alarms = sum(len(detector(s.values, s.samples)) for s in nulls)
    runtime = time.perf_counter() - started
    for group in steps.values():  # offline false alarms on step series: anything away from the step
        for s in group:
            assert s.step_at is not None
            false_alarms += sum(abs(c - s.step_at) > TOLERANCE for c in detector(s.values, s.samples))
    series_nights = (len(nulls) + sum(len(g) for g in steps.values())) * nights
    recall2, year, delay = {}, {}, {}
    for size, group in steps.items():
        delays: list[int] = []
        found_year = 0
        for s in group:
            assert s.step_at is not None
            found_year += _hit(detector(s.values, s.samples), s.step_at)
            for d in range(1, MAX_DELAY + 1):  # online: the nights seen so far, step night = 1
                end = s.step_at + d
                if _hit(detector(s.values[:end], s.samples[:end]), s.step_at):
                    delays.append(d)
                    break
        recall2[size] = sum(d <= 2 for d in delays) / len(group)
        year[size] = found_year / len(group)
        delay[size] = float(np.mean(delays)) if delays else math.nan
    return Scores(recall2, year, delay, 1000.0 * false_alarms / series_nights, runtime)


def run(
    profile_path: Path,
    n_null: int,
    n_step: int,
    nights: int,
    seed: int,
    markdown: bool,
    within_run: bool,
    peers: bool = True,
) -> dict[str, Any]:
    profile = Profile.load(profile_path)
    if within_run:
        profile.name += " (within-run noise only)"
    rng = np.random.default_rng(seed)
    nulls = [synth(profile, rng, nights, 0.0, None, within_run) for _ in range(n_null)]
    steps = {
        size: [
            synth(profile, rng, nights, size, int(rng.integers(60, nights - 30)), within_run)
            for _ in range(n_step)
        ]
        for size in STEPS
    }
    detectors: dict[str, Detector] = {
        "regress (ours, nightly values)": ours,
        "regress (ours, + raw samples)": ours_samples,
        **(load_peers() if peers else {}),
    }
    results: dict[str, Any] = {
        "profile": profile.name,
        "source": profile.source,
        "night_sigma": float(np.median([robust_sigma(sr.values / np.median(sr.values)) for sr in nulls])),
        "series": {"null": n_null, "per_step": n_step, "nights": nights, "seed": seed},
        "detectors": {},
    }
    for name, det in detectors.items():
        print(f"{profile.name}: {name} ...", file=sys.stderr, flush=True)
        sc = evaluate(det, nulls, steps, nights)
        results["detectors"][name] = sc.__dict__
    print(json.dumps(results, indent=2, default=str) if not markdown else to_markdown(results))
    return results


def to_markdown(results: dict[str, Any]) -> str:
    s = results["series"]
    lines = [
        f"Profile **{results['profile']}** ({results['source']}; median night-to-night sigma "
        f"{results['night_sigma'] * 100:.2f} %, robust, of the synthetic nights), {s['null']} steady + "
        f"{s['per_step']} per step size series × {s['nights']} nights, seed {s['seed']}.",
        "",
        "| detector | recall ≤2 nights (1/2/3/5/10 %) | recall, whole year (1/2/3/5/10 %) | "
        "mean delay, nights (3/5/10 %) | false alarms / 1000 series-nights | runtime, 1 year × "
        f"{s['null']} series |",
        "|---|---|---|---|---|---|",
    ]
    for name, sc in results["detectors"].items():
        r2 = " / ".join(f"{sc['recall2'][k]:.2f}" for k in STEPS)
        ry = " / ".join(f"{sc['recall_year'][k]:.2f}" for k in STEPS)
        dl = " / ".join(f"{sc['delay'][k]:.1f}" for k in STEPS[2:])
        lines.append(
            f"| {name} | {r2} | {ry} | {dl} | {sc['false_alarms_per_1000']:.2f} | {sc['runtime_s']:.2f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--profile", type=Path, action="append")
    r.add_argument("--null-series", type=int, default=500)
    r.add_argument("--step-series", type=int, default=100)
    r.add_argument("--nights", type=int, default=365)
    r.add_argument("--seed", type=int, default=7)
    r.add_argument("--markdown", action="store_true")
    r.add_argument("--within-run", action="store_true", help="Nights drawn from one run: no drift.")
    r.add_argument("--no-peers", action="store_true", help="Only our detector (for quick iterations).")
    b = sub.add_parser("measure-bundle")
    b.add_argument("bundle", type=Path, nargs="+")
    b.add_argument("--out", type=Path, default=DATA / "noise_h200_kernel.json")
    b.add_argument("--block", type=int, default=10)
    m = sub.add_parser("measure-db")
    m.add_argument("--db", required=True)
    m.add_argument("--out", type=Path, default=DATA / "noise_cpu.json")
    g = sub.add_parser("measure-gpu")
    g.add_argument("--out", type=Path, default=DATA / "noise_h200.json")
    g.add_argument("--runs", type=int, default=12)
    g.add_argument("--iterations", type=int, default=100)
    g.add_argument("--pause", type=float, default=2.0)
    args = ap.parse_args(argv)
    if args.cmd == "measure-db":
        measure_db(args.db, args.out)
    elif args.cmd == "measure-bundle":
        measure_bundle(args.bundle, args.out, args.block)
    elif args.cmd == "measure-gpu":
        measure_gpu(args.out, args.runs, args.iterations, args.pause)
    else:
        for path in args.profile or sorted(DATA.glob("noise_*.json")):
            run(
                path,
                args.null_series,
                args.step_series,
                args.nights,
                args.seed,
                args.markdown,
                args.within_run,
                not args.no_peers,
            )


if __name__ == "__main__":
    main()
