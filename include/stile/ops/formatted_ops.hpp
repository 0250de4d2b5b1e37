#pragma once
// LayerNorm, GELU and softmax in the format an OpFormats names (ops/precision.hpp).
#include <algorithm>
#include <cstddef>

#include "stile/core/thread_pool.hpp"
#include "stile/kernels/activation.hpp"
#include "stile/kernels/number_formats.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/ops/precision.hpp"

namespace stile {

// The int8 and integer LayerNorms quantize and normalize each row on its own, so their rows are
// split over `pool` (when given) with results independent of the split; the fp32 one is cheap
// enough on one thread.
inline void layer_norm_rows(NormFormat f, float* x, std::size_t rows, std::size_t cols, std::size_t ld,
                            const float* gamma, const float* beta, float eps, ThreadPool* pool = nullptr) {
  if (f == NormFormat::kF32) return layer_norm_rows(x, rows, cols, ld, gamma, beta, eps);
  const auto run = [&](std::size_t r0, std::size_t r1) {
    if (f == NormFormat::kInt8) {
      layer_norm_int8_rows(x + r0 * ld, r1 - r0, cols, ld, gamma, beta, eps);
    } else {
      layer_norm_integer_rows(x + r0 * ld, r1 - r0, cols, ld, gamma, beta, eps);
    }
  };
  constexpr std::size_t kMinRowsPerTask = 16;
  const std::size_t tasks =
      pool == nullptr ? 1 : std::min(pool->num_threads(), std::max<std::size_t>(1, rows / kMinRowsPerTask));
  if (tasks <= 1) return run(0, rows);
  pool->run(tasks, [&](std::size_t t, std::size_t) { run(t * rows / tasks, (t + 1) * rows / tasks); });
}

// GELU over n contiguous values (kExact is normally fused into the GEMM's epilogue instead).
inline void gelu_inplace(GeluFormat f, float* x, std::size_t n) {
  switch (f) {
    case GeluFormat::kExact: gelu_inplace(x, n); return;
    case GeluFormat::kErfApprox: gelu_erf_approx_inplace(x, n); return;
    case GeluFormat::kInteger: gelu_integer_inplace(x, n); return;
  }
}

inline void softmax_rows(SoftmaxFormat f, float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale) {
  if (f == SoftmaxFormat::kInteger) {
    softmax_integer_rows(x, rows, cols, ld, scale);
  } else {
    softmax_rows(x, rows, cols, ld, scale);
  }
}

}  // namespace stile
