/*
 * layout_emu.cpp — CPU emulation of the gfx942 kernel's data placement (host C++17, no GPU).
 *
 * What it checks: that the index maps of kernel/hip/parts/layout.h (fragment k-permutations, the
 * key order inside a score tile, LDS swizzles, copy roles) together with the MFMA operand layout of
 * v_mfma_f32_16x16x16_bf16 (as the CDNA3 ISA guide tables give it) compute attention, and that the
 * online-softmax rules of parts/softmax.h give the fp64 reference's NaN/Inf rows and columns.
 * It walks blocks, waves and the 64 lanes of each wave the way the kernel does, with an emulated
 * MFMA that reads A, B and writes D through the ISA lane layout.
 * What it does not check: the .hip code itself (it is a second implementation of the same plan
 * that shares layout.h and bf16.h), the hardware's MFMA rounding and summation order, v_exp_f32's
 * accuracy, timing, or races. Those need an MI300X.
 *
 * Build and run: clang++-19 -std=c++17 -O2 -Ikernel kernel/hip/emu/layout_emu.cpp -o layout_emu
 * Prints one line per case and "ALL OK" when every case is within tolerance.
 */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/bf16.h"
#include "hip/parts/layout.h"

using namespace ra_gfx942;

namespace {

struct Tensor {
  int64_t stride[4];
  std::vector<uint16_t> data;
  uint16_t& at(int b, int h, int s, int d) {
    return data[b * stride[0] + h * stride[1] + s * stride[2] + d * stride[3]];
  }
};

Tensor make(int B, int H, int S, bool bshd) {
  Tensor t;
  if (bshd) {
    t.stride[0] = (int64_t)S * H * kHeadDim; t.stride[1] = kHeadDim; t.stride[2] = (int64_t)H * kHeadDim;
  } else {
    t.stride[0] = (int64_t)H * S * kHeadDim; t.stride[1] = (int64_t)S * kHeadDim; t.stride[2] = kHeadDim;
  }
  t.stride[3] = 1;
  t.data.assign((size_t)B * H * S * kHeadDim, 0);
  return t;
}

float bf(uint16_t h) { return ra_bf16_to_f32(h); }

/* v_mfma_f32_16x16x16_bf16 on one wave: acc[lane][4] += A * B through the ISA lane layout. */
void mfma(float acc[64][4], const uint16_t a[64][4], const uint16_t b[64][4]) {
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float sum = acc[16 * (i / 4) + j][i % 4];
      for (int k = 0; k < 16; ++k) sum += bf(a[16 * (k / 4) + i][k % 4]) * bf(b[16 * (k / 4) + j][k % 4]);
      acc[16 * (i / 4) + j][i % 4] = sum;
    }
}

