#pragma once
// What I-BERT's integer kernels share (kernels/ibert_gelu.hpp, ibert_softmax.hpp,
// ibert_layernorm.hpp): the float32 arithmetic by which the reference derives its integer
// constants from a scaling factor, and the symmetric activation quantizer (QuantAct) that the
// float wrappers apply in front of them.
//
// Reference: kssteven418/I-BERT, fairseq/quantization/utils/quant_modules.py and quant_utils.py.
// The reference keeps every integer in a float32 CUDA tensor. Its per-call constants (b_int,
// c_int, x0_int, shift_int, factor, ...) come from float32 operations on the scaling factor, and
// an off-by-one ulp there changes a floor, so they are reproduced operation by operation:
//   - tensor / python_scalar: PyTorch's CUDA kernel multiplies by the float reciprocal of the
//     scalar (div_true_kernel_cuda, "a * reciprocal(b)"): t * (1.0f / float(scalar)).
//   - python_scalar / tensor: torch.Tensor.__rdiv__ is tensor.reciprocal() * scalar:
//     (1.0f / t) * float(scalar).
//   - tensor * python_scalar, tensor ** 2, tensor / tensor: the float32 operation itself.
// Each helper is one such operation, written so that no multiply feeds an add (nothing for the
// compiler to contract into an FMA).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <xsimd/xsimd.hpp>

#include "stile/core/error.hpp"
#include "stile/quant/dyadic.hpp"
#include "stile/core/xsimd_abi.hpp"

namespace stile::ibert {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

// t / scalar as PyTorch computes it on CUDA.
inline float torch_div_scalar(float t, double scalar) {
  const float inv = 1.0f / static_cast<float>(scalar);
  return t * inv;
}
// scalar / t (torch.Tensor.__rdiv__).
inline float torch_rdiv(double scalar, float t) {
  const float r = 1.0f / t;
  return r * static_cast<float>(scalar);
}
inline float torch_mul_scalar(float t, double scalar) { return t * static_cast<float>(scalar); }

// floor of a float32 value that holds an integer constant; throws if it is not finite or does
// not fit comfortably in int64 (a scaling factor far outside what the algorithm is meant for).
inline std::int64_t floor_to_int64(float v, const char* what) {
  const float f = std::floor(v);
  if (!std::isfinite(f) || std::fabs(f) >= 0x1p62f) detail::xsimd_kernel_range_error(what, v);
  return static_cast<std::int64_t>(f);
}

inline std::int64_t floor_shift(std::int64_t v, int s) { return v >> s; }  // floor(v / 2^s)

// round(num / den), ties to even, exactly (den > 0): torch.round of an exact quotient.
inline std::int64_t round_half_even_div(std::int64_t num, std::int64_t den) {
  std::int64_t q = num / den, r = num % den;
  if (r < 0) {
    r += den;
    --q;
  }
  if (2 * r > den || (2 * r == den && (q & 1) != 0)) ++q;
  return q;
}

// QuantAct's symmetric quantization (quant_utils.py symmetric_linear_quantization_params and
// SymmetricQuantFunction, per tensor): scale = max(|min|, |max|), clamped to >= 1e-8, divided by
// n = 2^(bits-1) - 1; q = round(x * (1 / scale)) (torch.round: ties to even) clamped to
// [-n, n - 1] (the reference's own range, one short of n at the top).
struct SymmetricQuant {
  float scale;
  std::int32_t lo, hi;
};
inline SymmetricQuant symmetric_quant(float absmax, int bits) {
  const double n = std::ldexp(1.0, bits - 1) - 1.0;
  const float clamped = absmax > 1e-8f ? absmax : 1e-8f;
  return {torch_div_scalar(clamped, n), static_cast<std::int32_t>(-n), static_cast<std::int32_t>(n - 1)};
}

// The largest lane of v, by a tree over the lanes (log2 L dependent steps, not L: per-row
// reductions of short rows are latency-bound).
template <class T, class Arch>
T max_lane(xsimd::batch<T, Arch> v) {
  constexpr std::size_t L = xsimd::batch<T, Arch>::size;
  alignas(64) T buf[L];
  v.store_aligned(buf);
  for (std::size_t w = L / 2; w > 0; w /= 2) {
    for (std::size_t j = 0; j < w; ++j) buf[j] = buf[j + w] > buf[j] ? buf[j + w] : buf[j];
  }
  return buf[0];
}

// max |x[i]| over n floats (n >= 0); NaN inputs are the caller's problem.
template <class Arch>
float abs_max(const float* x, std::size_t n) {
  using B = xsimd::batch<float, Arch>;
  constexpr std::size_t L = B::size;
  // Loops run to a precomputed end: GCC 12 misreads `i + L <= n` loops followed by a scalar
  // tail as possibly wrapping (-Waggressive-loop-optimizations).
  const std::size_t full = n - n % L;
  float m = 0.0f;
  if (full > 0) {
    B acc(0.0f);
    for (std::size_t i = 0; i < full; i += L) acc = xsimd::max(acc, xsimd::abs(B::load_unaligned(x + i)));
    m = max_lane(acc);
  }
  for (std::size_t i = full; i < n; ++i) m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
  return m;
}

// q[i] = clamp(round(x[i] * (1 / scale)), lo, hi): SymmetricQuantFunction's forward. The
// vector path rounds with the FPU's default mode, round to nearest even, as torch.round does.
template <class Arch>
void quantize_symmetric(const float* x, std::size_t n, SymmetricQuant p, std::int32_t* q) {
  using BF = xsimd::batch<float, Arch>;
  using BI = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t L = BF::size;
  const float inv = 1.0f / p.scale;
  const std::size_t full = n - n % L;
  for (std::size_t i = 0; i < full; i += L) {
    const BI v = xsimd::nearbyint_as_int(BF::load_unaligned(x + i) * BF(inv));
    xsimd::min(xsimd::max(v, BI(p.lo)), BI(p.hi)).store_unaligned(q + i);
  }
  for (std::size_t i = full; i < n; ++i) {
    const float r = std::nearbyint(x[i] * inv);
    q[i] = r < static_cast<float>(p.lo) ? p.lo : r > static_cast<float>(p.hi) ? p.hi : static_cast<std::int32_t>(r);
  }
}

}  // inline namespace STILE_XSIMD_ABI
}  // namespace stile::ibert
