#!/usr/bin/env python3
"""h200_kernel.py — dev harness for the CUDA (sm_90a) attention backend: build, check, time, sanitize.

Light on purpose (torch + ctypes, and from the package only the stdlib-only `regress.build` and
the pure `regress.metrics`): the device machine has torch but not the project's database stack.
One invocation does what one device call should:

    PYTHONUNBUFFERED=1 python3 benchmarks/h200_kernel.py --lib main=build/cuda/libregress_attn_cuda.so \
        --lib mma=build/cuda/libforce_mma_sync.so --check --bench --sanitize --out "$OUT"

  --build        compile the libraries first, through regress.build (the one nvcc command)
  --check        correctness on fresh random inputs vs an fp64 reference (scaled ULP gate), both
                 layouts, odd shapes, NaN/Inf cases, determinism, error codes, no out-of-range writes
  --drills       the fire-drill builds (RA_INJECT_*) behave as inject.h says
  --bench        CUDA-event timing against SDPA flash and cuDNN, interleaved, input rotation
  --sanitize     compute-sanitizer memcheck + racecheck on a small and an odd shape (C driver)

Scaled ULP: |o - ref| / ulp_bf16(P.|V|), ulp_bf16(x) = 2^(floor(log2 x) - 7); the gate per mode is
regress/contract.toml's (read through regress.metrics, the one loader). Non-finite outputs must
match the reference bit for bit (NaN canonical 0x7FFF).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from regress.metrics import geomean, load_contract, percentile  # noqa: E402  (pure: numpy and the packaged toml only)

DEV = "cuda"  # "cpu" only for --dry-run (a torch stand-in for the library, to debug this script)
_TENSORS: dict[int, torch.Tensor] = {}  # data_ptr -> tensor, for the dry-run stand-in
MODES = {"rtne": 0, "rtna": 1, "rtz": 2}
GATE = load_contract().scaled_ulp_max
RA_OK, RA_ERR_NULL, RA_ERR_HEAD_DIM, RA_ERR_SHAPE, RA_ERR_STRIDE, RA_ERR_ROUNDING = 0, 1, 2, 3, 4, 5
BUILD_FLAGS = {
    "main": "",
    "mma": "-DRA_CUDA_FORCE_MMA_SYNC=1",
    "ulp2": "-DRA_INJECT_ULP=2",
    "nondet": "-DRA_INJECT_NONDET=1",
    "slow50": "-DRA_INJECT_SLOWDOWN_PCT=50",
    "pp": "-DRA_CUDA_PINGPONG=1",
    "auto": "-DRA_CUDA_PINGPONG=-1",
    "noepi": "-DRA_CUDA_EPILOGUE=0",
}
TIMED = ("main", "mma", "pp", "auto", "noepi")
BENCH_SHAPES = [
    (1, 16, 16384, 16384),
    (2, 16, 8192, 8192),
    (4, 16, 4096, 4096),
    (8, 16, 2048, 2048),
    (16, 16, 1024, 1024),
    (32, 16, 512, 512),
    (2, 40, 1024, 77),
    (2, 24, 8192, 8192),
    (1, 32, 16384, 16384),
]


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def log(*a):
    print(*a, flush=True)


# --------------------------------------------------------------------------------------------- ABI
class Params(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("batch", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("seqlen_q", ctypes.c_int64),
        ("seqlen_k", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("q_stride", ctypes.c_int64 * 4),
        ("k_stride", ctypes.c_int64 * 4),
        ("v_stride", ctypes.c_int64 * 4),
        ("o_stride", ctypes.c_int64 * 4),
        ("scale", ctypes.c_float),
        ("rounding", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


def load_lib(path):
    lib = ctypes.CDLL(str(path))
    lib.ra_attention_fwd.argtypes = [ctypes.POINTER(Params), ctypes.c_char_p, ctypes.c_size_t]
    lib.ra_attention_fwd.restype = ctypes.c_int
    lib.ra_build_info.restype = ctypes.c_char_p
    lib.ra_backend_name.restype = ctypes.c_char_p
    return lib


def make_params(q, k, v, o, mode, scale=0.0, stream=None, head_dim=128):
    """q, k, v, o: logical [B, H, S, D] views (any strides, dim stride 1)."""
    p = Params()
    if DEV == "cpu":
        for t in (q, k, v, o):
            _TENSORS[t.data_ptr()] = t
    p.abi_version = 1
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    p.batch, p.heads, p.seqlen_q, p.head_dim = q.shape[0], q.shape[1], q.shape[2], head_dim
    p.seqlen_k = k.shape[2]
    for name, t in (("q_stride", q), ("k_stride", k), ("v_stride", v), ("o_stride", o)):
        getattr(p, name)[:] = list(t.stride())
    p.scale = scale
    p.rounding = mode
    if DEV == "cuda":
        s = stream if stream is not None else torch.cuda.current_stream()
        p.stream = s.cuda_stream
    return p


class FakeLib:
    """--dry-run: the attention in fp32 torch on the CPU, written through the same ABI fields."""

    def ra_backend_name(self):
        return b"fake"

    def ra_build_info(self):
        return b"{}"

    def ra_attention_fwd(self, pp, err, n):
        p = pp._obj if hasattr(pp, "_obj") else pp
        if p.head_dim != 128:
            return RA_ERR_HEAD_DIM
        if not p.q:
            return RA_ERR_NULL
        if p.rounding not in (0, 1, 2):
            return RA_ERR_ROUNDING
        if p.k_stride[3] != 1:
            return RA_ERR_STRIDE
        if p.seqlen_k < 1:
            return RA_ERR_SHAPE
        q, k, v, o = (_TENSORS[x] for x in (p.q, p.k, p.v, p.o))
        scale = p.scale if p.scale > 0 else 1 / math.sqrt(128)
        s = q.float() @ k.float().transpose(-1, -2) * scale
        r = torch.softmax(s, -1) @ v.float()
        u = r.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        u = u + 0x7FFF + ((u >> 16) & 1) if p.rounding == 0 else (u + 0x8000 if p.rounding == 1 else u)
        b = ((u >> 16) & 0xFFFF).to(torch.int32)
        b = torch.where(torch.isnan(r), torch.full_like(b, 0x7FFF), b)
        o.view(torch.int16).copy_(b.to(torch.int16))
        return 0


def call(lib, p):
    if isinstance(lib, FakeLib):
        return lib.ra_attention_fwd(p, None, 0), "fake"
    err = ctypes.create_string_buffer(512)
    rc = lib.ra_attention_fwd(ctypes.byref(p), err, 512)
    return rc, err.value.decode()


# --------------------------------------------------------------------------------------------- data
def alloc_layout(B, H, S, layout, dtype=torch.bfloat16, fill=None, gen=None):
    """A logical [B, H, S, D] view stored as BHSD or BSHD."""
    shape = (B, H, S, 128) if layout == "bhsd" else (B, S, H, 128)
    if fill is None:
        t = torch.randn(shape, generator=gen, device=DEV, dtype=torch.float32).to(dtype)
    else:
        t = torch.full(shape, fill, device=DEV, dtype=dtype)
    return t if layout == "bhsd" else t.permute(0, 2, 1, 3)


def make_qkv(B, H, Sq, Sk, layout, gen):
    q = alloc_layout(B, H, Sq, layout, gen=gen)
    v = alloc_layout(B, H, Sk, layout, gen=gen)
    # "realistic" keys: N(0,1) directions with log-normal row norms (sigma 0.6), as in ANCHORS.md
    k32 = torch.randn((B, H, Sk, 128), generator=gen, device=DEV)
    k32 = k32 * torch.exp(0.6 * torch.randn((B, H, Sk, 1), generator=gen, device=DEV))
    k = alloc_layout(B, H, Sk, layout, fill=0.0)
    k.copy_(k32.to(torch.bfloat16))
    return q, k, v


class OutBuf:
    """Output in a guarded, poisoned flat buffer: catches unwritten elements and stray writes."""

    GUARD = 4096
    POISON = -1  # 0xFFFF: a NaN pattern the kernel never writes (its NaN is 0x7FFF)

    def __init__(self, B, H, S, layout):
        n = B * H * S * 128
        self.flat = torch.full((n + 2 * self.GUARD,), self.POISON, dtype=torch.int16, device=DEV)
        inner = self.flat[self.GUARD : self.GUARD + n]
        shape = (B, H, S, 128) if layout == "bhsd" else (B, S, H, 128)
        t = inner.view(torch.bfloat16).view(shape)
        self.o = t if layout == "bhsd" else t.permute(0, 2, 1, 3)

    def poison(self):
        self.flat.fill_(self.POISON)

    def problems(self):
        g = self.GUARD
        bad = []
        if not (bool((self.flat[:g] == self.POISON).all()) and bool((self.flat[-g:] == self.POISON).all())):
            bad.append("write outside the output tensor")
        if bool((self.flat[g:-g] == self.POISON).any()):
            bad.append(f"{int((self.flat[g:-g] == self.POISON).sum())} output elements not written")
        return bad


def reference(q, k, v, scale, rows=None):
    """Naive fp64 softmax(QK^T * scale) @ V, and P @ |V| (the magnitude of the summed terms)."""
    qd = q.double() if rows is None else q[:, :, rows].double()
    kd, vd = k.double(), v.double()
    refs, mags = [], []
    for h in range(q.shape[1]):  # per head: bounds the fp64 score matrix
        s = qd[:, h] @ kd[:, h].transpose(-1, -2) * scale
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        p = e / e.sum(-1, keepdim=True)
        refs.append(p @ vd[:, h])
        mags.append(p @ vd[:, h].abs())
        del s, e, p
    return torch.stack(refs, 1), torch.stack(mags, 1)


def round_bf16_bits(x64, mode):
    """fp64 -> fp32 -> bf16 bits with the kernel's rounding (for the non-finite comparison)."""
    f = x64.float()
    u = f.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    if mode == 0:
        u = u + 0x7FFF + ((u >> 16) & 1)
    elif mode == 1:
        u = u + 0x8000
    b = ((u >> 16) & 0xFFFF).to(torch.int32)
    b = torch.where(torch.isnan(f), torch.full_like(b, 0x7FFF), b)
    return b


