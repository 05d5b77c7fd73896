/*
 * plan_host.cpp — the sm_90a launch planner (plan.h) as a host-only library, with no CUDA: the same
 * ra_plan_launch the CUDA library exports, for Python (ctypes), the tests and the benchmarks on a
 * machine with no GPU. Build flags (-DRA_CUDA_<NAME>=N) apply as to the CUDA library:
 *   g++ -std=c++17 -O2 -shared -fPIC -Ikernel/include kernel/cuda/plan_host.cpp -o libregress_plan_cuda.so
 * It exports ra_plan_launch, ra_backend_name and ra_build_info (the flags only, "planner_only": true).
 */
#include "plan.h"

extern "C" ra_status ra_plan_launch(const ra_attention_params* params, const ra_device_facts* device,
                                    ra_launch_plan* plan, char* err, size_t err_len) {
  return ra_cuda::plan_launch_abi(params, device, plan, err, err_len);
}

extern "C" const char* ra_backend_name(void) { return "cuda"; }

#define RA_XSTR_(x) #x
#define RA_XSTR(x) RA_XSTR_(x)

/* The planner's build facts: the flags it was built with (flags.def, as the CUDA library reports
 * them) and no kernels. */
extern "C" const char* ra_build_info(void) {
  return "{\"backend\":\"cuda\",\"abi\":" RA_XSTR(RA_ABI_VERSION) ",\"planner_only\":true,"
#define RA_FLAG(name, key, allowed, values, why) "\"" key "\":" RA_XSTR(RA_CUDA_##name) ","
#include "flags.def"
#undef RA_FLAG
         "\"tail_max_splits\":64,\"tail_min_gain_permille\":5,\"max_splits\":32}";
}
