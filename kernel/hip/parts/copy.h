/*
 * copy.h — a wave's share of a K/V tile's trip HBM -> LDS (step 13, docs/hip-gfx942.md), issued row by
 * row from the wave's M phase, between its MFMAs (schedule.h).
 *
 *   K  direct to LDS: wave w moves rows w + 8i (i = 0..7), one `buffer_load_dword ... lds` a row.
 *      Lane l's dword lands at LDS byte 4l of the row (M0 = the row's LDS address), granule position
 *      l/4, so the lane fetches the global granule k_lds_index stores there (layout.h,
 *      k_dma_lane_bytes). No VGPR, no ds_write, no VALU; counted on vmcnt: the wave waits for them
 *      before the barrier that ends the phase.
 *   V  wave w loads the 8 keys of key group v_keygroup(w) (group 1 the tile's keys 0-31, group 0 keys
 *      32-63) by 8 dword loads into staging VGPRs (lane = dim pair); its next X phase transposes
 *      them by v_perm into two V^T granules and writes them with ds_write_b128 (an MFMA operand holds
 *      keys packed in a register and a V row holds dims, so no direct-to-LDS load can do the
 *      transpose).
 *
 * No branch (the rows are issued between MFMAs): one buffer resource a tile, the rows' distances in
 * soffset, num_records ending at the last row below seqlen_k, so a row past it reads 0 (CDNA3's range
 * check counts soffset: machine.Wave._buffer_dwords); a tile past the block's last is copied too
 * (zeros, or the next split part's keys, into a buffer nobody reads again). For sequence strides of
 * 2^25 elements or more (kv_rows_fit false: the row offsets would pass 32 bits) every row takes a
 * resource of its own (num_records 256 or 0, soffset 0); RA_HIP_ROW_RESOURCES=1 takes that path on
 * every call, so the emulator proves it on shapes that fit in memory.
 */
#ifndef RA_HIP_COPY_H
#define RA_HIP_COPY_H

#include "dispatch.h"
#include "layout.h"
#include "mfma.h"

namespace ra_gfx942 {

/* A wave-uniform pointer as the compiler's uniformity analysis cannot always prove it: a buffer resource
 * built from a pointer it believes divergent becomes a waterfall loop, divergent control flow in the
 * key loop, which the control-flow structurizer then applies to the loop's uniform branches too (the
 * O rescale's, measured: 64 more live VGPRs and 96 VALU copies a tile). */
template <class T>
__device__ __forceinline__ T* uniform_ptr(T* p) {
  const uint64_t a = (uint64_t)p;
  return (T*)((uint64_t)(uint32_t)__builtin_amdgcn_readfirstlane((int)(uint32_t)a) |
              ((uint64_t)(uint32_t)__builtin_amdgcn_readfirstlane((int)(uint32_t)(a >> 32)) << 32));
}

/* A raw buffer resource (CDNA3 ISA, "Buffer resource"): base, stride 0, num_records, the gfx9 word 3
 * (32-bit data format, no swizzle, no add-tid), as a plain SGPR quad inline asm can take. */
__device__ __forceinline__ u32x4 buffer_rsrc(const void* base, uint32_t num_records) {
  const uint64_t addr = (uint64_t)base;
  /* readfirstlane: the values are wave-uniform, and an "s" asm operand must be in SGPRs even where
   * the compiler's uniformity analysis cannot tell (it costs nothing on values already in SGPRs). */
  return u32x4{(uint32_t)__builtin_amdgcn_readfirstlane((int)(uint32_t)addr),
               (uint32_t)__builtin_amdgcn_readfirstlane((int)((uint32_t)(addr >> 32) & 0xFFFFu)),
               (uint32_t)__builtin_amdgcn_readfirstlane((int)num_records), 0x00020000u};
}

/* One 256-byte K row: lane l's dword from base + soff + voff lands at LDS byte m0 + 4l. A SALU write
 * of M0 needs one wait state before an LDS-DMA load reads it (LLVM GCNHazardRecognizer: the gfx9 M0
 * read hazard of LDS DMA): the s_nop 0. The compiler never uses M0 in this kernel (the compile test
 * checks that only this asm writes it). s_add_u32 writes SCC: declared, or the compiler keeps a
 * compare's SCC across the asm (it did: a select after it took the add's carry). */
template <int kRowBytes>
__device__ __forceinline__ void dma_row(u32x4 rsrc, uint32_t voff, uint32_t soff, uint32_t m0_base) {
  /* M0 = the buffer's LDS address + the row's offset, added here (as a constant the compiler hoisted
   * eight of them out of the loop into SGPRs, and its loop preheader ran long: schedule.h). */
  asm volatile("s_add_u32 m0, %2, %4\n\ts_nop 0\n\tbuffer_load_dword %0, %1, %3 offen lds"
               :
               : "v"(voff), "s"(rsrc), "s"(m0_base), "s"(soff), "i"(kRowBytes)
               : "memory", "scc");
}

/* f(Int<0>{}), ..., f(Int<N-1>{}): a loop whose index is a constant expression in the body. */
template <int I>
struct Int {
  static constexpr int value = I;
};
template <int N, int I = 0, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (I < N) {
    f(Int<I>{});
    static_for<N, I + 1>(f);
  }
}

