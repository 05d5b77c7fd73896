/*
 * tail_plan.h — RA_CUDA_TAIL_SPLIT's rule (host only, plain C++17: attention_sm90.cu calls it, and
 * tests/kernel/test_cuda_tail_plan.py builds it with the host compiler beside its Python mirror,
 * benchmarks/cuda_tail_plan.py).
 *
 * Wave quantization: a persistent launch of `tiles` (batch, head, query block) tiles on `sms` SMs
 * runs R = floor(tiles / sms) whole rounds and a last round of tail = tiles - R sms tiles, which
 * leaves sms - tail SMs idle (2048 tiles on 132 SMs: 15 rounds + 68, 97.0 % of the machine at
 * best). split_rule's uniform split cannot help there: tiles * s stays misaligned with sms. The
 * tail split runs the R sms first tiles whole, on one CTA per SM, and cuts only the tail's tiles
 * into s parts over contiguous key ranges, so their tail * s parts fill ceil(tail * s / sms) rounds
 * of ~nb / s key blocks each; the last part of each tile to finish merges in fp32 and rounds once.
 *
 * Cost model, in key-block times of one CTA (split_rule's unit, 1.5-2.5 us on the H200):
 *   a whole tile      nb + 1          (the 1: pipeline fill and epilogue, split_rule's kSplitTileCost)
 *   a part            ceil(nb / s) + 1  (its own fill, and its fp32 partials' store instead of bf16)
 *   the merge         ceil(s / 2)       (the last warpgroup of a tail tile reads s partials of
 *                                        32 KB from L2, ~0.7 us each: about half a key block)
 *   unsplit tail: nb + 1;  split tail: ceil(tail s / sms) (ceil(nb / s) + 1) + ceil(s / 2).
 * The least-cost s in 2..min(nb, kTailMaxSplits) (the smaller on a tie: fewer partials), none
 * leaving a part empty, taken only if it saves at least kTailMinGainPerMille of the unsplit
 * launch's (R + 1) (nb + 1): the model leaves out the partials' traffic and the power cap (132
 * busy SMs instead of 128 may clock lower), so a smaller predicted gain is within its error.
 * Only for launches with at least one whole round (tiles > sms; fewer tiles are split_rule's) and
 * a tail (tiles % sms != 0). forced > 1 (RA_CUDA_TAIL_SPLIT=N, measurement builds): N parts (fewer
 * where a part would be empty) wherever there is a tail, no cost test.
 */
#pragma once
#include <cstdint>

namespace ra_cuda {

constexpr int kTailMaxSplits = 64;
constexpr int kTailMinGainPerMille = 5;

struct TailPlan {
  int64_t tail; /* the last tiles, split; 0: no tail split */
  int splits;   /* parts per tail tile, none empty */
  int blocks;   /* key blocks per part; the last part may have fewer */
};

inline TailPlan tail_split_plan(int64_t tiles, int nb, int sms, int forced = 0) {
  const TailPlan none{0, 0, 0};
  if (sms <= 0 || nb < 2 || tiles <= sms || tiles % sms == 0) return none;
  const int64_t tail = tiles % sms;
  auto parts_of = [&](int s, int& sb) {
    sb = (nb + s - 1) / s;
    return (nb + sb - 1) / sb; /* s parts of sb blocks may leave the last empty: fewer parts */
  };
  if (forced > 1) {
    int sb = 0;
    const int s = parts_of(forced < nb ? forced : nb, sb);
    return s > 1 ? TailPlan{tail, s, sb} : none;
  }
  const int64_t unsplit = nb + 1;
  int64_t best = unsplit;
  TailPlan plan = none;
  const int top = nb < kTailMaxSplits ? nb : kTailMaxSplits;
  for (int s = 2; s <= top; ++s) {
    int sb = 0;
    if (parts_of(s, sb) != s) continue; /* the same parts as a smaller s */
    const int64_t cost = (tail * s + sms - 1) / sms * (sb + 1) + (s + 1) / 2;
    if (cost < best) best = cost, plan = TailPlan{tail, s, sb};
  }
  const int64_t launch = (tiles / sms + 1) * unsplit;
  return 1000 * (unsplit - best) >= kTailMinGainPerMille * launch ? plan : none;
}

}  // namespace ra_cuda
