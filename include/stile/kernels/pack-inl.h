// Per-target panel decoders: turn KC x NR panels of a stored weight matrix into the packed
// layout the GEMM micro-kernel reads (see codec.hpp for the contract). This file holds the fp32
// decoder; the dictionary codecs add their own PanelDecoder specializations the same way.
#if defined(STILE_KERNELS_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_PACK_INL_H_
#undef STILE_KERNELS_PACK_INL_H_
#else
#define STILE_KERNELS_PACK_INL_H_
#endif

#include <cstddef>
#include <cstring>

#include <hwy/highway.h>

#include "stile/kernels/codec.hpp"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Primary template: a weight format with no decoder for this target is a compile error here.
template <class W>
struct PanelDecoder;

#if HWY_TARGET != HWY_SCALAR
// out[k * kNR + i] = rows[i * ld + k] for 4 rows, k < kc (4 x 4 blocks, then a scalar tail).
template <std::size_t kNR, class D4>
HWY_INLINE void Transpose4Rows(D4 d4, const float* HWY_RESTRICT r0, std::size_t ld, std::size_t kc,
                               float* HWY_RESTRICT o) {
  const float* HWY_RESTRICT r1 = r0 + ld;
  const float* HWY_RESTRICT r2 = r1 + ld;
  const float* HWY_RESTRICT r3 = r2 + ld;
  std::size_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    const auto a = hn::LoadU(d4, r0 + k);
    const auto b = hn::LoadU(d4, r1 + k);
    const auto c = hn::LoadU(d4, r2 + k);
    const auto e = hn::LoadU(d4, r3 + k);
    const auto ab_lo = hn::InterleaveLower(d4, a, b);  // a0 b0 a1 b1
    const auto ce_lo = hn::InterleaveLower(d4, c, e);  // c0 e0 c1 e1
    const auto ab_hi = hn::InterleaveUpper(d4, a, b);  // a2 b2 a3 b3
    const auto ce_hi = hn::InterleaveUpper(d4, c, e);  // c2 e2 c3 e3
    hn::Store(hn::ConcatLowerLower(d4, ce_lo, ab_lo), d4, o + (k + 0) * kNR);
    hn::Store(hn::ConcatUpperUpper(d4, ce_lo, ab_lo), d4, o + (k + 1) * kNR);
    hn::Store(hn::ConcatLowerLower(d4, ce_hi, ab_hi), d4, o + (k + 2) * kNR);
    hn::Store(hn::ConcatUpperUpper(d4, ce_hi, ab_hi), d4, o + (k + 3) * kNR);
  }
  for (; k < kc; ++k) {
    o[k * kNR + 0] = r0[k];
    o[k * kNR + 1] = r1[k];
    o[k * kNR + 2] = r2[k];
    o[k * kNR + 3] = r3[k];
  }
}

// The same for 8 rows with 8-lane vectors: interleave 32-bit pairs, then 64-bit pairs (within
// 128-bit blocks), then swap 128-bit halves.
template <std::size_t kNR, class D8>
HWY_INLINE void Transpose8Rows(D8 d8, const float* HWY_RESTRICT r0, std::size_t ld, std::size_t kc,
                               float* HWY_RESTRICT o) {
  const hn::Repartition<double, D8> dd;
  std::size_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    hn::Vec<D8> r[8];
    for (std::size_t i = 0; i < 8; ++i) r[i] = hn::LoadU(d8, r0 + i * ld + k);
    hn::Vec<D8> t[8];
    for (std::size_t i = 0; i < 8; i += 2) {
      t[i] = hn::InterleaveLower(d8, r[i], r[i + 1]);      // k0 k1 | k4 k5 of rows i, i+1
      t[i + 1] = hn::InterleaveUpper(d8, r[i], r[i + 1]);  // k2 k3 | k6 k7
    }
    auto pair_lo = [&](hn::Vec<D8> a, hn::Vec<D8> b) {
      return hn::BitCast(d8, hn::InterleaveLower(dd, hn::BitCast(dd, a), hn::BitCast(dd, b)));
    };
    auto pair_hi = [&](hn::Vec<D8> a, hn::Vec<D8> b) {
      return hn::BitCast(d8, hn::InterleaveUpper(dd, hn::BitCast(dd, a), hn::BitCast(dd, b)));
    };
    // u[q]: k = q | q + 4 for rows 0..3; u[4 + q]: the same for rows 4..7.
    const hn::Vec<D8> u[8] = {pair_lo(t[0], t[2]), pair_hi(t[0], t[2]), pair_lo(t[1], t[3]), pair_hi(t[1], t[3]),
                              pair_lo(t[4], t[6]), pair_hi(t[4], t[6]), pair_lo(t[5], t[7]), pair_hi(t[5], t[7])};
    for (std::size_t q = 0; q < 4; ++q) {
      hn::Store(hn::ConcatLowerLower(d8, u[4 + q], u[q]), d8, o + (k + q) * kNR);
      hn::Store(hn::ConcatUpperUpper(d8, u[4 + q], u[q]), d8, o + (k + q + 4) * kNR);
    }
  }
  for (; k < kc; ++k) {
    for (std::size_t i = 0; i < 8; ++i) o[k * kNR + i] = r0[i * ld + k];
  }
}
#endif