/* The LDS byte address of a __shared__ object: the low 32 bits of its generic address. */
__device__ __forceinline__ uint32_t lds_addr(const void* p) { return (uint32_t)(uintptr_t)p; }

/* Whether a tile's rows fit the one-resource path (KTile, VTile): a wave's last K row starts 56 rows
 * (7 x 8) after its first and num_records holds up to 57 rows, in 32 bits: seq strides below 2^25
 * elements (57 x 2^26 bytes < 2^32); larger ones take a resource per row. */
template <int L>
__device__ __forceinline__ bool kv_rows_fit(const KernelArgs& a) {
  const uint64_t st = (uint64_t)a.k_stride[2] | (uint64_t)a.v_stride[2];
  return !RA_HIP_ROW_RESOURCES &&
         (L == kPacked || ((uint32_t)(st >> 32) | ((uint32_t)st >> 25)) == 0u); /* 32-bit scalar tests */
}

/* Bytes from one seq row to the next, at least a row's 256 (a tensor of one key may have any stride:
 * its rows 1.. must still fall out of range), as a scalar; kv_rows_fit holds. */
template <int L>
__device__ __forceinline__ uint32_t row_step(int64_t seq_stride) {
  const uint32_t b = L == kPacked ? (uint32_t)(kHeadDim * 2) : __builtin_amdgcn_readfirstlane((int)(uint32_t)(2 * seq_stride));
  return b > (uint32_t)(kHeadDim * 2) ? b : (uint32_t)(kHeadDim * 2);
}

/* How many of `rows` rows from key0 lie below seqlen_k, as a compare and a select (a saturating
 * subtract is a VALU op only, then read back to an SGPR). */
__device__ __forceinline__ uint32_t rows_below(uint32_t seqlen_k, uint32_t key0, uint32_t rows) {
  uint32_t d = seqlen_k - key0;
  asm("" : "+s"(d));
  const uint32_t nv = seqlen_k > key0 ? d : 0u;
  return nv < rows ? nv : rows;
}

template <int L>
struct KvCopy {
  uint32_t klane[2]; /* byte offset of this lane's K dword in rows w + 8i, i even / odd */
  uint32_t vlane;    /* byte offset of this lane's V dword in a row */
  uint32_t vt[2];    /* byte offsets of this lane's two V^T granules in a V^T buffer */
  int w, lane;

  /* The lane offsets tied to an empty asm where they are made (the kernel's start): the compiler
   * otherwise computes them in the key loop's preheader, which falls in group 1's first X phase. */
  __device__ __forceinline__ KvCopy(int w_, int lane_) : w(w_), lane(lane_) {
#pragma unroll
    for (int h = 0; h < 2; ++h) klane[h] = (uint32_t)k_dma_lane_bytes(lane, k_dma_row(w, h));
    vlane = 4u * (uint32_t)lane;
#pragma unroll
    for (int h = 0; h < 2; ++h) vt[h] = 16u * (uint32_t)vt_lds_index(2 * lane + h, v_keygroup(w));
    asm volatile("" : "+v"(klane[0]), "+v"(klane[1]), "+v"(vlane), "+v"(vt[0]), "+v"(vt[1]));
  }

