"""H200 measurements for issue 15, through the package only (one device call: benchmarks/h200/h200_op.sh).

  python benchmarks/h200/h200_op.py all --out DIR   build, check, sweep, overhead; results.json + a table
  python benchmarks/h200/h200_op.py ncu-target      the launches `ncu` profiles (see h200_op.sh)

Libraries (LIBS): "new" = the default build (`regress.native.build.build_kernel('cuda')`); the others are the
same source with one choice reverted (ablations, see docs/perf-notes.md v3), timed side by side so
a change is measured against its own baseline in one run. Baselines: SDPA flash and cuDNN
(regress.kernel.baselines).
Timing: CUDA events around each call, every function of a (shape, layout) interleaved in each round
(order reversed every other round), each call after a ~0.2 ms GPU spin, input sets rotated past 4x
the L2, median reported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
import zlib
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import devicekit
import numpy as np
import torch

from regress.facts import numerics as nm
from regress.facts.cases import Shape
from regress.facts.metrics import load_contract
from regress.facts.results import LAYOUTS as RESULT_LAYOUTS
from regress.facts.results import ROUNDING_MODES
from regress.facts.stats import geomean, percentile
from regress.kernel import KernelLibrary, load_library, reference
from regress.kernel.baselines import available_baselines
from regress.native.build import build_kernel, inject_flags
from regress.run.suites.common import make_inputs
from regress.run.suites.perf import GPU_MODEL_SHAPES, GPU_SHAPES
from regress.run.suites.timing import Timer

LIBS: dict[str, tuple[str, ...]] = {
    "new": (),
    "epi1": ("-DRA_CUDA_EPILOGUE=1",),  # v3's epilogue: 4-byte staging writes, 16-byte global stores
    "nqk0": ("-DRA_CUDA_NEXT_QK=0",),  # next tile's Q K^T after the epilogue at every shape
}
# Checked, never timed: the fire drills (their faults must survive the epilogue's data path) and
# bf16.h's integer rounding for every mode (the cvt-based rounding must give the same bits).
DRILLS: dict[str, tuple[str, ...]] = {
    "ulp2": tuple(inject_flags({"ulp": 2})),
    "nondet": tuple(inject_flags({"nondeterminism": 1})),
}
CHECK_ONLY: dict[str, tuple[str, ...]] = {**DRILLS, "cvt0": ("-DRA_CUDA_CVT_ROUND=0",)}
# H200_LIBS="new=;nqk1=-DRA_CUDA_NEXT_QK=1" replaces the ablations of a call ("new" must stay the
# default build: its bits are the ones checked against the fp64 reference).
if os.environ.get("H200_LIBS"):
    LIBS = {
        name: tuple(f for f in flags.split() if f)
        for name, _, flags in (item.partition("=") for item in os.environ["H200_LIBS"].split(";"))
    }
# H200_FAMILIES="cross,short" times only those families (a shorter call).
FAMILIES = {f for f in os.environ.get("H200_FAMILIES", "").split(",") if f}
MODES = ROUNDING_MODES
LAYOUTS = RESULT_LAYOUTS[::-1]  # bhsd first, the order of the committed H200 tables
EXTRA = [Shape(1, 8, 131072, 131072)]  # the 128k family: timed, not part of the suite's geomean
SPIN_CYCLES = 400_000
OVERHEAD = [Shape(8, 32, 1, 4096), Shape(2, 40, 1024, 77)]
LOG: list[str] = []


def shapes_env(var: str, default: list[Shape]) -> list[Shape]:
    """The shapes an environment variable lists ("B,H,Sq,Sk;B,H,Sq,Sk"), else `default`: the
    device scripts' one reader of H200_*SHAPES* lists."""
    spec = os.environ.get(var)
    return [Shape(*map(int, d.split(","))) for d in spec.split(";")] if spec else default


def say(msg: str) -> None:
    print(msg, flush=True)
    LOG.append(msg)


