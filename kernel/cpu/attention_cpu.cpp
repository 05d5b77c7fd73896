/*
 * attention_cpu.cpp — the C++ CPU golden model of the regress attention contract.
 *
 *   work item = (b, h, block of 64 query rows)      threads take items from an atomic counter
 *     K, V rows of (b, h / group) -> fp32 scratch   (exact: bf16 -> fp32 is a shift; GQA group)
 *     per query row, over its visible keys j < n    (a causal mask is a prefix of the keys)
 *       n = 0: out = +0, lse = -inf                 (no visible key, as FlashAttention)
 *       s_j = scale * (q . k_j)                     fp32, 8 fixed partial accumulators
 *       m   = max_j s_j                             no "-inf row -> 0" trick: all -inf gives NaN
 *       e_j = exp(s_j - m),  l = sum_j e_j          fp32, fixed order (blocks of 256 keys)
 *       o   = (sum_j e_j v_j) / l                   fp32, one division
 *       out = bf16(o) by MODE                       one rounding, kernel/common/bf16.h
 *       lse = m + fp32(log(double(l)))              optional; fp64 log keeps libm's variant out
 *
 * A varlen call (cu_seqlens) is the same per sequence: b indexes sequences, rows are offset by cu[b].
 * A masked key is never read, so the masked result over n keys is the dense result over those n.
 *
 * Every output row depends only on its own inputs and a fixed operation order, so the bits do not
 * depend on the thread count or on which thread ran the item. Built without -ffast-math and with
 * -ffp-contract=off (regress/native/build.py), so IEEE NaN/Inf propagate exactly as in an fp64 reference.
 */
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/bf16.h"
#include "common/gqa_rows.h"
#include "common/inject.h"
#include "common/validate.h"
#include "include/regress_attn.h"

namespace {

constexpr int kD = RA_HEAD_DIM;
constexpr int64_t kRowBlock = 64;   // query rows per work item
constexpr int64_t kKeyBlock = 256;  // keys per partial sum of l and o (bounds fp32 growth)

// Keeps the slowdown drill's extra work observable so the compiler cannot drop it.
[[maybe_unused]] std::atomic<uint32_t> g_sink{0};
// Launch counter for the nondeterminism drill.
[[maybe_unused]] std::atomic<uint64_t> g_launches{0};

int thread_count() {
  if (const char* env = std::getenv("REGRESS_CPU_THREADS")) {
    int n = std::atoi(env);
    if (n >= 1) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

template <int MODE>
inline uint16_t round_bf16(float x) {
  constexpr int kUsed = RA_INJECT_ROUNDING(MODE);  // MODE itself unless the mode-swap drill is built in
  if constexpr (kUsed == RA_RTNE) return ra_f32_to_bf16_rtne(x);
  else if constexpr (kUsed == RA_RTNA) return ra_f32_to_bf16_rtna(x);
  else return ra_f32_to_bf16_rtz(x);
}

// The one place a runtime rounding mode becomes a compile-time constant.
template <typename F>
void dispatch_rounding(int mode, F&& f) {
  switch (mode) {
    case RA_RTNE: f(std::integral_constant<int, RA_RTNE>{}); break;
    case RA_RTNA: f(std::integral_constant<int, RA_RTNA>{}); break;
    default: f(std::integral_constant<int, RA_RTZ>{}); break;
  }
}

// Eight fp32 lanes. Lane-wise IEEE operations only (no reassociation, no FMA: -ffp-contract=off),
// so the bits are the same whether the compiler emits SSE2 pairs or AVX2.
typedef float f8 __attribute__((vector_size(32)));
typedef int32_t i8 __attribute__((vector_size(32)));
typedef float f8u __attribute__((vector_size(32), aligned(4)));  // unaligned loads/stores
// Always inlined, so each clone of attention_row gets its own copy (no vector-ABI crossings).
#define RA_INLINE inline __attribute__((always_inline))

RA_INLINE f8 load8(const float* p) { return *reinterpret_cast<const f8u*>(p); }
RA_INLINE void store8(float* p, f8 x) { *reinterpret_cast<f8u*>(p) = x; }
RA_INLINE f8 splat8(float x) { return f8{x, x, x, x, x, x, x, x}; }
// The fixed reduction tree of the 8 partial sums.
RA_INLINE float reduce8(f8 a) { return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])); }

