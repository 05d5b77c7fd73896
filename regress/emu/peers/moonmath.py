"""MoonMath's dense attention kernel (public source, MIT) built at run time and run in hip-emu.

Build: `csrc/attention_{rtne,rtna,rtz}.hip` of a given checkout or unpacked snapshot, compiled with
the project's own clang-19 device-only command (regress.build's hip-compile-only flags) against the
stand-in HIP headers in regress/emu/peers/include, cached by the sources, the command and the
compiler's identity. Nothing of MoonMath is committed; point at it with `src=` or
REGRESS_MOONMATH_SRC.

Launches (learned from csrc/attention_api.cpp and the launch glue of csrc/attention_kernel.hip,
written again here): every call runs the V pre-transpose (V -> V_t in the PV fragment order,
padded to 64-row blocks), then either one dense launch over (q-blocks, batch x heads), or, when
MoonMath's own cost rule finds that the grid leaves a fraction of the last round of 304 CUs idle,
the "dense tail KV-split": the full rounds as one 1-D launch, the stranded q-blocks split G ways
over their key blocks into fp32 partials, and a merge kernel that recombines them. `plan` returns
that list of launches for a shape, for the emulator here and for a timing model.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from regress.emu.codeobject import CodeObject, Kernel, load_image
from regress.emu.machine import Launch, Memory, Trace
from regress.emu.peers import kernarg
from regress.facts.abi import RA_HEAD_DIM as HEAD_DIM
from regress.facts.results import LAYOUTS, ROUNDING_MODES

SRC_ENV = "REGRESS_MOONMATH_SRC"
INCLUDE = Path(__file__).resolve().parent / "include"
SOURCES = ("attention_kernel.hip", "opus.hpp", *(f"attention_{m}.hip" for m in ROUNDING_MODES))

# --- facts of MoonMath's public source (csrc/attention_kernel.hip) -----------------------------
THREADS = 512  # 8 waves: two groups of 4 that swap MFMA and memory work each half-iteration
Q_TILE_ROWS = 16
Q_BLOCK_ROWS = 384  # 24 q-tiles of 16 rows per workgroup, 3 per wave
KV_BLOCK_ROWS = 64
XPOSE_THREADS = 256  # V pre-transpose: one workgroup per (batch x head, 64-row key block)
MERGE_THREADS = 256
MERGE_WGS_PER_QBLOCK = Q_BLOCK_ROWS * HEAD_DIM // 4 // MERGE_THREADS  # 48: one thread per 4 outputs
NUM_CUS = 304
MAX_PARTS = 2 * NUM_CUS
PART_FLOATS = Q_BLOCK_ROWS * HEAD_DIM  # fp32 o of one split part
PART_ML_FLOATS = Q_BLOCK_ROWS * 2  # fp32 (m, l) per row of one part
# The tail-split planner's constants: below 48 key blocks the merge does not pay; a part keeps at
# least 4 key blocks; the merge costs about 3 key blocks of time.
MIN_KV_BLOCKS_TO_SPLIT = 48
MIN_BLOCKS_PER_PART = 4
MERGE_COST_BLOCKS = 3
LOG2E = 1.4426950408889634
# The forward kernel's explicit arguments, in the order of its signature.
FORWARD_ARGS = (
    "Q",
    "K",
    "V_t",
    "Out",
    "seq_len",
    "seq_len_kv",
    "scale_log2e",
    "heads",
    "read_list",
    "write_list",
    "must_do_list",
    "thr",
    "phase",
    "part_buf",
    "grid_nqb",
    "split_ways",
    "lpt_order",
)
TAIL_SCHED = "_ZN12_GLOBAL__N_110tail_schedE"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class MoonMathSourceMissing(RuntimeError):
    """No MoonMath source was given (the reason says where it was looked for)."""


def find_source(src: str | Path | None = None) -> Path:
    """The directory holding MoonMath's csrc/ (a checkout, an unpacked snapshot, or csrc itself)."""
    given = src if src is not None else os.environ.get(SRC_ENV)
    if not given:
        raise MoonMathSourceMissing(f"no MoonMath source: pass a checkout or set {SRC_ENV}")
    root = Path(given)
    for cand in (root, root / "csrc", *sorted(root.glob("*/csrc"))):
        if (cand / "attention_kernel.hip").is_file():
            return cand
    raise MoonMathSourceMissing(f"{root}: no csrc/attention_kernel.hip (a MoonMath checkout or snapshot)")


