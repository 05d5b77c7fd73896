/*
 * attention_sm90.cu — the CUDA backend of regress_attn.h for NVIDIA Hopper (sm_90a).
 * The single translation unit: kernels are composed here from the parts beside it.
 *
 * Main path (FlashAttention-3 shape), one persistent CTA per SM, 384 threads:
 *
 *   warpgroup 0 (producer, 40 regs)      warpgroups 1, 2 (consumers, 232 regs, 64 query rows each)
 *   -------------------------------      ---------------------------------------------------------
 *   TMA Q tile  -> smem q[t%2] [q_full]   wait q_full (2 Q buffers: the next tile's Q loads early)
 *   for each key block n:                 block 0: max, exp2 of its first half (S_0 is ready)
 *     TMA K_n -> smem k[n%2] [k_full]     for each key block n (the split P.V, RA_CUDA_SPLIT_PV):
 *     TMA V_n -> smem v[n%2] [v_full]       wgmma  O += P_n V_n, first half of the keys (async)
 *     (waits k_empty / v_empty before        exp2 of the second half beside it (MUFU)
 *      reusing a stage)                      wgmma  S = Q K_{n+1}^T; O += P_n V_n, second half
 *                                            wait S -> release k; max, exp2 of its first half beside
 *                                            the second half's product; wait P.V -> release v;
 *                                            rescale O
 *                                          (seqlen_k <= 256: the next tile's S = Q K_0^T issued
 *                                           beside the last block's second half)
 *                                          O /= l, round (rtne|rtna|rtz; cvt.rn/rz.bf16x2) -> stmatrix
 *                                          into per-warp swizzled smem -> TMA stores (rows past
 *                                          seqlen_q clipped), running while the next tile computes
 *                                          A warpgroup with no row < seqlen_q (decode) only releases
 *                                          the stages it would have read.
 * Split over keys (split.cuh; plan.h's split_rule): where the grid of (batch, head, query block)
 * tiles would leave SMs idle or give a CTA a long serial key loop, each is cut into slices of keys;
 * the tiles write fp32 partials into a per-stream workspace and attn_merge_splits rounds them.
 * Which kernel runs a launch, on how many CTAs, with which splits and workspace: plan.h, the one
 * planner (ra_plan_launch exports it; plan_host.cpp builds it without CUDA). Build flags: flags.def.
 *
 * Fallback path (mainloop_sm80.cuh): FlashAttention-2 shape with mma.sync, for strides a TMA
 * descriptor cannot express.
 *
 * Rounding mode and layout are compile-time template parameters, chosen once per launch by
 * dispatch() below; the stream is params->stream. Build (the project's build module uses exactly
 * this; see docs/perf-notes.md):
 *   nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a -lineinfo \
 *        -Xptxas -v -Ikernel kernel/cuda/attention_sm90.cu -o build/libregress_attn_cuda.so
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "../common/bf16.h"
#include "../common/inject.h"
#include "../common/validate.h"
#include "../include/regress_attn.h"
#include "mainloop_sm80.cuh"
#include "mainloop_sm90.cuh"
#include "mainloop_v2.cuh"
#include "params.cuh"
#include "plan.h"

namespace ra_cuda {

// ---------------------------------------------------------------------------------------------
// kernels: thin compositions of the parts

/* One thread of the CTA, before the warpgroups part: the mbarriers, and the tensor maps prefetched. */
template <class SmemT>
__device__ __forceinline__ void cta_prologue(const FwdParams& p, SmemT& sm) {
  sm90::init_barriers(sm);
  tma_prefetch_desc(&p.tma_q);
  tma_prefetch_desc(&p.tma_k);
  tma_prefetch_desc(&p.tma_v);
  tma_prefetch_desc(&p.tma_o);
}

/* kMerge: the decode split's merge in the kernel (split.cuh's merge_if_last); only launches with
 * p.merge_in_kernel take this instantiation. */
template <int kRound, Layout L, bool kNQK, class Plan, bool kMerge, bool kDyn, bool kTail>
__device__ __forceinline__ void fwd_sm90(const FwdParams& p) {
  extern __shared__ uint8_t smem_raw[];
  sm90::Smem<Plan>& sm =
      *reinterpret_cast<sm90::Smem<Plan>*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);
  if (RA_CUDA_TRACE && threadIdx.x == 0) trace(kTraceEntryNs), trace(kTraceEntry);
  if (threadIdx.x == 0) cta_prologue(p, sm);
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      if (RA_CUDA_TRACE) trace(kTraceReady);
      sm90::produce<Plan, kDyn, kTail>(p, sm);
      if (RA_CUDA_TRACE) trace(kTraceLastIssue);
    }
  } else {
    setmaxnreg_inc<232>();
    sm90::consume<kRound, L, kNQK, kMerge, Plan, kDyn, kTail>(p, sm, wg - 1, (int)threadIdx.x - 128 * wg);
    if (RA_CUDA_TRACE && threadIdx.x == 128) trace(kTraceExit), trace(kTraceExitNs);
  }
}

