"""RA_CUDA_TAIL_SPLIT's rule, kernel/cuda/tail_plan.h's tail_split_plan in Python (the same integers;
the cost model is stated there): h200_split.py uses it to know which tiles a tail-split build
computes in parts, and tests/kernel/test_cuda_tail_plan.py checks it against the C++.

  python benchmarks/cuda_tail_plan.py     the plan and the predicted machine fill per nightly family
"""

from __future__ import annotations

from typing import NamedTuple

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


def split_rule(tiles: int, nb: int, sms: int) -> int:
    """attention_sm90.cu's split_rule of the default build (RA_CUDA_SPLIT=-1): the uniform split over
    keys it takes first; the tail split only acts where this gives 1."""

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
    """The plan a tail-split build takes for (b, h, sq, sk): attention_sm90.cu's launch() asks for one
    only where split_rule does not split and the launch is neither decode (sq <= 64) nor of short
    keys (sk <= 256, the next-Q-K^T kernel)."""
    tiles, nb = b * h * -(-sq // BLOCK_M), -(-sk // BLOCK_N)
    if sq <= 64 or sk <= 256 or split_rule(tiles, nb, sms) > 1:
        return NONE
    return tail_split_plan(tiles, nb, sms, forced)


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