@dataclass(frozen=True)
class Build:
    path: Path  # the code object
    mode: str
    resources: dict[str, Any]  # regress.build.parse_amdgpu_remarks, per kernel (mangled name)

    def dense(self, layout: str = "bhsd", split: bool = False) -> dict[str, Any]:
        """The resource figures of the dense forward kernel (VGPRs, SGPRs, LDS, scratch, spills)."""
        figures: dict[str, Any] = self.resources["kernels"][
            kernel_names(layout)["split" if split else "forward"]
        ]
        return figures


def _command(csrc: Path, mode: str, out: Path) -> list[str]:
    from regress.native.build import COMMANDS

    recipe = COMMANDS["hip-compile-only"]
    argv: list[str] = []
    for a in recipe.argv:
        if a == recipe.source:
            argv.append(str(csrc / f"attention_{mode}.hip"))
        elif a == "<out>":
            argv.append(str(out))
        elif a.startswith("-I"):
            argv.append(f"-I{INCLUDE}")
        else:
            argv.append(a)
    return argv


def build(src: str | Path | None = None, mode: str = "rtne", cache_dir: Path | None = None) -> Build:
    """Compile MoonMath's `attention_<mode>.hip` (or take it from the cache)."""
    from regress.facts import resources
    from regress.native.build import BuildError, compiler_version, parse_amdgpu_remarks

    if mode not in ROUNDING_MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(ROUNDING_MODES)}")
    csrc = find_source(src)
    probe = _command(csrc, mode, Path("<out>"))
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (csrc / name).read_bytes())
    for header in sorted(INCLUDE.rglob("*.h")):
        h.update(header.name.encode() + b"\0" + header.read_bytes())
    h.update(" ".join(probe[1:]).replace(str(csrc), "<src>").encode())
    h.update(compiler_version(probe[0]).encode())
    root = Path(cache_dir) if cache_dir is not None else resources.cache_dir()
    entry = root / f"moonmath-{h.hexdigest()[:16]}"
    co, report = entry / f"attention_{mode}.co", entry / f"attention_{mode}.remarks"
    if not (co.exists() and report.exists()):
        entry.mkdir(parents=True, exist_ok=True)
        tmp = co.with_suffix(f".tmp{os.getpid()}")
        p = subprocess.run(_command(csrc, mode, tmp), capture_output=True, text=True, cwd=csrc)
        if p.returncode != 0:
            raise BuildError(f"MoonMath {mode} did not compile: {p.stderr.strip()[-2000:]}")
        report.write_text(p.stderr)
        tmp.replace(co)
    return Build(co, mode, parse_amdgpu_remarks(report.read_text()))


def kernel_names(layout: str) -> dict[str, str]:
    """The mangled names of the kernels one call of a layout launches."""
    b = int(layout == "bshd")
    fwd = "PK14__hip_bfloat16S3_S3_PS1_iifiPKsPsS6_fiPfiiPKi"
    return {
        "v_transpose": f"_ZN12_GLOBAL__N_124v_transpose_kernel_16x16ILb{b}EEEvPK14__hip_bfloat16PS1_ii",
        "forward": f"_ZN12_GLOBAL__N_117attention_forwardILb{b}ELb0ELb0EEEv{fwd}",
        "split": f"_ZN12_GLOBAL__N_117attention_forwardILb{b}ELb0ELb1EEEv{fwd}",
        "merge": f"_ZN12_GLOBAL__N_111merge_partsILb{b}EEEvP14__hip_bfloat16iiPKf",
    }


