"""Which code an sm_90a launch runs, in Python: kernel/cuda/tail_plan.h's tail_split_plan (the same
integers; the cost model is stated there), attention_sm90.cu's split_rule and long_keys_pay, and
launch()'s choice between them (launch_path) for a build's -D flags over the kernel's own defaults
(build_settings reads them from the #define lines). h200_split.py uses it to know which kernels
each build runs on a shape and which tiles it computes in parts; tests/kernel/test_cuda_tail_plan.py
checks the rules against the C++.

  python benchmarks/cuda_tail_plan.py     the plan and the predicted machine fill per nightly family
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

KERNEL_CUDA = Path(__file__).resolve().parents[1] / "kernel" / "cuda"
H200_SMS = 132
BLOCK_M = 128  # query rows per tile
BLOCK_N = 128  # keys per key block
MAX_SPLITS = 64  # kTailMaxSplits
MIN_GAIN_PER_MILLE = 5  # kTailMinGainPerMille


class TailPlan(NamedTuple):
    tail: int  # the last tiles, split; 0: no tail split
    splits: int  # parts per tail tile
    blocks: int  # key blocks per part


NONE = TailPlan(0, 0, 0)


def tail_split_plan(tiles: int, nb: int, sms: int, forced: int = 0) -> TailPlan:
    if sms <= 0 or nb < 2 or tiles <= sms or tiles % sms == 0:
        return NONE
    tail = tiles % sms

    def parts_of(s: int) -> tuple[int, int]:
        sb = -(-nb // s)
        return -(-nb // sb), sb

    if forced > 1:
        s, sb = parts_of(min(forced, nb))
        return TailPlan(tail, s, sb) if s > 1 else NONE
    unsplit = nb + 1
    best, plan = unsplit, NONE
    for s in range(2, min(nb, MAX_SPLITS) + 1):
        parts, sb = parts_of(s)
        if parts != s:
            continue
        cost = -(-(tail * s) // sms) * (sb + 1) + (s + 1) // 2
        if cost < best:
            best, plan = cost, TailPlan(tail, s, sb)
    launch = (tiles // sms + 1) * unsplit
    return plan if 1000 * (unsplit - best) >= MIN_GAIN_PER_MILLE * launch else NONE


def split_rule(tiles: int, nb: int, sms: int, split: int = -1) -> int:
    """attention_sm90.cu's split_rule under RA_CUDA_SPLIT=`split` (-1, the default, or 0: by the
    cost rule; N > 0: min(N, nb)): the uniform split over keys it takes first; the tail split and
    the long-key kernel only act where this gives 1."""
    if split > 0:
        return min(split, nb)

    def cost(s: int) -> int:
        return -(-(tiles * s) // sms) * (-(-nb // s) + 1) + (3 if s > 1 else 0)

    best, best_cost = 1, cost(1)
    for s in range(2, min(nb, 32) + 1):
        sb = -(-nb // s)
        if -(-nb // sb) != s:
            continue
        if cost(s) < best_cost:
            best, best_cost = s, cost(s)
    return best if 10 * best_cost <= 9 * cost(1) else 1


def shape_plan(b: int, h: int, sq: int, sk: int, sms: int = H200_SMS, forced: int = 0) -> TailPlan:
    """The plan the default build (forced 0), or the default with RA_CUDA_TAIL_SPLIT=`forced`, takes
    for (b, h, sq, sk): launch_path's, so NONE where split_rule splits, for decode (sq <= 64), short
    keys (sk <= 256, the next-Q-K^T kernel) and where the long-key kernel runs instead."""
    return launch_path(
        build_settings([f"-DRA_CUDA_TAIL_SPLIT={forced if forced > 1 else 1}"]), b, h, sq, sk, sms
    ).tail


def long_keys_pay(seqlen_k: int, block_n: int, min_keys: int, rule: int) -> bool:
    """attention_sm90.cu's long_keys_pay for RA_CUDA_LONG_BLOCK_N=`block_n` (0: no long kernel),
    RA_CUDA_LONG_MIN_KEYS=`min_keys` and RA_CUDA_LONG_RULE=`rule` (its divisions truncate as floor
    division does here: the operands are positive)."""
    n = block_n if block_n > 0 else BLOCK_N
    return (
        block_n != 0
        and seqlen_k >= min_keys
        and (rule == 0 or -(-seqlen_k // n) * n < -(-seqlen_k // BLOCK_N) * BLOCK_N)
    )


_DEFINE = re.compile(r"^#ifndef (RA_CUDA_\w+)\s*\n#define \1 (-?\d+)\b", re.MULTILINE)


@functools.cache
def kernel_defaults() -> dict[str, int]:
    """Every integer RA_CUDA_* macro's default, from kernel/cuda's `#ifndef X` / `#define X value`
    pairs (so the mirror cannot drift from the kernel), and kDecodeMaxRows as "DECODE_MAX_ROWS"."""
    found: dict[str, int] = {}
    for f in sorted(KERNEL_CUDA.glob("*.cu*")) + sorted(KERNEL_CUDA.glob("*.h")):
        text = f.read_text()
        for name, value in _DEFINE.findall(text):
            found[name] = int(value)
        m = re.search(r"constexpr int kDecodeMaxRows = (\d+);", text)
        if m:
            found["DECODE_MAX_ROWS"] = int(m.group(1))
    return found


# the macros build_settings reads: what decides between the uniform split, the long-key kernel, the
# tail split and the short-key kernel, and the fallback that takes every launch from all of them
# (every other flag leaves that choice alone)
_SETTINGS = {
    "force_mma_sync": "RA_CUDA_FORCE_MMA_SYNC",
    "split": "RA_CUDA_SPLIT",
    "tail": "RA_CUDA_TAIL_SPLIT",
    "long_n": "RA_CUDA_LONG_BLOCK_N",
    "long_rule": "RA_CUDA_LONG_RULE",
    "long_min_keys": "RA_CUDA_LONG_MIN_KEYS",
    "pingpong": "RA_CUDA_PINGPONG",
    "next_qk": "RA_CUDA_NEXT_QK",
    "next_qk_max_keys": "RA_CUDA_NEXT_QK_MAX_KEYS",
    "merge_kernel": "RA_CUDA_MERGE_KERNEL",
    "decode_stages": "RA_CUDA_DECODE_STAGES",
    "short_n": "RA_CUDA_SHORT_BLOCK_N",
    "short_stages": "RA_CUDA_SHORT_STAGES",
    "dyn_sched": "RA_CUDA_DYN_SCHED",
    "dyn_max_blocks": "RA_CUDA_DYN_MAX_BLOCKS",
    "dyn_max_m_blocks": "RA_CUDA_DYN_MAX_M_BLOCKS",
}


@dataclass(frozen=True)
class Build:
    """A build's effective launch settings (the macros of _SETTINGS, by field)."""

    force_mma_sync: int  # 1: every launch on the mma.sync fallback (64 x 64 tiles), none on TMA
    split: int  # -1 (or 0): split_rule's cost rule; 1: never; N > 1: N splits
    tail: int  # 0: no tail split; 1 (or < 0): tail_plan.h's rule; N > 1: N parts
    long_n: int  # keys per block of the long-key kernel; 0: none built
    long_rule: int  # 1: only where its blocks pad the keys less than 128-key blocks; 0: always
    long_min_keys: int
    pingpong: int
    next_qk: int
    next_qk_max_keys: int
    merge_kernel: int
    decode_stages: int
    short_n: int  # keys of the short-key kernel's one block; 0: none built
    short_stages: int  # 3: the 3-stage short plan (which takes the dynamic scheduler's launches)
    dyn_sched: int
    dyn_max_blocks: int
    dyn_max_m_blocks: int
    decode_max_rows: int = 64

    @property
    def tail_mode(self) -> int | None:
        """None: no tail split; 0: by the rule; N > 1: N parts (the `forced` of tail_split_plan)."""
        return None if self.tail == 0 else (self.tail if self.tail > 1 else 0)

    def long_settings(self) -> tuple[int, int, int]:
        """(N, rule, minimum keys) of the long-key kernel; (0, 0, 0) where none is built."""
        return (self.long_n, self.long_rule, self.long_min_keys) if self.long_n else (0, 0, 0)


