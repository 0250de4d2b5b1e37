#pragma once
// LayerNorm, GELU and softmax in the format an OpFormats names (ops/precision.hpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

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

// GELU over n contiguous values (kExact and kErfApprox are normally fused into the GEMM's epilogue
// instead). The integer one quantizes with one range for the whole tensor, so with a pool it takes
// max |x| first (over blocks, in parallel; the max does not depend on the order) and then runs the
// blocks with it: the same floats at every thread count.
inline void gelu_inplace(GeluFormat f, float* x, std::size_t n, ThreadPool* pool = nullptr) {
  switch (f) {
    case GeluFormat::kExact: gelu_inplace(x, n); return;
    case GeluFormat::kErfApprox: gelu_erf_approx_inplace(x, n); return;
    case GeluFormat::kInteger: break;
  }
  constexpr std::size_t kMinPerTask = 16384;  // elements: below that the threads' start costs more
  const std::size_t tasks =
      pool == nullptr ? 1 : std::min(pool->num_threads(), std::max<std::size_t>(1, n / kMinPerTask));
  if (tasks <= 1) return gelu_integer_inplace(x, n);
  // Blocks of whole cache lines (16 floats).
  const auto begin = [&](std::size_t t) { return (t * (n / 16) / tasks) * 16; };
  const auto end = [&](std::size_t t) { return t + 1 == tasks ? n : begin(t + 1); };
  std::vector<float> block_max(tasks, 0.0f);
  pool->run(tasks, [&](std::size_t t, std::size_t) {
    // Sixteen running maxima: one would wait on its own latency every element.
    float acc[16] = {}, m = 0.0f;
    std::size_t i = begin(t);
    for (; i + 16 <= end(t); i += 16) {
      for (std::size_t j = 0; j < 16; ++j) acc[j] = std::max(acc[j], std::fabs(x[i + j]));
    }
    for (; i < end(t); ++i) m = std::max(m, std::fabs(x[i]));
    block_max[t] = std::max(m, *std::max_element(acc, acc + 16));
  });
  const float absmax = *std::max_element(block_max.begin(), block_max.end());
  pool->run(tasks, [&](std::size_t t, std::size_t) { gelu_integer_inplace(x + begin(t), end(t) - begin(t), absmax); });
}

inline void softmax_rows(SoftmaxFormat f, float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale) {
  if (f == SoftmaxFormat::kInteger) {
    softmax_integer_rows(x, rows, cols, ld, scale);
  } else {
    softmax_rows(x, rows, cols, ld, scale);
  }
}

}  // namespace stile