uint16_t pack_p_half(float x) { /* parts/mfma.h pack_p_bf16, one value */
  uint32_t u = ra_f32_bits(x);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

struct Case {
  const char* name;
  int B, H, Sq, Sk;
  bool bshd;
  int mode;
  float q_gain;
  bool nonfinite;
};

/* Runs the emulated kernel on one case and compares with the fp64 reference. */
bool run_case(const Case& c, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  Tensor q = make(c.B, c.H, c.Sq, c.bshd), k = make(c.B, c.H, c.Sk, c.bshd), v = make(c.B, c.H, c.Sk, c.bshd);
  Tensor o = make(c.B, c.H, c.Sq, c.bshd);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int d = 0; d < kHeadDim; ++d) {
        for (int s = 0; s < c.Sq; ++s) q.at(b, h, s, d) = ra_f32_to_bf16_rtne(nd(rng) * c.q_gain);
        for (int s = 0; s < c.Sk; ++s) {
          float kv = nd(rng);
          if (c.nonfinite && d == 0) kv = std::fabs(kv) + 0.5f; /* k[.,0] > 0 for the -Inf / +Inf rows */
          k.at(b, h, s, d) = ra_f32_to_bf16_rtne(kv);
          v.at(b, h, s, d) = ra_f32_to_bf16_rtne(nd(rng));
        }
      }
  const uint16_t kPosInf = 0x7F80, kNegInf = 0xFF80, kNaN = 0x7FC0;
  if (c.nonfinite) {
    for (int d = 0; d < kHeadDim; ++d) {
      q.at(0, 0, 1, d) = 0;
      q.at(0, 0, 2, d) = 0;
    }
    q.at(0, 0, 1, 0) = kNegInf;      /* every score -Inf            -> NaN row */
    q.at(0, 0, 2, 0) = kPosInf;      /* every score +Inf            -> NaN row */
    q.at(0, 0, 3, 7) = kNaN;         /* NaN in Q                    -> NaN row */
    if (c.Sk > 5) {
      k.at(0, 0, 5, 9) = kPosInf;    /* +-Inf or NaN scores for key 5, depending on q[9] */
      v.at(0, 0, c.Sk - 1, 3) = kPosInf; /* Inf in V: column 3 Inf (or NaN where p = 0) */
      v.at(0, 0, 0, 4) = kNaN;       /* NaN in V: column 4 NaN */
    }
  }

  const float scale = 0.08838834764831845f;
  const float scale_log2e = (float)((double)scale * 1.4426950408889634);
  const int n_qblocks = (c.Sq + kBlockQ - 1) / kBlockQ;
  const int n_tiles = (c.Sk + kBlockK - 1) / kBlockK;

  static uint16_t lds_k[2][kBlockK * kKGranules][8];
  static uint16_t lds_vt[2][kHeadDim * kVGranules][8];
  static uint16_t qf[kWaves][64][kMTiles][4][8];
  static float acc_o[kWaves][64][kMTiles][kDTiles][4];
  static float st_m[kWaves][64][kMTiles], st_l[kWaves][64][kMTiles];

  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int qb = 0; qb < n_qblocks; ++qb) {
        for (int w = 0; w < kWaves; ++w)
          for (int lane = 0; lane < 64; ++lane) {
            const int li = lane & 15, g = lane >> 4;
            for (int mt = 0; mt < kMTiles; ++mt) {
              const int row = qb * kBlockQ + w * kRowsPerWave + 16 * mt + li;
              for (int p = 0; p < 4; ++p)
                for (int e = 0; e < 8; ++e) qf[w][lane][mt][p][e] = row < c.Sq ? q.at(b, h, row, 32 * p + 8 * g + e) : 0;
              st_m[w][lane][mt] = -INFINITY;
              st_l[w][lane][mt] = 0.f;
              for (int dt = 0; dt < kDTiles; ++dt)
                for (int r = 0; r < 4; ++r) acc_o[w][lane][mt][dt][r] = 0.f;
            }
          }
        for (int it = 0; it < n_tiles; ++it) {
          const int buf = it & 1, key0 = it * kBlockK;
          for (int t = 0; t < kThreads; ++t) { /* TileCopy::load + store */
            for (int i = 0; i < 2; ++i) {
              const int r = k_copy_row(t, i), G = k_copy_granule(t);
              for (int e = 0; e < 8; ++e) lds_k[buf][k_lds_index(r, G)][e] = key0 + r < c.Sk ? k.at(b, h, key0 + r, 8 * G + e) : 0;
            }
            const int d = 2 * v_copy_dimpair(t), kg = v_copy_keygroup(t);
            for (int e = 0; e < 8; ++e) {
              const int key = key0 + 8 * kg + e;
              lds_vt[buf][vt_lds_index(d, kg)][e] = key < c.Sk ? v.at(b, h, key, d) : 0;
              lds_vt[buf][vt_lds_index(d + 1, kg)][e] = key < c.Sk ? v.at(b, h, key, d + 1) : 0;
            }
          }
          for (int w = 0; w < kWaves; ++w) {
            if (qb * kBlockQ + w * kRowsPerWave >= c.Sq) continue; /* inactive wave */
            static float s[kMTiles][kKTiles][64][4];
            static uint16_t pfrag[kMTiles][kKTiles][64][4];
            uint16_t fa[64][4], fb[64][4];
            for (int mt = 0; mt < kMTiles; ++mt)
              for (int kt = 0; kt < kKTiles; ++kt) {
                std::memset(s[mt][kt], 0, sizeof s[mt][kt]);
                for (int p = 0; p < 4; ++p)
                  for (int half = 0; half < 2; ++half) {
                    for (int lane = 0; lane < 64; ++lane) {
                      const int li = lane & 15, g = lane >> 4;
                      const uint16_t* kf = lds_k[buf][k_lds_index(tile_key(kt, li), 4 * p + g)];
                      for (int e = 0; e < 4; ++e) {
                        fa[lane][e] = kf[4 * half + e];
                        fb[lane][e] = qf[w][lane][mt][p][4 * half + e];
                      }
                    }
                    mfma(s[mt][kt], fa, fb);
                  }
              }
            const bool partial = key0 + kBlockK > c.Sk;
            for (int mt = 0; mt < kMTiles; ++mt) { /* online_softmax */
              float mx[64];
              for (int lane = 0; lane < 64; ++lane) {
                const int g = lane >> 4;
                float m = -INFINITY;
                for (int kt = 0; kt < kKTiles; ++kt)
                  for (int r = 0; r < 4; ++r) {
                    if (partial && tile_key(kt, 4 * g + r) >= c.Sk - key0) s[mt][kt][lane][r] = -INFINITY;
                    m = std::fmax(m, s[mt][kt][lane][r]);
                  }
                mx[lane] = m;
              }
              float mx16[64], mx32[64];
              for (int lane = 0; lane < 64; ++lane) mx16[lane] = std::fmax(mx[lane], mx[lane ^ 16]);
              for (int lane = 0; lane < 64; ++lane) mx32[lane] = std::fmax(mx16[lane], mx16[lane ^ 32]);
              for (int lane = 0; lane < 64; ++lane) {
                float& m_old = st_m[w][lane][mt];
                const float m_new = std::fmax(m_old, mx32[lane]);
                const float m_use = m_new == -INFINITY ? 0.f : m_new;
                const float alpha = m_old == -INFINITY ? 0.f : std::exp2((m_old - m_use) * scale_log2e);
                float sum = 0.f;
                for (int kt = 0; kt < kKTiles; ++kt)
                  for (int r = 0; r < 4; ++r) {
                    const float e = std::exp2((s[mt][kt][lane][r] - m_use) * scale_log2e);
                    sum += e;
                    pfrag[mt][kt][lane][r] = pack_p_half(e);
                  }
                st_l[w][lane][mt] = st_l[w][lane][mt] * alpha + sum;
                m_old = m_new;
                for (int dt = 0; dt < kDTiles; ++dt)
                  for (int r = 0; r < 4; ++r) acc_o[w][lane][mt][dt][r] *= alpha;
              }
            }
            for (int dt = 0; dt < kDTiles; ++dt) /* pv_tile */
              for (int cc = 0; cc < 2; ++cc)
                for (int mt = 0; mt < kMTiles; ++mt)
                  for (int half = 0; half < 2; ++half) {
                    float acc[64][4];
                    for (int lane = 0; lane < 64; ++lane) {
                      const int li = lane & 15, g = lane >> 4;
                      const uint16_t* vf = lds_vt[buf][vt_lds_index(16 * dt + li, 4 * cc + g)];
                      for (int e = 0; e < 4; ++e) {
                        fa[lane][e] = vf[4 * half + e];
                        fb[lane][e] = pfrag[mt][2 * cc + half][lane][e];
                        acc[lane][e] = acc_o[w][lane][mt][dt][e];
                      }
                    }
                    mfma(acc, fa, fb);
                    for (int lane = 0; lane < 64; ++lane)
                      for (int e = 0; e < 4; ++e) acc_o[w][lane][mt][dt][e] = acc[lane][e];
                  }
          }
        }
        for (int w = 0; w < kWaves; ++w) { /* epilogue */
          if (qb * kBlockQ + w * kRowsPerWave >= c.Sq) continue;
          for (int mt = 0; mt < kMTiles; ++mt) {
            float l16[64];
            for (int lane = 0; lane < 64; ++lane) l16[lane] = st_l[w][lane][mt] + st_l[w][lane ^ 16][mt];
            for (int lane = 0; lane < 64; ++lane) {
              const float l_row = l16[lane] + l16[lane ^ 32];
              const int li = lane & 15, g = lane >> 4;
              const int row = qb * kBlockQ + w * kRowsPerWave + 16 * mt + li;
              if (row >= c.Sq) continue;
              for (int dt = 0; dt < kDTiles; ++dt)
                for (int r = 0; r < 4; ++r)
                  o.at(b, h, row, 16 * dt + 4 * g + r) = ra_f32_to_bf16(acc_o[w][lane][mt][dt][r] / l_row, c.mode);
            }
          }
        }
      }

  /* fp64 reference, literally softmax(s) = exp(s - max) / sum, then P V. */
  double worst = 0.0;
  long bad_nonfinite = 0, n_nan = 0, n_inf = 0;
  std::vector<double> sc(c.Sk), pr(c.Sk);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.Sq; ++i) {
        double m = -INFINITY;
        bool any_nan = false;
        for (int j = 0; j < c.Sk; ++j) {
          double dot = 0;
          for (int d = 0; d < kHeadDim; ++d) dot += (double)bf(q.at(b, h, i, d)) * (double)bf(k.at(b, h, j, d));
          sc[j] = (double)scale * dot;
          if (std::isnan(sc[j])) any_nan = true;
          m = std::fmax(m, sc[j]);
        }
        if (any_nan) m = NAN;
        double l = 0;
        for (int j = 0; j < c.Sk; ++j) l += (pr[j] = std::exp(sc[j] - m));
        for (int d = 0; d < kHeadDim; ++d) {
          double acc = 0, mag = 0;
          for (int j = 0; j < c.Sk; ++j) {
            acc += pr[j] * (double)bf(v.at(b, h, j, d));
            mag += pr[j] * std::fabs((double)bf(v.at(b, h, j, d)));
          }
          const double ref = acc / l, s_mag = mag / l;
          const uint16_t got = o.at(b, h, i, d);
          const float gotf = bf(got);
          if (std::isnan(ref) || std::isinf(ref)) {
            const bool ok = std::isnan(ref) ? got == RA_BF16_CANONICAL_NAN : (std::isinf(gotf) && (gotf > 0) == (ref > 0));
            if (!ok && bad_nonfinite++ < 5)
              std::printf("  %s: (%d,%d,%d,%d) ref %g got 0x%04x\n", c.name, b, h, i, d, ref, got);
            n_nan += std::isnan(ref);
            n_inf += std::isinf(ref);
            continue;
          }
          if (!std::isfinite(gotf)) {
            if (bad_nonfinite++ < 5) std::printf("  %s: (%d,%d,%d,%d) ref %g got 0x%04x\n", c.name, b, h, i, d, ref, got);
            continue;
          }
          const double ulp = s_mag > 0 ? std::ldexp(1.0, (int)std::floor(std::log2(s_mag)) - 7) : 1e-300;
          const double err = std::fabs((double)gotf - ref) / ulp;
          if (err > worst) worst = err;
        }
      }
  const double limit = c.mode == 2 ? 2.0 : 1.5; /* the project's scaled-ULP gate */
  const bool ok = bad_nonfinite == 0 && worst <= limit;
  std::printf("%-22s B=%d H=%d Sq=%d Sk=%d %s mode=%d: max scaled ULP %.3f (limit %.1f), NaN refs %ld, Inf refs %ld, "
              "non-finite mismatches %ld -> %s\n",
              c.name, c.B, c.H, c.Sq, c.Sk, c.bshd ? "BSHD" : "BHSD", c.mode, worst, limit, n_nan, n_inf, bad_nonfinite,
              ok ? "ok" : "FAIL");
  return ok;
}

