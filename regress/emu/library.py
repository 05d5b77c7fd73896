"""`hip-emu`: the gfx942 code object behind the same interface as a built kernel library.

`EmuLibrary.forward` is the host part of kernel/hip/attention_gfx942.hip (`ra_attention_fwd`) written
again in Python: it validates, fills the kernel's argument block (`KernelArgs` in
kernel/hip/parts/dispatch.h, checked against the kernarg size the code object declares), picks the
named kernel of the (rounding, layout) variant, and launches it on the emulator over the tensors'
own memory. The device code is the code object's, unchanged.
"""

from __future__ import annotations

import json
import math
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from regress.abi import KernelError, bhsd_strides, check_call, refuse_unsupported
from regress.emu import EMU_VERSION
from regress.emu.codeobject import CodeObject, CodeObjectError
from regress.emu.machine import Launch, Memory, Trace
from regress.results import ROUNDING_CODE

HEAD_DIM = 128
BLOCK_Q = 256  # kBlockQ, kernel/hip/parts/layout.h
THREADS = 512  # kThreads
GRID_Y_MAX = 65535
LOG2E = 1.4426950408889634
ROUNDING_NAMES = {0: "rtne", 1: "rtna", 2: "rtz"}
# struct KernelArgs: 4 pointers, 4 x int64[3] strides, heads, seqlen_q, seqlen_k, bh_offset (u32),
# scale_log2e (f32), flip_lsb (u32), wg_end, qblocks, split_parts, split_tiles (u32), ws (pointer).
KERNEL_ARGS = struct.Struct("<4Q12q4IfI4IQ")
BLOCK_K = 64  # kBlockK
SPLIT_RECORD = 132  # kSplitRecord, kernel/hip/parts/dispatch.h: fp32 per partial row
SPLIT_MIN_TILES = 8  # kSplitMinTiles, kernel/hip/parts/layout.h
SPLIT_MAX_PARTS = 2048  # kSplitMaxParts
MI300X_CUS = 304  # what hipDeviceAttributeMultiprocessorCount reports on MI300X
NO_SPLIT = 0xFFFFFFFF


@dataclass(frozen=True)
class SplitPlan:
    """Step 10's tail KV-split: `tail` last q-blocks, `parts` key parts of `tiles` key tiles each."""

    tail: int
    parts: int
    tiles: int