  /* A tile's K rows (see above). kFits: one resource from row w, rows 8 apart by 8 row_step bytes in
   * a running soffset, num_records ending at the last of them below seqlen_k; else one per row. */
  struct KTile {
    u32x4 rsrc;    /* kFits: the tile's buffer from row w */
    uint32_t m0;   /* LDS byte address of row w in the tile's buffer */
    uint32_t soff; /* kFits: running row offset (starts one row step below 0) */
    uint32_t step; /* kFits: bytes from row w + 8i to row w + 8(i + 1) */
    uint32_t key0; /* !kFits: first key of the tile */
  };
  /* row: the tile's row w (k_row_ptr; the key loop steps it a tile at a time, kFits only). */
  template <bool kFits>
  __device__ __forceinline__ KTile k_tile(const KernelArgs& a, const uint16_t* row, uint32_t key0, uint32_t kbuf) const {
    KTile t;
    t.m0 = kbuf + (uint32_t)w * (uint32_t)(kHeadDim * 2);
    t.key0 = key0;
    if constexpr (kFits) {
      const uint32_t rstride = row_step<L>(a.k_stride[2]);
      t.step = (uint32_t)kWaves * rstride;
      const uint32_t rows = rows_below(a.seqlen_k, key0 + (uint32_t)w, (uint32_t)(kWaves * (kDmaRows - 1) + 1));
      t.rsrc = buffer_rsrc(row, rows * rstride);
      t.soff = 0u - t.step;
    }
    return t;
  }
  __device__ __forceinline__ const uint16_t* k_row_ptr(const KernelArgs& a, const uint16_t* kb, uint32_t key0) const {
    return kb + row_offset<L>(key0 + (uint32_t)w, a.k_stride[2]);
  }
  __device__ __forceinline__ const uint16_t* v_row_ptr(const KernelArgs& a, const uint16_t* vb, uint32_t key0) const {
    return vb + row_offset<L>(key0 + (uint32_t)(kVKeysPerWave * v_keygroup(w)), a.v_stride[2]);
  }
  /* The tile's scalars made here (before a barrier: the M phase that issues the rows opens on MFMAs). */
  __device__ __forceinline__ void tie(KTile& t) const {
    asm volatile("" : "+s"(t.rsrc), "+s"(t.m0), "+s"(t.soff), "+s"(t.step), "+s"(t.key0));
  }
  template <bool kFits, int I>
  __device__ __forceinline__ void k_row(const KernelArgs& a, const uint16_t* kb, KTile& t) const {
    constexpr int kRow = kWaves * kHeadDim * 2; /* LDS bytes from row w + 8i to row w + 8(i + 1) */
    if constexpr (kFits) {
      /* the soffset add is the wait state M0's write needs before the load reads it */
      asm volatile("s_add_u32 m0, %[m0], %[imm]\n\ts_add_u32 %[soff], %[soff], %[step]\n\t"
                   "buffer_load_dword %[voff], %[rsrc], %[soff] offen lds"
                   : [soff] "+s"(t.soff)
                   : [voff] "v"(klane[I & 1]), [rsrc] "s"(t.rsrc), [m0] "s"(t.m0), [step] "s"(t.step),
                     [imm] "i"(kRow * I)
                   : "memory", "scc");
    } else {
      const uint32_t key = t.key0 + (uint32_t)k_dma_row(w, I);
      const bool in = key < a.seqlen_k;
      const u32x4 rk = buffer_rsrc(kb + row_offset<L>(in ? key : 0u, a.k_stride[2]), in ? (uint32_t)(kHeadDim * 2) : 0u);
      dma_row<kRow * I>(rk, klane[I & 1], 0u, t.m0);
    }
  }