def compare(o, ref, mag, mode_name):
    """Returns dict: max/p99.99 scaled ULP over finite refs, non-finite mismatches."""
    mode = MODES[mode_name]
    ob = o.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    rb = round_bf16_bits(ref, mode)
    of = o.double()
    ref_fin = torch.isfinite(ref)
    # non-finite: bit-identical (NaN must be the canonical 0x7FFF)
    nf = ~ref_fin
    nonfinite_bad = int(((ob != rb) & nf).sum())
    # NaN outputs anywhere must be canonical
    noncanon = int((torch.isnan(of) & (ob != 0x7FFF)).sum())
    # finite refs: the output must be finite and within the gate
    fin_bad = int((ref_fin & ~torch.isfinite(of)).sum())
    err = (of - ref).abs()
    ulp = torch.exp2(torch.floor(torch.log2(mag)) - 7)
    su = torch.where(mag > 0, err / ulp, torch.where(err == 0, 0.0, math.inf))
    su = torch.where(ref_fin & torch.isfinite(of), su, torch.zeros_like(su))
    flat = su.flatten()
    mx = float(flat.max()) if flat.numel() else 0.0
    p9999 = percentile(flat.float()[: 2**24].cpu().numpy(), 99.99) if flat.numel() > 1 else mx
    ok = nonfinite_bad == 0 and noncanon == 0 and fin_bad == 0 and mx <= GATE[mode_name]
    return {
        "ok": ok,
        "max_su": mx,
        "p9999_su": p9999,
        "nonfinite_bad": nonfinite_bad,
        "noncanonical_nan": noncanon,
        "finite_ref_nonfinite_out": fin_bad,
        "n_nan": int(torch.isnan(ref).sum()),
        "n_inf": int(torch.isinf(ref).sum()),
    }


