"""The two ceilings of this H200 and the geomean they allow (issue 26): how far above cuDNN any
attention kernel could get on the nightly's perf set, if it ran at the device's own limits.

    python3 benchmarks/h200/h200_ceiling.py measure --out FILE.json      # on the device (torch + CUDA)
    python benchmarks/h200/h200_ceiling.py report BUNDLE (--ceilings FILE.json | --tflops X --tbps Y)
        [--held-pct P ...] [--json]

`measure`: a dense bf16 matrix product (8192^3, random data, torch.matmul) and a device-to-device
copy (4 GiB, bytes read plus bytes written), each timed in the perf suite's round structure
(`regress.run.suites.timing.interleaved_rounds`, its warm-up and round counts: 10 untimed rounds, 100
timed, three calls a round behind the spin, each call about as long as one call of the nightly's
longest case), so each runs about as long and as hot as a long nightly case: median rate over the
calls. The product also as a short burst (3 warm-ups, 10 timed, one product a call, as KINDS.md
records it). Beside them, not used as a ceiling: a read-only rate (a float32 sum over the copy's 4
GiB source), which says how far a kernel that only reads (decode) may go past the copy's mix. SM
clock, power and throttle reasons before and after each (`regress.machine.gpu_state`).

`report` (no GPU): per perf row of a nightly bundle, floor = max(FLOPs / GEMM rate, minimum bytes /
copy rate); our and cuDNN's fraction of it; the ceiling ratio t_cuDNN / t_floor (the speedup over
cuDNN of a kernel at the floor). Geomeans per mode over the nightly's rows and over perf_table.py's
families (lower layout).

The GEMM rate bounds an attention kernel's only loosely: a kernel could issue tensor work faster
than this library's product does, but attention does strictly more non-tensor work per FLOP (the
exponentials, the row max and sum, the rescales) than a GEMM, so reaching the GEMM rate is already
optimistic. The copy rate is not a hard bound either (a read-heavy kernel can beat a copy's mix).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from perf_table import baselines_of, family, family_order, lower_layout, perf_results, speedup

from regress.facts.cases import HEAD_DIM, Shape
from regress.facts.results import ROUNDING_MODES
from regress.facts.stats import geomean, median, percentile

BASELINE = "sdpa_cudnn"
SCHEMA = "h200-ceiling/1"

GEMM_N = 8192
# Products per timed call: ~13 ms a call at ~750 TFLOP/s, one call of the nightly's longest case
# ((1,16,32768,32768): 13.2 ms p50), so the duty cycle between spins is the nightly's.
GEMM_PER_CALL = 9
COPY_BYTES = 4 << 30
COPY_PER_CALL = 6  # ~12 ms a call at 4.3 TB/s (8.6 GB moved a copy)
READ_PER_CALL = 12  # reductions of the copy's 4 GiB source a call: ~11 ms at 4.5 TB/s
# The nightly times three calls a round (ours, SDPA cuDNN, SDPA flash).
CALLS_PER_ROUND = 3
BURST_WARM, BURST_ITERS = 3, 10  # KINDS.md's burst
GEMM_CHECK_ROWS = 256
DEFAULT_HELD_PCTS = (80.0, 85.0, 90.0)


class Refused(click.ClickException):
    """Bad input or a missing device: one line, exit 2, nothing written."""

    exit_code = 2


# --- measure (device) ---------------------------------------------------------------------------


def _rate_stats(rates_by_key: dict[str, list[float]]) -> dict[str, Any]:
    """Median and spread of per-call rates, and the median of the first and last 10 rounds (a
    clock that sags under the power cap shows as last < first)."""
    calls = [x for v in rates_by_key.values() for x in v]
    rounds = len(next(iter(rates_by_key.values())))
    per_round = [median([v[i] for v in rates_by_key.values()]) for i in range(rounds)]
    return {
        "median": median(calls),
        "p5": percentile(calls, 5),
        "p95": percentile(calls, 95),
        "min": min(calls),
        "max": max(calls),
        "mean": math.fsum(calls) / len(calls),
        "first_10_rounds_median": median(per_round[:10]),
        "last_10_rounds_median": median(per_round[-10:]),
        "calls": len(calls),
        "rounds": rounds,
    }


def _timed(
    runners: Sequence[tuple[str, Callable[[int], object]]],
    warm: int,
    iters: int,
    work_per_call: float,
    unit: float,
) -> dict[str, Any]:
    """`runners` in the perf suite's interleaved rounds; rates are `work_per_call` / s / `unit`."""
    from regress.machine.gpu_state import device_state
    from regress.run.suites.timing import interleaved_rounds

    before = device_state("cuda")
    t0 = time.perf_counter()
    samples = interleaved_rounds("cuda", runners, warm, iters)
    wall = time.perf_counter() - t0
    after = device_state("cuda")
    rates = {k: [work_per_call / (ms * 1e-3) / unit for ms in v] for k, v in samples.items()}
    calls_ms = [ms for v in samples.values() for ms in v]
    return {
        **_rate_stats(rates),
        "warmup_rounds": warm,
        "calls_per_round": len(runners),
        "call_ms_median": median(calls_ms),
        "wall_s": round(wall, 3),
        "device": {"before": before, "after": after},
    }


