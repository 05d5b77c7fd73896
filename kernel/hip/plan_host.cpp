/*
 * plan_host.cpp — the gfx942 launch planner (parts/plan.h) as a host-only shared library, built
 * with the system C++ compiler (regress/build.py, PLANNERS): no ROCm, no GPU. The emulator, the
 * benchmarks, the tests and `regress plan` load it through ctypes and so ask the code that
 * ra_attention_fwd runs, not a copy of it.
 */
#include "parts/plan.h"

extern "C" ra_status ra_plan_launch(const ra_attention_params* params, const ra_device_facts* device,
                                    ra_launch_plan* plan, char* err, size_t err_len) {
  return ra_gfx942::plan_launch(params, device, plan, err, err_len);
}

/* Launch `index` of `plan` for `params` (issue order): 1 and *out filled, 0 past the last. */
extern "C" int ra_gfx942_launch_at(const ra_attention_params* params, const ra_launch_plan* plan, int64_t index,
                                   ra_gfx942_launch* out) {
  return params && plan && out && ra_gfx942::launch_at(*params, *plan, index, out) ? 1 : 0;
}

/* The params the kernels run for `params` (parts/plan.h's call_view): 1 and *view filled where the call
 * runs as its dense GQA-rows view (../common/gqa_rows.h), 0 and *view left alone where it runs as
 * given. The emulator fills the kernels' argument block from the same params the host part does. */
extern "C" int ra_gqa_rows_view_c(const ra_attention_params* params, ra_attention_params* view) {
  if (!params || !view) return 0;
  const ra_attention_params run = ra_gfx942::call_view(*params);
  if (run.heads == params->heads) return 0; /* a view always has heads_kv < the call's heads */
  *view = run;
  return 1;
}

extern "C" const char* ra_backend_name(void) { return "hip"; }