# --------------------------------------------------------------------------------------------- check
def run_case(lib, q, k, v, layout, mode_name, scale=0.0, rows=None, ref=None, stream=None):
    B, H, Sq, _ = q.shape
    ob = OutBuf(B, H, Sq, layout)
    p = make_params(q, k, v, ob.o, MODES[mode_name], scale, stream)
    rc, msg = call(lib, p)
    sync()
    if rc != RA_OK:
        return {"ok": False, "rc": rc, "err": msg}
    problems = ob.problems()
    eff_scale = scale if scale > 0 else 1 / math.sqrt(128)
    if ref is None:
        ref = reference(q, k, v, eff_scale, rows)
    o = ob.o if rows is None else ob.o[:, :, rows]
    res = compare(o, ref[0], ref[1], mode_name)
    if problems:
        res["ok"] = False
        res["problems"] = problems
    return res


def check(lib, name, results, quick=False):
    gen = torch.Generator(device=DEV)
    gen.manual_seed(int(time.time() * 1000) % (2**31))  # fresh inputs every call
    shapes = [
        (1, 1, 1, 1),
        (5, 6, 113, 203),
        (2, 3, 1023, 1024),
        (1, 2, 77, 1),
        (2, 8, 128, 128),
        (1, 4, 1000, 2000),
        (2, 40, 1024, 77),
        (1, 2, 300, 4100),
        (3, 2, 129, 257),
    ]
    if quick:
        shapes = shapes[:4]
    fails = 0
    for shape in shapes:
        for layout in ("bhsd", "bshd"):
            q, k, v = make_qkv(*shape, layout, gen)
            ref = reference(q, k, v, 1 / math.sqrt(128))
            for mode_name in MODES:
                r = run_case(lib, q, k, v, layout, mode_name, ref=ref)
                results.append(
                    {"lib": name, "case": "random", "shape": shape, "layout": layout, "mode": mode_name, **r}
                )
                fails += not r["ok"]
                if not r["ok"]:
                    log(f"  FAIL {name} {shape} {layout} {mode_name}: {r}")
            del q, k, v, ref
        log(
            f"  {name} {shape}: worst max_su "
            f"{max(x.get('max_su', 99) for x in results if x['lib'] == name and x['shape'] == shape):.3f}"
        )
    # an explicit scale
    q, k, v = make_qkv(2, 3, 300, 333, "bhsd", gen)
    r = run_case(lib, q, k, v, "bhsd", "rtne", scale=0.3)
    results.append({"lib": name, "case": "scale0.3", "shape": (2, 3, 300, 333), "mode": "rtne", **r})
    fails += not r["ok"]
    # a side stream
    st = torch.cuda.Stream() if DEV == "cuda" else None
    if st is not None:
        with torch.cuda.stream(st):
            r = run_case(lib, q, k, v, "bhsd", "rtne", stream=st)
    results.append({"lib": name, "case": "side_stream", "shape": (2, 3, 300, 333), "mode": "rtne", **r})
    fails += not r["ok"]
    # K/V broadcast over batch (batch stride 0): TMA may refuse it -> the mma.sync path must serve it
    kb = k[:1].expand(2, -1, -1, -1)
    vb = v[:1].expand(2, -1, -1, -1)
    r = run_case(lib, q, kb, vb, "bhsd", "rtne")
    results.append({"lib": name, "case": "kv_batch_stride0", "shape": (2, 3, 300, 333), "mode": "rtne", **r})
    fails += not r["ok"]
    # a big benchmark shape, a subset of rows against the exact reference
    if not quick:
        for shape in [(1, 16, 16384, 16384), (2, 40, 1024, 77)]:
            q, k, v = make_qkv(*shape, "bhsd", gen)
            rows = torch.cat([torch.arange(0, 192), torch.arange(shape[2] - 130, shape[2])]).cuda()
            ref = reference(q, k, v, 1 / math.sqrt(128), rows)
            for mode_name in MODES:
                r = run_case(lib, q, k, v, "bhsd", mode_name, rows=rows, ref=ref)
                results.append(
                    {"lib": name, "case": "big_rows_subset", "shape": shape, "mode": mode_name, **r}
                )
                fails += not r["ok"]
                if not r["ok"]:
                    log(f"  FAIL {name} big {shape} {mode_name}: {r}")
            del q, k, v, ref
    fails += check_nonfinite(lib, name, results, gen)
    fails += check_determinism(lib, name, results, gen)
    fails += check_errors(lib, name, results)
    return fails