// exp for fp32 in plain arithmetic (Cephes expf: Cody-Waite reduction, degree-6 polynomial,
// about 1 ulp). Our own instead of libm's expf because glibc picks an FMA or non-FMA variant by CPU,
// which could change the golden model's bits from one host to the next; this also vectorises.
// exp(-inf) = 0, exp(NaN) = NaN, results down into the subnormals as IEEE expf gives them.
RA_INLINE f8 exp8(f8 x) {
  const f8 lo = splat8(-104.0f);  // exp(-104) < half the smallest subnormal: rounds to 0
  const f8 hi = splat8(88.0f);    // inputs here are <= 0; clamp only keeps the scaling in range
  f8 xc = x != x ? splat8(0.0f) : x;
  xc = xc < lo ? lo : xc;
  xc = xc > hi ? hi : xc;
  const f8 magic = splat8(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const f8 fn = (xc * splat8(1.44269504088896341f) + magic) - magic;
  const f8 r = (xc - fn * splat8(0.693359375f)) - fn * splat8(-2.12194440e-4f);
  const f8 z = r * r;
  f8 y = splat8(1.9875691500e-4f);
  y = y * r + splat8(1.3981999507e-3f);
  y = y * r + splat8(8.3334519073e-3f);
  y = y * r + splat8(4.1665795894e-2f);
  y = y * r + splat8(1.6666665459e-1f);
  y = y * r + splat8(5.0000001201e-1f);
  y = (y * z + r) + splat8(1.0f);
  // y * 2^n as (y * 2^a) * 2^b with a + b = n: both factors normal, one rounding at the end.
  const i8 n = __builtin_convertvector(fn, i8);
  const i8 a = n >> 1;
  const i8 b = n - a;
  y = y * reinterpret_cast<f8>((a + 127) << 23);
  y = y * reinterpret_cast<f8>((b + 127) << 23);
  y = x < lo ? splat8(0.0f) : y;
  return x != x ? x : y;
}

// One output row in fp32 (before rounding). k, v: [sk][128] fp32; s: scratch of >= sk + 8 floats.
// Compiled twice on x86 (SSE2 and AVX2, chosen at load time); the results are identical bit for bit.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(RA_CPU_NO_CLONES)
__attribute__((target_clones("avx2", "default")))
#endif
void attention_row(const float* __restrict q, const float* __restrict k, const float* __restrict v,
                   int64_t sk, float scale, float* __restrict s, float* __restrict out, float* __restrict m_out,
                   float* __restrict l_out) {
  // Scores, four keys at a time; each key's dot product uses the same 8 partial sums.
  int64_t j = 0;
  for (; j + 4 <= sk; j += 4) {
    const float* k0 = k + j * kD;
    f8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int d = 0; d < kD; d += 8) {
      const f8 qv = load8(q + d);
      a0 += qv * load8(k0 + d);
      a1 += qv * load8(k0 + kD + d);
      a2 += qv * load8(k0 + 2 * kD + d);
      a3 += qv * load8(k0 + 3 * kD + d);
    }
    // Scale after the dot, as the reference computes (Q.K) * scale.
    s[j] = reduce8(a0) * scale;
    s[j + 1] = reduce8(a1) * scale;
    s[j + 2] = reduce8(a2) * scale;
    s[j + 3] = reduce8(a3) * scale;
  }
  for (; j < sk; ++j) {
    f8 a0 = {};
    for (int d = 0; d < kD; d += 8) a0 += load8(q + d) * load8(k + j * kD + d);
    s[j] = reduce8(a0) * scale;
  }


  // Row max. A NaN score is skipped here but poisons the row through exp below; an all -inf row
  // gives exp(-inf - -inf) = NaN, as in the fp64 reference (no "-inf row -> 0" shortcut).
  float m = s[0];
  for (j = 1; j < sk; ++j) m = s[j] > m ? s[j] : m;

  // e_j = exp(s_j - m) in place; the tail is padded so whole vectors can be read.
  const f8 mv = splat8(m);
  for (j = 0; j + 8 <= sk; j += 8) store8(s + j, exp8(load8(s + j) - mv));
  if (j < sk) {
    float tmp[8] = {};
    for (int64_t t = j; t < sk; ++t) tmp[t - j] = s[t];
    const f8 e = exp8(load8(tmp) - mv);
    for (int64_t t = j; t < sk; ++t) s[t] = e[t - j];
  }

  // l and P.V over key blocks; within a block the keys are summed in order, then blocks in order.
  float l = 0.0f;
  f8 o[kD / 8];
  for (auto& x : o) x = f8{};
  for (int64_t j0 = 0; j0 < sk; j0 += kKeyBlock) {
    const int64_t j1 = std::min(j0 + kKeyBlock, sk);
    float lb = 0.0f;
    for (j = j0; j < j1; ++j) lb += s[j];
    l += lb;
    // 32 output columns at a time keeps the partial sums in registers.
    for (int c = 0; c < kD; c += 32) {
      f8 b0 = {}, b1 = {}, b2 = {}, b3 = {};
      for (j = j0; j < j1; ++j) {
        const f8 e = splat8(s[j]);
        const float* vr = v + j * kD + c;
        b0 += e * load8(vr);
        b1 += e * load8(vr + 8);
        b2 += e * load8(vr + 16);
        b3 += e * load8(vr + 24);
      }
      o[c / 8] += b0;
      o[c / 8 + 1] += b1;
      o[c / 8 + 2] += b2;
      o[c / 8 + 3] += b3;
    }
  }
  // One division per output, as the contract says.
  const f8 lv = splat8(l);
  for (int c = 0; c < kD / 8; ++c) store8(out + 8 * c, o[c] / lv);
  *m_out = m;
  *l_out = l;
}

