#pragma once
// A linear layer whose number format is chosen at run time (ops/precision.hpp): fp32 or fp16
// weights through the fp32 GEMM's codecs, or int8 weights through the int8 GEMM (activations
// quantized per row on the fly). The layer operators call linear() for every weight type: a
// compile-time codec goes straight to gemm(), a LinearView picks its kernel by its format.
#include <algorithm>
#include <cstddef>
#include <string_view>
#include <utility>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/activation.hpp"
#include "stile/kernels/dict_int8_stack.hpp"
#include "stile/kernels/fp16_weights.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/int8_gemm.hpp"
#include "stile/kernels/number_formats.hpp"
#include "stile/ops/precision.hpp"
#include "stile/quant/int8_weights.hpp"

namespace stile {

// Non-owning: the weights of one linear layer in the format `format` (the other views empty).
struct LinearView {
  LinearFormat format = LinearFormat::kF32;
  PackedF32 f32;
  PackedF16 f16;
  Int8Matrix i8;

  std::size_t rows() const noexcept {
    return format == LinearFormat::kF32 ? f32.rows() : format == LinearFormat::kF16 ? f16.rows() : i8.rows();
  }
  std::size_t cols() const noexcept {
    return format == LinearFormat::kF32 ? f32.cols() : format == LinearFormat::kF16 ? f16.cols() : i8.cols();
  }
};

// Owns one linear layer's weights, converted once at load from fp32 [rows x cols] (row stride ld).
struct LinearWeights {
  LinearFormat format = LinearFormat::kF32;
  PackedWeights f32;
  PackedWeightsF16 f16;
  Int8Weights i8;

  // `name` names the tensor in errors (a weight that fp16 or int8 cannot hold).
  static LinearWeights make(const DenseF32& w, LinearFormat format, Int8Scheme scheme, std::string_view name) {
    LinearWeights out;
    out.format = format;
    switch (format) {
      case LinearFormat::kF32: out.f32 = pack_weights(w); break;
      case LinearFormat::kF16: out.f16 = pack_weights_f16(w, name); break;
      case LinearFormat::kInt8: out.i8 = quantize_int8(w.data, w.rows(), w.cols(), w.ld, scheme, name); break;
    }
    return out;
  }

  // int8 weights already quantized (a quantized checkpoint's, packed by pack_int8).
  static LinearWeights from(Int8Weights w) {
    LinearWeights out;
    out.format = LinearFormat::kInt8;
    out.i8 = std::move(w);
    return out;
  }
  // fp32 weights already packed (pack_weights, or a dictionary codec's decode_to_packed).
  static LinearWeights from(PackedWeights w) {
    LinearWeights out;
    out.format = LinearFormat::kF32;
    out.f32 = std::move(w);
    return out;
  }
  // fp16 weights already packed (pack_weights_f16).
  static LinearWeights from(PackedWeightsF16 w) {
    LinearWeights out;
    out.format = LinearFormat::kF16;
    out.f16 = std::move(w);
    return out;
  }