def nonfinite_cases():
    """(name, mutate(q, k, v)) on a [2, 3, 300, 333] problem."""
    inf, nan = float("inf"), float("nan")

    def q_nan(q, k, v):
        q[0, 0, 5, 7] = nan

    def k_nan(q, k, v):
        k[0, 1, 200, 3] = nan

    def v_inf(q, k, v):
        v[1, 2, 50, 9] = inf

    def v_pm_inf(q, k, v):
        v[1, 0, 10, 4] = inf
        v[1, 0, 20, 4] = -inf

    def k_neg_inf_first_tiles(q, k, v):  # keys 0..199 score -Inf, the rest finite: rows stay finite
        q[0, 0, :, 0] = q[0, 0, :, 0].abs() + 0.5
        k[0, 0, :200, 0] = -inf

    def all_neg_inf_rows(q, k, v):  # every score of (1,1) is -Inf (or NaN): rows NaN
        q[1, 1, :, 0] = q[1, 1, :, 0].abs() + 0.5
        k[1, 1, :, 0] = -inf

    def pos_inf_score(q, k, v):  # a +Inf score: exp(inf - inf) = NaN rows
        q[0, 2, :, 0] = q[0, 2, :, 0].abs() + 0.5
        k[0, 2, 150, 0] = inf

    def q_inf(q, k, v):
        q[1, 2, 17, 100] = inf

    def extreme_logits(q, k, v):
        q[1, 2, 3:40] *= 60.0
        k[0, 0, 100:110] *= 40.0

    def v_inf_tail(q, k, v):  # Inf in the last (partial) key block
        v[0, 1, 332, 127] = -inf

    return [
        q_nan,
        k_nan,
        v_inf,
        v_pm_inf,
        k_neg_inf_first_tiles,
        all_neg_inf_rows,
        pos_inf_score,
        q_inf,
        extreme_logits,
        v_inf_tail,
    ]


def check_nonfinite(lib, name, results, gen):
    fails = 0
    for fn in nonfinite_cases():
        for layout in ("bhsd", "bshd"):
            q, k, v = make_qkv(2, 3, 300, 333, layout, gen)
            fn(q, k, v)
            ref = reference(q, k, v, 1 / math.sqrt(128))
            for mode_name in MODES:
                r = run_case(lib, q, k, v, layout, mode_name, ref=ref)
                results.append(
                    {
                        "lib": name,
                        "case": "nonfinite:" + fn.__name__,
                        "layout": layout,
                        "mode": mode_name,
                        **r,
                    }
                )
                if not r["ok"]:
                    fails += 1
                    log(f"  FAIL {name} nonfinite {fn.__name__} {layout} {mode_name}: {r}")
    log(f"  {name} nonfinite cases: {fails} failures")
    return fails


def check_determinism(lib, name, results, gen, launches=6):
    fails = 0
    for shape, layout in [
        ((2, 8, 1000, 1000), "bshd"),
        ((4, 16, 2048, 2048), "bhsd"),
        ((3, 5, 77, 4100), "bhsd"),
    ]:
        q, k, v = make_qkv(*shape, layout, gen)
        outs = []
        for i in range(launches):
            ob = OutBuf(shape[0], shape[1], shape[2], layout)
            # interleave unrelated work so launches see different machine states
            if i % 2:
                torch.randn(2048, 2048, device=DEV) @ torch.randn(2048, 2048, device=DEV)
            call(lib, make_params(q, k, v, ob.o, 0))
            sync()
            outs.append(ob.flat.clone())
        diff = [int((outs[0] != x).sum()) for x in outs[1:]]
        ok = all(d == 0 for d in diff)
        fails += not ok
        results.append(
            {
                "lib": name,
                "case": "determinism",
                "shape": shape,
                "layout": layout,
                "ok": ok,
                "differing_elements": diff,
            }
        )
        if not ok:
            log(f"  FAIL {name} determinism {shape}: {diff}")
    return fails