# --- the launch description ----------------------------------------------------------------------


@dataclass(frozen=True)
class TailPlan:
    """MoonMath's dense tail KV-split decision (no split: tail 0, split_ways 1)."""

    prefix_wgs: int  # workgroups run as the ordinary launch
    tail: int  # stranded q-blocks split over their key blocks
    split_ways: int  # G parts per stranded q-block
    parts: int  # tail x G


def tail_plan(nqb: int, bh: int, nkb: int, enabled: bool = True) -> TailPlan:
    """The cost rule of MoonMath's host code, in our words: with W = q-blocks x (batch x heads)
    workgroups, one per CU at a time, the last round holds W mod 304 of them. Split only when that
    round is not empty, not 95 % full and the keys span at least 48 blocks; then pick the G >= 2
    (at most 608 parts in all, at least 4 key blocks a part) that minimises
    ceil(tail G / 304) x ceil(nkb / G) + 3 (the merge), and split only if that beats nkb + 3."""
    wgs = nqb * bh
    none = TailPlan(wgs, 0, 1, 0)
    tail = wgs % NUM_CUS if enabled else 0
    if tail == 0 or tail > NUM_CUS * 19 // 20 or nkb < MIN_KV_BLOCKS_TO_SPLIT:
        return none
    best_g, best = 1, nkb + MERGE_COST_BLOCKS
    g = 2
    while g <= MAX_PARTS // tail and nkb // g >= MIN_BLOCKS_PER_PART:
        span = _ceil(tail * g, NUM_CUS) * _ceil(nkb, g) + MERGE_COST_BLOCKS
        if span < best:
            best_g, best = g, span
        g += 1
    if best_g == 1:
        return none
    return TailPlan(wgs - tail, tail, best_g, tail * best_g)


@dataclass(frozen=True)
class PeerLaunch:
    """One kernel launch of a peer's call: which kernel, its grid (workgroups) and block
    (threads), its arguments by name, and the key blocks each workgroup walks (for timing)."""

    role: str  # "v_transpose", "forward", "split", "merge"
    kernel: str
    grid: tuple[int, int]
    block: int
    args: dict[str, Any] = field(default_factory=dict)
    kv_blocks_per_wg: int = 0


