/*
 * mfma.h — the one matrix instruction of the kernel and the lane-exchange helpers.
 *
 * v_mfma_f32_16x16x16_bf16 (LLVM 19 accepts it for gfx942 and llvm-objdump prints it under this
 * name; the builtin spelling is __builtin_amdgcn_mfma_f32_16x16x16bf16_1k) is issued through a
 * one-instruction inline-asm wrapper whose accumulator is a "+v" operand: it is read and written
 * in place, so the compiler adds no v_mov around it.
 *
 * Hazards. The compiler's hazard recognizer does not model MFMAs hidden in inline asm (LLVM's
 * checkInlineAsmHazards only checks VALU store-data hazards; measured: a VALU read right after an
 * asm MFMA gets no s_nop, the builtin gets `s_nop 6`). gfx942 needs, for this 4-pass XDL op:
 *   VALU write VGPR  -> MFMA reads it (A, B or C)        2 wait states
 *   MFMA write VGPR  -> VALU / memory reads or writes it  7 wait states (passes + 3)
 *   MFMA reads C     -> VALU writes that VGPR             3 wait states
 *   MFMA write       -> next MFMA reads it as the same C  0 wait states (back-to-back chains are free)
 * So the wrapper starts with `s_nop 1` (2 wait states, hidden behind the previous MFMA's 16-cycle
 * issue; step 2 removed it, below), and every batch of MFMAs is followed by wait states tied to the
 * batch's accumulators as "+v" operands (mfma_fence, an `s_nop 7`, or step 13's m_end_s): every
 * later use of a result depends on them, so no instruction that reads a result can be scheduled
 * between the MFMA and them.
 * tests/kernel/test_hip_compile.py re-checks these windows on the final disassembly.
 * -DRA_HIP_MFMA_BUILTIN=1 swaps in the compiler builtin (the compiler then owns the hazards).
 */
#ifndef RA_HIP_MFMA_H
#define RA_HIP_MFMA_H

#include <stdint.h>

#include "flags.h"

namespace ra_gfx942 {

typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef short bf16x4 __attribute__((ext_vector_type(4))); /* 4 bf16 bit patterns */
typedef unsigned int u32x4 __attribute__((ext_vector_type(4)));
typedef unsigned int u32x2 __attribute__((ext_vector_type(2)));

/* Step 2 (docs/hip-gfx942.md, "Design steps"): no `s_nop 1` in the wrapper. An MFMA's
 * A/B/C operands are then never written by a VALU within 2 wait states by construction: K and V^T
 * fragments come from ds_read, Q from global loads, a score chain's C from the previous MFMA of the
 * chain (0 wait states) or the literal 0 (step 1, required), and the PV batch's VALU-written inputs
 * (P and the rescaled O) pass mfma_entry_tie2() first, at least 2 instructions before the batch.
 * The static scan and the emulator's dynamic checker re-prove it on the final instruction stream. */

/* acc += a * b, a: A operand (16x16 row-major slice), b: B operand. */
__device__ __forceinline__ void mfma_16x16x16_bf16(f32x4& acc, bf16x4 a, bf16x4 b) {
#if RA_HIP_MFMA_BUILTIN
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, acc, 0, 0, 0);
#else
  asm volatile("v_mfma_f32_16x16x16_bf16 %0, %1, %2, %0" : "+v"(acc) : "v"(a), "v"(b));
#endif
}

/* Step 1 (docs/hip-gfx942.md, "Design steps"): the first MFMA of each score chain takes the inline
 * constant 0 as SrcC and writes its accumulator ("=&v": early-clobber, so it never shares
 * registers with A or B), instead of 32 v_mov zeroing the 8 score accumulators per tile. The same
 * bits as the zeroing: C = +0 from a register or from the constant. */

/* acc = a * b: the first MFMA of an accumulation chain. */
__device__ __forceinline__ void mfma_16x16x16_bf16_first(f32x4& acc, bf16x4 a, bf16x4 b) {
#if RA_HIP_MFMA_BUILTIN
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, f32x4{0.f, 0.f, 0.f, 0.f}, 0, 0, 0);
#else
  asm volatile("v_mfma_f32_16x16x16_bf16 %0, %1, %2, 0" : "=&v"(acc) : "v"(a), "v"(b));
