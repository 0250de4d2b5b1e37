#pragma once
// Dyadic requantization as I-BERT does it (Kim et al., ICML 2021; reference implementation
// kssteven418/I-BERT, fairseq/quantization/utils/quant_utils.py, batch_frexp and fixedpoint_mul):
// a positive real scale is written as m / 2^e with an integer multiplier m (31 bits: 2^30 <= m <=
// 2^31) and a shift e, so that rescaling an integer needs one integer multiply and one rounding
// shift, no float arithmetic per element.
//
// Exactness: the reference forms z * m in float64 and rounds z * m / 2^e half to even
// (torch.round); that product is exact only while |z| * m < 2^53. Here it is formed in 128-bit
// integers, so the result is the exact round-half-to-even of z * m / 2^e for every int32 or int64
// z: identical to the reference wherever the reference is exact.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>

#include "stile/core/error.hpp"
#include "stile/core/xsimd_abi.hpp"

namespace stile::quant {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

// scale ~= multiplier / 2^shift (multiplier in [2^30, 2^31], shift any integer).
// 128-bit integers (GCC and Clang on 64-bit targets); __extension__ keeps -Wpedantic quiet.
__extension__ typedef __int128 int128;

struct Dyadic {
  std::int64_t multiplier = 0;
  int shift = 0;
};

// Throws stile::Error naming `name` unless scale is finite and > 0.
inline void check_scale(double scale, const char* name) {
  if (!(scale > 0.0) || !std::isfinite(scale)) detail::xsimd_kernel_scale_error(name, scale);
}

// 2^e as a double, exactly (-1022 <= e <= 1023: checked), without a call to ldexp.
inline double pow2(int e) {
  if (e < -1022 || e > 1023) detail::xsimd_kernel_range_error("pow2 exponent", e);
  return std::bit_cast<double>(static_cast<std::uint64_t>(e + 1023) << 52);
}

// batch_frexp(max_bit = 31): frexp gives scale = f * 2^k with f in [0.5, 1); the multiplier is
// f * 2^31 rounded half up (the reference's Decimal ROUND_HALF_UP; f * 2^31 is exact in double,
// and adding 0.5 is exact at that magnitude, so floor(f * 2^31 + 0.5) is that rounding), the shift
// 31 - k. The multiplier reaches 2^31 when f rounds up to 1, as in the reference.
inline Dyadic dyadic_from_scale(double scale, const char* name) {
  check_scale(scale, name);
  int k = 0;
  const double f = std::frexp(scale, &k);
  Dyadic d;
  d.multiplier = static_cast<std::int64_t>(std::floor(f * 0x1p31 + 0.5));
  d.shift = 31 - k;
  return d;
}

// fixedpoint_mul's rescale factor from the scale an integer is in to the scale it should be in:
// new_scale = double(in_scale) / double(out_scale), both float32 as the reference's tensors.
inline Dyadic dyadic_rescale(float in_scale, float out_scale, const char* name) {
  check_scale(in_scale, name);
  check_scale(out_scale, name);
  return dyadic_from_scale(static_cast<double>(in_scale) / static_cast<double>(out_scale), name);
}

// round(v / 2^shift), ties to even (torch.round), exactly; shift may be negative (a left shift)
// and up to 127. @pre the exact result fits in int64 when shift < 0 (not checked).
inline std::int64_t round_half_even_shift(int128 v, int shift) {
  if (shift <= 0) return static_cast<std::int64_t>(v * (static_cast<int128>(1) << -shift));
  if (shift >= 127) return 0;  // |v| < 2^126 here, so |v| / 2^shift < 1/2
  const int128 one = 1;
  const int128 q = v >> shift;  // floor
  const int128 r = v - (q << shift);
  const int128 half = one << (shift - 1);
  if (r > half || (r == half && (q & 1) != 0)) return static_cast<std::int64_t>(q + 1);
  return static_cast<std::int64_t>(q);
}

// The exact round-half-to-even of z * d.multiplier / 2^d.shift.
inline std::int64_t dyadic_mul(std::int64_t z, Dyadic d) {
  return round_half_even_shift(static_cast<int128>(z) * d.multiplier, d.shift);
}

inline std::int64_t clamp_i64(std::int64_t v, std::int64_t lo, std::int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

// fixedpoint_mul with bit_num 8, symmetric: round(z * scale) clamped to [-128, 127].
inline void requantize_to_int8(const std::int32_t* z, std::size_t n, Dyadic d, std::int8_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int8_t>(clamp_i64(dyadic_mul(z[i], d), -128, 127));
}

// fixedpoint_mul with bit_num 32: round(z * scale) with no clamp in the reference; here saturated
// to the int32 range, which the reference's float output would leave (documented difference only
// for results that do not fit 32 bits).
inline void requantize_to_int32(const std::int32_t* z, std::size_t n, Dyadic d, std::int32_t* out) {
  constexpr std::int64_t lo = std::numeric_limits<std::int32_t>::min(), hi = std::numeric_limits<std::int32_t>::max();
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(clamp_i64(dyadic_mul(z[i], d), lo, hi));
}

}  // inline namespace STILE_XSIMD_ABI
}  // namespace stile::quant
