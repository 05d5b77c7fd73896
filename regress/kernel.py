"""Load a built kernel library through its C ABI and call it on torch tensors.

`attention()` is the public entry point; `KernelLibrary` wraps one shared library built by
`regress.build.build_kernel` (see kernel/include/regress_attn.h for the contract).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import struct
import threading
import warnings
from pathlib import Path
from typing import Any, Literal

import torch

from regress.results import ROUNDING_CODE

Layout = Literal["bshd", "bhsd"]
Rounding = Literal["rtne", "rtna", "rtz"]

RA_ABI_VERSION = 1
RA_HEAD_DIM = 128
_ERR_LEN = 512


class KernelError(RuntimeError):
    """The kernel refused or failed a call; `.code` is the C ABI's ra_status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


_Strides = ctypes.c_int64 * 4


class _Params(ctypes.Structure):
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
    ]


# The same bytes as _Params, packed in one call: filling a ctypes Structure field by field cost more
# host time than the rest of a call's Python side (11 µs of ~25 µs per call on the CI machine).
# '@' lays fields out with C's alignment; tests/kernel/test_kernel_abi.py checks it against _Params.
_PARAMS_PACK = struct.Struct("@I4P5q16qfiP")
assert _PARAMS_PACK.size % 8 == 0


class _CallBuffers(threading.local):
    """Per thread: the packed parameter block and the error text buffer, reused by every call (a
    call returns before the next can start on the same thread)."""

    def __init__(self) -> None:
        self.params = (ctypes.c_uint64 * (_PARAMS_PACK.size // 8))()  # 8-byte aligned, as C needs
        self.params_ptr = ctypes.cast(self.params, ctypes.POINTER(_Params))
        self.err = ctypes.create_string_buffer(_ERR_LEN)


_BUFFERS = _CallBuffers()


def _bhsd_strides(t: torch.Tensor, layout: Layout) -> tuple[int, int, int, int]:
    """Element strides in (batch, head, seq, dim) order; size-1 dims get stride 0 because torch
    gives them arbitrary strides and they are never stepped over. (Unrolled: it runs four times per
    call, and a generator over t.shape cost ~1.7 µs each.)"""
    sb, s1, s2, sd = t.stride()
    nb, n1, n2, _ = t.shape
    sb, s1, s2 = (0 if nb == 1 else sb), (0 if n1 == 1 else s1), (0 if n2 == 1 else s2)
    return (sb, s2, s1, sd) if layout == "bshd" else (sb, s1, s2, sd)


def _bhsd_shape(t: torch.Tensor, layout: Layout) -> tuple[int, int, int, int]:
    b, x, y, d = t.shape
    return (b, y, x, d) if layout == "bshd" else (b, x, y, d)


def _check_tensor(name: str, t: torch.Tensor, device_type: str, backend: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.bfloat16:
        raise TypeError(f"{name} has dtype {str(t.dtype).removeprefix('torch.')}, the kernel takes bfloat16")
    if t.dim() != 4:
        raise ValueError(f"{name} must be 4-D ([B,S,H,D] or [B,H,S,D]), got shape {tuple(t.shape)}")
    if t.device.type != device_type:
        raise ValueError(f"{name} is on {t.device}, the {backend} kernel takes {device_type} tensors")


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
    """The checks every backend's `forward` makes on the Python side before touching memory (the
    library's own C-ABI checks come after): ((B, H, Sq, Sk, D), the output tensor, made if None)."""
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"layout {layout!r} is not 'bshd' or 'bhsd'")
    if rounding not in ROUNDING_CODE:
        raise ValueError(f"rounding {rounding!r} is not one of {', '.join(ROUNDING_CODE)}")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, device_type, backend)
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v are on different devices: {q.device}, {k.device}, {v.device}")
    b, h, sq, d = _bhsd_shape(q, layout)  # type: ignore[arg-type]
    kb, kh, sk, kd = _bhsd_shape(k, layout)  # type: ignore[arg-type]
    if _bhsd_shape(v, layout) != (kb, kh, sk, kd):  # type: ignore[arg-type]
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} differ in shape")
    if (kb, kh, kd) != (b, h, d):
        raise ValueError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree in batch, heads or head_dim ({layout})"
        )
    if out is None:
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    else:
        _check_tensor("out", out, device_type, backend)
        if out.shape != q.shape or out.device != q.device:
            raise ValueError(f"out {tuple(out.shape)} on {out.device} must match q {tuple(q.shape)}")
    return (b, h, sq, sk, d), out


