#pragma once
// LayerNorm, GELU and softmax in the format an OpFormats names (ops/precision.hpp).
#include <cstddef>

#include "stile/kernels/activation.hpp"
#include "stile/kernels/number_formats.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/ops/precision.hpp"

namespace stile {

inline void layer_norm_rows(NormFormat f, float* x, std::size_t rows, std::size_t cols, std::size_t ld,
                            const float* gamma, const float* beta, float eps) {
  switch (f) {
    case NormFormat::kF32: layer_norm_rows(x, rows, cols, ld, gamma, beta, eps); return;
    case NormFormat::kInt8: layer_norm_int8_rows(x, rows, cols, ld, gamma, beta, eps); return;
    case NormFormat::kInteger: layer_norm_integer_rows(x, rows, cols, ld, gamma, beta, eps); return;
  }
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
