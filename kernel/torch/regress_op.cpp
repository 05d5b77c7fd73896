/*
 * regress_op.cpp — torch.ops.regress.attention and torch.ops.regress.varlen_attention in C++
 * (issue 40: the eager host cost of a call must not exceed SDPA's).
 *
 *   torch.ops.regress.*  ──► dispatcher ──► AutogradCPU/CUDA kernel here (forward-only: the output of
 *                                            a call that needs a gradient gets a backward that raises)
 *                                        ──► CPU/CUDA kernel here: checks, output, ra_attention_params
 *                                            from sizes and strides, the stream, then
 *                                        ──► ra_attention_fwd of the kernel library (dlopen'd)
 *
 * The schemas and the fake kernels stay in Python (regress/kernel/op.py defines them before this library
 * is loaded); this file registers only the CPU, CUDA and autograd kernels, and the dispatcher
 * refuses to load it if a signature here disagrees with a schema there. The kernel libraries are
 * still built by the vendor compiler without torch; this file is the only one under kernel/ that
 * sees torch's headers, and it includes nothing of the kernel wing but the ABI. It finds a backend's
 * library by asking Python once (regress_op_set_resolver: regress/kernel/op_native.py builds the library
 * with regress.native.build and answers its path), then dlopens it: the same .so the ctypes path loaded.
 *
 * The checks are the Python path's (regress/facts/abi.py check_call_v2, regress/kernel/op.py), in the same
 * order, with the same exception types and words; tests/kernel/test_op_native.py holds the two to
 * each other. A refusal of the kernel library itself is a RuntimeError ending in
 * "[ra_status N]", which regress.kernel turns back into KernelError(code=N).
 *
 * CUDA graphs: a call allocates nothing but its outputs (torch's caching allocator), launches on
 * torch's current stream and never synchronises; the first call per backend binds the library
 * (host-side work a capture must not see first: warm up once, as before).
 */
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "include/regress_attn.h"

#ifndef RA_TORCH_VERSION
#define RA_TORCH_VERSION "unknown"
#endif

namespace {

using at::Tensor;
using Sv = c10::string_view;  // the dispatcher's `str` (std::string_view in newer torch)

std::string_view view(Sv s) { return {s.data(), s.size()}; }

// ---- Python's spelling of values in messages (the Python path formats with repr and str) ----------

std::string py_repr(std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

// repr(float): the shortest digits that round-trip, fixed notation for exponents -4..15, else
// d.ddde±XX (Python's float_repr_style 'short').
std::string py_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]d[.ddd]e±XX
  const bool neg = sci[0] == '-';
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    const int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ex[16];
  std::snprintf(ex, sizeof ex, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ex;
}

// tuple(t.shape): "(2, 3)", "(5,)", "()".
std::string py_shape(const Tensor& t) {
  std::string out = "(";
  const auto sizes = t.sizes();
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + (sizes.size() == 1 ? ",)" : ")");
}

// str(t.dtype) without "torch.": torch's Python names of the dtypes a caller is likely to pass.
std::string py_dtype(c10::ScalarType s) {
  switch (s) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Bool: return "bool";
    case c10::ScalarType::ComplexHalf: return "complex32";
    case c10::ScalarType::ComplexFloat: return "complex64";
    case c10::ScalarType::ComplexDouble: return "complex128";
    default: {
      std::string name = c10::toString(s);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return name;
    }
  }
}

// ---- the kernel libraries ------------------------------------------------------------------------

using FwdFn = ra_status (*)(const ra_attention_params*, char*, size_t);
using NameFn = const char* (*)();
// Python's answer for a slot: 0 and the library path, or non-zero and the reason (written to buf).
using Resolver = int (*)(int slot, char* buf, size_t len);

enum Slot : int { kCpu = 0, kGpu = 1 };

struct Backend {
  FwdFn fwd;
  std::string name;  // ra_backend_name(): "cpu", "cuda", "hip"
};

std::atomic<Resolver> g_resolver{nullptr};
std::atomic<Backend*> g_backends[2] = {nullptr, nullptr};

