"""How close the byte-bound families run to this GPU's byte floor (issue 26's last bar), timed in
the same rounds as our kernel and cuDNN (one device call: STEPS=floor in h200_issue26.sh).

    python3 benchmarks/h200/h200_byte_floor.py --out DIR     # on the device: floor.json + floor.txt

The floor is byte_floor.cu: a kernel that moves exactly a shape's minimum bytes (`Shape.min_bytes`:
Q, K and V read once, O written once) as contiguous streams, with no attention arithmetic; six
launch configurations, the fastest of a row taken. Every function of a (shape, layout) is timed in
h200_op.time_shape's interleaved rounds (order reversed every other round, a GPU spin before each
call, input sets rotated past the L2, median). A row reports each kernel's time as a fraction of the
floor's (1.000 = at the floor) and ours against cuDNN per mode. Where both sit at the floor, neither
can lead the other by more than the floor leaves, whatever the kernel does.

H200_FLOOR_SHAPES="B,H,Sq,Sk;..." replaces the shapes, H200_FLOOR_REPEATS (2) the repeats of each,
H200_FLOOR_BUDGET_S (1.0) the timing budget of one (shape, layout).

    python3 benchmarks/h200/h200_byte_floor.py --trace --out DIR     # trace.json + trace.txt

--trace: where one launch's time goes, per CTA, in a -DRA_CUDA_TRACE=1 build (kernel/cuda/trace.cuh:
the global timer at each CTA's entry and exit, the SM clock at its phases), on H200_TRACE_SHAPES
(BHSD), each launch behind the same GPU spin as the timed rounds and timed by CUDA events too; per
shape the medians over H200_TRACE_LAUNCHES (5) launches: event time, the CTAs' span, their start and
end skew, and per CTA (median) the prologue, the wait for the first data, the stream of loads and
the drain after the last load was issued.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import h200_op

from regress.facts.cases import Shape
from regress.facts.results import ROUNDING_MODES
from regress.facts.stats import median
from regress.kernel import load_library
from regress.kernel.baselines import available_baselines
from regress.machine.gpu_state import device_state
from regress.native.build import build_kernel
from regress.run.suites.common import make_inputs

HERE = Path(__file__).resolve().parent
# The nightly's families whose minimum bytes bind (docs/perf-notes.md v9's report): decode, short
# queries over long keys, and the 128-square tiles.
SHAPES = [
    Shape(1, 32, 1, 8192),
    Shape(8, 32, 1, 4096),
    Shape(16, 32, 1, 2048),
    Shape(32, 32, 1, 8192),
    Shape(4, 32, 16, 8192),
    Shape(4, 32, 64, 8192),
    Shape(256, 32, 128, 128),
]
LAYOUTS = h200_op.LAYOUTS  # regress.facts.results' layouts, BHSD first (the committed tables' order)
BASELINE = "sdpa_cudnn"
CHECK_SHAPES = [Shape(2, 4, 64, 300), Shape(1, 2, 300, 64), Shape(2, 4, 1, 8192)]


def say(msg: str) -> None:
    print(msg, flush=True)


def build_floor(build_dir: Path) -> ctypes.CDLL:
    """byte_floor.cu built with nvcc into `build_dir` and loaded, its functions' types declared."""
    so = build_dir / "byte_floor.so"
    cmd = ["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90"]
    subprocess.run([*cmd, str(HERE / "byte_floor.cu"), "-o", str(so)], check=True)
    lib = ctypes.CDLL(str(so))
    lib.byte_floor_name.restype = ctypes.c_char_p
    lib.byte_floor_launch.argtypes = [
        ctypes.c_int,
        *[ctypes.c_void_p] * 4,  # q, k, v, o
        ctypes.c_size_t,  # q's bytes (and o's)
        ctypes.c_size_t,  # k's bytes (and v's)
        ctypes.c_void_p,  # sink
        ctypes.c_int,  # SMs
        ctypes.c_void_p,  # stream
    ]
    return lib