  /* A tile's 8 V rows of the wave (keys key0 + 8 v_keygroup(w) + e) into staging registers, as K's. */
  struct VTile {
    const uint16_t* base; /* kFits: the wave's first V row */
    uint32_t nrec;        /* kFits: bytes of the rows below seqlen_k */
    uint32_t step;        /* kFits: bytes from row to row */
    uint32_t key0;        /* the wave's first key */
  };
  /* row: the wave's first V row of the tile (v_row_ptr; stepped as k_tile's). */
  template <bool kFits>
  __device__ __forceinline__ VTile v_tile(const KernelArgs& a, const uint16_t* row, uint32_t key0) const {
    VTile t;
    t.key0 = key0 + (uint32_t)(kVKeysPerWave * v_keygroup(w));
    if constexpr (kFits) {
      t.step = row_step<L>(a.v_stride[2]);
      t.nrec = rows_below(a.seqlen_k, t.key0, (uint32_t)kVKeysPerWave) * t.step;
      t.base = row;
    }
    return t;
  }
  __device__ __forceinline__ void tie(VTile& t) const {
    asm volatile("" : "+s"(t.base), "+s"(t.nrec), "+s"(t.step), "+s"(t.key0));
  }
  template <bool kFits, int E>
  __device__ __forceinline__ void v_row(const KernelArgs& a, const uint16_t* vb, const VTile& t, unsigned int& v) const {
    if constexpr (kFits) {
      const __amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc((void*)t.base, (short)0, (int)t.nrec, 0x00020000);
      v = __builtin_amdgcn_raw_buffer_load_b32(r, vlane, (int)(t.step * (uint32_t)E), 0);
    } else {
      const uint32_t key = t.key0 + (uint32_t)E;
      const bool in = key < a.seqlen_k;
      const __amdgpu_buffer_rsrc_t r =
          __builtin_amdgcn_make_buffer_rsrc((void*)uniform_ptr(vb + row_offset<L>(in ? key : 0u, a.v_stride[2])),
                                            (short)0, __builtin_amdgcn_readfirstlane(in ? kHeadDim * 2 : 0), 0x00020000);
      v = __builtin_amdgcn_raw_buffer_load_b32(r, vlane, 0, 0);
    }
  }

  /* The staged V rows, transposed, into a V^T buffer: key group v_keygroup(w), two granules (8 keys of
   * one dim each). */
  __device__ __forceinline__ void store_vt(const unsigned int (&v)[kVKeysPerWave], u32x4* lds_vt) const {
    u32x4 even, odd;
    even.x = __builtin_amdgcn_perm(v[1], v[0], 0x05040100u);
    even.y = __builtin_amdgcn_perm(v[3], v[2], 0x05040100u);
    even.z = __builtin_amdgcn_perm(v[5], v[4], 0x05040100u);
    even.w = __builtin_amdgcn_perm(v[7], v[6], 0x05040100u);
    odd.x = __builtin_amdgcn_perm(v[1], v[0], 0x07060302u);
    odd.y = __builtin_amdgcn_perm(v[3], v[2], 0x07060302u);
    odd.z = __builtin_amdgcn_perm(v[5], v[4], 0x07060302u);
    odd.w = __builtin_amdgcn_perm(v[7], v[6], 0x07060302u);
    *reinterpret_cast<u32x4*>(reinterpret_cast<char*>(lds_vt) + vt[0]) = even;
    *reinterpret_cast<u32x4*>(reinterpret_cast<char*>(lds_vt) + vt[1]) = odd;
  }
};

/* The rows of the key loop's first K tile (keys key0.., KeyLoop::key0(0): 0, or a split part's first
 * tile) into LDS buffer kbuf, every wave its own: the key loop's prologue copy, issued by the v2
 * kernels before their look at the diagonal's V (parts/stair.h) so the two overlap. kb wave-uniform. */
template <int L, bool kFits>
__device__ __forceinline__ void issue_k0(const KernelArgs& a, const uint16_t* kb, int w, int lane, uint32_t kbuf,
                                         uint32_t key0) {
  const KvCopy<L> cp(w, lane);
  auto kt = cp.template k_tile<kFits>(a, cp.k_row_ptr(a, kb, key0), key0, kbuf);
  static_for<kDmaRows>([&](auto ic) { cp.template k_row<kFits, decltype(ic)::value>(a, kb, kt); });
}

}  // namespace ra_gfx942

#endif /* RA_HIP_COPY_H */