// No lock: binding is idempotent (dlopen of one path returns one handle), so two threads racing on
// the first call both bind the same function and one result is kept. A lock held across the call
// into Python could deadlock against a thread that holds the GIL and waits for it.
const Backend& backend(Slot slot) {
  if (Backend* b = g_backends[slot].load(std::memory_order_acquire)) return *b;
  const Resolver resolve = g_resolver.load();
  TORCH_CHECK(resolve != nullptr,
              "regress: the operator library has no kernel library for ", slot == kCpu ? "cpu" : "gpu",
              " tensors: it is loaded by `import regress.kernel.op`, which tells it where the libraries are");
  char buf[4096] = {0};
  const int rc = resolve(slot, buf, sizeof buf);
  TORCH_CHECK(rc == 0, buf);
  void* handle = dlopen(buf, RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle != nullptr, "regress: could not load the kernel library ", buf, ": ", dlerror());
  auto fwd = reinterpret_cast<FwdFn>(dlsym(handle, "ra_attention_fwd"));
  auto name = reinterpret_cast<NameFn>(dlsym(handle, "ra_backend_name"));
  TORCH_CHECK(fwd != nullptr && name != nullptr, "regress: ", buf, " exports no ra_attention_fwd / ra_backend_name");
  auto* fresh = new Backend{fwd, name()};
  Backend* expected = nullptr;
  if (!g_backends[slot].compare_exchange_strong(expected, fresh)) {
    delete fresh;  // another thread bound the same library first
    return *expected;
  }
  return *fresh;
}

// ---- the checks of regress/facts/abi.py check_call_v2, in its order and words ----------------------------

constexpr std::string_view kRoundings[] = {"rtne", "rtna", "rtz"};  // ra_rounding 0, 1, 2

int rounding_code(std::string_view rounding) {
  int code = 0;
  while (code < 3 && rounding != kRoundings[code]) ++code;
  TORCH_CHECK_VALUE(code < 3, "rounding ", py_repr(rounding), " is not one of rtne, rtna, rtz");
  return code;
}

void check_scale(const std::optional<double>& scale) {
  if (scale.has_value()) {
    TORCH_CHECK_VALUE(std::isfinite(*scale) && *scale > 0, "scale must be positive and finite, got ",
                      py_repr(*scale));
  }
}

void check_tensor(const char* name, const Tensor& t, c10::DeviceType want, const std::string& backend,
                  bool packed) {
  TORCH_CHECK_TYPE(t.scalar_type() == c10::ScalarType::BFloat16, name, " has dtype ", py_dtype(t.scalar_type()),
                   ", the kernel takes bfloat16");
  if (packed) {
    TORCH_CHECK_VALUE(t.dim() == 3, name, " must be 3-D ([total, H, D]) with cu_seqlens, got shape ", py_shape(t));
  } else {
    TORCH_CHECK_VALUE(t.dim() == 4, name, " must be 4-D ([B,S,H,D] or [B,H,S,D]), got shape ", py_shape(t));
  }
  TORCH_CHECK_VALUE(t.device().type() == want, name, " is on ", t.device(), ", the ", backend, " kernel takes ",
                    c10::DeviceTypeName(want, /*lower_case=*/true), " tensors");
}

void check_seqlens(const char* name, const Tensor& cu, const c10::Device& device) {
  TORCH_CHECK_VALUE(cu.scalar_type() == c10::ScalarType::Int && cu.dim() == 1 && cu.numel() >= 2, name,
                    " must be a 1-D int32 tensor of batch + 1 >= 2 entries, got torch.", py_dtype(cu.scalar_type()),
                    " ", py_shape(cu));
  TORCH_CHECK_VALUE(cu.device() == device && cu.is_contiguous(), name, " must be contiguous on ", device,
                    " (q's device), got ", cu.device());
}