/* kPP and kDecode are always false: ping-pong and the 3-stage decode plan were measured and deleted
 * (docs/perf-notes.md, deleted flags); the parameters stay so that every kernel keeps the symbol
 * (and the SASS, benchmarks/h200/sass_diff.sh) of the builds the device measured. */
template <int kRound, Layout L, bool kPP, bool kNQK, bool kDecode, bool kMerge = false, bool kDyn = false>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90(const __grid_constant__ FwdParams p) {
  static_assert(!kPP && !kDecode, "no ping-pong or decode-plan kernel since issue 37");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, kNQK, sm90::MainPlan, kMerge, kDyn, false>(p);
#endif
}

/* RA_CUDA_LONG_BLOCK_N: the long-key plan's kernel (key blocks of N keys, mainloop_sm90.cuh's
 * LongPlan), its own instantiation so that no other launch's code changes; unsplit, no ping-pong,
 * the next tile's Q K^T after the epilogue. Not instantiated with RA_CUDA_LONG_BLOCK_N=0. */
template <int kRound, Layout L>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90_long(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, false, sm90::LongPlan, false, false, false>(p);
#endif
}

/* RA_CUDA_SHORT_BLOCK_N: the short-key plan's kernel (one key block of N keys, 3 Q stages:
 * mainloop_sm90.cuh's ShortPlan), its own instantiation so that no other launch's code changes;
 * unsplit, static order, no ping-pong, the next tile's Q K^T beside the last P.V. Not instantiated
 * with RA_CUDA_SHORT_BLOCK_N=0. */
template <int kRound, Layout L>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90_short(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, true, sm90::ShortPlan, false, false, false>(p);
#endif
}

/* RA_CUDA_TAIL_SPLIT: the main plan's kernel over tail_coord's work items (whole tiles, then the
 * tail's parts, merged by the last part of each), no ping-pong, the next tile's Q K^T after the
 * epilogue. Its own instantiation (none with RA_CUDA_TAIL_SPLIT=0), so no other launch's code changes. */
template <int kRound, Layout L>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90_tail(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, false, sm90::MainPlan, false, false, true>(p);
#endif
}

/* ABI v2 (issue 40; plan.h's rule 0): grouped-query heads, causal masks, varlen, the LSE
 * (mainloop_v2.cuh), one instantiation per rounding x mask x lengths x packing; the strided layout
 * only (the TMA path reads no stride in code). Its own kernels: the dense ones keep their code. */
template <int kRound, class Mask, class Seq, bool kPack>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90_v2(const __grid_constant__ FwdParamsV2 p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Plan = sm90::MainPlan;
  extern __shared__ uint8_t smem_raw[];
  sm90::SmemV2<Plan>& sm =
      *reinterpret_cast<sm90::SmemV2<Plan>*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);
#if RA_CUDA_STAIR_EXACT
  if (Mask::kCausal && threadIdx.x == 0) /* fenced by cta_prologue's barrier-init fence */
    for (int s = 0; s < sm90::kStairSlots; ++s) {
      mbar_init(&sm.stair_info_full[s], 1);
      mbar_init(&sm.stair_full[s], kStairVoteWarps);
    }
#endif
  if (threadIdx.x == 0) cta_prologue(p, sm);
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) sm90::produce_v2<Mask, Seq, kPack>(p, sm);
#if RA_CUDA_STAIR_EXACT
    /* warps 1-3: the causal tiles' staircase votes, a tile ahead of the consumers (stair.cuh) */
    if constexpr (Mask::kCausal)
      if (threadIdx.x >= 32) sm90::vote_stairs_v2<Mask, Seq, kPack>(p, sm, (int)threadIdx.x - 32);
#endif
  } else {
    setmaxnreg_inc<232>();
    sm90::consume_v2<kRound, Mask, Seq, kPack>(p, sm, wg - 1, (int)threadIdx.x - 128 * wg);
  }
#endif
}

template <int kRound, Layout L>
__global__ void __launch_bounds__(sm80::kThreads) attn_fwd_mma_sync(const __grid_constant__ FwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  sm80::Smem& sm = *reinterpret_cast<sm80::Smem*>(smem_raw);
  sm80::run<kRound, L>(p, sm);
}
/* attn_merge_splits<kRound> (split.cuh) is the third kernel: it rounds a split launch's partials. */

// ---------------------------------------------------------------------------------------------
// host side

