#pragma once
// Row-wise kernels over a matrix of `rows` rows of `cols` floats, row stride ld: LayerNorm and
// softmax, in place, on the best SIMD target of the CPU. Light: the per-target code
// (kernels/rowwise-inl.h) is compiled once, in stile::compiled (kernels/instantiate_kernels.hpp).
#include <cstddef>

namespace stile {

// x = (x - mean) / sqrt(var + eps) * gamma + beta for each row (gamma, beta: [cols]).
// @pre 0 < cols <= ld (checked).
void layer_norm_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                     const float* beta, float eps);

// x = softmax(scale * x) along each row (scale > 0: attention's 1/sqrt(head_dim), when Q is not
// pre-scaled). @pre 0 < cols <= ld, scale > 0 (checked).
void softmax_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale = 1.0f);

}  // namespace stile