def _measure(out: Path) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        raise Refused(
            f"measure needs a CUDA GPU: torch {torch.__version__} sees none "
            "(torch.cuda.is_available() is False); run it on the device"
        )
    from regress.run.suites.perf import GPU_MIN_ROUNDS, GPU_WARMUP_ROUNDS

    warm, iters = GPU_WARMUP_ROUNDS[False], GPU_MIN_ROUNDS[False]  # a full nightly's perf case
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(26)
    t_start = time.perf_counter()

    # (a) GEMM: one input set per call of a round (128 MiB a matrix: far past the 60 MB L2 anyway).
    sets = [
        tuple(torch.randn(GEMM_N, GEMM_N, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(2))
        for _ in range(CALLS_PER_ROUND)
    ]
    outs = [torch.empty(GEMM_N, GEMM_N, device=dev, dtype=torch.bfloat16) for _ in sets]

    def gemm(j: int, times: int) -> Callable[[int], object]:
        def call(_: int) -> object:
            for _k in range(times):
                torch.matmul(sets[j][0], sets[j][1], out=outs[j])
            return outs[j]

        return call

    gemm_flops = 2.0 * GEMM_N**3
    burst = _timed([("gemm", gemm(0, 1))], BURST_WARM, BURST_ITERS, gemm_flops, 1e12)
    sustained = _timed(
        [(f"gemm:{j}", gemm(j, GEMM_PER_CALL)) for j in range(CALLS_PER_ROUND)],
        warm,
        iters,
        GEMM_PER_CALL * gemm_flops,
        1e12,
    )
    a, b = sets[0]
    ref = a[:GEMM_CHECK_ROWS].double() @ b.double()
    gemm_err = float((outs[0][:GEMM_CHECK_ROWS].double() - ref).norm() / ref.norm())
    if not gemm_err < 1e-2:  # bf16 operands, fp32 accumulation: ~3e-3
        raise Refused(f"the GEMM's output is wrong: relative error {gemm_err:.3g} against float64")
    sets.clear()  # free the GEMM's 1.1 GiB before the copy's 8 GiB
    outs.clear()
    del ref, a, b
    torch.cuda.empty_cache()

    # (b) copy: one pair of buffers (4 GiB is 70x the L2: nothing to rotate), random contents.
    src = torch.empty(COPY_BYTES // 2, device=dev, dtype=torch.bfloat16)
    for chunk in src.split(1 << 27):  # 256 MiB pieces: each fill stays under 2^31 elements
        chunk.normal_(generator=gen)
    pair = [src, torch.empty_like(src)]
    del src

    def copy(_: int) -> object:
        for _k in range(COPY_PER_CALL):
            pair[1].copy_(pair[0])
        return pair[1]

    copy_sustained = _timed(
        [(f"copy:{j}", copy) for j in range(CALLS_PER_ROUND)],
        warm,
        iters,
        COPY_PER_CALL * 2.0 * COPY_BYTES,
        1e12,
    )
    pieces = zip(pair[0].split(1 << 27), pair[1].split(1 << 27), strict=True)
    if not all(torch.equal(x, y) for x, y in pieces):
        raise Refused("the device-to-device copy's output differs from its input")

    # (c) read: a sum over the same 4 GiB, bytes read only (a decode launch reads K and V and
    # writes next to nothing: how far a read-only kernel may go past the copy's mix). A figure
    # beside the ceilings, not one `report` divides by.
    sums = [torch.empty((), device=dev, dtype=torch.float32) for _ in range(CALLS_PER_ROUND)]

    def read(j: int) -> Callable[[int], object]:
        def call(_: int) -> object:
            for _k in range(READ_PER_CALL):
                torch.sum(pair[0], dim=0, dtype=torch.float32, out=sums[j])
            return sums[j]

        return call

    read_sustained = _timed(
        [(f"read:{j}", read(j)) for j in range(CALLS_PER_ROUND)],
        warm,
        iters,
        READ_PER_CALL * float(COPY_BYTES),
        1e12,
    )
    exact = math.fsum(float(c.double().sum()) for c in pair[0].split(1 << 27))
    read_err = abs(float(sums[0]) - exact) / max(1.0, math.sqrt(COPY_BYTES / 2))
    if not read_err < 1e-2:  # randn: the sum's size is about sqrt(n); fp32 accumulation errs far less
        raise Refused(f"the read's sum is wrong: {float(sums[0])!r} against {exact!r} in float64")
    pair.clear()
    torch.cuda.empty_cache()

    return {
        "schema": SCHEMA,
        "method": {
            "protocol": (
                "regress.run.suites.timing.interleaved_rounds, the perf suite's full-nightly rounds: "
                f"{warm} untimed rounds, {iters} timed, {CALLS_PER_ROUND} calls a round behind the spin; "
                "CUDA events per call; median over all calls"
            ),
            "gemm": (
                f"torch.matmul bf16 {GEMM_N}x{GEMM_N}x{GEMM_N}, randn inputs, out= preallocated; "
                f"FLOPs 2*N^3 a product; {GEMM_PER_CALL} products a call, one input set per call "
                f"of a round; checked on {GEMM_CHECK_ROWS} rows against float64"
            ),
            "gemm_burst": f"{BURST_WARM} warm-up rounds, {BURST_ITERS} timed, one product a call",
            "copy": (
                f"dst.copy_(src), {COPY_BYTES} bytes (bf16 randn), bytes read + written = "
                f"{2 * COPY_BYTES} a copy; {COPY_PER_CALL} copies a call; checked equal"
            ),
            "read": (
                f"torch.sum(src, dtype=float32, out=), the copy's {COPY_BYTES}-byte source, bytes read "
                f"= {COPY_BYTES} a sum; {READ_PER_CALL} sums a call; checked against float64"
            ),
            "device_state": "regress.machine.gpu_state.device_state (nvidia-smi) before and after each",
        },
        "figures": {
            "gemm_burst_tflops": burst,
            "gemm_sustained_tflops": sustained,
            "copy_sustained_tbps": copy_sustained,
            "read_sustained_tbps": read_sustained,
            "gemm_check_rel_err": gemm_err,
        },
        # What `report` divides by: the sustained figures, timed as the nightly's cases are.
        "ceilings": {
            "tflops": sustained["median"],
            "tbps": copy_sustained["median"],
            "from": "figures.gemm_sustained_tflops.median, figures.copy_sustained_tbps.median",
        },
        "versions": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        },
        "gpu": {
            "name": props.name,
            "multiprocessors": props.multi_processor_count,
            "total_memory": props.total_memory,
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        },
        "wall_s": round(time.perf_counter() - t_start, 3),
        "out": str(out),
    }


# --- report (host) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceilings:
    tflops: float
    tbps: float
    source: str


@dataclass(frozen=True)
class Row:
    """One perf case against the floor of the two ceilings."""

    name: str
    family: str
    layout: str
    mode: str
    flops: int
    min_bytes: int
    floor_ms: float
    bound: str  # "flops" or "bytes": the larger of the two times
    ours_ms: float
    cudnn_ms: float
    speedup: float  # the nightly's speedup_vs_sdpa_cudnn: t_cuDNN / t_ours

    @property
    def ours_frac(self) -> float:
        return self.floor_ms / self.ours_ms

    @property
    def cudnn_frac(self) -> float:
        return self.floor_ms / self.cudnn_ms

    @property
    def ceiling(self) -> float:
        """t_cuDNN / t_floor: the speedup over cuDNN of a kernel at the floor."""
        return self.cudnn_ms / self.floor_ms

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "ours_frac_of_floor": self.ours_frac,
            "cudnn_frac_of_floor": self.cudnn_frac,
            "ceiling_ratio": self.ceiling,
        }