def check_errors(lib, name, results):
    q, k, v = make_qkv(1, 2, 64, 64, "bhsd", torch.Generator(device=DEV))
    o = torch.empty_like(q)
    fails = 0
    cases = []
    p = make_params(q, k, v, o, 0, head_dim=64)
    cases.append(("head_dim", p, RA_ERR_HEAD_DIM))
    p = make_params(q, k, v, o, 0)
    p.q = None
    cases.append(("null q", p, RA_ERR_NULL))
    p = make_params(q, k, v, o, 3)
    cases.append(("rounding 3", p, RA_ERR_ROUNDING))
    p = make_params(q, k, v, o, 0)
    p.k_stride[3] = 2
    cases.append(("dim stride", p, RA_ERR_STRIDE))
    p = make_params(q, k, v, o, 0)
    p.seqlen_k = 0
    cases.append(("seqlen_k 0", p, RA_ERR_SHAPE))
    for label, p, want in cases:
        rc, msg = call(lib, p)
        ok = rc == want and bool(msg)
        fails += not ok
        results.append({"lib": name, "case": "error:" + label, "ok": ok, "rc": rc, "err": msg})
        if not ok:
            log(f"  FAIL {name} error case {label}: rc {rc} want {want} ({msg})")
    return fails


# --------------------------------------------------------------------------------------------- drills
def drills(libs, results):
    gen = torch.Generator(device=DEV)
    gen.manual_seed(7)
    if "main" not in libs:
        return 0
    clean = libs["main"]
    q, k, v = make_qkv(2, 4, 700, 900, "bhsd", gen)

    def run(lib):
        ob = OutBuf(2, 4, 700, "bhsd")
        rc, msg = call(lib, make_params(q, k, v, ob.o, 0))
        sync()
        assert rc == 0, msg
        return ob.o.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF

    base = run(clean)
    fails = 0
    if "ulp2" in libs:
        x = run(libs["ulp2"])
        mag_b, mag_x = base & 0x7FFF, x & 0x7FFF
        movable = (mag_b != 0) & (mag_b < 0x7F80)
        ok = bool(((mag_x - mag_b)[movable] == 2).all()) and bool((x[~movable] == base[~movable]).all())
        results.append({"case": "drill:ulp2", "ok": ok})
        fails += not ok
    if "nondet" in libs:
        a, b = run(libs["nondet"]), run(libs["nondet"])
        d = int((a != b).sum())
        ok = d == 1 and int(((a ^ b) & 0xFFFF).max()) == 1
        results.append({"case": "drill:nondet", "ok": ok, "differing": d})
        fails += not ok
    if "slow50" in libs:
        x = run(libs["slow50"])
        same = bool((x == base).all())
        qb, kb, vb = make_qkv(4, 16, 4096, 4096, "bhsd", gen)
        ob = torch.empty_like(qb)
        t = {}
        for nm in ("main", "slow50"):
            p = make_params(qb, kb, vb, ob, 0)
            ts = []
            for _ in range(12):
                s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s0.record()
                call(libs[nm], p)
                s1.record()
                sync()
                ts.append(s0.elapsed_time(s1))
            t[nm] = statistics.median(ts[2:])
        ratio = t["slow50"] / t["main"]
        ok = same and 1.35 < ratio < 1.7
        results.append({"case": "drill:slow50", "ok": ok, "outputs_same": same, "time_ratio": ratio})
        fails += not ok
    log(f"drills: {[(r['case'], r['ok']) for r in results if r['case'].startswith('drill')]}")
    return fails


# --------------------------------------------------------------------------------------------- bench
def ours_fn(lib, ps):
    """One call of our library on input set i (ctypes params prebuilt: no Python work per call)."""

    def f(i):
        return lib.ra_attention_fwd(ctypes.byref(ps[i % len(ps)]), None, 0)

    return f


def sdpa_fn(backend, sets):
    from torch.nn.attention import sdpa_kernel

    def f(i):
        q, k, v, _ = sets[i % len(sets)]
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    return f


def shape_fns(libs, sets):
    """name -> f(i) for every library x mode, then SDPA flash and cuDNN, on the same inputs."""
    from torch.nn.attention import SDPBackend

    fns = {}
    for lname, lib in libs.items():
        for mname, mode in MODES.items():
            fns[f"{lname}:{mname}"] = ours_fn(lib, [make_params(q, k, v, o, mode) for (q, k, v, o) in sets])
    fns["flash"] = sdpa_fn(SDPBackend.FLASH_ATTENTION, sets)
    fns["cudnn"] = sdpa_fn(SDPBackend.CUDNN_ATTENTION, sets)
    return fns


