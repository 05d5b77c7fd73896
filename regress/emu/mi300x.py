"""Predicted MI300X times of whole attention calls, from the CDNA3 timing model (regress.emu.timing).

A `KernelModel` says which launches one call makes for a shape and mode (a `Launch`: its grid, key
tiles per workgroup, bytes, and how to record one CU's resident workgroups in the emulator). The
prediction simulates each distinct launch kind once per parameter set (two short emulated runs, see
timing.steady_state), caches it, and extrapolates it over every shape's grid. All figures here are
*predicted*, never measured.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch

from regress.emu import timing
from regress.emu.cdna3 import C
from regress.emu.codeobject import Kernel
from regress.emu.library import BLOCK_Q, SPLIT_RECORD, EmuLibrary, SplitPlan, tail_split_plan
from regress.emu.machine import recording
from regress.emu.timing import Grid, LaunchTime, RecordT, SteadyState
from regress.facts import cases
from regress.facts.abi import RA_HEAD_DIM as HEAD_DIM
from regress.native import plan as planning


@dataclass(frozen=True)
class Shape:
    b: int
    h: int
    sq: int
    sk: int
    hkv: int
    d: int = HEAD_DIM
    causal: bool = False  # the bottom-right causal mask
    lens: tuple[int, ...] = ()  # varlen: per-sequence lengths (Sq = Sk each); b = len, sq = sk = max
    lse: bool = False  # the call asks for the LSE (ours: a v2 call; the peers' timing ignores it)

    @classmethod
    def parse(cls, text: str) -> Shape:
        """'B,H,Sq,Sk[,Hkv][,causal][,lse]', or varlen 'H[,Hkv],lens=L1/L2/...[,causal][,lse]'."""
        tokens = [t.strip() for t in text.split(",")]
        causal = "causal" in tokens
        lse = "lse" in tokens
        lens_tok = [t for t in tokens if t.startswith("lens=")]
        rest = [t for t in tokens if t not in ("causal", "lse") and not t.startswith("lens=")]
        try:
            parts = [int(x) for x in rest]
            lens = tuple(int(x) for x in lens_tok[0][5:].split("/")) if lens_tok else ()
        except ValueError:
            raise ValueError(
                f"shape {text!r} is not B,H,Sq,Sk[,Hkv][,causal] or H[,Hkv],lens=L1/L2/..[,causal] integers"
            ) from None
        if len(lens_tok) > 1 or (lens_tok and (len(parts) not in (1, 2) or not lens)):
            raise ValueError(f"shape {text!r}: varlen is H[,Hkv],lens=L1/L2/...[,causal]")
        if lens:
            if min(parts + list(lens)) < 1:
                raise ValueError(f"shape {text!r}: sizes must be positive")
            h = parts[0]
            hkv = parts[1] if len(parts) == 2 else h
            if h % hkv:
                raise ValueError(f"shape {text!r}: H={h} is not a multiple of Hkv={hkv}")
            return cls(len(lens), h, max(lens), max(lens), hkv, causal=causal, lens=lens, lse=lse)
        if len(parts) not in (4, 5) or min(parts) < 1:
            raise ValueError(f"shape {text!r} is not B,H,Sq,Sk[,Hkv][,causal] with positive sizes")
        b, h, sq, sk = parts[:4]
        hkv = parts[4] if len(parts) == 5 else h
        if h % hkv:
            raise ValueError(f"shape {text!r}: H={h} is not a multiple of Hkv={hkv}")
        return cls(b, h, sq, sk, hkv, causal=causal, lse=lse)

    def seqs(self) -> list[tuple[int, int]]:
        """(Sq, Sk) of every sequence."""
        return [(n, n) for n in self.lens] if self.lens else [(self.sq, self.sk)] * self.b

    def catalogue(self) -> cases.Shape:
        """This shape as the case catalogue states it (regress.cases.Shape), whose FLOP and byte
        formulas are the only ones: a causal mask here is the bottom-right one."""
        mask = "causal_bottom_right" if self.causal else "none"
        if self.lens:
            return cases.Shape.varlen(self.h, [(n, n) for n in self.lens], hkv=self.hkv, mask=mask)
        return cases.Shape(self.b, self.h, self.sq, self.sk, d=self.d, hkv=self.hkv, mask=mask)

    @property
    def flops(self) -> float:
        """Of the unmasked scores (regress.cases.Shape.flops)."""
        return float(self.catalogue().flops)

    def bytes_qkvo(self) -> float:
        """bf16 Q, K, V read once, O written once (regress.cases.Shape.min_bytes)."""
        return float(self.catalogue().min_bytes)

    @property
    def plain(self) -> bool:
        """A dense batch without mask: what our kernel and MoonMath take."""
        return not self.causal and not self.lens


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a call. `key` names its steady state (same key, same simulation)."""

    key: str
    grid: Grid
    # How to record one CU's resident workgroups with n key tiles each; None: timed by its bandwidth
    # bounds alone (a small memory-bound kernel).
    record: Callable[[int], tuple[Kernel, list[list[RecordT]]]] | None
    # The two key-tile counts simulated for the steady state; None: a kernel without a key loop
    # (one round of its resident workgroups is simulated, record(0)).
    tiles: tuple[int, int] | None = (2, 4)
    # For code that rescales only when a running row max rises: record(n) with inputs on which every
    # key tile raises every row's max (record itself samples inputs on which none after the first does).
    rise_record: Callable[[int], tuple[Kernel, list[list[RecordT]]]] | None = None


