"""Detection quality benchmark: our change points against asv's step detection and Otava.

Synthetic nightly series whose noise is drawn from real stored timing samples (a noise profile in
benchmarks/service/data/), with injected slowdowns of 1, 2, 3, 5 and 10 % and one-night outliers.
Reports, per detector: recall within 2 nights of a step, recall on the whole year, mean delay in nights,
false alarms per 1000 series-nights, and the runtime over 1 year × 500 series.

    python benchmarks/service/detection.py run [--profile benchmarks/service/data/noise_h200.json] \
        [--markdown]
    python benchmarks/service/detection.py measure-db --db URL --out benchmarks/service/data/noise_cpu.json
    python benchmarks/service/detection.py measure-gpu --out benchmarks/service/data/noise_h200.json  # CUDA
    python benchmarks/service/detection.py measure-bundle benchmarks/headline/h200-nightly-*.json \
        --out benchmarks/service/data/noise_h200_kernel.json

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
from regress.facts.stats import clip_outliers, median, successive_sigma

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
        sig = [float(np.std([median(r) for r in runs], ddof=1)) for runs in self.cases if len(runs) > 2]
        return median(sig)


def _write_profile(
    path: Path, name: str, source: str, cases: dict[str, list[list[float]]], block: int = 1
) -> None:
    out = []
    for case, runs in sorted(cases.items()):
        flat = np.concatenate([np.asarray(r, dtype=float) for r in runs])
        med = median(flat)
        out.append({"case": case, "runs": [[round(v / med, 5) for v in r] for r in runs]})
    doc: dict[str, Any] = {"name": name, "source": source, "cases": out}
    if block > 1:
        doc["block"] = block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {path}: {len(out)} cases, {sum(len(c['runs']) for c in out)} runs")


def measure_db(url: str, out: Path) -> None:
    """Noise profile from the perf samples ("time_ms") of every non-drill run stored in a database."""
    from regress.store.queries import passing_results_of_suite
    from regress.store.repo import open_store

    store = open_store(url)
    cases: dict[str, list[list[float]]] = {}
    with store.reader() as session:
        rows = passing_results_of_suite(session, "perf")
        for res, case in rows:
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
        "night_sigma": median([successive_sigma(sr.values / median(sr.values)) for sr in nulls]),
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


# --- recall against false alarms: the whole curve (issue 14) -----------------------------------
#
# Gaussian nightly series of known sigma, so an oracle that is told each sigma can be drawn too.
# Each series: 120 nights, night-to-night sigma log-uniform in 0.3-3 %, 1 % of nights a one-night
# outlier (+5-30 %, gone the next night); step series get one upward step at a night in [40, 100].
# A hit: an upward change point 0-2 nights after the step (index = first night at the new level).
# A false alarm: any other upward change point, on any series (so a step found a night early or
# more than two nights late is a miss AND a false alarm: a mislocation, counted separately).
# Downward change points are improvements, never alarms. Rates per 1000 series-nights.

CURVE_STEPS = (0.02, 0.03, 0.05, 0.10)
CURVE_NIGHTS = 120
SIGMA_RANGE = (0.003, 0.03)
MISLOCATED = 5  # a miss with an upward change point within ±5 nights of the step is a mislocation


@dataclass
class GaussSeries:
    values: np.ndarray
    sigma: float
    step_at: int | None


def gauss_series(rng: np.random.Generator, step: float, nights: int = CURVE_NIGHTS) -> GaussSeries:
    sigma = float(np.exp(rng.uniform(*np.log(SIGMA_RANGE))))
    x = np.exp(sigma * rng.standard_normal(nights))
    at = int(rng.integers(40, 101)) if step else None
    if at is not None:
        x[at:] *= 1.0 + step
    outliers = rng.random(nights) < OUTLIER_RATE
    x[outliers] *= 1.0 + rng.uniform(*OUTLIER_SIZE, size=int(outliers.sum()))
    return GaussSeries(x * (1.0 + rng.random()), sigma, at)


def curve_sets(
    seed: int, n_null: int, n_step: int
) -> tuple[list[GaussSeries], dict[float, list[GaussSeries]]]:
    rng = np.random.default_rng(seed)
    nulls = [gauss_series(rng, 0.0) for _ in range(n_null)]
    return nulls, {s: [gauss_series(rng, s) for _ in range(n_step)] for s in CURVE_STEPS}


# A detector here returns the upward change points (first night at the new level) of one series.
UpDetector = Callable[[GaussSeries], list[int]]


def _up(values: np.ndarray, cps: Sequence[int]) -> list[int]:
    """The change points whose next level (median of up to 5 nights) is above the previous one."""
    out = []
    for c in cps:
        before, after = values[max(0, c - 5) : c], values[c : c + 5]
        if before.size and after.size and median(after) > median(before):
            out.append(int(c))
    return out


def regress_detector(alpha: float, min_change: float = 0.01) -> UpDetector:
    from regress.detect import ChangePointConfig

    cfg = ChangePointConfig(alpha=alpha, min_relative_change=min_change)

    def det(s: GaussSeries) -> list[int]:
        return [cp.index for cp in detect_change_points(s.values, config=cfg) if cp.direction == "slower"]

    return det


def oracle_detector(z_threshold: float) -> UpDetector:
    """Told each series' sigma: clips one-night outliers (3-point running median ± 3 sigma, in logs),
    then the best single split by the two-sample z of the means; reported when z ≥ threshold."""

    def det(s: GaussSeries) -> list[int]:
        y = np.log(s.values)
        y = clip_outliers(y, s.sigma, 3.0)  # the detector's own clip, at the known sigma
        n = y.size
        csum = np.concatenate([[0.0], np.cumsum(y)])
        t = np.arange(2, n - 1)
        left, right = csum[t] / t, (csum[n] - csum[t]) / (n - t)
        z = (right - left) / (s.sigma * np.sqrt(1.0 / t + 1.0 / (n - t)))
        i = int(np.argmax(z))
        return [int(t[i])] if z[i] >= z_threshold else []

    return det


def asv_detector(threshold: float) -> UpDetector | None:
    try:
        from asv.step_detect import detect_steps
    except ImportError:
        return None

    def det(s: GaussSeries) -> list[int]:
        steps = detect_steps(list(s.values))
        return [
            int(cur[0])
            for prev, cur in itertools.pairwise(steps)
            if prev[2] and (cur[2] - prev[2]) / abs(prev[2]) >= threshold
        ]

    return det


def otava_detector(p: float, window: int = 50) -> UpDetector | None:
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        return None

    def det(s: GaussSeries) -> list[int]:
        cps, _ = compute_change_points(list(s.values), window_len=window, max_pvalue=p)
        return _up(s.values, [int(cp.index) for cp in cps])

    return det


def score(det: UpDetector, nulls: list[GaussSeries], steps: dict[float, list[GaussSeries]]) -> dict[str, Any]:
    """Recall per step size; false alarms per 1000 series-nights, strict (every upward change point
    that is not the hit, as in issue 14's benchmark), and far (leaving out alarms within ±5 nights of
    a real step: mislocations, reported apart); mislocated misses per step size."""
    null_alarms = sum(len(det(s)) for s in nulls)
    alarms = near = 0
    nights = len(nulls) * CURVE_NIGHTS
    recall, mislocated = {}, {}
    for size, group in steps.items():
        hits = misloc = 0
        for s in group:
            assert s.step_at is not None
            cps = det(s)
            hit = [c for c in cps if 0 <= c - s.step_at <= TOLERANCE]
            hits += bool(hit)
            extra = len(cps) - min(1, len(hit))
            close = sum(abs(c - s.step_at) <= MISLOCATED for c in cps) - min(1, len(hit))
            alarms += extra
            near += close
            misloc += not hit and close > 0
        recall[str(size)] = hits / len(group)
        mislocated[str(size)] = misloc / len(group)
        nights += len(group) * CURVE_NIGHTS
    return {
        "recall": recall,
        "mislocated": mislocated,
        "fa_per_1000": 1000.0 * (null_alarms + alarms) / nights,
        "fa_far_per_1000": 1000.0 * (null_alarms + alarms - near) / nights,
        "fa_steady_per_1000": 1000.0 * null_alarms / (len(nulls) * CURVE_NIGHTS),
    }


REGRESS_ALPHAS = (1e-9, 1e-7, 1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
ORACLE_Z = (3.0, 3.25, 3.5, 3.75, 4.0, 4.25, 4.5, 4.75, 5.0, 5.5, 6.0)
ASV_THRESHOLDS = (0.05, 0.02, 0.01, 0.0)
OTAVA_P = (0.05, 0.01, 0.001, 0.0001)


def curve(seed: int, n_null: int, n_step: int, peers: bool = True) -> dict[str, Any]:
    """Every detector and setting on the same series of one seed."""
    from regress.detect import ChangePointConfig

    nulls, steps = curve_sets(seed, n_null, n_step)
    out: dict[str, Any] = {"seed": seed, "null": n_null, "per_step": n_step, "nights": CURVE_NIGHTS}
    default = ChangePointConfig()
    out["regress_default"] = {
        "alpha": default.alpha,
        **score(regress_detector(default.alpha, default.min_relative_change), nulls, steps),
    }
    out["regress"] = [
        {"alpha": a, **score(regress_detector(a, default.min_relative_change), nulls, steps)}
        for a in REGRESS_ALPHAS
    ]
    out["oracle"] = [{"z": z, **score(oracle_detector(z), nulls, steps)} for z in ORACLE_Z]
    others: dict[str, list[dict[str, Any]]] = {}
    for t in ASV_THRESHOLDS if peers else ():
        det = asv_detector(t)
        if det is not None:
            others.setdefault("asv", []).append({"threshold": t, **score(det, nulls, steps)})
    for p in OTAVA_P if peers else ():
        det = otava_detector(p)
        if det is not None:
            others.setdefault("Otava (window 50)", []).append({"p": p, **score(det, nulls, steps)})
    out["peers"] = others
    return out


def recall_at(points: list[dict[str, Any]], fa: float, step: str) -> float:
    """The curve's recall at a false-alarm rate: the best recall among settings at or below it."""
    ok = [p["recall"][step] for p in points if p["fa_per_1000"] <= fa + 1e-12]
    return max(ok, default=0.0)