// (B, H, S, D) of a dense tensor in its layout.
std::array<int64_t, 4> bhsd_shape(const Tensor& t, bool bshd) {
  const auto s = t.sizes();
  return bshd ? std::array<int64_t, 4>{s[0], s[2], s[1], s[3]} : std::array<int64_t, 4>{s[0], s[1], s[2], s[3]};
}

// Element strides in (batch, head, seq, dim) order; size-1 dims get stride 0 (torch gives them
// arbitrary strides and they are never stepped over); a packed [total, H, D] tensor has no batch.
void bhsd_strides(const Tensor& t, bool bshd, int64_t out[4]) {
  const auto n = t.sizes();
  const auto s = t.strides();
  if (t.dim() == 3) {
    out[0] = 0;
    out[1] = n[1] == 1 ? 0 : s[1];
    out[2] = n[0] == 1 ? 0 : s[0];
    out[3] = s[2];
    return;
  }
  const int64_t sb = n[0] == 1 ? 0 : s[0], s1 = n[1] == 1 ? 0 : s[1], s2 = n[2] == 1 ? 0 : s[2];
  out[0] = sb;
  out[1] = bshd ? s2 : s1;
  out[2] = bshd ? s1 : s2;
  out[3] = s[3];
}

std::string py_layout(bool varlen, std::string_view layout) { return varlen ? "packed" : std::string(layout); }

void check_heads(const Tensor& q, const Tensor& k, int64_t b, int64_t h, int64_t d, int64_t kb, int64_t kh,
                 int64_t kd, const std::string& where) {
  TORCH_CHECK_VALUE(kb == b && kd == d && (kh == h || (kh >= 1 && h % kh == 0)), "q ", py_shape(q), " and k ",
                    py_shape(k), " disagree in batch or head_dim, or k's heads do not divide q's (", where, ")");
}

// ---- the call --------------------------------------------------------------------------------------

struct Dims {
  int64_t b, h, sq, sk, d, hk;
};

// The parameter block of a call: pointers, sizes, (batch, head, seq, dim) strides (a packed varlen
// tensor reads as bshd with no batch stride), scale (0 selects 1/sqrt(head_dim)), rounding, heads_kv,
// mask. The varlen fields stay 0 for a dense call.
ra_attention_params params_for(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, bool bshd,
                               const Dims& n, const std::optional<double>& scale, int rounding, int mask) {
  ra_attention_params p{};
  p.abi_version = RA_ABI_VERSION;
  p.q = static_cast<const uint16_t*>(q.const_data_ptr());
  p.k = static_cast<const uint16_t*>(k.const_data_ptr());
  p.v = static_cast<const uint16_t*>(v.const_data_ptr());
  p.o = static_cast<uint16_t*>(out.mutable_data_ptr());
  p.batch = n.b, p.heads = n.h, p.seqlen_q = n.sq, p.seqlen_k = n.sk, p.head_dim = n.d, p.heads_kv = n.hk;
  bhsd_strides(q, bshd, p.q_stride);
  bhsd_strides(k, bshd, p.k_stride);
  bhsd_strides(v, bshd, p.v_stride);
  bhsd_strides(out, bshd, p.o_stride);
  p.scale = scale.has_value() ? static_cast<float>(*scale) : 0.0f;
  p.rounding = rounding;
  p.mask = mask;
  return p;
}

// q, k, v: dtype, rank, device type, one device (check_call_v2's order).
void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, c10::DeviceType want, const std::string& backend,
               bool packed) {
  check_tensor("q", q, want, backend, packed);
  check_tensor("k", k, want, backend, packed);
  check_tensor("v", v, want, backend, packed);
  TORCH_CHECK_VALUE(q.device() == k.device() && k.device() == v.device(), "q, k, v are on different devices: ",
                    q.device(), ", ", k.device(), ", ", v.device());
}