def _positive(value: Any) -> float | None:
    """A positive finite number, else None."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf
    return float(value) if ok else None


def floor_row(result: dict[str, Any], ceil: Ceilings) -> Row | None:
    """The row of one perf result, None when it lacks our or cuDNN's p50."""
    p, m = result["params"], result["metrics"]
    ours, cudnn = _positive(m.get("p50_ms")), _positive(m.get(f"baseline:{BASELINE}:p50_ms"))
    s = speedup(result, BASELINE)  # the nightly's own ratio of the two p50s
    if ours is None or cudnn is None or s is None:
        return None
    shape = Shape(int(p["b"]), int(p["h"]), int(p["sq"]), int(p["sk"]), int(p.get("d", HEAD_DIM)))
    t_flops = shape.flops / (ceil.tflops * 1e12) * 1e3
    t_bytes = shape.min_bytes / (ceil.tbps * 1e12) * 1e3
    return Row(
        name=result["name"],
        family=family(p),
        layout=p["layout"],
        mode=p["mode"],
        flops=shape.flops,
        min_bytes=shape.min_bytes,
        floor_ms=max(t_flops, t_bytes),
        bound="flops" if t_flops >= t_bytes else "bytes",
        ours_ms=ours,
        cudnn_ms=cudnn,
        speedup=s,
    )