def plan(
    shape: tuple[int, int, int, int], mode: str = "rtne", layout: str = "bhsd", *, workspace: bool = True
) -> list[PeerLaunch]:
    """Every launch of one MoonMath forward call for shape (B, H, Sq, Sk): the V pre-transpose, then
    the dense kernel, or the tail KV-split's prefix, split parts and merge (`workspace=False` is
    MoonMath's MOONMATH_NO_TAIL: no split). The rounding mode picks the code object only."""
    if mode not in ROUNDING_MODES or layout not in LAYOUTS:
        raise ValueError(f"mode {mode!r} / layout {layout!r} not supported by MoonMath")
    b, h, sq, sk = shape
    names = kernel_names(layout)
    bh = b * h
    nqb, nkb = _ceil(_ceil(sq, Q_TILE_ROWS), Q_BLOCK_ROWS // Q_TILE_ROWS), _ceil(sk, KV_BLOCK_ROWS)
    scale = float(np.float32(np.float32(LOG2E) / np.sqrt(np.float32(HEAD_DIM))))
    common = {"seq_len": sq, "seq_len_kv": sk, "scale_log2e": scale, "heads": h}
    out = [
        PeerLaunch(
            "v_transpose",
            names["v_transpose"],
            (bh * nkb, 1),
            XPOSE_THREADS,
            {"seq_len_per_head": sk, "heads": h},
        )
    ]
    tp = tail_plan(nqb, bh, nkb, workspace)
    if not tp.tail:
        out.append(PeerLaunch("forward", names["forward"], (nqb, bh), THREADS, dict(common), nkb))
        return out
    if tp.prefix_wgs:
        out.append(
            PeerLaunch(
                "forward", names["forward"], (tp.prefix_wgs, 1), THREADS, {**common, "grid_nqb": nqb}, nkb
            )
        )
    split_args = {**common, "grid_nqb": nqb, "split_ways": tp.split_ways}
    out.append(
        PeerLaunch("split", names["split"], (tp.parts, 1), THREADS, split_args, _ceil(nkb, tp.split_ways))
    )
    out.append(
        PeerLaunch(
            "merge",
            names["merge"],
            (tp.tail * MERGE_WGS_PER_QBLOCK, 1),
            MERGE_THREADS,
            {"seq_len": sq, "heads": h},
        )
    )
    return out


def tail_schedule(nqb: int, bh: int, tp: TailPlan) -> np.ndarray:
    """The int4 table the split and merge kernels read (MoonMath's `tail_sched`): entries
    [0, parts) give each part's (q_block, bh); entry MAX_PARTS + t gives stranded q-block t's
    (q_block, bh, first part, parts). The stranded q-blocks are the last `tail` workgroups in
    bh-major order."""
    sched = np.zeros((2 * MAX_PARTS, 4), np.int32)
    wgs = nqb * bh
    for t in range(tp.tail):
        wg = wgs - tp.tail + t
        qb, head = wg % nqb, wg // nqb
        sched[MAX_PARTS + t] = (qb, head, t * tp.split_ways, tp.split_ways)
        sched[t * tp.split_ways : (t + 1) * tp.split_ways, :2] = (qb, head)
    return sched


# --- the emulated call ---------------------------------------------------------------------------

_NAN_BF16 = 0x7FC0


class MoonMathEmu:
    """MoonMath's host `forward` written again over the emulated code object of one rounding mode."""

    def __init__(self, build_: Build, *, strict: bool = True) -> None:
        self.build = build_
        self.code = CodeObject.load(build_.path)
        self.image = load_image(self.code)
        self.strict = strict
        self.traces: list[tuple[str, Trace]] = []

    def kernel(self, name: str) -> Kernel:
        if name not in self.code.kernels:
            raise KeyError(f"{name} is not in {self.build.path}")
        return self.code.kernels[name]

    def _run(self, memory: Memory, launch: PeerLaunch, values: list[int | float]) -> None:
        k = self.kernel(launch.kernel)
        args = kernarg(k, values, (launch.grid[0], launch.grid[1], 1), launch.block)
        entry = self.image.base + self.image.symbols[launch.kernel]
        emu = Launch(k, memory, args, strict=self.strict, entry_addr=entry)
        self.traces.append((launch.role, emu.run(launch.grid, launch.block)))

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        layout: str = "bhsd",
        workspace: bool = True,
    ) -> torch.Tensor:
        """O = softmax(Q K^T / sqrt(128)) V for bf16 CPU tensors in `layout`, as MoonMath computes it."""
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dtype != torch.bfloat16 or t.dim() != 4 or not t.is_contiguous():
                raise ValueError(f"{name} must be a contiguous 4-D bfloat16 tensor")
        sax, hax = (1, 2) if layout == "bshd" else (2, 1)
        b, h, sq, d = q.shape[0], q.shape[hax], q.shape[sax], q.shape[3]
        sk = k.shape[sax]
        if d != HEAD_DIM or k.shape != v.shape or k.shape[0] != b or k.shape[hax] != h:
            raise ValueError(
                f"MoonMath takes head_dim 128 and k, v of one shape with q's heads, got {q.shape}"
            )
        launches = plan((b, h, sq, sk), self.build.mode, layout, workspace=workspace)
        nkb = _ceil(sk, KV_BLOCK_ROWS)
        out = torch.empty_like(q)
        v_t = torch.empty((b, h, nkb * KV_BLOCK_ROWS, d), dtype=torch.bfloat16)
        # Padding after K: the kernel walks whole 64-row key blocks; its buffer bound (counting
        # soffset, machine.Wave._buffer_dwords) turns the rows past seq_len_kv into zeros, which it
        # masks to -inf. The NaN pad would show in the output if a read ever got past that bound.
        k_pad = torch.full((k.numel() + KV_BLOCK_ROWS * h * d,), 0, dtype=torch.int16)
        k_pad.fill_(_NAN_BF16)
        k_buf = k_pad.view(torch.bfloat16)
        k_buf[: k.numel()] = k.reshape(-1)
        memory = Memory()
        keep: list[torch.Tensor] = [q, k_buf, v, out, v_t]
        part_buf: torch.Tensor | None = None
        if any(x.role == "split" for x in launches):
            part_buf = torch.zeros(MAX_PARTS * (PART_FLOATS + PART_ML_FLOATS), dtype=torch.float32)
            keep.append(part_buf)
            nqb = _ceil(sq, Q_BLOCK_ROWS)
            tp = tail_plan(nqb, b * h, nkb)
            sched = tail_schedule(nqb, b * h, tp)
            self.image.view(TAIL_SCHED, sched.nbytes)[:] = sched.view(np.uint8).reshape(-1)
        for t in keep:
            st = t.untyped_storage()
            memory.map_host(st.data_ptr(), st.nbytes())
        memory.map(self.image.base, self.image.buf)
        self.traces = []
        ptr = {"Q": q.data_ptr(), "K": k_buf.data_ptr(), "V_t": v_t.data_ptr(), "Out": out.data_ptr()}
        for launch in launches:
            a = launch.args
            if launch.role == "v_transpose":
                self._run(memory, launch, [v.data_ptr(), v_t.data_ptr(), a["seq_len_per_head"], a["heads"]])
            elif launch.role == "merge":
                assert part_buf is not None
                self._run(memory, launch, [out.data_ptr(), a["seq_len"], a["heads"], part_buf.data_ptr()])
            else:
                full = {
                    **ptr,
                    **a,
                    "part_buf": part_buf.data_ptr()
                    if (launch.role == "split" and part_buf is not None)
                    else 0,
                }
                values = [full.get(n, 0) for n in FORWARD_ARGS]
                values[FORWARD_ARGS.index("thr")] = 0.0
                self._run(memory, launch, values)
        return out


