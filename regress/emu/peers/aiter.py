"""AMD AITER v3's bf16 forward attention, its own gfx942 code objects run on the emulator.

The objects and the argument struct come from the `amd-aiter` wheel at run time (never from this
repository): `aiter_meta/hsa/gfx942/fmha_v3_fwd/MI300/fwd_hd128_bf16_{rtne,rtna,rtz}.co`, and
`struct fmha_fwd_v3_args` in `aiter_meta/csrc/include/mha_fwd.h` (its padding types p2/p3 in
`aiter_hip_common.h`). `wheel()` takes a given file, else `$REGRESS_AITER_WHEEL`, else one already in
the cache, else downloads it with `pip download --no-deps amd-aiter` (unless
`$REGRESS_AITER_NO_DOWNLOAD` is set: scripts/test.sh tries once, then the tests only look).

The launch (learned from the dispatcher the wheel's `fmha_v3_fwd/codegen.py` generates): one
workgroup of 512 threads per 256 query rows of one (batch, head), grid (ceil(Sq / 256), H, B); the
kernel walks the keys 32 at a time. AITER's host code takes this path for bf16, head dim 128, no
mask/bias/dropout, and seqlen_q > 128; `forward` refuses what that path would not take. Every
argument is one 16-byte slot: pointers and 32-bit values padded. Strides are in bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from regress.emu.codeobject import CodeObject
from regress.emu.machine import Launch, Memory, Trace
from regress.facts.abi import RA_HEAD_DIM as HEAD_DIM
from regress.facts.results import ROUNDING_MODES

PACKAGE = "amd-aiter"
WHEEL_ENV = "REGRESS_AITER_WHEEL"
NO_DOWNLOAD_ENV = "REGRESS_AITER_NO_DOWNLOAD"  # set: use a given or cached wheel only (scripts/test.sh)
WHEEL_GLOB = "amd_aiter-*.whl"
CO_DIR = "aiter_meta/hsa/gfx942/fmha_v3_fwd/MI300"
HEADER = "aiter_meta/csrc/include/mha_fwd.h"
COMMON_HEADER = "aiter_meta/csrc/include/aiter_hip_common.h"
CODEGEN = "aiter_meta/hsa/gfx942/fmha_v3_fwd/codegen.py"
TILE_Q = 256  # ts_qo (codegen.py)
TILE_K = 32  # ts_kv
THREADS = 512  # bdx
MIN_SEQLEN_Q = 129  # AITER takes its v3 kernel for seqlen_q > 128
TUNE_OPT = 5  # s_opt for the unmasked kernel (the dispatcher lowers it only for causal masks)
DOWNLOAD_TIMEOUT_S = 600
# Timing AITER's hand-written code relies on, finer than the emulator's rules: it reads each MFMA
# result register pair as soon as its pass has written it (v_max3 of v64, v65 five wait states after
# the 8-pass MFMA; LLVM's rule is passes + 3 for the whole result), and it passes s_barrier right
# after ds_write without s_waitcnt lgkmcnt (LDS executes in order). Those are counted, not raised;
# every other kind (s_waitcnt on loads, LDS races between barriers) stays fatal.
LENIENT = ("mfma", "lds-barrier")
# C sizes of the header's field types (LP64): pointers 8 bytes, 32-bit ints and floats 4.
_C_SIZES = {"void*": 8, "constvoid*": 8, "float": 4, "unsignedint": 4, "int": 4}


class PeerUnavailable(RuntimeError):
    """The AITER wheel (or a file in it) cannot be had: the message says why."""


def cache_root() -> Path:
    from regress.facts.resources import cache_dir

    return cache_dir() / "peers"


def wheel(path: str | Path | None = None) -> Path:
    """The amd-aiter wheel: `path`, else $REGRESS_AITER_WHEEL, else the cached one, else downloaded."""
    given = path or os.environ.get(WHEEL_ENV)
    if given:
        p = Path(given)
        if not p.is_file():
            raise PeerUnavailable(f"AITER wheel {p} does not exist")
        return p
    root = cache_root()
    found = sorted(root.glob(WHEEL_GLOB))
    if found:
        return found[-1]
    if os.environ.get(NO_DOWNLOAD_ENV):
        raise PeerUnavailable(f"no amd-aiter wheel in {root} and downloading is off (${NO_DOWNLOAD_ENV})")
    root.mkdir(parents=True, exist_ok=True)
    pip = [shutil.which("python3") or "python3", "-m", "pip"]
    try:
        proc = subprocess.run(
            [*pip, "download", "--no-deps", "--only-binary=:all:", "-d", str(root), PACKAGE],
            capture_output=True,
            text=True,
            timeout=DOWNLOAD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise PeerUnavailable(f"pip download {PACKAGE} took over {DOWNLOAD_TIMEOUT_S} s") from None
    found = sorted(root.glob(WHEEL_GLOB))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PeerUnavailable(f"pip download {PACKAGE} failed: {tail[0]}")
    return found[-1]


# --- the argument struct -------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int  # of the value; the rest of its slot is padding


def _struct_body(text: str, name: str) -> str:
    m = re.search(
        r"struct\s+(?:__attribute__\s*\(\(\s*packed\s*\)\)\s*)?" + name + r"\s*\{(.*?)\};", text, re.S
    )
    if not m:
        raise PeerUnavailable(f"struct {name} not found in the AITER headers")
    return re.sub(r"//[^\n]*", "", m.group(1))


def parse_args_struct(header: str, common: str) -> list[Field]:
    """The fields of packed `fmha_fwd_v3_args`, padding (p1/p2/p3, from aiter_hip_common.h) left out."""
    pads = {}
    for pad in ("p1", "p2", "p3"):
        members = re.findall(r"unsigned\s+int\s+\w+\s*;", _struct_body(common, pad))
        pads[pad] = 4 * len(members)
    fields, at = [], 0
    for decl in _struct_body(header, "fmha_fwd_v3_args").split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        m = re.fullmatch(r"(.+?)\s*(\*?)\s*(\w+)", decl)
        if not m:
            raise PeerUnavailable(f"fmha_fwd_v3_args: cannot read the declaration {decl!r}")
        ctype, name = (m.group(1) + m.group(2)).replace(" ", ""), m.group(3)
        if ctype in pads:
            at += pads[ctype]
            continue
        if ctype not in _C_SIZES:
            raise PeerUnavailable(f"fmha_fwd_v3_args: field {name} has an unknown type {ctype!r}")
        fields.append(Field(name, at, _C_SIZES[ctype]))
        at += _C_SIZES[ctype]
    return fields


# --- the extracted files ---------------------------------------------------------------------------


def variant(mode: str, causal: bool = False, group: bool = False) -> str:
    """The object's name part: `[causal_]{mode}[_group]` (fwd_hd128_bf16_<variant>.co)."""
    if mode not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {mode!r}")
    return f"{'causal_' if causal else ''}{mode}{'_group' if group else ''}"


