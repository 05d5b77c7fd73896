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
 * Split over keys (split.cuh; RA_CUDA_SPLIT below): where the grid of (batch, head, query block)
 * tiles would leave SMs idle or give a CTA a long serial key loop, each is cut into slices of keys;
 * the tiles write fp32 partials into a per-stream workspace and attn_merge_splits rounds them.
 * Optional (-DRA_CUDA_PINGPONG=1, or -1 for seqlen_k <= 2048; off by default, measured slower): the
 * two consumer warpgroups take turns issuing their wgmmas (named barriers 1, 2).
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
#include "params.cuh"
#include "tail_plan.h"

#ifndef RA_CUDA_FORCE_MMA_SYNC
#define RA_CUDA_FORCE_MMA_SYNC 0
#endif
/* Consumer schedule: 0 = never ping-pong (default), 1 = always, -1 = by shape (ping-pong when
 * seqlen_k <= kPingPongMaxKeys). v2 on the H200 (rotated call order, smem epilogue): never was
 * faster or equal on every benchmark shape, by 2-8 % at seqlen_k <= 2048 (docs/perf-notes.md). */
#ifndef RA_CUDA_PINGPONG
#define RA_CUDA_PINGPONG 0
#endif
/* Split over keys: -1 = by shape (split_rule below, the default), 1 = never (the ablation), N > 1 =
 * N splits wherever a tile has N key blocks (measurement builds: benchmarks/h200_split.py). */
#ifndef RA_CUDA_SPLIT
#define RA_CUDA_SPLIT -1
#endif
/* Split of the last partial round's tiles over keys (tail_plan.h; attn_fwd_sm90_tail): 1 = by
 * tail_plan.h's rule (the default), N > 1 = N parts wherever there is a tail (measurement builds),
 * 0 = never (no such kernel is built). Only launches that split_rule leaves unsplit and the long-key
 * kernel does not take, with seqlen_q > 64 (not decode), seqlen_k > 256 (not the next-Q-K^T kernel)
 * and no ping-pong. */
#ifndef RA_CUDA_TAIL_SPLIT
#define RA_CUDA_TAIL_SPLIT 1 /* the default since device calls 34-35 (docs/perf-notes.md v12) */
#endif
static_assert(RA_CUDA_TAIL_SPLIT == 0 || RA_CUDA_TILE_ORDER == 0, "the tail split keeps the cyclic tile order");
/* K/V stages of the decode plan (mainloop_sm90.cuh), taken when seqlen_q <= 64 and the next tile's
 * Q K^T is not overlapped (seqlen_k > 256): 3, or 0 = never (the main plan's 2 stages everywhere). */
#ifndef RA_CUDA_DECODE_STAGES
#define RA_CUDA_DECODE_STAGES 0
#endif
constexpr int kDecodeMaxRows = 64;
/* The long-key kernel (RA_CUDA_LONG_BLOCK_N = N > 0, 160 by default; 0 builds none): taken by unsplit
 * launches with seqlen_k >= RA_CUDA_LONG_MIN_KEYS and seqlen_q > kDecodeMaxRows that take neither
 * ping-pong nor the next-Q-K^T overlap (seqlen_k > kNextQKMaxKeys), nor the decode, merge-in-kernel
 * or dynamic scheduler kernels; every other launch runs the default code. */
#ifndef RA_CUDA_LONG_MIN_KEYS
#define RA_CUDA_LONG_MIN_KEYS 2048
#endif
/* Which of those launches take it: 1 (the default) only where key blocks of N pad the keys less than
 * blocks of 128 (ceil(Sk / N) N < ceil(Sk / 128) 128; a tie stays at 128), since that is where it
 * was measured ahead (calls 33-34, benchmarks/results/h200-issue26-call14 and -call15, default / 160
 * time: 1.020-1.041 at 4097 keys, 1.039-1.057 at 2049) while at multiples of 128 it was 0.982-1.030
 * (1.007-1.069 at (1,32,16384,16384) in call 34 alone) and the tail split, which plans 128-key
 * blocks, gains more there;
 * 0: every launch of >= RA_CUDA_LONG_MIN_KEYS keys (the measurement builds of calls 33-34). */