namespace {

/* The one switch: runtime (rounding, layout, schedule) -> compile-time constants; rounding x
 * layout is ../common/variant.h's switch, shared with the HIP backend. A schedule
 * option fixed at build time (0 or 1) instantiates one kernel; -1 instantiates both and picks by
 * shape. */
template <int kOption, class G>
void with_option(bool by_shape, G&& g) {
  if constexpr (kOption == -1) {
    if (by_shape)
      g(std::true_type{});
    else
      g(std::false_type{});
  } else {
    (void)by_shape;
    g(std::integral_constant<bool, kOption == 1>{});
  }
}

template <class F>
void dispatch(int rounding, Layout layout, bool next_qk, F&& f) {
  ra_variant::dispatch(rounding, layout, [&](auto round_c, auto layout_c) {
    with_option<RA_CUDA_NEXT_QK>(next_qk, [&](auto nqk_c) { f(round_c, layout_c, nqk_c); });
  });
}

struct DeviceInfo {
  int sm_count = 0;
  int major = 0;
  int minor = 0;
  /* bit per kernel instantiation, kind x 6 + (rounding, layout): smem attribute set on this device
   * (atomic: any thread may launch); two words for plan.h's kKinds x 6 bits */
  std::atomic<uint64_t> attr_done[2] = {{0}, {0}};
  std::atomic<bool> ready{false}; /* the three fields above are set (release) before it is read true */
};
constexpr int kMaxDevices = 64;
DeviceInfo g_devices[kMaxDevices];
std::mutex g_device_mutex; /* DeviceInfo's first fill */

std::atomic<unsigned long long> g_launches{0};

PFN_cuTensorMapEncodeTiled_v12000 get_encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      ptr = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

/* L2 promotion of the tensor maps' fetches: 0 (none), 128 or 256 bytes (issue 26 measures them:
 * docs/perf-notes.md v5). A 64-column box row is 128 bytes of a 256-byte row. */
constexpr CUtensorMapL2promotion kL2Promotion = RA_CUDA_L2_PROMO == 0     ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                                : RA_CUDA_L2_PROMO == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                                          : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;

/* (d, seq, head, batch) -> 64 x box_rows x 1 x 1 boxes, 128-byte swizzle, zero fill out of range
 * (loads) or nothing written out of range (stores). */
bool encode_tma(CUtensorMap* map, const uint16_t* base, const int64_t stride[4], int64_t seqlen, int64_t heads,
                int64_t batch, cuuint32_t box_rows, cuuint32_t box_heads = 1) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = get_encode_fn();
  if (!encode) return false;
  cuuint64_t dims[4] = {(cuuint64_t)RA_HEAD_DIM, (cuuint64_t)seqlen, (cuuint64_t)heads, (cuuint64_t)batch};
  /* A stride of a size-1 dimension is never used; give it a harmless legal value. */
  const int64_t sizes[3] = {seqlen, heads, batch};
  const int64_t es[3] = {stride[2], stride[1], stride[0]};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i) strides[i] = (cuuint64_t)((sizes[i] == 1 ? (int64_t)RA_HEAD_DIM : es[i]) * 2);
  cuuint32_t box[4] = {64, box_rows, box_heads, 1};
  cuuint32_t estr[4] = {1, 1, 1, 1};
  CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<uint16_t*>(base), dims, strides, box, estr,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, kL2Promotion,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

/* The last few tensor maps this thread encoded, by everything an encoding depends on: a model
 * calls with the same buffers again and again (the allocator reuses them), and each call needs four
 * maps. An encoding is a pure function of its key, so a hit is the same 128 bytes. */
struct TmapKey {
  const void* base;
  int64_t stride[3];
  int64_t seqlen, heads, batch;
  uint32_t box_rows, box_heads;
};
constexpr int kTmapCacheSize = 16;
struct TmapCache {
  TmapKey key[kTmapCacheSize];
  CUtensorMap map[kTmapCacheSize];
  int used = 0;
  int next = 0;
};
thread_local TmapCache t_tmaps;

bool encode_tma_cached(CUtensorMap* map, const uint16_t* base, const int64_t stride[4], int64_t seqlen,
                       int64_t heads, int64_t batch, cuuint32_t box_rows, cuuint32_t box_heads = 1) {
  if (!RA_CUDA_TMAP_CACHE) return encode_tma(map, base, stride, seqlen, heads, batch, box_rows, box_heads);
  TmapKey key;
  memset(&key, 0, sizeof key); /* padding too: keys compare with memcmp */
  key.base = base;
  for (int i = 0; i < 3; ++i) key.stride[i] = stride[i];
  key.seqlen = seqlen;
  key.heads = heads;
  key.batch = batch;
  key.box_rows = box_rows;
  key.box_heads = box_heads;
  TmapCache& c = t_tmaps;
  for (int i = 0; i < c.used; ++i)
    if (memcmp(&c.key[i], &key, sizeof key) == 0) {
      *map = c.map[i];
      return true;
    }
  if (!encode_tma(map, base, stride, seqlen, heads, batch, box_rows, box_heads)) return false;
  c.key[c.next] = key;
  c.map[c.next] = *map;
  c.next = (c.next + 1) % kTmapCacheSize;
  if (c.used < kTmapCacheSize) ++c.used;
  return true;
}

