// Per-target row-wise kernels of the encoder: LayerNorm and softmax over rows of a matrix.
// Each row is read twice from L1 (a reduction, then the transform): rows are at most a few
// thousand floats, so a row stays in L1 between the passes.
#if defined(STILE_KERNELS_ROWWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_ROWWISE_INL_H_
#undef STILE_KERNELS_ROWWISE_INL_H_
#else
#define STILE_KERNELS_ROWWISE_INL_H_
#endif

#include <cstddef>
#include <cmath>
#include <limits>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The last, partial vector of a row: `count` < Lanes(d) floats, the other lanes set to `fill`
// (so reductions ignore them), without reading past the row.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* HWY_RESTRICT p, std::size_t count, float fill) {
  HWY_ALIGN float buf[hn::MaxLanes(d)];
  for (std::size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = i < count ? p[i] : fill;
  return hn::Load(d, buf);
}
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, float* HWY_RESTRICT p, std::size_t count) {
  HWY_ALIGN float buf[hn::MaxLanes(d)];
  hn::Store(v, d, buf);
  for (std::size_t i = 0; i < count; ++i) p[i] = buf[i];
}

// x = (x - mean) / sqrt(var + eps) * gamma + beta per row, in place (BERT's LayerNorm; the
// variance is the biased one, computed in a second pass around the mean for accuracy).
HWY_INLINE void LayerNormRows(float* HWY_RESTRICT x, std::size_t rows, std::size_t cols, std::size_t ld,
                              const float* HWY_RESTRICT gamma, const float* HWY_RESTRICT beta, float eps) {
  const hn::ScalableTag<float> d;
  const std::size_t L = hn::Lanes(d);
  const std::size_t full = cols / L * L, tail = cols - full;
  for (std::size_t r = 0; r < rows; ++r) {
    float* HWY_RESTRICT row = x + r * ld;
    auto sum = hn::Zero(d);
    for (std::size_t i = 0; i < full; i += L) sum = hn::Add(sum, hn::LoadU(d, row + i));
    if (tail) sum = hn::Add(sum, LoadTail(d, row + full, tail, 0.0f));
    const float mean = hn::GetLane(hn::SumOfLanes(d, sum)) / static_cast<float>(cols);
    const auto vmean = hn::Set(d, mean);
    auto sq = hn::Zero(d);
    for (std::size_t i = 0; i < full; i += L) {
      const auto c = hn::Sub(hn::LoadU(d, row + i), vmean);
      sq = hn::MulAdd(c, c, sq);
    }
    if (tail) {
      const auto c = hn::Sub(LoadTail(d, row + full, tail, mean), vmean);
      sq = hn::MulAdd(c, c, sq);
    }
    const float var = hn::GetLane(hn::SumOfLanes(d, sq)) / static_cast<float>(cols);
    const auto rstd = hn::Set(d, 1.0f / std::sqrt(var + eps));
    for (std::size_t i = 0; i < full; i += L) {
      const auto c = hn::Mul(hn::Sub(hn::LoadU(d, row + i), vmean), rstd);
      hn::StoreU(hn::MulAdd(c, hn::LoadU(d, gamma + i), hn::LoadU(d, beta + i)), d, row + i);
    }
    if (tail) {
      const auto c = hn::Mul(hn::Sub(LoadTail(d, row + full, tail, 0.0f), vmean), rstd);
      const auto y = hn::MulAdd(c, LoadTail(d, gamma + full, tail, 0.0f), LoadTail(d, beta + full, tail, 0.0f));
      StoreTail(d, y, row + full, tail);
    }
  }
}

