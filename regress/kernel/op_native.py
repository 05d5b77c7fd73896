"""The C++ kernels of `torch.ops.regress.*` (kernel/torch/regress_op.cpp): built by
`regress.native.build.build_op`, loaded into torch's dispatcher, and told where the kernel libraries are.

The C++ library registers the CPU, CUDA and autograd kernels of the ops regress/kernel/op.py defines (the
schemas and fake kernels stay in Python). It does not build anything itself: the first call on a
device asks `_resolve` here, through a ctypes callback, for that backend's library, which
`regress.kernel.loader.default_library` builds (or finds in the cache) and loads; the C++ side then dlopens
the same file and calls its `ra_attention_fwd` directly from then on, with no Python in the call.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path
from typing import Any

import torch

from regress.kernel.loader import backend_for_device, default_library
from regress.native.build import BuildError, build_op

RESOLVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
SLOTS = {0: "cpu", 1: "gpu"}  # regress_op.cpp's Slot: the kernel of CPU and of CUDA tensors


class NativeOpUnavailable(RuntimeError):
    """The C++ operator library could not be built or loaded; the message says why."""


def _resolve(slot: int, buf: int, size: int) -> int:
    """Where the kernel library of a slot is: 0 and its path, or 1 and the reason, written to buf.
    (A callback from C: it must not raise, so every failure becomes the op's error message.)"""
    try:
        backend = backend_for_device(torch.device("cpu" if slot == 0 else "cuda"))
        text, rc = str(default_library(backend).path), 0
    except Exception as exc:  # the C++ caller raises this text as the op's RuntimeError
        text, rc = (
            f"regress: no kernel library for {SLOTS.get(slot, slot)} tensors: {type(exc).__name__}: {exc}",
            1,
        )
    data = text.encode(errors="replace")[: size - 1] + b"\0"
    ctypes.memmove(buf, data, len(data))
    return rc


_CALLBACK = RESOLVER(_resolve)  # kept referenced: the C++ library holds its address


def load() -> dict[str, Any]:
    """Build (cached) and load the operator library, once per process; returns what it was built
    against and where it is. Raises NativeOpUnavailable with the reason."""
    try:
        art = build_op()
    except BuildError as exc:
        raise NativeOpUnavailable(f"the C++ operator could not be built: {exc}") from exc
    path = Path(art.path)
    try:
        torch.ops.load_library(str(path))  # type: ignore[no-untyped-call]  # runs its TORCH_LIBRARY_IMPL registrations
        handle = ctypes.CDLL(str(path))  # the same loaded object, for its C entry points
    except (OSError, RuntimeError) as exc:
        raise NativeOpUnavailable(f"the C++ operator {path} could not be loaded: {exc}") from exc
    handle.regress_op_set_resolver.argtypes = [RESOLVER]
    handle.regress_op_set_resolver.restype = None
    handle.regress_op_set_resolver(_CALLBACK)
    handle.regress_op_info.restype = ctypes.c_char_p
    return {**json.loads(handle.regress_op_info().decode()), "path": str(path), "cached": art.cached}