ra_status device_error(cudaError_t e, const char* what, char* err, size_t err_len) {
  return ra_fail(err, err_len, RA_ERR_DEVICE, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* `bit`: the instantiation's index, 0..127 (launch() numbers them: kind x 6 + (rounding, layout)) */
static_assert(kKinds * 6 <= 128, "one bit per kernel instantiation");
template <class Kernel>
cudaError_t ensure_smem_attr(Kernel kernel, DeviceInfo& dev, unsigned bit, size_t bytes) {
  std::atomic<uint64_t>& word = dev.attr_done[bit / 64];
  const uint64_t mask = uint64_t{1} << (bit % 64);
  if (word.load(std::memory_order_acquire) & mask) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (e == cudaSuccess) word.fetch_or(mask, std::memory_order_release);
  return e;
}

/* The split's fp32 partials and its counters (split.cuh) live in a buffer per (device, stream), so
 * launches on one stream, which run in order, share it and launches on different streams never do.
 * A buffer only grows, and an outgrown one is never freed: a CUDA graph captured earlier may still
 * write it. cudaMalloc runs in the relaxed capture mode, so that a capture in progress (here or in
 * another thread) is not invalidated, and the counters of a new buffer are zeroed on a private
 * stream, waited for at once (each launch leaves them at 0 again). A graph replayed on another stream
 * than the one it was captured on, beside eager calls on that stream, would share their buffer: not
 * supported; nor two graphs captured on one stream (torch.cuda.graph() captures every graph on one
 * stream) replayed at once on two streams: their partials and counters would interleave. nullptr
 * (no split) when the table is full or a CUDA call fails. Layout: `floats` bytes of partials, then
 * the counters. */
struct Workspace {
  int dev;
  cudaStream_t stream;
  void* ptr;
  size_t floats_bytes, counters;
};
constexpr int kMaxWorkspaces = 32;
std::mutex g_ws_mutex;
Workspace g_ws[kMaxWorkspaces];
int g_ws_used = 0;
cudaStream_t g_zero_stream[kMaxDevices];

/* The size a workspace part grows to: as it is if it holds `need`, else at least doubled, so a
 * stream whose launches grow step by step reallocates O(log) times. */
constexpr size_t workspace_grown(size_t have, size_t need) {
  return have >= need ? have : std::max(need, 2 * have);
}

struct WorkspacePtrs {
  float* floats;
  int* counters;
};

WorkspacePtrs split_workspace(int dev, cudaStream_t stream, size_t floats_bytes, size_t counters) {
  const WorkspacePtrs none{nullptr, nullptr};
  if (stream == cudaStreamPerThread) return none; /* one handle for many streams */
  std::lock_guard<std::mutex> lock(g_ws_mutex);
  Workspace* w = nullptr;
  for (int i = 0; i < g_ws_used && !w; ++i)
    if (g_ws[i].dev == dev && g_ws[i].stream == stream) w = &g_ws[i];
  if (!w) {
    if (g_ws_used == kMaxWorkspaces) return none;
    w = &g_ws[g_ws_used++];
    *w = Workspace{dev, stream, nullptr, 0, 0};
  }
  auto ptrs = [](const Workspace& x) {
    return WorkspacePtrs{static_cast<float*>(x.ptr), reinterpret_cast<int*>(static_cast<char*>(x.ptr) + x.floats_bytes)};
  };
  if (w->floats_bytes >= floats_bytes && w->counters >= counters) return ptrs(*w);
  /* only the part that is short grows (a first counter request once doubled the partials too) */
  const size_t fb = workspace_grown(w->floats_bytes, floats_bytes);
  const size_t nc = workspace_grown(w->counters, counters);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) return (void)cudaGetLastError(), none;
  void* ptr = nullptr;
  cudaError_t e = cudaSuccess;
  if (nc && !g_zero_stream[dev]) e = cudaStreamCreateWithFlags(&g_zero_stream[dev], cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc(&ptr, fb + nc * sizeof(int));
  if (e == cudaSuccess && nc) e = cudaMemsetAsync(static_cast<char*>(ptr) + fb, 0, nc * sizeof(int), g_zero_stream[dev]);
  if (e == cudaSuccess && nc) e = cudaStreamSynchronize(g_zero_stream[dev]);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (e != cudaSuccess) return (void)cudaGetLastError(), none; /* a buffer that failed to zero leaks */
  w->ptr = ptr;
  w->floats_bytes = fb;
  w->counters = nc;
  return ptrs(*w);
}

/* The tensor maps of K and V over key blocks of n keys (the short and long kernels' boxes). */
bool encode_kv_boxes(FwdParams& p, int n) {
  return encode_tma_cached(&p.tma_k, p.k, p.k_stride, p.seqlen_k, p.heads, p.batch, (cuuint32_t)n) &&
         encode_tma_cached(&p.tma_v, p.v, p.v_stride, p.seqlen_k, p.heads, p.batch, (cuuint32_t)n);
}

/* A runtime flag as a compile-time one (the v2 kernels' mask, lengths and packing). */
template <class G>
void with_bool(bool v, G&& g) {
  if (v)
    g(std::true_type{});
  else
    g(std::false_type{});
}

/* A v2 plan (plan.h's rule 0): the varlen pre-pass where the plan has one, then attn_fwd_sm90_v2 of
 * the plan's kind (causal, varlen, packed) and the call's rounding. */
ra_status launch_v2(FwdParamsV2& p, const LaunchPlan& lp, int rounding, DeviceInfo& dev, cudaStream_t stream,
                    char* err, size_t err_len) {
  const int k = (int)lp.kind - (int)Kind::kV2;
  cudaError_t e = cudaSuccess;
  ra_variant::dispatch(rounding, Layout::kStrided, [&](auto round_c, auto) {
    constexpr int R = decltype(round_c)::value;
    with_bool(k & 1, [&](auto causal_c) {
      with_bool(k & 2, [&](auto varlen_c) {
        with_bool(k & 4, [&](auto pack_c) {
          using Mask = std::conditional_t<decltype(causal_c)::value, CausalMask, NoMask>;
          using Seq = std::conditional_t<decltype(varlen_c)::value, VarSeq, FixedSeq>;
          constexpr bool kPack = decltype(pack_c)::value;
          if (lp.prepare) {
            attn_varlen_tiles<Mask, kPack><<<1, kVarPrepThreads, 0, stream>>>(p);
            if ((e = cudaGetLastError()) != cudaSuccess) return;
          }
          auto kernel = attn_fwd_sm90_v2<R, Mask, Seq, kPack>;
          e = ensure_smem_attr(kernel, dev, (unsigned)lp.kind * 6 + (unsigned)(R * 2), lp.shared_bytes);
          if (e == cudaSuccess) kernel<<<(unsigned)lp.grid[0], lp.threads, lp.shared_bytes, stream>>>(p);
          if (e == cudaSuccess) e = cudaGetLastError();
        });
      });
    });
  });
  if (e != cudaSuccess) return device_error(e, "kernel launch", err, err_len);
  return RA_OK;
}

/* The launch plan.h planned, its workspace in p's pointers: the kernel lp.kind names (one template
 * instantiation per kind, rounding and layout; those of a flag set to 0 are not built), then
 * attn_merge_splits where the plan merges in a second launch. */
ra_status launch(FwdParams& p, const LaunchPlan& lp, int rounding, Layout layout, DeviceInfo& dev,
                 cudaStream_t stream, char* err, size_t err_len) {
  cudaError_t e = cudaSuccess;
  bool boxes_refused = false;
  dispatch(rounding, layout, lp.next_qk, [&](auto round_c, auto layout_c, auto nqk_c) {
    constexpr int R = decltype(round_c)::value;
    constexpr Layout L = decltype(layout_c)::value;
    constexpr bool NQK = decltype(nqk_c)::value;
    const unsigned bit = (unsigned)lp.kind * 6 + (unsigned)(R * 2 + (L == Layout::kPacked ? 1 : 0));
    auto run = [&](auto kernel, const FwdParams& args) {
      e = ensure_smem_attr(kernel, dev, bit, lp.shared_bytes);
      if (e == cudaSuccess) kernel<<<(unsigned)lp.grid[0], lp.threads, lp.shared_bytes, stream>>>(args);
    };
    /* the short and long kernels: the same tiles over key blocks of lp.block_n keys */
    auto run_over_blocks = [&](auto kernel) {
      if (!encode_kv_boxes(p, lp.block_n)) return (void)(boxes_refused = true);
      run(kernel, p);
    };
    if (lp.kind != Kind::kMmaSync) {
      if constexpr (NQK) {
        if (RA_CUDA_DYN_SCHED != 0 && lp.kind == Kind::kDynamic) {
          if constexpr (RA_CUDA_DYN_SCHED != 0) run(attn_fwd_sm90<R, L, false, true, false, false, true>, p);
        } else if (RA_CUDA_SHORT_BLOCK_N != 0 && lp.kind == Kind::kShort) {
          if constexpr (RA_CUDA_SHORT_BLOCK_N != 0) run_over_blocks(attn_fwd_sm90_short<R, L>);
        } else {
          run(attn_fwd_sm90<R, L, false, true, false>, p);
        }
      } else {
        if (!RA_CUDA_MERGE_KERNEL && lp.kind == Kind::kMergeInKernel) {
          if constexpr (!RA_CUDA_MERGE_KERNEL) run(attn_fwd_sm90<R, L, false, false, false, true>, p);
        } else if (RA_CUDA_TAIL_SPLIT != 0 && lp.kind == Kind::kTailSplit) {
          if constexpr (RA_CUDA_TAIL_SPLIT != 0) run(attn_fwd_sm90_tail<R, L>, p);
        } else if (RA_CUDA_LONG_BLOCK_N != 0 && lp.kind == Kind::kLong) {
          if constexpr (RA_CUDA_LONG_BLOCK_N != 0) run_over_blocks(attn_fwd_sm90_long<R, L>);
        } else {
          run(attn_fwd_sm90<R, L, false, false, false>, p);
        }
      }
      if (e != cudaSuccess || boxes_refused) return;
      if (lp.merge_launch) {
        if ((e = cudaGetLastError()) != cudaSuccess) return;
        attn_merge_splits<R><<<(unsigned)lp.merge_grid, 32 * kMergeRowsPerBlock, 0, stream>>>(p);
      }
    } else {
      auto kernel = attn_fwd_mma_sync<R, L>;
      e = ensure_smem_attr(kernel, dev, bit, lp.shared_bytes);
      if (e != cudaSuccess) return;
      /* (batch x head) is grid.y, at most kMaxGridY: launches of lp.batch_per_launch whole batches,
       * each over its batches' rows (any strides: the pointers move by whole batch strides) */
      const int per = lp.batch_per_launch;
      for (int b0 = 0; b0 < p.batch; b0 += per) {
        FwdParams c = p;
        c.batch = std::min(per, p.batch - b0);
        c.q = p.q + b0 * p.q_stride[0];
        c.k = p.k + b0 * p.k_stride[0];
        c.v = p.v + b0 * p.v_stride[0];
        c.o = p.o + b0 * p.o_stride[0];
        c.num_tiles = c.num_m_blocks * c.batch * c.heads;
        c.nondet_flip = b0 == 0 ? p.nondet_flip : 0; /* the drill's one element, O[0,0,0,0] */
        dim3 grid((unsigned)c.num_m_blocks, (unsigned)(c.batch * c.heads));
        kernel<<<grid, lp.threads, lp.shared_bytes, stream>>>(c);
        if (b0 + per < p.batch && (e = cudaGetLastError()) != cudaSuccess) return;
      }
    }
    e = cudaGetLastError();
  });
  if (boxes_refused)
    return ra_fail(err, err_len, RA_ERR_DEVICE, "cuTensorMapEncodeTiled refused K/V boxes of %d keys (%s)",
                   lp.block_n, kind_name(lp.kind));
  if (e != cudaSuccess) return device_error(e, "kernel launch", err, err_len);
  return RA_OK;
}

/* FwdParams' launch fields from the plan, and the workspace's pointers where it has one. */
void apply_plan(FwdParamsV2& p, const LaunchPlan& lp, const WorkspacePtrs& ws) {
  p.num_m_blocks = lp.num_m_blocks;
  p.num_n_blocks = lp.num_n_blocks;
  p.num_tiles = lp.num_tiles;
  p.num_splits = lp.num_splits;
  p.split_blocks = lp.split_blocks;
  p.merge_in_kernel = lp.merge_in_kernel ? 1 : 0;
  p.tail_first = lp.tail_first;
  p.tail_splits = lp.tail_splits;
  p.tail_blocks = lp.tail_blocks;
  if (is_v2_kind(lp.kind)) {
    p.pack_log2_rows = lp.pack_log2_rows;
    p.head_groups = lp.head_groups;
    p.v2_m_blocks = lp.v2_m_blocks;
    p.v2_tiles = lp.num_tiles;
    p.l2_section = lp.l2_section;
    if (lp.dynamic) p.tile_counter = ws.counters;
    if (lp.prepare) {
      p.var_count = reinterpret_cast<int*>(ws.floats);
      p.var_tiles = reinterpret_cast<VarTile*>(ws.floats + 4);
    }
    return;
  }
  if (lp.num_splits > 1 || lp.tail_splits > 1) {
    p.part_o = ws.floats;
    p.part_ml = ws.floats + lp.ml_offset;
    p.part_cnt = ws.counters;
  }
  if (lp.dynamic) p.tile_counter = ws.counters;
}
}  // namespace
}  // namespace ra_cuda