class ByteFloor:
    """byte_floor.cu, built for this GPU and called through ctypes on torch's stream."""

    def __init__(self, build_dir: Path) -> None:
        self.lib = build_floor(build_dir)
        self.configs = [self.lib.byte_floor_name(i).decode() for i in range(self.lib.byte_floor_configs())]
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.sink = torch.zeros(1, dtype=torch.int32, device="cuda")

    def __call__(
        self, config: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor
    ) -> None:
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            if not t.is_contiguous():
                raise ValueError(f"byte floor: {name} is not contiguous")
        if k.nbytes != v.nbytes or o.nbytes < q.nbytes:
            raise ValueError(
                f"byte floor: K {k.nbytes} and V {v.nbytes} bytes differ, or O is smaller than Q"
            )
        rc = self.lib.byte_floor_launch(
            config,
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            o.data_ptr(),
            q.nbytes,
            k.nbytes,
            self.sink.data_ptr(),
            self.sms,
            torch.cuda.current_stream().cuda_stream,
        )
        if rc:
            raise RuntimeError(f"byte_floor_launch({self.configs[config]}) returned {rc}")


def check_floor(floor: ByteFloor) -> list[str]:
    """Every configuration's output equals q ^ k ^ v word for word (K and V zero past their end):
    the floor kernel reads what it claims to and writes every word of O."""
    fails = []
    for s in CHECK_SHAPES:
        q, k, v = (t.view(torch.int16).flatten() for t in make_inputs(s, "bhsd", seed=5, device="cuda"))
        n = min(q.numel(), k.numel())
        want = q.clone()
        want[:n] ^= k[:n] ^ v[:n]
        for c, name in enumerate(floor.configs):
            o = torch.full_like(q, -1)
            floor(c, q, k, v, o)
            if not torch.equal(o, want):
                fails.append(f"{name} {s.dims()}: {(o != want).sum().item()} of {o.numel()} words wrong")
    return fails


