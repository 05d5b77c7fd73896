"""`hip-emu`: the gfx942 code object behind the same interface as a built kernel library.

`EmuLibrary.forward` is the host part of kernel/hip/attention_gfx942.hip (`ra_attention_fwd`) written
again in Python: it validates, fills the kernel's argument block (`KernelArgs` in
kernel/hip/parts/dispatch.h, checked against the kernarg size the code object declares), picks the
named kernel of the (rounding, layout) variant, and launches it on the emulator over the tensors'
own memory. The device code is the code object's, unchanged.
"""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path
from typing import Any

import torch

from regress.abi import KernelError, bhsd_strides, check_call
from regress.emu import EMU_VERSION
from regress.emu.codeobject import CodeObject
from regress.emu.machine import Launch, Memory, Trace
from regress.results import ROUNDING_CODE

HEAD_DIM = 128
BLOCK_Q = 256  # kBlockQ, kernel/hip/parts/layout.h
THREADS = 512  # kThreads
GRID_Y_MAX = 65535
LOG2E = 1.4426950408889634
ROUNDING_NAMES = {0: "rtne", 1: "rtna", 2: "rtz"}
# struct KernelArgs: 4 pointers, 4 x int64[3] strides, heads, seqlen_q, seqlen_k, bh_offset (u32),
# scale_log2e (f32), flip_lsb (u32).
KERNEL_ARGS = struct.Struct("<4Q12q4IfI")


def kernel_name(rounding: int, packed: bool) -> str:
    return f"ra_attn_fwd_gfx942_{ROUNDING_NAMES[rounding]}_{'packed' if packed else 'strided'}"


class EmuLibrary:
    """The emulated gfx942 code object as a regress.abi.Library (what regress.loader loads a .co as)."""

    backend = "hip-emu"
    device_type = "cpu"

    def __init__(self, path: str | Path, *, strict: bool = True) -> None:
        self.path = Path(path)
        self.code = CodeObject.load(self.path)
        self.strict = strict
        self._launches = 0
        self._lock = threading.Lock()
        self.last_trace: Trace | None = None
        self.last_kernel: str | None = None

    def __repr__(self) -> str:
        return f"EmuLibrary(path={str(self.path)!r}, sha256={self.code.sha256[:12]})"

    def build_info(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "arch": "gfx942",
            "emulator": EMU_VERSION,
            "code_object_sha256": self.code.sha256,
            "kernels": sorted(self.code.kernels),
        }

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        layout: str = "bshd",
        rounding: str = "rtna",
        scale: float | None = None,
        out: torch.Tensor | None = None,
        stream: int | None = None,
    ) -> torch.Tensor:
        # The same Python-side checks as every backend (regress.abi.check_call), CPU tensors.
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
        if d != HEAD_DIM:
            raise KernelError(f"hip-emu kernel refused the call: head_dim {d} is not supported (only 128)", 3)
        tensors = {"q": q, "k": k, "v": v, "o": out}
        strides = {n: bhsd_strides(t, layout) for n, t in tensors.items()}  # type: ignore[arg-type]
        for n, st in strides.items():
            if st[3] != 1:
                raise KernelError(
                    f"hip-emu kernel refused the call: {n} has head-dim stride {st[3]}, not 1", 5
                )

        code = ROUNDING_CODE[rounding]
        eff_scale = struct.unpack("<f", struct.pack("<f", HEAD_DIM**-0.5 if scale is None else scale))[0]
        scale_log2e = float(eff_scale * LOG2E)
        packed = all(st[2] == HEAD_DIM for st in strides.values())
        kernel = self.code.kernels[kernel_name(code, packed)]
        with self._lock:
            self._launches += 1
            # RA_INJECT_NONDET's host half: odd-numbered launches ask for the flip; only a drill build's
            # device code acts on it (kernel/hip/attention_gfx942.hip, ra_attention_fwd).
            flip = self._launches & 1

        memory = Memory()
        for t in tensors.values():
            st = t.untyped_storage()
            memory.map_host(st.data_ptr(), st.nbytes())
        n_qblocks = -(-sq // BLOCK_Q)
        total = b * h
        trace = Trace()
        for off in range(0, total, GRID_Y_MAX):
            ny = min(GRID_Y_MAX, total - off)
            args = KERNEL_ARGS.pack(
                *(t.data_ptr() for t in tensors.values()),
                *strides["q"][:3],
                *strides["k"][:3],
                *strides["v"][:3],
                *strides["o"][:3],
                h,
                sq,
                sk,
                off,
                scale_log2e,
                flip,
            )
            launch = Launch(kernel, memory, args, strict=self.strict)
            part = launch.run((n_qblocks, ny), THREADS)
            _merge(trace, part)
        self.last_trace = trace
        self.last_kernel = kernel.name
        return out

    def describe(self) -> str:
        return json.dumps(self.build_info())


def _merge(into: Trace, part: Trace) -> None:
    into.issued.update(part.issued)
    for name in (
        "nop_wait_states",
        "lds_bytes",
        "lds_cycles",
        "lds_ideal_cycles",
        "global_bytes_read",
        "global_bytes_written",
        "smem_bytes",
        "waves",
        "active_waves",
        "instructions",
    ):
        setattr(into, name, getattr(into, name) + getattr(part, name))