  LinearView view() const noexcept {
    LinearView v;
    v.format = format;
    v.f32 = f32.view;
    v.f16 = f16.view;
    v.i8 = i8.view;
    return v;
  }
  // Bytes of weight memory (scales and column sums included for int8).
  std::size_t bytes() const noexcept {
    return format == LinearFormat::kF32 ? f32.bytes() : format == LinearFormat::kF16 ? f16.bytes() : i8.bytes();
  }
};

// Non-owning: a stack of shards decoded to int8 (kernels/dict_int8_stack.hpp), as the layer
// assembled from shards reads it in the int8 linear format (ops/sharded_layer.hpp).
struct DictInt8View {
  const DictInt8Weights* weights = nullptr;
  std::size_t rows() const noexcept { return weights->int8.view.rows(); }
  std::size_t cols() const noexcept { return weights->int8.view.cols(); }
};

// C = epilogue(A * W^T) in W's format (the contract of gemm() in kernels/gemm.hpp). The
// erf-approximated GELU (epilogue::BiasGeluErfApprox) is fused into the int8 GEMM; other formats
// run a Bias GEMM and then the GELU over C.
template <WeightMatrix W, class Epi>
void linear(std::size_t M, const float* A, std::size_t lda, const W& w, float* C, std::size_t ldc, const Epi& epi,
            ThreadPool* pool) {
  if constexpr (Epi::activation == Activation::kGeluErfApprox) {
    static_assert(Epi::has_bias && !Epi::has_residual, "linear: the erf-approximated GELU follows a bias only");
    if constexpr (std::is_same_v<W, LinearView>) {
      if (w.format == LinearFormat::kInt8) return gemm_int8(M, A, lda, w.i8, C, ldc, epi, pool);
    }
    linear(M, A, lda, w, C, ldc, epilogue::Bias{.bias = epi.bias}, pool);
    for (std::size_t m = 0; m < M; ++m) gelu_erf_approx_inplace(C + m * ldc, w.rows());
  } else if constexpr (std::is_same_v<W, LinearView>) {
    switch (w.format) {
      case LinearFormat::kF32: gemm(M, A, lda, w.f32, C, ldc, epi, pool); return;
      case LinearFormat::kF16: gemm(M, A, lda, w.f16, C, ldc, epi, pool); return;
      case LinearFormat::kInt8: gemm_int8(M, A, lda, w.i8, C, ldc, epi, pool); return;
    }
    throw Error("linear: unknown weight format");
  } else {
    gemm(M, A, lda, w, C, ldc, epi, pool);
  }
}

// C = epilogue(A * W^T) for shards decoded to int8: the int8 GEMM, then one pass over the rows
// that adds the outliers' exact fp32 products and applies the activation. The outliers must enter
// before a GELU, and bias and residual are linear, so the GEMM applies those and only the
// activation waits for the outliers (the int8 GEMM's epilogue has no hook between the two).
template <class Epi>
requires is_epilogue_v<Epi>
void linear(std::size_t M, const float* A, std::size_t lda, const DictInt8View& w, float* C, std::size_t ldc,
            const Epi& epi, ThreadPool* pool) {
  static_assert(Epi::activation == Activation::kNone || !Epi::has_residual,
                "linear: an activation and a residual in one epilogue (as gemm())");
  require(w.weights != nullptr, "linear: int8 shard weights not decoded");
  const DictInt8Weights& d = *w.weights;
  using Linear = Epilogue<Epi::has_bias, Activation::kNone, Epi::has_residual>;
  gemm_int8(M, A, lda, d.int8.view, C, ldc,
            Linear{.bias = epi.bias, .residual = epi.residual, .residual_ld = epi.residual_ld}, pool);
  if (M == 0 || (d.outlier_v.empty() && Epi::activation == Activation::kNone)) return;
  const std::size_t N = d.int8.view.rows();
  auto rows = [&](std::size_t m0, std::size_t m1) {
    add_dict_outliers(d, A, lda, C, ldc, m0, m1);
    for (std::size_t m = m0; m < m1; ++m) {
      if constexpr (Epi::activation == Activation::kGelu) gelu_inplace(C + m * ldc, N);
      if constexpr (Epi::activation == Activation::kGeluErfApprox) gelu_erf_approx_inplace(C + m * ldc, N);
    }
  };
  ThreadPool& threads = pool != nullptr ? *pool : default_thread_pool();
  constexpr std::size_t kMinRowsPerTask = 8;
  const std::size_t tasks = std::min(threads.num_threads(), std::max<std::size_t>(1, M / kMinRowsPerTask));
  if (tasks <= 1) return rows(0, M);
  threads.run(tasks, [&](std::size_t t, std::size_t) { rows(t * M / tasks, (t + 1) * M / tasks); });
}

}  // namespace stile
