#pragma once
// IEEE 754 binary16 ("half") <-> fp32, scalar and exact: the reference the SIMD converters are
// tested against, and the quantizer of fp16 weights (kernels/fp16_weights.hpp). Plain bit
// arithmetic, so the result is the same on every CPU and compiler (no _Float16, no F16C).
//   float_to_half: round to nearest, ties to even; subnormal halves kept; a magnitude that rounds
//     past 65504 becomes infinity; NaN stays NaN (quiet, sign and the top payload bits kept).
//   half_to_float: exact for every pattern (every half is a float).
#include <bit>
#include <cstdint>

namespace stile {

inline constexpr float kHalfMax = 65504.0f;  // the largest finite half

constexpr float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float (mant < 2^10).
  const float mag = float(mant) * (1.0f / 16777216.0f);
  return sign != 0 ? -mag : mag;
}

constexpr std::uint16_t float_to_half(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) {  // inf, NaN
    if (ax == 0x7F800000u) return sign | 0x7C00u;
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  }
  // 65520 = 0x477FF000 is the tie between 65504 (odd mantissa) and 2^16: it and above round to inf.
  if (ax >= 0x477FF000u) return sign | 0x7C00u;
  if (ax >= 0x38800000u) {  // a normal half (>= 2^-14): rebias, round the 13 dropped bits
    std::uint32_t h = (ax >> 13) - (112u << 10);
    const std::uint32_t rest = ax & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;  // a carry moves into the exponent
    return static_cast<std::uint16_t>(sign | h);
  }
  // A subnormal half: m * 2^-24. Below 2^-25 (and at it: the tie goes to even 0) it is zero.
  const std::uint32_t e = ax >> 23;
  if (e < 102) return sign;
  const std::uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u, shift = 126 - e;  // shift in 14..24
  std::uint32_t m = mant >> shift;
  const std::uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u) != 0)) ++m;  // m = 0x400 is the smallest normal
  return static_cast<std::uint16_t>(sign | m);
}

}  // namespace stile