class KernelLibrary:
    """One loaded kernel library (`libregress_attn_<backend>.so`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lib = ctypes.CDLL(str(self.path))
        self._lib.ra_backend_name.restype = ctypes.c_char_p
        self._lib.ra_backend_name.argtypes = []
        self._lib.ra_build_info.restype = ctypes.c_char_p
        self._lib.ra_build_info.argtypes = []
        self._lib.ra_attention_fwd.restype = ctypes.c_int
        self._lib.ra_attention_fwd.argtypes = [ctypes.POINTER(_Params), ctypes.c_char_p, ctypes.c_size_t]
        self.backend: str = self._lib.ra_backend_name().decode()
        self.device_type = "cpu" if self.backend == "cpu" else "cuda"

    def __repr__(self) -> str:
        return f"KernelLibrary(backend={self.backend!r}, path={str(self.path)!r})"

    def build_info(self) -> dict[str, Any]:
        return json.loads(self._lib.ra_build_info().decode())

    @property
    def raw(self) -> ctypes.CDLL:
        """The ctypes handle, for test hooks such as the CPU backend's ra_cpu_round_f32."""
        return self._lib

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
    ) -> torch.Tensor:
        """O = softmax(scale · Q Kᵀ) V, bf16 in and out, output in q's layout.

        q is [B,Sq,H,D] (bshd) or [B,H,Sq,D] (bhsd), k and v likewise with Sk; any strides whose last
        dim is contiguous. Raises KernelError (with the kernel's message) when the kernel refuses.
        """
        (b, h, sq, sk, d), out = check_call(
            q,
            k,
            v,
            layout=layout,
            rounding=rounding,
            scale=scale,
            out=out,
            device_type=self.device_type,
            backend=self.backend,
        )

        dims = (b, h, sq, sk, d)
        if self.device_type == "cuda" and q.device.index not in (None, torch.cuda.current_device()):
            with torch.cuda.device(q.device):  # the library launches on the current device
                rc = self._call(q, k, v, out, layout, dims, scale, rounding, stream)
        else:
            rc = self._call(q, k, v, out, layout, dims, scale, rounding, stream)
        if rc != 0:
            text = _BUFFERS.err.value.decode(errors="replace")
            raise KernelError(f"{self.backend} kernel refused the call: {text}", rc)
        return out

    def _call(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        layout: Layout,
        dims: tuple[int, int, int, int, int],
        scale: float | None,
        rounding: str,
        stream: int | None,
    ) -> int:
        """One ra_attention_fwd call with the parameter block packed in place (see _PARAMS_PACK); a
        CUDA call without a stream goes on torch's current one."""
        if stream is None and self.device_type == "cuda":
            stream = torch.cuda.current_stream().cuda_stream
        buf = _BUFFERS
        _PARAMS_PACK.pack_into(
            buf.params,
            0,
            RA_ABI_VERSION,
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            out.data_ptr(),
            *dims,
            *_bhsd_strides(q, layout),
            *_bhsd_strides(k, layout),
            *_bhsd_strides(v, layout),
            *_bhsd_strides(out, layout),
            0.0 if scale is None else float(scale),  # 0 selects 1/sqrt(head_dim) in the kernel
            ROUNDING_CODE[rounding],
            stream or 0,
        )
        return int(self._lib.ra_attention_fwd(buf.params_ptr, buf.err, _ERR_LEN))


_LIBS: dict[Path, KernelLibrary] = {}
_LOCK = threading.Lock()


