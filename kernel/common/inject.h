/*
 * inject.h — deliberate faults for fire drills (`regress build --inject ...`).
 *
 * A drill build defines one of these macros; a clean build defines none and this header
 * compiles to nothing. Every backend applies them at the same points so a drill means
 * the same thing on CPU, CUDA and HIP:
 *   RA_INJECT_SLOWDOWN_PCT=N  every block of work does N % more of its own work (or, on GPUs, spends
 *                             N % more of its own time) inside the same launch; outputs unchanged.
 *                             Proportional per block, so the cost is N % at every shape: an extra
 *                             launch over N % of the rows pays launch latency and a partial wave
 *                             (measured on the H200: a "3 %" drill cost 11.7 %, issue 14).
 *   RA_INJECT_ULP=N           every finite non-zero output moves N ULPs away from zero
 *   RA_INJECT_NONDET=1        odd-numbered launches flip the lowest bit of one output element
 *   RA_INJECT_HANG_SQ=N       a launch whose query length is N never returns (watchdog drill)
 *   RA_INJECT_CRASH_SQ=N      a launch whose query length is N aborts the process (worker-loss drill)
 *   RA_INJECT_ROUND_SWAP=M    two rounding modes trade places at the output rounding (mode-swap drill):
 *                             M has bit 0 rtne, bit 1 rtna, bit 2 rtz set for the two swapped, so 5 makes
 *                             the rtne kernel truncate and the rtz kernel round to nearest (issue 22)
 */
#ifndef REGRESS_INJECT_H
#define REGRESS_INJECT_H

#include "bf16.h"

#ifndef RA_INJECT_SLOWDOWN_PCT
#define RA_INJECT_SLOWDOWN_PCT 0
#endif
#ifndef RA_INJECT_ULP
#define RA_INJECT_ULP 0
#endif
#ifndef RA_INJECT_NONDET
#define RA_INJECT_NONDET 0
#endif

/* Moves a finite non-zero bf16 pattern RA_INJECT_ULP steps away from zero (saturating at the
 * largest finite). Applied after rounding, so it is the only thing that differs from a clean build. */
RA_HD uint16_t ra_inject_ulp(uint16_t h) {
#if RA_INJECT_ULP > 0
  uint16_t mag = (uint16_t)(h & 0x7FFFu);
  if (mag == 0 || mag >= 0x7F80u) return h; /* zero, Inf, NaN untouched */
  uint32_t moved = (uint32_t)mag + RA_INJECT_ULP;
  if (moved > 0x7F7Fu) moved = 0x7F7Fu;
  return (uint16_t)((h & 0x8000u) | moved);
#else
  return h;
#endif
}

/* The drill's share of `units` units of a block's own work (rounded to the nearest unit). */
RA_HD int64_t ra_inject_slowdown_units(int64_t units) {
  return (units * (int64_t)RA_INJECT_SLOWDOWN_PCT + 50) / 100;
}

/* The drill's share of `ticks` clock ticks a block has spent on its own work (GPU backends). */
RA_HD uint64_t ra_inject_slowdown_ticks(uint64_t ticks) {
  return ticks * (uint64_t)RA_INJECT_SLOWDOWN_PCT / 100u;
}

#ifndef RA_INJECT_HANG_SQ
#define RA_INJECT_HANG_SQ 0
#endif

/* Watchdog drill: true for the launches that must hang. The backend spins where its work would be
 * (a CPU loop, or a device loop that never retires), so the hang looks like a real one: no error,
 * no return. Other launches are untouched, so one chosen case hangs and the rest of the run is clean. */
RA_HD int ra_inject_hangs(int64_t seqlen_q) {
#if RA_INJECT_HANG_SQ > 0
  return seqlen_q == (int64_t)RA_INJECT_HANG_SQ ? 1 : 0;
#else
  (void)seqlen_q;
  return 0;
#endif
}

#if defined(__CUDACC__) && RA_INJECT_HANG_SQ > 0
/* The device side of the hang drill: one thread that never retires, queued ahead of the real
 * kernel on the same stream, so the launch returns and the next synchronise never does. */
__global__ void ra_inject_hang_kernel(void) {
  volatile unsigned int spin = 0;
  for (;;) spin = spin + 1u;
}
#define RA_INJECT_HANG_LAUNCH(seqlen_q, stream) \
  do {                                           \
    if (ra_inject_hangs(seqlen_q)) ra_inject_hang_kernel<<<1, 1, 0, (stream)>>>(); \
  } while (0)
#else
#define RA_INJECT_HANG_LAUNCH(seqlen_q, stream) ((void)0)
#endif

#ifndef RA_INJECT_CRASH_SQ
#define RA_INJECT_CRASH_SQ 0
#endif

/* Worker-loss drill, host side of every backend: the launches with this query length take the
 * process down with SIGABRT, as a kernel that faults does, so the runner's handling of a worker
 * that dies in the middle of a case is exercised for real. */
#if RA_INJECT_CRASH_SQ > 0
#include <stdlib.h>
#define RA_INJECT_CRASH_LAUNCH(seqlen_q)                        \
  do {                                                          \
    if ((int64_t)(seqlen_q) == (int64_t)RA_INJECT_CRASH_SQ) abort(); \
  } while (0)
#else
#define RA_INJECT_CRASH_LAUNCH(seqlen_q) ((void)0)
#endif

#ifndef RA_INJECT_ROUND_SWAP
#define RA_INJECT_ROUND_SWAP 0
#endif

/* Mode-swap drill: the rounding mode (0 rtne, 1 rtna, 2 rtz) a kernel built for mode m really uses.
 * A macro, not a function, so it stays a constant expression in every backend's template argument;
 * each backend applies it where its compile-time mode picks the output rounding, and nowhere else. */
#define RA_INJECT_ROUND_OTHER_(rest) ((rest) == 4 ? 2 : (rest) == 2 ? 1 : 0)
#define RA_INJECT_ROUNDING(m) \
  (((RA_INJECT_ROUND_SWAP >> (m)) & 1) ? RA_INJECT_ROUND_OTHER_(RA_INJECT_ROUND_SWAP & ~(1 << (m))) : (m))

#define RA_INJECT_INFO                                                                      \
  "{\"slowdown_pct\":" RA_STR(RA_INJECT_SLOWDOWN_PCT) ",\"ulp\":" RA_STR(RA_INJECT_ULP) \
  ",\"nondeterminism\":" RA_STR(RA_INJECT_NONDET) ",\"hang_sq\":" RA_STR(RA_INJECT_HANG_SQ) \
  ",\"crash_sq\":" RA_STR(RA_INJECT_CRASH_SQ) \
  ",\"round_swap\":" RA_STR(RA_INJECT_ROUND_SWAP) "}"
#define RA_STR_(x) #x
#define RA_STR(x) RA_STR_(x)

#endif /* REGRESS_INJECT_H */
