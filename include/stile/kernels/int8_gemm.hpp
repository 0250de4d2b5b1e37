#pragma once
// The int8 GEMM: u8 activations x s8 weights -> int32, with a fused fp32 epilogue.
//   C[M x N] = act(sa[m] * sw[n] * sum_k (a[m][k] - za[m]) (w[n][k] - zw') + bias[n]) + residual
// A is fp32 and quantized on the fly inside the call (dynamic quantization, as ONNX Runtime's
// MatMulIntegerToFloat): asymmetric u8, per row (default) or per tensor, scale = (max(x, 0) -
// min(x, 0)) / qmax, zero point round(-min(x, 0) / scale), qmax = int8_packing().activation_max:
// 255, or 127 on x86 without a dot product, where 7-bit activations let the kernel add two
// vpmaddubsw results before widening (kernels/int8_gemm-inl.h). W is quantized once, at load
// (quant/int8_weights.hpp), packed for the micro-kernel of the target the GEMM runs on. The
// integer product is exact; the zero points are corrected after it with the precomputed sums:
//   sum (a - za)(w - zw') = sum a w - zw' rowsum(a) - za colsum(w) + K za zw'.
//
// This header is light: it declares the per-target drivers and validates the call; their
// definitions live in kernels/int8_gemm_impl.hpp, and the library's configurations (every
// epilogue) are compiled once in stile::compiled (part 6 of kernels/instantiate_kernels.hpp).
//
//   auto w = stile::quantize_int8(W, N, K, K, stile::Int8Scheme::kSymmetricPerChannel, "ffn1");
//   stile::gemm_int8(M, A, K, w.view, C, N, stile::epilogue::BiasGelu{.bias = b});
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/epilogue.hpp"
#include "stile/kernels/gemm.hpp"  // detail::check_gemm_call
#include "stile/quant/int8_weights.hpp"