// Runs the parameter block on q's device and torch's current stream there.
void launch(const Backend& be, ra_attention_params& p, const Tensor& q) {
  char err[512];
  ra_status st;
  if (q.is_cuda()) {
    const c10::impl::VirtualGuardImpl impl(q.device().type());
    c10::OptionalDeviceGuard guard;  // the library launches on the current device: q's, for the call
    if (impl.getDevice() != q.device()) guard.reset_device(q.device());
    try {
      p.stream = impl.getStream(q.device()).native_handle();
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "regress: this torch build gives no native handle of its current stream on ",
                  q.device(), " (", e.what_without_backtrace(),
                  "); set REGRESS_OP=python to use the Python operator");
    }
    st = be.fwd(&p, err, sizeof err);
  } else {
    st = be.fwd(&p, err, sizeof err);
  }
  TORCH_CHECK(st == RA_OK, be.name, " kernel refused the call: ", err, " [ra_status ", static_cast<int>(st), "]");
}

// regress/kernel/op.py dense_mask: SDPA's is_causal (top-left) unless causal_alignment='bottom_right'.
int dense_mask(bool is_causal, std::string_view align) {
  const bool top = align == "top_left", bottom = align == "bottom_right";
  TORCH_CHECK_VALUE(top || bottom, "causal_alignment ", py_repr(align), " is not 'top_left' or 'bottom_right'");
  if (!is_causal) {
    TORCH_CHECK_VALUE(top, "causal_alignment=", py_repr(align), " needs is_causal=True");
    return RA_MASK_NONE;
  }
  return top ? RA_MASK_CAUSAL_TOP_LEFT : RA_MASK_CAUSAL_BOTTOM_RIGHT;
}

template <Slot S>
Tensor attention_kernel(const Tensor& q, const Tensor& k, const Tensor& v, Sv layout_, Sv rounding,
                        std::optional<double> scale, bool is_causal, Sv causal_alignment, bool enable_gqa) {
  const std::string_view layout = view(layout_);
  const int mask = dense_mask(is_causal, view(causal_alignment));
  const bool bshd = layout == "bshd";
  const bool known_layout = bshd || layout == "bhsd";
  if (q.dim() == 4 && k.dim() == 4 && known_layout) {  // regress/kernel/op.py check_gqa: SDPA's rule
    const int64_t hq = q.size(bshd ? 2 : 1), hk = k.size(bshd ? 2 : 1);
    if (hq != hk) {
      TORCH_CHECK_VALUE(enable_gqa, "q has ", hq, " heads and k ", hk,
                        ": pass enable_gqa=True for grouped-query attention");
      TORCH_CHECK_VALUE(hk >= 1 && hq % hk == 0, "enable_gqa: q's ", hq, " heads are not a multiple of k's ", hk);
    }
  }
  const Backend& be = backend(S);
  const c10::DeviceType want = S == kCpu ? c10::DeviceType::CPU : c10::DeviceType::CUDA;
  TORCH_CHECK_VALUE(known_layout, "layout ", py_repr(layout), " is not 'bshd' or 'bhsd'");
  const int rnd = rounding_code(view(rounding));
  check_scale(scale);
  check_qkv(q, k, v, want, be.name, false);
  const auto [b, h, sq, d] = bhsd_shape(q, bshd);
  const auto [kb, kh, sk, kd] = bhsd_shape(k, bshd);
  TORCH_CHECK_VALUE(bhsd_shape(v, bshd) == bhsd_shape(k, bshd), "k ", py_shape(k), " and v ", py_shape(v),
                    " differ in shape");
  check_heads(q, k, b, h, d, kb, kh, kd, py_layout(false, layout));
  const auto opts = q.options().memory_format(c10::MemoryFormat::Contiguous);
  Tensor out = at::empty(q.sizes(), opts.dtype(c10::ScalarType::BFloat16));

  ra_attention_params p = params_for(q, k, v, out, bshd, {b, h, sq, sk, d, kh}, scale, rnd, mask);
  launch(be, p, q);
  return out;
}

