/* hip_bf16.h stand-in (see hip_runtime.h beside it): a bf16 storage type, enough for code that only
 * moves bf16 values and does its arithmetic on the bits. */
#pragma once
struct __hip_bfloat16 {
  unsigned short data;
};