using namespace ra_cuda;

extern "C" ra_status ra_validate(const ra_attention_params* params, char* err, size_t err_len) {
  return ra_validate_params(params, err, err_len); /* cu_seqlens' contents: the varlen pre-pass, on the device */
}

extern "C" const char* ra_backend_name(void) { return "cuda"; }

#if RA_CUDA_TRACE
/* Trace builds only (trace.cuh; not part of the ABI, so the default library does not export it):
 * copies the last launch's per-CTA rows (kTraceEvents values each, the first `ctas` CTAs) into
 * `out`; 0 on success, else the CUDA error. */
extern "C" int ra_cuda_trace_read(unsigned long long* out, int ctas) {
  const size_t n = (size_t)std::min(std::max(ctas, 0), ra_cuda::kTraceCtas);
  const cudaError_t e = cudaMemcpyFromSymbol(out, ra_cuda::g_ra_trace, sizeof(unsigned long long) * ra_cuda::kTraceEvents * n);
  return (int)e;
}
#endif

#define RA_XSTR_(x) #x
#define RA_XSTR(x) RA_XSTR_(x)

static_assert(kTailMaxSplits == 64 && kTailMinGainPerMille == 5 && kMaxSplits == 32,
              "ra_build_info states the split rules' constants");

extern "C" const char* ra_build_info(void) {
  return "{\"backend\":\"cuda\",\"abi\":" RA_XSTR(RA_ABI_VERSION) ",\"inject\":" RA_INJECT_INFO
         ",\"arch\":\"sm_90a\",\"nvcc\":\"" RA_XSTR(__CUDACC_VER_MAJOR__) "." RA_XSTR(__CUDACC_VER_MINOR__) "." RA_XSTR(
             __CUDACC_VER_BUILD__) "\",\"paths\":[\"wgmma_tma_ws\",\"mma_sync\"],"
/* every flag of flags.def, "key":value, */
#define RA_FLAG(name, key, allowed, values, why) "\"" key "\":" RA_XSTR(RA_CUDA_##name) ","
#include "flags.def"
#undef RA_FLAG
         "\"tail_max_splits\":64,\"tail_min_gain_permille\":5,\"max_splits\":32,\"tiles\":{\"sm90\":[128,128],\"mma_sync\":[64,64]}}";
}

