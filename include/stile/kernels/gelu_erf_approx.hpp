#pragma once
// GELU with erf from Abramowitz and Stegun 7.1.27, as the Arm Compute Library BERT work does on
// NEON (Kornelsen, M.Sc. thesis, McGill 2023, section 4): for t >= 0
//   erf(t) ~= 1 - 1 / (1 + a1 t + a2 t^2 + a3 t^3 + a4 t^4)^4,
//   a1 = 0.278393, a2 = 0.230389, a3 = 0.000972, a4 = 0.078108 (|error| <= 5e-4),
// and erf(-t) = -erf(t). Four FMAs, two squarings and one division per element; no table, no
// exp. GELU(x) = 0.5 x (1 + erf(x / sqrt 2)), so its error is at most 2.5e-4 |x|.
//
// Instantiation contract: the kernel is a template on the xsimd architecture type; the caller
// picks it, normally xsimd::default_arch (the best one its compile flags allow), and the
// translation unit that instantiates it must be compiled for that architecture. Tails shorter
// than a vector go through the scalar reference, which computes the same formula.
#include <cmath>
#include <cstddef>

#include <xsimd/xsimd.hpp>

#include "stile/core/xsimd_abi.hpp"

namespace stile {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

namespace gelu_erf_approx_constants {
inline constexpr float a1 = 0.278393f, a2 = 0.230389f, a3 = 0.000972f, a4 = 0.078108f;
inline constexpr float inv_sqrt2 = 0.70710678118654752f;
}  // namespace gelu_erf_approx_constants

// The scalar reference: erf(t) by 7.1.27 with the odd extension.
inline float erf_approx(float t) {
  namespace c = gelu_erf_approx_constants;
  const float a = std::fabs(t);
  const float p = 1.0f + a * (c::a1 + a * (c::a2 + a * (c::a3 + a * c::a4)));
  const float p2 = p * p;
  const float e = 1.0f - 1.0f / (p2 * p2);
  return std::copysign(e, t);
}

inline float gelu_erf_approx(float x) {
  return 0.5f * x * (1.0f + erf_approx(x * gelu_erf_approx_constants::inv_sqrt2));
}

// erf_approx on a batch (the same polynomial in Horner form).
template <class Arch>
xsimd::batch<float, Arch> erf_approx(xsimd::batch<float, Arch> t) {
  namespace c = gelu_erf_approx_constants;
  using B = xsimd::batch<float, Arch>;
  const B a = xsimd::abs(t);
  B p = xsimd::fma(a, B(c::a4), B(c::a3));
  p = xsimd::fma(a, p, B(c::a2));
  p = xsimd::fma(a, p, B(c::a1));
  p = xsimd::fma(a, p, B(1.0f));
  const B p2 = p * p;
  const B e = B(1.0f) - B(1.0f) / (p2 * p2);
  return xsimd::copysign(e, t);
}

// x[i] = 0.5 x[i] (1 + erf_approx(x[i] / sqrt 2)) for i < n, in place. Any n, any alignment.
template <class Arch>
void gelu_erf_approx_inplace(float* x, std::size_t n) {
  using B = xsimd::batch<float, Arch>;
  constexpr std::size_t L = B::size;
  const std::size_t full = n - n % L;
  for (std::size_t i = 0; i < full; i += L) {
    const B v = B::load_unaligned(x + i);
    const B half = v * B(0.5f);
    xsimd::fma(half, erf_approx<Arch>(v * B(gelu_erf_approx_constants::inv_sqrt2)), half).store_unaligned(x + i);
  }
  for (std::size_t i = full; i < n; ++i) x[i] = gelu_erf_approx(x[i]);
}

}  // inline namespace STILE_XSIMD_ABI
}  // namespace stile
#include "stile/core/xsimd_abi.hpp"
