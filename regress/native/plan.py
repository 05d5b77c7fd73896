"""The launch planners through the ABI (issue 37): which kernels a GPU backend runs for a shape.

Each GPU backend has one planner in C++ (kernel/hip/parts/plan.h, kernel/cuda/plan.h) that its own
launch code calls; `build.build_planner` makes it a host-only library with the system C++ compiler,
and this module asks it through `ra_plan_launch`. So the emulator, the suites that record the plan
of each result, `regress plan` and the benchmarks run the rule the kernel runs, never a copy.
The gfx942 planner also lists its launches in issue order (`ra_gfx942_launch_at`): the emulator runs
exactly those.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from regress.facts.abi import (
    ERR_LEN,
    RA_ABI_VERSION,
    RA_HEAD_DIM,
    DeviceFacts,
    KernelError,
    LaunchPlan,
    Params,
)
from regress.facts.results import LAYOUTS, MASK_CODE, ROUNDING_CODE
from regress.native.build import PLANNERS, build_planner

# What the device reports as its compute units (hipDeviceAttributeMultiprocessorCount, the SM count),
# for a plan asked without a device: MI300X and H200.
DEFAULT_COMPUTE_UNITS = {"hip": 304, "cuda": 132}
# Backends whose built library exports ra_plan_launch: the result records the plan of these.
PLANNED_BACKENDS = tuple(PLANNERS)
KERNEL_NAME_LEN = 48  # RA_GFX942_KERNEL_NAME_LEN, kernel/hip/parts/plan.h
ROLES = {0: "dense", 1: "split", 2: "merge"}  # ra_gfx942_role
_FAKE_POINTER = 1 << 16  # 16-byte aligned, never read: the planner touches no memory


class Gfx942Launch(ctypes.Structure):
    # Mirrors ra_gfx942_launch (kernel/hip/parts/plan.h).
    _fields_ = [
        ("role", ctypes.c_int32),
        ("kernel", ctypes.c_char * KERNEL_NAME_LEN),
        ("grid", ctypes.c_uint32 * 3),
        ("bh_offset", ctypes.c_uint32),
        ("wg_end", ctypes.c_uint32),
        ("qblocks", ctypes.c_uint32),
        ("split_parts", ctypes.c_uint32),
        ("split_tiles", ctypes.c_uint32),
    ]


@dataclass(frozen=True)
class Launch:
    """One launch of a gfx942 plan: its kernel, grid and the argument-block fields the plan sets."""

    role: str
    kernel: str
    grid: tuple[int, int, int]
    bh_offset: int
    wg_end: int
    qblocks: int
    split_parts: int
    split_tiles: int


def _call(fn: Any, *args: Any) -> None:
    err = ctypes.create_string_buffer(ERR_LEN)
    status = fn(*args, err, ERR_LEN)
    if status != 0:
        raise KernelError(err.value.decode(errors="replace") or f"ra_plan_launch returned {status}", status)


class Planner:
    """One backend's planner library, loaded."""

    def __init__(self, backend: str, path: Path) -> None:
        self.backend, self.path = backend, path
        self._lib = ctypes.CDLL(str(path))
        self._lib.ra_plan_launch.restype = ctypes.c_int
        self._lib.ra_plan_launch.argtypes = [
            ctypes.POINTER(Params),
            ctypes.POINTER(DeviceFacts),
            ctypes.POINTER(LaunchPlan),
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        self._launch_at = getattr(self._lib, "ra_gfx942_launch_at", None)
        if self._launch_at is not None:
            self._launch_at.restype = ctypes.c_int
            self._launch_at.argtypes = [
                ctypes.POINTER(Params),
                ctypes.POINTER(LaunchPlan),
                ctypes.c_int64,
                ctypes.POINTER(Gfx942Launch),
            ]

        self._view = getattr(self._lib, "ra_gqa_rows_view_c", None)
        if self._view is not None:
            self._view.restype = ctypes.c_int
            self._view.argtypes = [ctypes.POINTER(Params), ctypes.POINTER(Params)]

    def view(self, params: Params) -> Params:
        """The params the backend's kernels run for `params`: a GQA call's dense view where
        kernel/common/gqa_rows.h takes one (the gfx942 planner exports it), else `params` itself."""
        out = Params()
        if self._view is not None and self._view(ctypes.byref(params), ctypes.byref(out)):
            return out
        return params

    @property
    def lists_launches(self) -> bool:
        """Whether the planner lists its launches (the gfx942 one does)."""
        return self._launch_at is not None

    def plan(self, params: Params, compute_units: int, max_workspace_bytes: int = 0) -> LaunchPlan:
        """ra_plan_launch: the plan, or KernelError with the planner's own one-line message."""
        out = LaunchPlan()
        facts = DeviceFacts(compute_units, max_workspace_bytes)
        _call(self._lib.ra_plan_launch, ctypes.byref(params), ctypes.byref(facts), ctypes.byref(out))
        return out

    def launches(self, params: Params, plan: LaunchPlan) -> list[Launch]:
        """The plan's launches in issue order (the gfx942 planner; others have no such list)."""
        if self._launch_at is None:
            raise KernelError(f"the {self.backend} planner does not list its launches", 8)
        out: list[Launch] = []
        one = Gfx942Launch()
        while self._launch_at(ctypes.byref(params), ctypes.byref(plan), len(out), ctypes.byref(one)):
            out.append(
                Launch(
                    ROLES.get(one.role, str(one.role)),
                    one.kernel.decode(),
                    (one.grid[0], one.grid[1], one.grid[2]),
                    one.bh_offset,
                    one.wg_end,
                    one.qblocks,
                    one.split_parts,
                    one.split_tiles,
                )
            )
        return out


@functools.cache
def planner(backend: str, cache_dir: Path | None = None) -> Planner:
    """The backend's planner, built once per process (build.BuildError when it has none)."""
    return Planner(backend, build_planner(backend, cache_dir=cache_dir).path)


def shape_params(
    b: int,
    h: int,
    sq: int,
    sk: int,
    *,
    layout: str = "bshd",
    rounding: str = "rtne",
    heads_kv: int = 0,
    mask: str = "none",
    max_seqlen: tuple[int, int] | None = None,
    lse: bool = False,
) -> Params:
    """An ra_attention_params of contiguous tensors of this shape whose pointers are never read.

    ABI v2: `heads_kv` K/V heads (0: h), the mask, `max_seqlen` = (max q, max k) for a varlen call of
    b packed sequences whose totals are sq and sk ([total, H, D], batch stride 0), and an LSE. The
    planner reads no cu_seqlens (they live in device memory), so they are never-read pointers too."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    if rounding not in ROUNDING_CODE:
        raise ValueError(f"rounding {rounding!r} is not one of {', '.join(ROUNDING_CODE)}")
    if mask not in MASK_CODE:
        raise ValueError(f"mask {mask!r} is not one of {', '.join(MASK_CODE)}")
    d = RA_HEAD_DIM
    hk = heads_kv or h
    p = Params()
    p.abi_version = RA_ABI_VERSION
    p.q = p.k = p.v = p.o = _FAKE_POINTER
    p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.head_dim = b, h, sq, sk, d
    p.heads_kv, p.mask = hk, MASK_CODE[mask]
    for name, s, n in (("q_stride", sq, h), ("k_stride", sk, hk), ("v_stride", sk, hk), ("o_stride", sq, h)):
        # (batch, head, seq, dim) element strides of [B,S,H,D] or [B,H,S,D]; varlen: [total, H, D]
        if max_seqlen is not None:
            st: tuple[int, ...] = (0, d, n * d, 1)
        else:
            st = (s * n * d, d, n * d, 1) if layout == "bshd" else (n * s * d, s * d, d, 1)
        getattr(p, name)[:] = st
    if max_seqlen is not None:
        p.cu_seqlens_q = p.cu_seqlens_k = _FAKE_POINTER
        p.max_seqlen_q, p.max_seqlen_k = max_seqlen
    if lse:
        p.lse = _FAKE_POINTER
    p.scale = 0.0
    p.rounding = ROUNDING_CODE[rounding]
    return p


def plan_launch(
    backend: str,
    b: int,
    h: int,
    sq: int,
    sk: int,
    *,
    compute_units: int | None = None,
    layout: str = "bshd",
    rounding: str = "rtne",
    max_workspace_bytes: int = 0,
    cache_dir: Path | None = None,
    heads_kv: int = 0,
    mask: str = "none",
    max_seqlen: tuple[int, int] | None = None,
    lse: bool = False,
) -> dict[str, Any]:
    """The backend's plan for a shape on a device of `compute_units` (default: MI300X's 304 CUs,
    H200's 132 SMs), as plain data; with the launches for the gfx942 planner. The ABI v2 keywords
    are shape_params'."""
    cus = DEFAULT_COMPUTE_UNITS.get(backend, 0) if compute_units is None else compute_units
    p = planner(backend, cache_dir)
    params = shape_params(
        b,
        h,
        sq,
        sk,
        layout=layout,
        rounding=rounding,
        heads_kv=heads_kv,
        mask=mask,
        max_seqlen=max_seqlen,
        lse=lse,
    )
    plan = p.plan(params, cus, max_workspace_bytes)
    launches = p.launches(params, plan) if p.lists_launches else []
    out = {"backend": backend, "compute_units": cus, **plan.to_dict()}
    view = p.view(params)
    if view is not params:  # the kernels run a GQA call's dense view (kernel/common/gqa_rows.h)
        out["runs_as"] = {
            "batch": view.batch,
            "heads": view.heads,
            "seqlen_q": view.seqlen_q,
            "seqlen_k": view.seqlen_k,
        }
    if launches:
        out["launches"] = [{"role": la.role, "kernel": la.kernel, "grid": list(la.grid)} for la in launches]
    return out


def summary(plan: dict[str, Any]) -> dict[str, Any]:
    """What a result records of the plan that ran: its kind and split counts."""
    return {
        "plan_kind": plan["kind"],
        "plan_splits": plan["splits"],
        "plan_tail_splits": plan["tail_splits"],
    }