def held(row: Row, pct: float) -> float:
    """The row's ratio if the kernel stays where it is when at >= pct % of the floor, and else
    reaches the floor (never slower than now)."""
    return row.speedup if row.ours_frac * 100.0 >= pct else max(row.speedup, row.ceiling)


def geomeans(rows: Sequence[Row], held_pcts: Sequence[float]) -> dict[str, dict[str, Any]]:
    """Per mode: how many rows, the geomean of ours / cuDNN, of the ceiling ratio, and with rows at
    >= P % of the floor held (the others at the floor)."""
    out: dict[str, dict[str, Any]] = {}
    for mode in ROUNDING_MODES:
        rs = [r for r in rows if r.mode == mode]
        if not rs:
            continue
        out[mode] = {
            "n": len(rs),
            "ours": geomean(r.speedup for r in rs),
            "ceiling": geomean(r.ceiling for r in rs),
            "held": {f"{p:g}": geomean(held(r, p) for r in rs) for p in held_pcts},
            "held_count": {f"{p:g}": sum(r.ours_frac * 100.0 >= p for r in rs) for p in held_pcts},
        }
    return out


def _load_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refused(f"{what} {path}: not readable JSON ({type(exc).__name__}: {exc})") from None


def read_ceilings(path: Path | None, tflops: float | None, tbps: float | None) -> Ceilings:
    if path is not None:
        if tflops is not None or tbps is not None:
            raise click.UsageError("give --ceilings FILE or --tflops and --tbps, not both")
        data = _load_json(path, "ceilings file")
        c = data.get("ceilings") if isinstance(data, dict) else None
        got = (_positive(c.get("tflops")), _positive(c.get("tbps"))) if isinstance(c, dict) else (None, None)
        if got[0] is None or got[1] is None:
            raise Refused(
                f"ceilings file {path}: no positive ceilings.tflops and .tbps (measure writes them)"
            )
        return Ceilings(got[0], got[1], f"{path} (measured)")
    if tflops is None or tbps is None:
        raise click.UsageError("give --ceilings FILE, or both --tflops and --tbps")
    return Ceilings(tflops, tbps, "given on the command line")


