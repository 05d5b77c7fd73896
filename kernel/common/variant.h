/*
 * variant.h — the kernel variant every backend is templated on: rounding mode x layout, and the one
 * switch that turns the runtime pair into compile-time constants (CUDA attention_sm90.cu and HIP
 * attention_gfx942.hip both call ra_variant::dispatch; issue 25 item 3).
 *
 * Host-side C++ only and no standard headers, so the device-only gfx942 build (clang-19
 * -nogpuinc, parts/compat.h) compiles it as it is.
 */
#ifndef REGRESS_VARIANT_H
#define REGRESS_VARIANT_H

namespace ra_variant {

/* Numbered as ra_attention_params.rounding (regress_attn.h: RA_RTNE, RA_RTNA, RA_RTZ). */
enum Rounding : int { kRtne = 0, kRtna = 1, kRtz = 2 };

/* kPacked: Q, K, V and O all have seq stride 128 (BHSD, one head's rows back to back), so row
 * offsets are compile-time multiples of 256 bytes. kStrided: any other strides validate.h accepts
 * (BSHD included), rows addressed through the runtime seq stride. Both read tensors in place.
 * Unscoped so kernels templated on `int L` (HIP) and on `Layout L` (CUDA) both compare against it. */
enum Layout : int { kStrided = 0, kPacked = 1 };

/* A compile-time constant as a value: decltype(c)::value. */
template <class T, T V>
struct Const {
  static constexpr T value = V;
};
template <int R>
using RoundingC = Const<int, R>;
template <Layout L>
using LayoutC = Const<Layout, L>;

/* The one switch: f(RoundingC<r>{}, LayoutC<l>{}). `rounding` is validated already (validate.h);
 * anything else falls to rtne, as the kernels' own default does. */
template <class F>
inline auto dispatch(int rounding, Layout layout, F&& f) -> decltype(f(RoundingC<0>{}, LayoutC<kStrided>{})) {
  if (layout == kPacked) {
    switch (rounding) {
      case kRtna: return f(RoundingC<kRtna>{}, LayoutC<kPacked>{});
      case kRtz: return f(RoundingC<kRtz>{}, LayoutC<kPacked>{});
      default: return f(RoundingC<kRtne>{}, LayoutC<kPacked>{});
    }
  }
  switch (rounding) {
    case kRtna: return f(RoundingC<kRtna>{}, LayoutC<kStrided>{});
    case kRtz: return f(RoundingC<kRtz>{}, LayoutC<kStrided>{});
    default: return f(RoundingC<kRtne>{}, LayoutC<kStrided>{});
  }
}

}  // namespace ra_variant

#endif /* REGRESS_VARIANT_H */