def curve_markdown(res: dict[str, Any]) -> str:
    steps = [str(s) for s in CURVE_STEPS]
    head = " / ".join(f"{float(s) * 100:g}" for s in steps) + " %"
    lines = [
        f"Seed {res['seed']}: {res['null']} steady + {res['per_step']} per step size series × "
        f"{res['nights']} nights (sigma 0.3-3 %, 1 % one-night outliers).",
        "",
        f"| detector | setting | recall {head} | false alarms / 1000 nights, strict | far from a step "
        f"| mislocated misses {head} |",
        "|---|---|---|---|---|---|",
    ]

    def row(name: str, setting: str, p: dict[str, Any]) -> str:
        r = " / ".join(f"{p['recall'][s]:.2f}" for s in steps)
        m = " / ".join(f"{p['mislocated'][s]:.2f}" for s in steps)
        return f"| {name} | {setting} | {r} | {p['fa_per_1000']:.2f} | {p['fa_far_per_1000']:.2f} | {m} |"

    for name, points in res["peers"].items():
        for p in points:
            setting = f"threshold {p['threshold']}" if "threshold" in p else f"p {p['p']}"
            lines.append(row(name, setting, p))
            at = " / ".join(f"{recall_at(res['regress'], p['fa_per_1000'], s):.2f}" for s in steps)
            orc = " / ".join(f"{recall_at(res['oracle'], p['fa_per_1000'], s):.2f}" for s in steps)
            lines.append(f"| ↳ regress, same or fewer strict false alarms | | {at} | | | |")
            lines.append(f"| ↳ oracle, same or fewer strict false alarms | | {orc} | | | |")
    d = res["regress_default"]
    lines.append(row("**regress, default**", f"alpha {d['alpha']:g}", d))
    orc = " / ".join(f"{recall_at(res['oracle'], d['fa_per_1000'], s):.2f}" for s in steps)
    lines.append(f"| ↳ oracle, same or fewer strict false alarms | | {orc} | | | |")
    far = [p for p in res["oracle"] if p["fa_far_per_1000"] <= d["fa_far_per_1000"] + 1e-12]
    orc = " / ".join(f"{max((p['recall'][s] for p in far), default=0.0):.2f}" for s in steps)
    lines.append(f"| ↳ oracle, same or fewer far false alarms | | {orc} | | | |")
    for p in res["regress"]:
        lines.append(row("regress", f"alpha {p['alpha']:g}", p))
    for p in res["oracle"]:
        lines.append(row("oracle (knows sigma)", f"z {p['z']:g}", p))
    return "\n".join(lines)