#endif
}

/* End of an MFMA batch: 8 wait states, tied to the accumulators (see above). */
#if RA_HIP_MFMA_BUILTIN
#define RA_MFMA_FENCE_ASM ""
#else
#define RA_MFMA_FENCE_ASM "s_nop 7"
#endif
__device__ __forceinline__ void mfma_fence(f32x4& a0, f32x4& a1, f32x4& a2, f32x4& a3) {
  asm volatile(RA_MFMA_FENCE_ASM : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));
}
/* The PV MFMAs' VALU-written inputs (P and the rescaled O, both query tiles) through an empty asm: no
 * instruction of its own, since step 13's X phase ends on its LDS and memory waits and the barrier
 * (asm: s_waitcnt, s_waitcnt, s_setprio, s_barrier), four instructions after it and before any MFMA,
 * which are the 2 wait states; the operands order every VALU write of them before it. */
__device__ __forceinline__ void mfma_entry_tie2(f32x4 (&o)[2][8], bf16x4 (&p)[2][4]) {
#if !RA_HIP_MFMA_BUILTIN
  asm volatile(""
               : "+v"(o[0][0]), "+v"(o[0][1]), "+v"(o[0][2]), "+v"(o[0][3]), "+v"(o[0][4]), "+v"(o[0][5]),
                 "+v"(o[0][6]), "+v"(o[0][7]), "+v"(o[1][0]), "+v"(o[1][1]), "+v"(o[1][2]), "+v"(o[1][3]),
                 "+v"(o[1][4]), "+v"(o[1][5]), "+v"(o[1][6]), "+v"(o[1][7]), "+v"(p[0][0]), "+v"(p[0][1]),
                 "+v"(p[0][2]), "+v"(p[0][3]), "+v"(p[1][0]), "+v"(p[1][1]), "+v"(p[1][2]), "+v"(p[1][3]));
#else
  (void)o;
  (void)p;
#endif
}

/* The low / high 8 bytes of a 16-byte load as an MFMA operand. */
__device__ __forceinline__ bf16x4 lo_half(u32x4 x) { return __builtin_bit_cast(bf16x4, u32x2{x.x, x.y}); }
__device__ __forceinline__ bf16x4 hi_half(u32x4 x) { return __builtin_bit_cast(bf16x4, u32x2{x.z, x.w}); }

/* Value of lane (lane ^ mask) of this wave; ds_bpermute, fixed pairing, so reductions built on it
 * combine terms in the same order on every launch. */
__device__ __forceinline__ float lane_xor(float x, int lane, int mask) {
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __builtin_bit_cast(int, x)));
}

/* Two fp32 in [0, 1] (or NaN) -> two bf16, rounding to nearest with ties away from zero (step 7:
 * one add each, no v_bfe), packed lo | hi << 16. Only P goes through here; a NaN P also makes the
 * row sum NaN, so the row is NaN whatever the packed bits (the output rounding uses
 * kernel/common/bf16.h and its canonical NaN). */
__device__ __forceinline__ unsigned int pack_p_bf16_rna(float lo, float hi) {
  /* Step 11: both +0x8000 in one 64-bit add (v_lshl_add_u64) on the pair (hi:lo). A carry out of lo
   * needs lo >= 0xFFFF8000, a NaN with the sign set: then its query row's sum l (fp32, the same e's)
   * is NaN and every output of the row is NaN whatever P holds, so the outputs keep their bits.
   * In asm: written as a C 64-bit add, clang split it back into a zero-extended low add and a
   * 32-bit high add with the carry (three VALU, not two). */
  typedef unsigned int u32x2_t __attribute__((ext_vector_type(2)));
  const unsigned long long pair =
      __builtin_bit_cast(unsigned long long, u32x2_t{__builtin_bit_cast(unsigned int, lo), __builtin_bit_cast(unsigned int, hi)});
  unsigned long long x;
  asm("v_lshl_add_u64 %0, %1, 0, %2" : "=v"(x) : "v"(pair), "s"(0x0000800000008000ull));
  return __builtin_amdgcn_perm((unsigned int)(x >> 32), (unsigned int)x, 0x07060302u);
}

}  // namespace ra_gfx942

#endif /* RA_HIP_MFMA_H */
