"""Predicted MI300X times (the CDNA3 timing model of regress.emu.timing) of AITER v3, MoonMath and
our kernel, beside MoonMath's published MI300X table. Every time this prints is *predicted*.

One JSON line per (shape, mode, kernel):
    {"shape": [B,H,S,D], "mode", "kernel", "predicted_ms", "low_ms", "high_ms", "published_ms",
     "bound", "mfma_busy", "clock_mhz", ...; ours also "vs_aiter" / "vs_moonmath": [point, low, high]}
then one summary line (validation on the 48 non-fit published rows, ours vs the peers with bands).
low/high: the band over the model's readings (STRUCTURAL, each refitted, and the clock fit's
confidence); a ratio's band is taken within each reading.

    python benchmarks/mi300x/mi300x_model.py [--kernels ours,aiter,moonmath] [--shapes SHAPE ...] [--no-band]
        [--moonmath-src DIR] [--aiter-wheel FILE] [--code-object PATH] [--out FILE.jsonl] [--no-gqa-rows]
        [--no-v2-split]
        SHAPE: B,H,Sq,Sk[,Hkv][,causal][,lse] or varlen H[,Hkv],lens=L1/L2/...[,causal][,lse]
    python benchmarks/mi300x/mi300x_model.py --fit      # refit the clock parameters on the 6 RTNE fit rows

--out NAME.jsonl (a bare name) writes into regress/facts/data/mi300x/, the package data whose newest
predicted-*.jsonl the site shows; --out DIR/NAME.jsonl writes there instead.

Peers' inputs are read at run time and never stored: --aiter-wheel (default: downloaded into the
cache by regress.emu.peers.aiter), --moonmath-src (a checkout or unpacked snapshot).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for a plain checkout
from regress.emu import timing
from regress.emu.cdna3 import FITTED, C
from regress.emu.mi300x import (
    KernelModel,
    Ours,
    Prediction,
    Predictor,
    Shape,
    band,
    ratio_band,
    tflops,
)
from regress.facts.metrics import geomean
from regress.facts.resources import mi300x_predicted_dir
from regress.facts.results import ROUNDING_MODES
from regress.facts.stats import median

# MoonMath's README, "MI300X" table (median of 5 passes x 30 iterations; dense tail KV-split on; times
# include its V pre-transpose): (B, H, S) -> mode -> (MoonMath ms, AITER v3 ms). D = 128, Sq = Sk = S.
PUBLISHED: dict[tuple[int, int, int], dict[str, tuple[float, float]]] = {
    (2, 24, 8192): {"rtne": (3.083, 3.792), "rtna": (3.022, 3.605), "rtz": (2.983, 3.303)},
    (2, 24, 16384): {"rtne": (11.670, 14.691), "rtna": (11.479, 13.801), "rtz": (11.385, 12.629)},
    (1, 32, 16384): {"rtne": (8.013, 9.031), "rtna": (7.828, 8.656), "rtz": (7.731, 7.989)},
    (4, 16, 16384): {"rtne": (15.591, 18.337), "rtna": (15.331, 17.567), "rtz": (15.055, 16.183)},
    (1, 64, 16384): {"rtne": (15.528, 18.333), "rtna": (15.239, 17.535), "rtz": (15.040, 16.161)},
    (2, 24, 32768): {"rtne": (46.002, 54.794), "rtna": (44.440, 52.363), "rtz": (44.075, 48.549)},
    (2, 16, 65536): {"rtne": (117.612, 136.301), "rtna": (115.550, 130.278), "rtz": (114.665, 121.668)},
    (2, 8, 86016): {"rtne": (101.071, 118.939), "rtna": (100.165, 114.515), "rtz": (99.397, 106.513)},
    (1, 16, 131072): {"rtne": (232.517, 269.278), "rtna": (228.475, 258.092), "rtz": (226.152, 239.587)},
}
# The only rows the fitted parameters may see: RTNE, AITER (issue 21's three) and, since the clock's
# MFMA-flavour weight is seen only through a 16x16x16 kernel, MoonMath at the same three shapes (issue
# 38): 6 of the 54 published times, 48 left for validation.
FIT_ROWS = ((2, 24, 8192), (2, 24, 32768), (1, 16, 131072))
FIT_KERNELS = ("aiter", "moonmath")
FIT_MODE = "rtne"
KERNELS = ("aiter", "moonmath", "ours")
# Constants a time is divided by (timing.launch_time, the replay's LDS cost) or a count of CUs: not 0.
POSITIVE = frozenset(
    {
        "cus",
        "clock_ghz",
        "clock_eff",
        "clock_gemm_ghz",
        "gemm_mfma_busy",
        "hbm_tb_s",
        "l2_bytes_per_clk_xcd",
        "xcds",
        "lds_bytes_per_clk",
    }
)


def shape_arg(text: str) -> Shape:
    """Shape.parse for argparse: its reason in the usage error, not "invalid parse value"."""
    from regress.emu.mi300x import MAX_SAMPLED_KEYS

    try:
        shape = Shape.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if shape.sk > MAX_SAMPLED_KEYS:  # refused now, not after the other rows' predictions
        raise argparse.ArgumentTypeError(
            f"Sk={shape.sk:,}: the model samples at most {MAX_SAMPLED_KEYS:,} keys"
        )
    return shape


def published(kernel: str, shape: Shape, mode: str) -> float | None:
    if kernel == "ours" or not shape.plain or shape.sq != shape.sk or shape.hkv != shape.h or shape.d != 128:
        return None
    row = PUBLISHED.get((shape.b, shape.h, shape.sq), {}).get(mode)
    return None if row is None else row[0 if kernel == "moonmath" else 1]


def is_fit_row(kernel: str, shape: Shape, mode: str) -> bool:
    return (
        kernel in FIT_KERNELS
        and mode == FIT_MODE
        and (shape.b, shape.h, shape.sq) in FIT_ROWS
        and shape.sq == shape.sk
    )


def build_models(args: argparse.Namespace, cus: int = int(C["cus"])) -> dict[str, KernelModel]:
    from regress.emu.codeobject import CodeObjectError
    from regress.emu.peers.aiter import PeerUnavailable

    try:
        return _build_models(args, cus)
    except (CodeObjectError, PeerUnavailable) as e:  # a bad --code-object / --aiter-wheel: one line
        raise SystemExit(f"mi300x_model: {e}") from None


def _build_models(args: argparse.Namespace, cus: int) -> dict[str, KernelModel]:
    models: dict[str, KernelModel] = {}
    for name in args.kernels:
        if name == "ours":
            path = args.code_object
            if path is None:
                from regress.native.build import build_kernel

                path = build_kernel("hip-emu").path
            models["ours"] = Ours(path, cus=cus, gqa_rows=not args.no_gqa_rows, v2_split=not args.no_v2_split)
        elif name == "aiter":
            from regress.emu.mi300x import AiterModel

            models["aiter"] = AiterModel(args.aiter_wheel)
        elif name == "moonmath":
            from regress.emu.mi300x import MoonMathModel
            from regress.emu.peers.moonmath import MoonMathSourceMissing

            try:
                models["moonmath"] = MoonMathModel(args.moonmath_src)
            except MoonMathSourceMissing as e:
                msg = f"mi300x_model: {e} (--moonmath-src DIR, or --kernels without moonmath)"
                raise SystemExit(msg) from None
        else:
            raise SystemExit(f"mi300x_model: unknown kernel {name!r} (known: {', '.join(KERNELS)})")
    return models


def _mask_fields(s: Shape) -> dict[str, object]:
    """The causal flag, the varlen lengths and the LSE flag of a row's shape (absent for a plain dense
    batch)."""
    out: dict[str, object] = {}
    if s.causal:
        out["causal"] = True
    if s.lse:
        out["lse"] = True
    if s.lens:
        out["lens"] = list(s.lens)
    return out


def row(p: Prediction) -> dict[str, object]:
    s = p.shape
    pub = published(p.kernel, s, p.mode)
    out: dict[str, object] = {
        "shape": [s.b, s.h, s.sq, s.d] if s.sq == s.sk else [s.b, s.h, s.sq, s.sk, s.d],
        "mode": p.mode,
        "kernel": p.kernel,
        "predicted_ms": round(p.ms, 4),
        "published_ms": pub,
        "bound": p.bound,
        "mfma_busy": round(p.mfma_busy, 4),
        "predicted_tflops": round(tflops(s, p.ms), 1),
        "launches": {t.name: round(t.ms, 4) for t in p.launches},
        # the power-managed clock, time-weighted over the compute-bound launches
        "clock_mhz": round(
            1e3
            * sum(t.clock_ghz * t.compute_ms for t in p.launches)
            / (sum(t.compute_ms for t in p.launches) or 1),
            1,
        ),
    }
    if s.hkv != s.h:
        out["hkv"] = s.hkv
    out |= _mask_fields(s)
    if pub is not None:
        out["fit_row"] = is_fit_row(p.kernel, s, p.mode)
    return out


def summary(rows: list[dict[str, object]], params: dict[str, float], seconds: float) -> dict[str, object]:
    rows = [r for r in rows if "predicted_ms" in r]
    by = {(tuple(r["shape"]), r["mode"], r["kernel"]): r for r in rows}  # type: ignore[arg-type]
    out: dict[str, object] = {
        "summary": True,
        "predicted": True,
        "params": params,
        "seconds": round(seconds, 1),
    }
    for k in ("aiter", "moonmath"):
        errs = [
            abs(float(r["predicted_ms"]) / float(r["published_ms"]) - 1)  # type: ignore[arg-type]
            for r in rows
            if r["kernel"] == k and r["published_ms"] is not None and not r.get("fit_row")
        ]
        if errs:
            out[f"{k}_validation_rows"] = len(errs)
            out[f"{k}_median_abs_err"] = round(median(errs), 4)
            out[f"{k}_max_abs_err"] = round(max(errs), 4)
    pairs = [
        (by[(sh, m, "moonmath")], by[(sh, m, "aiter")])
        for (sh, m, k) in by
        if k == "aiter" and (sh, m, "moonmath") in by and by[(sh, m, "aiter")]["published_ms"] is not None
    ]
    if pairs:
        within = ranked = 0
        for mm, ai in pairs:
            pred = float(ai["predicted_ms"]) / float(mm["predicted_ms"])  # type: ignore[arg-type]
            pub = float(ai["published_ms"]) / float(mm["published_ms"])  # type: ignore[arg-type]
            within += abs(pred - pub) <= 0.05
            ranked += (pred > 1) == (pub > 1)
        out["speedup_rows"] = len(pairs)
        out["speedup_within_0.05"] = within
        out["ranked_correctly"] = ranked
    spreads = {}
    for (sh, m, k), r in by.items():
        lo = by.get((sh, "rtz", k))
        if m == "rtne" and k == "aiter" and lo and r["published_ms"] and lo["published_ms"]:
            pred = float(r["predicted_ms"]) / float(lo["predicted_ms"])  # type: ignore[arg-type]
            pub = float(r["published_ms"]) / float(lo["published_ms"])  # type: ignore[arg-type]
            spreads[",".join(str(x) for x in sh[:3])] = [round(pred, 3), round(pub, 3)]
    if spreads:
        out["aiter_rtne_rtz_spread"] = spreads
        out["aiter_spread_within_0.04"] = sum(abs(a - b) <= 0.04 for a, b in spreads.values())
    for peer in ("aiter", "moonmath"):
        for m in ROUNDING_MODES:
            ratios = [
                float(by[(sh, mm, peer)]["predicted_ms"]) / float(r["predicted_ms"])  # type: ignore[arg-type]
                for (sh, mm, k), r in by.items()
                if k == "ours" and mm == m and (sh, mm, peer) in by
            ]
            if ratios:
                out[f"ours_vs_{peer}_{m}"] = {
                    "geomean": round(geomean(ratios), 3),
                    "min": round(min(ratios), 3),
                }
    return out


def ceiling(
    preds: list[Prediction | dict[str, object]],
    predictor: Predictor,
    ours: KernelModel,
    params: dict[str, float],
) -> dict[str, object]:
    """Ours with its tile loop at the matrix core's floor (every SIMD's MFMAs back to back: MFMAs per
    wave per tile x waves per SIMD x passes x pass clocks; no rise cost; the power-managed clock of a
    matrix core busy every clock), the rest of each launch
    (fixed clocks, grid rounds, the split and merge, the bandwidth bounds) as predicted: the ratios
    no schedule of this design can beat under the model, per mode, geomean and min over the shapes."""
    by = {(p.shape, p.mode, p.kernel): p for p in preds if isinstance(p, Prediction)}
    out: dict[str, object] = {}
    for m in ROUNDING_MODES:
        floors, ratios = set(), {"aiter": [], "moonmath": []}  # type: dict[str, list[float]]
        for (shape, mode, kernel), _ in by.items():
            if kernel != "ours" or mode != m:
                continue
            ms = 0.0
            for la in ours.launches(shape, mode):
                st = predictor.steady("ours", la)
                if la.record is not None:
                    waves_per_simd = st.resident * 8 / C["simds"]
                    floor = st.issued_per_tile["mfma"] * waves_per_simd * C["mfma_16x16x16_bf16_passes"]
                    floor *= C["mfma_pass_clocks"]
                    floors.add(floor)
                    # at the floor the matrix core never idles: busy 1, so the clock of that load
                    busy = {int(C["mfma_16x16x16_bf16_passes"]): 1.0}
                    st = replace(st, per_tile=floor, rise_per_tile=0.0, mfma_busy_by_passes=busy)
                ms += timing.launch_time(la.grid, st, params=params).ms
            for peer in ratios:
                if (shape, mode, peer) in by:
                    ratios[peer].append(by[(shape, mode, peer)].ms / ms)
        if floors:
            out[m] = {"floor_clocks_per_tile": sorted(floors)} | {
                f"vs_{k}": {"geomean": round(geomean(v), 3), "min": round(min(v), 3)}
                for k, v in ratios.items()
                if v
            }
    return out


def predict_all(
    models: dict[str, KernelModel],
    shapes: list[Shape],
    modes: list[str],
    params: dict[str, float],
    pred: Predictor | None = None,
) -> tuple[list[Prediction | dict[str, object]], Predictor]:
    pred = pred or Predictor()
    pred.params = dict(params)
    out: list[Prediction | dict[str, object]] = []
    for s in shapes:
        for m in modes:
            for k in models:
                try:
                    out.append(pred.predict(models[k], s, m))
                except ValueError as e:  # a shape the kernel's own host code refuses: say so, go on
                    shape = [s.b, s.h, s.sq, s.d] if s.sq == s.sk else [s.b, s.h, s.sq, s.sk, s.d]
                    err: dict[str, object] = {"shape": shape, "mode": m, "kernel": k, "error": str(e)}
                    if s.hkv != s.h:
                        err["hkv"] = s.hkv
                    out.append(err | _mask_fields(s))
    return out, pred


CLOCK_FIT = "mfma_power_16x16x16"  # searched; clock_eff in closed form
BOUNDS = (0.1, 2.0)


@dataclass
class Fit:
    """The fitted clock parameters of one structural reading and their confidence."""

    values: dict[str, float]
    sigma: dict[str, float]  # 1-sigma, from the Gauss-Newton covariance of the log residuals
    cov: list[list[float]]  # over (mfma_power_16x16x16, log clock_eff)
    rms_log_err: float
    rows: int


def _fit_targets() -> list[tuple[str, Shape, float]]:
    out = []
    for k in FIT_KERNELS:
        for b, h, sq in FIT_ROWS:
            pub = PUBLISHED[(b, h, sq)][FIT_MODE][0 if k == "moonmath" else 1]
            out.append((k, Shape(b, h, sq, sq, h), pub))
    return out


def fit(
    models: dict[str, KernelModel], base: dict[str, float] | None = None, predictor: Predictor | None = None
) -> Fit:
    """Least squares in log time over the six fit rows: mfma_power_16x16x16 searched (a grid, then a
    bounded scalar search), clock_eff in closed form (the log-mean of predicted / published). `base`
    holds the reading's other constants (latencies, co-issue rule, clock_beta: --set)."""
    import numpy as np
    from scipy.optimize import minimize_scalar

    missing = [k for k in FIT_KERNELS if k not in models]
    if missing:
        raise SystemExit(f"mi300x_model --fit: needs the {' and '.join(missing)} kernel(s)")
    targets = _fit_targets()
    pred = predictor or Predictor()
    base = dict(base or {})

    def log_ratios(theta: dict[str, float]) -> np.ndarray:
        pred.params = base | theta
        return np.array([math.log(pred.predict(models[k], s, FIT_MODE).ms / pub) for k, s, pub in targets])

    def sse(w: float) -> float:
        r = log_ratios({CLOCK_FIT: w, "clock_eff": 1.0})
        return float(((r - r.mean()) ** 2).sum())

    lo, hi = BOUNDS
    grid = [lo + i * (hi - lo) / 38 for i in range(39)]
    w0 = min(grid, key=sse)
    step = (hi - lo) / 38
    res = minimize_scalar(sse, bounds=(max(lo, w0 - step), min(hi, w0 + step)), method="bounded")
    w = float(res.x)
    # time = clocks / (f x eff): log time falls by log eff, so eff = exp(mean log ratio)
    theta = {CLOCK_FIT: w, "clock_eff": math.exp(float(log_ratios({CLOCK_FIT: w, "clock_eff": 1.0}).mean()))}
    resid = log_ratios(theta)
    h = 1e-3
    d_w = (log_ratios(theta | {CLOCK_FIT: w + h}) - log_ratios(theta | {CLOCK_FIT: w - h})) / (2 * h)
    jac = np.stack([d_w, -np.ones(len(targets))], axis=1)  # over (w16, log eff)
    dof = max(1, len(targets) - jac.shape[1])
    cov = float(resid @ resid) / dof * np.linalg.pinv(jac.T @ jac)
    sig = np.sqrt(np.maximum(np.diag(cov), 0.0))
    pred.params = base
    return Fit(
        values={CLOCK_FIT: round(w, 4), "clock_eff": round(theta["clock_eff"], 4)},
        sigma={CLOCK_FIT: round(float(sig[0]), 4), "log_clock_eff": round(float(sig[1]), 4)},
        cov=cov.tolist(),
        rms_log_err=round(float(np.sqrt(resid @ resid / len(targets))), 4),
        rows=len(targets),
    )