#ifndef RA_CUDA_LONG_RULE
#define RA_CUDA_LONG_RULE 1
#endif
constexpr bool long_keys_pay(int seqlen_k) {
  const int n = RA_CUDA_LONG_BLOCK_N > 0 ? RA_CUDA_LONG_BLOCK_N : 128;
  return RA_CUDA_LONG_BLOCK_N != 0 && seqlen_k >= RA_CUDA_LONG_MIN_KEYS &&
         (RA_CUDA_LONG_RULE == 0 || (seqlen_k + n - 1) / n * n < (seqlen_k + 127) / 128 * 128);
}
/* The short-key kernel (RA_CUDA_SHORT_BLOCK_N = N > 0, 80 by default; 0 builds none): taken by
 * unsplit launches of the next-Q-K^T schedule without ping-pong, off the dynamic scheduler, whose
 * keys fit one block of N (a block of 128 would be mostly padding). */
constexpr bool short_keys_pay(int seqlen_k) {
  return RA_CUDA_SHORT_BLOCK_N != 0 && seqlen_k <= RA_CUDA_SHORT_BLOCK_N;
}
static_assert(RA_CUDA_SHORT_BLOCK_N >= 0 && RA_CUDA_SHORT_BLOCK_N <= RA_CUDA_NEXT_QK_MAX_KEYS,
              "the short kernel is a next-Q-K^T kernel (0: none)");
static_assert(RA_CUDA_LONG_BLOCK_N == 0 || RA_CUDA_LONG_MIN_KEYS > RA_CUDA_NEXT_QK_MAX_KEYS,
              "the long kernel has no next-Q-K^T overlap");
/* The same 3-stage plan (1 Q buffer, 3 K/V stages, output stored from registers) for short keys,
 * where the next tile's Q K^T is overlapped (seqlen_k <= 256, at most 2 key blocks a tile: a tile is
 * mostly its loads), any seqlen_q, unsplit launches: 3, or 0 = never (the default). Aimed at the
 * memory-bound (256,32,128,128): one more tile's K and V in flight per SM. Measured and dropped
 * (docs/perf-notes.md v6, call 22): ncu 257 -> 331 us there, DRAM 86 -> 67 %. */
#ifndef RA_CUDA_SHORT_STAGES
#define RA_CUDA_SHORT_STAGES 0
#endif
static_assert(RA_CUDA_SHORT_STAGES != 3 || RA_CUDA_PINGPONG == 0, "the short-key plan has no ping-pong variant");
/* 1: the persistent grid is the fewest CTAs that keep the number of tile waves, so every CTA gets
 * the same number of tiles (256 tiles: 128 CTAs of 2, not 124 of 2 and 8 of 1); no CTA gets more
 * tiles than with one CTA per SM. 0: one CTA per SM. */
#ifndef RA_CUDA_GRID_BALANCE
#define RA_CUDA_GRID_BALANCE 1
#endif
/* 1: a launch on the dynamic scheduler (tile_scheduler.cuh) gets min(tiles, SMs) CTAs, as CTAs then
 * take tiles as they free up (ncu, (256,32,128,128): 246.4 us balanced, 245.0 with 132 CTAs);
 * 0: RA_CUDA_GRID_BALANCE's grid for it too. */
#ifndef RA_CUDA_DYN_FULL_GRID
#define RA_CUDA_DYN_FULL_GRID 1
#endif

namespace ra_cuda {

// ---------------------------------------------------------------------------------------------
// kernels: thin compositions of the parts

/* kMerge: the decode split's merge in the kernel (split.cuh's merge_if_last); only launches with
 * p.merge_in_kernel take this instantiation. */
template <int kRound, Layout L, bool kPP, bool kNQK, class Plan, bool kMerge, bool kDyn, bool kTail>
__device__ __forceinline__ void fwd_sm90(const FwdParams& p) {
  extern __shared__ uint8_t smem_raw[];
  sm90::Smem<Plan>& sm =
      *reinterpret_cast<sm90::Smem<Plan>*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int wg = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0);
  if (RA_CUDA_TRACE && threadIdx.x == 0) trace(kTraceEntryNs), trace(kTraceEntry);
  if (threadIdx.x == 0) {
    sm90::init_barriers(sm);
    tma_prefetch_desc(&p.tma_q);
    tma_prefetch_desc(&p.tma_k);
    tma_prefetch_desc(&p.tma_v);
    tma_prefetch_desc(&p.tma_o);
  }
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
    sm90::consume<kRound, L, kPP, kNQK, kMerge, Plan, kDyn, kTail>(p, sm, wg - 1, (int)threadIdx.x - 128 * wg);
    if (RA_CUDA_TRACE && threadIdx.x == 128) trace(kTraceExit), trace(kTraceExitNs);
  }
}