def sample_qkv(
    rows: int, keys: int, block: int, rising: bool, layout: str = "bshd", heads: int = 1
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inputs of a steady-state sample, one generator for every kernel. q = |N(0,1)|, k and v
    N(0,1), and key 0 is 3.0 in every dimension, so it holds every row's maximum score by a wide
    margin: no later key tile raises a running max (a long sequence's steady state, where a rise is
    rare). With `rising`, the first key of every `block`-key tile is 3.0 x (tile + 1) instead, so every
    tile raises every row's max. Control flow of the three kernels depends on nothing else."""
    g = torch.Generator().manual_seed(0)

    def shape(n: int) -> tuple[int, ...]:
        return (1, n, heads, HEAD_DIM) if layout == "bshd" else (1, heads, n, HEAD_DIM)

    q = torch.randn(shape(rows), generator=g).abs()
    k = torch.randn(shape(keys), generator=g)
    v = torch.randn(shape(keys), generator=g)
    ks = k[0, :, 0] if layout == "bshd" else k[0, 0]
    for t in range(0, keys if rising else 1, block):
        ks[t] = 3.0 * (t // block + 1)
    return q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)


def block_rows(sq: int, block: int) -> int:
    """Query rows each q-block of a `block`-row kernel holds when a sequence is shorter than one
    block (a decode, a GQA decode's rows): the steady state is sampled on that many rows, for every
    kernel alike, since a kernel may skip the waves or tiles that hold none (ours does). Longer
    sequences are sampled on full blocks (their one partial block is not modelled)."""
    return sq if sq < block else block


def rows_key(rows: int, block: int) -> str:
    """The suffix a steady state's key gets when it is sampled on fewer rows than a full block."""
    return f"-rows{rows}" if rows < block else ""


# Keys the rise-rate sample may hold (~6 GiB at 2**21): 16x the longest published row (131072).
MAX_SAMPLED_KEYS = 2**21


@functools.cache
def rise_rate(tiles: int, group_rows: int = 16, block: int = 64) -> float:
    """Share of key tiles 2..`tiles` on which some row of a `group_rows`-row group sees a block max at
    or above its running max, for the published benchmark's inputs (MoonMath's bench_table.py takes
    its runner's "realistic" pattern: Q, V ~ N(0,1); K rows of uniform direction and norm
    exp(N(0, 0.6)) x sqrt(D)). Sampled: one 384-row query block against `tiles` x `block` keys."""
    if tiles < 2:
        return 0.0
    rows, s = 384, tiles * block
    if s > MAX_SAMPLED_KEYS:  # the sample is dense: 384 x s scores and s x 128 keys in fp32
        raise ValueError(
            f"the rise-rate sample holds every key: {s:,} keys would need about "
            f"{(rows + 3 * HEAD_DIM) * s * 4 / 2**30:.0f} GiB; the model takes at most {MAX_SAMPLED_KEYS:,}"
        )
    g = torch.Generator().manual_seed(42)
    q = torch.randn((rows, HEAD_DIM), generator=g).to(torch.bfloat16).float()
    kd = torch.randn((s, HEAD_DIM), generator=g)
    kd = kd / kd.norm(dim=-1, keepdim=True)
    norm = torch.exp(torch.randn((s, 1), generator=g) * 0.6) * HEAD_DIM**0.5
    k = (kd * norm).to(torch.bfloat16).float()
    bmax = (q @ k.T).view(rows, tiles, block).amax(-1)
    run = torch.cummax(bmax, dim=1).values
    rises = (bmax[:, 1:] >= run[:, :-1]).view(rows // group_rows, group_rows, tiles - 1).any(1)
    return float(rises.float().mean())


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
        # only what the replay reads: a sweep of the clock parameters reuses the steady states
        return tuple(sorted((k, v) for k, v in self.params.items() if k in timing.REPLAY_PARAMS))

    def steady(self, model: str, launch: Launch) -> SteadyState:
        k = (model, launch.key, self._key())
        record = launch.record
        if record is None:
            return SteadyState(launch.key, 1, 0.0, 0.0, 0.0, {}, {})
        if k not in self._steady:

            def cached(
                tag: str, fn: Callable[[int], tuple[Kernel, list[list[RecordT]]]]
            ) -> Callable[[int], tuple[Kernel, list[list[RecordT]]]]:
                def rec(n: int) -> tuple[Kernel, list[list[RecordT]]]:
                    rk = (model, launch.key + tag, n)
                    if rk not in self._records:  # emulation is the slow part: once per parameter sweep
                        self._records[rk] = fn(n)
                    return self._records[rk]

                return rec

            if launch.tiles is None:
                self._steady[k] = timing.one_round(cached("", record), self.params)
            else:
                st = timing.steady_state(cached("", record), launch.tiles, self.params)
                if launch.rise_record is not None:
                    up = timing.steady_state(cached("/rise", launch.rise_record), launch.tiles, self.params)
                    st = replace(st, rise_per_tile=up.per_tile - st.per_tile)
                self._steady[k] = st
        return self._steady[k]

    def breakdowns(self) -> list[dict[str, object]]:
        """Every steady state simulated so far: clocks per key tile, MFMA busy, and per wave and
        tile the clocks by bucket and the instructions by class."""
        out = []
        for (model, key, _), st in sorted(self._steady.items()):
            out.append(
                {
                    "kernel": model,
                    "launch": key,
                    "code": st.kernel,
                    "fixed_clocks": round(st.fixed),
                    "clocks_per_tile": st.per_tile,
                    "rise_clocks_per_tile": st.rise_per_tile,
                    "mfma_busy": round(st.mfma_busy, 4),
                    "wave_clocks_per_tile": {
                        k: round(v, 1) for k, v in sorted(st.cost_per_tile.items()) if v
                    },
                    "issued_per_tile": {k: round(v, 2) for k, v in sorted(st.issued_per_tile.items()) if v},
                }
            )
        return out

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
ROWS_PER_WAVE = 32  # kRowsPerWave, kernel/hip/parts/layout.h


class Ours:
    """Our gfx942 code object, BSHD (the strided variant, as the peers' published rows are BSHD)."""

    name = "ours"

    def __init__(
        self,
        code_object: str | Path,
        layout: str = "bshd",
        cus: int = int(C["cus"]),
        gqa_rows: bool = True,
        v2_split: bool = True,
    ) -> None:
        # cus: the device's CU count its host part's split rule reads (a --set cus sensitivity too);
        # gqa_rows False: time a GQA decode on the v2 kernel, as before the planner's view (an ablation);
        # v2_split False: time a v2 call the planner splits (gfx942_v2_split) as one v2 launch, as
        # before the v2 tail split (an ablation)
        self.lib = EmuLibrary(code_object, cus=cus)
        self.layout = layout
        self.gqa_rows = gqa_rows
        self.v2_split = v2_split

    def _record(
        self, mode: str, n: int, rising: bool = False, rows: int = BLOCK_Q
    ) -> tuple[Kernel, list[list[RecordT]]]:
        """One CU's resident workgroups, n key tiles each: full q-blocks of one head, or (rows <
        256, block_rows) one q-block of `rows` rows per head."""
        occ = timing.occupancy(next(iter(self.lib.code.kernels.values())), 512)
        wpc = occ.wgs_per_cu
        sk = KEYS_PER_TILE * n
        seq, heads = (BLOCK_Q * wpc, 1) if rows >= BLOCK_Q else (rows, wpc)
        if self.layout == "bshd":  # twice the heads make the rows strided; the first are the call
            q, k, v = (t[:, :, :heads] for t in sample_qkv(seq, sk, KEYS_PER_TILE, rising, "bshd", 2 * heads))
        else:
            q, k, v = sample_qkv(seq, sk, KEYS_PER_TILE, rising, "bhsd", heads)
        with recording() as sink:
            self.lib.forward(q, k, v, layout=self.layout, rounding=mode)
        return sink[-1]

    def _record_v2(
        self, mode: str, n: int, causal: bool, rising: bool = False, rows: int = BLOCK_Q
    ) -> tuple[Kernel, list[list[RecordT]]]:
        """One CU's resident workgroups of the v2 kernel (parts/plan.h's gfx942_v2), n key tiles each:
        one 256-row q-block per head (`rows` rows: a shorter sequence's one q-block); causal:
        bottom-right with Sq = 256, so the block's last row sees all n tiles and its diagonal (the
        per-row masks) is the last four; else unmasked (the LSE makes the call a v2 one)."""
        wpc = timing.occupancy(next(iter(self.lib.code.kernels.values())), 512).wgs_per_cu
        sk = KEYS_PER_TILE * n
        rows = min(rows, BLOCK_Q)
        if self.layout == "bshd":  # twice the heads make the rows strided; the first wpc are the call
            q, k, v = (t[:, :, :wpc] for t in sample_qkv(rows, sk, KEYS_PER_TILE, rising, "bshd", 2 * wpc))
        else:
            q, k, v = sample_qkv(rows, sk, KEYS_PER_TILE, rising, "bhsd", wpc)
        kw: dict[str, object] = (
            {"mask": "causal_bottom_right"} if causal else {"lse": torch.empty(1, wpc, rows)}
        )
        with recording() as sink:
            self.lib.forward(q, k, v, layout=self.layout, rounding=mode, **kw)  # type: ignore[arg-type]
        return sink[-1]

    def _v2_launches(self, shape: Shape, mode: str) -> list[Launch]:
        """GQA, causal (bottom-right) or varlen: one launch of the v2 kernel. As AiterModel's causal
        and varlen rows: the workgroups that hold rows (those past a sequence's end return at once),
        each timed at the average of their key tiles (the imbalance between them is not modelled); a
        causal q-block runs the tiles up to its last row's limit."""
        wgs, key_tiles = 0, 0
        for sq, sk in shape.seqs():
            nq = math.ceil(sq / BLOCK_Q)
            for j in range(nq):
                last = min(sq, BLOCK_Q * (j + 1))
                keys = min(sk, max(0, sk - sq + last)) if shape.causal else sk
                key_tiles += math.ceil(keys / KEYS_PER_TILE)
            wgs += nq
        wgs *= shape.h
        key_tiles *= shape.h
        tiles = max(1, round(key_tiles / wgs))
        kv_tile = 2 * KEYS_PER_TILE * shape.d * 2
        q_o = 2 * BLOCK_Q * shape.d * 2
        l2 = float(key_tiles * kv_tile + wgs * q_o)
        grid = Grid("main", wgs, tiles, shape.bytes_qkvo(), l2, shape.flops, rise_rate(tiles, ROWS_PER_WAVE))
        if shape.causal:  # both samples hold the diagonal's four masked tiles: its cost is in the fixed part
            key = f"v2-causal-{mode}-{self.layout}"
            rec, rise = (
                (lambda n: self._record_v2(mode, n, True)),
                (lambda n: self._record_v2(mode, n, True, True)),
            )
            return [Launch(key, grid, rec, tiles=(8, 12), rise_record=rise)]
        rows = BLOCK_Q if shape.lens else block_rows(shape.sq, BLOCK_Q)  # varlen: timed on full blocks
        main = Launch(
            f"v2-{mode}-{self.layout}{rows_key(rows, BLOCK_Q)}",
            grid,
            lambda n: self._record_v2(mode, n, False, rows=rows),
            rise_record=lambda n: self._record_v2(mode, n, False, True, rows=rows),
        )
        if shape.lens or not (self.v2_split and self.lib.has_v2_split):  # an older object: unsplit
            return [main]
        # An unmasked fixed-length call: the planner's own plan says whether its tail splits
        # (gfx942_v2_split; the v2 split parts are the v2 kernel's tile loop, timed with its steady state)
        call = planning.shape_params(
            shape.b, shape.h, shape.sq, shape.sk, layout=self.layout, heads_kv=shape.hkv, lse=shape.lse
        )
        plan = planning.planner("hip").plan(call, self.lib.cus).to_dict()
        if plan["kind"] != "gfx942_v2_split":
            return [main]
        split = SplitPlan(plan["split_tiles"], plan["tail_splits"], plan["blocks_per_split"])
        return self._tail_split(main, shape, split, mode)

    def runs_as(self, shape: Shape) -> Shape:
        """The shape our kernels run for `shape`: a GQA call's dense view where the planner takes one
        (kernel/common/gqa_rows.h: a decode's query heads of one K/V head are rows of one head), else
        `shape`. Asked of the planner itself, never restated."""
        if not self.gqa_rows or shape.lens or shape.hkv == shape.h:
            return shape
        mask = "causal_bottom_right" if shape.causal else "none"
        call = planning.shape_params(
            shape.b,
            shape.h,
            shape.sq,
            shape.sk,
            layout=self.layout,
            heads_kv=shape.hkv,
            mask=mask,
            lse=shape.lse,
        )
        view = planning.planner("hip").view(call)
        if view.heads == shape.h:
            return shape
        return Shape(shape.b, view.heads, view.seqlen_q, view.seqlen_k, view.heads, shape.d)

    def launches(self, shape: Shape, mode: str) -> list[Launch]:
        shape = self.runs_as(shape)
        if not shape.plain or shape.hkv != shape.h or shape.lse:
            return self._v2_launches(shape, mode)
        wgs = shape.b * shape.h * math.ceil(shape.sq / BLOCK_Q)
        tiles = math.ceil(shape.sk / KEYS_PER_TILE)
        kv_tile = 2 * KEYS_PER_TILE * shape.d * 2
        # Q read and O written, and (below) the split's fp32 records written and merged, per row a
        # q-block holds (block_rows): the merge reads only rows below seqlen_q and a split part writes
        # only its waves' rows, so a decode's parts are not charged 256 rows of records each
        rows = block_rows(shape.sq, BLOCK_Q)
        q_o = 2 * rows * shape.d * 2
        # A build that skips the O rescale unless a running max rises (RA_HIP_LAZY_RESCALE, one
        # branch per 32-row wave) pays the difference on the share of tiles that raise one; the
        # branch-free builds cost the same on both inputs (rise_clocks_per_tile 0).
        rate = rise_rate(tiles, ROWS_PER_WAVE, KEYS_PER_TILE)
        main = Launch(
            f"main-{mode}-{self.layout}{rows_key(rows, BLOCK_Q)}",
            Grid(
                "main",
                wgs,
                tiles,
                shape.bytes_qkvo(),
                float(wgs * (tiles * kv_tile + q_o)),
                shape.flops,
                rate,
            ),
            lambda n: self._record(mode, n, rows=rows),
            rise_record=lambda n: self._record(mode, n, rising=True, rows=rows),
        )
        # Step 10 (a build with the split kernels): the host's rule, with the device's CU count, splits
        # the last partial round's q-blocks by key range. Three launches, timed one after the other:
        # the dense grid's full rounds (its tail blocks return at once: not counted), the split parts
        # (the dense kernel's tile loop with an fp32 epilogue: timed with its steady state over a
        # part's key tiles, MoonMath's split rule), the merge (its HBM bound, MoonMath's merge rule).
        plan = tail_split_plan(wgs, tiles, self.lib.cus) if self.lib.has_tail_split else None
        if not plan or not plan.tail:
            return [main]
        return self._tail_split(main, shape, plan, mode)

    def _tail_split(self, main: Launch, shape: Shape, plan: SplitPlan, mode: str) -> list[Launch]:
        """`main`'s call with its last partial round split (step 10, or the v2 kernels' split): the
        grid's full rounds, the split parts (main's tile loop with an fp32 epilogue, timed with main's
        steady state over a part's key tiles), the merge (its HBM bound, with the LSE it writes when
        the call asks for one)."""
        wgs, tiles, rate = main.grid.workgroups, main.grid.tiles, main.grid.rise_rate
        kv_tile = 2 * KEYS_PER_TILE * shape.d * 2
        # Q, O and the fp32 records per row a q-block holds (block_rows; the split's calls are fixed-length)
        rows = block_rows(shape.sq, BLOCK_Q)
        q_o = 2 * rows * shape.d * 2
        dense = wgs - plan.tail
        record = (plan.tail * plan.parts) * rows * SPLIT_RECORD * 4.0
        share = dense / wgs
        out = (
            []
            if dense == 0
            else [  # a grid of fewer q-blocks than CUs is all tail
                replace(
                    main,
                    grid=Grid(
                        "main",
                        dense,
                        tiles,
                        shape.bytes_qkvo() * share,
                        main.grid.l2_bytes * share,
                        shape.flops * share,
                        rate,
                    ),
                )
            ]
        )
        split_bytes = plan.tail * (plan.parts * q_o / 2 + tiles * kv_tile) + record
        split_rate = rise_rate(plan.tiles, ROWS_PER_WAVE, KEYS_PER_TILE)
        out.append(
            replace(
                main,
                grid=Grid(
                    "split",
                    plan.tail * plan.parts,
                    plan.tiles,
                    split_bytes,
                    float(plan.tail * plan.parts * (plan.tiles * kv_tile + q_o / 2)),
                    shape.flops * (1 - share),
                    split_rate,
                ),
            )
        )
        lse_bytes = plan.tail * rows * 4.0 if shape.lse else 0.0  # fp32 per row (a v2 call only)
        merge_bytes = record + plan.tail * rows * shape.d * 2.0 + lse_bytes
        out.append(
            Launch(
                f"merge-{mode}",
                Grid("merge", plan.tail * BLOCK_Q // 16, 0, merge_bytes, merge_bytes),
                None,
                None,
            )
        )
        return out


def tflops(shape: Shape, ms: float) -> float:
    return shape.flops / (ms * 1e-3) / 1e12


def peak_tflops() -> float:
    return C["cus"] * C["clock_ghz"] * 1e9 * 2048 / 1e12


# --- AITER v3 -------------------------------------------------------------------------------------


class AiterModel:
    """AITER v3's own code objects (regress.emu.peers.aiter): one launch, grid (ceil(Sq/256), H, B),
    32 keys a tile, BSHD as its dispatcher is called by the published benchmark."""

    name = "aiter"

    def __init__(self, wheel: str | Path | None = None) -> None:
        from regress.emu.peers import aiter

        self._mod = aiter
        self._emu = aiter.AiterEmu(aiter.Aiter.load(wheel))

    def _record(self, mode: str, n: int, rows: int) -> tuple[Kernel, list[list[RecordT]]]:
        a = self._mod
        q, k, v = sample_qkv(rows, a.TILE_K * n, a.TILE_K, False)
        with recording() as sink:
            self._emu.forward(q, k, v, layout="bshd", rounding=mode)
        return sink[-1]

    def _record_causal(self, mode: str, n: int, group: bool) -> tuple[Kernel, list[list[RecordT]]]:
        """One workgroup of the causal object: it takes q-tiles j and Q - 1 - j of Q = n / 8 - 1 (Sq =
        Sk = 256 Q rows), i.e. n key tiles of 32 in all; workgroup 0 of the launch (j = 0)."""
        a = self._mod
        nq = n // (a.TILE_Q // a.TILE_K) - 1
        q, k, v = sample_qkv(a.TILE_Q * nq, a.TILE_Q * nq, a.TILE_K, False)
        cu = torch.tensor([0, a.TILE_Q * nq], dtype=torch.int32) if group else None
        with recording() as sink:
            self._emu.forward(q, k, v, rounding=mode, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
        kern, wgs = sink[-1]
        return kern, wgs[:1]

    def _record_group(self, mode: str, n: int) -> tuple[Kernel, list[list[RecordT]]]:
        """One workgroup of the group object: one 256-row sequence against n x 32 keys."""
        a = self._mod
        q, k, v = sample_qkv(a.TILE_Q, a.TILE_K * n, a.TILE_K, False)
        cq = torch.tensor([0, a.TILE_Q], dtype=torch.int32)
        ck = torch.tensor([0, a.TILE_K * n], dtype=torch.int32)
        with recording() as sink:
            self._emu.forward(q, k, v, rounding=mode, cu_seqlens_q=cq, cu_seqlens_k=ck)
        return sink[-1]

    def launches(self, shape: Shape, mode: str) -> list[Launch]:
        a = self._mod
        # Grouped-query shapes (Hkv < H, s_gqa = H / Hkv) run the same tile loop, only the key/value
        # head index differs: the steady state sampled with Hkv = H holds; the HBM bound reads Hkv heads.
        if shape.plain:
            wgs = shape.b * shape.h * math.ceil(shape.sq / a.TILE_Q)
            tiles = math.ceil(shape.sk / a.TILE_K)
            l2 = float(wgs * (tiles * 2 * a.TILE_K * shape.d * 2 + 2 * a.TILE_Q * shape.d * 2))
            grid = Grid("main", wgs, tiles, shape.bytes_qkvo(), l2, shape.flops)
            rows = block_rows(shape.sq, a.TILE_Q)
            key = f"main-{mode}{rows_key(rows, a.TILE_Q)}"
            return [Launch(key, grid, lambda n: self._record(mode, n, rows), tiles=(4, 8))]
        # Causal and varlen: the workgroups the dispatcher launches that hold rows, each timed at the
        # average of their key tiles (the grid's imbalance between them is not modelled); a causal
        # workgroup pairs two q-tiles (tg_div 2), a varlen one past its sequence's end exits at once.
        group = bool(shape.lens)
        wgs, key_tiles = 0, 0
        for sq, sk in shape.seqs():
            nq = math.ceil(sq / a.TILE_Q)
            for j in range(nq):
                last = min(sq, a.TILE_Q * (j + 1))  # rows of q-tile j end here
                keys = min(sk, sk - sq + last) if shape.causal else sk
                key_tiles += math.ceil(max(keys, 0) / a.TILE_K)
            wgs += math.ceil(nq / 2) if shape.causal else nq
        wgs *= shape.h
        key_tiles *= shape.h
        tiles = max(1, round(key_tiles / wgs))
        l2 = float(key_tiles * 2 * a.TILE_K * shape.d * 2 + wgs * 2 * a.TILE_Q * shape.d * 2)
        grid = Grid("main", wgs, tiles, shape.bytes_qkvo(), l2, shape.flops)
        if shape.causal:
            key = f"main-causal{'-group' if group else ''}-{mode}"
            return [Launch(key, grid, lambda n: self._record_causal(mode, n, group), tiles=(24, 40))]
        return [Launch(f"main-group-{mode}", grid, lambda n: self._record_group(mode, n), tiles=(4, 8))]


# --- MoonMath -------------------------------------------------------------------------------------


class MoonMathModel:
    """MoonMath's kernels built from its source (regress.emu.peers.moonmath), every launch of its
    host code: the V pre-transpose, the dense kernel (or, when its cost rule splits the tail, the
    dense prefix, the split parts and the fp32 merge). BSHD, as the published benchmark calls it.

    The split kernel is the dense kernel's code with a different epilogue: its workgroups are timed
    with the dense kernel's steady state over their share of the key blocks (the partial-output
    stores it adds are in its HBM bound)."""

    name = "moonmath"

    def __init__(self, src: str | Path | None = None) -> None:
        from regress.emu.peers import moonmath

        self._mod = moonmath
        self._src = moonmath.find_source(src)
        self._emus: dict[str, object] = {}

    def _emu(self, mode: str) -> object:
        if mode not in self._emus:
            m = self._mod
            self._emus[mode] = m.MoonMathEmu(m.build(self._src, mode))
        return self._emus[mode]

    def _run(
        self, mode: str, kv_blocks: int, rising: bool = False, rows: int | None = None
    ) -> list[tuple[Kernel, list[list[RecordT]]]]:
        m = self._mod
        q, k, v = sample_qkv(rows or m.Q_BLOCK_ROWS, m.KV_BLOCK_ROWS * kv_blocks, m.KV_BLOCK_ROWS, rising)
        with recording() as sink:
            self._emu(mode).forward(q, k, v, layout="bshd", workspace=False)  # type: ignore[attr-defined]
        return sink

    def _record(
        self, mode: str, role: str, n: int, rising: bool = False, rows: int | None = None
    ) -> tuple[Kernel, list[list[RecordT]]]:
        name = self._mod.kernel_names("bshd")[role]
        if role == "v_transpose":  # one round: as many key blocks (workgroups) as reside on a CU
            kern = self._emu(mode).kernel(name)  # type: ignore[attr-defined]
            n = timing.occupancy(kern, self._mod.XPOSE_THREADS).wgs_per_cu
        for kern, recs in self._run(mode, n, rising, rows):
            if kern.name == name:
                return kern, recs
        raise RuntimeError(f"MoonMath made no {role} launch for {n} key blocks")

    def launches(self, shape: Shape, mode: str) -> list[Launch]:
        m = self._mod
        if not shape.plain:
            raise ValueError("MoonMath has no causal or varlen mode")
        if shape.hkv != shape.h:
            raise ValueError("MoonMath has no grouped-query mode (its host code takes one head count)")
        out = []
        bh, d = shape.b * shape.h, shape.d
        nkb = math.ceil(shape.sk / m.KV_BLOCK_ROWS)
        v_bytes = 2.0 * bh * nkb * m.KV_BLOCK_ROWS * d
        kv_tile = 2 * m.KV_BLOCK_ROWS * d * 2
        q_o = 2 * m.Q_BLOCK_ROWS * d * 2
        part = 4.0 * (m.PART_FLOATS + m.PART_ML_FLOATS)
        plan = m.plan((shape.b, shape.h, shape.sq, shape.sk), mode, "bshd")
        for la in plan:
            wgs = la.grid[0] * la.grid[1]
            if la.role == "v_transpose":
                grid = Grid(la.role, wgs, 0, 2 * v_bytes, 2 * v_bytes)
                out.append(
                    Launch(f"xpose-{mode}", grid, lambda n: self._record(mode, "v_transpose", n), None)
                )
                continue
            if la.role == "merge":  # reads every part's fp32 o, m, l; writes the tail's bf16 rows
                tail = wgs // m.MERGE_WGS_PER_QBLOCK
                parts = sum(x.grid[0] for x in plan if x.role == "split")
                byts = parts * part + tail * m.Q_BLOCK_ROWS * d * 2.0
                out.append(Launch(f"merge-{mode}", Grid(la.role, wgs, 0, byts, byts), None, None))
                continue
            tiles = la.kv_blocks_per_wg
            hbm = shape.bytes_qkvo() * (wgs / (bh * math.ceil(shape.sq / m.Q_BLOCK_ROWS)))
            if la.role == "split":
                hbm = wgs * (part + kv_tile * tiles)
            # Its code rescales a 16-row q-tile's accumulators only when a key block raises a row's
            # running max (RESCALE_THRESHOLD 0); a part starts its own running max.
            rate = rise_rate(tiles, m.Q_TILE_ROWS, m.KV_BLOCK_ROWS)
            l2 = float(wgs * (tiles * kv_tile + q_o))
            grid = Grid(la.role, wgs, tiles, hbm, l2, 0.0, rate)
            rows = block_rows(shape.sq, m.Q_BLOCK_ROWS)
            out.append(
                Launch(
                    f"forward-{mode}{rows_key(rows, m.Q_BLOCK_ROWS)}",
                    grid,
                    functools.partial(
                        self._record, mode, "forward", rows=rows
                    ),  # bound now, not at the loop's end
                    rise_record=functools.partial(self._record, mode, "forward", rising=True, rows=rows),
                )
            )
        return out


# --- uncertainty bands (pure) -----------------------------------------------------------------------


def band(by_reading: dict[str, float], point: str = "point") -> tuple[float, float, float]:
    """(point, low, high) of one predicted quantity over the model's readings (each reading a full
    parameter set: a co-issue rule, latencies, clock parameters); the point reading must be there."""
    if point not in by_reading:
        raise ValueError(f"no {point!r} reading among {sorted(by_reading)}")
    vals = list(by_reading.values())
    return by_reading[point], min(vals), max(vals)


def ratio_band(
    num: dict[str, float], den: dict[str, float], point: str = "point"
) -> tuple[float, float, float]:
    """The band of num / den computed per reading: the same reading for numerator and denominator
    (a reading that slows both moves the ratio little), never from the bands of the parts."""
    common = num.keys() & den.keys()
    if point not in common:
        raise ValueError(f"the {point!r} reading is missing from the numerator or the denominator")
    return band({r: num[r] / den[r] for r in common}, point)
