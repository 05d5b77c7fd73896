"""A realistic synthetic history, so a newcomer can see the site in a minute (`regress demo-history`).

What it writes, per night and stack lane: one complete nightly run with perf, ULP, determinism and
end-to-end results. Timing noise is drawn from the measured shape of real GPU timings (quantiles of
t / median over 900 SDPA launches on an H200, CUDA events), so bands and outliers look like the real
thing. Scripted events give the detectors and the site something to show: a few kernel commits that
step the time of a subset of cases (one fixed later, one still open), a one-night thermal outlier
(not a step), a toolkit upgrade in lane 0 (a new stack digest, with a gate decision), a numerics
regression and a flaky determinism night, and Regression rows in every state.

Stacks and cases go through the repo writers (`get_or_create_stack`, `get_or_create_case`); runs,
results and samples are inserted in bulk with pre-assigned ids, because one ORM flush per result
makes 365 nights x 3 stacks x 300 cases take minutes instead of seconds.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Table, func, insert, select
from sqlalchemy.orm import Session

from .results import CaseSpec
from .stack import HASHED_KEYS, SCHEMA_VERSION, stack_digest
from .store import GateDecision, Regression, Result, Run, Sample
from .store.repo import Store, get_or_create_case, get_or_create_stack

# 49 quantiles (0 %, 2.08 %, ... 100 %) of t / median(t): 3 shapes x 300 SDPA launches, H200, torch 2.11.
# Right-skewed with a long upper tail, as GPU timings are (clock ramps, launch jitter).
# fmt: off
REAL_NOISE_QUANTILES = (
    0.9144, 0.9437, 0.9521, 0.9599, 0.9667, 0.9699, 0.9723, 0.9736, 0.975, 0.9762, 0.978, 0.98, 0.9818,
    0.9838, 0.9864, 0.9897, 0.9924, 0.9943, 0.9953, 0.996, 0.9969, 0.9978, 0.9986, 0.9993, 1.0001,
    1.0013, 1.0026, 1.0039, 1.0051, 1.0084, 1.0116, 1.0148, 1.0204, 1.0227, 1.0245, 1.0301, 1.0346,
    1.0404, 1.0448, 1.0495, 1.0595, 1.0718, 1.0848, 1.0955, 1.1137, 1.124, 1.137, 1.15, 1.2066,
)

MODES = ("rtne", "rtna", "rtz")
LAYOUTS = ("bshd", "bhsd")
# Published MoonMath geomeans vs AITER per mode (ANCHORS.md); the CUDA lane trails cuDNN.
ROCM_SPEEDUP = {"rtne": 1.18, "rtna": 1.15, "rtz": 1.08}
CUDA_SPEEDUP = {"rtne": 0.66, "rtna": 0.65, "rtz": 0.67}

# (B, H, Sq, Sk): ANCHORS' MoonMath shapes, the H200 table, AITER's own test pairs, cross-attention.
PERF_SHAPES = [
    (2, 24, 8192, 8192), (2, 24, 16384, 16384), (1, 32, 16384, 16384), (4, 16, 16384, 16384),
    (1, 64, 16384, 16384), (2, 24, 32768, 32768), (2, 16, 65536, 65536), (2, 8, 86016, 86016),
    (1, 16, 131072, 131072), (2, 16, 8192, 8192), (4, 16, 4096, 4096), (8, 16, 2048, 2048),
    (16, 16, 1024, 1024), (32, 16, 512, 512), (2, 40, 1024, 77), (5, 6, 113, 203), (5, 6, 128, 217),
    (5, 6, 256, 512), (5, 6, 1023, 1024), (5, 6, 2048, 2048), (1, 40, 4096, 226), (1, 24, 4096, 4096),
    (4, 24, 2048, 2048), (1, 12, 75600, 75600), (2, 12, 32760, 32760), (1, 16, 8192, 512),
    (8, 32, 1024, 1024), (1, 32, 32768, 32768), (16, 8, 2048, 2048), (1, 48, 16384, 16384),
]
# fmt: on
E2E_MODELS = [("wan2.1-t2v-1.3b", 1, 32760), ("flux-dev", 1, 4608), ("llama-3-8b-prefill", 8, 4096)]


@dataclass(frozen=True)
class StackDef:
    name: str
    keys: dict[str, str]
    backend: str
    baseline: str
    tflops: float  # what the kernel reaches on a large shape
    hostname: str

    @property
    def digest(self) -> str:
        return stack_digest({k: self.keys[k] for k in HASHED_KEYS}, SCHEMA_VERSION)


def _rocm(name: str, toolkit: str, compiler: str, driver: str, firmware: str, host: str) -> StackDef:
    keys = {
        "backend": "hip",
        "gpu_arch": "gfx942",
        "gpu_product": "AMD Instinct MI300X",
        "driver": driver,
        "firmware": firmware,
        "toolkit": f"rocm-{toolkit}",
        "compiler": compiler,
        "build_flags": "-O3 --offload-arch=gfx942 -mcumode=0",
        "os_kernel": "6.8.0-49-generic",
        "torch": "2.6.0+rocm6.2",
        "baseline_library": "aiter 0.1.2",
        "python": "3.11.7",
    }
    return StackDef(name, keys, "hip", "aiter", 575.0, host)


def _cuda(name: str, toolkit: str, driver: str, host: str) -> StackDef:
    keys = {
        "backend": "cuda",
        "gpu_arch": "sm_90",
        "gpu_product": "NVIDIA H200",
        "driver": driver,
        "firmware": "96.00.9F.00.01",
        "toolkit": f"cuda-{toolkit}",
        "compiler": f"nvcc {toolkit}",
        "build_flags": "-O3 -arch=sm_90a --use_fast_math=false",
        "os_kernel": "6.8.0-49-generic",
        "torch": "2.11.0+cu128",
        "baseline_library": "cudnn 9.19",
        "python": "3.11.7",
    }
    return StackDef(name, keys, "cuda", "sdpa_cudnn", 395.0, host)


def _lanes(count: int) -> list[list[StackDef]]:
    """One list per lane: its stack before and (lane 0) after the upgrade."""
    lanes = [
        [
            _rocm(
                "mi300x-rocm-6.2",
                "6.2.4",
                "AMD clang 18.0.0git (rocm-6.2.4)",
                "6.8.5",
                "PSP 0x2d",
                "mi300x-01",
            ),
            _rocm(
                "mi300x-rocm-6.3",
                "6.3.1",
                "AMD clang 18.0.0git (rocm-6.3.1)",
                "6.10.5",
                "PSP 0x31",
                "mi300x-01",
            ),
        ],
        [_cuda("h200-cuda-12.8", "12.8", "570.124.06", "h200-01")],
        [
            _rocm(
                "mi300x-rocm-6.4rc",
                "6.4.0rc2",
                "AMD clang 19.0.0git (rocm-6.4.0)",
                "6.12.0",
                "PSP 0x33",
                "mi300x-02",
            )
        ],
    ]
    for extra in range(3, count):  # more lanes: more CUDA hosts on other toolkits
        lanes.append(
            [_cuda(f"h200-cuda-12.{extra + 6}", f"12.{extra + 6}", "575.51.03", f"h200-{extra:02d}")]
        )
    return lanes[:count]


def demo_cases(count: int) -> list[CaseSpec]:
    """About `count` cases: 60 % perf, 24 % ULP, 10 % determinism, the rest end-to-end.

    Named as regress.suites.common names them (copied here, since importing the suites imports torch).
    """
    count = max(count, 12)
    n_perf, n_ulp, n_det = round(count * 0.60 / 6), round(count * 0.24 / 6), round(count * 0.10 / 6)
    n_e2e = max(1, count - 6 * (n_perf + n_ulp + n_det))
    shapes = list(PERF_SHAPES)
    i = 0
    while len(shapes) < n_perf:  # grow a grid of powers of two beyond the named shapes
        b, h, s = 1 << (i % 4), (8, 16, 32)[i % 3], 1024 << (i % 6)
        if (b, h, s, s) not in shapes:
            shapes.append((b, h, s, s))
        i += 1

    def spec(suite: str, shape: tuple[int, int, int, int], layout: str, mode: str, *suffix: str) -> CaseSpec:
        b, h, sq, sk = shape
        name = "_".join([f"b{b}_h{h}_sq{sq}_sk{sk}", layout, mode, *suffix])
        params = {"b": b, "h": h, "sq": sq, "sk": sk, "d": 128, "layout": layout, "mode": mode}
        return CaseSpec(suite=suite, name=name, params=params)

    specs = [spec("perf", sh, lay, m) for sh in shapes[:n_perf] for lay in LAYOUTS for m in MODES]
    # ULP and determinism run on the smaller shapes (the fp64 reference is costly).
    small = sorted(shapes[:n_perf], key=lambda s: s[0] * s[1] * s[2] * s[3])
    specs += [spec("ulp", sh, lay, m) for sh in small[:n_ulp] for lay in LAYOUTS for m in MODES]
    specs += [
        spec("determinism", sh, lay, m, "repeat") for sh in small[:n_det] for lay in LAYOUTS for m in MODES
    ]
    for j in range(n_e2e):
        model, batch, seq = E2E_MODELS[j % len(E2E_MODELS)]
        mode = MODES[(j // len(E2E_MODELS)) % 3]
        batch *= 1 << (j // (3 * len(E2E_MODELS)))  # beyond 9 cases: larger batches
        params = {"model": model, "batch": batch, "seq": seq, "mode": mode, "layout": "bshd"}
        specs.append(CaseSpec(suite="e2e", name=f"{model}_b{batch}_{mode}", params=params))
    return specs


@dataclass
class Event:
    """A scripted change from `night` on (until `until`, exclusive) for the cases `applies` selects."""

    name: str
    night: int
    factor: float
    lanes: tuple[int, ...]
    selector: str
    until: int | None = None
    state: str | None = None  # the Regression row to record, if it is a regression


def _events(total: int) -> list[Event]:
    at = lambda frac: max(1, min(total - 1, int(total * frac)))  # noqa: E731
    return [
        Event("tile scheduler: long sequences faster", at(0.22), 0.94, (0, 1, 2), "long"),
        Event(
            "rtz epilogue reorder: rtz slower",
            at(0.40),
            1.09,
            (0, 2),
            "rtz",
            until=at(0.52),
            state="resolved",
        ),
        Event("LDS double-buffer on short K", at(0.75), 0.97, (0, 1, 2), "short_k"),
        Event(
            "softmax rescale change: rtna bhsd slower",
            max(1, total - 6),
            1.12,
            (0,),
            "rtna_bhsd",
            state="open",
        ),
    ]


def _selects(selector: str, p: dict[str, Any]) -> bool:
    sq, sk = p.get("sq") or p.get("seq", 0), p.get("sk") or p.get("seq", 0)
    return {
        "long": sq * sk >= 16384 * 16384,
        "rtz": p.get("mode") == "rtz",
        "short_k": sk <= 4096,
        "rtna_bhsd": p.get("mode") == "rtna" and p.get("layout") == "bhsd" and sq >= 8192,
    }[selector]


@dataclass
class DemoSummary:
    nights: int
    stacks: int
    cases: int
    runs: int
    results: int
    regressions: int
    seconds: float
    run_ids: list[str] = field(default_factory=list)


def _sha(*parts: Any) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def _run_time(start: datetime, night: int, lane: int) -> datetime:
    return start + timedelta(days=night, hours=2, minutes=40 * lane)


def _run_id(start: datetime, seed: int, night: int, lane: int) -> str:
    """Time-sortable like store.new_run_id, but reproducible from (seed, night, lane)."""
    return f"{int(_run_time(start, night, lane).timestamp() * 1000):012x}{_sha(seed, night, lane)[:12]}"


def _noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Draws from the measured t / median distribution (inverse CDF, linear between quantiles)."""
    q = np.asarray(REAL_NOISE_QUANTILES)
    u = rng.random(shape) * (len(q) - 1)
    lo = np.floor(u).astype(int)
    hi = np.minimum(lo + 1, len(q) - 1)
    return q[lo] + (q[hi] - q[lo]) * (u - lo)


