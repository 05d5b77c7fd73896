"""`hip-emu`: the gfx942 code object behind the same interface as a built kernel library.

`EmuLibrary.forward` does what the host part of kernel/hip/attention_gfx942.hip (`ra_attention_fwd`)
does, through the same planner: it asks the gfx942 planner (kernel/hip/parts/plan.h, built host-only:
regress.plan) for the call's plan with the emulated device's CU count, which validates the call as
the host part does, then runs exactly the launches the plan lists, in order, each with the kernel's
argument block (`KernelArgs` in kernel/hip/parts/dispatch.h, checked against the kernarg size the
code object declares) over the tensors' own memory. The device code is the code object's, unchanged.
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

from regress.emu import EMU_VERSION
from regress.emu.codeobject import CodeObject, CodeObjectError
from regress.emu.machine import Launch, Memory, Trace
from regress.facts.abi import RA_ABI_VERSION, KernelError, Params, bhsd_strides, check_call_v2
from regress.facts.abi import RA_HEAD_DIM as HEAD_DIM
from regress.facts.results import MASK_CODE, ROUNDING_CODE
from regress.native import plan as planning

BLOCK_Q = 256  # kBlockQ, kernel/hip/parts/layout.h (the timing model's geometry)
LOG2E = 1.4426950408889634
ROUNDING_NAMES = {0: "rtne", 1: "rtna", 2: "rtz"}
# struct KernelArgs: 4 pointers, 4 x int64[3] strides, heads, seqlen_q, seqlen_k, bh_offset (u32),
# scale_log2e (f32), flip_lsb (u32), wg_end, qblocks, split_parts, split_tiles (u32), ws (pointer).
KERNEL_ARGS = struct.Struct("<4Q12q4IfI4IQ")
# struct KernelArgsV2 (ABI v2's kernels): KernelArgs, then these: group, mask, bh, reserved (u32), cu_q,
# cu_k, lse (pointers), lse_bstride, lse_hstride (u64).
V2_FIELDS = struct.Struct("<4I5Q")
SPLIT_RECORD = 132  # kSplitRecord, kernel/hip/parts/layout.h: fp32 per partial row
MI300X_CUS = planning.DEFAULT_COMPUTE_UNITS["hip"]  # hipDeviceAttributeMultiprocessorCount on MI300X


@dataclass(frozen=True)
class SplitPlan:
    """Step 10's tail KV-split as the planner chose it: `tail` last q-blocks, `parts` key parts of
    `tiles` key tiles each (all 0: no split)."""

    tail: int
    parts: int
    tiles: int


def tail_split_plan(wgs: int, n_tiles: int, cus: int) -> SplitPlan:
    """The gfx942 planner's tail split for a grid of `wgs` q-blocks of `n_tiles` key tiles on `cus`
    CUs: the planner asked for a call of that many q-blocks (one per head) and key tiles. The split
    depends on these three numbers only (kernel/hip/parts/plan.h, tail_split_plan); the MI300X timing
    model reads its rounds through here."""
    plan = planning.plan_launch("hip", 1, wgs, 1, n_tiles * 64, compute_units=cus)
    return SplitPlan(plan["split_tiles"], plan["tail_splits"], plan["blocks_per_split"])


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
        self.last_plan: dict[str, Any] | None = None

    @property
    def has_tail_split(self) -> bool:
        """Its split kernels are in the code object (every build since step 10; older ones run dense
        plans only: a split plan on them is refused)."""
        return "ra_attn_split_gfx942_strided" in self.code.kernels

    @property
    def has_v2_split(self) -> bool:
        """Its v2 split kernels are in the code object (issue 40's v2 tail split; older ones run a
        gfx942_v2_split plan on none: the planner's plan for them is refused at the launch)."""
        return "ra_attn_v2_split_gfx942_strided" in self.code.kernels

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
        mask: str = "none",
        cu_seqlens_q: torch.Tensor | None = None,
        cu_seqlens_k: torch.Tensor | None = None,
        max_seqlen_q: int = 0,
        max_seqlen_k: int = 0,
        lse: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # The same Python-side checks as every backend (regress.abi.check_call_v2), CPU tensors.
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
        tensors = {"q": q, "k": k, "v": v, "o": out}
        strides = {n: bhsd_strides(t, layout) for n, t in tensors.items()}  # type: ignore[arg-type]
        params = Params()
        params.abi_version = RA_ABI_VERSION
        params.q, params.k, params.v, params.o = (t.data_ptr() for t in tensors.values())
        params.batch, params.heads, params.seqlen_q, params.seqlen_k, params.head_dim = b, h, sq, sk, d
        params.heads_kv, params.mask = hk, MASK_CODE[mask]
        extra = [t for t in (cu_seqlens_q, cu_seqlens_k, lse) if t is not None]  # more device memory
        if cu_seqlens_q is not None and cu_seqlens_k is not None:
            params.cu_seqlens_q, params.cu_seqlens_k = cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()
            params.max_seqlen_q, params.max_seqlen_k = max_seqlen_q, max_seqlen_k
        if lse is not None:
            params.lse = lse.data_ptr()
        for n, st in strides.items():
            getattr(params, f"{n}_stride")[:] = st
        params.scale = 0.0 if scale is None else effective_scale(scale)
        params.rounding = ROUNDING_CODE[rounding]
        # The plan validates the call as ra_attention_fwd does (ra_validate_params and the grid limits).
        planner = planning.planner("hip")
        try:
            plan = planner.plan(params, self.cus)
        except KernelError as e:
            raise KernelError(f"hip-emu kernel refused the call: {e}", e.code) from None
        launches = planner.launches(params, plan)
        # The kernels' argument block comes from the params they run: a GQA decode's dense view
        # (kernel/common/gqa_rows.h), as the host part fills it.
        run = planner.view(params)
        missing = sorted({la.kernel for la in launches} - set(self.code.kernels))
        if missing:
            raise KernelError(
                f"{self.path}: the plan {plan.kind.decode()} launches {', '.join(missing)}, "
                "which this code object lacks",
                8,
            )
        scale_log2e = float(effective_scale(scale) * LOG2E)
        with self._lock:
            self._launches += 1
            # RA_INJECT_NONDET's host half: odd-numbered launches ask for the flip; only a drill build's
            # device code acts on it (kernel/hip/attention_gfx942.hip, ra_attention_fwd).
            flip = self._launches & 1

        memory = Memory()
        for t in (*tensors.values(), *extra):
            storage = t.untyped_storage()
            memory.map_host(storage.data_ptr(), storage.nbytes())
        ws_ptr = 0
        if plan.workspace_bytes:
            ws = torch.empty(plan.workspace_bytes // 4, dtype=torch.float32)
            memory.map_host(ws.untyped_storage().data_ptr(), ws.untyped_storage().nbytes())
            ws_ptr = ws.data_ptr()

        trace = Trace()
        for la in launches:  # the plan's launches in issue order (one stream: each after the last)
            args = KERNEL_ARGS.pack(
                *(t.data_ptr() for t in tensors.values()),
                *run.q_stride[:3],
                *run.k_stride[:3],
                *run.v_stride[:3],
                *run.o_stride[:3],
                run.heads,
                run.seqlen_q,
                run.seqlen_k,
                la.bh_offset,
                scale_log2e,
                flip,
                la.wg_end,
                la.qblocks,
                la.split_parts,
                la.split_tiles,
                ws_ptr,
            )
            if la.kernel.startswith("ra_attn_v2_"):  # KernelArgsV2: the v2 fields after the block
                args += V2_FIELDS.pack(
                    h // hk,
                    params.mask,
                    b * h,
                    0,
                    params.cu_seqlens_q or 0,
                    params.cu_seqlens_k or 0,
                    params.lse or 0,
                    0 if cu_seqlens_q is not None else h * sq,
                    sq,
                )
            part = Launch(self.code.kernels[la.kernel], memory, args, strict=self.strict)
            _merge(trace, part.run(la.grid[:2], plan.threads))
        self.last_plan = plan.to_dict()
        # The (rounding, layout) variant's kernel, also where every q-block ran split.
        kernel = next((la.kernel for la in launches if la.role == "dense"), None)
        self.last_kernel = kernel or kernel_name(params.rounding, launches[0].kernel.endswith("_packed"))
        self.last_trace = trace
        return out

    def plan(
        self, b: int, h: int, sq: int, sk: int, *, layout: str, rounding: str, **v2: Any
    ) -> dict[str, Any] | None:
        """The gfx942 planner's plan for the shape on the emulated device's CUs (what forward runs);
        `v2`: regress.plan.shape_params' ABI v2 keywords."""
        params = planning.shape_params(b, h, sq, sk, layout=layout, rounding=rounding, **v2)
        plan = planning.planner("hip").plan(params, self.cus)
        return {"backend": "hip", "compute_units": self.cus, **plan.to_dict()}

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
