/*
 * steps.h — the design steps of the rebuilt gfx942 kernel (docs/hip-gfx942.md, "Design steps"), one
 * compile-time flag each, defaults in one place. Every step is on unless the build sets it to 0;
 * -DRA_HIP_LEGACY=1 turns them all off and builds the first kernel (step 0) exactly.
 *
 *   1 RA_HIP_FIRST_MFMA_ZERO_C  first score MFMA of a chain from SrcC = 0 (mfma.h)
 *   2 RA_HIP_MFMA_NO_NOP        no s_nop 1 per MFMA; entry fence on VALU-written inputs (mfma.h)
 *   3 RA_HIP_LDS_DEPTH          LDS fragment reads kept this many ahead, 0 = per use (mainloop.h)
 *   4 RA_HIP_SETPRIO            s_setprio 1 around each MFMA batch (attention_gfx942.hip)
 *   5 RA_HIP_FULL_TILE_FAST     unchecked copy and no mask compares for full tiles (mainloop.h, softmax.h)
 *   6 RA_HIP_LAZY_RESCALE       O rescaled only when some alpha != 1 (attention_gfx942.hip)
 *   7 RA_HIP_SOFTMAX_FMA        fma exponent argument, ties-away P, paired sums: changes bits,
 *                               within the contract (softmax.h)
 *   8 RA_HIP_LDS_LANE_OFFSETS   per-lane LDS offsets computed once, immediates per read (mainloop.h)
 *   9 RA_HIP_PK_FMA             step 7's exponent arguments two at a time, v_pk_fma_f32 (softmax.h)
 *  10 RA_HIP_TAIL_SPLIT         the grid's last partial round of q-blocks split over the idle CUs by
 *                               key range, fp32 partials, one deterministic merge that rounds once
 *                               (attention_gfx942.hip; host: the split rule, tail_split_plan)
 *  11 RA_HIP_PACK_P64           P's two ties-away +0x8000 of a pair in one 64-bit add (mfma.h)
 *  12 RA_HIP_BUFFER_COPY        full tiles' K/V loads as buffer loads, scalar row bases (mainloop.h)
 */
#ifndef RA_HIP_STEPS_H
#define RA_HIP_STEPS_H

#ifndef RA_HIP_LEGACY
#define RA_HIP_LEGACY 0
#endif
#define RA_HIP_STEP_DEFAULT (RA_HIP_LEGACY ? 0 : 1)

#ifndef RA_HIP_FIRST_MFMA_ZERO_C
#define RA_HIP_FIRST_MFMA_ZERO_C RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_MFMA_NO_NOP
#define RA_HIP_MFMA_NO_NOP RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_LDS_DEPTH
#define RA_HIP_LDS_DEPTH (2 * RA_HIP_STEP_DEFAULT)
#endif
#ifndef RA_HIP_SETPRIO
#define RA_HIP_SETPRIO RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_FULL_TILE_FAST
#define RA_HIP_FULL_TILE_FAST RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_LAZY_RESCALE
#define RA_HIP_LAZY_RESCALE RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_SOFTMAX_FMA
#define RA_HIP_SOFTMAX_FMA RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_LDS_LANE_OFFSETS
#define RA_HIP_LDS_LANE_OFFSETS RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_PK_FMA
#define RA_HIP_PK_FMA RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_TAIL_SPLIT
#define RA_HIP_TAIL_SPLIT RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_PACK_P64
#define RA_HIP_PACK_P64 RA_HIP_STEP_DEFAULT
#endif
#ifndef RA_HIP_BUFFER_COPY
#define RA_HIP_BUFFER_COPY RA_HIP_STEP_DEFAULT
#endif

#if RA_HIP_MFMA_NO_NOP && !RA_HIP_FIRST_MFMA_ZERO_C
#error "RA_HIP_MFMA_NO_NOP needs RA_HIP_FIRST_MFMA_ZERO_C: v_mov-zeroed score accumulators would feed an MFMA unguarded"
#endif
#if RA_HIP_LDS_DEPTH > 0 && !RA_HIP_FIRST_MFMA_ZERO_C
#error "RA_HIP_LDS_DEPTH needs RA_HIP_FIRST_MFMA_ZERO_C (the fragment stream starts every score chain from 0)"
#endif

#endif /* RA_HIP_STEPS_H */