def tail_split_plan(wgs: int, n_tiles: int, cus: int) -> SplitPlan:
    """tail_split_plan of kernel/hip/parts/layout.h (the host part's rule; the cost model is stated
    there), the same integers: the last partial round's q-blocks split by key range."""
    plan = SplitPlan(0, 0, 0)
    if cus <= 0 or n_tiles < SPLIT_MIN_TILES or wgs <= 0 or wgs % cus == 0:
        return plan
    tail = wgs % cus
    best = n_tiles
    for p in range(2, min(n_tiles, cus, SPLIT_MAX_PARTS // tail) + 1):
        tiles = -(-n_tiles // p)
        cost = -(-(tail * p) // cus) * (tiles + 1) + -(-(tail * p) // 256)
        if cost < best:
            best, plan = cost, SplitPlan(tail, -(-n_tiles // tiles), tiles)
    return plan


def _f32(x: float) -> float:
    """`x` as a C float: rounded to nearest, inf past the float range (as the C cast; "<f" would raise)."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def effective_scale(scale: float | None) -> float:
    """ra_effective_scale (kernel/common/validate.h): the scale as the params' float, 1/sqrt(128) unless
    that float is positive and below 3.0e38f (a tiny scale rounds to 0, a huge one to inf: both default)."""
    f = 0.0 if scale is None else _f32(scale)
    return f if 0.0 < f < _f32(3.0e38) else _f32(HEAD_DIM**-0.5)


def kernel_name(rounding: int, packed: bool) -> str:
    return f"ra_attn_fwd_gfx942_{ROUNDING_NAMES[rounding]}_{'packed' if packed else 'strided'}"


class EmuLibrary:
    """The emulated gfx942 code object as a regress.abi.Library (what regress.loader loads a .co as)."""

    backend = "hip-emu"
    device_type = "cpu"

    def __init__(self, path: str | Path, *, strict: bool = True, cus: int = MI300X_CUS) -> None:
        self.path = Path(path)
        # The emulated device's CU count: what the host part's split rule reads from the device.
        self.cus = cus
        self.code = CodeObject.load(self.path)
        missing = [
            kernel_name(r, packed)
            for r in ROUNDING_NAMES
            for packed in (True, False)
            if kernel_name(r, packed) not in self.code.kernels
        ]
        if missing:  # another kernel's code object (a peer's, a test's): say so now, not at a launch
            raise CodeObjectError(
                f"{self.path}: not our attention code object: it lacks {', '.join(missing)}"
            )
        self.strict = strict
        self._launches = 0
        self._lock = threading.Lock()
        self.last_trace: Trace | None = None
        self.last_kernel: str | None = None

    @property
    def has_tail_split(self) -> bool:
        """A build with RA_HIP_TAIL_SPLIT (step 10): its split and merge kernels are in the code object."""
        return "ra_attn_split_gfx942_strided" in self.code.kernels

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
        **v2: Any,  # ABI v2's mask, cu_seqlens_q/k, max_seqlen_q/k, lse: refused until the kernel has them
    ) -> torch.Tensor:
        refuse_unsupported(self.backend, q, k, layout, **v2)  # ra_require_dense_v1, as the C host code
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
        if min(b, h, sq, sk) < 1:  # ra_validate_params (kernel/common/validate.h) refuses these too
            raise KernelError(
                f"hip-emu kernel refused the call: shape B={b} H={h} Sq={sq} Sk={sk}: "
                "every size must be >= 1",
                3,
            )
        tensors = {"q": q, "k": k, "v": v, "o": out}
        strides = {n: bhsd_strides(t, layout) for n, t in tensors.items()}  # type: ignore[arg-type]
        for n, st in strides.items():
            if st[3] != 1:
                raise KernelError(
                    f"hip-emu kernel refused the call: {n} has head-dim stride {st[3]}, not 1", 5
                )

        code = ROUNDING_CODE[rounding]
        scale_log2e = float(effective_scale(scale) * LOG2E)
        packed = all(st[2] == HEAD_DIM for st in strides.values())
        kernel = self.code.kernels[kernel_name(code, packed)]
        lay = "packed" if packed else "strided"
        split_name = f"ra_attn_split_gfx942_{lay}"
        has_split = self.has_tail_split
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
        plan = SplitPlan(0, 0, 0)
        if has_split:
            plan = tail_split_plan(n_qblocks * total, -(-sk // BLOCK_K), self.cus)
        wg_end, ws_ptr = NO_SPLIT, 0
        if plan.tail:
            ws = torch.empty(plan.tail * plan.parts * BLOCK_Q * SPLIT_RECORD, dtype=torch.float32)
            memory.map_host(ws.untyped_storage().data_ptr(), ws.untyped_storage().nbytes())
            wg_end, ws_ptr = n_qblocks * total - plan.tail, ws.data_ptr()

        def args(off: int) -> bytes:
            return KERNEL_ARGS.pack(
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
                wg_end,
                n_qblocks,
                plan.parts,
                plan.tiles,
                ws_ptr,
            )

        trace = Trace()
        # With a split tail the dense grid stops at the (batch, head) row holding q-block wg_end - 1.
        dense_rows = -(-wg_end // n_qblocks) if plan.tail else total
        for off in range(0, dense_rows, GRID_Y_MAX):
            ny = min(GRID_Y_MAX, dense_rows - off)
            part = Launch(kernel, memory, args(off), strict=self.strict).run((n_qblocks, ny), THREADS)
            _merge(trace, part)
        if plan.tail:  # step 10: the split parts, then the merge (both ordered after the dense grid)
            split = self.code.kernels[split_name]
            _merge(
                trace,
                Launch(split, memory, args(0), strict=self.strict).run((plan.parts, plan.tail), THREADS),
            )
            merge = self.code.kernels[f"ra_attn_merge_gfx942_{ROUNDING_NAMES[code]}_{lay}"]
            _merge(
                trace,
                Launch(merge, memory, args(0), strict=self.strict).run((BLOCK_Q // 16, plan.tail), THREADS),
            )
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