bool check_bijections() {
  bool ok = true;
  for (int r = 0; r < kBlockK; ++r) { /* K LDS: each (row, granule) its own slot */
    bool seen[kKGranules] = {};
    for (int G = 0; G < kKGranules; ++G) {
      const int idx = k_lds_index(r, G) - r * kKGranules;
      ok &= idx >= 0 && idx < kKGranules && !seen[idx];
      if (idx >= 0 && idx < kKGranules) seen[idx] = true;
    }
  }
  for (int d = 0; d < kHeadDim; ++d) {
    bool seen[kVGranules] = {};
    for (int G = 0; G < kVGranules; ++G) {
      const int idx = vt_lds_index(d, G) - d * kVGranules;
      ok &= idx >= 0 && idx < kVGranules && !seen[idx];
      if (idx >= 0 && idx < kVGranules) seen[idx] = true;
    }
  }
  for (int kt = 0; kt < 1; ++kt) {
    bool seen[kBlockK] = {};
    for (int t2 = 0; t2 < kKTiles; ++t2)
      for (int i = 0; i < 16; ++i) {
        const int key = tile_key(t2, i);
        ok &= !seen[key];
        seen[key] = true;
      }
  }
  bool dims[kHeadDim] = {};
  for (int ks = 0; ks < 8; ++ks)
    for (int g = 0; g < 4; ++g)
      for (int e = 0; e < 4; ++e) {
        const int d = score_dim(ks, g, e);
        ok &= !dims[d];
        dims[d] = true;
      }
  std::printf("index maps are bijections: %s\n", ok ? "ok" : "FAIL");
  return ok;
}

}  // namespace

int main() {
  std::mt19937 rng(42);
  bool ok = check_bijections();
  const Case cases[] = {
      {"packed_tail", 1, 2, 37, 150, false, 0, 1.f, false},
      {"bshd_two_qblocks", 2, 3, 300, 65, true, 1, 1.f, false},
      {"sk1_rtz", 1, 1, 20, 1, false, 2, 1.f, false},
      {"exact_tiles", 1, 1, 256, 128, true, 0, 1.f, false},
      {"cross_77", 2, 2, 5, 77, true, 0, 1.f, false},
      {"extreme_logits", 1, 1, 64, 200, false, 0, 8.f, false},
      {"nonfinite", 1, 1, 40, 130, false, 0, 1.f, true},
      {"nonfinite_rtna", 1, 2, 33, 64, true, 1, 1.f, true},
  };
  for (const Case& c : cases) ok &= run_case(c, rng);
  std::printf(ok ? "ALL OK\n" : "FAILED\n");
  return ok ? 0 : 1;
}