def bench(libs, out_dir, iters=50, warmup=5):
    rows = []
    l2 = 60 * 2**20
    for B, H, Sq, Sk in BENCH_SHAPES:
        per_set = (B * H * (2 * Sq + 2 * Sk) * 128) * 2
        nsets = max(2, min(6, math.ceil(3 * l2 / per_set)))
        gen = torch.Generator(device=DEV)
        gen.manual_seed(42)
        sets = []
        for _ in range(nsets):
            q, k, v = make_qkv(B, H, Sq, Sk, "bhsd", gen)
            sets.append(
                (
                    q.contiguous(),
                    k.contiguous(),
                    v.contiguous(),
                    torch.empty(B, H, Sq, 128, device=DEV, dtype=torch.bfloat16),
                )
            )
        fns = shape_fns(libs, sets)
        for _ in range(warmup):
            for f in fns.values():
                f(0)
        sync()
        ev = {n: [] for n in fns}
        order = list(fns)
        for it in range(iters):
            torch.cuda._sleep(2_000_000)  # let the host queue the launches ahead of the GPU
            rot = it % len(order)  # rotate the order so no function always runs first
            for n in order[rot:] + order[:rot]:
                f = fns[n]
                s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s0.record()
                f(it)
                s1.record()
                ev[n].append((s0, s1))
        sync()
        flops = 4 * B * H * Sq * Sk * 128
        med = {}
        for n, pairs in ev.items():
            ts = [a.elapsed_time(b) for a, b in pairs]
            med[n] = statistics.median(ts)
            rows.append(
                {
                    "shape": [B, H, Sq, Sk],
                    "fn": n,
                    "median_ms": med[n],
                    "p95_ms": sorted(ts)[int(0.95 * len(ts))],
                    "tflops": flops / med[n] / 1e9,
                    "samples_ms": ts,
                }
            )
        msg = " ".join(f"{n}={flops / med[n] / 1e9:.0f}" for n in fns)
        log(f"  {B},{H},{Sq},{Sk}: TFLOP/s {msg}")
        del sets
        torch.cuda.empty_cache()
    (out_dir / "bench.json").write_text(json.dumps(rows))
    # table
    log("\nshape              | fn          | ms      | TFLOP/s | vs flash | vs cuDNN")
    geo = {}
    for B, H, Sq, Sk in BENCH_SHAPES:
        r = {x["fn"]: x for x in rows if x["shape"] == [B, H, Sq, Sk]}
        for n, x in r.items():
            if n in ("flash", "cudnn"):
                continue
            vf = r["flash"]["median_ms"] / x["median_ms"]
            vc = r["cudnn"]["median_ms"] / x["median_ms"]
            geo.setdefault(n, []).append((vf, vc))
            log(
                f"{B},{H},{Sq},{Sk}".ljust(19) + f"| {n:<11} | {x['median_ms']:7.3f} | {x['tflops']:7.1f} | "
                f"{vf:7.3f}x | {vc:6.3f}x"
            )
        log(
            f"{B},{H},{Sq},{Sk}".ljust(19) + f"| flash       | {r['flash']['median_ms']:7.3f} | "
            f"{r['flash']['tflops']:7.1f} |"
        )
        log(
            f"{B},{H},{Sq},{Sk}".ljust(19) + f"| cudnn       | {r['cudnn']['median_ms']:7.3f} | "
            f"{r['cudnn']['tflops']:7.1f} |"
        )
    log("\ngeomean speedup (min over shapes):")
    for n, v in geo.items():
        gf = geomean(a for a, _ in v)
        gc = geomean(b for _, b in v)
        log(
            f"  {n:<11} vs flash {gf:.3f}x (min {min(a for a, _ in v):.3f}x)  vs cuDNN {gc:.3f}x "
            f"(min {min(b for _, b in v):.3f}x)"
        )
    return rows