template <Slot S>
std::tuple<Tensor, Tensor> varlen_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens_q,
                                         const Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                         double dropout_p, std::optional<double> softmax_scale, bool causal,
                                         Sv rounding) {
  TORCH_CHECK_VALUE(dropout_p == 0.0, "dropout_p=", py_repr(dropout_p),
                    ": the kernel has no dropout (inference only), pass 0.0");
  const Backend& be = backend(S);
  const c10::DeviceType want = S == kCpu ? c10::DeviceType::CPU : c10::DeviceType::CUDA;
  const int rnd = rounding_code(view(rounding));
  check_scale(softmax_scale);
  check_qkv(q, k, v, want, be.name, true);
  check_seqlens("cu_seqlens_q", cu_seqlens_q, q.device());
  check_seqlens("cu_seqlens_k", cu_seqlens_k, q.device());
  TORCH_CHECK_VALUE(cu_seqlens_q.numel() == cu_seqlens_k.numel(), "cu_seqlens_q has ", cu_seqlens_q.numel(),
                    " entries, cu_seqlens_k ", cu_seqlens_k.numel(), ": both must be batch + 1");
  TORCH_CHECK_VALUE(0 <= max_seqlen_q && max_seqlen_q <= q.size(0), "max_seqlen_q=", max_seqlen_q,
                    " must be an int in [0, ", q.size(0), "] (the packed total)");
  TORCH_CHECK_VALUE(0 <= max_seqlen_k && max_seqlen_k <= k.size(0), "max_seqlen_k=", max_seqlen_k,
                    " must be an int in [0, ", k.size(0), "] (the packed total)");
  const int64_t b = cu_seqlens_q.numel() - 1, sq = q.size(0), h = q.size(1), d = q.size(2);
  const int64_t sk = k.size(0), kh = k.size(1), kd = k.size(2);
  TORCH_CHECK_VALUE(v.sizes() == k.sizes(), "k ", py_shape(k), " and v ", py_shape(v), " differ in shape");
  check_heads(q, k, b, h, d, b, kh, kd, py_layout(true, ""));
  const auto opts = q.options().memory_format(c10::MemoryFormat::Contiguous);
  Tensor out = at::empty(q.sizes(), opts.dtype(c10::ScalarType::BFloat16));
  Tensor lse = at::empty({h, sq}, opts.dtype(c10::ScalarType::Float));

  const int mask = causal ? RA_MASK_CAUSAL_BOTTOM_RIGHT : RA_MASK_NONE;  // FlashAttention's causal
  ra_attention_params p = params_for(q, k, v, out, true, {b, h, sq, sk, d, kh}, softmax_scale, rnd, mask);
  p.cu_seqlens_q = static_cast<const int32_t*>(cu_seqlens_q.const_data_ptr());
  p.cu_seqlens_k = static_cast<const int32_t*>(cu_seqlens_k.const_data_ptr());
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.lse = lse.mutable_data_ptr<float>();
  launch(be, p, q);
  return {out, lse};
}

// ---- forward-only autograd ----------------------------------------------------------------------

using AttentionSig = Tensor(const Tensor&, const Tensor&, const Tensor&, Sv, Sv, std::optional<double>, bool, Sv,
                            bool);
using VarlenSig = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&, int64_t, int64_t, double, std::optional<double>, bool,
                                             Sv);

const c10::TypedOperatorHandle<AttentionSig>& attention_handle() {
  static const auto h =
      c10::Dispatcher::singleton().findSchemaOrThrow("regress::attention", "").typed<AttentionSig>();
  return h;
}

const c10::TypedOperatorHandle<VarlenSig>& varlen_handle() {
  static const auto h =
      c10::Dispatcher::singleton().findSchemaOrThrow("regress::varlen_attention", "").typed<VarlenSig>();
  return h;
}

std::string backward_error(const char* name) {  // regress/kernel/op.py backward_error, word for word
  return std::string("regress::") + name +
         " has no backward: the kernel is forward-only. Run it under torch.no_grad() or torch.inference_mode(), "
         "or detach its inputs";
}