def read_rows(path: Path, ceil: Ceilings) -> tuple[dict[str, Any], list[Row], list[Row], int]:
    """The bundle, its rows, its family rows (perf_table.py's lower layout against cuDNN) and how
    many timed perf rows had no cuDNN p50."""
    bundle = _load_json(path, "bundle")
    if not (isinstance(bundle, dict) and isinstance(bundle.get("results"), list)):
        raise Refused(f"bundle {path}: no results list (is it a nightly bundle?)")
    try:
        perf = perf_results(bundle)
    except (KeyError, TypeError) as exc:
        raise Refused(f"bundle {path}: a result lacks {exc}") from None
    if not perf:
        raise Refused(f"bundle {path}: no timed perf results")
    if BASELINE not in baselines_of(perf):
        raise Refused(f"bundle {path}: no {BASELINE} timings in its {len(perf)} perf results")
    try:
        by_name = {r["name"]: row for r in perf if (row := floor_row(r, ceil)) is not None}
    except (KeyError, TypeError, ValueError) as exc:
        raise Refused(f"bundle {path}: a perf result lacks a shape parameter ({exc})") from None
    fams = [by_name[r["name"]] for r in lower_layout(perf, BASELINE).values() if r["name"] in by_name]
    return bundle, list(by_name.values()), fams, len(perf) - len(by_name)