// Keys visible to query row i of a sequence of sq queries and sk keys: always a prefix [0, n).
inline int64_t visible_keys(int mask, int64_t i, int64_t sq, int64_t sk) {
  if (mask == RA_MASK_CAUSAL_TOP_LEFT) return std::min(i + 1, sk);
  if (mask == RA_MASK_CAUSAL_BOTTOM_RIGHT) return std::max<int64_t>(0, std::min(i + 1 + sk - sq, sk));
  return sk;
}

inline void load_row(const uint16_t* src, float* dst) {
  for (int d = 0; d < kD; ++d) dst[d] = ra_bf16_to_f32(src[d]);
}

struct Scratch {
  std::vector<float> k, v, q, s, o;
};

// One sequence of the call: a dense call's batch entry or a varlen call's packed sequence.
struct Seq {
  int64_t b;       // batch index (the batch stride applies; 0 in varlen, where it is 0)
  int64_t q0, k0;  // first packed row (varlen) or 0
  int64_t sq, sk;  // lengths
  int64_t first;   // its first work item
};

// The call's work items, (sequence, head, row block) in that order, and where each sequence starts.
struct Work {
  std::vector<Seq> seqs;  // varlen only; a dense call's sequences are all alike
  int64_t items = 0;
  int64_t max_sk = 0;
};

inline int64_t row_blocks_of(int64_t sq) { return (sq + kRowBlock - 1) / kRowBlock; }

Work plan_work(const ra_attention_params& p) {
  Work w;
  if (!p.cu_seqlens_q) {
    w.items = p.batch * p.heads * row_blocks_of(p.seqlen_q);
    w.max_sk = p.seqlen_k;
    return w;
  }
  w.seqs.reserve(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    const Seq s{0, p.cu_seqlens_q[b], p.cu_seqlens_k[b], p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b],
                p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b], w.items};
    w.seqs.push_back(s);
    w.items += p.heads * row_blocks_of(s.sq);
    w.max_sk = std::max(w.max_sk, s.sk);
  }
  return w;
}

