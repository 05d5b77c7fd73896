"""H200 measurements for issue 26, the split over keys (one device call: benchmarks/h200/h200_split.sh).

  python benchmarks/h200/h200_split.py all --out DIR   build, check, time; results.json + table.txt
  python benchmarks/h200/h200_split.py ncu-target      the decode launches `ncu` profiles

Libraries: "new" = the default build (split by kernel/cuda/attention_sm90.cu's split_rule; the
long-key kernel where long_keys_pay, else the tail split); "nosplit" = -DRA_CUDA_SPLIT=1 (the
ablation: the kernel before the split); "sN" = N splits wherever a tile has N key blocks (the
measurements the rule is chosen from); H200_LIBS="new=;bal0=-D..." replaces the timed set
(docs/perf-notes.md v5 lists each call's). H200_SHAPES="targets,regular" times only those groups.
Checked, never timed: the fire drills and bf16.h's integer rounding, each on a forced split so the
merge kernel's data path is the one checked. Which kernels each build runs on a shape is
kernel/cuda/plan.h's plan (benchmarks/h200/cuda_plan.py: the host planner built with the build's -D
flags over flags.def's defaults, RA_CUDA_LONG_BLOCK_N=160, RA_CUDA_LONG_RULE=1, RA_CUDA_TAIL_SPLIT=1,
...; so "-DRA_CUDA_TAIL_SPLIT=0 -DRA_CUDA_LONG_BLOCK_N=0" turns both off). Bit-equality with the default is
owed wherever a build runs the same kernels. Where one of the two runs the long-key kernel and the
other not or of another N, or another uniform split (other_kernel: other key-block boundaries, so
another online-softmax order), the outputs are checked against the fp64 reference instead, and on
LONG_CHECK must differ from the default's where the long kernel is taken by one only (else it was
not taken). Where only their tail plans differ, the tiles both compute whole owe the same bits and
the rows either splits must differ on TAIL_SHAPES (check_tail). ULP, NaN/Inf, coverage,
determinism and graph checks run on every build, the default included, on the long-kernel and tail
shapes. Timing as benchmarks/h200/h200_op.py (its time_shape: every function of a shape interleaved in
each round, input sets rotated, CUDA events after a GPU spin, median), against SDPA flash and cuDNN
on the same inputs; ratios are TFLOP/s ratios (cuDNN time / our time).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
import traceback
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cuda_plan
import devicekit
import h200_op

from regress.facts import numerics as nm
from regress.facts.cases import Shape
from regress.facts.metrics import load_contract
from regress.facts.results import ROUNDING_MODES
from regress.kernel import KernelLibrary, load_library, reference
from regress.kernel.baselines import available_baselines
from regress.native.build import build_kernel, inject_flags
from regress.run.suites.common import make_inputs

LIBS: dict[str, tuple[str, ...]] = {
    "new": (),
    "nosplit": ("-DRA_CUDA_SPLIT=1",),
    "promo256": ("-DRA_CUDA_L2_PROMO=256",),  # v4's L2 promotion of the TMA loads
    "s2": ("-DRA_CUDA_SPLIT=2",),
    "s4": ("-DRA_CUDA_SPLIT=4",),
    "s8": ("-DRA_CUDA_SPLIT=8",),
    "s16": ("-DRA_CUDA_SPLIT=16",),
}
CHECK_ONLY: dict[str, tuple[str, ...]] = {
    "s4": ("-DRA_CUDA_SPLIT=4",),  # the drills, bits and graph checks run on a forced split
    "nosplit": ("-DRA_CUDA_SPLIT=1",),  # where the rule does not split: the same bits
    "ulp2s4": (*inject_flags({"ulp": 2}), "-DRA_CUDA_SPLIT=4"),
    "nondets4": (*inject_flags({"nondeterminism": 1}), "-DRA_CUDA_SPLIT=4"),
    "cvt0s4": ("-DRA_CUDA_CVT_ROUND=0", "-DRA_CUDA_SPLIT=4"),
    "mk1s4": ("-DRA_CUDA_MERGE_KERNEL=1", "-DRA_CUDA_SPLIT=4"),  # decode merged by the 2nd launch: same bits
}
if os.environ.get("H200_CHECKS") == "0":  # a timing-only call (--skip check): no check builds either
    CHECK_ONLY = {}
if os.environ.get("H200_LIBS"):  # "new=;promo0=-DRA_CUDA_L2_PROMO=0" replaces the timed set
    LIBS = {
        name: tuple(f for f in flags.split() if f)
        for name, _, flags in (item.partition("=") for item in os.environ["H200_LIBS"].split(";"))
    }
    # a timed build under a check build's name would be built, checked and reported with the check
    # build's flags (the two share one library dict)
    _clash = sorted(n for n in LIBS if n in CHECK_ONLY and LIBS[n] != CHECK_ONLY[n])
    if _clash:
        _theirs = "; ".join(n + "=" + " ".join(CHECK_ONLY[n]) for n in _clash)
        raise SystemExit(
            f"H200_LIBS: {', '.join(_clash)}: the name of a check build with other flags "
            f"({_theirs}): rename it"
        )
MODES = ROUNDING_MODES
# H200_TIME_MODES="rtne": the sweep times only these modes of each build (the checks keep all three)
TIME_MODES = tuple(os.environ["H200_TIME_MODES"].split(",")) if os.environ.get("H200_TIME_MODES") else MODES
LAYOUTS = h200_op.LAYOUTS
# The shapes behind cuDNN (decode, short queries) and the two square families.
TARGETS = [
    Shape(8, 32, 1, 4096),
    Shape(32, 32, 1, 8192),
    Shape(4, 32, 16, 8192),
    Shape(16, 32, 1, 2048),
    Shape(4, 32, 64, 8192),
]
# Where the grid leaves most SMs idle: the split's clear case, and the rule's edges.
EDGES = [Shape(1, 32, 1, 8192), Shape(2, 8, 1, 32768), Shape(1, 16, 64, 4096), Shape(1, 4, 2048, 8192)]
SQUARES = [Shape(1, 24, 4608, 4608), Shape(16, 32, 2048, 2048)]
# Suite shapes a change of the load path could move (memory-bound, cross, compute-bound).
REGULAR = [
    Shape(256, 32, 128, 128),
    Shape(64, 16, 256, 256),
    Shape(2, 24, 4096, 256),
    Shape(2, 40, 1024, 77),
    Shape(2, 24, 4096, 77),
    Shape(16, 16, 1024, 1024),
    Shape(2, 16, 8192, 8192),
    Shape(1, 16, 32768, 32768),
]
if os.environ.get("H200_SHAPES"):  # "targets,squares": a shorter call
    _groups = set(os.environ["H200_SHAPES"].split(","))
    TARGETS, EDGES, SQUARES, REGULAR = (
        g if name in _groups else []
        for name, g in (("targets", TARGETS), ("edges", EDGES), ("squares", SQUARES), ("regular", REGULAR))
    )
if os.environ.get("H200_SHAPE_LIST"):  # "256,32,128,128;8,32,1,4096": exactly these, timed as REGULAR
    TARGETS, EDGES, SQUARES = [], [], []
    REGULAR = h200_op.shapes_env("H200_SHAPE_LIST", REGULAR)
OVERHEAD = h200_op.shapes_env(
    "H200_OVERHEAD", [Shape(8, 32, 1, 4096), Shape(4, 32, 64, 8192)]
)  # "1,32,1,8192;..."
LOG: list[str] = []
BLOCK_M = 128  # the sm_90a tile's query rows (ra_launch_plan.block_q)


def settings(name: str) -> dict[str, Any]:
    """Build `name`'s flags as its host planner (kernel/cuda/plan_host.cpp, built with the build's
    -D flags) reports them: ra_build_info's value of every flag, by key."""
    return cuda_plan.build_info({**LIBS, **CHECK_ONLY}[name])