def confidence_readings(f: Fit) -> dict[str, dict[str, float]]:
    """The clock parameters one sigma either way along each principal axis of the fit's covariance
    (the ellipse's extreme readings: correlated parameters move together)."""
    import numpy as np

    vals, vecs = np.linalg.eigh(np.array(f.cov))
    x = np.array([f.values[CLOCK_FIT], math.log(f.values["clock_eff"])])
    out: dict[str, dict[str, float]] = {}
    for i in range(len(vals)):
        for sign in (1, -1):
            y = x + sign * math.sqrt(max(float(vals[i]), 0.0)) * vecs[:, i]
            out[f"clock fit axis {i} {'+' if sign > 0 else '-'}1 sigma"] = {
                CLOCK_FIT: float(min(max(y[0], BOUNDS[0]), BOUNDS[1])),
                "clock_eff": float(math.exp(y[1])),
            }
    return out


# The model's plausible structural readings beside the point (each refits the clock on the fit rows):
# the sourced alternatives of the co-issue and issue rules (docs/hip-gfx942.md), and the latencies
# at their sourced range ends (cdna3: *_low / *_high). "No co-issue" is not among them: its only
# source is MI308X with its peak-TOPS limiter disabled.
STRUCTURAL: tuple[tuple[str, dict[str, float]], ...] = (
    ("point", {}),
    ("8-pass MFMA holds the VALU 2 cycles (LLVM PRs 181778, 184084)", {"mfma_valu_hold_cycles_8pass": 2.0}),
    ("packed-F32 hold SIMD-wide (PR 233721's open reading)", {"mfma_pk_f32_simd_wide": 1.0}),
    (
        "transcendentals hold the VALU 1 cycle (SISchedule WriteTrans32 as latency)",
        {"trans_issue_cycles": 1.0},
    ),
    ("fetch-window straddle costs a quad (LLVM PR 203934)", {"fetch_straddle_cycles": 1.0}),
    ("lds_latency low", {"lds_latency": C["lds_latency_low"]}),
    ("lds_latency high", {"lds_latency": C["lds_latency_high"]}),
    ("vmem_latency low", {"vmem_latency": C["vmem_latency_low"]}),
    ("vmem_latency high", {"vmem_latency": C["vmem_latency_high"]}),
    ("clock_beta low", {"clock_beta": C["clock_beta_low"]}),
    ("clock_beta high", {"clock_beta": C["clock_beta_high"]}),
)


