/*
 * trace.cuh — where a launch's time goes, per CTA (-DRA_CUDA_TRACE=1; timing builds only, default 0:
 * every hook compiles to nothing and the default build's SASS is unchanged).
 *
 * Each CTA below kTraceCtas writes one row of kTraceEvents 64-bit values into g_ra_trace, read back
 * by ra_cuda_trace_read (attention_sm90.cu) after the launch: the global timer at entry and exit
 * (ns, one clock for every SM: the CTAs' start and end skew) and the SM clock at each event (cycles,
 * this SM's own: the phases inside the CTA). Overwritten by every launch; read one launch at a time.
 */
#pragma once

#include <cstdint>

#include "flags.h"


namespace ra_cuda {

enum TraceEvent : int {
  kTraceEntryNs = 0,    /* global timer, thread 0, first instruction */
  kTraceEntry = 1,      /* SM clock, thread 0, first instruction */
  kTraceReady = 2,      /* SM clock, thread 0: barriers set up, about to issue the first load */
  kTraceFirstData = 3,  /* SM clock, consumer 0's leader: the first tile's Q and K_0 have landed */
  kTraceLastIssue = 4,  /* SM clock, thread 0: the producer has issued its last load */
  kTraceExit = 5,       /* SM clock, consumer 0's leader: its last epilogue's stores are done */
  kTraceExitNs = 6,     /* global timer, the same moment */
  kTraceSm = 7,         /* %smid */
  kTraceEvents = 8
};
constexpr int kTraceCtas = 1024;

#if RA_CUDA_TRACE
__device__ unsigned long long g_ra_trace[kTraceCtas][kTraceEvents];

__device__ __forceinline__ void trace(TraceEvent ev) {
  if (blockIdx.x >= (unsigned)kTraceCtas) return;
  unsigned long long v;
  if (ev == kTraceEntryNs || ev == kTraceExitNs)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
  else
    v = (unsigned long long)clock64();
  g_ra_trace[blockIdx.x][ev] = v;
  if (ev == kTraceEntry) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_ra_trace[blockIdx.x][kTraceSm] = sm;
  }
}
#else
__device__ __forceinline__ void trace(TraceEvent) {}
#endif

}  // namespace ra_cuda