def _triple(rows: dict[str, Row], fmt: Callable[[Row], str]) -> str:
    return " / ".join(fmt(rows[m]) if m in rows else "—" for m in ROUNDING_MODES)


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(
    bundle: dict[str, Any],
    ceil: Ceilings,
    fams: list[Row],
    g: dict[str, dict[str, dict[str, Any]]],
    held_pcts: Sequence[float],
    recorded: dict[str, Any],
) -> str:
    run = bundle.get("run", {})
    lines = [
        f"run {run.get('id')} ({bundle.get('stack', {}).get('keys', {}).get('gpu_product')}); ceilings "
        f"{ceil.tflops:g} TFLOP/s (bf16 GEMM) and {ceil.tbps:g} TB/s (copy, read + written), {ceil.source}",
        "",
        "Per family (perf_table.py's: one (B,H,Sq,Sk), the layout with the lower speedup vs cuDNN); "
        "cells rtne / rtna / rtz; % floor = t_floor / t; ceiling = t_cuDNN / t_floor.",
        "",
        "| family | GFLOP | MB | floor µs | bound | layout | ours µs | cuDNN µs | ours % floor "
        "| cuDNN % floor | ours ÷ cuDNN | ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_fam: dict[str, dict[str, Row]] = {}
    for r in fams:
        by_fam.setdefault(r.family, {})[r.mode] = r
    for f in family_order(by_fam):
        rs = by_fam[f]
        any_row = next(iter(rs.values()))
        lines.append(
            f"| {f} | {any_row.flops / 1e9:.4g} | {any_row.min_bytes / 1e6:.4g} "
            f"| {any_row.floor_ms * 1e3:.1f} | {any_row.bound} | {_triple(rs, lambda r: r.layout)} "
            f"| {_triple(rs, lambda r: f'{r.ours_ms * 1e3:.1f}')} "
            f"| {_triple(rs, lambda r: f'{r.cudnn_ms * 1e3:.1f}')} "
            f"| {_triple(rs, lambda r: f'{100 * r.ours_frac:.0f}')} "
            f"| {_triple(rs, lambda r: f'{100 * r.cudnn_frac:.0f}')} "
            f"| {_triple(rs, lambda r: f'{r.speedup:.3f}')} | {_triple(rs, lambda r: f'{r.ceiling:.3f}')} |"
        )
    held_head = " | ".join(f"held ≥ {p:g} % (n held)" for p in held_pcts)
    lines += [
        "",
        "Geomeans vs cuDNN per mode. rows: every timed perf case, both layouts (the nightly's "
        "summary.geomean_speedup and perf_table.py's geomean); families: the table above. "
        "held ≥ P %: cases at ≥ P % of the floor keep their ratio, the others reach the floor.",
        "",
        f"| set | mode | n | ours ÷ cuDNN | bundle's summary | ceiling | {held_head} |",
        "|---|---|---|---|---|---|" + "---|" * len(held_pcts),
    ]
    for which, table in g.items():
        for mode, v in table.items():
            rec = recorded.get(mode, {}).get(BASELINE) if which == "rows" else None
            helds = " | ".join(
                f"{_fmt(v['held'][f'{p:g}'])} ({v['held_count'][f'{p:g}']})" for p in held_pcts
            )
            lines.append(
                f"| {which} | {mode} | {v['n']} | {_fmt(v['ours'])} | {_fmt(rec, '.4f') if rec else '—'} "
                f"| {_fmt(v['ceiling'])} | {helds} |"
            )
    return "\n".join(lines)


def verdict(rows: list[Row], g: dict[str, dict[str, Any]], held_pcts: Sequence[float], bar: float) -> str:
    modes = list(g)

    def per_mode(key: str, sub: str | None = None) -> str:
        return " / ".join(_fmt(g[m][key][sub] if sub else g[m][key]) for m in modes)

    n_bytes = sum(r.bound == "bytes" for r in rows)
    near = sum(r.cudnn_frac >= 0.9 for r in rows)
    reach = (
        "under that ceiling: the device does not rule it out"
        if all((g[m]["ceiling"] or 0.0) >= bar for m in modes)
        else "above that ceiling: no kernel reaches it on this device"
    )
    far: dict[str, float] = {}
    for r in rows:
        far[r.family] = min(far.get(r.family, r.ours_frac), r.ours_frac)
    lowest = ", ".join(f"({f}) {100 * x:.0f} %" for f, x in sorted(far.items(), key=lambda kv: kv[1])[:5])
    held_txt = "".join(
        f" With the cases already at ≥ {p:g} % of the floor held at their ratio and every other case at "
        f"the floor: {per_mode('held', f'{p:g}')}."
        for p in held_pcts[:2]
    )
    return (
        f"On this bundle ({' / '.join(modes)}) ours ÷ cuDNN is {per_mode('ours')}; a kernel at the floor "
        f"in every case would be {per_mode('ceiling')}× cuDNN, so the bar of {bar:g}× is "
        f"{reach}."
        f"{held_txt} {n_bytes} of {len(rows)} cases are bound by bytes, the rest by FLOPs; cuDNN runs at "
        f"≥ 90 % of the floor in {near} of {len(rows)} cases (the median case at "
        f"{100 * median([r.cudnn_frac for r in rows]):.0f} %); our lowest fractions of the floor: "
        f"{lowest}. The floor is optimistic: the GEMM rate is an upper bound only in the sense that "
        "an attention kernel has strictly more non-tensor work per FLOP (exponentials, row max and "
        "sum, rescales) than a GEMM; a kernel could in principle issue tensor work faster than this "
        "library's GEMM, and a copy's read-plus-write mix is no hard bound on a read-heavy kernel "
        "(a fraction over 100 % or a ceiling ratio under 1 means a kernel beat it)."
    )


@click.group()
def cli() -> None:
    """The H200's GEMM and copy ceilings, and the geomean over cuDNN they allow."""


@cli.command()
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Where the JSON goes (written only when every measurement succeeded).",
)
def measure(out: Path) -> None:
    """Measure the two ceilings on the GPU in the nightly's sustained way, and beside them a
    read-only rate (about 20 s)."""
    if not out.parent.is_dir():
        raise Refused(f"--out {out}: no directory {out.parent}")
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise Refused(f"measure needs torch with CUDA: {exc}") from None
    data = _measure(out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out)
    f = data["figures"]
    click.echo(
        f"{data['gpu']['name']}: GEMM burst {f['gemm_burst_tflops']['median']:.0f} TFLOP/s (mean "
        f"{f['gemm_burst_tflops']['mean']:.0f}), sustained {f['gemm_sustained_tflops']['median']:.0f} "
        f"(first / last 10 rounds {f['gemm_sustained_tflops']['first_10_rounds_median']:.0f} / "
        f"{f['gemm_sustained_tflops']['last_10_rounds_median']:.0f}); copy sustained "
        f"{f['copy_sustained_tbps']['median']:.3f} TB/s, read sustained "
        f"{f['read_sustained_tbps']['median']:.3f} TB/s; {data['wall_s']:.1f} s; wrote {out}"
    )
    for name, fig in f.items():
        if isinstance(fig, dict):
            d = fig["device"]
            click.echo(
                f"  {name}: "
                + "; ".join(
                    f"{when} SM {d[when].get('gpu', {}).get('clocks.sm')} MHz, "
                    f"{d[when].get('gpu', {}).get('power.draw')} W, "
                    f"throttle {d[when].get('gpu', {}).get('clocks_throttle_reasons.active')}"
                    for when in ("before", "after")
                )
            )