def time_rows(floor: ByteFloor, shapes: list[Shape], repeats: int, budget_s: float) -> list[dict[str, Any]]:
    lib = load_library(build_kernel("cuda").path)
    cudnn = {b.name: b for b in available_baselines("cuda")}.get(BASELINE)
    rows = []
    for rep in range(repeats):
        for s in shapes:
            for layout in LAYOUTS:
                out = torch.empty(s.b * s.h * s.sq * s.d, dtype=torch.bfloat16, device="cuda")
                fns: dict[str, Any] = {
                    f"ours:{m}": (lambda t, m=m, layout=layout: lib.forward(*t, layout=layout, rounding=m))
                    for m in ROUNDING_MODES
                }
                if cudnn is not None:
                    fns[BASELINE] = lambda t, layout=layout: cudnn(*t, layout=layout, rounding="rtne")
                for c, name in enumerate(floor.configs):
                    fns[f"floor:{name}"] = lambda t, c=c, out=out: floor(c, *t, out)
                ms = h200_op.time_shape(s, layout, fns, budget_s)
                floor_ms = {k: v for k, v in ms.items() if k.startswith("floor:")}
                best = min(floor_ms, key=lambda k: floor_ms[k])
                row = {
                    "shape": s.dims(),
                    "layout": layout,
                    "repeat": rep,
                    "bytes": s.min_bytes,
                    "ms": ms,
                    "floor_ms": ms[best],
                    "floor_config": best.removeprefix("floor:"),
                }
                rows.append(row)
                rate = s.min_bytes / ms[best] / 1e9
                fractions = " ".join(
                    f"{k}={ms[best] / v:.4f}" for k, v in ms.items() if not k.startswith("floor:")
                )
                say(f"{s.dims():>16} {layout} #{rep}: floor {rate:.3f} TB/s ({best}); {fractions}")
                del out
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| shape | layout | # | floor TB/s (config) | ours ÷ floor, rtne / rtna / rtz | cuDNN ÷ floor "
        "| ours vs cuDNN, rtne / rtna / rtz |"
    )
    lines = [
        "Each kernel's rate as a fraction of the floor's (floor time / kernel time: 1.000 = at the floor)",
        "",
        head,
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ms, f = r["ms"], r["floor_ms"]
        ours = " / ".join(f"{f / ms[f'ours:{m}']:.3f}" for m in ROUNDING_MODES)
        cud = ms.get(BASELINE)
        vs = " / ".join(f"{cud / ms[f'ours:{m}']:.3f}" for m in ROUNDING_MODES) if cud else "-"
        rate = f"{r['bytes'] / f / 1e9:.3f} ({r['floor_config']})"
        cud_fraction = f"{f / cud:.3f}" if cud else "-"
        lines.append(
            f"| {r['shape']} | {r['layout']} | {r['repeat']} | {rate} | {ours} | {cud_fraction} | {vs} |"
        )
    return "\n".join(lines)


TRACE_SHAPES = [
    Shape(8, 32, 1, 4096),
    Shape(4, 32, 64, 8192),
    Shape(32, 32, 1, 8192),
    Shape(256, 32, 128, 128),
]
TRACE_EVENTS = 8  # kernel/cuda/trace.cuh's kTraceEvents, in its order:
ENTRY_NS, ENTRY, READY, FIRST_DATA, LAST_ISSUE, EXIT, EXIT_NS, SM = range(TRACE_EVENTS)
TRACE_CTAS = 1024


def launch_rows(raw: list[int]) -> list[list[int]]:
    """The rows of the last launch in a trace buffer: CTAs that entered within 50 us of the last
    entry and exited after entering (a row past this launch's grid is an older launch's, or zero)."""
    rows = [raw[i : i + TRACE_EVENTS] for i in range(0, len(raw) - TRACE_EVENTS + 1, TRACE_EVENTS)]
    last = max((r[ENTRY_NS] for r in rows), default=0)
    return [r for r in rows if r[ENTRY_NS] and last - r[ENTRY_NS] < 50_000 and r[EXIT_NS] >= r[ENTRY_NS]]


def phases(rows: list[list[int]], event_ms: float) -> dict[str, float]:
    """A launch's phases from its CTAs' rows (kernel/cuda/trace.cuh), in us: the CTAs' span and
    their start and end skew from the global timer; per CTA (median over CTAs) its time, prologue,
    wait for the first data, load-issuing stretch and drain from its SM clock, each CTA's cycles
    converted at its own clock rate (cycles between entry and exit over ns between them)."""
    if not rows:
        raise ValueError("no CTA rows: the launch wrote no trace")

    def ghz(r: list[int]) -> float:
        return (r[EXIT] - r[ENTRY]) / max(r[EXIT_NS] - r[ENTRY_NS], 1)

    def us(r: list[int], a: int, b: int) -> float:
        return (r[b] - r[a]) / ghz(r) / 1e3

    return {
        "event_us": event_ms * 1e3,
        "ctas": len(rows),
        "sms": len({r[SM] for r in rows}),
        "span_us": (max(r[EXIT_NS] for r in rows) - min(r[ENTRY_NS] for r in rows)) / 1e3,
        "start_skew_us": (max(r[ENTRY_NS] for r in rows) - min(r[ENTRY_NS] for r in rows)) / 1e3,
        "end_skew_us": (max(r[EXIT_NS] for r in rows) - min(r[EXIT_NS] for r in rows)) / 1e3,
        "cta_us": median([(r[EXIT_NS] - r[ENTRY_NS]) / 1e3 for r in rows]),
        "prologue_us": median([us(r, ENTRY, READY) for r in rows]),
        "first_data_us": median([us(r, READY, FIRST_DATA) for r in rows]),
        "loads_us": median([us(r, READY, LAST_ISSUE) for r in rows]),
        "drain_us": median([us(r, LAST_ISSUE, EXIT) for r in rows]),
        "sm_ghz": median([ghz(r) for r in rows]),
    }


def trace_launch(lib: Any, read: Any, inp: tuple[torch.Tensor, ...]) -> tuple[float, list[list[int]]]:
    """One launch behind the rounds' spin, timed by events: (ms, its CTAs' trace rows)."""
    from regress.run.suites.timing import Timer

    timer = Timer(gpu=True)
    timer.prime(h200_op.SPIN_CYCLES)
    timer.time("ours", lambda: lib.forward(*inp, layout="bhsd", rounding="rtne"))
    event_ms = timer.samples()["ours"][0]
    buf = (ctypes.c_ulonglong * (TRACE_CTAS * TRACE_EVENTS))()
    rc = read(buf, TRACE_CTAS)
    if rc:
        raise RuntimeError(f"ra_cuda_trace_read returned {rc}")
    return event_ms, launch_rows(list(buf))


def trace(out: Path) -> int:
    lib = load_library(build_kernel("cuda", extra_flags=("-DRA_CUDA_TRACE=1",)).path)
    read = getattr(lib.raw, "ra_cuda_trace_read", None)
    if read is None:
        say("the trace build exports no ra_cuda_trace_read: was -DRA_CUDA_TRACE=1 applied?")
        return 1
    read.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_int]
    shapes = h200_op.shapes_env("H200_TRACE_SHAPES", TRACE_SHAPES)
    launches = int(os.environ.get("H200_TRACE_LAUNCHES", "5"))
    res: dict[str, Any] = {"schema": "h200-trace/1", "shapes": {}}
    lines = [
        "| shape (BHSD, rtne) | event µs | CTAs span | start skew | end skew | CTA median | prologue "
        "| first data | loads issued | drain | SMs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in shapes:
        sets = [make_inputs(s, "bhsd", seed=i, device="cuda") for i in range(h200_op.n_sets(s))]
        for i in range(3):
            lib.forward(*sets[i % len(sets)], layout="bhsd", rounding="rtne")
        raw = [trace_launch(lib, read, sets[i % len(sets)]) for i in range(launches)]
        runs = [phases(rows, ms) for ms, rows in raw]
        agg = {k: median([r[k] for r in runs]) for k in runs[0]}
        res["shapes"][s.dims()] = {
            "launches": [
                {"event_ms": ms, "rows": rows, "phases": ph} for (ms, rows), ph in zip(raw, runs, strict=True)
            ],
            "median": agg,
        }
        lines.append(
            f"| {s.dims()} | {agg['event_us']:.1f} | {agg['span_us']:.1f} | {agg['start_skew_us']:.1f} "
            f"| {agg['end_skew_us']:.1f} | {agg['cta_us']:.1f} | {agg['prologue_us']:.2f} "
            f"| {agg['first_data_us']:.2f} "
            f"| {agg['loads_us']:.1f} | {agg['drain_us']:.2f} | {agg['sms']:.0f} of {agg['ctas']:.0f} CTAs |"
        )
        del sets
    (out / "trace.json").write_text(json.dumps(res, indent=1))
    text = "\n".join(lines)
    (out / "trace.txt").write_text(text + "\n")
    say(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--trace", action="store_true", help="per-CTA phases of a -DRA_CUDA_TRACE=1 build")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        say("h200_byte_floor: no CUDA GPU here (torch.cuda.is_available() is False); run it on the device")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.trace:
        return trace(args.out)
    t0 = time.perf_counter()
    floor = ByteFloor(args.out)
    fails = check_floor(floor)
    say(
        f"floor checks: {len(CHECK_SHAPES) * len(floor.configs)} cases, {len(fails)} failed "
        + "; ".join(fails)
    )
    if fails:
        return 1
    before = device_state("cuda")
    rows = time_rows(
        floor,
        h200_op.shapes_env("H200_FLOOR_SHAPES", SHAPES),
        int(os.environ.get("H200_FLOOR_REPEATS", "2")),
        float(os.environ.get("H200_FLOOR_BUDGET_S", "1.0")),
    )
    res = {
        "schema": "h200-byte-floor/1",
        "configs": floor.configs,
        "rows": rows,
        "device": {"before": before, "after": device_state("cuda")},
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    (args.out / "floor.json").write_text(json.dumps(res, indent=1))
    text = table(rows)
    (args.out / "floor.txt").write_text(text + "\n")
    say(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
