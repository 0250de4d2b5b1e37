// Per-target panel decoder for fp16 weights (PackedF16, codec.hpp). The halves are already in
// the GEMM's panel layout, zero-padded, so a KC x NR panel is kc * NR contiguous halves: the
// decode is one straight run of half -> float conversions into the packed buffer, no shuffles.
// Highway's PromoteTo converts them: vcvtph2ps (F16C) on AVX2 and AVX-512, fcvtl on NEON, an
// integer emulation on SSE4/SSSE3 and the scalar targets. (The emulations in Highway 1.0.3 map
// inf and NaN halves to finite floats; pack_weights_f16 never stores either.)
#if defined(STILE_KERNELS_FP16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_FP16_INL_H_
#undef STILE_KERNELS_FP16_INL_H_
#else
#define STILE_KERNELS_FP16_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "stile/core/half.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/pack-inl.h"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <>
struct PanelDecoder<PackedF16> {
  // w.nr == kNR (gemm() checks it), so panel n0 / kNR starts at a multiple of kNR halves and its
  // k0 .. k0 + kc rows follow one another; the padding columns (j >= nr) are stored zeros.
  template <std::size_t kNR>
  static HWY_INLINE void Decode(const PackedF16& w, std::size_t n0, std::size_t /*nr*/, std::size_t k0, std::size_t kc,
                                float* HWY_RESTRICT out) {
    const std::uint16_t* HWY_RESTRICT src = w.data + ((n0 / kNR) * w.n_cols + k0) * kNR;
    const std::size_t count = kc * kNR;
    std::size_t i = 0;
    const hn::CappedTag<float, kNR> df;  // (a host's 8-wide tile on AVX-512: 256-bit vectors)
    constexpr std::size_t kLanes = hn::MaxLanes(df);
    if constexpr (kNR % kLanes == 0) {  // any power-of-two NR; `out` + i stays vector-aligned
      const hn::Rebind<hwy::float16_t, decltype(df)> df16;
      const auto* HWY_RESTRICT halves = reinterpret_cast<const hwy::float16_t*>(src);
      // Two vectors per step: the loads of one overlap the conversion of the other. The halves
      // stream from DRAM at short sequences (as PackedF32's floats do, gemm-inl.h's kStreamB):
      // prefetch 4 KiB ahead, into the next panel at the end of this one.
      constexpr std::size_t kPrefetchHalves = 4096 / sizeof(std::uint16_t);
      for (; i + 2 * kLanes <= count; i += 2 * kLanes) {
        hwy::Prefetch(halves + i + kPrefetchHalves);
        const auto a = hn::PromoteTo(df, hn::LoadU(df16, halves + i));
        const auto b = hn::PromoteTo(df, hn::LoadU(df16, halves + i + kLanes));
        hn::Store(a, df, out + i);
        hn::Store(b, df, out + i + kLanes);
      }
      for (; i + kLanes <= count; i += kLanes) hn::Store(hn::PromoteTo(df, hn::LoadU(df16, halves + i)), df, out + i);
    }
    for (; i < count; ++i) out[i] = half_to_float(src[i]);  // an NR that is no whole number of vectors
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