_POSITIVE = click.FloatRange(min=0.0, min_open=True)


def _finite(_ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number", param=param)
    return value


@cli.command()
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--ceilings",
    "ceilings_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The JSON `measure` wrote.",
)
@click.option("--tflops", type=_POSITIVE, callback=_finite, help="The GEMM ceiling, TFLOP/s.")
@click.option("--tbps", type=_POSITIVE, callback=_finite, help="The copy ceiling, TB/s (read + written).")
@click.option(
    "--held-pct",
    "held_pcts",
    type=click.FloatRange(min=0.0, max=100.0, min_open=True),
    multiple=True,
    default=DEFAULT_HELD_PCTS,
    show_default=True,
    help="Cases at >= this % of the floor keep their ratio in the 'held' geomean (repeatable).",
)
@click.option("--bar", type=_POSITIVE, default=1.08, show_default=True, help="The issue's geomean bar.")
@click.option("--json", "as_json", is_flag=True, help="Machine output: one JSON document.")
def report(
    bundle: Path,
    ceilings_path: Path | None,
    tflops: float | None,
    tbps: float | None,
    held_pcts: tuple[float, ...],
    bar: float,
    as_json: bool,
) -> None:
    """Floors, fractions of the floor and ceiling ratios of a nightly BUNDLE's perf rows."""
    ceil = read_ceilings(ceilings_path, tflops, tbps)
    data, rows, fams, missing = read_rows(bundle, ceil)
    g = {"rows": geomeans(rows, held_pcts), "families": geomeans(fams, held_pcts)}
    recorded = data.get("run", {}).get("summary", {}).get("geomean_speedup", {}) or {}
    text = verdict(rows, g["rows"], held_pcts, bar)
    if as_json:
        doc = {
            "bundle": str(bundle),
            "run": data.get("run", {}).get("id"),
            "baseline": BASELINE,
            "ceilings": asdict(ceil),
            "bar": bar,
            "held_pcts": list(held_pcts),
            "rows_without_baseline": missing,
            "geomean": g,
            "recorded_geomean": {m: v.get(BASELINE) for m, v in recorded.items()},
            "families": [r.as_dict() for r in fams],
            "rows": [r.as_dict() for r in rows],
            "verdict": text,
        }
        click.echo(json.dumps(doc, indent=1))
        return
    click.echo(markdown(data, ceil, fams, g, held_pcts, recorded))
    if missing:
        click.echo(f"\n{missing} timed perf rows have no {BASELINE} p50 and are left out.")
    click.echo("\n" + text)


if __name__ == "__main__":
    cli()
