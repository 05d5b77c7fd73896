"""Predicted MI300X times of whole attention calls, from the CDNA3 timing model (regress.emu.timing).

A `KernelModel` says which launches one call makes for a shape and mode (a `Launch`: its grid, key
tiles per workgroup, bytes, and how to record one CU's resident workgroups in the emulator). The
prediction simulates each distinct launch kind once per parameter set (two short emulated runs, see
timing.steady_state), caches it, and extrapolates it over every shape's grid. All figures here are
*predicted*, never measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from regress.emu import timing
from regress.emu.cdna3 import C
from regress.emu.codeobject import Kernel
from regress.emu.library import BLOCK_Q, HEAD_DIM, EmuLibrary
from regress.emu.timing import Grid, LaunchTime, RecordT, SteadyState

MODES = ("rtne", "rtna", "rtz")


@dataclass(frozen=True)
class Shape:
    b: int
    h: int
    sq: int
    sk: int
    hkv: int
    d: int = HEAD_DIM

    @classmethod
    def parse(cls, text: str) -> Shape:
        """'B,H,Sq,Sk[,Hkv]'."""
        try:
            parts = [int(x) for x in text.split(",")]
        except ValueError:
            raise ValueError(f"shape {text!r} is not B,H,Sq,Sk[,Hkv] integers") from None
        if len(parts) not in (4, 5) or min(parts) < 1:
            raise ValueError(f"shape {text!r} is not B,H,Sq,Sk[,Hkv] with positive sizes")
        b, h, sq, sk = parts[:4]
        hkv = parts[4] if len(parts) == 5 else h
        if h % hkv:
            raise ValueError(f"shape {text!r}: H={h} is not a multiple of Hkv={hkv}")
        return cls(b, h, sq, sk, hkv)

    @property
    def flops(self) -> float:
        return 4.0 * self.b * self.h * self.sq * self.sk * self.d

    def bytes_qkvo(self, elem: int = 2) -> float:
        return float(elem * self.d * (2 * self.b * self.h * self.sq + 2 * self.b * self.hkv * self.sk))


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a call. `key` names its steady state (same key, same simulation)."""

    key: str
    grid: Grid
    record: Callable[[int], tuple[Kernel, list[list[RecordT]]]]
    tiles: tuple[int, int] = (2, 4)  # the two key-tile counts simulated for the steady state


class KernelModel(Protocol):
    name: str

    def launches(self, shape: Shape, mode: str) -> list[Launch]: ...


@dataclass
class Prediction:
    kernel: str
    shape: Shape
    mode: str
    ms: float
    bound: str
    mfma_busy: float  # time-weighted over the launches
    launches: list[LaunchTime] = field(default_factory=list)


class Predictor:
    """Caches steady states per (kernel model, launch key, parameter set)."""

    def __init__(self, params: dict[str, float] | None = None) -> None:
        self.params = dict(params or {})
        self._steady: dict[tuple[str, str, tuple[tuple[str, float], ...]], SteadyState] = {}
        self._records: dict[tuple[str, str, int], tuple[Kernel, list[list[RecordT]]]] = {}

    def _key(self) -> tuple[tuple[str, float], ...]:
        return tuple(sorted(self.params.items()))

    def steady(self, model: str, launch: Launch) -> SteadyState:
        k = (model, launch.key, self._key())
        if k not in self._steady:

            def rec(n: int) -> tuple[Kernel, list[list[RecordT]]]:
                rk = (model, launch.key, n)
                if rk not in self._records:  # emulation is the slow part: once per parameter sweep
                    self._records[rk] = launch.record(n)
                return self._records[rk]

            self._steady[k] = timing.steady_state(rec, launch.tiles, self.params)
        return self._steady[k]

    def predict(self, model: KernelModel, shape: Shape, mode: str) -> Prediction:
        times = []
        for la in model.launches(shape, mode):
            st = self.steady(model.name, la)
            times.append(timing.launch_time(la.grid, st, params=self.params))
        ms = sum(t.ms for t in times)
        bound = max(times, key=lambda t: t.ms).bound if times else "compute"
        busy = sum(t.mfma_busy * t.compute_ms for t in times) / ms if ms else 0.0
        return Prediction(model.name, shape, mode, ms, bound, busy, times)


# --- our kernel -------------------------------------------------------------------------------------

KEYS_PER_TILE = 64  # kBlockK, kernel/hip/parts/layout.h


class Ours:
    """Our gfx942 code object, BSHD (the strided variant, as the peers' published rows are BSHD)."""

    name = "ours"

    def __init__(self, code_object: str | Path, layout: str = "bshd") -> None:
        self.lib = EmuLibrary(code_object, record=True)
        self.layout = layout

    def _record(self, mode: str, n: int) -> tuple[Kernel, list[list[RecordT]]]:
        occ = timing.occupancy(next(iter(self.lib.code.kernels.values())), 512)
        rows = BLOCK_Q * occ.wgs_per_cu  # one CU's resident workgroups: that many query blocks
        g = torch.Generator().manual_seed(0)
        sk = KEYS_PER_TILE * n
        if self.layout == "bshd":  # two heads make the rows strided; head 0's views are the call
            q = torch.randn((1, rows, 2, HEAD_DIM), generator=g).to(torch.bfloat16)[:, :, :1]
            k = torch.randn((1, sk, 2, HEAD_DIM), generator=g).to(torch.bfloat16)[:, :, :1]
            v = torch.randn((1, sk, 2, HEAD_DIM), generator=g).to(torch.bfloat16)[:, :, :1]
        else:
            q = torch.randn((1, 1, rows, HEAD_DIM), generator=g).to(torch.bfloat16)
            k = torch.randn((1, 1, sk, HEAD_DIM), generator=g).to(torch.bfloat16)
            v = torch.randn((1, 1, sk, HEAD_DIM), generator=g).to(torch.bfloat16)
        self.lib.forward(q, k, v, layout=self.layout, rounding=mode)  # type: ignore[arg-type]
        assert self.lib.last_kernel is not None
        return self.lib.code.kernels[self.lib.last_kernel], self.lib.last_records

    def launches(self, shape: Shape, mode: str) -> list[Launch]:
        if shape.hkv != shape.h:
            raise ValueError("our kernel has no grouped-query mode (Hkv must equal H)")
        wgs = shape.b * shape.h * math.ceil(shape.sq / BLOCK_Q)
        tiles = math.ceil(shape.sk / KEYS_PER_TILE)
        kv_tile = 2 * KEYS_PER_TILE * shape.d * 2
        q_o = 2 * BLOCK_Q * shape.d * 2
        grid = Grid("main", wgs, tiles, shape.bytes_qkvo(), float(wgs * (tiles * kv_tile + q_o)), shape.flops)
        return [Launch(f"main-{mode}-{self.layout}", grid, lambda n: self._record(mode, n))]


def tflops(shape: Shape, ms: float) -> float:
    return shape.flops / (ms * 1e-3) / 1e12


def peak_tflops() -> float:
    return C["cus"] * C["clock_ghz"] * 1e9 * 2048 / 1e12
