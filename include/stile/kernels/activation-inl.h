// Per-target activation functions (Highway). Included once per target by foreach_target through
// the kernels that use them; the guard below toggles per target instead of once per file.
#if defined(STILE_KERNELS_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_ACTIVATION_INL_H_
#undef STILE_KERNELS_ACTIVATION_INL_H_
#else
#define STILE_KERNELS_ACTIVATION_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// erf(x) in float: x * P(x^2) / Q(x^2) on [-4, 4] (outside, erf is +-1 to float precision).
// The rational approximation used by Eigen and XLA for float; its error is a few ulp, far below
// what BERT parity needs (1e-4 on hidden states), and it costs one division and 12 FMAs.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Erf(D d, V x) {
  x = hn::Min(hn::Max(x, hn::Set(d, -4.0f)), hn::Set(d, 4.0f));
  const V x2 = hn::Mul(x, x);
  V p = hn::Set(d, -2.72614225801306e-10f);
  p = hn::MulAdd(p, x2, hn::Set(d, 2.77068142495902e-08f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.10102402082508e-06f));
  p = hn::MulAdd(p, x2, hn::Set(d, -5.69250639462346e-05f));
  p = hn::MulAdd(p, x2, hn::Set(d, -7.34990630326855e-04f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.95459980854025e-03f));
  p = hn::MulAdd(p, x2, hn::Set(d, -1.60960333262415e-02f));
  p = hn::Mul(p, x);
  V q = hn::Set(d, -1.45660718464996e-05f);
  q = hn::MulAdd(q, x2, hn::Set(d, -2.13374055278905e-04f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.68282697438203e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -7.37332916720468e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.42647390514189e-02f));
  return hn::Div(p, q);
}

// Exact GELU as in BERT (hidden_act "gelu"): 0.5 x (1 + erf(x / sqrt(2))).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Gelu(D d, V x) {
  const V half_x = hn::Mul(x, hn::Set(d, 0.5f));
  const V e = Erf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752f)));
  return hn::MulAdd(half_x, e, half_x);
}

// GELU with erf(z) ~= 1 - 1 / (1 + a1 z + a2 z^2 + a3 z^3 + a4 z^4)^4 for z >= 0, odd in z
// (Abramowitz-Stegun 7.1.27, |error| <= 5e-4): the same formula as the xsimd kernel
// kernels/gelu_erf_approx.hpp, here for the int8 GEMM's fused epilogue.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V GeluErfApprox(D d, V x) {
  const V z = hn::Abs(hn::Mul(x, hn::Set(d, 0.70710678118654752f)));
  V p = hn::MulAdd(hn::Set(d, 0.078108f), z, hn::Set(d, 0.000972f));
  p = hn::MulAdd(p, z, hn::Set(d, 0.230389f));
  p = hn::MulAdd(p, z, hn::Set(d, 0.278393f));
  p = hn::MulAdd(p, z, hn::Set(d, 1.0f));
  const V p2 = hn::Mul(p, p);
  const V erf_abs = hn::Sub(hn::Set(d, 1.0f), hn::Div(hn::Set(d, 1.0f), hn::Mul(p2, p2)));
  const V erf = hn::CopySign(erf_abs, x);
  const V half_x = hn::Mul(x, hn::Set(d, 0.5f));
  return hn::MulAdd(half_x, erf, half_x);
}

// Applies Gelu to n floats in place (any n; the tail goes through a padded copy).
HWY_INLINE void GeluInPlace(float* HWY_RESTRICT x, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(Gelu(d, hn::LoadU(d, x + i)), d, x + i);
  if (i < n) {
    HWY_ALIGN float tail[hn::MaxLanes(d)] = {};
    for (std::size_t j = 0; i + j < n; ++j) tail[j] = x[i + j];
    hn::Store(Gelu(d, hn::Load(d, tail)), d, tail);
    for (std::size_t j = 0; i + j < n; ++j) x[i + j] = tail[j];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
