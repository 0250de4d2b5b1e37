#pragma once
// The reference compositions of I-BERT's float wrappers (softmax_integer_rows, layer_norm_integer_rows,
// gelu_integer_inplace) for test_int_ops (per xsimd family) and test_number_formats_dispatch (the
// dispatched entry points on every architecture the CPU has).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "stile/kernels/ibert_gelu.hpp"
#include "stile/kernels/ibert_layernorm.hpp"
#include "stile/kernels/ibert_softmax.hpp"

namespace int_ops_composed {

// The wrappers as they were first written: each row quantized with quantize_symmetric and run
// through the integer kernel (one row per call), then dequantized. The vector wrappers must give
// the same floats, bit for bit.

template <class Arch>
void softmax_integer_rows_composed(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale) {
  std::vector<float> row(cols);
  std::vector<std::int32_t> q(cols), out(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    float* xr = x + r * ld;
    for (std::size_t i = 0; i < cols; ++i) row[i] = xr[i] * scale;
    stile::ibert::SymmetricQuant qp = stile::ibert::symmetric_quant(stile::ibert::abs_max<Arch>(row.data(), cols), 16);
    if (qp.scale < 1e-6f) qp.scale = 1e-6f;
    stile::ibert::quantize_symmetric<Arch>(row.data(), cols, qp, q.data());
    // The scalar reference of every step.
    const stile::ibert::IntSoftmaxParams p = stile::ibert::int_softmax_params(qp.scale, 8);
    const std::int32_t m = *std::max_element(q.begin(), q.end());
    std::vector<std::int32_t> e(cols);
    for (std::size_t i = 0; i < cols; ++i) e[i] = stile::ibert::int_softmax_exp16(std::int64_t{q[i]} - m, p);
    stile::ibert::int_softmax_normalize(e.data(), cols, p, out.data());
    for (std::size_t i = 0; i < cols; ++i) xr[i] = static_cast<float>(out[i]) * (1.0f / 256.0f);
  }
}

template <class Arch>
void layer_norm_integer_rows_composed(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                                      const float* beta) {
  std::vector<std::int32_t> q(cols);
  std::vector<std::int64_t> out(cols);
  std::vector<float> so(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    float* xr = x + r * ld;
    const stile::ibert::SymmetricQuant qp = stile::ibert::symmetric_quant(stile::ibert::abs_max<Arch>(xr, cols), 16);
    stile::ibert::quantize_symmetric<Arch>(xr, cols, qp, q.data());
    stile::ibert::int_layer_norm_rows<Arch>(q.data(), 1, cols, cols, qp.scale, gamma, beta, 0, out.data(), cols,
                                            so.data());
    for (std::size_t i = 0; i < cols; ++i) xr[i] = static_cast<float>(out[i]) * so[i];
  }
}

template <class Arch>
void gelu_integer_inplace_composed(float* x, std::size_t n) {
  stile::ibert::SymmetricQuant qp = stile::ibert::symmetric_quant(stile::ibert::abs_max<Arch>(x, n), 16);
  if (qp.scale < 1e-6f) qp.scale = 1e-6f;
  std::vector<std::int32_t> q(n);
  stile::ibert::quantize_symmetric<Arch>(x, n, qp, q.data());
  const stile::ibert::IntGeluParams p = stile::ibert::int_gelu_params(qp.scale);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(stile::ibert::int_gelu_scalar(q[i], p)) * p.output_scale;
}

inline std::uint32_t float_bits(float v) { return std::bit_cast<std::uint32_t>(v); }

// The float wrappers' test inputs: rows x cols of N(0, sigma^2) (row stride ld), row 3 constant,
// one outlier in row 5 (LayerNorm's overflow shift), gamma in [0.5, 1.5), beta in [-0.3, 0.3).
struct WrapperInputs {
  std::vector<float> x, gamma, beta;
};
inline WrapperInputs wrapper_inputs(std::size_t rows, std::size_t cols, std::size_t ld, float sigma,
                                    std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> gu(0.5f, 1.5f), bu(-0.3f, 0.3f);
  WrapperInputs in{std::vector<float>(rows * ld), std::vector<float>(cols), std::vector<float>(cols)};
  for (auto& v : in.x) v = sigma * nd(rng);
  for (std::size_t i = 0; i < cols; ++i) in.x[3 * ld + i] = 0.25f;  // a constant row
  in.x[5 * ld + cols / 2] = 60.0f * sigma;                          // an outlier (LayerNorm's shift)
  for (std::size_t i = 0; i < cols; ++i) in.gamma[i] = gu(rng), in.beta[i] = bu(rng);
  return in;
}

}  // namespace int_ops_composed