def readings(
    models: dict[str, KernelModel], params: dict[str, float], pred: Predictor
) -> tuple[dict[str, dict[str, float]], dict[str, object]]:
    """Every reading's full parameter set: the point (`params`, the committed fit), each structural
    reading with the clock refitted on the fit rows (so a reading that shifts every kernel alike is
    absorbed by the calibration, as the point's is), and the point's clock parameters over their
    fitted confidence. Without both fit kernels the structural readings keep the committed fit."""
    out = {"point": dict(params)}
    info: dict[str, object] = {}
    can_fit = all(k in models for k in FIT_KERNELS)
    for name, over in STRUCTURAL[1:]:
        base = {k: v for k, v in params.items() if k not in FITTED} | over
        if can_fit:
            f = fit(models, base, pred)
            out[name] = base | f.values
            info[name] = {"set": over, "fitted": f.values, "rms_log_err": f.rms_log_err}
        else:
            out[name] = params | over
            info[name] = {"set": over, "fitted": "committed (fit kernels absent)"}
    if can_fit:
        f = fit(models, {k: v for k, v in params.items() if k not in FITTED}, pred)
        for name, theta in confidence_readings(f).items():
            out[name] = params | theta
            info[name] = {"set": {k: round(v, 4) for k, v in theta.items()}}
    return out, info