def path(name: str, s: Shape) -> cuda_plan.LaunchPath:
    """The code build `name` runs shape `s` on: kernel/cuda/plan.h's plan for the build's -D flags,
    on the H200's SMs (cuda_plan.launch_path)."""
    return cuda_plan.launch_path({**LIBS, **CHECK_ONLY}[name], s.b, s.h, s.sq, s.sk)


def long_differs(a: str, b: str, s: Shape) -> bool:
    """Builds `a` and `b` run `s` on the long-key kernel in one of them only, or of another N."""
    return path(a, s).long_n != path(b, s).long_n


# Flags that change the arithmetic itself (which exponentials take the polynomial, ablations that
# leave work out): no bits are owed between builds whose values differ.
NUMERICS_FLAGS = ("RA_CUDA_EXP_POLY", "RA_CUDA_ABLATE")


def numerics_of(name: str) -> dict[str, str]:
    flags = {**LIBS, **CHECK_ONLY}[name]
    return {
        macro: value
        for macro, _, value in (f[2:].partition("=") for f in flags if f.startswith("-D"))
        if macro in NUMERICS_FLAGS
    }


def other_kernel(a: str, b: str, s: Shape) -> bool:
    """Builds `a` and `b` run `s` on different key-block boundaries throughout (another uniform
    split, the mma.sync fallback's 64 x 64 tiles, or long_differs), or with other arithmetic
    (NUMERICS_FLAGS): another online-softmax order or other rounding everywhere, so no bits are
    owed; the fp64 reference decides instead. Builds whose long settings differ but that both take
    (or both leave) the long kernel on `s` run the same code there: every bit is owed."""
    pa, pb = path(a, s), path(b, s)
    return (
        pa.splits != pb.splits
        or pa.mma_sync != pb.mma_sync
        or long_differs(a, b, s)
        or numerics_of(a) != numerics_of(b)
    )


# Shapes that take the long-key kernel where it is built: under the default rule (RA_CUDA_LONG_RULE=1)
# the key counts that are not a multiple of 128, under RULE=0 all five (unsplit: at least ~one wave of
# tiles; key counts not a multiple of 160/176/192, one that is of 176, the threshold itself; the last
# query block of (1,8,4097,4097) has one row, so its second warpgroup idles). A few million outputs
# each: the fp64 comparison runs on the host.
LONG_CHECK = [
    Shape(4, 16, 256, 2048),
    Shape(3, 16, 1000, 2049),
    Shape(1, 8, 4097, 4097),
    Shape(4, 8, 1500, 2816),
    Shape(4, 16, 130, 3000),
]
# The long kernel's non-finite inputs, determinism and graph capture: 2070 keys are 13 blocks of 160
# (the last of 150), 12 of 176 or 11 of 192, fewer padded keys than 17 of 128: every long build's rule
# takes it (2100 keys, the shape before the rule, pad to 2240 with 160 against 2176 with 128).
LONG_EDGE = Shape(4, 16, 200, 2070)


