#pragma once
// Row-wise kernels over a matrix of `rows` rows of `cols` floats, row stride ld: LayerNorm and
// softmax, in place, on the best SIMD target of the CPU.
#include <cstddef>

#include "stile/core/error.hpp"
#include "stile/kernels/targets.hpp"

namespace stile {

namespace detail {
struct LayerNormDispatch {
  using Fn = void (*)(float*, std::size_t, std::size_t, std::size_t, const float*, const float*, float);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(LayerNormRows);
};
struct SoftmaxDispatch {
  using Fn = void (*)(float*, std::size_t, std::size_t, std::size_t, float);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(SoftmaxRows);
};
}  // namespace detail

// x = (x - mean) / sqrt(var + eps) * gamma + beta for each row (gamma, beta: [cols]).
inline void layer_norm_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld,
                            const float* gamma, const float* beta, float eps) {
  require(cols > 0 && ld >= cols, "layer_norm_rows: need 0 < cols <= ld");
  choose_target(detail::LayerNormDispatch::kTable)(x, rows, cols, ld, gamma, beta, eps);
}

// x = softmax(scale * x) along each row (scale > 0: attention's 1/sqrt(head_dim), when Q is not
// pre-scaled).
inline void softmax_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale = 1.0f) {
  require(cols > 0 && ld >= cols, "softmax_rows: need 0 < cols <= ld");
  require(scale > 0.0f, "softmax_rows: scale must be positive");
  choose_target(detail::SoftmaxDispatch::kTable)(x, rows, cols, ld, scale);
}

}  // namespace stile