def attach_bands(
    rows: list[dict[str, object]], by_reading: dict[str, list[Prediction | dict[str, object]]]
) -> None:
    """low_ms / high_ms on every row over the readings, and on ours the ratio against each peer as
    [point, low, high], each ratio computed within one reading."""
    ms: dict[tuple[object, ...], dict[str, float]] = {}
    for name, preds in by_reading.items():
        for p in preds:
            if isinstance(p, Prediction):
                ms.setdefault((p.shape, p.mode, p.kernel), {})[name] = p.ms
    point = {
        (p.shape, p.mode, p.kernel): r
        for p, r in zip(by_reading["point"], rows, strict=True)
        if isinstance(p, Prediction)
    }
    for key, r in point.items():
        _, lo, hi = band(ms[key])
        r["low_ms"], r["high_ms"] = round(lo, 4), round(hi, 4)
        shape, mode, kernel = key
        if kernel != "ours":
            continue
        for peer in ("aiter", "moonmath"):
            if (shape, mode, peer) in ms:
                r[f"vs_{peer}"] = [round(x, 4) for x in ratio_band(ms[(shape, mode, peer)], ms[key])]


def ratio_geomean_bands(
    by_reading: dict[str, list[Prediction | dict[str, object]]],
) -> dict[str, dict[str, float]]:
    """Per peer and mode: the geomean over the shapes of peer ms / ours ms, as point [low, high], the
    geomean taken within each reading before the band is."""
    per: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name, preds in by_reading.items():
        by = {(p.shape, p.mode, p.kernel): p.ms for p in preds if isinstance(p, Prediction)}
        for (shape, mode, kernel), ours in by.items():
            if kernel != "ours":
                continue
            for peer in ("aiter", "moonmath"):
                if (shape, mode, peer) in by:
                    per.setdefault(f"{peer}_{mode}", {}).setdefault(name, []).append(
                        by[(shape, mode, peer)] / ours
                    )
    out = {}
    for key, reads in per.items():
        g = {name: geomean(v) for name, v in reads.items()}
        p_, lo, hi = band(g)
        out[key] = {"geomean": round(p_, 3), "low": round(lo, 3), "high": round(hi, 3)}
        out[key]["by_reading"] = {name: round(v, 3) for name, v in g.items()}  # type: ignore[assignment]
    return out