def build_settings(flags: Iterable[str]) -> Build:
    """The settings a build's -D flags give, over the kernel's defaults (`-DX` alone is 1, as for
    the preprocessor); a value that is not an integer for one of these macros is refused."""
    defaults = kernel_defaults()
    values = {field: defaults[macro] for field, macro in _SETTINGS.items()}
    macros = {macro: field for field, macro in _SETTINGS.items()}
    for flag in flags:
        if not flag.startswith("-D"):
            continue
        name, eq, value = flag[2:].partition("=")
        if name in macros:
            if eq and not re.fullmatch(r"-?\d+", value):
                raise ValueError(f"flag {flag}: {name} needs an integer value")
            values[macros[name]] = int(value) if eq else 1
    return Build(**values, decode_max_rows=defaults.get("DECODE_MAX_ROWS", 64))


class LaunchPath(NamedTuple):
    splits: int  # parts of the uniform split over keys (split_rule); 1: unsplit
    long_n: int  # keys per block of the long-key kernel where it runs; 0: it does not
    tail: TailPlan  # the tail split's plan where the tail kernel runs; NONE: it does not
    short_n: int = 0  # keys of the short-key kernel's block where it runs (it owes the default's bits)
    mma_sync: bool = False  # the mma.sync fallback (64 x 64 tiles: another order, no bits owed)


HEAD_DIM = 128  # params.cuh's kHeadDim
MERGE_IN_KERNEL_MAX_ROWS = 4  # split.cuh's kMergeInKernelMaxRows
MAX_WORKSPACE_BYTES = 512 << 20  # attention_sm90.cu's kMaxWorkspaceBytes
PINGPONG_MAX_KEYS = 2048  # attention_sm90.cu's kPingPongMaxKeys
LONG_N_UNSET = 176  # mainloop_sm90.cuh's kLongBlockN where RA_CUDA_LONG_BLOCK_N < 0