VARIANTS = tuple(variant(m, c, g) for c in (False, True) for g in (False, True) for m in ROUNDING_MODES)


@dataclass
class Aiter:
    """AITER v3's bf16 forward code objects (every rounding mode, plain and causal, batch and group)
    and their argument layout, from one wheel."""

    wheel: Path
    objects: dict[str, Path]  # variant -> .co
    fields: list[Field]
    kernarg_size: int
    _code: dict[str, CodeObject]

    @classmethod
    def load(cls, wheel_path: str | Path | None = None) -> Aiter:
        whl = wheel(wheel_path)
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()[:16]
        out = cache_root() / f"aiter-{digest}"
        names = {v: f"{CO_DIR}/fwd_hd128_bf16_{v}.co" for v in VARIANTS}
        try:
            with zipfile.ZipFile(whl) as z:
                header = z.read(HEADER).decode()
                common = z.read(COMMON_HEADER).decode()
                for member in names.values():
                    target = out / Path(member).name
                    if not target.exists():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        tmp = target.with_suffix(".part")
                        tmp.write_bytes(z.read(member))
                        tmp.replace(target)  # never a half-written object in the cache
        except (zipfile.BadZipFile, KeyError) as exc:
            raise PeerUnavailable(f"{whl.name}: {exc}") from None
        fields = parse_args_struct(header, common)
        size = max(f.offset + 16 for f in fields) if fields else 0
        objects = {m: out / Path(n).name for m, n in names.items()}
        return cls(whl, objects, fields, size, {})

    def code(self, mode: str, causal: bool = False, group: bool = False) -> CodeObject:
        """The variant's code object, its kernarg metadata checked against the header's layout."""
        v = variant(mode, causal, group)
        if v not in self._code:
            co = CodeObject.load(self.objects[v])
            name = self.kernel_name(mode, causal, group)
            kernel = co.kernels.get(name)
            if kernel is None:
                raise PeerUnavailable(f"{self.objects[v].name} lacks kernel {name}")
            meta = sorted((int(a[".offset"]), int(a[".size"])) for a in kernel.args if a[".name"] != "pad")
            mine = sorted((f.offset, f.size) for f in self.fields)
            if meta != mine or kernel.kernarg_size != self.kernarg_size:
                raise PeerUnavailable(
                    f"{self.objects[v].name}: kernarg metadata ({kernel.kernarg_size} B) does not match "
                    f"fmha_fwd_v3_args in {HEADER} ({self.kernarg_size} B)"
                )
            self._code[v] = co
        return self._code[v]

    @staticmethod
    def kernel_name(mode: str, causal: bool = False, group: bool = False) -> str:
        name = f"fmha_fwd_hd128_bf16_{variant(mode, causal, group)}"
        return f"_ZN5aiter{len(name)}{name}E"  # the launcher's "_ZN5aiter" + len + name + "E"

    def pack(self, values: dict[str, int | float]) -> bytes:
        """The kernarg bytes: each named value in its field, floats as fp32, all else zero."""
        buf = bytearray(self.kernarg_size)
        known = {f.name: f for f in self.fields}
        for name, val in values.items():
            f = known[name]
            if isinstance(val, float):
                struct.pack_into("<f", buf, f.offset, val)
            else:
                buf[f.offset : f.offset + f.size] = int(val).to_bytes(f.size, "little")
        return bytes(buf)


