/*
 * inject.h — deliberate faults for fire drills (`regress build --inject ...`).
 *
 * A drill build defines one of these macros; a clean build defines none and this header
 * compiles to nothing. Every backend applies them at the same points so a drill means
 * the same thing on CPU, CUDA and HIP:
 *   RA_INJECT_SLOWDOWN_PCT=N  the kernel does about N % more work; outputs unchanged
 *   RA_INJECT_ULP=N           every finite non-zero output moves N ULPs away from zero
 *   RA_INJECT_NONDET=1        odd-numbered launches flip the lowest bit of one output element
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

#define RA_INJECT_INFO                                                                      \
  "{\"slowdown_pct\":" RA_STR(RA_INJECT_SLOWDOWN_PCT) ",\"ulp\":" RA_STR(RA_INJECT_ULP) \
  ",\"nondeterminism\":" RA_STR(RA_INJECT_NONDET) "}"
#define RA_STR_(x) #x
#define RA_STR(x) RA_STR_(x)

#endif /* REGRESS_INJECT_H */