template <int kRound, Layout L, bool kPP, bool kNQK, bool kDecode, bool kMerge = false, bool kDyn = false>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, kPP, kNQK, std::conditional_t<kDecode, sm90::DecodePlan, sm90::MainPlan>, kMerge, kDyn, false>(p);
#endif
}

/* RA_CUDA_LONG_BLOCK_N: the long-key plan's kernel (key blocks of N keys, mainloop_sm90.cuh's
 * LongPlan), its own instantiation so that no other launch's code changes; unsplit, no ping-pong,
 * the next tile's Q K^T after the epilogue. Not instantiated with RA_CUDA_LONG_BLOCK_N=0. */
template <int kRound, Layout L>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90_long(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, false, false, sm90::LongPlan, false, false, false>(p);
#endif
}

/* RA_CUDA_SHORT_BLOCK_N: the short-key plan's kernel (one key block of N keys, 3 Q stages:
 * mainloop_sm90.cuh's ShortPlan), its own instantiation so that no other launch's code changes;
 * unsplit, static order, no ping-pong, the next tile's Q K^T beside the last P.V. Not instantiated
 * with RA_CUDA_SHORT_BLOCK_N=0. */
template <int kRound, Layout L>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90_short(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, false, true, sm90::ShortPlan, false, false, false>(p);
#endif
}

/* RA_CUDA_TAIL_SPLIT: the main plan's kernel over tail_coord's work items (whole tiles, then the
 * tail's parts, merged by the last part of each), no ping-pong, the next tile's Q K^T after the
 * epilogue. Its own instantiation (none with RA_CUDA_TAIL_SPLIT=0), so no other launch's code changes. */