# --- the launch --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchPlan:
    """One AITER v3 dispatch, as data (the timing model reads it too)."""

    kernel: str
    mode: str
    grid: tuple[int, int, int]
    block: int
    tile_q: int
    tile_k: int
    args: dict[str, int | float]  # by fmha_fwd_v3_args field name; pointers filled in by the caller


def plan(
    b: int,
    h: int,
    sq: int,
    sk: int,
    *,
    mode: str,
    layout: str,
    scale: float | None = None,
    lse: bool = False,
    hk: int | None = None,
    causal: bool = False,
    group: bool = False,
) -> list[LaunchPlan]:
    """The launches AITER's dispatcher makes for one call (one), with every non-pointer argument
    (strides for contiguous tensors of `layout`, bshd or bhsd, in bytes as the dispatcher passes them).
    `hk` < h is grouped-query attention: the dispatcher passes s_gqa = h / hk (codegen.py), and query
    head i reads key/value head i // (h / hk). `causal`: the bottom-right mask (its *_causal_* object;
    each workgroup takes two 256-row tiles, so the grid's x is halved, and s_opt drops to 3 when H is
    not a multiple of 8 or Sq > 16384). `group` (varlen): `b` packed sequences of at most `sq` / `sk`
    rows, their starts in ptr_qseq / ptr_kseq; grid (H, B, tiles), batch strides 0 (packed rows)."""
    if mode not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode {mode!r}")
    if sq < MIN_SEQLEN_Q:
        raise ValueError(f"AITER takes its v3 kernel only for seqlen_q > 128 (got {sq})")
    hk = h if hk is None else hk
    if hk < 1 or h % hk:
        raise ValueError(f"AITER's grouped-query mode needs H a multiple of Hk (got H={h}, Hk={hk})")
    if layout == "bshd":
        row_q, row_k, head_q, head_k = h * HEAD_DIM, hk * HEAD_DIM, HEAD_DIM, HEAD_DIM
        batch_q, batch_k = sq * h * HEAD_DIM, sk * hk * HEAD_DIM
    elif layout == "bhsd":
        row_q = row_k = HEAD_DIM
        head_q, head_k = sq * HEAD_DIM, sk * HEAD_DIM
        batch_q, batch_k = h * sq * HEAD_DIM, hk * sk * HEAD_DIM
    else:
        raise ValueError(f"unknown layout {layout!r}")
    if group:
        if layout != "bshd":
            raise ValueError("AITER's group (varlen) mode takes packed BSHD rows")
        batch_q = batch_k = 0
    strides = {"q": (row_q, head_q, batch_q), "k": (row_k, head_k, batch_k), "o": (row_q, head_q, batch_q)}
    args = launch_args(b, h, sq, sk, strides, scale=scale, lse=lse, gqa=h // hk)
    if causal and (h % 8 or sq > 16384):
        args["s_opt"] = TUNE_OPT - 2  # the dispatcher's downgrade for masked calls
    q_tiles = -(-sq // TILE_Q)
    tiles = -(-q_tiles // (2 if causal else 1))
    grid = (h, b, tiles) if group else (tiles, h, b)
    return [LaunchPlan(Aiter.kernel_name(mode, causal, group), mode, grid, THREADS, TILE_Q, TILE_K, args)]


def launch_args(
    b: int,
    h: int,
    sq: int,
    sk: int,
    strides: dict[str, tuple[int, int, int]],
    *,
    scale: float | None,
    lse: bool,
    gqa: int = 1,
) -> dict[str, int | float]:
    """fmha_fwd_v3_args as the dispatcher fills it: element strides (row, head, batch) of q, k (v
    alike) and o times 2 bytes; LSE [B, H, Sq] fp32; gqa = query heads per key/value head."""
    (rq, hq, bq), (rk, hk, bk), (ro, ho, bo) = strides["q"], strides["k"], strides["o"]
    rv, hv, bv = strides.get("v", strides["k"])
    return {
        "scalar": HEAD_DIM**-0.5 if scale is None else float(scale),
        "s_seq_len": sq,
        "s_Seqs": 2 * rq,
        "s_Ts": TILE_Q * 2 * rq,
        "s_Hs": 2 * hq,
        "s_Bs": 2 * bq,
        "s_gqa": gqa,
        "s_k_Seqs": 2 * rk,
        "s_k_Hs": 2 * hk,
        "s_k_Bs": 2 * bk,
        "s_opt": TUNE_OPT,
        "s_lse": int(lse),
        "s_kv_seq_len": sk,
        "s_qk_head_dim": HEAD_DIM,
        "s_v_head_dim": HEAD_DIM,
        "s_q_head_num": h,
        "s_v_Seqs": 2 * rv,
        "s_v_Hs": 2 * hv,
        "s_v_Bs": 2 * bv,
        "s_o_Seqs": 2 * ro,
        "s_o_Hs": 2 * ho,
        "s_o_Bs": 2 * bo,
        "s_lse_Hs": 4 * sq,
    }


def _strides(t: torch.Tensor, layout: str) -> tuple[int, int, int]:
    """(row, head, batch) element strides; unlike the kernel's, size-1 dims keep their real stride
    (the kernel's buffer bounds are seq_len x row stride)."""
    sb, s1, s2, sd = t.stride()
    if sd != 1:
        raise ValueError("AITER v3 needs a unit head-dim stride")
    return (s1, s2, sb) if layout == "bshd" else (s2, s1, sb)


class AiterEmu:
    """AITER v3 forward on the emulator, called like a kernel library (`forward`)."""

    name = "aiter-v3-emu"

    def __init__(self, aiter: Aiter, *, strict: bool = True) -> None:
        self.aiter = aiter
        self.strict = strict
        self.last_trace: Trace | None = None
        self.last_lse: torch.Tensor | None = None
        self.last_hazards: list[Any] = []

    def supports(self, sq: int, d: int = HEAD_DIM) -> bool:
        return sq >= MIN_SEQLEN_Q and d == HEAD_DIM

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        layout: str = "bshd",
        rounding: str = "rtne",
        scale: float | None = None,
        lse: bool = False,
        causal: bool = False,
        cu_seqlens_q: torch.Tensor | None = None,
        cu_seqlens_k: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`causal`: the bottom-right causal mask. `cu_seqlens_q`/`cu_seqlens_k` (int32, B + 1 starts,
        both or neither): varlen, q/k/v packed as (1, total rows, heads, 128) BSHD."""
        if not (q.dtype == k.dtype == v.dtype == torch.bfloat16) or q.device.type != "cpu":
            raise ValueError("AITER v3 on the emulator takes bf16 CPU tensors")
        if (cu_seqlens_q is None) != (cu_seqlens_k is None):
            raise ValueError("varlen needs both cu_seqlens_q and cu_seqlens_k")
        if cu_seqlens_q is not None:
            return self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, rounding, scale, causal)
        if layout == "bshd":
            b, sq, h, d = q.shape
            sk, hk = k.shape[1], k.shape[2]
        else:
            b, h, sq, d = q.shape
            hk, sk = k.shape[1], k.shape[2]
        if d != HEAD_DIM or h % hk or not self.supports(sq, d):
            raise ValueError(
                f"AITER's v3 kernel takes head dim 128, Hq a multiple of Hk, seqlen_q > 128 "
                f"(got q {tuple(q.shape)}, k {tuple(k.shape)})"
            )
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse_t = torch.empty((b, h, sq), dtype=torch.float32)
        tensors = {"ptr_q": q, "ptr_k": k, "ptr_v": v, "ptr_o": out, "ptr_lse": lse_t}
        strides = {n: _strides(t, layout) for n, t in (("q", q), ("k", k), ("v", v), ("o", out))}
        memory = Memory()
        for t in tensors.values():
            st = t.untyped_storage()
            memory.map_host(st.data_ptr(), st.nbytes())
        (lp,) = plan(b, h, sq, sk, mode=rounding, layout=layout, scale=scale, lse=lse, hk=hk, causal=causal)
        args: dict[str, Any] = dict(launch_args(b, h, sq, sk, strides, scale=scale, lse=lse, gqa=h // hk))
        args["s_opt"] = lp.args["s_opt"]
        args.update({n: t.data_ptr() for n, t in tensors.items()})
        self._run(lp, rounding, causal, False, memory, args)
        self.last_lse = lse_t if lse else None
        return out

    def _run(
        self, lp: LaunchPlan, mode: str, causal: bool, group: bool, memory: Memory, args: dict[str, Any]
    ) -> None:
        kernel = self.aiter.code(mode, causal, group).kernels[lp.kernel]
        launch = Launch(kernel, memory, self.aiter.pack(args), strict=self.strict, lenient=LENIENT)
        self.last_trace = launch.run(lp.grid, lp.block)
        self.last_hazards = launch.hazards

    def _varlen(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_q: torch.Tensor,
        cu_k: torch.Tensor | None,
        mode: str,
        scale: float | None,
        causal: bool,
    ) -> torch.Tensor:
        assert cu_k is not None
        if q.dim() != 4 or q.shape[0] != 1 or q.shape[3] != HEAD_DIM:
            raise ValueError(f"varlen takes packed (1, total, heads, 128) BSHD rows (got q {tuple(q.shape)})")
        if cu_q.dtype != torch.int32 or cu_k.dtype != torch.int32 or cu_q.shape != cu_k.shape:
            raise ValueError("cu_seqlens_q and cu_seqlens_k are int32 tensors of B + 1 sequence starts")
        lq, lk = (cu_q[1:] - cu_q[:-1]).tolist(), (cu_k[1:] - cu_k[:-1]).tolist()
        if min(lq + lk) < 1 or cu_q[-1] != q.shape[1] or cu_k[-1] != k.shape[1]:
            raise ValueError("cu_seqlens must rise from 0 to the packed row counts")
        b, h, hk = len(lq), q.shape[2], k.shape[2]
        sq, sk = max(lq), max(lk)
        if h % hk or sq < MIN_SEQLEN_Q:
            raise ValueError(f"AITER's v3 kernel takes Hq a multiple of Hk and max seqlen_q > 128 (got {sq})")
        out = torch.zeros_like(q, memory_format=torch.contiguous_format)
        cq, ck = cu_q.contiguous(), cu_k.contiguous()
        lse_t = torch.empty((h, q.shape[1]), dtype=torch.float32)
        tensors = {"ptr_q": q, "ptr_k": k, "ptr_v": v, "ptr_o": out, "ptr_lse": lse_t}
        seqs = {"ptr_qseq": cq, "ptr_kseq": ck, "ptr_qseq_padding": cq, "ptr_kseq_padding": ck}
        memory = Memory()
        for t in (*tensors.values(), cq, ck):
            st = t.untyped_storage()
            memory.map_host(st.data_ptr(), st.nbytes())
        (lp,) = plan(b, h, sq, sk, mode=mode, layout="bshd", scale=scale, hk=hk, causal=causal, group=True)
        strides = {n: _strides(t, "bshd") for n, t in (("q", q), ("k", k), ("v", v), ("o", out))}
        strides = {n: (r, hd, 0) for n, (r, hd, _) in strides.items()}  # packed: no batch stride
        args: dict[str, Any] = dict(launch_args(b, h, sq, sk, strides, scale=scale, lse=False, gqa=h // hk))
        args["s_opt"] = lp.args["s_opt"]
        args.update({n: t.data_ptr() for n, t in (tensors | seqs).items()})
        self._run(lp, mode, causal, True, memory, args)
        self.last_lse = None
        return out


def tile_cost(aiter: Aiter, mode: str, *, base: int = 4, tiles: int = 4) -> Any:
    """The steady-state cost of AITER's tile loop (regress.emu.cost.TileCost) per 64 keys, i.e. per two
    of its 32-key tiles, per wave of its 8: two one-workgroup calls (256 query rows, BSHD) of `base` and
    `base + tiles` key tiles, N(0, 1) inputs (its loop is branch-free: the inputs do not change it)."""
    from regress.emu.cost import cost_between

    emu = AiterEmu(aiter)
    g = torch.Generator().manual_seed(0)

    def traced(sk: int) -> Trace:
        q = torch.randn((1, TILE_Q, 1, HEAD_DIM), generator=g).to(torch.bfloat16)
        k = torch.randn((1, sk, 1, HEAD_DIM), generator=g).to(torch.bfloat16)
        emu.forward(q, k, k.clone(), layout="bshd", rounding=mode)
        assert emu.last_trace is not None
        return emu.last_trace

    small, big = traced(base * TILE_K), traced((base + tiles) * TILE_K)
    per_64 = tiles * TILE_K / 64
    return cost_between(small, big, f"aiter {Aiter.kernel_name(mode)}", tiles=per_64, waves=THREADS // 64)