def _base_ms(p: dict[str, Any], sd: StackDef) -> float:
    b, h, sq, sk, d = p["b"], p["h"], p["sq"], p["sk"], p["d"]
    work = b * h * sq * sk
    # Small problems cannot fill the GPU: efficiency falls off below ~2^28 score elements.
    eff = 1.0 / (1.0 + (2**26 / work) ** 0.6)
    mode = {"rtne": 1.0, "rtna": 1.004, "rtz": 0.992}[p["mode"]]
    layout = 1.0 if p["layout"] == "bhsd" else 1.015
    return 4 * work * d / (sd.tflops * 1e12 * eff) * 1e3 * mode * layout + 0.012


def demo_history(
    store: Store,
    *,
    nights: int = 60,
    stacks: int = 3,
    cases: int = 300,
    seed: int = 0,
    samples: int = 25,
    first_night: int = 0,
    total_nights: int | None = None,
    start: datetime | None = None,
) -> DemoSummary:
    """Writes nights [first_night, first_night + nights) of a history planned for `total_nights`.

    The plan (events, upgrade night) depends on `total_nights` and `seed` only, so a later call with
    first_night=N, nights=1 appends "tonight" to an earlier history (the site benchmark does this).
    Regression rows and the gate decision are written with the night that triggers them.
    """
    if nights < 1 or stacks < 1 or cases < 1:
        raise ValueError("nights, stacks and cases must be at least 1")
    t0 = time.perf_counter()
    total = total_nights or (first_night + nights)
    if start is None:
        today = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)
        start = today - timedelta(days=total - 1)
    lanes = _lanes(stacks)
    upgrade_night = max(1, int(total * 0.6))
    specs = demo_cases(cases)
    events = _events(total)
    thermal_night = max(1, int(total * 0.33))

    with store.transaction() as session:
        stack_ids = {
            sd.name: get_or_create_stack(
                session, digest=sd.digest, keys=sd.keys, schema_version=SCHEMA_VERSION, name=sd.name
            ).id
            for lane in lanes
            for sd in lane
        }
        case_ids = [get_or_create_case(session, s).id for s in specs]

    perf_idx = [i for i, s in enumerate(specs) if s.suite == "perf"]
    base = {
        (li, k): [_base_ms(specs[i].params, sd) for i in perf_idx]
        for li, lane in enumerate(lanes)
        for k, sd in enumerate(lane)
    }
    # Per-case constants: seeded by (seed, case), independent of the nights being written.
    crng = np.random.default_rng([seed, 7])
    case_speedup_jitter = crng.normal(1.0, 0.025, len(specs))
    case_drift = crng.normal(0.0, 0.0015, len(specs))
    ulp_base = crng.uniform(0.92, 1.28, len(specs))

    run_rows: list[dict[str, Any]] = []
    result_rows: list[dict[str, Any]] = []
    sample_rows: list[dict[str, Any]] = []
    regressions: list[dict[str, Any]] = []
    gates: list[dict[str, Any]] = []
    # first / last run of each event per lane, to anchor Regression rows
    event_runs: dict[tuple[str, int], dict[str, str]] = {}
    last_run_before: dict[int, str] = {}

    with store.transaction() as session:
        next_result = (session.scalar(select(func.max(Result.id))) or 0) + 1
        next_sample = (session.scalar(select(func.max(Sample.id))) or 0) + 1
        for night in range(first_night, first_night + nights):
            nrng = np.random.default_rng([seed, night])
            commit = _sha(seed, "commit", night // 3 if all(night != e.night for e in events) else night)
            for li, lane in enumerate(lanes):
                k = 1 if (len(lane) > 1 and night >= upgrade_night) else 0
                sd = lane[k]
                when = _run_time(start, night, li)
                rid = _run_id(start, seed, night, li)
                factor = np.ones(len(specs))
                for i, s in enumerate(specs):
                    f = 1.0 + case_drift[i] * math.sin(night / 23.0 + i)
                    for e in events:
                        if (
                            li in e.lanes
                            and e.night <= night < (e.until or total + 10**6)
                            and _selects(e.selector, s.params)
                        ):
                            f *= e.factor
                    if k == 1:
                        f *= (
                            1.05
                            if s.params.get("layout") == "bshd" and s.params.get("sk", 0) <= 4096
                            else 0.97
                        )
                    factor[i] = f
                if night == thermal_night and li == 0:
                    factor *= 1.22  # a hot rack for one night: an outlier, not a step
                res_status: dict[str, dict[str, int]] = {}
                speedups: dict[str, list[float]] = {m: [] for m in MODES}

                # perf: every sample drawn from the real-noise shape around this night's level
                level = np.asarray(base[(li, k)]) * factor[perf_idx] * nrng.normal(1.0, 0.004, len(perf_idx))
                draws = level[:, None] * _noise(nrng, (len(perf_idx), samples))
                draws = np.round(draws, 5)
                srt = np.sort(draws, axis=1)
                p50 = np.median(draws, axis=1)
                p95 = srt[:, min(samples - 1, round(0.95 * (samples - 1)))]
                mean, std = (
                    draws.mean(axis=1),
                    draws.std(axis=1, ddof=1) if samples > 1 else np.zeros(len(perf_idx)),
                )
                table = ROCM_SPEEDUP if sd.backend == "hip" else CUDA_SPEEDUP
                for j, i in enumerate(perf_idx):
                    s = specs[i]
                    p = s.params
                    sp_true = table[p["mode"]] * case_speedup_jitter[i]
                    bl_ms = float(base[(li, k)][j]) * sp_true * nrng.normal(1.0, 0.004)
                    speedup = bl_ms / float(p50[j])
                    flops = 4 * p["b"] * p["h"] * p["sq"] * p["sk"] * p["d"]
                    metrics = {
                        "p50_ms": round(float(p50[j]), 5),
                        "p95_ms": round(float(p95[j]), 5),
                        "mean_ms": round(float(mean[j]), 5),
                        "stdev_ms": round(float(std[j]), 6),
                        "tflops": round(flops / (float(p50[j]) * 1e-3) / 1e12, 2),
                        f"baseline:{sd.baseline}:p50_ms": round(bl_ms, 5),
                        f"speedup_vs_{sd.baseline}": round(speedup, 4),
                        "iterations": samples,
                    }
                    speedups[p["mode"]].append(speedup)
                    result_rows.append(
                        {
                            "id": next_result,
                            "run_id": rid,
                            "case_id": case_ids[i],
                            "status": "pass",
                            "value": metrics["p50_ms"],
                            "metrics": metrics,
                            "device": {},
                            "message": "",
                        }
                    )
                    sample_rows.append(
                        {
                            "id": next_sample,
                            "result_id": next_result,
                            "name": "time_ms",
                            "values": draws[j].tolist(),
                        }
                    )
                    next_result += 1
                    next_sample += 1
                    res_status.setdefault("perf", {}).setdefault("pass", 0)
                    res_status["perf"]["pass"] += 1

                for i, s in enumerate(specs):
                    p = s.params
                    if s.suite == "ulp":
                        limit = 2.0 if p["mode"] == "rtz" else 1.5
                        v = float(ulp_base[i]) * (1.35 if p["mode"] == "rtz" else 1.0)
                        if k == 1:
                            v *= 1.01  # the new compiler contracts one FMA differently
                        # a numerics regression in lane 0 late in the history: rtna bshd crosses 1.5
                        if (
                            li == 0
                            and night >= int(total * 0.85)
                            and p["mode"] == "rtna"
                            and p["layout"] == "bshd"
                        ):
                            v = max(v, 1.5) + 0.11 + 0.02 * (i % 3)
                        v = round(v, 4)
                        status = "pass" if v <= limit else "fail"
                        metrics = {
                            "scaled_ulp_max": v,
                            "scaled_ulp_limit": limit,
                            "scaled_ulp_p9999": round(v * 0.66, 4),
                            "plain_ulp_max": 29000 + (i * 37) % 900,
                            "nonfinite_mismatches": 0,
                        }
                    elif s.suite == "determinism":
                        distinct = (
                            2 if (li == len(lanes) - 1 and night == int(total * 0.5) and i % 4 == 0) else 1
                        )
                        status = "pass" if distinct == 1 else "fail"
                        v = float(distinct)
                        metrics = {
                            "distinct_hashes": distinct,
                            "launches": 10,
                            "differing_elements": 0 if distinct == 1 else 384,
                            "differing_launches": 0 if distinct == 1 else 1,
                        }
                    elif s.suite == "e2e":
                        ms = (40.0 + 15 * (i % 3)) * (1.0 if sd.backend == "hip" else 0.8) * factor[i]
                        ms *= float(nrng.normal(1.0, 0.006))
                        tail = float(_noise(nrng, (1,))[0])
                        v = round(ms, 4)
                        status = "pass"
                        metrics = {
                            "p50_ms": v,
                            "p95_ms": round(ms * max(tail, 1.03), 4),
                            "tokens_per_s": round(p["batch"] * p["seq"] / (ms / 1e3), 1),
                            f"speedup_vs_{sd.baseline}": round(1.12 if sd.backend == "hip" else 0.9, 3),
                        }
                    else:
                        continue
                    result_rows.append(
                        {
                            "id": next_result,
                            "run_id": rid,
                            "case_id": case_ids[i],
                            "status": status,
                            "value": v,
                            "metrics": metrics,
                            "device": {},
                            "message": "",
                        }
                    )
                    next_result += 1
                    res_status.setdefault(s.suite, {}).setdefault(status, 0)
                    res_status[s.suite][status] += 1

                failed = any(st.get("fail") for st in res_status.values())
                geo = {
                    m: round(math.exp(sum(map(math.log, v)) / len(v)), 4) for m, v in speedups.items() if v
                }
                temp = 38 + 4 * float(nrng.random()) + (30 if night == thermal_night and li == 0 else 0)
                run_rows.append(
                    {
                        "id": rid,
                        "stack_id": stack_ids[sd.name],
                        "build_id": None,
                        "status": "complete",
                        "trigger": "nightly",
                        "is_drill": False,
                        "backend": sd.backend,
                        "kernel_commit": commit,
                        "source_hash": _sha("src", commit)[:16],
                        "suites": ["perf", "ulp", "determinism", "e2e"],
                        "runner": f"{sd.hostname}-runner",
                        "hostname": sd.hostname,
                        "pid": None,
                        "host": {
                            "hostname": sd.hostname,
                            "cpu": "AMD EPYC 9654" if sd.backend == "hip" else "Intel Xeon Platinum 8480+",
                            "gpus": 8,
                        },
                        "ci": {"workflow": "nightly", "run_number": night + 1, "branch": "main"},
                        "gpu_state": {
                            "before": {"sclk_mhz": 2100, "temp_c": round(temp, 1), "power_w": 140},
                            "after": {
                                "sclk_mhz": 2100 if temp < 60 else 1700,
                                "temp_c": round(temp + 21, 1),
                                "power_w": 610,
                            },
                        },
                        "summary": {"geomean_speedup": geo, "baseline": sd.baseline, "suites": res_status},
                        "message": "",
                        "exit_code": 1 if failed else 0,
                        "origin": "local",
                        "started_at": when,
                        "finished_at": when + timedelta(minutes=35),
                    }
                )
                for e in events:
                    if e.state and li in e.lanes:
                        if night == e.night - 1:
                            last_run_before[id(e) * 10 + li] = rid
                        if e.night <= night < (e.until or total + 10**6):
                            anchor = event_runs.setdefault((e.name, li), {"first": rid})
                            anchor["last"] = rid
                if k == 1 and night == upgrade_night and run_rows and len(run_rows) > len(lanes):
                    prev = [r for r in run_rows if r["stack_id"] == stack_ids[lane[0].name]]
                    if prev:
                        gates.append(_gate(prev[-1]["id"], rid, lane[0], sd))
            # flush per ~20k results, keeping memory flat
            if len(result_rows) > 20000:
                _flush(session, run_rows, result_rows, sample_rows)
        _flush(session, run_rows, result_rows, sample_rows)

        # Regression rows for the scripted regressions, three perf cases each.
        for e in events:
            for li in e.lanes:
                found = event_runs.get((e.name, li))
                if not (e.state and found) or e.night < first_night or e.night >= first_night + nights:
                    continue
                anchor = found
                chosen = [i for i in perf_idx if _selects(e.selector, specs[i].params)][:3]
                sd = lanes[li][1 if len(lanes[li]) > 1 and e.night >= upgrade_night else 0]
                for i in chosen:
                    regressions.append(
                        _regression(
                            case_ids[i],
                            stack_ids[sd.name],
                            "perf",
                            "p50_ms",
                            e.state,
                            anchor,
                            last_run_before.get(id(e) * 10 + li),
                            e.factor - 1,
                            e.name,
                        )
                    )
        num_night = int(total * 0.85)
        if first_night <= num_night < first_night + nights:
            sd = lanes[0][1 if len(lanes[0]) > 1 and num_night >= upgrade_night else 0]
            bad = [_run_id(start, seed, n, 0) for n in range(num_night, first_night + nights)]
            ulp_cases = [
                i
                for i, s in enumerate(specs)
                if s.suite == "ulp" and s.params["mode"] == "rtna" and s.params["layout"] == "bshd"
            ][:2]
            for i in ulp_cases:
                regressions.append(
                    _regression(
                        case_ids[i],
                        stack_ids[sd.name],
                        "numerics",
                        "scaled_ulp_max",
                        "open",
                        {"first": bad[0], "last": bad[-1]},
                        None,
                        None,
                        "scaled ULP above the 1.5 rtna limit",
                    )
                )
        det_night = int(total * 0.5)
        if first_night <= det_night < first_night + nights:
            sd = lanes[-1][0]
            rid = _run_id(start, seed, det_night, len(lanes) - 1)
            det_cases = [i for i, s in enumerate(specs) if s.suite == "determinism"][:1]
            for i in det_cases:
                regressions.append(
                    _regression(
                        case_ids[i],
                        stack_ids[sd.name],
                        "determinism",
                        "distinct_hashes",
                        "acknowledged",
                        {"first": rid, "last": rid},
                        None,
                        1.0,
                        "2 distinct output hashes in 10 launches",
                        note="runner mi300x-02 had an ECC event that night; re-run was clean",
                    )
                )
        if regressions:
            session.execute(insert(Regression), regressions)
        for g in gates:
            session.add(GateDecision(**g))
    return DemoSummary(
        nights=nights,
        stacks=len(lanes),
        cases=len(specs),
        runs=len(lanes) * nights,
        results=next_result - 1,
        regressions=len(regressions),
        seconds=time.perf_counter() - t0,
    )


def _table(model: type[Any]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


def _flush(
    session: Session, runs: list[dict[str, Any]], results: list[dict[str, Any]], samples: list[dict[str, Any]]
) -> None:
    # Core inserts (executemany), in foreign-key order.
    if runs:
        session.execute(insert(_table(Run)), runs)
    if results:
        session.execute(insert(_table(Result)), results)
    if samples:
        session.execute(insert(_table(Sample)), samples)
    runs.clear()
    results.clear()
    samples.clear()


def _regression(
    case_id: int,
    stack_id: int,
    kind: str,
    metric: str,
    state: str,
    anchor: dict[str, str],
    baseline: str | None,
    magnitude: float | None,
    title: str,
    note: str = "",
) -> dict[str, Any]:
    now = datetime.now().replace(microsecond=0)
    return {
        "case_id": case_id,
        "stack_id": stack_id,
        "kind": kind,
        "metric": metric,
        "state": state,
        "first_run_id": anchor["first"],
        "baseline_run_id": baseline,
        "last_run_id": anchor.get("last", anchor["first"]),
        "magnitude": magnitude,
        "p_value": 1e-6 if kind == "perf" else None,
        "details": {"title": title, "source": "demo-history"},
        "note": note,
        "created_at": now,
        "updated_at": now,
        "resolved_at": now if state == "resolved" else None,
    }


def _gate(baseline_run: str, candidate_run: str, old: StackDef, new: StackDef) -> dict[str, Any]:
    rows = [
        {
            "case": "b2_h24_sq16384_sk16384_bshd_rtne",
            "suite": "perf",
            "metric": "p50_ms",
            "baseline": 11.71,
            "candidate": 11.37,
            "change": -0.029,
            "p_value": 1e-9,
            "verdict": "improved",
        },
        {
            "case": "b16_h16_sq1024_sk1024_bshd_rtz",
            "suite": "perf",
            "metric": "p50_ms",
            "baseline": 0.241,
            "candidate": 0.253,
            "change": 0.05,
            "p_value": 2e-7,
            "verdict": "regression",
        },
        {
            "case": "b5_h6_sq113_sk203_bhsd_rtna",
            "suite": "ulp",
            "metric": "scaled_ulp_max",
            "baseline": 1.12,
            "candidate": 1.13,
            "change": 0.009,
            "p_value": None,
            "verdict": "pass",
        },
        {
            "case": "b5_h6_sq113_sk203_bhsd_rtne_repeat",
            "suite": "determinism",
            "metric": "distinct_hashes",
            "baseline": 1,
            "candidate": 1,
            "change": 0.0,
            "p_value": None,
            "verdict": "pass",
        },
    ]
    changed = {k: [old.keys[k], new.keys[k]] for k in old.keys if old.keys[k] != new.keys.get(k)}
    return {
        "baseline_run_id": baseline_run,
        "candidate_run_id": candidate_run,
        "verdict": "regression",
        "exit_code": 1,
        "report": {
            "verdict": "regression",
            "baseline_stack": old.name,
            "candidate_stack": new.name,
            "stack_changes": changed,
            "summary": "1 perf regression (bshd, short K), 1 improvement; numerics and determinism pass",
            "rows": rows,
        },
    }