extern "C" ra_status ra_plan_launch(const ra_attention_params* params, const ra_device_facts* device,
                                    ra_launch_plan* plan, char* err, size_t err_len) {
  return plan_launch_abi(params, device, plan, err, err_len);
}

extern "C" ra_status ra_attention_fwd(const ra_attention_params* caller, char* err, size_t err_len) {
  ra_status st = ra_validate(caller, err, err_len);
  if (st != RA_OK) return st;
  if (err && err_len) err[0] = '\0';
  ra_attention_params viewed; /* the call as the launch sees it (plan.h's call_view: ra_plan_launch's too) */
  const ra_attention_params* P = call_view(caller, viewed);

  int dev_id = 0;
  cudaError_t e = cudaGetDevice(&dev_id);
  if (e != cudaSuccess) return device_error(e, "cudaGetDevice", err, err_len);
  if (dev_id < 0 || dev_id >= kMaxDevices) return ra_fail(err, err_len, RA_ERR_DEVICE, "device %d out of range", dev_id);
  DeviceInfo& dev = g_devices[dev_id];
  if (!dev.ready.load(std::memory_order_acquire)) { /* first call on this device, maybe in two threads */
    std::lock_guard<std::mutex> lock(g_device_mutex);
    if (!dev.ready.load(std::memory_order_relaxed)) {
      int sms = 0, major = 0, minor = 0;
      if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id)) != cudaSuccess ||
          (e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev_id)) != cudaSuccess ||
          (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev_id)) != cudaSuccess)
        return device_error(e, "cudaDeviceGetAttribute", err, err_len);
      dev.major = major;
      dev.minor = minor;
      dev.sm_count = sms;
      dev.ready.store(true, std::memory_order_release);
    }
  }
  if (dev.major != 9 || dev.minor != 0)
    return ra_fail(err, err_len, RA_ERR_DEVICE, "this library is built for sm_90a; device %d is sm_%d%d", dev_id,
                   dev.major, dev.minor);

  FwdParamsV2 p; /* the dense launches take its FwdParams part (launch()) */
  memset(&p, 0, sizeof p);
  p.q = P->q;
  p.k = P->k;
  p.v = P->v;
  p.o = P->o;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = P->q_stride[i];
    p.k_stride[i] = P->k_stride[i];
    p.v_stride[i] = P->v_stride[i];
    p.o_stride[i] = P->o_stride[i];
  }
  p.batch = (int)P->batch;
  p.heads = (int)P->heads;
  p.seqlen_q = (int)P->seqlen_q;
  p.seqlen_k = (int)P->seqlen_k;
  p.scale_log2 = ra_effective_scale(P) * 1.4426950408889634f;

  const bool bhsd = P->q_stride[2] == RA_HEAD_DIM && P->k_stride[2] == RA_HEAD_DIM && P->v_stride[2] == RA_HEAD_DIM &&
                    P->o_stride[2] == RA_HEAD_DIM;
  const Layout layout = bhsd ? Layout::kPacked : Layout::kStrided;
  const bool v2 = is_v2_call(P);

  bool use_tma = !RA_CUDA_FORCE_MMA_SYNC;
  if (use_tma && !v2)
    use_tma = encode_tma_cached(&p.tma_q, P->q, P->q_stride, P->seqlen_q, P->heads, P->batch, sm90::kBlockM) &&
              encode_tma_cached(&p.tma_k, P->k, P->k_stride, P->seqlen_k, P->heads, P->batch, sm90::kBlockN) &&
              encode_tma_cached(&p.tma_v, P->v, P->v_stride, P->seqlen_k, P->heads, P->batch, sm90::kBlockN) &&
              encode_tma_cached(&p.tma_o, P->o, P->o_stride, P->seqlen_q, P->heads, P->batch, 16);
  LaunchPlan lp;
  if (v2) {
    /* ABI v2: K/V have heads_kv heads; a varlen call's tensors are one packed batch entry; a packed
     * GQA plan's Q box is R rows of kv_group heads (pack_gqa.cuh) */
    const int64_t batch = P->cu_seqlens_q ? 1 : P->batch;
    lp = plan_v2(plan_input(P, true, dev.sm_count, kMaxWorkspaceBytes));
    const bool pack = lp.kind >= Kind::kV2Pack;
    const int group = (int)(P->heads / P->heads_kv);
    const cuuint32_t q_rows = pack ? 1u << lp.pack_log2_rows : (cuuint32_t)sm90::kBlockM;
    use_tma = use_tma &&
              encode_tma_cached(&p.tma_q, P->q, P->q_stride, P->seqlen_q, P->heads, batch, q_rows,
                                pack ? (cuuint32_t)group : 1u) &&
              encode_tma_cached(&p.tma_k, P->k, P->k_stride, P->seqlen_k, P->heads_kv, batch, sm90::kBlockN) &&
              encode_tma_cached(&p.tma_v, P->v, P->v_stride, P->seqlen_k, P->heads_kv, batch, sm90::kBlockN) &&
              encode_tma_cached(&p.tma_o, P->o, P->o_stride, P->seqlen_q, P->heads, batch, 16);
    if (!use_tma) return refuse_v2_fallback(err, err_len);
    p.heads_kv = (int)P->heads_kv;
    p.kv_group = group;
    p.mask_bottom_right = P->mask == RA_MASK_CAUSAL_BOTTOM_RIGHT ? 1 : 0;
    p.max_seqlen_q = (int)P->max_seqlen_q;
    p.max_seqlen_k = (int)P->max_seqlen_k;
    p.cu_seqlens_q = P->cu_seqlens_q;
    p.cu_seqlens_k = P->cu_seqlens_k;
    p.lse = P->lse;
  }

  cudaStream_t stream = static_cast<cudaStream_t>(P->stream);
  (void)cudaGetLastError(); /* an earlier, unrelated error must not be reported as ours */

  RA_INJECT_HANG_LAUNCH(caller->seqlen_q, stream); /* drill: the stream never drains */
  RA_INJECT_CRASH_LAUNCH(caller->seqlen_q);        /* drill: the process dies here */
  const unsigned long long n = ++g_launches;
  p.nondet_flip = (RA_INJECT_NONDET && (n & 1ull)) ? 1 : 0;
  PlanInput in = plan_input(P, use_tma, dev.sm_count, kMaxWorkspaceBytes);
  if (!v2 && !plan(in, lp)) return refuse_heads(P->heads, err, err_len);
  WorkspacePtrs ws{nullptr, nullptr};
  if (lp.workspace_bytes() > 0) {
    ws = split_workspace(dev_id, stream, lp.partial_floats * sizeof(float), lp.counters);
    if (!ws.counters) { /* no workspace to be had (a per-thread stream, a full table, no memory): none planned */
      if (lp.prepare)
        return ra_fail(err, err_len, RA_ERR_DEVICE,
                       "varlen needs a workspace for its tile list (none on a per-thread default stream, or "
                       "the allocation failed)");
      in.max_workspace = 0;
      plan(in, lp);
    }
  }
  apply_plan(p, lp, ws);
  if (is_v2_kind(lp.kind)) return launch_v2(p, lp, P->rounding, dev, stream, err, err_len);
  return launch(p, lp, P->rounding, layout, dev, stream, err, err_len);
}