template <>
struct PanelDecoder<DenseF32> {
  // Transposes nr rows of W (each contiguous over k) into k-major rows of kNR floats. The bulk
  // goes through register transposes: 8 x 8 on targets with 256-bit vectors (8 loads, 24
  // shuffles, 8 stores move 64 floats), else 4 x 4 on 128-bit vectors, which every SIMD target
  // has. At M = 32 rows the transpose is about a fifth of the GEMM, so this is worth the shuffles.
  template <std::size_t kNR>
  static HWY_INLINE void Decode(const DenseF32& w, std::size_t n0, std::size_t nr, std::size_t k0, std::size_t kc,
                                float* HWY_RESTRICT out) {
    const std::size_t ld = w.ld;
    const float* HWY_RESTRICT src = w.data + n0 * ld + k0;
    std::size_t j = 0;
#if HWY_TARGET != HWY_SCALAR  // (the scalar target has no shuffles; it takes the loop below)
    const hn::CappedTag<float, 8> d8;
    if constexpr (hn::MaxLanes(d8) == 8 && kNR % 8 == 0) {
      for (; j + 8 <= nr; j += 8) Transpose8Rows<kNR>(d8, src + j * ld, ld, kc, out + j);
    }
    const hn::CappedTag<float, 4> d4;
    if constexpr (kNR % 4 == 0) {
      for (; j + 4 <= nr; j += 4) Transpose4Rows<kNR>(d4, src + j * ld, ld, kc, out + j);
    }
#endif
    for (; j < nr; ++j) {
      const float* HWY_RESTRICT r = src + j * ld;
      for (std::size_t k = 0; k < kc; ++k) out[k * kNR + j] = r[k];
    }
    if (nr < kNR) {  // zero the padding columns of an edge panel
      for (std::size_t k = 0; k < kc; ++k) {
        std::memset(out + k * kNR + nr, 0, (kNR - nr) * sizeof(float));
      }
    }
  }
};

template <>
struct PanelDecoder<PackedF32> {
  // Pre-packed: the driver reads the panel in place instead of decoding it.
  static constexpr bool kInPlace = true;
  template <std::size_t kNR>
  static HWY_INLINE const float* Panel(const PackedF32& w, std::size_t n0, std::size_t k0) {
    return w.data + ((n0 / kNR) * w.n_cols + k0) * kNR;
  }
};

template <>
struct PanelDecoder<DenseF32Transposed> {
  // Already k-major: each k is a contiguous run of nr floats, so a full panel is read in place
  // (row stride ld, no alignment promised) while all rows fit one MC block; Decode copies the
  // rest (edge panels, and KC x NC blocks reused across MC blocks).
  static constexpr bool kStridedInPlace = true;
  static HWY_INLINE const float* StridedPanel(const DenseF32Transposed& w, std::size_t n0, std::size_t k0) {
    return w.data + k0 * w.ld + n0;
  }
  static HWY_INLINE std::size_t Stride(const DenseF32Transposed& w) { return w.ld; }
  template <std::size_t kNR>
  static HWY_INLINE void Decode(const DenseF32Transposed& w, std::size_t n0, std::size_t nr, std::size_t k0,
                                std::size_t kc, float* HWY_RESTRICT out) {
    const float* HWY_RESTRICT src = w.data + k0 * w.ld + n0;
    for (std::size_t k = 0; k < kc; ++k) {
      std::memcpy(out + k * kNR, src + k * w.ld, nr * sizeof(float));
      if (nr < kNR) std::memset(out + k * kNR + nr, 0, (kNR - nr) * sizeof(float));
    }
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