Seq seq_of(const ra_attention_params& p, const Work& w, int64_t item) {
  if (w.seqs.empty()) {
    const int64_t per = p.heads * row_blocks_of(p.seqlen_q);
    const int64_t b = item / per;
    return Seq{b, 0, 0, p.seqlen_q, p.seqlen_k, b * per};
  }
  // The last sequence starting at or before `item` that has items (empty sequences have none).
  auto it = std::upper_bound(w.seqs.begin(), w.seqs.end(), item,
                             [](int64_t x, const Seq& s) { return x < s.first; });
  return *(it - 1);
}

template <int MODE>
void run_item(const ra_attention_params& p, const Work& work, float scale, int64_t item, Scratch& w) {
  const Seq sq = seq_of(p, work, item);
  const int64_t local = item - sq.first;
  const int64_t row_blocks = row_blocks_of(sq.sq);
  const int64_t b = sq.b;
  const int64_t h = local / row_blocks;
  const int64_t hk = h / (p.heads / p.heads_kv);  // the GQA group's K/V head
  const int64_t r0 = (local % row_blocks) * kRowBlock;
  const int64_t r1 = std::min(r0 + kRowBlock, sq.sq);
  // Keys any row of the block sees (a prefix that grows with the row under a causal mask).
  const int64_t sk = visible_keys(p.mask, r1 - 1, sq.sq, sq.sk);

  const uint16_t* kb = p.k + b * p.k_stride[0] + hk * p.k_stride[1] + sq.k0 * p.k_stride[2];
  const uint16_t* vb = p.v + b * p.v_stride[0] + hk * p.v_stride[1] + sq.k0 * p.v_stride[2];
  for (int64_t j = 0; j < sk; ++j) {
    load_row(kb + j * p.k_stride[2], &w.k[j * kD]);
    load_row(vb + j * p.v_stride[2], &w.v[j * kD]);
  }
  const uint16_t* qb = p.q + b * p.q_stride[0] + h * p.q_stride[1] + sq.q0 * p.q_stride[2];
  uint16_t* ob = p.o + b * p.o_stride[0] + h * p.o_stride[1] + sq.q0 * p.o_stride[2];
  // lse: dense [B, H, Sq], varlen [H, total_q] (regress_attn.h).
  float* lb = !p.lse ? nullptr
              : p.cu_seqlens_q ? p.lse + h * p.seqlen_q + sq.q0
                               : p.lse + (b * p.heads + h) * p.seqlen_q;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = visible_keys(p.mask, r, sq.sq, sq.sk);
    uint16_t* orow = ob + r * p.o_stride[2];
    if (n == 0) {  // no visible key: +0 and -inf, as FlashAttention
      for (int d = 0; d < kD; ++d) orow[d] = 0;
      if (lb) lb[r] = -INFINITY;
      continue;
    }
    load_row(qb + r * p.q_stride[2], w.q.data());
    float m, l;
    attention_row(w.q.data(), w.k.data(), w.v.data(), n, scale, w.s.data(), w.o.data(), &m, &l);
    for (int d = 0; d < kD; ++d) orow[d] = ra_inject_ulp(round_bf16<MODE>(w.o[d]));
    if (lb) lb[r] = m + static_cast<float>(std::log(static_cast<double>(l)));
  }
#if RA_INJECT_SLOWDOWN_PCT > 0
  // Drill: redo N % of this block's own work, measured in (query row x key) products, inside the
  // same call: whole rows first, then one row over a prefix of the keys, so the extra work is N % of
  // the block's at every shape (not rounded up to whole rows: 2 % of a 64-row block is 1.28 rows).
  // The results go to scratch and are folded into a sink so the work cannot be optimised away.
  int64_t units = sk > 0 ? ra_inject_slowdown_units((r1 - r0) * sk) : 0;
  for (int64_t i = 0; units > 0; ++i) {
    const int64_t r = r0 + i % (r1 - r0);  // N may exceed 100: wrap over the block's rows
    const int64_t keys = std::min(units, sk);
    load_row(qb + r * p.q_stride[2], w.q.data());
    float m, l;
    attention_row(w.q.data(), w.k.data(), w.v.data(), keys, scale, w.s.data(), w.o.data(), &m, &l);
    uint32_t bits;
    std::memcpy(&bits, &w.o[0], sizeof bits);
    g_sink.fetch_xor(bits, std::memory_order_relaxed);
    units -= keys;
  }
