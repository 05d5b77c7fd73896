"""Loading kernel libraries: the ctypes backend over a built `libregress_attn_<backend>.so`, the
emulated gfx942 code object (`.co`, regress.emu.library) behind the same `Library` protocol, and the
registry that loads each path once and builds each backend's default library on first use."""

from __future__ import annotations

import ctypes
import json
import os
import threading
from pathlib import Path
from typing import Any

import torch

from regress.facts.abi import (
    BUFFERS,
    ERR_LEN,
    PARAMS_PACK,
    RA_ABI_VERSION,
    KernelError,
    Library,
    Params,
    bhsd_strides,
    check_call_v2,
)
from regress.facts.backends import torch_gpu_backend
from regress.facts.results import MASK_CODE, ROUNDING_CODE, Layout, Mask, Rounding


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
        self._lib.ra_attention_fwd.argtypes = [ctypes.POINTER(Params), ctypes.c_char_p, ctypes.c_size_t]
        self.backend: str = self._lib.ra_backend_name().decode()
        self.device_type = "cpu" if self.backend == "cpu" else "cuda"
        self._planner: Any = None

    def __repr__(self) -> str:
        return f"KernelLibrary(backend={self.backend!r}, path={str(self.path)!r})"

    def build_info(self) -> dict[str, Any]:
        info: dict[str, Any] = json.loads(self._lib.ra_build_info().decode())
        return info

    def plan(
        self, b: int, h: int, sq: int, sk: int, *, layout: str, rounding: str, **v2: Any
    ) -> dict[str, Any] | None:
        """This library's own plan for the shape on the current device (its ra_plan_launch, so a
        drill or A/B build reports its own rule), None where the library exports no planner.
        `v2`: regress.native.plan.shape_params' ABI v2 keywords (heads_kv, mask, max_seqlen, lse)."""
        if not hasattr(self._lib, "ra_plan_launch"):
            return None
        from regress.native import plan as planning

        if self._planner is None:
            self._planner = planning.Planner(self.backend, self.path)
        cus = (
            torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
            if self.device_type == "cuda"
            else 1
        )
        params = planning.shape_params(b, h, sq, sk, layout=layout, rounding=rounding, **v2)
        return {"backend": self.backend, "compute_units": cus, **self._planner.plan(params, cus).to_dict()}

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
        mask: Mask = "none",
        cu_seqlens_q: torch.Tensor | None = None,
        cu_seqlens_k: torch.Tensor | None = None,
        max_seqlen_q: int = 0,
        max_seqlen_k: int = 0,
        lse: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """O = softmax(scale · Q Kᵀ + mask) V, bf16 in and out, output in q's layout.

        q is [B,Sq,H,D] (bshd) or [B,H,Sq,D] (bhsd), k and v likewise with Sk and H or a divisor of H
        heads (grouped-query); any strides whose last dim is contiguous. With cu_seqlens_q/k (int32,
        B + 1 entries) q, k, v are packed [total, H, D] sequences (FlashAttention's varlen layout).
        `lse`, if given (float32 [B, H, Sq], varlen [H, total_q]), receives each row's log-sum-exp.
        Raises KernelError (with the kernel's message) when the kernel refuses.
        """
        (b, h, sq, sk, d, hk), out = check_call_v2(
            q,
            k,
            v,
            layout=layout,
            rounding=rounding,
            scale=scale,
            out=out,
            device_type=self.device_type,
            backend=self.backend,
            mask=mask,
            cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_k=cu_seqlens_k,
            max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k,
            lse=lse,
        )

        dims = (b, h, sq, sk, d)
        if cu_seqlens_q is None and lse is None:  # dense: the cheap path (host time per call counts)
            v2 = (hk, MASK_CODE[mask], 0, 0, 0, 0, 0, 0)
        else:
            v2 = (
                hk,
                MASK_CODE[mask],
                0,
                0 if cu_seqlens_q is None else cu_seqlens_q.data_ptr(),
                0 if cu_seqlens_k is None else cu_seqlens_k.data_ptr(),
                max_seqlen_q,
                max_seqlen_k,
                0 if lse is None else lse.data_ptr(),
            )
        if self.device_type == "cuda" and q.device.index not in (None, torch.cuda.current_device()):
            with torch.cuda.device(q.device):  # the library launches on the current device
                rc = self._call(q, k, v, out, layout, dims, scale, rounding, stream, v2)
        else:
            rc = self._call(q, k, v, out, layout, dims, scale, rounding, stream, v2)
        if rc != 0:
            text = BUFFERS.err.value.decode(errors="replace")
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
        v2: tuple[int, int, int, int, int, int, int, int],
    ) -> int:
        """One ra_attention_fwd call with the parameter block packed in place (see PARAMS_PACK); a
        CUDA call without a stream goes on torch's current one."""
        if stream is None and self.device_type == "cuda":
            stream = torch.cuda.current_stream().cuda_stream
        buf = BUFFERS
        PARAMS_PACK.pack_into(
            buf.params,
            0,
            RA_ABI_VERSION,
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            out.data_ptr(),
            *dims,
            *bhsd_strides(q, layout),
            *bhsd_strides(k, layout),
            *bhsd_strides(v, layout),
            *bhsd_strides(out, layout),
            0.0 if scale is None else float(scale),  # 0 selects 1/sqrt(head_dim) in the kernel
            ROUNDING_CODE[rounding],
            stream or 0,
            *v2,  # heads_kv, mask, reserved, cu_seqlens_q/k, max_seqlen_q/k, lse
        )
        return int(self._lib.ra_attention_fwd(buf.params_ptr, buf.err, ERR_LEN))


_LIBS: dict[Path, Library] = {}
_LOCK = threading.Lock()


def load_library(path: str | os.PathLike[str]) -> Library:
    """Load (once per resolved path) a kernel library. A gfx942 code object (`.co`, the compile-only
    HIP build) loads as the hip-emu backend: the same interface, run on the CPU emulator."""
    key = Path(path).resolve()
    with _LOCK:
        if key not in _LIBS:
            if key.suffix == ".co":
                from regress.emu.library import EmuLibrary

                _LIBS[key] = EmuLibrary(key)
            else:
                _LIBS[key] = KernelLibrary(key)
        return _LIBS[key]


def backend_for_device(device: torch.device) -> str:
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda" and (gpu := torch_gpu_backend()):
        return gpu
    raise ValueError(f"no kernel backend for device {device}")


_DEFAULT: dict[str, Library] = {}


def default_library(backend: str) -> Library:
    """The library of `backend` built with the default flags (built on first use, then cached)."""
    from regress.native.build import build_kernel

    with _LOCK:
        lib = _DEFAULT.get(backend)
    if lib is None:
        lib = load_library(build_kernel(backend).path)
        with _LOCK:
            _DEFAULT[backend] = lib
    return lib