# --------------------------------------------------------------------------------------------- sanitize
DRIVER = r"""
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "include/regress_attn.h"
int main(int argc, char** argv) {
  long B = atol(argv[1]), H = atol(argv[2]), Sq = atol(argv[3]), Sk = atol(argv[4]);
  int bshd = atoi(argv[5]);
  size_t nq = B * H * Sq * 128, nk = B * H * Sk * 128;
  uint16_t *q, *k, *v, *o;
  cudaMalloc(&q, nq * 2); cudaMalloc(&k, nk * 2); cudaMalloc(&v, nk * 2); cudaMalloc(&o, nq * 2);
  uint16_t* h = (uint16_t*)malloc((nq > nk ? nq : nk) * 2);
  for (size_t i = 0; i < (nq > nk ? nq : nk); ++i)
    h[i] = 0x3c00 + (uint16_t)((i * 2654435761u) >> 24) % 200 - 100;
  cudaMemcpy(q, h, nq * 2, cudaMemcpyHostToDevice); cudaMemcpy(k, h, nk * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(v, h, nk * 2, cudaMemcpyHostToDevice);
  ra_attention_params p = {};
  p.abi_version = RA_ABI_VERSION; p.q = q; p.k = k; p.v = v; p.o = o;
  p.batch = B; p.heads = H; p.seqlen_q = Sq; p.seqlen_k = Sk; p.head_dim = 128;
  long sq[4], sk[4];
  if (bshd) { long a[4] = {Sq * H * 128, 128, H * 128, 1}, b[4] = {Sk * H * 128, 128, H * 128, 1};
              for (int i = 0; i < 4; ++i) { sq[i] = a[i]; sk[i] = b[i]; } }
  else { long a[4] = {H * Sq * 128, Sq * 128, 128, 1}, b[4] = {H * Sk * 128, Sk * 128, 128, 1};
         for (int i = 0; i < 4; ++i) { sq[i] = a[i]; sk[i] = b[i]; } }
  for (int i = 0; i < 4; ++i) {
    p.q_stride[i] = sq[i]; p.o_stride[i] = sq[i]; p.k_stride[i] = sk[i]; p.v_stride[i] = sk[i];
  }
  char err[256] = {0};
  for (int mode = 0; mode < 3; ++mode) {
    p.rounding = mode;
    int rc = ra_attention_fwd(&p, err, sizeof err);
    cudaError_t e = cudaDeviceSynchronize();
    printf("mode %d rc %d err '%s' sync %s\n", mode, rc, err, cudaGetErrorString(e));
    if (rc || e) return 1;
  }
  return 0;
}
"""


def sanitize(libs, out_dir, results):
    src = Path("/tmp/ra_san_driver.cu")
    src.write_text(DRIVER)
    summary = []
    for lname in [x for x in SAN_LIBS.split(",") if x in libs]:
        lib_path = Path(libs_paths[lname]).resolve()
        exe = f"/tmp/ra_san_{lname}"
        linkdir = f"/tmp/ra_san_lib_{lname}"
        os.makedirs(linkdir, exist_ok=True)
        link = Path(linkdir) / "libregress_attn_cuda.so"
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(lib_path)
        subprocess.run(
            f"nvcc -O1 -I{ROOT}/kernel {src} -L{linkdir} -lregress_attn_cuda -Xlinker -rpath={linkdir} "
            f"-o {exe}",
            shell=True,
            check=True,
        )
        for tool, args in (
            ("memcheck", "1 2 200 300 0"),
            ("memcheck", "1 3 77 129 1"),
            ("racecheck", "1 2 200 300 0"),
            ("memcheck", "1 2 100 2500 1"),
            ("racecheck", "1 2 100 2500 1"),
        ):
            if True:
                cmd = f"compute-sanitizer --tool {tool} --error-exitcode 3 {exe} {args}"
                t0 = time.time()
                pr = subprocess.run(cmd, shell=True, capture_output=True, text=True)
                txt = pr.stdout + pr.stderr
                (out_dir / f"san_{lname}_{tool}_{args.replace(' ', '_')}.log").write_text(txt)
                last = [ln for ln in txt.splitlines() if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln]
                summary.append(
                    f"{lname} {tool} ({args}): rc {pr.returncode} {last[-1] if last else txt[-300:]}"
                    f" [{time.time() - t0:.0f}s]"
                )
                results.append(
                    {
                        "case": f"sanitize:{lname}:{tool}:{args}",
                        "ok": pr.returncode == 0,
                        "summary": last[-1] if last else txt[-300:],
                    }
                )
                log("  " + summary[-1])
    return summary


libs_paths: dict[str, str] = {}
SAN_LIBS = "main"


def build(a):
    """All libraries in parallel (~10 s each) through the project's one build path
    (regress.build: the same nvcc argv as `regress build --backend cuda`), ptxas report beside each."""
    from concurrent.futures import ThreadPoolExecutor

    from regress.build import BuildError, build_kernel

    def one(item):
        n, pth = item.split("=", 1)
        Path(pth).parent.mkdir(parents=True, exist_ok=True)
        try:
            art = build_kernel(
                "cuda", extra_flags=BUILD_FLAGS.get(n, "").split(), cache_dir=Path(pth).parent / ".cache"
            )
        except BuildError as e:
            Path(f"{pth}.ptxas.txt").write_text(str(e))
            return 1
        shutil.copyfile(art.path, pth)
        shutil.copyfile(art.path.parent / "build.log", f"{pth}.ptxas.txt")
        return 0

    with ThreadPoolExecutor(len(a.lib) or 1) as pool:  # nvcc runs outside the GIL
        rcs = list(pool.map(one, a.lib))
    log(f"build: rcs {rcs}")
    return int(any(rcs))


PHASE_TIMEOUT = {"smoke": 45, "check": 300, "drills": 90, "sanitize": 300, "bench": 300}


