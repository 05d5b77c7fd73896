"""The kernel's C ABI on the Python side (kernel/include/regress_attn.h): the parameter block, the
error type, the strides, the checks every backend makes before a call, and the `Library` protocol
that a built library (regress.kernel.loader.KernelLibrary) and the emulated gfx942 code object
(regress.emu.library.EmuLibrary) both satisfy. No loading here, so the emulator can use it without
importing the loader that loads it."""

from __future__ import annotations

import ctypes
import math
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from regress.facts.results import LAYOUTS, MASK_CODE, ROUNDING_CODE, Layout, Mask, Rounding

if TYPE_CHECKING:
    import torch

RA_ABI_VERSION = 2
# The one head_dim (kernel/include/regress_attn.h); torch is imported only where a tensor is checked,
# so the torch-free case catalogue (regress.facts.cases) reads it from here.
RA_HEAD_DIM = 128
RA_ERR_UNSUPPORTED = 9  # ra_status: a valid v2 feature the backend does not implement
ERR_LEN = 512


class KernelError(RuntimeError):
    """The kernel refused or failed a call; `.code` is the C ABI's ra_status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


_Strides = ctypes.c_int64 * 4


class Params(ctypes.Structure):
    # Mirrors ra_attention_params field for field; ctypes applies the C alignment rules.
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
        ("q_stride", _Strides),
        ("k_stride", _Strides),
        ("v_stride", _Strides),
        ("o_stride", _Strides),
        ("scale", ctypes.c_float),
        ("rounding", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        # ABI v2 (appended)
        ("heads_kv", ctypes.c_int64),
        ("mask", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("lse", ctypes.c_void_p),
    ]


RA_PLAN_KIND_LEN = 32
MERGE_NAMES = {0: "none", 1: "kernel", 2: "launch"}  # ra_merge


class DeviceFacts(ctypes.Structure):
    # Mirrors ra_device_facts: what the planner is told about the device (it probes nothing).
    _fields_ = [("compute_units", ctypes.c_int32), ("max_workspace_bytes", ctypes.c_int64)]


class LaunchPlan(ctypes.Structure):
    # Mirrors ra_launch_plan field for field (regress_attn.h, issue 37).
    _fields_ = [
        ("kind", ctypes.c_char * RA_PLAN_KIND_LEN),
        ("kind_id", ctypes.c_int32),
        ("threads", ctypes.c_int32),
        ("grid", ctypes.c_int64 * 3),
        ("tiles", ctypes.c_int64),
        ("block_q", ctypes.c_int32),
        ("block_k", ctypes.c_int32),
        ("key_blocks", ctypes.c_int32),
        ("splits", ctypes.c_int32),
        ("split_tiles", ctypes.c_int64),
        ("tail_splits", ctypes.c_int32),
        ("blocks_per_split", ctypes.c_int32),
        ("merge", ctypes.c_int32),
        ("dynamic_scheduler", ctypes.c_int32),
        ("shared_bytes", ctypes.c_int64),
        ("workspace_bytes", ctypes.c_int64),
    ]

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data: the kind's name, the merge's name, the grid as a list."""
        out: dict[str, Any] = {}
        for name, *_ in self._fields_:
            value = getattr(self, name)
            out[name] = value.decode() if name == "kind" else list(value) if name == "grid" else int(value)
        out["merge"] = MERGE_NAMES.get(out["merge"], str(out["merge"]))
        return out


# The same bytes as Params, packed in one call: filling a ctypes Structure field by field cost more
# host time than the rest of a call's Python side (11 µs of ~25 µs per call on the CI machine).
# '@' lays fields out with C's alignment; tests/kernel/test_cpu_golden.py checks it against Params.
PARAMS_PACK = struct.Struct("@I4P5q16qfiP" + "qii2P2qP")
assert PARAMS_PACK.size % 8 == 0