def launch_path(build: Build, b: int, h: int, sq: int, sk: int, sms: int = H200_SMS) -> LaunchPath:
    """attention_sm90.cu's launch() on the TMA path: the uniform split where split_rule asks for one
    and its workspace fits; else, on launches of neither ping-pong nor the next-Q-K^T overlap with
    more rows than decode, the long-key kernel where long_keys_pay, or else the tail split where
    tail_split_plan plans one and its workspace fits (never both); on unsplit next-Q-K^T launches
    without ping-pong off the dynamic scheduler, the short-key kernel where short_keys_pay."""
    if build.force_mma_sync:  # launch()'s use_tma is false: nothing below is asked
        return LaunchPath(1, 0, NONE, mma_sync=True)
    tiles, nb = b * h * -(-sq // BLOCK_M), -(-sk // BLOCK_N)
    pp = build.pingpong == 1 or (build.pingpong == -1 and sk <= PINGPONG_MAX_KEYS)
    nqk = build.next_qk == 1 or (build.next_qk == -1 and sk <= build.next_qk_max_keys)
    splits = 1
    want = split_rule(tiles, nb, sms, build.split)
    if want > 1:
        sb = -(-nb // want)
        s = -(-nb // sb)
        mik = (
            not build.merge_kernel and build.decode_stages != 3 and not nqk and sq <= MERGE_IN_KERNEL_MAX_ROWS
        )
        floats = s * b * h * sq * (HEAD_DIM + 2)
        if floats * 4 + (tiles * 2 if mik else 0) * 4 <= MAX_WORKSPACE_BYTES:
            splits = s
    if splits == 1 and nqk and not pp and build.short_stages != 3:
        dyn = (
            build.dyn_sched != 0
            and nb <= build.dyn_max_blocks
            and -(-sq // BLOCK_M) <= build.dyn_max_m_blocks
        )
        if not dyn and build.short_n != 0 and sk <= build.short_n:
            return LaunchPath(1, 0, NONE, build.short_n)
    if splits > 1 or pp or nqk or sq <= build.decode_max_rows:
        return LaunchPath(splits, 0, NONE)
    if long_keys_pay(sk, build.long_n, build.long_min_keys, build.long_rule):
        return LaunchPath(1, build.long_n if build.long_n > 0 else LONG_N_UNSET, NONE)
    mode = build.tail_mode
    if mode is None:
        return LaunchPath(1, 0, NONE)
    plan = tail_split_plan(tiles, nb, sms, mode)
    if plan.splits > 1:
        rows = plan.tail * plan.splits * BLOCK_M
        if (rows * (HEAD_DIM + 2) + plan.tail * 2) * 4 > MAX_WORKSPACE_BYTES:
            plan = NONE
    return LaunchPath(1, 0, plan if plan.splits > 1 else NONE)


def fill(tiles: int, nb: int, sms: int, plan: TailPlan) -> tuple[float, float]:
    """Predicted machine fill (key-block work over SMs x the busiest CTA's key blocks), without and
    with the model's per-tile, per-part and merge costs: before (plan NONE) or after."""
    work = tiles * nb
    if not plan.splits:
        rounds = -(-tiles // sms)
        return work / (sms * rounds * nb), tiles * (nb + 1) / (sms * rounds * (nb + 1))
    full = tiles // sms
    part_rounds = -(-(plan.tail * plan.splits) // sms)
    bare = full * nb + part_rounds * plan.blocks
    costed = full * (nb + 1) + part_rounds * (plan.blocks + 1) + (plan.splits + 1) // 2
    return work / (sms * bare), tiles * (nb + 1) / (sms * costed)


FAMILIES = [
    (1, 16, 16384, 16384),
    (2, 16, 8192, 8192),
    (4, 16, 4096, 4096),
    (8, 16, 2048, 2048),
    (16, 16, 1024, 1024),
    (32, 16, 512, 512),
    (1, 64, 8192, 8192),
    (1, 32, 16384, 16384),
    (1, 16, 32768, 32768),
    (8, 32, 2048, 2048),
    (1, 24, 16384, 16384),
    (2, 24, 8192, 8192),
    (16, 32, 2048, 2048),
    (1, 24, 4608, 4608),
]


def main() -> None:
    print("| shape (B,H,Sq,Sk) | tiles | nb | full rounds | tail | s | blocks/part | fill before | after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b, h, sq, sk in FAMILIES:
        tiles, nb = b * h * -(-sq // BLOCK_M), -(-sk // BLOCK_N)
        plan = shape_plan(b, h, sq, sk)
        before, after = fill(tiles, nb, H200_SMS, NONE), fill(tiles, nb, H200_SMS, plan)
        print(
            f"| ({b},{h},{sq},{sk}) | {tiles} | {nb} | {tiles // H200_SMS} | {tiles % H200_SMS} | "
            f"{plan.splits or '-'} | {plan.blocks or '-'} | {before[1]:.1%} | {after[1]:.1%} |"
        )


if __name__ == "__main__":
    main()