# Shapes that take the short-key kernel (the default's, seqlen_k <= 80: one block of 80 keys, 3 Q
# stages; one query block goes to the dynamic scheduler instead), which owes the 128-key kernel's
# bits: exactly 80 keys with a last query block of 2 rows (warpgroup 2 idles); 17 keys over three
# query blocks; one key; 77 keys, several Q-stage turns per CTA and a partial last query block. Its
# non-finite inputs on SHORT_EDGE.
SHORT_CHECK = [Shape(3, 5, 130, 80), Shape(2, 3, 300, 17), Shape(2, 6, 257, 1), Shape(4, 70, 333, 77)]
SHORT_EDGE = Shape(5, 6, 190, 77)
# Non-finite inputs at 77 keys (masked keys inside the short kernel's block) and at exactly 80 (none
# masked in it, 48 in the 128-key kernel's); negzero_v (a V column of -0: that column of O is an
# exact zero) at both, where the 128-key kernel's extra k-steps of +0 products could turn -0 into +0
# at 80 keys (a multiple of 16: no +0 product in the short kernel's last k-step).
SHORT_KINDS = ("nan_q", "nan_k", "posinf_v", "neginf_k", "negzero_v")
SHORT_EDGES = [(s, kind) for s in (SHORT_EDGE, SHORT_CHECK[0]) for kind in SHORT_KINDS]


def forced_split(name: str) -> bool:
    """The measurement builds of N >= 2 forced splits (-DRA_CUDA_SPLIT=N), by their flags, not their
    names: a name test once caught ss3 (call 22) and s0 (call 38, a build without the short-key
    kernel, which then went unchecked and untimed)."""
    return name in {**LIBS, **CHECK_ONLY} and settings(name)["split"] >= 2


# Shapes where a tail-split build (the default, RA_CUDA_TAIL_SPLIT=1: kernel/cuda/plan.h's rule) cuts
# the last round's tiles (13-54 GFLOP each: the fp64 comparison runs on the host): (4,100,65,1000)
# 400 tiles, the last 4 in 4 parts of 2 key blocks, the last part's last block partial, warpgroup 1
# one row; (2,100,130,1000) the same plan, the last head's second query block with one warpgroup idle
# (rows past seqlen_q); (1,200,100,2000) 200 tiles, the last 68 in 3 parts (6, 6, 4 blocks);
# (4,100,65,4000) 8 parts of 4 blocks where the long kernel is not built (the default's rule takes
# the long kernel there: 25 blocks of 160 pad less than 32 of 128); (4,100,65,4096) the same plan in
# the default (whole blocks of 128: the long kernel does not pay, so the tail split runs).
TAIL_SHAPES = [
    Shape(4, 100, 65, 1000),
    Shape(2, 100, 130, 1000),
    Shape(1, 200, 100, 2000),
    Shape(4, 100, 65, 4000),
    Shape(4, 100, 65, 4096),
]
TAIL_EDGE = (Shape(2, 100, 130, 1000), "posinf_last@last")