#endif
}

template <int MODE>
void run(const ra_attention_params& p) {
  const float scale = ra_effective_scale(&p);
  const Work work = plan_work(p);
  const int64_t items = work.items;
  if (items == 0) return;  // varlen with every query length 0
  const int64_t nthreads = std::max<int64_t>(1, std::min<int64_t>(thread_count(), items));

  std::atomic<int64_t> next{0};
  auto worker = [&]() {
    Scratch w;
    w.k.resize(static_cast<size_t>(work.max_sk) * kD);
    w.v.resize(static_cast<size_t>(work.max_sk) * kD);
    w.q.resize(kD);
    w.s.resize(static_cast<size_t>(work.max_sk) + 8);
    w.o.resize(kD);
    for (int64_t it; (it = next.fetch_add(1, std::memory_order_relaxed)) < items;)
      run_item<MODE>(p, work, scale, it, w);
  };
  if (nthreads == 1) {
    worker();
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(nthreads - 1));
  for (int64_t t = 1; t < nthreads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

}  // namespace

extern "C" {

ra_status ra_validate(const ra_attention_params* params, char* err, size_t err_len) {
  const ra_status st = ra_validate_params(params, err, err_len);
  return st != RA_OK ? st : ra_check_seqlens_host(params, err, err_len);
}

ra_status ra_attention_fwd(const ra_attention_params* params, char* err, size_t err_len) {
  ra_status st = ra_validate_params(params, err, err_len);
  if (st != RA_OK) return st;
  if ((st = ra_check_seqlens_host(params, err, err_len)) != RA_OK) return st;  // host memory here
  RA_INJECT_CRASH_LAUNCH(params->seqlen_q); /* drill: the process dies here */
  if (ra_inject_hangs(params->seqlen_q)) {
    // Drill: this launch never returns, like a kernel stuck on a lost wavefront.
    for (;;) g_sink.fetch_add(1, std::memory_order_relaxed);
  }
  try {
    dispatch_rounding(params->rounding, [&](auto mode) { run<decltype(mode)::value>(*params); });
  } catch (const std::exception& e) {  // allocation or thread creation failure
    return ra_fail(err, err_len, RA_ERR_DEVICE, "cpu backend failed: %s", e.what());
  }
#if RA_INJECT_NONDET
  // Drill: launches 0, 2, 4, ... are clean; 1, 3, 5, ... flip the low bit of element 0.
  if (g_launches.fetch_add(1) & 1u) params->o[0] ^= 1u;
#endif
  if (err && err_len) err[0] = '\0';
  return RA_OK;
}

const char* ra_backend_name(void) { return "cpu"; }

const char* ra_build_info(void) {
  // Rebuilt per call because the thread count follows REGRESS_CPU_THREADS at call time.
  thread_local std::string info;
  char buf[512];
  std::snprintf(buf, sizeof buf, "{\"backend\":\"cpu\",\"abi\":%d,\"inject\":%s,\"threads\":%d}", RA_ABI_VERSION,
                RA_INJECT_INFO, thread_count());
  info = buf;
  return info.c_str();
}

/* kernel/common/gqa_rows.h's view of a call as a dense call, for tests/kernel/test_gqa_rows.py (the GPU
 * backends run the viewed call; this backend runs calls as given). 1 and *view filled where `p` is a
 * valid call the view takes; 0 and *view untouched otherwise (a null pointer or an invalid call too). */
int ra_gqa_rows_view_c(const ra_attention_params* p, ra_attention_params* view) {
  if (!p || !view || ra_validate_params(p, nullptr, 0) != RA_OK) return 0;
  return ra_gqa_rows_view(p, view);
}

/* Test hook: the kernel's own fp32 -> bf16 rounding, for tests/kernel/test_numerics.py. */
void ra_cpu_round_f32(const float* x, uint16_t* out, size_t n, int mode) {
  dispatch_rounding(mode, [&](auto m) {
    for (size_t i = 0; i < n; ++i) out[i] = round_bf16<decltype(m)::value>(x[i]);
  });
}

}  // extern "C"
