"""Eager host time per call of the torch operator against SDPA's (issue 40, item 3: ours must not
exceed SDPA's), side by side in one run.

  python benchmarks/h200/op_host.py --device cpu [--out DIR]    here (single-threaded, as the perf suite)
  bash benchmarks/h200/op_host.sh                               the H200: CUDA then CPU, one device call

Per shape, one round calls each of these once (order reversed every other round), through the
perf suite's round loop and timer (regress.run.suites.timing.interleaved_rounds with host=True: the
host's clock around each call — wall time on a GPU host, the thread's CPU time on the CPU, as the
perf suite — and the device synchronised after each round, untimed):

  sdpa            torch.nn.functional.scaled_dot_product_attention, default backend (the bar)
  attention()     regress.kernel.attention, the public API (REGRESS_ATTENTION check, grad check)
  op C++          torch.ops.regress.attention: the C++ kernels (kernel/torch/regress_op.cpp)
  op Python       torch.ops.regress_python.attention: the same op with the Python kernels (before)
  ctypes          KernelLibrary.forward: the kernel library through ctypes, no dispatcher
  Python floor    the op's schema with Python kernels (autograd + CPU/CUDA, as the Python path's)
                  that only allocate the output: what any Python kernel costs before doing work

Inputs are BHSD, bf16, head_dim 128, rounding rtne, grad mode on and no input requiring grad (as
benchmarks/h200/h200_op.py's overhead rows). On a GPU the time is what the calling thread spends to
enqueue the call; on the CPU it is the whole call (the kernel runs on the calling thread), so the
CPU shapes are small. `--check` (on by default on CUDA) first holds the C++ kernels to the Python
ones on the device: the same bits (modes, masks, GQA, varlen with LSE), CUDA-graph capture and
replay, a side stream, torch.compile(fullgraph=True).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from regress.facts.cases import Shape
from regress.facts.results import LAYOUTS, ROUNDING_MODES
from regress.facts.stats import percentile
from regress.run.suites.common import make_inputs, synchronize
from regress.run.suites.timing import interleaved_rounds

SHAPES: dict[str, list[Shape]] = {
    # Small enough that the call, not the arithmetic, is what is timed on one core.
    "cpu": [Shape(1, 1, 1, 1), Shape(1, 32, 1, 1), Shape(1, 32, 1, 16), Shape(1, 32, 1, 16, hkv=8)],
    # Decode (issue 15's (8,32,1,4096); issue 40's GQA decode against an 8k cache), tiny, and cross.
    "cuda": [
        Shape(1, 1, 1, 1),
        Shape(1, 32, 1, 128),
        Shape(8, 32, 1, 4096),
        Shape(16, 32, 1, 8192, hkv=8),
        Shape(2, 40, 1024, 77),
    ],
}
FNS = ("sdpa", "attention()", "op C++", "op Python", "ctypes", "Python floor")
BAR = "sdpa"


_FLOOR: list[torch.library.Library] = []


def python_floor() -> Any:
    """regress_floor::attention: the schema of torch.ops.regress.attention with Python kernels that
    do nothing but allocate the output, registered as the Python path registers its own (a
    forward-only autograd kernel over a CPU and a CUDA kernel)."""
    from regress.kernel import op

    if not _FLOOR:
        lib = torch.library.Library("regress_floor", "DEF")
        lib.define(op.SCHEMA)
        for key in ("CPU", "CUDA"):
            lib.impl("attention", lambda q, *a: torch.empty(q.shape, dtype=q.dtype, device=q.device), key)
        floor = torch.ops.regress_floor.attention.default
        for key in ("AutogradCPU", "AutogradCUDA"):
            lib.impl("attention", op._autograd_kernel(floor), key, with_keyset=True)
        _FLOOR.append(lib)
    return torch.ops.regress_floor.attention.default


def runners(s: Shape, device: str) -> list[tuple[str, Callable[[int], Any]]]:
    from regress.kernel import attention, default_library, op
    from regress.kernel.loader import backend_for_device

    q, k, v = make_inputs(s, "bhsd", seed=1, device=device)
    gqa = s.heads_kv != s.h
    py_attention, _ = op.python_ops()
    floor = python_floor()
    lib = default_library(backend_for_device(q.device))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sdpa_kw = {"enable_gqa": True} if gqa else {}
    args = (q, k, v, "bhsd", "rtne", None, False, "top_left", gqa)
    fns: dict[str, Callable[[int], Any]] = {
        "sdpa": lambda i: sdpa(q, k, v, **sdpa_kw),
        "attention()": lambda i: attention(q, k, v, layout="bhsd", rounding="rtne", enable_gqa=gqa),
        "op C++": lambda i: op.attention_op(*args),
        "op Python": lambda i: py_attention(*args),
        "ctypes": lambda i: lib.forward(q, k, v, layout="bhsd", rounding="rtne"),
        "Python floor": lambda i: floor(*args),
    }
    return [(name, fns[name]) for name in FNS]


def measure(device: str, shapes: list[Shape], iters: int, warm: int) -> list[dict[str, Any]]:
    rows = []
    for s in shapes:
        t0 = time.perf_counter()
        fns, dropped = [], {}
        for key, fn in runners(s, device):
            try:  # a backend without the shape's kernel yet (GQA on a GPU backend) is left out, with why
                fn(0)
            except (RuntimeError, ValueError) as exc:
                dropped[key] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            fns.append((key, fn))
        # On the CPU the calling thread's CPU time, as the perf suite: on the shared 2-core VM a
        # neighbour's preemption stretches wall time at random (regress/run/suites/timing.py Timer).
        ms = interleaved_rounds(device, fns, warm, iters, host=True, thread_clock=device == "cpu")
        us = {k: [x * 1e3 for x in v] for k, v in ms.items()}
        p50 = {k: percentile(v, 50) for k, v in us.items()}
        row = {
            "device": device,
            "shape": s.dims(),
            "heads_kv": s.heads_kv,
            "p50_us": p50,
            "p10_us": {k: percentile(v, 10) for k, v in us.items()},
            "p90_us": {k: percentile(v, 90) for k, v in us.items()},
            "vs_sdpa": {k: p50[k] / p50[BAR] for k in p50} if BAR in p50 else {},
            "left_out": dropped,
            "rounds": iters,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        rows.append(row)
        print(
            f"{device} {s.dims()} hkv={s.heads_kv}: "
            + " ".join(f"{k}={p50[k]:.1f}" for k in FNS if k in p50)
            + "".join(f"; {k} left out: {why}" for k, why in dropped.items())
            + f"  ({row['seconds']} s)",
            flush=True,
        )
    return rows


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """("bits", the outputs' bit patterns) or ("refused", the KernelError or exception text): a
    backend without a v2 kernel yet refuses it, and both implementations must refuse alike."""
    from regress.kernel import op

    try:
        out = fn(*args)
    except (RuntimeError, TypeError, ValueError) as exc:
        err = op.kernel_error(exc) if isinstance(exc, RuntimeError) else None
        return "refused", f"{type(err or exc).__name__}: {err or exc}"
    outs = out if isinstance(out, tuple) else (out,)
    return "bits", [t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32).cpu() for t in outs]


def same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "refused":
        return bool(a[1] == b[1])
    return len(a[1]) == len(b[1]) and all(
        x.shape == y.shape and torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True)
    )


def check(device: str) -> dict[str, Any]:
    """The C++ kernels against the Python ones on `device`: bits (or the same refusal), CUDA graph,
    side stream, compile."""
    from regress.kernel import attention, op

    py_attention, py_varlen = op.python_ops()
    res: dict[str, Any] = {
        "implementation": op.IMPLEMENTATION,
        "why": op.IMPLEMENTATION_REASON,
        "failures": [],
        "bit_cases": 0,
        "refused_by_both": [],
    }
    fail = res["failures"].append
    if op.IMPLEMENTATION != "native":
        fail(f"torch.ops.regress runs the {op.IMPLEMENTATION} kernels: {op.IMPLEMENTATION_REASON}")

    def compare(name: str, a: tuple[str, Any], b: tuple[str, Any]) -> None:
        if not same(a, b):
            fail(f"C++ != Python: {name}: {str(a)[:160]} / {str(b)[:160]}")
        elif a[0] == "refused":
            res["refused_by_both"].append(f"{name}: {a[1][:160]}")
        else:
            res["bit_cases"] += 1

    n = 0
    for s, causal, align in [
        (Shape(2, 4, 100, 300), False, "top_left"),
        (Shape(2, 40, 1024, 77), False, "top_left"),
        (Shape(8, 32, 1, 4096), False, "top_left"),
        (Shape(2, 4, 100, 300), True, "top_left"),
        (Shape(2, 4, 300, 100), True, "bottom_right"),
        (Shape(3, 8, 77, 200, hkv=2), False, "top_left"),
        (Shape(4, 32, 1, 1000, hkv=8), True, "bottom_right"),
    ]:
        for layout in LAYOUTS:
            q, k, v = make_inputs(s, layout, seed=n, device=device)
            n += 1
            for mode in ROUNDING_MODES:
                args = (q, k, v, layout, mode, None, causal, align, s.heads_kv != s.h)
                name = f"{s.dims()} hkv={s.heads_kv} {layout} {mode} causal={causal} {align}"
                compare(name, outcome(op.attention_op, *args), outcome(py_attention, *args))
    g = torch.Generator(device=device).manual_seed(5)
    lens = [(17, 40), (1, 300), (0, 5), (129, 129), (64, 0)]
    cq, ck = (
        torch.tensor([0, *torch.tensor(x).cumsum(0).tolist()], dtype=torch.int32, device=device)
        for x in ([a for a, _ in lens], [b for _, b in lens])
    )
    vq = torch.randn(int(cq[-1]), 8, 128, generator=g, device=device).bfloat16()
    vk, vv = (torch.randn(int(ck[-1]), 2, 128, generator=g, device=device).bfloat16() for _ in range(2))
    for mode in ROUNDING_MODES:
        for causal in (False, True):
            args = (vq, vk, vv, cq, ck, 129, 300, 0.0, None, causal, mode)
            compare(
                f"varlen {mode} causal={causal}",
                outcome(op.varlen_attention_op, *args),
                outcome(py_varlen, *args),
            )

    if device != "cpu":  # dense: what every GPU backend runs today
        shape = Shape(2, 8, 256, 512)
        q, k, v = make_inputs(shape, "bshd", seed=3, device=device)
        args = (q, k, v, "bshd", "rtne", None, False, "top_left", False)
        eager = outcome(op.attention_op, *args)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            on_side = op.attention_op(*args)
        torch.cuda.current_stream().wait_stream(side)
        synchronize(device)
        res["side_stream_equal"] = same(("bits", [on_side.view(torch.int16).cpu()]), eager)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = op.attention_op(*args)
        q2, k2, v2 = make_inputs(shape, "bshd", seed=4, device=device)
        q.copy_(q2), k.copy_(k2), v.copy_(v2)
        graph.replay()
        synchronize(device)
        replayed = ("bits", [captured.view(torch.int16).cpu()])
        res["graph_replay_equal"] = same(replayed, outcome(op.attention_op, *args))
        res["graph_differs_from_first"] = not same(replayed, eager)
        for key in ("side_stream_equal", "graph_replay_equal", "graph_differs_from_first"):
            if not res[key]:
                fail(key)

    def layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # Exact arithmetic around the op (a float sum after it may be reordered by the compiler).
        return attention(q * 1.0, k, v, rounding="rtz") * 2.0

    q, k, v = make_inputs(Shape(2, 8, 200, 200), "bshd", seed=6, device=device)
    torch._dynamo.reset()
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled = torch.compile(layer, fullgraph=True)(q, k, v)
        res["compile_s"] = round(time.perf_counter() - t0, 1)
        res["compile_fullgraph_equal"] = same(
            ("bits", [compiled.view(torch.int16).cpu()]), outcome(layer, q, k, v)
        )
    if not res["compile_fullgraph_equal"]:
        fail("torch.compile(fullgraph=True) bits differ from eager")
    print(f"checks on {device}: {json.dumps(res)}", flush=True)
    return res


def table(res: dict[str, Any]) -> str:
    lines = [
        "",
        f"== eager host µs per call, p50 (×SDPA) — {res['machine']} ==",
        f"{'device':6} {'shape (B,H,Sq,Sk)':18} {'hkv':>4} " + " ".join(f"{k:>16}" for k in FNS),
    ]
    for r in res["rows"]:
        cells = " ".join(
            f"{r['p50_us'][k]:7.1f} ({r['vs_sdpa'][k]:4.2f}×)" if k in r["vs_sdpa"] else f"{'—':>16}"
            for k in FNS
        )
        lines.append(f"{r['device']:6} {r['shape']:18} {r['heads_kv']:>4} {cells}")
    timed = [r for r in res["rows"] if {"attention()", "op C++"} <= set(r["vs_sdpa"])]
    met = [r for r in timed if max(r["vs_sdpa"]["attention()"], r["vs_sdpa"]["op C++"]) <= 1.0]
    lines.append(
        f"bar (attention() and op C++ at or below SDPA): met on {len(met)} of {len(timed)} timed rows"
    )
    for r in res["rows"]:
        for k, why in r["left_out"].items():
            lines.append(f"  {r['device']} {r['shape']} hkv={r['heads_kv']}: {k} left out ({why[:120]})")
    for c in res.get("checks", []):
        lines.append(
            f"checks {c['device']}: {c['implementation']}, {c['bit_cases']} cases equal in bits, "
            f"{len(c['refused_by_both'])} refused alike by both, {len(c['failures'])} failed "
            f"{c['failures'][:3]}; graph {c.get('graph_replay_equal')}, side stream "
            f"{c.get('side_stream_equal')}, compile {c['compile_fullgraph_equal']}"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", action="append", choices=list(SHAPES), help="repeatable; default cpu")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--iters", type=int, default=3000, help="timed rounds per shape")
    ap.add_argument("--warm", type=int, default=300)
    ap.add_argument("--check", choices=["auto", "yes", "no"], default="auto", help="auto: on CUDA only")
    a = ap.parse_args()
    devices = a.device or ["cpu"]
    # One thread each, as the perf suite's CPU timing (regress/run/suites/perf.py _one_thread).
    os.environ["REGRESS_CPU_THREADS"] = "1"
    torch.set_num_threads(1)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    res: dict[str, Any] = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if "cuda" in devices else None,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "load_before": load,
        "rows": [],
        "checks": [],
    }
    from regress.kernel import op

    res["implementation"] = [op.IMPLEMENTATION, op.IMPLEMENTATION_REASON]
    for device in devices:
        if a.check == "yes" or (a.check == "auto" and device != "cpu"):
            res["checks"].append({"device": device, **check(device)})
        res["rows"] += measure(device, SHAPES[device], a.iters, a.warm)
    res["load_after"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    gpu = f"{res['gpu']}, " if res["gpu"] else ""
    res["machine"] = (
        f"{gpu}torch {res['torch']}, {res['cores']} cores, load {load[0]:.2f} before / "
        f"{res['load_after'][0]:.2f} after"
        if res["load_after"]
        else f"{gpu}torch {res['torch']}"
    )
    text = table(res)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "op_host.json").write_text(json.dumps(res, indent=1, default=str))
        (a.out / "op_host_table.txt").write_text(text + "\n")
    print(text)
    return 1 if any(c["failures"] for c in res["checks"]) else 0


if __name__ == "__main__":
    sys.exit(main())