def smoke(libs, results):
    """One small case per library, so a hang or a gross error shows before the long phases."""
    gen = torch.Generator(device=DEV)
    gen.manual_seed(1)
    q, k, v = make_qkv(2, 3, 300, 333, "bhsd", gen)
    ref = reference(q, k, v, 1 / math.sqrt(128))
    bad = 0
    for n, lib in libs.items():
        r = run_case(lib, q, k, v, "bhsd", "rtne", ref=ref)
        results.append({"lib": n, "case": "smoke", **r})
        log(f"  smoke {n}: {json.dumps(r)}")
        bad += not r["ok"]
    return bad


def run_phases(a, argv):
    """Parent: one child process per phase, killed at its timeout (a hung kernel costs minutes of
    device time otherwise). Smoke runs once per library; a library that fails or hangs there is
    left out of the later phases. Children write their results under --out."""
    rc_all = 0
    libs = list(a.lib)
    base = [x for x in argv if x not in a.lib and x != "--lib"]
    for ph in a.phases.split(","):
        if ph == "smoke":
            healthy = []
            for item in libs:
                if not item.startswith(tuple(t + "=" for t in TIMED)):  # fault-drill builds of main
                    healthy.append(item)
                    continue
                cmd = [sys.executable, __file__, *base, "--lib", item, "--phase", ph]
                t0 = time.time()
                try:
                    rc = subprocess.run(cmd, timeout=PHASE_TIMEOUT[ph]).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
                log(f"== smoke {item}: rc {rc} in {time.time() - t0:.0f}s")
                if rc == 0 or not item.startswith(tuple(t + "=" for t in TIMED)):
                    healthy.append(item)
                else:
                    rc_all = 1
            libs = healthy
            if not any(x.startswith(tuple(t + "=" for t in TIMED)) for x in libs):
                log("== no healthy library: stopping")
                return 1
            continue
        cmd = [sys.executable, __file__, *base, *[arg for x in libs for arg in ("--lib", x)], "--phase", ph]
        t0 = time.time()
        try:
            rc = subprocess.run(cmd, timeout=PHASE_TIMEOUT.get(ph, 300)).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        log(f"== phase {ph}: rc {rc} in {time.time() - t0:.0f}s")
        rc_all |= rc != 0
    return rc_all


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--phases",
        default="",
        help="comma list run as child processes with timeouts: smoke,check,drills,sanitize,bench",
    )
    ap.add_argument("--phase", default="", help=argparse.SUPPRESS)
    ap.add_argument("--lib", action="append", default=[], help="name=path (first is the one checked in full)")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--drills", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--bench-libs", default="", help="comma list of lib names to time (default all)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--san-libs", default="main", help="comma list of libraries to sanitize")
    ap.add_argument("--dry-run", action="store_true", help="CPU stand-in for the library (debug this script)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/ra_out"))
    a = ap.parse_args()
    if a.phases and not a.phase:
        argv = [x for x in sys.argv[1:]]
        i = argv.index("--phases")
        del argv[i : i + 2]
        if a.build:
            argv.remove("--build")
        # build once in the parent
        return run_phases(a, argv) if not a.build or build(a) == 0 else 1
    if a.phase:
        setattr(a, a.phase, True)
    global SAN_LIBS
    SAN_LIBS = a.san_libs
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)
    global DEV
    if a.dry_run:
        DEV = "cpu"
    for item in a.lib:
        n, pth = item.split("=", 1)
        libs_paths[n] = pth
    if a.build and build(a):
        sys.exit("build failed")
    if DEV == "cuda":
        log(
            subprocess.run(
                "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw "
                "--format=csv,noheader",
                shell=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    log(f"torch {torch.__version__}, cudnn {torch.backends.cudnn.version() if DEV == 'cuda' else None}")
    libs = {n: (FakeLib() if a.dry_run else load_lib(p)) for n, p in libs_paths.items()}
    for n, lib in libs.items():
        log(f"{n}: {lib.ra_backend_name().decode()} {lib.ra_build_info().decode()}")
    results = []
    fails = 0
    t0 = time.time()
    if getattr(a, "smoke", False):
        fails += smoke(libs, results)
    if a.check:
        for n in libs:
            if n in TIMED:
                fails += check(libs[n], n, results, quick=a.quick or n != "main")
        log(f"check: {fails} failures, {len(results)} cases, {time.time() - t0:.0f}s")
    if a.drills:
        fails += drills(libs, results)
    if a.sanitize:
        sanitize(libs, out_dir, results)
    if results:
        (out_dir / f"results_{a.phase or 'all'}.json").write_text(json.dumps(results, default=str))
    if a.bench:
        names = [x for x in a.bench_libs.split(",") if x] or [n for n in libs if n in TIMED]
        bench({n: libs[n] for n in names}, out_dir, iters=a.iters)
    if DEV == "cuda":
        log(
            subprocess.run(
                "nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader",
                shell=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    bad = [r for r in results if not r.get("ok", True)]
    log(f"SUMMARY: {len(results)} checks, {len(bad)} failed")
    for r in bad[:20]:
        log("  failed:", json.dumps(r, default=str)[:300])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
