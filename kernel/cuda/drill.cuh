/*
 * drill.cuh — the CUDA side of the slowdown fire drill (kernel/common/inject.h).
 *
 * Each tile (persistent sm90 path) or CTA (mma.sync path) reads the SM clock when it starts and,
 * after its epilogue, spins for RA_INJECT_SLOWDOWN_PCT % of the ticks it has spent. The extra time
 * is then proportional to each block's own time inside the same launch, whatever the shape, the
 * wave count or the clock: no extra launch, no launch latency, no partial wave (the old drill
 * relaunched N % of the rows and cost 11.7 % at "3 %" on the H200, issue 14). Outputs are untouched.
 * A clean build compiles both calls to nothing.
 */
#pragma once

#include "../common/inject.h"

namespace ra_cuda {

__device__ __forceinline__ long long inject_clock() {
#if RA_INJECT_SLOWDOWN_PCT > 0
  return clock64();
#else
  return 0;
#endif
}

__device__ __forceinline__ void inject_spin(long long start) {
#if RA_INJECT_SLOWDOWN_PCT > 0
  const long long now = clock64();
  const long long until = now + (long long)ra_inject_slowdown_ticks((uint64_t)(now - start));
  while (clock64() < until) {
  }
#else
  (void)start;
#endif
}

}  // namespace ra_cuda