namespace stile {

// How activations are quantized: one scale and zero point per row of A (per token), or one for
// the whole of A.
enum class ActivationQuant : std::uint8_t { kPerRow, kPerTensor };

// Activations quantized to u8: rows of padded_k bytes (K rounded up to 4, zero-padded), and per
// row the scale, the zero point and the sum of the row's bytes (the zero-point correction's).
// Per tensor: every row carries the same scale and zero point.
struct QuantizedActivations {
  AlignedBuffer<std::uint8_t> data;  // [M x ld]
  std::size_t ld = 0;                // = int8_padded_k(K)
  std::vector<float> scale;          // [M]
  std::vector<std::int32_t> zero_point;
  std::vector<std::int32_t> row_sum;
};

namespace detail {

// The runtime arguments of one int8 GEMM call (per target: kernels/int8_gemm-inl.h).
template <class Epi>
struct Int8GemmArgs {
  std::size_t M = 0;
  const float* A = nullptr;          // fp32 activations [M x K], row stride lda (gemm_int8)
  const std::uint8_t* Aq = nullptr;  // or already u8 (gemm_u8s8_i32): no quantization, no correction
  std::size_t lda = 0;
  const Int8Matrix* W = nullptr;
  float* C = nullptr;          // fp32 output (gemm_int8)
  std::int32_t* Ci = nullptr;  // int32 output (gemm_u8s8_i32)
  std::size_t ldc = 0;
  Epi epi{};
  ThreadPool* pool = nullptr;
  ActivationQuant aq = ActivationQuant::kPerRow;
};

// Defined in kernels/int8_gemm_impl.hpp, on the best target of the CPU.
template <class Epi>
void run_int8_gemm(const Int8GemmArgs<Epi>& args);
void run_u8s8_i32(const Int8GemmArgs<epilogue::None>& args);
Int8Packing int8_packing_on_target();
void quantize_activations_on_target(std::size_t M, const float* A, std::size_t lda, std::size_t K, ActivationQuant aq,
                                    QuantizedActivations& out, ThreadPool* pool);

// Set to forbid the dot-product instructions (VNNI, AVX-VNNI, sdot) even where the CPU has them,
// so tests and benchmarks reach the fallback micro-kernels on this machine. Changes
// int8_packing(): weights must be quantized after setting it.
inline std::atomic<bool>& int8_dot_disabled() {
  static std::atomic<bool> disabled{false};
  return disabled;
}

inline bool int8_ranges_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace detail

// The packing (panel width, weight range) of the int8 kernel the CPU runs now: what weights must
// be quantized with (see quant/int8_weights.hpp).
inline Int8Packing int8_packing() { return detail::int8_packing_on_target(); }
// qmax of the weights on this target: 127 with a u8 x s8 dot product (VNNI, AVX-VNNI), NEON or
// scalar; 63 on AVX2 / SSE4 without VNNI (vpmaddubsw saturation, see quant/int8_weights.hpp).
inline std::int32_t int8_weight_max() { return int8_packing().weight_max; }

// Quantizes and packs W [N x K] (row stride ld) for the target the GEMM runs on now.
inline Int8Weights quantize_int8(const float* w, std::size_t N, std::size_t K, std::size_t ld,
                                 Int8Scheme scheme = Int8Scheme::kSymmetricPerChannel,
                                 std::string_view tensor_name = "weights") {
  return quantize_int8(w, N, K, ld, scheme, tensor_name, int8_packing());
}

// The dynamic quantization gemm_int8 applies to A [M x K] (row stride lda), on its own: for
// integer pipelines and for tests (codes 0..int8_packing().activation_max). A row (or tensor) of
// zeros gets scale 1 and zero point 0.
inline void quantize_activations(std::size_t M, const float* A, std::size_t lda, std::size_t K, ActivationQuant aq,
                                 QuantizedActivations& out, ThreadPool* pool = nullptr) {
  require(K > 0 && lda >= K, "quantize_activations: need 0 < K <= lda");
  require(A != nullptr || M == 0, "quantize_activations: A is null");
  detail::quantize_activations_on_target(M, A, lda, K, aq, out, pool != nullptr ? pool : &default_thread_pool());
}

namespace detail {
inline void check_int8_weights(const Int8Matrix& W) {
  validate(W, "int8 GEMM weights");
  const Int8Packing p = int8_packing();
  require(W.nr == p.nr, "gemm_int8: weights packed for panel width " + std::to_string(W.nr) +
                            ", but the kernel of this target uses " + std::to_string(p.nr) +
                            " (quantize them with quantize_int8 after choosing the target)");
  require(W.weight_max <= p.weight_max, "gemm_int8: weights quantized to +-" + std::to_string(W.weight_max) +
                                            ", but this target's kernel takes at most +-" +
                                            std::to_string(p.weight_max) + " (vpmaddubsw would saturate)");
}
}  // namespace detail

// C = epilogue(dequant(quant(A) * W^T)). A: M x K fp32 (row stride lda >= K); W: N x K int8
// (W.rows() = N, W.cols() = K), quantized for this target; C: M x N (row stride ldc >= N). The
// epilogue and overlap rules are gemm()'s (kernels/gemm.hpp): the residual may be C itself (same
// stride, no activation); any other overlap with C is an error. NaN or inf in A gives an
// unspecified C. Threads: `pool` (the default pool if null).
template <class Epi = epilogue::None>
void gemm_int8(std::size_t M, const float* A, std::size_t lda, const Int8Matrix& W, float* C, std::size_t ldc,
               const Epi& epi = {}, ThreadPool* pool = nullptr, ActivationQuant aq = ActivationQuant::kPerRow) {
  static_assert(is_epilogue_v<Epi>, "the epilogue must be a stile::Epilogue<...>");
  const std::size_t N = W.rows(), K = W.cols();
  if (M == 0 || N == 0) return;
  detail::check_gemm_call("gemm_int8", M, A, lda, K, N, C, ldc, epi);
  detail::check_int8_weights(W);
  detail::Int8GemmArgs<Epi> args;
  args.M = M;
  args.A = A;
  args.lda = lda;
  args.W = &W;
  args.C = C;
  args.ldc = ldc;
  args.epi = epi;
  args.pool = pool != nullptr ? pool : &default_thread_pool();
  args.aq = aq;
  detail::run_int8_gemm<Epi>(args);
}

// The exact integer product, no zero-point correction and no scaling:
//   C[m][n] = sum_k A[m][k] * stored(W)[n][k]    (A: u8 [M x K], row stride lda >= K)
// for tests and integer-only pipelines. C: int32 [M x N], row stride ldc >= N, not overlapping A.
inline void gemm_u8s8_i32(std::size_t M, const std::uint8_t* A, std::size_t lda, const Int8Matrix& W, std::int32_t* C,
                          std::size_t ldc, ThreadPool* pool = nullptr) {
  const std::size_t N = W.rows(), K = W.cols();
  if (M == 0 || N == 0) return;
  require(K > 0, "gemm_u8s8_i32: K (W.cols()) must be positive");
  require(A != nullptr && C != nullptr, "gemm_u8s8_i32: A and C must not be null");
  require(lda >= K, "gemm_u8s8_i32: lda (" + std::to_string(lda) + ") < K (" + std::to_string(K) + ")");
  require(ldc >= N, "gemm_u8s8_i32: ldc (" + std::to_string(ldc) + ") < N (" + std::to_string(N) + ")");
  require(!detail::int8_ranges_overlap(A, (M - 1) * lda + K, C, ((M - 1) * ldc + N) * sizeof(std::int32_t)),
          "gemm_u8s8_i32: A overlaps C");
  detail::check_int8_weights(W);
  detail::Int8GemmArgs<epilogue::None> args;
  args.M = M;
  args.Aq = A;
  args.lda = lda;
  args.W = &W;
  args.Ci = C;
  args.ldc = ldc;
  args.pool = pool != nullptr ? pool : &default_thread_pool();
  detail::run_u8s8_i32(args);
}

}  // namespace stile

#include "stile/kernels/int8_gemm_instances.hpp"  // the configurations compiled once, in stile::compiled