class CallBuffers(threading.local):
    """Per thread: the packed parameter block and the error text buffer, reused by every call (a
    call returns before the next can start on the same thread)."""

    def __init__(self) -> None:
        self.params = (ctypes.c_uint64 * (PARAMS_PACK.size // 8))()  # 8-byte aligned, as C needs
        self.params_ptr = ctypes.cast(self.params, ctypes.POINTER(Params))
        self.err = ctypes.create_string_buffer(ERR_LEN)


BUFFERS = CallBuffers()


def bhsd_strides(t: torch.Tensor, layout: Layout) -> tuple[int, int, int, int]:
    """Element strides in (batch, head, seq, dim) order; size-1 dims get stride 0 because torch
    gives them arbitrary strides and they are never stepped over. (Unrolled: it runs four times per
    call, and a generator over t.shape cost ~1.7 µs each.) A packed varlen tensor (3-D,
    [total, H, D]) has no batch stride: (0, head, seq, dim)."""
    if t.dim() == 3:
        s0, s1, sd = t.stride()
        n0, n1, _ = t.shape
        return (0, 0 if n1 == 1 else s1, 0 if n0 == 1 else s0, sd)
    sb, s1, s2, sd = t.stride()
    nb, n1, n2, _ = t.shape
    sb, s1, s2 = (0 if nb == 1 else sb), (0 if n1 == 1 else s1), (0 if n2 == 1 else s2)
    return (sb, s2, s1, sd) if layout == "bshd" else (sb, s1, s2, sd)


def _bhsd_shape(t: torch.Tensor, layout: Layout) -> tuple[int, int, int, int]:
    b, x, y, d = t.shape
    return (b, y, x, d) if layout == "bshd" else (b, x, y, d)


def _check_tensor(
    name: str, t: torch.Tensor, device_type: str, backend: str, *, packed: bool = False
) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.bfloat16:
        raise TypeError(f"{name} has dtype {str(t.dtype).removeprefix('torch.')}, the kernel takes bfloat16")
    if packed and t.dim() != 3:
        raise ValueError(f"{name} must be 3-D ([total, H, D]) with cu_seqlens, got shape {tuple(t.shape)}")
    if not packed and t.dim() != 4:
        raise ValueError(f"{name} must be 4-D ([B,S,H,D] or [B,H,S,D]), got shape {tuple(t.shape)}")
    if t.device.type != device_type:
        raise ValueError(f"{name} is on {t.device}, the {backend} kernel takes {device_type} tensors")


def _check_seqlens(name: str, cu: torch.Tensor, device: torch.device) -> None:
    import torch

    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(cu).__name__}")
    if cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(
            f"{name} must be a 1-D int32 tensor of batch + 1 >= 2 entries, got {cu.dtype} {tuple(cu.shape)}"
        )
    if cu.device != device or not cu.is_contiguous():
        raise ValueError(f"{name} must be contiguous on {device} (q's device), got {cu.device}")


def kv_heads(k: torch.Tensor, layout: str) -> int:
    """The K/V head count of a call (heads_kv): k's head dimension in its layout (or packed)."""
    return int(k.shape[1] if k.dim() == 3 else _bhsd_shape(k, layout)[1])  # type: ignore[arg-type]


def check_call(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: str,
    rounding: str,
    scale: float | None,
    out: torch.Tensor | None,
    device_type: str,
    backend: str,
) -> tuple[tuple[int, int, int, int, int], torch.Tensor]:
    """check_call_v2 of a dense call without the v2 arguments: ((B, H, Sq, Sk, D), the output)."""
    dims, out = check_call_v2(
        q,
        k,
        v,
        layout=layout,
        rounding=rounding,
        scale=scale,
        out=out,
        device_type=device_type,
        backend=backend,
    )
    return dims[:5], out


def check_call_v2(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: str,
    rounding: str,
    scale: float | None,
    out: torch.Tensor | None,
    device_type: str,
    backend: str,
    mask: str = "none",
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    lse: torch.Tensor | None = None,
) -> tuple[tuple[int, int, int, int, int, int], torch.Tensor]:
    """The checks every backend's `forward` makes on the Python side before touching memory (the
    library's own C-ABI checks come after): ((B, H, Sq, Sk, D, H_kv), the output tensor, made if None).

    K/V may have fewer heads than Q (grouped-query: a divisor of H; kv_heads gives it). With
    cu_seqlens_q/k the call is varlen: q, k, v, out are packed [total, H, D], B is the sequence count
    and Sq, Sk the packed totals (the per-sequence lengths are the kernel's to check)."""
    import torch

    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not 'bshd' or 'bhsd'")
    if rounding not in ROUNDING_CODE:
        raise ValueError(f"rounding {rounding!r} is not one of {', '.join(ROUNDING_CODE)}")
    if mask not in MASK_CODE:
        raise ValueError(f"mask {mask!r} is not one of {', '.join(MASK_CODE)}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError("give both cu_seqlens_q and cu_seqlens_k (varlen) or neither")
    if not varlen and (max_seqlen_q or max_seqlen_k):
        raise ValueError(f"max_seqlen_q={max_seqlen_q}, max_seqlen_k={max_seqlen_k} need cu_seqlens_q/k")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, device_type, backend, packed=varlen)
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v are on different devices: {q.device}, {k.device}, {v.device}")
    if varlen:
        assert cu_seqlens_q is not None and cu_seqlens_k is not None
        _check_seqlens("cu_seqlens_q", cu_seqlens_q, q.device)
        _check_seqlens("cu_seqlens_k", cu_seqlens_k, q.device)
        if cu_seqlens_q.numel() != cu_seqlens_k.numel():
            raise ValueError(
                f"cu_seqlens_q has {cu_seqlens_q.numel()} entries, cu_seqlens_k {cu_seqlens_k.numel()}: "
                "both must be batch + 1"
            )
        for name, n, total in (
            ("max_seqlen_q", max_seqlen_q, q.shape[0]),
            ("max_seqlen_k", max_seqlen_k, k.shape[0]),
        ):
            if not (isinstance(n, int) and 0 <= n <= total):
                raise ValueError(f"{name}={n!r} must be an int in [0, {total}] (the packed total)")
        b = cu_seqlens_q.numel() - 1
        (sq, h, d), (sk, kh, kd) = q.shape, k.shape
        if tuple(v.shape) != tuple(k.shape):
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ in shape")
        kb = b
    else:
        b, h, sq, d = _bhsd_shape(q, layout)
        kb, kh, sk, kd = _bhsd_shape(k, layout)
        if _bhsd_shape(v, layout) != (kb, kh, sk, kd):
            raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ in shape")
    if (kb, kd) != (b, d) or (kh != h and (kh < 1 or h % kh != 0)):  # equal (even 0): the kernel's size check
        raise ValueError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree in batch or head_dim, or k's heads do not "
            f"divide q's ({'packed' if varlen else layout})"
        )
    if out is None:
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    else:
        _check_tensor("out", out, device_type, backend, packed=varlen)
        if out.shape != q.shape or out.device != q.device:
            raise ValueError(f"out {tuple(out.shape)} on {out.device} must match q {tuple(q.shape)}")
    if lse is not None:
        want = (h, sq) if varlen else (b, h, sq)
        if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32 or tuple(lse.shape) != want:
            raise ValueError(
                f"lse must be a float32 tensor of shape {want}, got {getattr(lse, 'shape', lse)!r}"
            )
        if lse.device != q.device or not lse.is_contiguous():
            raise ValueError(f"lse must be contiguous on {q.device}")
    return (b, h, sq, sk, d, kh), out


class Library(Protocol):
    """What the suites, the operator and attention() call on a loaded kernel."""

    path: Path
    backend: str
    device_type: str

    def build_info(self) -> dict[str, Any]: ...

    def plan(
        self, b: int, h: int, sq: int, sk: int, *, layout: str, rounding: str, **v2: Any
    ) -> dict[str, Any] | None:
        """The launch plan this library runs for the shape (its ra_plan_launch on its device), None
        for a backend without a planner; `v2`: regress.native.plan.shape_params' ABI v2 keywords."""
        ...

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        layout: Layout = "bshd",
        rounding: Rounding = "rtna",
        scale: float | None = None,
        out: torch.Tensor | None = None,
        stream: int | None = None,
        mask: Mask = "none",
        cu_seqlens_q: torch.Tensor | None = None,
        cu_seqlens_k: torch.Tensor | None = None,
        max_seqlen_q: int = 0,
        max_seqlen_k: int = 0,
        lse: torch.Tensor | None = None,
    ) -> torch.Tensor: ...