// exp(x) for x <= 0, as softmax needs after subtracting the row max: 2^(x log2 e) split into
// 2^n (built in the exponent bits) times 2^f, |f| <= 1/2, by a degree-7 Taylor polynomial
// (truncation error 5e-9). Relative error about |x| * 1.2e-7, the conditioning of exp of a
// float input; inputs below -87 return 2^-126 instead of 0 (harmless next to the max term 1).
// It takes two thirds of the time of the general hwy::Exp, which handles both signs, overflow
// and NaN (a 128 x 128 softmax: 9.0 instead of 13.8 us on AVX2).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V t = hn::Mul(hn::Max(x, hn::Set(d, -87.0f)), hn::Set(d, 1.44269504088896341f));
  const V n = hn::Round(t);
  const V f = hn::Sub(t, n);
  // c_k = ln(2)^k / k!
  V p = hn::Set(d, 1.5252733804059840e-05f);
  p = hn::MulAdd(p, f, hn::Set(d, 1.5403530393381609e-04f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.3333558146428443e-03f));
  p = hn::MulAdd(p, f, hn::Set(d, 9.6181291076284772e-03f));
  p = hn::MulAdd(p, f, hn::Set(d, 5.5504108664821580e-02f));
  p = hn::MulAdd(p, f, hn::Set(d, 2.4022650695910071e-01f));
  p = hn::MulAdd(p, f, hn::Set(d, 6.9314718055994531e-01f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::Mul(p, hn::BitCast(d, bits));
}

// row = exp(scale (row - max)) over row[0, cols) in place (scale > 0, so the max of the row is
// the max of scale * row); returns the sum. Softmax's numerators: SoftmaxRows and the fused
// attention (kernels/attention-inl.h) divide by the sum afterwards.
HWY_INLINE float ExpShiftedRow(float* HWY_RESTRICT row, std::size_t cols, float scale) {
  const hn::ScalableTag<float> d;
  const auto vscale = hn::Set(d, scale);
  const std::size_t L = hn::Lanes(d);
  const std::size_t full = cols / L * L, tail = cols - full;
  const float lowest = -std::numeric_limits<float>::infinity();
  auto vmax = hn::Set(d, lowest);
  for (std::size_t i = 0; i < full; i += L) vmax = hn::Max(vmax, hn::LoadU(d, row + i));
  if (tail) vmax = hn::Max(vmax, LoadTail(d, row + full, tail, lowest));
  const auto m = hn::Set(d, hn::GetLane(hn::MaxOfLanes(d, vmax)));
  auto sum = hn::Zero(d);
  for (std::size_t i = 0; i < full; i += L) {
    const auto e = ExpNonPositive(d, hn::Mul(hn::Sub(hn::LoadU(d, row + i), m), vscale));
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, row + i);
  }
  if (tail) {
    // Padding lanes hold the row max, so exp() stays finite; they are masked out of the sum.
    auto e_tail = ExpNonPositive(d, hn::Mul(hn::Sub(LoadTail(d, row + full, tail, hn::GetLane(m)), m), vscale));
    StoreTail(d, e_tail, row + full, tail);
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    hn::Store(e_tail, d, buf);
    for (std::size_t i = tail; i < L; ++i) buf[i] = 0.0f;
    sum = hn::Add(sum, hn::Load(d, buf));
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// x = softmax(scale * x) = exp(scale (x - max)) / sum(exp(scale (x - max))) per row, in place.
HWY_INLINE void SoftmaxRows(float* HWY_RESTRICT x, std::size_t rows, std::size_t cols, std::size_t ld, float scale) {
  const hn::ScalableTag<float> d;
  const std::size_t L = hn::Lanes(d);
  const std::size_t full = cols / L * L, tail = cols - full;
  for (std::size_t r = 0; r < rows; ++r) {
    float* HWY_RESTRICT row = x + r * ld;
    const auto inv = hn::Set(d, 1.0f / ExpShiftedRow(row, cols, scale));
    for (std::size_t i = 0; i < full; i += L) hn::StoreU(hn::Mul(hn::LoadU(d, row + i), inv), d, row + i);
    if (tail) StoreTail(d, hn::Mul(LoadTail(d, row + full, tail, 0.0f), inv), row + full, tail);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