def short_name(mangled: str) -> str:
    """attention_forward<bshd, lite, split> and friends, for reports."""
    m = re.search(r"N_1\d+(\w+?)IL", mangled)
    flags = re.findall(r"Lb(\d)E", mangled)
    return f"{m.group(1) if m else mangled}<{','.join(flags)}>"


def tile_cost(build_: Build, layout: str = "bhsd", tiles: int = 2, base: int = 6) -> Any:
    """The steady-state cost of one 64-key tile of the dense kernel (regress.emu.cost.TileCost):
    two one-workgroup calls (384 query rows, all 8 waves) of `base` and `base + tiles` key blocks.
    N(0, 1) inputs: after `base` blocks the running max rarely grows, so the rescale branch (96
    v_mul per wave when taken) is mostly skipped, as in a long sequence."""
    from regress.emu.cost import cost_between

    emu = MoonMathEmu(build_)
    g = torch.Generator().manual_seed(0)

    def traced(sk: int) -> Trace:
        dims = (lambda s: (1, 1, s, HEAD_DIM)) if layout == "bhsd" else (lambda s: (1, s, 1, HEAD_DIM))
        q = torch.randn(dims(Q_BLOCK_ROWS), generator=g).to(torch.bfloat16)
        k = torch.randn(dims(sk), generator=g).to(torch.bfloat16)
        emu.forward(q, k, k.clone(), layout=layout, workspace=False)
        return next(t for role, t in emu.traces if role == "forward")

    small, big = traced(base * KV_BLOCK_ROWS), traced((base + tiles) * KV_BLOCK_ROWS)
    name = f"moonmath {short_name(kernel_names(layout)['forward'])} {build_.mode}"
    return cost_between(small, big, name, tiles=tiles, waves=THREADS // 64)
