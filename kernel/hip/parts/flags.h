/*
 * flags.h — the one table of the gfx942 backend's build flags (issue 37): name, build-info key,
 * default, allowed range and the reason it exists. Only live choices are here. The design steps 1-13
 * of docs/hip-gfx942.md are the shipped kernel, read top to bottom; each earlier step is rebuilt from
 * history (the ablation table names the commit and its -D flags). The fire-drill faults
 * (RA_INJECT_*) are every backend's: ../../common/inject.h.
 *
 * RA_HIP_FLAGS(X) calls X(macro, key, default, min, max, why) once per flag; it generates the range
 * checks below and the flags' entries of ra_build_info (RA_HIP_FLAGS_INFO). The preprocessor cannot
 * define a macro from a macro, so the #ifndef default lines follow the table row for row;
 * tests/kernel/test_hip_compile.py reads ra_build_info of a build without -D and finds each row's
 * default there.
 */
#ifndef RA_HIP_FLAGS_H
#define RA_HIP_FLAGS_H

#define RA_HIP_FLAGS(X)                                                                                    \
  X(RA_HIP_MFMA_BUILTIN, "mfma_builtin", 0, 0, 1,                                                          \
    "the compiler's MFMA builtin in place of the inline-asm wrapper: the compiler then places the wait "  \
    "states, which cross-checks the static hazard scan (regress.emu.hazards)")                            \
  X(RA_HIP_FORCE_COMPAT, "force_compat", 0, 0, 1,                                                          \
    "the device code against compat.h even where <hip/hip_runtime.h> exists: the device-only build of "   \
    "a machine without ROCm, on one that has it")                                                        \
  X(RA_HIP_ROW_RESOURCES, "row_resources", 0, 0, 1,                                                      \
    "every K and V row copied through a buffer resource of its own, the path of sequence strides of "     \
    "2^25 elements or more (parts/copy.h), on every call: the emulator proves it on shapes that fit")

#ifndef RA_HIP_MFMA_BUILTIN
#define RA_HIP_MFMA_BUILTIN 0
#endif
#ifndef RA_HIP_FORCE_COMPAT
#define RA_HIP_FORCE_COMPAT 0
#endif
#ifndef RA_HIP_ROW_RESOURCES
#define RA_HIP_ROW_RESOURCES 0
#endif

#define RA_HIP_FLAG_RANGE_(macro, key, dflt, lo, hi, why) \
  static_assert((macro) >= (lo) && (macro) <= (hi), #macro " is out of its range in flags.h");
RA_HIP_FLAGS(RA_HIP_FLAG_RANGE_)
#undef RA_HIP_FLAG_RANGE_

#define RA_HIP_FLAG_STR_(x) #x
#define RA_HIP_FLAG_XSTR_(x) RA_HIP_FLAG_STR_(x)
/* ",\"key\":value,\"key_default\":default" per row, for ra_build_info. */
#define RA_HIP_FLAG_INFO_(macro, key, dflt, lo, hi, why) \
  ",\"" key "\":" RA_HIP_FLAG_XSTR_(macro) ",\"" key "_default\":" #dflt
#define RA_HIP_FLAGS_INFO RA_HIP_FLAGS(RA_HIP_FLAG_INFO_)

#endif /* RA_HIP_FLAGS_H */