// The forward below autograd; a backward that raises (torch's fallback for an op without an
// autograd kernel would only warn and return no gradient; issue 23).
struct AttentionForwardOnly : public torch::autograd::Function<AttentionForwardOnly> {
  static Tensor forward(torch::autograd::AutogradContext*, c10::DispatchKeySet ks, const Tensor& q, const Tensor& k,
                        const Tensor& v, Sv layout, Sv rounding, std::optional<double> scale, bool is_causal,
                        Sv align, bool gqa) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return attention_handle().redispatch(ks & c10::after_autograd_keyset, q, k, v, layout, rounding, scale,
                                         is_causal, align, gqa);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list) {
    TORCH_CHECK(false, backward_error("attention"));
    return {};
  }
};

struct VarlenForwardOnly : public torch::autograd::Function<VarlenForwardOnly> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext*, c10::DispatchKeySet ks,
                                                const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cq,
                                                const Tensor& ck, int64_t mq, int64_t mk, double dropout,
                                                std::optional<double> scale, bool causal, Sv rounding) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [out, lse] = varlen_handle().redispatch(ks & c10::after_autograd_keyset, q, k, v, cq, ck, mq, mk, dropout,
                                                 scale, causal, rounding);
    return {out, lse};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list) {
    TORCH_CHECK(false, backward_error("varlen_attention"));
    return {};
  }
};

bool needs_grad(const Tensor& q, const Tensor& k, const Tensor& v) {
  return c10::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

Tensor attention_autograd(c10::DispatchKeySet ks, const Tensor& q, const Tensor& k, const Tensor& v, Sv layout,
                          Sv rounding, std::optional<double> scale, bool is_causal, Sv align, bool gqa) {
  if (needs_grad(q, k, v))
    return AttentionForwardOnly::apply(ks, q, k, v, layout, rounding, scale, is_causal, align, gqa);
  at::AutoDispatchBelowADInplaceOrView guard;
  return attention_handle().redispatch(ks & c10::after_autograd_keyset, q, k, v, layout, rounding, scale, is_causal,
                                       align, gqa);
}

std::tuple<Tensor, Tensor> varlen_autograd(c10::DispatchKeySet ks, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& cq, const Tensor& ck, int64_t mq, int64_t mk, double dropout,
                                           std::optional<double> scale, bool causal, Sv rounding) {
  if (needs_grad(q, k, v)) {
    auto outs = VarlenForwardOnly::apply(ks, q, k, v, cq, ck, mq, mk, dropout, scale, causal, rounding);
    return {outs[0], outs[1]};
  }
  at::AutoDispatchBelowADInplaceOrView guard;
  return varlen_handle().redispatch(ks & c10::after_autograd_keyset, q, k, v, cq, ck, mq, mk, dropout, scale, causal,
                                    rounding);
}

}  // namespace

TORCH_LIBRARY_IMPL(regress, CPU, m) {
  m.impl("attention", TORCH_FN(attention_kernel<kCpu>));
  m.impl("varlen_attention", TORCH_FN(varlen_kernel<kCpu>));
}

TORCH_LIBRARY_IMPL(regress, CUDA, m) {
  m.impl("attention", TORCH_FN(attention_kernel<kGpu>));
  m.impl("varlen_attention", TORCH_FN(varlen_kernel<kGpu>));
}

TORCH_LIBRARY_IMPL(regress, AutogradCPU, m) {
  m.impl("attention", TORCH_FN(attention_autograd));
  m.impl("varlen_attention", TORCH_FN(varlen_autograd));
}

TORCH_LIBRARY_IMPL(regress, AutogradCUDA, m) {
  m.impl("attention", TORCH_FN(attention_autograd));
  m.impl("varlen_attention", TORCH_FN(varlen_autograd));
}

extern "C" {

/* regress/kernel/op_native.py hands over the function that answers where a backend's kernel library is. */
void regress_op_set_resolver(Resolver fn) { g_resolver.store(fn); }

/* What this library was built against, as JSON: op_native.py refuses a library built for another
 * torch or ABI (the build cache keys on both, so this only fires on a hand-copied file). */
const char* regress_op_info(void) {
  return "{\"abi\":" C10_STRINGIZE(RA_ABI_VERSION) ",\"torch\":\"" RA_TORCH_VERSION "\"}";
}

}  // extern "C"