def plan_rows(s: Shape, plan: cuda_plan.TailPlan) -> np.ndarray:
    """[B, H, Sq] True on the rows of `plan`'s split tiles (the last ones, query block fastest)."""
    mb = -(-s.sq // BLOCK_M)
    tile = np.arange(s.b * s.h * mb).reshape(s.b, s.h, mb)
    rows = np.repeat(tile, BLOCK_M, axis=2)[:, :, : s.sq]
    return rows >= s.b * s.h * mb - plan.tail


def tail_rows(name: str, s: Shape) -> np.ndarray | None:
    """[B, H, Sq] True on the rows that build `name` computes in parts; None where it computes every
    tile whole."""
    plan = path(name, s).tail
    return plan_rows(s, plan) if plan.splits else None


def split_rows(a: str, b: str, s: Shape) -> np.ndarray | None:
    """Where builds `a` and `b` run `s` on the same kernels but their tail plans differ: the rows
    that either computes in parts (no bits owed there); None where the plans are the same (every
    bit owed). Not for other_kernel's pairs."""
    pa, pb = path(a, s).tail, path(b, s).tail
    if pa == pb:
        return None
    rows = [plan_rows(s, p) for p in (pa, pb) if p.splits]
    return rows[0] if len(rows) == 1 else rows[0] | rows[1]


def same_bits_outside_tail(
    a_name: str, b_name: str, s: Shape, layout: str, a: torch.Tensor, b: torch.Tensor
) -> tuple[int, int | None]:
    """(elements that differ where both builds compute whole tiles, elements that differ on the
    rows either splits, or None where their tail plans are the same): the same bits are owed on the
    first, only the ULP contract (checked elsewhere) on the second."""
    d = reference.to_bhsd_bits(a, layout) != reference.to_bhsd_bits(b, layout)  # type: ignore[arg-type]
    tail = split_rows(a_name, b_name, s)
    if tail is None:
        return int(d.sum()), None
    return int(d[~tail].sum()), int(d[tail].sum())


def say(msg: str) -> None:
    print(msg, flush=True)
    LOG.append(msg)


def build_libs() -> dict[str, KernelLibrary]:
    everything = {**LIBS, **CHECK_ONLY}
    with ThreadPoolExecutor(len(everything)) as ex:
        futs = {k: ex.submit(build_kernel, "cuda", extra_flags=flags) for k, flags in everything.items()}
        arts = {k: f.result() for k, f in futs.items()}
    libs = {}
    for name, art in arts.items():
        say(
            f"built {name}: {art.path.name} ({art.build_seconds:.0f} s) regs {art.stats.get('max_registers')}"
        )
        libs[name] = load_library(art.path)
    return libs


# --- checks ------------------------------------------------------------------------------------


EDGE_KINDS = ("neginf_split0", "neginf_all", "posinf_last", "nan_last", "negzero_v")


def edge_inputs(s: Shape, layout: str, kind: str, seed: int) -> tuple[torch.Tensor, ...]:
    """The split's own non-finite cases, on head 0 of batch 0, or with "@last" on the last head of
    the last batch (a tail split's tiles) (built in BHSD, then laid out):
    neginf_split0: every key of the first half scores -Inf (q[..., 0] > 0, k[j, 0] = -Inf), so
    split 0's partials are all 0 with max -Inf; neginf_all: every key -Inf (the row is 0/0 = NaN);
    posinf_last / nan_last: the last key scores +Inf / NaN (a late split poisons the row);
    negzero_v: column 0 of V is -0 at every key (that output column is an exact zero, its sign the
    question)."""
    kind, _, where = kind.partition("@")
    b, h = (-1, -1) if where == "last" else (0, 0)
    q, k, v = make_inputs(s, "bhsd", seed=seed, device="cuda")
    q[b, h, :, 0] = q[b, h, :, 0].abs() + 0.5
    if kind == "neginf_split0":
        k[b, h, : s.sk // 2, 0] = -math.inf
    elif kind == "neginf_all":
        k[b, h, :, 0] = -math.inf
    elif kind == "posinf_last":
        k[b, h, -1, 0] = math.inf
    elif kind == "nan_last":
        k[b, h, -1, 3] = math.nan
    elif kind == "negzero_v":
        v[b, h, :, 0] = -0.0
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    return q, k, v


def zero_sign_only(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements where two bf16 outputs differ and both are zeros (+0 against -0)."""
    x, y = a.view(torch.int16), b.view(torch.int16)
    return int(((x != y) & ((x & 0x7FFF) == 0) & ((y & 0x7FFF) == 0)).sum())


def guarded_forward(
    lib: KernelLibrary, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, mode: str
):
    """Output into the middle of a sentinel-filled buffer: returns (out, every element written,
    nothing outside touched)."""
    n = q.numel()
    pad = 4096
    buf = torch.full((n + 2 * pad,), -12345.0, device="cuda", dtype=torch.bfloat16)
    o = buf[pad : pad + n].view(q.shape)
    lib.forward(q, k, v, layout=layout, rounding=mode, out=o)  # type: ignore[arg-type]
    sentinel = torch.tensor(-12345.0, dtype=torch.bfloat16).view(torch.int16).item()
    bits = buf.view(torch.int16)
    untouched = bool((bits[:pad] == sentinel).all() and (bits[pad + n :] == sentinel).all())
    written = not bool((bits[pad : pad + n] == sentinel).any())
    return o, written, untouched


def check(libs: dict[str, KernelLibrary]) -> dict[str, Any]:
    out: dict[str, Any] = {"ulp": {}, "bits": {}, "determinism": {}, "failures": []}
    fails: list[str] = out["failures"]
    contract = load_contract()
    numeric_libs = ["new", "s4", *(n for n in LIBS if n not in ("new", "s4"))]
    cases: list[tuple[Shape, str]] = [
        (Shape(8, 32, 1, 4096), "realistic"),
        (Shape(4, 32, 16, 8192), "realistic"),
        (Shape(2, 8, 64, 8192), "realistic"),
        (Shape(2, 4, 63, 300), "realistic"),
        (Shape(3, 5, 65, 129), "realistic"),
        (Shape(1, 1, 1, 1), "realistic"),
        (Shape(1, 2, 77, 1), "realistic"),
        (Shape(5, 6, 113, 203), "realistic"),
        (Shape(2, 3, 300, 1500), "realistic"),  # several query blocks, split
        (Shape(1, 4, 1, 5000), "realistic"),  # a partial last key block in the last split
        *(
            (Shape(5, 6, 113, 2030), kind)
            for kind in ("nan_q", "nan_k", "posinf_v", "neginf_k", "extreme_logits")
        ),
        *(
            (Shape(2, 3, 16, 2000), kind)
            for kind in ("neginf_split0", "neginf_all", "posinf_last", "nan_last")
        ),
        # decode: the last split's warpgroup merges in the kernel (seqlen_q <= 4)
        *(
            (Shape(2, 3, 1, 2000), kind)
            for kind in ("neginf_split0", "neginf_all", "posinf_last", "nan_last")
        ),
        (Shape(3, 2, 4, 3000), "realistic"),
        # the long-key kernel (the default's where it pays): its tail masking, non-finite inputs in it
        *((s, "realistic") for s in LONG_CHECK),
        *((LONG_EDGE, kind) for kind in ("nan_q", "nan_k", "posinf_v", "neginf_k", "extreme_logits")),
        *((LONG_EDGE, kind) for kind in ("neginf_split0", "neginf_all", "posinf_last", "nan_last")),
        # the tail split's tiles (TAIL_SHAPES), its non-finite edges on the last head (a split tile)
        *((s, "realistic") for s in TAIL_SHAPES),
        *((Shape(2, 100, 130, 1000), f"{kind}@last") for kind in EDGE_KINDS),
        (Shape(1, 200, 100, 2000), "nan_last@last"),
        # the short-key kernel's masking past seqlen_k inside its 80-key block, non-finite inputs in it
        *((s, "realistic") for s in SHORT_CHECK),
        *SHORT_EDGES,
        (SHORT_EDGE, "extreme_logits"),
    ]
    for s, kind in cases:
        for layout in LAYOUTS:
            seed = zlib.crc32(f"{s.dims()}{kind}{layout}".encode())
            if kind.partition("@")[0] in EDGE_KINDS:
                q, k, v = edge_inputs(s, layout, kind, seed)
            else:
                q, k, v = make_inputs(s, layout, seed=seed, device="cuda", kind=kind)
            ref, mag = reference.reference_attention(q, k, v, layout=layout)  # type: ignore[arg-type]
            for mode in MODES:
                for name in numeric_libs:
                    o, written, untouched = guarded_forward(libs[name], q, k, v, layout, mode)
                    su = nm.scaled_ulp(reference.to_bhsd_bits(o, layout), ref, mag)  # type: ignore[arg-type]
                    worst = float(su.max())
                    key = f"{name}:{s.dims()}:{kind}:{layout}:{mode}"
                    out["ulp"][key] = worst
                    if not worst <= contract.scaled_ulp_limit(mode):
                        fails.append(f"ulp {key} = {worst}")
                    if not written or not untouched:
                        fails.append(
                            f"output coverage {key}: written {written}, outside untouched {untouched}"
                        )
    # The rule's no-split shapes are the old kernel bit for bit; cvt rounding = bf16.h on the merge.
    for s in (Shape(2, 40, 1024, 77), Shape(1, 24, 4097, 4097), Shape(64, 16, 256, 256)):
        for layout in LAYOUTS:
            q, k, v = make_inputs(s, layout, seed=5, device="cuda")
            for mode in MODES:
                a = libs["new"].forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                b = libs["nosplit"].forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                d = int((a.view(torch.int16) != b.view(torch.int16)).sum())
                out["bits"][f"new=nosplit:{s.dims()}:{layout}:{mode}"] = d
                if d:
                    fails.append(f"new != nosplit at {s.dims()} {layout} {mode}: {d} elements")
    for s, kind in (
        (Shape(4, 8, 16, 3000), "realistic"),
        (Shape(3, 7, 1, 2000), "nan_v"),
        (Shape(2, 3, 16, 2000), "neginf_split0"),
    ):
        for layout in LAYOUTS:
            if kind == "neginf_split0":
                q, k, v = edge_inputs(s, layout, kind, 9)
            else:
                q, k, v = make_inputs(s, layout, seed=9, device="cuda", kind=kind)
            for mode in MODES:
                a = libs["s4"].forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                for other in ("cvt0s4", "mk1s4"):
                    b = libs[other].forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                    d = int((a.view(torch.int16) != b.view(torch.int16)).sum())
                    out["bits"][f"s4={other}:{s.dims()}:{kind}:{layout}:{mode}"] = d
                    if d:
                        fails.append(f"s4 != {other} at {s.dims()} {kind} {layout} {mode}: {d} elements")
    check_same_function(libs, out, contract)
    check_tail(libs, out)
    drills = devicekit.check_drills(
        libs["s4"], libs["ulp2s4"], libs["nondets4"], Shape(2, 3, 40, 1000), LAYOUTS, MODES, fails
    )
    say(f"drills checked (on a forced split): {drills} failed")
    check_determinism(libs, out)
    out["graph"] = check_graph(libs, fails)
    say(
        f"checks: {len(out['ulp'])} ULP, {len(out['bits'])} bit-equality "
        f"({len(out.get('bits_exempt', {}))} exempt: other kernels, checked against fp64), "
        f"{len(out['determinism'])} determinism, "
        f"{len(fails)} failed; max scaled ULP "
        + ", ".join(f"{m} {max(v for k, v in out['ulp'].items() if k.endswith(m)):.2f}" for m in MODES)
    )
    for f in fails[:20]:
        say(f"  FAIL {f}")
    return out


def check_same_function(libs: dict[str, KernelLibrary], out: dict[str, Any], contract: Any) -> None:
    """The timed builds against the default, each shape into a poisoned buffer (part of check(); alone
    as the `bits` part of a short call, for schedule changes that owe the default's bits)."""
    fails: list[str] = out["failures"]
    # Every timed build computes the same function as the default, bit for bit (the merge in the
    # kernel or by the second launch, an L2 prefetch): decode splits, short and odd shapes; where it
    # runs other kernels than the default (other_kernel: the long-key kernel in one of them), against
    # fp64; where only the tail plans differ, bit for bit outside the rows either splits.
    for s, kind in (
        (Shape(1, 32, 1, 8192), "realistic"),
        (Shape(2, 8, 1, 32768), "realistic"),
        (Shape(1, 4, 1, 5000), "realistic"),
        (Shape(3, 2, 4, 3000), "realistic"),
        (Shape(2, 3, 1, 2000), "nan_last"),
        (Shape(2, 3, 1, 2000), "neginf_split0"),
        (Shape(16, 8, 128, 128), "realistic"),
        (Shape(8, 4, 256, 256), "realistic"),
        (Shape(2, 40, 1024, 77), "realistic"),
        (Shape(2, 24, 4096, 77), "realistic"),  # one key block, many query blocks (the dynamic order)
        (Shape(3, 5, 65, 129), "realistic"),
        (Shape(256, 32, 128, 128), "realistic"),  # issue 26's memory-bound family (tile orders)
        (Shape(67, 5, 200, 128), "realistic"),  # 670 tiles on 112 CTAs: uneven runs per CTA
        (Shape(4, 16, 256, 2047), "realistic"),  # one key short of the long kernel's threshold
        (Shape(8, 32, 64, 4096), "realistic"),  # long keys, decode rows: not the long kernel
        *((s, "realistic") for s in LONG_CHECK),  # the long kernel: exempt, checked against fp64
        (Shape(2, 16, 1000, 2049), "nan_last"),
        *((s, "realistic") for s in SHORT_CHECK),  # the short kernel owes the 128-key kernel's bits
        *SHORT_EDGES,
    ):
        for layout in LAYOUTS:
            if kind.partition("@")[0] in EDGE_KINDS:
                q, k, v = edge_inputs(s, layout, kind, 13)
            else:
                q, k, v = make_inputs(s, layout, seed=13, device="cuda", kind=kind)
            others = [n for n in LIBS if n != "new" and not forced_split(n)]
            exempt = [n for n in others if other_kernel("new", n, s)]
            ref = reference.reference_attention(q, k, v, layout=layout) if exempt else None  # type: ignore[arg-type]
            for mode in MODES:
                a = libs["new"].forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                for other in others:
                    # into a poisoned buffer: an order that skipped or doubled a tile shows here
                    b, written, untouched = guarded_forward(libs[other], q, k, v, layout, mode)
                    if not written or not untouched:
                        fails.append(f"output coverage {other} {s.dims()} {layout} {mode}")
                    d = int((a.view(torch.int16) != b.view(torch.int16)).sum())
                    key = f"{other}:{s.dims()}:{kind}:{layout}:{mode}"
                    if other in exempt and ref is not None:
                        # other key-block boundaries: the fp64 reference decides, and the bits must
                        # move (the same bits would mean the long kernel was not taken)
                        su = nm.scaled_ulp(reference.to_bhsd_bits(b, layout), *ref)  # type: ignore[arg-type]
                        worst = float(su.max())
                        out["ulp"][f"{other}:{s.dims()}:{kind}@bits:{layout}:{mode}"] = worst
                        out.setdefault("bits_exempt", {})[f"new~{key}"] = d
                        if not worst <= contract.scaled_ulp_limit(mode):
                            fails.append(f"ulp {key} = {worst}")
                        if s in LONG_CHECK and d == 0 and long_differs("new", other, s):
                            fails.append(f"{other} = new at {s.dims()} {layout} {mode}: long path not taken")
                        continue
                    # where only the tail plans differ, the tiles both compute whole owe the same bits
                    d, _ = same_bits_outside_tail("new", other, s, layout, a, b)
                    out["bits"][f"new={key}"] = d
                    if d:
                        zs = zero_sign_only(a, b)
                        fails.append(
                            f"new != {other} at {s.dims()} {kind} {layout} {mode}: {d} elements"
                            + (f" ({zs} of them only in the sign of a zero)" if zs else "")
                        )


def check_tail(libs: dict[str, KernelLibrary], out: dict[str, Any]) -> None:
    """Each build against the default on TAIL_SHAPES (and their edge inputs), every layout and mode,
    where both run the same kernels (other_kernel's pairs, e.g. the default's long kernel at 4000
    keys beside a build without it, are the ULP checks'): the tiles both compute whole are the same
    bits; where their tail plans differ (one splits and the other not, or another plan), the rows
    either splits differ somewhere (a different summation order: the plan the mirror predicts did
    run) and the ULP checks above hold them to the contract; where the plans are the same, every
    bit is the same."""
    fails: list[str] = out["failures"]
    for name in (n for n in libs if n != "new"):
        for s, kind in (*((s, "realistic") for s in TAIL_SHAPES), TAIL_EDGE):
            if other_kernel("new", name, s):
                continue
            for layout in LAYOUTS:
                if kind == "realistic":
                    q, k, v = make_inputs(s, layout, seed=17, device="cuda")
                else:
                    q, k, v = edge_inputs(s, layout, kind, 17)
                for mode in MODES:
                    a = libs["new"].forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                    b = libs[name].forward(q, k, v, layout=layout, rounding=mode)  # type: ignore[arg-type]
                    whole, split = same_bits_outside_tail("new", name, s, layout, a, b)
                    key = f"{name}:{s.dims()}:{kind}:{layout}:{mode}"
                    out["bits"][f"tail-whole:{key}"] = whole
                    if whole:
                        fails.append(f"tail {key}: {whole} elements of whole tiles differ from new")
                    if split is not None:
                        out["bits"][f"tail-split:{key}"] = split
                        if kind == "realistic" and not split:
                            fails.append(f"tail {key}: the split tiles equal new's bits (no split ran?)")
    say(f"tail split checked: {sum(f.startswith('tail ') for f in fails)} failed")


def check_determinism(libs: dict[str, KernelLibrary], out: dict[str, Any]) -> None:
    """Six launches per case with unrelated GPU work between: one hash each."""
    junk = torch.randn(4096, 4096, device="cuda")
    timed = [n for n in LIBS if n not in ("new", "s4") and not forced_split(n)]  # t1 = the dynamic order
    for name in ("new", "s4", *timed, *(n for n in ("s16", "mk1s4") if n in libs and n not in timed)):
        for s in (
            Shape(8, 32, 1, 4096),
            Shape(4, 32, 64, 8192),
            Shape(3, 5, 65, 2000),
            Shape(1, 32, 1, 8192),
            Shape(256, 32, 128, 128),  # one key block a tile: where the tile counter schedules
            Shape(67, 5, 200, 128),
            LONG_EDGE,  # the long-key kernel (the default's, and every long build's)
            Shape(3, 16, 1000, 2049),
            *TAIL_SHAPES[:2],  # the tail split's merge by the last part, whichever CTA that is
            TAIL_SHAPES[4],  # the default's tail split at long keys
            SHORT_CHECK[3],  # the short-key kernel's 3 Q stages
        ):
            for layout in LAYOUTS:
                q, k, v = make_inputs(s, layout, seed=2, device="cuda")
                hashes = set()
                for i in range(6):
                    junk = junk @ junk.T * 1e-4 if i % 2 else junk
                    o = libs[name].forward(q, k, v, layout=layout, rounding="rtne")
                    hashes.add(hashlib.sha256(o.view(torch.int16).cpu().numpy().tobytes()).hexdigest())
                key = f"{name}:{s.dims()}:{layout}"
                out["determinism"][key] = len(hashes)
                if len(hashes) != 1:
                    out["failures"].append(f"nondeterministic {key}: {len(hashes)} hashes")


def check_graph(libs: dict[str, KernelLibrary], fails: list[str]) -> dict[str, Any]:
    """A split launch captured in a CUDA graph (its workspace then belongs to the capture stream,
    allocated during the capture), replayed on new inputs, equals eager."""
    from regress.kernel import attention

    res: dict[str, Any] = {}
    fns = {
        "op": lambda q, k, v: attention(q, k, v, layout="bhsd", rounding="rtne"),
        "s4": lambda q, k, v: libs["s4"].forward(q, k, v, layout="bhsd", rounding="rtne"),
    }
    for name in ("mk1s4", *(n for n in LIBS if n != "new" and not forced_split(n))):
        if name in libs:
            fns[name] = lambda q, k, v, lib=libs[name]: lib.forward(q, k, v, layout="bhsd", rounding="rtne")
    # (67,5,200,128): the tile counter's reset between replays (one key block a tile); LONG_EDGE:
    # the long-key kernel's tensor maps, encoded at capture; (1,200,100,2000): the tail split's
    # counters, reset by the last part, across replays (the default, "op", takes both)
    shapes = (Shape(8, 32, 1, 4096), Shape(4, 32, 64, 8192), Shape(1, 32, 1, 8192), Shape(67, 5, 200, 128))
    for s in (*shapes, LONG_EDGE, Shape(1, 200, 100, 2000), SHORT_CHECK[3]):
        for name, f in fns.items():
            q, k, v = make_inputs(s, "bhsd", seed=3, device="cuda")
            first = f(q, k, v)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                captured = f(q, k, v)
            q2, k2, v2 = make_inputs(s, "bhsd", seed=4, device="cuda")
            q.copy_(q2), k.copy_(k2), v.copy_(v2)
            g.replay()
            torch.cuda.synchronize()
            want = f(q, k, v)
            ok = bool(torch.equal(captured.view(torch.int16), want.view(torch.int16)))
            moved = not torch.equal(captured.view(torch.int16), first.view(torch.int16))
            res[f"{name}:{s.dims()}"] = {"replay_equal": ok, "differs_from_first": moved}
            if not ok or not moved:
                fails.append(f"graph {name} {s.dims()}: replay equal {ok}, differs from first inputs {moved}")
    say(f"graph: {res}")
    return res


# --- timing ------------------------------------------------------------------------------------


def sweep(libs: dict[str, KernelLibrary]) -> list[dict[str, Any]]:
    bl = {b.name: b for b in available_baselines("cuda")}
    rows = []
    for s in [*TARGETS, *EDGES, *SQUARES, *REGULAR]:
        for layout in LAYOUTS if s not in EDGES else ("bhsd",):
            fns: dict[str, Any] = {}
            for lname, lib in libs.items():
                if lname not in LIBS:
                    continue
                if forced_split(lname) and (s in SQUARES or s in REGULAR or layout == "bshd"):
                    continue  # the forced splits are timed where the rule decides, BHSD only
                for mode in TIME_MODES if not forced_split(lname) else ("rtne",):
                    fns[f"{lname}:{mode}"] = lambda t, lib=lib, mode=mode, layout=layout: lib.forward(
                        *t, layout=layout, rounding=mode
                    )
            for bname, b in bl.items():
                fns[bname] = lambda t, b=b, layout=layout: b(*t, layout=layout, rounding="rtne")
            ms = h200_op.time_shape(s, layout, fns, budget_s=0.5 if s.flops < 1e12 else 1.0)
            row = {"shape": s.dims(), "layout": layout, "ms": ms}
            rows.append(row)
            cud = ms.get("sdpa_cudnn")
            say(
                f"{s.dims():>20} {layout} "
                + " ".join(
                    f"{k}={v * 1e3:.1f}us" + (f"({cud / v:.3f})" if cud else "") for k, v in ms.items()
                )
            )
    return rows


def ncu_target() -> None:
    """H200_NCU_SHAPES="1,32,1,8192;256,32,128,128" replaces the two decode shapes."""
    count = int(os.environ.get("H200_NCU_LIBS", "3"))  # the first N timed builds
    libs = {n: load_library(build_kernel("cuda", extra_flags=f).path) for n, f in list(LIBS.items())[:count]}
    cudnn = {b.name: b for b in available_baselines("cuda")}.get("sdpa_cudnn")
    shapes = h200_op.shapes_env("H200_NCU_SHAPES", [Shape(8, 32, 1, 4096), Shape(4, 32, 64, 8192)])
    for s in shapes:
        q, k, v = make_inputs(s, "bhsd", seed=0, device="cuda")
        for name, lib in libs.items():
            print(f"ncu launch: {name} {s.dims()}", flush=True)
            lib.forward(q, k, v, layout="bhsd", rounding="rtne")
            torch.cuda.synchronize()
        if cudnn is not None:
            print(f"ncu launch: sdpa_cudnn {s.dims()}", flush=True)
            cudnn(q, k, v, layout="bhsd", rounding="rtne")
            torch.cuda.synchronize()


def table(res: dict[str, Any]) -> str:
    lines = ["", "== ours / cuDNN (TFLOP/s ratio = cuDNN time / ours); us = our time =="]
    for row in res.get("sweep", []):
        ms = row["ms"]
        cud = ms.get("sdpa_cudnn")
        if not cud:
            continue
        cells = [f"{k}={cud / v:.3f}" for k, v in ms.items() if k not in ("sdpa_cudnn", "sdpa_flash")]
        lines.append(f"{row['shape']:>20} {row['layout']} cudnn={cud * 1e3:.1f}us " + " ".join(cells))
    lines.append(
        "== per-call us: eager host / eager wall / graph 1-call / graph per call (20 in one graph) =="
    )
    for r in res.get("overhead", []):
        if "error" in r:
            lines.append(f"{r['shape']:>14} {r['fn']:36} error {r['error'][:80]}")
        else:
            lines.append(
                f"{r['shape']:>14} {r['fn']:36} {r['eager_host_us']:7.1f} {r['eager_wall_us']:7.1f} "
                f"{r['graph1_us']:7.1f} {r['graph20_per_call_us']:7.1f}"
            )
    c = res.get("check", {})
    lines.append(f"checks failed: {len(c.get('failures', []))}: {c.get('failures', [])[:5]}")
    return "\n".join(lines)


def summary(res: dict[str, Any]) -> str:
    """Per shape and layout, in first-timed order: each build's ratio to cuDNN per mode (the range
    over the shape's repeats in the list), and the last build's time ratio to the first's."""
    groups: dict[tuple[str, str], list[dict[str, float]]] = {}
    for row in res.get("sweep", []):
        if row["ms"].get("sdpa_cudnn"):
            groups.setdefault((row["shape"], row["layout"]), []).append(row["ms"])
    names = list(
        dict.fromkeys(
            k.split(":")[0] for ms in groups.get(next(iter(groups), ("", "")), []) for k in ms if ":" in k
        )
    )
    first, last = (names[0], names[-1]) if names else ("", "")
    lines = [
        f"== ours / cuDNN per mode ({' / '.join(MODES)}), range over repeats; x: {first} / {last} time =="
    ]
    for (shape, layout), rows in groups.items():
        cells = []
        for n in names:
            per = []
            for m in MODES:
                r = [ms["sdpa_cudnn"] / ms[f"{n}:{m}"] for ms in rows if f"{n}:{m}" in ms] or [math.nan]
                per.append(
                    f"{min(r):.3f}"
                    if len(r) == 1 or f"{min(r):.3f}" == f"{max(r):.3f}"
                    else f"{min(r):.3f}-{max(r):.3f}"
                )
            cells.append(f"{n} " + " / ".join(per))
        if len(names) > 1:
            rel = [
                ms[f"{names[0]}:{m}"] / ms[f"{names[-1]}:{m}"]
                for ms in rows
                for m in MODES
                if f"{names[-1]}:{m}" in ms
            ]
            cells.append(f"x{min(rel):.3f}-{max(rel):.3f}")
        lines.append(
            f"{shape:>16} {layout} x{len(rows)} cudnn {min(ms['sdpa_cudnn'] for ms in rows) * 1e3:7.1f}us | "
            + " | ".join(cells)
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["all", "build", "ncu-target", "summary"])
    ap.add_argument("--out", type=Path, default=Path("/tmp/h200_split"))
    ap.add_argument("--skip", default="")
    a = ap.parse_args()
    if a.what == "summary":  # the short table of a finished run's results.json
        print(summary(json.loads((a.out / "results.json").read_text())))
        return 0
    if a.what == "ncu-target":
        ncu_target()
        return 0
    if a.what == "build":  # fill the build cache (beside another job), load nothing
        flags = {**LIBS, **CHECK_ONLY}.values()
        with ThreadPoolExecutor(len(flags)) as ex:
            for f in [ex.submit(build_kernel, "cuda", extra_flags=x) for x in flags]:
                f.result()
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    libs = build_libs()
    h200_op.LIBS = {n: f for n, f in LIBS.items() if n != "s16"}  # overhead() times these
    h200_op.OVERHEAD = OVERHEAD

    def bits_only() -> dict[str, Any]:
        out: dict[str, Any] = {"ulp": {}, "bits": {}, "failures": []}
        check_same_function(libs, out, load_contract())
        say(f"bits: {len(out['bits'])} bit-equality, {len(out['failures'])} failed {out['failures'][:5]}")
        return out

    for part, fn in (
        ("check", lambda: check(libs)),
        ("bits", bits_only),
        ("sweep", lambda: sweep(libs)),
        ("overhead", lambda: h200_op.overhead(libs)),
    ):
        if part in a.skip.split(",") or (part == "bits" and "check" not in a.skip.split(",")):
            continue  # the full check holds the bit comparison
        t0 = time.perf_counter()
        try:
            res[part] = fn()
        except Exception:
            say(f"{part} failed:\n{traceback.format_exc()}")
        say(f"[{part}: {time.perf_counter() - t0:.0f} s]")
        res["log"] = LOG
        (a.out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (a.out / "table.txt").write_text(table(res))
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