BUCKETS = (
    ("MFMA issue", ("mfma",)),
    ("VALU issue", ("valu",)),
    ("quarter-rate VALU held", ("valu busy",)),
    ("matrix core busy (wait)", ("matrix core busy",)),
    ("packed-F32 VALU behind MFMA", ("packed f32 behind MFMA",)),
    ("lost arbitration", ("arbitration",)),
    ("s_nop", ("s_nop",)),
    ("wait LDS/scalar (lgkmcnt)", ("wait lgkmcnt",)),
    ("wait global (vmcnt)", ("wait vmcnt",)),
    ("s_barrier", ("barrier",)),
    ("LDS, VMEM, SALU, branch, waitcnt issue", ("lds", "vmem", "salu", "branch", "waitcnt")),
)


def markdown(path: Path) -> str:
    """The tables of docs/hip-gfx942.md from a committed results file (all predicted)."""
    try:
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"mi300x_model --markdown {path}: not a results file ({e})") from None
    by = {(tuple(r["shape"]), r["mode"], r["kernel"]): r for r in rows if "predicted_ms" in r}
    out = [
        "| B,H,S | mode | AITER pred [low, high] / pub ms | err | MoonMath pred [low, high] / pub ms | err | "
        "AITER/MoonMath pred / pub | ours pred ms [low, high] | ours TFLOP/s | ours vs AITER [low, high] | "
        "ours vs MoonMath [low, high] |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ms(r: dict[str, object]) -> str:
        p = f"{float(r['predicted_ms']):.3f}"  # type: ignore[arg-type]
        if "low_ms" in r:
            p += f" [{float(r['low_ms']):.3f}, {float(r['high_ms']):.3f}]"  # type: ignore[arg-type]
        return p

    for (sh, m, k), r in by.items():
        if k != "ours":
            continue
        a, mm = by.get((sh, m, "aiter")), by.get((sh, m, "moonmath"))
        o = float(r["predicted_ms"])
        cells = [",".join(str(x) for x in sh[:3]), m]
        for peer in (a, mm):
            if peer and peer["published_ms"]:
                p, q = float(peer["predicted_ms"]), float(peer["published_ms"])
                fit = " (fit)" if peer.get("fit_row") else ""
                cells += [f"{ms(peer)} / {q:.3f}{fit}", f"{100 * (p / q - 1):+.1f}%"]
            else:
                cells += [ms(peer) if peer else "–", ""]
        if a and mm and a["published_ms"] and mm["published_ms"]:
            cells.append(
                f"{float(a['predicted_ms']) / float(mm['predicted_ms']):.3f} / "
                f"{float(a['published_ms']) / float(mm['published_ms']):.3f}"
            )
        else:
            cells.append("–")
        cells += [ms(r), f"{r['predicted_tflops']:.0f}"]
        for peer, name in ((a, "vs_aiter"), (mm, "vs_moonmath")):
            if name in r:
                pt, lo, hi = r[name]  # type: ignore[misc]
                cells.append(f"{pt:.3f} [{lo:.3f}, {hi:.3f}]")
            else:
                cells.append(f"{float(peer['predicted_ms']) / o:.3f}" if peer else "–")
        out.append("| " + " | ".join(cells) + " |")
    steady = [r["steady_state"] for r in rows if "steady_state" in r]
    if steady:
        out += [
            "",
            "| launch | clocks / key tile | keys x rows | MFMA busy | "
            + " | ".join(b for b, _ in BUCKETS)
            + " |",
        ]
        out.append("|" + "---|" * (4 + len(BUCKETS)))
        tiles = {"ours": "64 x 256", "aiter": "32 x 256", "moonmath": "64 x 384"}
        for st in steady:
            if not st["clocks_per_tile"]:
                continue
            w = st["wave_clocks_per_tile"]
            tot = sum(w.values()) or 1.0
            cells = [
                f"{st['kernel']} {st['launch']}",
                f"{st['clocks_per_tile']:.0f}",
                tiles.get(st["kernel"], "?"),
                f"{100 * st['mfma_busy']:.0f}%",
            ]
            cells += [f"{100 * sum(w.get(k, 0.0) for k in keys) / tot:.0f}%" for _, keys in BUCKETS]
            out.append("| " + " | ".join(cells) + " |")
    summ = next((r for r in rows if r.get("summary")), None)
    if summ:
        out += ["", "```", json.dumps(summ, indent=1), "```"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", type=lambda s: s.split(","), default=list(KERNELS))
    ap.add_argument(
        "--shapes",
        nargs="+",
        type=shape_arg,
        help="B,H,Sq,Sk[,Hkv][,causal][,lse] or varlen H[,Hkv],lens=L1/L2/...[,causal][,lse]"
        " (default: the 9 published)",
    )
    ap.add_argument("--modes", type=lambda s: s.split(","), default=list(ROUNDING_MODES))
    ap.add_argument("--moonmath-src", type=Path)
    ap.add_argument("--aiter-wheel", type=Path)
    ap.add_argument("--code-object", type=Path, help="our gfx942 code object (default: build it)")
    ap.add_argument(
        "--out",
        type=Path,
        help="also write the JSON lines here; a bare file name goes into the predictions the site shows "
        "(regress.facts.resources.mi300x_predicted_dir)",
    )
    ap.add_argument(
        "--fit", action="store_true", help="refit the clock parameters, print them and their confidence, exit"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one model constant (a sensitivity run; the summary records it)",
    )
    ap.add_argument("--breakdown", action="store_true", help="also print each kernel's steady-state tile")
    ap.add_argument(
        "--no-band", action="store_true", help="the point prediction only (no low/high over the readings)"
    )
    ap.add_argument(
        "--no-gqa-rows",
        action="store_true",
        help="time our GQA decode on the v2 kernel, as before the planner ran it as dense rows (an ablation)",
    )
    ap.add_argument(
        "--no-v2-split",
        action="store_true",
        help="time a v2 call the planner splits (gfx942_v2_split) as one v2 launch, as before (an ablation)",
    )
    ap.add_argument(
        "--markdown", type=Path, metavar="RESULTS", help="print the docs tables of a results file"
    )
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(args.markdown))
        return 0
    for m in args.modes:
        if m not in ROUNDING_MODES:
            ap.error(f"mode {m!r} is not one of {', '.join(ROUNDING_MODES)}")
    params = {k: c.value for k, c in FITTED.items()}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in C:
            ap.error(f"--set {item}: no model constant {name!r} (regress/emu/cdna3.py)")
        if name in timing.NOT_PARAMS:  # it would be recorded in the summary and change nothing
            ap.error(f"--set {item}: the model reads {name!r} once, not per parameter set")
        try:
            params[name] = float(value)
        except ValueError:
            ap.error(f"--set {item}: {value!r} is not a number")
        if not (math.isfinite(params[name]) and params[name] >= 0):
            ap.error(f"--set {item}: a model constant is a finite number >= 0")
        if params[name] == 0 and name in POSITIVE:
            ap.error(f"--set {item}: {name} divides a time, it must be > 0")
        if name == "cus" and not (params[name] >= 1 and params[name].is_integer()):
            ap.error(f"--set {item}: cus counts CUs, a whole number >= 1")
    if args.fit:  # only the fit kernels' rows are fitted: ours is not built
        args.kernels = list(FIT_KERNELS)
        others = {k: v for k, v in params.items() if k not in FITTED}
        f = fit(build_models(args), others)
        out = {"fitted": f.values, "sigma": f.sigma, "cov": f.cov, "rms_log_err": f.rms_log_err}
        print(json.dumps(out | {"rows": f.rows, "set": others}))
        return 0
    models = build_models(args, int((C | params)["cus"]))
    shapes = args.shapes or [Shape(b, h, s, s, h) for b, h, s in PUBLISHED]
    t0 = time.monotonic()
    predictor = Predictor()
    preds, _ = predict_all(models, shapes, args.modes, params, predictor)
    rows = [row(p) if isinstance(p, Prediction) else p for p in preds]
    point_steady = predictor.breakdowns()
    by_reading: dict[str, list[Prediction | dict[str, object]]] = {"point": preds}
    info: dict[str, object] = {}
    if not args.no_band:
        sets, info = readings(models, params, predictor)
        for name, ps in sets.items():
            if name != "point":
                by_reading[name] = predict_all(models, shapes, args.modes, ps, predictor)[0]
        predictor.params = dict(params)
        attach_bands(rows, by_reading)
    lines = [json.dumps(r) for r in rows]
    if args.breakdown:
        lines += [json.dumps({"steady_state": b}) for b in point_steady]
    summ = summary(rows, params, time.monotonic() - t0)
    summ["load_avg_1min_at_end"] = round(os.getloadavg()[0], 2)  # the machine may be shared
    if args.no_gqa_rows:
        summ["ablation"] = "no-gqa-rows: GQA decode timed on the v2 kernel"
    if args.no_v2_split:
        summ["ablation"] = "no-v2-split: unmasked fixed-length v2 calls timed as one v2 launch"
    if not args.no_band:
        summ["readings"] = info
        summ["ours_vs_peers_band"] = ratio_geomean_bands(by_reading)
    if "ours" in models:
        summ["ours_at_matrix_core_floor"] = ceiling(preds, predictor, models["ours"], params)
    lines.append(json.dumps(summ))
    print("\n".join(lines))
    if args.out:
        out = mi300x_predicted_dir() / args.out if args.out.name == str(args.out) else args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