def family(s: Shape) -> str:
    if s.sk < s.sq and s.sk in (77, 256, 1024):
        return "cross"
    if s.sq % 128 or s.sk % 128:
        return "odd"
    if s.sq <= 512:
        return "short"
    if s.sq >= 65536:
        return "128k"
    return "mid" if s.sq <= 4096 else "long"


def build_libs() -> dict[str, KernelLibrary]:
    everything = {**LIBS, **CHECK_ONLY}
    with ThreadPoolExecutor(len(everything)) as ex:
        futs = {k: ex.submit(build_kernel, "cuda", extra_flags=flags) for k, flags in everything.items()}
        arts = {k: f.result() for k, f in futs.items()}
    libs = {}
    for name, art in arts.items():
        st = art.stats
        say(
            f"built {name}: {art.path.name} ({art.build_seconds:.0f} s, cached {art.cached}) max registers "
            f"{st.get('max_registers')}, max spill {st.get('max_spill')}"
        )
        libs[name] = load_library(art.path)
    return libs


# --- checks ------------------------------------------------------------------------------------


def check(libs: dict[str, KernelLibrary]) -> dict[str, Any]:
    out: dict[str, Any] = {"ulp": {}, "bits_new_vs_old": {}, "failures": []}
    new = libs["new"]
    others = [lib for name, lib in libs.items() if name not in DRILLS and name != "new"]
    drills = devicekit.check_drills(
        libs["new"], libs["ulp2"], libs["nondet"], Shape(2, 3, 200, 77), LAYOUTS, MODES, out["failures"]
    )
    say(f"drills checked: {drills} failed")
    contract = load_contract()  # the ULP limits: contract.toml, never restated here
    small = [
        Shape(8, 32, 1, 4096),  # decode: the second warpgroup idles
        Shape(2, 4, 63, 300),
        Shape(3, 5, 65, 129),  # the second warpgroup has one row
        Shape(1, 1, 1, 1),
        Shape(5, 6, 113, 203),
        Shape(2, 3, 1023, 1024),
        Shape(1, 2, 77, 1),
        Shape(4, 40, 300, 77),
        Shape(16, 16, 256, 256),
        Shape(3, 2, 129, 257),
    ]
    kinds = ["realistic", "nan_q", "nan_k", "posinf_v", "neginf_k", "extreme_logits"]
    for s in small:
        for kind in kinds if s == Shape(5, 6, 113, 203) else ["realistic"]:
            for layout in LAYOUTS:
                q, k, v = make_inputs(
                    s, layout, seed=zlib.crc32(f"{s.dims()}{kind}{layout}".encode()), device="cuda", kind=kind
                )
                ref, mag = reference.reference_attention(q, k, v, layout=layout)  # type: ignore[arg-type]
                for mode in MODES:
                    o = torch.full_like(q, float("nan"))
                    new.forward(q, k, v, layout=layout, rounding=mode, out=o)  # type: ignore[arg-type]
                    su = nm.scaled_ulp(reference.to_bhsd_bits(o, layout), ref, mag)  # type: ignore[arg-type]
                    worst = float(su.max())
                    key = f"{s.dims()}:{kind}:{layout}:{mode}"
                    out["ulp"][key] = worst
                    if not worst <= contract.scaled_ulp_limit(mode):
                        out["failures"].append(f"ulp {key} = {worst}")
    # Bit equality of the builds: the ablations change only scheduling (run 1 showed cvt rounding
    # equal to bf16.h bit for bit, NaN -> 0x7FFF included).
    for s, kind in [
        (Shape(2, 40, 1024, 77), "realistic"),
        (Shape(64, 16, 256, 256), "realistic"),
        (Shape(2, 32, 1531, 1531), "realistic"),
        (Shape(1, 24, 4097, 4097), "realistic"),
        (Shape(3, 7, 300, 500), "nan_v"),
        (Shape(3, 7, 300, 500), "posinf_q"),
        (Shape(3, 7, 300, 500), "extreme_logits"),
        (Shape(8, 32, 1, 4096), "realistic"),  # the decode plan (seqlen_q <= 64)
        (Shape(4, 8, 37, 600), "nan_v"),
    ]:
        for layout in LAYOUTS:
            q, k, v = make_inputs(s, layout, seed=7, device="cuda", kind=kind)
            for mode in MODES:
                a = new.forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                diff = 0
                for other in others:
                    b = other.forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                    diff += int((a.view(torch.int16) != b.view(torch.int16)).sum())
                key = f"{s.dims()}:{kind}:{layout}:{mode}"
                out["bits_new_vs_old"][key] = diff
                if diff:
                    out["failures"].append(f"new != old bits {key}: {diff} elements")
    out["op_and_graph"] = check_op_and_graph(out["failures"])
    say(
        f"checks: {len(out['ulp'])} ULP, {len(out['bits_new_vs_old'])} bit-equality, "
        f"{len(out['failures'])} failed; max scaled ULP "
        + ", ".join(f"{m} {max(v for k, v in out['ulp'].items() if k.endswith(m)):.2f}" for m in MODES)
    )
    for f in out["failures"][:20]:
        say(f"  FAIL {f}")
    return out


