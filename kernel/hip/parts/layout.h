/*
 * layout.h — tile geometry and every index map of the gfx942 kernel, in one place.
 *
 * Pure integer functions (host and device), no memory access: the kernel uses them to place data,
 * the planner (plan.h) reads the tile sizes. The instruction emulator (regress/emu) runs the real
 * code object against fp64, which is what proves that the MFMA operand layouts below compute attention.
 *
 * v_mfma_f32_16x16x16_bf16, wave64, lane l = 16*g + li (li = l % 16, g = l / 16), from the CDNA3 ISA
 * guide's matrix-core operand tables:
 *   A (16x16, row i, col k): lane holds A[li][4g + 0..3]      (4 bf16 in 2 VGPRs)
 *   B (16x16, row k, col j): lane holds B[4g + 0..3][li]      (4 bf16 in 2 VGPRs)
 *   D (16x16, row i, col j): lane holds D[4g + 0..3][li]      (4 fp32 in 4 VGPRs)
 *
 * The kernel computes S^T = K Q^T and O^T = V^T P^T, so in every fragment the column index j is the
 * query row li of the lane: the softmax statistics of a query row live in the 4 lanes li, li+16,
 * li+32, li+48, P leaves the score MFMA in exactly the B-operand layout of the PV MFMA (no shuffle),
 * and the O^T accumulator is rescaled by the lane's own alpha.
 *
 * Because a dot product does not care about the order of its terms, the k index of a fragment may be
 * any permutation as long as both operands use the same one. The maps below choose permutations that
 * turn every fragment load into one 16-byte read (Q from HBM, K and V^T from LDS).
 */
#ifndef RA_HIP_LAYOUT_H
#define RA_HIP_LAYOUT_H

#if defined(__HIP__) || defined(__HIPCC__)
#define RA_HIP_HD __host__ __device__ __forceinline__
#else
#define RA_HIP_HD static inline
#endif

namespace ra_gfx942 {

constexpr int kHeadDim = 128;
constexpr int kWaves = 8;                          /* per block, wave64, two groups of 4 */
constexpr int kThreads = kWaves * 64;              /* 512 */
constexpr int kMTiles = 2;                         /* 16-row query tiles per wave */
constexpr int kRowsPerWave = 16 * kMTiles;         /* 32 */
constexpr int kBlockQ = kWaves * kRowsPerWave;     /* 256 query rows per block */
constexpr int kBlockK = 64;                        /* keys per K/V tile */
constexpr int kKTiles = kBlockK / 16;              /* 4 key tiles of 16 per K/V tile */
constexpr int kDTiles = kHeadDim / 16;             /* 8 head-dim tiles of 16 */
constexpr int kKGranules = kHeadDim / 8;           /* 16-byte granules per K row: 16 */
constexpr int kVGranules = kBlockK / 8;            /* 16-byte granules per V^T row: 8 */
constexpr int kLdsKBytes = kBlockK * kHeadDim * 2; /* 16 KiB per K buffer */
constexpr int kLdsVBytes = kHeadDim * kBlockK * 2; /* 16 KiB per V^T buffer */
constexpr int kLdsBytes = 2 * (kLdsKBytes + kLdsVBytes); /* 64 KiB: both double-buffered */

/* Head-dim indices held by lane group g for score k-step ks (0..7), element e (0..3):
 * ks = 2p + h -> dims 32p + 8g + 4h + e. One 16-byte load at dim 32p + 8g gives k-steps 2p (low
 * half) and 2p+1 (high half); the same map is used for the Q (B) and K (A) operands. */
RA_HIP_HD int score_dim(int ks, int g, int e) { return 32 * (ks >> 1) + 8 * g + 4 * (ks & 1) + e; }

/* Key (0..63 within a K/V tile) that sits in row i (0..15) of score key-tile kt (0..3):
 * kt = 2c + h -> key 32c + 8(i/4) + 4h + i%4. Chosen so that lane group g's P values for PV
 * k-steps 2c and 2c+1 are the 8 consecutive keys 32c + 8g .. +7: one 16-byte V^T read. */
RA_HIP_HD int tile_key(int kt, int i) { return 32 * (kt >> 1) + 8 * (i >> 2) + 4 * (kt & 1) + (i & 3); }

/* LDS K tile: 64 rows x 16 granules of 16 bytes, no padding. Granule G of row r is stored at
 * r*16 + (G ^ k_swizzle(r)): a bijection per row that spreads the 8 lanes of each LDS cycle over
 * distinct banks for both the row-wise copy and the permuted fragment reads. */
RA_HIP_HD int k_swizzle(int r) { return (r ^ ((r >> 1) & 4)) & 7; }
RA_HIP_HD int k_lds_index(int r, int granule) { return r * kKGranules + (granule ^ k_swizzle(r)); }

/* LDS V^T tile: 128 rows (head dim) x 8 granules (8 keys each). */
RA_HIP_HD int v_swizzle(int d) { return (d ^ (d >> 3)) & 7; }
RA_HIP_HD int vt_lds_index(int d, int granule) { return d * kVGranules + (granule ^ v_swizzle(d)); }

/* K by direct-to-LDS loads (step 13, copy.h): wave w (0..7) moves rows w + 8i (i = 0..7) of a K
 * tile, one 256-byte row an instruction. Lane l's dword lands at byte 4l of the LDS row, granule
 * position l/4, so it loads the global granule that k_lds_index puts there: (l/4) ^ k_swizzle(row).
 * Row w + 8i has swizzle w ^ 4(i & 1): two lane offsets serve all eight rows. */
constexpr int kDmaRows = kBlockK / kWaves; /* K rows per wave */
RA_HIP_HD int k_dma_row(int w, int i) { return w + kWaves * i; }
RA_HIP_HD int k_dma_lane_bytes(int lane, int row) { return 16 * ((lane >> 2) ^ k_swizzle(row)) + 4 * (lane & 3); }

/* V through registers (copy.h): wave w loads the 8 keys of V^T key group w ^ 4 (group 1's waves the
 * keys 0-31 of a tile, group 0's the keys 32-63; schedule.h says why), lane l dims 2l and 2l + 1. */
constexpr int kVKeysPerWave = kVGranules; /* 8 */
RA_HIP_HD int v_keygroup(int w) { return w ^ 4; }

/* One fp32 partial row of a tail-split part (step 10): O (unnormalised, 128 fp32), the row's
 * exponent offset q (log2 units, -Inf when every key of the part was -Inf), its sum l, two pad words
 * (16-byte aligned records). The device's store_partial/merge_body and the planner's workspace size. */
constexpr int kSplitRecord = 132;

}  // namespace ra_gfx942

#endif /* RA_HIP_LAYOUT_H */