template <int kRound, Layout L>
__global__ void __launch_bounds__(sm90::kThreads, 1) attn_fwd_sm90_tail(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fwd_sm90<kRound, L, false, false, sm90::MainPlan, false, false, true>(p);
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

/* Used only with -DRA_CUDA_PINGPONG=-1: v1 (fixed call order) put ping-pong ahead up to 2048 keys;
 * v2 (rotated order) did not confirm it. */
constexpr int64_t kPingPongMaxKeys = 2048;

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
void dispatch(int rounding, Layout layout, bool pingpong, bool next_qk, F&& f) {
  ra_variant::dispatch(rounding, layout, [&](auto round_c, auto layout_c) {
    with_option<RA_CUDA_PINGPONG>(pingpong, [&](auto pp_c) {
      with_option<RA_CUDA_NEXT_QK>(next_qk, [&](auto nqk_c) { f(round_c, layout_c, pp_c, nqk_c); });
    });
  });
}

struct DeviceInfo {
  int sm_count = 0;
  int major = 0;
  int minor = 0;
  /* bit per kernel instantiation: smem attribute set on this device (atomic: any thread may launch) */
  std::atomic<uint64_t> attr_done[2] = {0, 0};
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
#ifndef RA_CUDA_L2_PROMO
#define RA_CUDA_L2_PROMO 128
#endif
constexpr CUtensorMapL2promotion kL2Promotion = RA_CUDA_L2_PROMO == 0     ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                                                : RA_CUDA_L2_PROMO == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                                                          : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;

/* (d, seq, head, batch) -> 64 x box_rows x 1 x 1 boxes, 128-byte swizzle, zero fill out of range
 * (loads) or nothing written out of range (stores). */
bool encode_tma(CUtensorMap* map, const uint16_t* base, const int64_t stride[4], int64_t seqlen, int64_t heads,
                int64_t batch, cuuint32_t box_rows) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = get_encode_fn();
  if (!encode) return false;
  cuuint64_t dims[4] = {(cuuint64_t)RA_HEAD_DIM, (cuuint64_t)seqlen, (cuuint64_t)heads, (cuuint64_t)batch};
  /* A stride of a size-1 dimension is never used; give it a harmless legal value. */
  const int64_t sizes[3] = {seqlen, heads, batch};
  const int64_t es[3] = {stride[2], stride[1], stride[0]};
  cuuint64_t strides[3];
  for (int i = 0; i < 3; ++i) strides[i] = (cuuint64_t)((sizes[i] == 1 ? (int64_t)RA_HEAD_DIM : es[i]) * 2);
  cuuint32_t box[4] = {64, box_rows, 1, 1};
  cuuint32_t estr[4] = {1, 1, 1, 1};
  CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<uint16_t*>(base), dims, strides, box, estr,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, kL2Promotion,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

/* The last few tensor maps this thread encoded, by everything an encoding depends on: a model
 * calls with the same buffers again and again (the allocator reuses them), and each call needs four
 * maps. An encoding is a pure function of its key, so a hit is the same 128 bytes. */
#ifndef RA_CUDA_TMAP_CACHE
#define RA_CUDA_TMAP_CACHE 1
#endif
struct TmapKey {
  const void* base;
  int64_t stride[3];
  int64_t seqlen, heads, batch;
  uint32_t box_rows;
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
                       int64_t heads, int64_t batch, cuuint32_t box_rows) {
  if (!RA_CUDA_TMAP_CACHE) return encode_tma(map, base, stride, seqlen, heads, batch, box_rows);
  TmapKey key;
  memset(&key, 0, sizeof key); /* padding too: keys compare with memcmp */
  key.base = base;
  for (int i = 0; i < 3; ++i) key.stride[i] = stride[i];
  key.seqlen = seqlen;
  key.heads = heads;
  key.batch = batch;
  key.box_rows = box_rows;
  TmapCache& c = t_tmaps;
  for (int i = 0; i < c.used; ++i)
    if (memcmp(&c.key[i], &key, sizeof key) == 0) {
      *map = c.map[i];
      return true;
    }
  if (!encode_tma(map, base, stride, seqlen, heads, batch, box_rows)) return false;
  c.key[c.next] = key;
  c.map[c.next] = *map;
  c.next = (c.next + 1) % kTmapCacheSize;
  if (c.used < kTmapCacheSize) ++c.used;
  return true;
}

ra_status device_error(cudaError_t e, const char* what, char* err, size_t err_len) {
  return ra_fail(err, err_len, RA_ERR_DEVICE, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* A plan as a value, for launch()'s generic lambda (std::type_identity is C++20) */
template <class P>
struct PlanTag {
  using type = P;
};

/* `bit`: the instantiation's index, 0..127 (launch() numbers them) */
template <class Kernel>
cudaError_t ensure_smem_attr(Kernel kernel, DeviceInfo& dev, unsigned bit, size_t bytes) {
  const uint64_t mask = uint64_t{1} << (bit & 63);
  if (dev.attr_done[bit >> 6].load(std::memory_order_acquire) & mask) return cudaSuccess;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  if (e == cudaSuccess) dev.attr_done[bit >> 6].fetch_or(mask, std::memory_order_release);
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

/* Splits for a launch of `tiles` (batch, head, query block) tiles of `nb` key blocks on `sms` SMs.
 * Cost model, in key blocks of one CTA (1.5-2.5 us each on the H200): a persistent CTA's serial
 * work, ceil(tiles * s / sms) tiles of ceil(nb / s) blocks plus kSplitTileCost per tile (pipeline
 * fill, epilogue), plus kSplitMergeCost for the merge launch when s > 1 (3.9-8 us in ncu); the
 * s <= kMaxSplits of least cost, and only if it saves a tenth of the unsplit cost: the partials'
 * traffic, which the model leaves out, cost 3-12 % where the grid is already full (forced splits
 * on (8,32,1,4096) and (4,32,64,8192), docs/perf-notes.md v5). So it splits where the grid leaves
 * SMs idle for much of the launch: decode and short queries at small batch x heads, long keys at
 * few heads. */
constexpr int kMaxSplits = 32;
constexpr int kSplitTileCost = 1;
constexpr int kSplitMergeCost = 3;
constexpr size_t kMaxWorkspaceBytes = size_t{512} << 20;

int split_rule(int64_t tiles, int nb, int sms) {
  if (RA_CUDA_SPLIT > 0) return std::min(RA_CUDA_SPLIT, nb);
  auto cost = [&](int s) {
    const int sb = (nb + s - 1) / s;
    return (tiles * s + sms - 1) / sms * (sb + kSplitTileCost) + (s > 1 ? kSplitMergeCost : 0);
  };
  int best = 1;
  int64_t best_cost = cost(1);
  for (int s = 2; s <= std::min(nb, kMaxSplits); ++s) {
    const int sb = (nb + s - 1) / s;
    if ((nb + sb - 1) / sb != s) continue; /* s would leave a split empty: the same as fewer */
    if (cost(s) < best_cost) best_cost = cost(s), best = s;
  }
  return 10 * best_cost <= 9 * cost(1) ? best : 1;
}

constexpr int kMaxGridY = 65535; /* CUDA's limit on gridDim.y */

/* One launch over rows [0, seqlen_q) of p. */
ra_status launch(FwdParams& p, bool use_tma, int rounding, Layout layout, int dev_id, DeviceInfo& dev,
                 cudaStream_t stream, char* err, size_t err_len) {
  cudaError_t e = cudaSuccess;
  bool heads_refused = false;
  const bool pp = p.seqlen_k <= kPingPongMaxKeys;
  const bool nqk = p.seqlen_k <= sm90::kNextQKMaxKeys;
  dispatch(rounding, layout, pp, nqk, [&](auto round_c, auto layout_c, auto pp_c, auto nqk_c) {
    constexpr int R = decltype(round_c)::value;
    constexpr Layout L = decltype(layout_c)::value;
    constexpr bool PP = decltype(pp_c)::value;
    constexpr bool NQK = decltype(nqk_c)::value;
    /* one bit per instantiation: 6 (rounding x layout) x 4 schedules, 6 mma.sync, 12 decode plans, 12 in-kernel
     * merges, 6 short plans (54 + inst), 6 long-key kernels (64 + inst), 6 dynamic schedulers (70 + inst; built
     * by default: RA_CUDA_DYN_SCHED=1), 6 tail splits (76 + inst), 6 short-key kernels (82 + inst) */
    const unsigned inst = (unsigned)(R * 2 + (L == Layout::kPacked ? 1 : 0));
    if (use_tma) {
      p.num_m_blocks = (p.seqlen_q + sm90::kBlockM - 1) / sm90::kBlockM;
      p.num_n_blocks = (p.seqlen_k + sm90::kBlockN - 1) / sm90::kBlockN;
      const int64_t tiles = (int64_t)p.num_m_blocks * p.batch * p.heads;
      p.num_splits = 1;
      p.split_blocks = p.num_n_blocks;
      const int want = split_rule(tiles, p.num_n_blocks, dev.sm_count);
      /* decode's splits merge in the kernel; not NQK launches (seqlen_k <= kNextQKMaxKeys) nor the
       * 3-stage decode plan, which have no kMerge instantiation */
      const bool mik =
          !RA_CUDA_MERGE_KERNEL && RA_CUDA_DECODE_STAGES != 3 && !NQK && p.seqlen_q <= kMergeInKernelMaxRows;
      if (want > 1) {
        const int sb = (p.num_n_blocks + want - 1) / want;
        const int s = (p.num_n_blocks + sb - 1) / sb;
        const size_t rows = (size_t)p.batch * p.heads * p.seqlen_q;
        const size_t floats = (size_t)s * rows * (kHeadDim + 2);
        const size_t counters = mik ? (size_t)tiles * 2 : 0; /* merge_if_last's */
        const size_t bytes = floats * sizeof(float) + counters * sizeof(int);
        const WorkspacePtrs ws = bytes <= kMaxWorkspaceBytes
                                     ? split_workspace(dev_id, stream, floats * sizeof(float), counters)
                                     : WorkspacePtrs{nullptr, nullptr};
        if (ws.floats) {
          p.num_splits = s;
          p.split_blocks = sb;
          p.part_o = ws.floats;
          p.part_ml = ws.floats + (size_t)s * rows * kHeadDim;
          p.part_cnt = ws.counters;
        }
      }
      p.merge_in_kernel = mik && p.num_splits > 1;
      /* the dynamic scheduler's two counters (tile_scheduler.cuh); without them, the static order
       * (the 3-stage short plan, when built, takes these launches itself) */
      if (RA_CUDA_DYN_SCHED && RA_CUDA_SHORT_STAGES != 3 && NQK && !PP && p.num_splits == 1 &&
          p.num_n_blocks <= RA_CUDA_DYN_MAX_BLOCKS && p.num_m_blocks <= RA_CUDA_DYN_MAX_M_BLOCKS)
        p.tile_counter = split_workspace(dev_id, stream, 0, 2).counters;
      p.num_tiles = (int)(tiles * p.num_splits);
      int grid = p.num_tiles < dev.sm_count ? p.num_tiles : dev.sm_count;
      if (RA_CUDA_GRID_BALANCE && !(RA_CUDA_DYN_FULL_GRID && p.tile_counter)) {
        const int waves = (p.num_tiles + dev.sm_count - 1) / dev.sm_count;
        grid = (p.num_tiles + waves - 1) / waves;
      }
      if constexpr (RA_CUDA_TAIL_SPLIT != 0 && !NQK && !PP) {
        /* the tail split (tail_plan.h), where nothing above split the launch; its partials are the
         * tail's rows only, its counters merge_if_last's */
        const TailPlan tp = p.num_splits == 1 && p.seqlen_q > kDecodeMaxRows && !long_keys_pay(p.seqlen_k)
                                ? tail_split_plan(tiles, p.num_n_blocks, dev.sm_count,
                                                  RA_CUDA_TAIL_SPLIT > 1 ? RA_CUDA_TAIL_SPLIT : 0)
                                : TailPlan{0, 0, 0};
        if (tp.splits > 1) {
          const size_t rows = (size_t)tp.tail * tp.splits * sm90::kBlockM;
          const size_t floats = rows * (kHeadDim + 2);
          const size_t counters = (size_t)tp.tail * 2;
          const WorkspacePtrs ws = (floats + counters) * sizeof(float) <= kMaxWorkspaceBytes
                                       ? split_workspace(dev_id, stream, floats * sizeof(float), counters)
                                       : WorkspacePtrs{nullptr, nullptr};
          if (ws.floats) {
            p.tail_first = (int)(tiles - tp.tail);
            p.tail_splits = tp.splits;
            p.tail_blocks = tp.blocks;
            p.part_o = ws.floats;
            p.part_ml = ws.floats + rows * kHeadDim;
            p.part_cnt = ws.counters;
            p.num_tiles = p.tail_first + (int)(tp.tail * tp.splits);
            grid = dev.sm_count; /* tail_first is a multiple of it: the whole tiles fill whole rounds */
          }
        }
      }
      /* the first kernel below whose conditions hold takes the launch: `kernel` with plan Plan's
       * shared memory (its attribute set once per device: instantiation `bit`) over `args` */
      bool launched = false;
      auto run = [&](auto kernel, auto plan_c, unsigned bit, const FwdParams& args) {
        using Plan = typename decltype(plan_c)::type;
        constexpr size_t bytes = sm90::kSmemBytes<Plan>;
        launched = true;
        e = ensure_smem_attr(kernel, dev, bit, bytes);
        if (e == cudaSuccess) kernel<<<grid, sm90::kThreads, bytes, stream>>>(args);
      };
      using MainC = PlanTag<sm90::MainPlan>;
      /* the same tiles over key blocks of N: K and V's tensor maps with boxes of N rows */
      auto over_blocks_of = [&](int N, FwdParams& args) {
        args = p;
        args.num_n_blocks = (p.seqlen_k + N - 1) / N;
        args.split_blocks = args.num_n_blocks;
        return encode_tma_cached(&args.tma_k, p.k, p.k_stride, p.seqlen_k, p.heads, p.batch, N) &&
               encode_tma_cached(&args.tma_v, p.v, p.v_stride, p.seqlen_k, p.heads, p.batch, N);
      };
      if constexpr (RA_CUDA_DECODE_STAGES == 3 && !NQK) {
        if (p.seqlen_q <= kDecodeMaxRows)
          run(attn_fwd_sm90<R, L, PP, false, true>, PlanTag<sm90::DecodePlan>{}, 30 + inst + (PP ? 6 : 0), p);
      }
      if constexpr (RA_CUDA_SHORT_STAGES == 3 && NQK && !PP) {
        if (!launched && p.num_splits == 1)
          run(attn_fwd_sm90<R, L, false, true, true>, PlanTag<sm90::DecodePlan>{}, 54 + inst, p);
      }
      if constexpr (!RA_CUDA_MERGE_KERNEL && !NQK) {
        if (!launched && p.merge_in_kernel) run(attn_fwd_sm90<R, L, PP, false, false, true>, MainC{}, 42 + inst + (PP ? 6 : 0), p);
      }
      if constexpr (RA_CUDA_DYN_SCHED != 0 && NQK && !PP) {
        if (!launched && p.tile_counter) run(attn_fwd_sm90<R, L, false, true, false, false, true>, MainC{}, 70 + inst, p);
      }
      if constexpr (RA_CUDA_SHORT_BLOCK_N != 0 && NQK && !PP) {
        FwdParams sp;
        if (!launched && p.num_splits == 1 && !p.tile_counter && short_keys_pay(p.seqlen_k) &&
            over_blocks_of(sm90::ShortPlan::kBlockN, sp))
          run(attn_fwd_sm90_short<R, L>, PlanTag<sm90::ShortPlan>{}, 82 + inst, sp);
      }
      if constexpr (RA_CUDA_TAIL_SPLIT != 0 && !NQK && !PP) {
        if (!launched && p.tail_splits > 1) run(attn_fwd_sm90_tail<R, L>, MainC{}, 76 + inst, p);
      }
      if constexpr (RA_CUDA_LONG_BLOCK_N != 0 && !NQK && !PP) {
        FwdParams lp;
        if (!launched && p.num_splits == 1 && !p.merge_in_kernel && !p.tile_counter &&
            long_keys_pay(p.seqlen_k) && p.seqlen_q > kDecodeMaxRows && over_blocks_of(sm90::LongPlan::kBlockN, lp))
          run(attn_fwd_sm90_long<R, L>, PlanTag<sm90::LongPlan>{}, 64 + inst, lp);
      }
      if (!launched) run(attn_fwd_sm90<R, L, PP, NQK, false>, MainC{}, inst + (PP ? 6 : 0) + (NQK ? 12 : 0), p);
      if (e != cudaSuccess) return;
      if (p.num_splits > 1 && !p.merge_in_kernel) {
        if ((e = cudaGetLastError()) != cudaSuccess) return;
        const int64_t rows = (int64_t)p.batch * p.heads * p.seqlen_q;
        const unsigned blocks = (unsigned)((rows + kMergeRowsPerBlock - 1) / kMergeRowsPerBlock);
        attn_merge_splits<R><<<blocks, 32 * kMergeRowsPerBlock, 0, stream>>>(p);
      }
    } else {
      p.num_m_blocks = (p.seqlen_q + sm80::kBlockM - 1) / sm80::kBlockM;
      p.num_n_blocks = (p.seqlen_k + sm80::kBlockN - 1) / sm80::kBlockN;
      p.num_tiles = p.num_m_blocks * p.batch * p.heads;
      p.num_splits = 1;
      p.split_blocks = p.num_n_blocks;
      auto kernel = attn_fwd_mma_sync<R, L>;
      e = ensure_smem_attr(kernel, dev, 24 + inst, sm80::kSmemBytes);
      if (e != cudaSuccess) return;
      /* (batch x head) is grid.y, at most kMaxGridY: more of them go in launches of whole batches,
       * each over its batches' rows (any strides: the pointers move by whole batch strides) */
      if (p.heads > kMaxGridY) {
        heads_refused = true;
        return;
      }
      const int per = kMaxGridY / p.heads;
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
        kernel<<<grid, sm80::kThreads, sm80::kSmemBytes, stream>>>(c);
        if (b0 + per < p.batch && (e = cudaGetLastError()) != cudaSuccess) return;
      }
    }
    e = cudaGetLastError();
  });
  if (heads_refused)
    return ra_fail(err, err_len, RA_ERR_SHAPE,
                   "H=%d heads: the mma.sync path (taken where TMA refuses the strides) launches at most %d "
                   "heads at a time",
                   p.heads, kMaxGridY);
  if (e != cudaSuccess) return device_error(e, "kernel launch", err, err_len);
  return RA_OK;
}

}  // namespace
}  // namespace ra_cuda

using namespace ra_cuda;

extern "C" ra_status ra_validate(const ra_attention_params* params, char* err, size_t err_len) {
  const ra_status st = ra_validate_params(params, err, err_len);
  return st != RA_OK ? st : ra_require_dense_v1(params, "cuda", err, err_len); /* until the kernels gain v2 */
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

static_assert(kTailMaxSplits == 64 && kTailMinGainPerMille == 5, "ra_build_info states the tail rule's constants");

extern "C" const char* ra_build_info(void) {
  return "{\"backend\":\"cuda\",\"abi\":" RA_XSTR(RA_ABI_VERSION) ",\"inject\":" RA_INJECT_INFO
         ",\"arch\":\"sm_90a\",\"nvcc\":\"" RA_XSTR(__CUDACC_VER_MAJOR__) "." RA_XSTR(__CUDACC_VER_MINOR__) "." RA_XSTR(
             __CUDACC_VER_BUILD__) "\",\"paths\":[\"wgmma_tma_ws\",\"mma_sync\"],\"force_mma_sync\":" RA_XSTR(RA_CUDA_FORCE_MMA_SYNC) ",\"pingpong\":" RA_XSTR(RA_CUDA_PINGPONG) ",\"pingpong_max_keys\":2048,\"epilogue\":" RA_XSTR(RA_CUDA_EPILOGUE) ",\"q_stages\":" RA_XSTR(RA_CUDA_Q_STAGES) ",\"next_qk\":" RA_XSTR(RA_CUDA_NEXT_QK) ",\"next_qk_max_keys\":" RA_XSTR(RA_CUDA_NEXT_QK_MAX_KEYS) ",\"cvt_round\":" RA_XSTR(RA_CUDA_CVT_ROUND) ",\"tmap_cache\":" RA_XSTR(RA_CUDA_TMAP_CACHE) ",\"split\":" RA_XSTR(RA_CUDA_SPLIT) ",\"l2_promo\":" RA_XSTR(RA_CUDA_L2_PROMO) ",\"decode_stages\":" RA_XSTR(RA_CUDA_DECODE_STAGES) ",\"grid_balance\":" RA_XSTR(RA_CUDA_GRID_BALANCE) ",\"merge_kernel\":" RA_XSTR(RA_CUDA_MERGE_KERNEL) ",\"l2_prefetch\":" RA_XSTR(RA_CUDA_L2_PREFETCH) ",\"short_stages\":" RA_XSTR(RA_CUDA_SHORT_STAGES) ",\"tile_order\":" RA_XSTR(RA_CUDA_TILE_ORDER) ",\"dyn_sched\":" RA_XSTR(RA_CUDA_DYN_SCHED) ",\"dyn_max_blocks\":" RA_XSTR(RA_CUDA_DYN_MAX_BLOCKS) ",\"dyn_max_m_blocks\":" RA_XSTR(RA_CUDA_DYN_MAX_M_BLOCKS) ",\"dyn_full_grid\":" RA_XSTR(RA_CUDA_DYN_FULL_GRID) ",\"tma_hint\":" RA_XSTR(RA_CUDA_TMA_HINT) ",\"long_block_n\":" RA_XSTR(RA_CUDA_LONG_BLOCK_N) ",\"long_min_keys\":" RA_XSTR(RA_CUDA_LONG_MIN_KEYS) ",\"long_rule\":" RA_XSTR(RA_CUDA_LONG_RULE) ",\"tail_split\":" RA_XSTR(RA_CUDA_TAIL_SPLIT) ",\"short_block_n\":" RA_XSTR(RA_CUDA_SHORT_BLOCK_N) ",\"short_q_stages\":" RA_XSTR(RA_CUDA_SHORT_Q_STAGES) ",\"exp_poly\":" RA_XSTR(RA_CUDA_EXP_POLY) ",\"ablate\":" RA_XSTR(RA_CUDA_ABLATE) ",\"split_pv\":" RA_XSTR(RA_CUDA_SPLIT_PV) ",\"rescale_skip\":" RA_XSTR(RA_CUDA_RESCALE_SKIP) ",\"tree_max\":" RA_XSTR(RA_CUDA_TREE_MAX) ",\"early_frags\":" RA_XSTR(RA_CUDA_EARLY_FRAGS) ",\"trace\":" RA_XSTR(RA_CUDA_TRACE) ",\"tail_max_splits\":64,\"tail_min_gain_permille\":5,\"max_splits\":32,\"tiles\":{\"sm90\":[128,128],\"mma_sync\":[64,64]}}";
}

extern "C" ra_status ra_attention_fwd(const ra_attention_params* P, char* err, size_t err_len) {
  ra_status st = ra_validate(P, err, err_len);
  if (st != RA_OK) return st;
  if (err && err_len) err[0] = '\0';

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

  FwdParams p;
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

  bool use_tma = !RA_CUDA_FORCE_MMA_SYNC;
  if (use_tma)
    use_tma = encode_tma_cached(&p.tma_q, P->q, P->q_stride, P->seqlen_q, P->heads, P->batch, sm90::kBlockM) &&
              encode_tma_cached(&p.tma_k, P->k, P->k_stride, P->seqlen_k, P->heads, P->batch, sm90::kBlockN) &&
              encode_tma_cached(&p.tma_v, P->v, P->v_stride, P->seqlen_k, P->heads, P->batch, sm90::kBlockN) &&
              encode_tma_cached(&p.tma_o, P->o, P->o_stride, P->seqlen_q, P->heads, P->batch, 16);

  cudaStream_t stream = static_cast<cudaStream_t>(P->stream);
  (void)cudaGetLastError(); /* an earlier, unrelated error must not be reported as ours */

  RA_INJECT_HANG_LAUNCH(P->seqlen_q, stream); /* drill: the stream never drains */
  RA_INJECT_CRASH_LAUNCH(P->seqlen_q);        /* drill: the process dies here */
  const unsigned long long n = ++g_launches;
  p.nondet_flip = (RA_INJECT_NONDET && (n & 1ull)) ? 1 : 0;
  return launch(p, use_tma, P->rounding, layout, dev_id, dev, stream, err, err_len);
}
