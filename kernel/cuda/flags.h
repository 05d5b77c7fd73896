/*
 * flags.h — the sm_90a library's build flags: the defaults, a compile-time check of each value, and
 * their JSON for ra_build_info, all from the one table flags.def. Plain C++17 (the host planner,
 * plan.h, includes it with no CUDA headers); every file of kernel/cuda that reads a flag includes
 * this one, so no flag has a default anywhere else.
 */
#pragma once

#define RA_FLAG(name, key, allowed, values, why)
#include "flags.def"
#undef RA_FLAG

namespace ra_cuda {
namespace flags {
#define RA_FLAG(name, key, allowed, values, why)                                 \
  constexpr bool allowed_##name(long long v) { return allowed; }                      \
  static_assert(allowed_##name(RA_CUDA_##name), "RA_CUDA_" #name " must be " values);
#include "flags.def"
#undef RA_FLAG
}  // namespace flags
}  // namespace ra_cuda

/* ra_build_info's "flags" (attention_sm90.cu) are this table too: flags.def included a third time
 * inside the string, with RA_FLAG giving "\"key\":value," per flag. */