def load_library(path: str | os.PathLike[str]) -> KernelLibrary:
    """Load (once per resolved path) a kernel library. A gfx942 code object (`.co`, the compile-only
    HIP build) loads as the hip-emu backend: the same interface, run on the CPU emulator."""
    key = Path(path).resolve()
    with _LOCK:
        if key not in _LIBS:
            if key.suffix == ".co":
                from regress.emu.library import EmuLibrary

                _LIBS[key] = EmuLibrary(key)  # type: ignore[assignment]
            else:
                _LIBS[key] = KernelLibrary(key)
        return _LIBS[key]


def backend_for_device(device: torch.device) -> str:
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return "hip" if torch.version.hip else "cuda"
    raise ValueError(f"no kernel backend for device {device}")


_DEFAULT: dict[str, KernelLibrary] = {}


def default_library(backend: str) -> KernelLibrary:
    """The library of `backend` built with the default flags (built on first use, then cached)."""
    from regress.build import build_kernel

    with _LOCK:
        lib = _DEFAULT.get(backend)
    if lib is None:
        lib = load_library(build_kernel(backend).path)
        with _LOCK:
            _DEFAULT[backend] = lib
    return lib


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: Layout = "bshd",
    rounding: Rounding = "rtna",
    scale: float | None = None,
    use: Literal["kernel", "baseline"] | None = None,
) -> torch.Tensor:
    """Attention forward, O = softmax(scale · Q Kᵀ) V, bf16, head_dim 128, output in q's layout.

    q is [B,Sq,H,D] (layout "bshd") or [B,H,Sq,D] ("bhsd"); k, v the same with Sk. `scale` defaults to
    1/sqrt(128). `rounding` picks the fp32 -> bf16 rounding of the output: "rtne", "rtna" or "rtz".

    Which implementation runs:
      * use="kernel": this project's kernel for q's device (CPU golden model on CPU tensors, the
        CUDA or HIP kernel on GPU tensors), built on first use by regress.build.build_kernel, called
        through the operator torch.ops.regress.attention (regress.op), so torch.compile traces it
        without a graph break and a CUDA call can be captured in a CUDA graph. Forward only:
        inputs that require grad (with grad mode on) are refused.
      * use="baseline": the vendor baseline for q's device (regress.baselines): SDPA on CPU and
        NVIDIA, AITER on ROCm. SDPA rounds with rtne only; asking it for another mode warns.
      * use=None (default): the kernel, unless the environment variable REGRESS_ATTENTION=baseline
        is set. That variable is the back-out switch: when a nightly goes red, set it and callers get
        the baseline without a code change.
    """
    if use is None:
        use = (
            "baseline" if os.environ.get("REGRESS_ATTENTION", "").strip().lower() == "baseline" else "kernel"
        )
    if use == "baseline":
        return _baseline_attention(q, k, v, layout=layout, rounding=rounding, scale=scale)
    if use != "kernel":
        raise ValueError(f"use={use!r}: expected 'kernel', 'baseline' or None")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # The operator has no backward; torch's fallback would only warn and drop the gradient.
        raise ValueError(
            "the kernel is forward-only (no backward): call it under torch.no_grad() or "
            "torch.inference_mode(), or pass tensors that do not require grad"
        )
    from regress.op import attention_op

    return attention_op(q, k, v, layout, rounding, scale)


def _baseline_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: Layout,
    rounding: Rounding,
    scale: float | None,
) -> torch.Tensor:
    from regress.baselines import available_baselines

    found = available_baselines(str(q.device.type))
    if not found:
        raise RuntimeError(f"no baseline attention kernel is available on {q.device}")
    b, h, sq, _ = q.shape if layout == "bhsd" else (q.shape[0], q.shape[2], q.shape[1], q.shape[3])
    sk = k.shape[2] if layout == "bhsd" else k.shape[1]
    fits = [bl for bl in found if bl.supports_shape(b, h, sq, sk)] or found
    chosen = next((bl for bl in fits if bl.supports(rounding)), None)
    if chosen is None:
        chosen = fits[0]
        warnings.warn(
            f"baseline {chosen.name} cannot round with {rounding}; it rounds with rtne", stacklevel=3
        )
        rounding = "rtne"
    return chosen(q, k, v, layout=layout, rounding=rounding, scale=scale)
