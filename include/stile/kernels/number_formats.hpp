#pragma once
// The element-wise and row-wise operators in the number formats other than fp32, fp32 in and out
// (each quantizes its input as its method prescribes, computes in its format, and dequantizes):
// the Arm Compute Library BERT recipe's int8 LayerNorm and erf-approximated GELU, and I-BERT's
// integer-only GELU, softmax and LayerNorm. Light: the xsimd templates behind them
// (kernels/int8_layernorm.hpp, kernels/gelu_erf_approx.hpp, kernels/ibert*.hpp) are instantiated
// once, in stile::compiled, for xsimd's default architecture under the flags it is built with
// (kernels/instantiate_kernels.hpp). Signatures and preconditions as rowwise.hpp's.
#include <cstddef>

namespace stile {

void layer_norm_int8_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                          const float* beta, float eps);
void layer_norm_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                             const float* beta, float eps);
void gelu_erf_approx_inplace(float* x, std::size_t n);
void gelu_integer_inplace(float* x, std::size_t n);
void softmax_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale);

}  // namespace stile