class Block(torch.nn.Module):
    def __init__(self, heads: int) -> None:
        super().__init__()
        w = heads * 128
        self.heads = heads
        self.qkv = torch.nn.Linear(w, 3 * w, dtype=torch.bfloat16, device="cuda")
        self.out = torch.nn.Linear(w, w, dtype=torch.bfloat16, device="cuda")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from regress.kernel import attention

        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, 128).unbind(2)
        return self.out(attention(q, k, v, layout="bshd", rounding="rtne").reshape(b, n, -1))


def check_op_and_graph(failures: list[str]) -> dict[str, Any]:
    from regress.kernel import attention

    res: dict[str, Any] = {}
    q, k, v = make_inputs(Shape(2, 40, 1024, 77), "bshd", seed=3, device="cuda")
    eager = attention(q, k, v, layout="bshd", rounding="rtne")
    torch.library.opcheck(torch.ops.regress.attention.default, (q, k, v, "bshd", "rtne", None))
    res["opcheck"] = "pass"
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        attention(q, k, v, layout="bshd", rounding="rtne")
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = attention(q, k, v, layout="bshd", rounding="rtne")
    q2, k2, v2 = make_inputs(Shape(2, 40, 1024, 77), "bshd", seed=4, device="cuda")
    q.copy_(q2), k.copy_(k2), v.copy_(v2)
    g.replay()
    torch.cuda.synchronize()
    want = attention(q, k, v, layout="bshd", rounding="rtne")
    res["graph_replay_equal"] = bool(torch.equal(captured.view(torch.int16), want.view(torch.int16)))
    res["graph_differs_from_first_inputs"] = not torch.equal(
        captured.view(torch.int16), eager.view(torch.int16)
    )
    if not res["graph_replay_equal"]:
        failures.append("CUDA graph replay bits differ from eager")
    try:
        blk = Block(heads=4)
        x = torch.randn(2, 333, 512, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            e = blk(x)
            t0 = time.perf_counter()
            c = torch.compile(blk, fullgraph=True)(x)
            res["compile_s"] = round(time.perf_counter() - t0, 1)
        res["compile_fullgraph_equal"] = bool(torch.equal(e.view(torch.int16), c.view(torch.int16)))
        if not res["compile_fullgraph_equal"]:
            failures.append("torch.compile(fullgraph=True) bits differ from eager on CUDA")
    except Exception as exc:  # record and go on: the timings matter as much
        res["compile_error"] = f"{type(exc).__name__}: {exc}"[:500]
        failures.append("torch.compile on CUDA raised")
    say(f"op/graph/compile: {res}")
    return res


# --- timing ------------------------------------------------------------------------------------


def n_sets(s: Shape) -> int:
    set_bytes = 2 * s.d * s.b * s.h * (2 * s.sq + 2 * s.sk)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or 64 << 20
    return max(2, min(8, math.ceil(4 * l2 / set_bytes), int(20e9 // set_bytes)))


def time_shape(
    s: Shape, layout: str, fns: dict[str, Callable[[tuple[torch.Tensor, ...]], Any]], budget_s: float
) -> dict[str, float]:
    sets = [make_inputs(s, layout, seed=i, device="cuda") for i in range(n_sets(s))]
    names = list(fns)
    for name in list(names):  # a refusing baseline is dropped, not fatal
        try:
            fns[name](sets[0])
        except Exception as exc:
            say(f"  {s.dims()} {layout}: {name} left out ({type(exc).__name__})")
            names.remove(name)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for name in names:
        fns[name](sets[1 % len(sets)])
    torch.cuda.synchronize()
    rounds = int(max(4, min(40, budget_s / max(time.perf_counter() - t0, 1e-6))))
    timer = Timer(gpu=True)  # the perf suite's timer: CUDA events, read after one synchronise
    for r in range(rounds):
        inp = sets[r % len(sets)]
        for name in names if r % 2 == 0 else names[::-1]:
            # A ~0.2 ms GPU spin before every call keeps the GPU behind the host, so the events time
            # device work only (our ctypes call costs ~80 us of host time, SDPA's ~20-40 us: without
            # it, run 1 timed host gaps at the small shapes).
            timer.prime(SPIN_CYCLES)
            timer.time(name, lambda name=name, inp=inp: fns[name](inp))
    ms = timer.samples()
    del sets
    return {n: percentile(ms[n], 50) for n in names}


def sweep(libs: dict[str, KernelLibrary]) -> list[dict[str, Any]]:
    bl = {b.name: b for b in available_baselines("cuda")}
    rows = []
    for s in [*GPU_SHAPES, *GPU_MODEL_SHAPES, *EXTRA]:
        if FAMILIES and family(s) not in FAMILIES:
            continue
        layouts = ("bhsd",) if s in EXTRA else LAYOUTS
        for layout in layouts:
            fns: dict[str, Callable[[tuple[torch.Tensor, ...]], Any]] = {}
            for lname in LIBS:  # the check-only builds are not timed
                lib = libs[lname]
                for mode in MODES:
                    fns[f"{lname}:{mode}"] = lambda t, lib=lib, mode=mode, layout=layout: lib.forward(
                        *t, layout=layout, rounding=mode
                    )
            for bname, b in bl.items():
                fns[bname] = lambda t, b=b, layout=layout: b(*t, layout=layout, rounding="rtne")
            ms = time_shape(s, layout, fns, budget_s=0.6 if s not in EXTRA else 1.5)
            row = {
                "shape": s.dims(),
                "family": family(s),
                "layout": layout,
                "ms": ms,
                "tflops": {k: s.flops / (v * 1e-3) / 1e12 for k, v in ms.items()},
            }
            rows.append(row)
            t = row["tflops"]
            say(f"{s.dims():>22} {layout} " + " ".join(f"{k}={v:.0f}" for k, v in t.items()))
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summ: dict[str, Any] = {}
    for lib in LIBS:
        for mode in MODES:
            for base in ("sdpa_cudnn", "sdpa_flash"):
                r = [
                    (row["ms"][base] / row["ms"][f"{lib}:{mode}"], row)
                    for row in rows
                    if row["family"] != "128k" and base in row["ms"] and f"{lib}:{mode}" in row["ms"]
                ]
                if not r:
                    continue
                g = geomean(x for x, _ in r)
                lo, lo_row = min(r, key=lambda x: x[0])
                fam: dict[str, list[float]] = defaultdict(list)
                for x, row in r:
                    fam[row["family"]].append(x)
                summ[f"{lib}:{mode}:{base}"] = {
                    "geomean": g,
                    "min": lo,
                    "min_at": f"{lo_row['shape']} {lo_row['layout']}",
                    "families": {f: geomean(v) for f, v in fam.items()},
                }
    return summ


# --- per-call overhead ---------------------------------------------------------------------------


def overhead_fns(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, libs: dict[str, KernelLibrary]
) -> dict[str, Callable[[], Any]]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from regress.kernel import attention

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def pinned(backend: Any) -> Callable[[], torch.Tensor]:
        def f() -> torch.Tensor:
            with sdpa_kernel([backend]):
                return sdpa(q, k, v)

        return f

    return {
        "ours (regress.kernel.attention)": lambda: attention(q, k, v, layout="bhsd", rounding="rtne"),
        "ours (torch.ops.regress.attention)": lambda: torch.ops.regress.attention.default(
            q, k, v, "bhsd", "rtne", None
        ),
        **{
            f"ours (KernelLibrary.forward, {name})": lambda lib=libs[name]: lib.forward(
                q, k, v, layout="bhsd", rounding="rtne"
            )
            for name in LIBS
        },
        "sdpa (default backend)": lambda: sdpa(q, k, v),
        "sdpa flash": pinned(SDPBackend.FLASH_ATTENTION),
        "sdpa cudnn": pinned(SDPBackend.CUDNN_ATTENTION),
    }


def overhead(libs: dict[str, KernelLibrary]) -> list[dict[str, Any]]:
    out = []
    for s in OVERHEAD:
        q, k, v = make_inputs(s, "bhsd", seed=1, device="cuda")
        fns = overhead_fns(q, k, v, libs)
        for name, f in fns.items():
            row: dict[str, Any] = {"shape": s.dims(), "fn": name}
            try:
                for _ in range(10):
                    f()
                torch.cuda.synchronize()
                n = 200
                t0 = time.perf_counter()
                for _ in range(n):
                    f()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                row["eager_host_us"] = (t1 - t0) / n * 1e6
                row["eager_wall_us"] = (t2 - t0) / n * 1e6
                st = torch.cuda.Stream()
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    f()
                torch.cuda.current_stream().wait_stream(st)
                calls = 20
                g1, gn = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
                with torch.cuda.graph(g1):
                    f()
                with torch.cuda.graph(gn):
                    for _ in range(calls):
                        f()
                for g, key, per in ((g1, "graph1_us", 1), (gn, "graph20_per_call_us", calls)):
                    g.replay()
                    torch.cuda.synchronize()
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    reps = 50
                    a.record()
                    for _ in range(reps):
                        g.replay()
                    b.record()
                    torch.cuda.synchronize()
                    row[key] = a.elapsed_time(b) * 1e3 / (reps * per)
                # host cost of one replay (what a graph leaves of the per-call overhead)
                t0 = time.perf_counter()
                for _ in range(50):
                    g1.replay()
                row["graph1_host_us"] = (time.perf_counter() - t0) / 50 * 1e6
                torch.cuda.synchronize()
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            out.append(row)
            say(
                f"overhead {s.dims()} {name}: "
                + ", ".join(
                    f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in row.items()
                    if k not in ("shape", "fn")
                )
            )
    return out


# --- ncu target ----------------------------------------------------------------------------------


def ncu_target() -> None:
    """One launch per (library, shape): ncu -k regex:attn_fwd_sm90 profiles exactly these."""
    libs = {name: load_library(build_kernel("cuda", extra_flags=flags).path) for name, flags in LIBS.items()}
    cudnn = {b.name: b for b in available_baselines("cuda")}.get("sdpa_cudnn")
    shapes = [
        Shape(2, 40, 1024, 77),
        Shape(2, 24, 4096, 77),
        Shape(64, 16, 256, 256),
        Shape(256, 32, 128, 128),
    ]
    shapes = shapes_env("H200_NCU_SHAPES", shapes)  # "2,24,4096,77;64,16,256,256"
    for s, layout, mode in [(sh, "bhsd", "rtne") for sh in shapes]:
        q, k, v = make_inputs(s, layout, seed=0, device="cuda")
        for name, lib in libs.items():
            print(f"ncu launch: {name} {s.dims()} {layout} {mode}", flush=True)
            lib.forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
            torch.cuda.synchronize()
        if cudnn is not None:  # the kernel to beat, profiled beside ours
            print(f"ncu launch: sdpa_cudnn {s.dims()} {layout}", flush=True)
            cudnn(q, k, v, layout=layout, rounding="rtne")
            torch.cuda.synchronize()


def sanitize_target() -> None:
    """Shapes with several tiles per CTA (the Q ring wraps, S of the next tile is issued early) and
    idle warpgroups, for compute-sanitizer memcheck and racecheck."""
    lib = load_library(build_kernel("cuda").path)
    for s in (Shape(3, 100, 130, 200), Shape(1, 300, 1, 77), Shape(2, 70, 256, 129)):
        for layout in LAYOUTS:
            q, k, v = make_inputs(s, layout, seed=0, device="cuda")
            for mode in ("rtne", "rtna"):
                lib.forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
    torch.cuda.synchronize()
    print("sanitize-target: done")


def table(res: dict[str, Any]) -> str:
    lines = ["", "== per-mode geomean (suite GPU shapes, both layouts) =="]
    for key, v in res.get("summary", {}).items():
        fams = " ".join(f"{f}={x:.3f}" for f, x in sorted(v["families"].items()))
        lines.append(f"{key:28} geo {v['geomean']:.3f}  min {v['min']:.3f} @ {v['min_at']}  [{fams}]")
    lines.append("== 128k (bhsd TFLOP/s) ==")
    for row in res.get("sweep", []):
        if row["family"] == "128k":
            lines.append(f"{row['shape']} " + " ".join(f"{k}={x:.0f}" for k, x in row["tflops"].items()))
    lines.append(
        "== per-call µs: eager host / eager wall / graph 1-call replay / graph per call (20 in one graph) =="
    )
    for r in res.get("overhead", []):
        if "error" in r:
            lines.append(f"{r['shape']:>14} {r['fn']:36} error {r['error'][:80]}")
        else:
            lines.append(
                f"{r['shape']:>14} {r['fn']:36} {r['eager_host_us']:7.1f} {r['eager_wall_us']:7.1f} "
                f"{r['graph1_us']:7.1f} {r['graph20_per_call_us']:7.1f}  "
                f"(replay host {r['graph1_host_us']:.1f})"
            )
    c = res.get("check", {})
    lines.append(f"checks failed: {len(c.get('failures', []))}; op/graph: {c.get('op_and_graph')}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["all", "ncu-target", "sanitize-target"])
    ap.add_argument("--out", type=Path, default=Path("/tmp/h200_op"))
    ap.add_argument("--skip", default="", help="comma list of check,sweep,overhead")
    a = ap.parse_args()
    if a.what == "ncu-target":
        ncu_target()
        return 0
    if a.what == "sanitize-target":
        sanitize_target()
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    libs = build_libs()
    for part, fn in (
        ("check", lambda: check(libs)),
        ("sweep", lambda: sweep(libs)),
        ("overhead", lambda: overhead(libs)),
    ):
        if part in a.skip.split(","):
            continue
        t0 = time.perf_counter()
        try:
            res[part] = fn()
        except Exception:
            say(f"{part} failed:\n{traceback.format_exc()}")
        say(f"[{part}: {time.perf_counter() - t0:.0f} s]")
        if part == "sweep" and part in res:
            res["summary"] = summarise(res["sweep"])
        (a.out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (a.out / "table.txt").write_text(table(res))
    np.set_printoptions(precision=3)
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