def curve_plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [str(s) for s in CURVE_STEPS[:3]]
    fig, axes = plt.subplots(1, len(steps), figsize=(4.2 * len(steps), 3.8), sharey=True)
    markers = {"asv": "s", "Otava (window 50)": "^"}
    for ax, step in zip(axes, steps, strict=True):
        for name, pts, style in (
            ("regress (alpha swept)", res["regress"], "-o"),
            ("oracle (knows sigma)", res["oracle"], "--"),
        ):
            pts = sorted(pts, key=lambda p: p["fa_per_1000"])
            ax.plot(
                [p["fa_per_1000"] for p in pts], [p["recall"][step] for p in pts], style, ms=3, label=name
            )
        for name, pts in res["peers"].items():
            ax.plot(
                [p["fa_per_1000"] for p in pts],
                [p["recall"][step] for p in pts],
                markers.get(name, "x"),
                label=name,
            )
        d = res["regress_default"]
        ax.plot([d["fa_per_1000"]], [d["recall"][step]], "*", ms=12, color="k", label="regress default")
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xlim(0, 20)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{float(step) * 100:g} % step")
        ax.set_xlabel("false alarms / 1000 series-nights")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("recall (found 0-2 nights after the step)")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Recall against false alarms, seed {res['seed']} (120 nights, sigma 0.3-3 %)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


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
    c = sub.add_parser("curve", help="Recall against false alarms: regress swept, asv, Otava, oracle.")
    c.add_argument("--seed", type=int, action="append")
    c.add_argument("--null-series", type=int, default=200)
    c.add_argument("--step-series", type=int, default=100)
    c.add_argument("--plot", type=Path, help="PNG of the first seed's curves")
    c.add_argument("--json", type=Path, help="Write the raw results here")
    c.add_argument("--no-peers", action="store_true", help="Only regress and the oracle (tuning).")
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
    if args.cmd == "curve":
        results = [
            curve(seed, args.null_series, args.step_series, not args.no_peers) for seed in args.seed or [1, 2]
        ]
        for res in results:
            print(curve_markdown(res) + "\n")
        if args.plot:
            curve_plot(results[-1], args.plot)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1) + "\n")
        return
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
