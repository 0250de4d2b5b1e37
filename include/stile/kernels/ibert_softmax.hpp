#pragma once
// I-BERT's integer-only softmax (i-exp), exactly as the reference computes it:
// kssteven418/I-BERT, fairseq/quantization/utils/quant_modules.py, class IntSoftmax (forward,
// int_exp, int_polynomial). Per row of integers x with scaling factor s:
//   x      = x - max(row)                                        (<= 0)
//   x0_int = floor(-0.6931 / s)                                  (-ln 2 on the grid, negative)
//   x      = max(x, 30 x0_int)                                   (n = 30: exp(-30 ln 2) ~ 0)
//   q      = floor(x / x0_int), r = x - x0_int q                 (x = -q ln2 + r, r in (-ln2, 0])
//   z      = r (r + b_int) + c_int,  b_int = floor((b/a) / s), c_int = floor((c/a) / s^2)
//            with a, b, c = 0.35815147, 0.96963238, 1: exp(r) ~ a (r^2 + (b/a) r + c/a)
//   e      = max(floor(z 2^(30 - q)), 0)                         scale a s^2 / 2^30
//   e16    = QuantAct(16)(e)                                     (requantized to 16 bits)
//   factor = floor(2^32 / sum(e16))
//   out    = floor(e16 factor / 2^(32 - output_bit))             scale 1 / 2^output_bit
//
// The 16-bit requantization: the reference hands the integers e themselves (not e times their
// scale) to QuantAct(16), whose range then is the range of e. Its largest value in any row is
// c_int 2^30 (the row max: q = r = 0), so QuantAct's scale is act = c_int 2^30 / 32767 (float32,
// QuantAct's formula), and fixedpoint_mul's result is round(e / act) clamped to 16 bits. The
// reference forms that as round(round(e / (a s^2 / 2^30)) * m / 2^k) with float32 and float64
// intermediates; here it is one exact dyadic multiply of the integer e by
// batch_frexp(1 / double(act)), rounded half to even (quant/dyadic.hpp).
//
// Exactness: constants in float32 as the reference derives them (kernels/ibert_common.hpp);
// element-wise values, the row sum and e16 * factor are exact integers (the reference's float32
// tensors round them above 2^24; scripts/make_ibert_goldens.py reports where that would differ).
//
// Vector path (int_softmax_e16_row): the element-wise steps run in double lanes, exactly. With
// the constants int_softmax_params accepts (c_int < 2^48, so s > 2^-22.5, |x0_int| < 2^22.2,
// b_int < 2^24.6), every integer on the way is below 2^53 and so exact in a double: x - max
// (|.| < 2^32), q (<= 30), r, r (r + b_int) (< 2^47) and z (< 2^48). The quotient q = floor(x /
// x0_int) is taken from x * (1 / x0_int): its rounding error (< 30 2^-52) is far below the gap
// 1 / |x0_int| between a non-integer quotient and the next integer, so only an exact integer
// quotient can come out one low, which r == x0_int detects. The requantization round(z m /
// 2^(k - 30 + q)) is the one inexact step: z (m 2^-(k-30)) is one double rounding (z and the
// power-of-two-scaled multiplier are exact) of a value below 2^16, so its error is below 2^-37,
// and 2^-q scales it exactly; round half to even of the double is therefore the exact result
// unless the value lies within 2^-37 of a half-integer. Lanes within 2^-30 of one (exact ties
// included) are recomputed by the scalar reference (int128), so the result is exact always.
// The normalization e16 * factor (< 2^47) and its floor shift are exact in doubles too.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "stile/core/error.hpp"
#include "stile/kernels/ibert_common.hpp"
#include "stile/quant/dyadic.hpp"
#include "stile/core/xsimd_abi.hpp"

namespace stile::ibert {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

struct IntSoftmaxParams {
  std::int64_t x0_int = 0;  // floor(-0.6931 / s), negative
  std::int64_t b_int = 0;   // floor((0.96963238 / 0.35815147) / s)
  std::int64_t c_int = 0;   // floor((1 / 0.35815147) / s^2)
  quant::Dyadic to16;       // 1 / act, act = QuantAct(16)'s scale for the range [0, c_int 2^30]
  double k = 0;             // m / 2^(shift - 30) of to16, exact: e16 = round(z k 2^-q)
  int output_bit = 8;
};

// The per-call constants for input scaling factor s and output_bit (1..16).
// @pre s finite and > 0, 1 <= output_bit <= 16 (checked).
inline IntSoftmaxParams int_softmax_params(float s, int output_bit) {
  quant::check_scale(s, "int_softmax input");
  kernel_require(output_bit >= 1 && output_bit <= 16, "int_softmax: output_bit must be in 1..16");
  constexpr double x0 = -0.6931, a = 0.35815147, b = 0.96963238 / a, c = 1.0 / a;
  IntSoftmaxParams p;
  p.output_bit = output_bit;
  p.x0_int = floor_to_int64(torch_rdiv(x0, s), "int_softmax x0_int");
  p.b_int = floor_to_int64(torch_rdiv(b, s), "int_softmax b_int");
  const float s2 = s * s;
  p.c_int = floor_to_int64(torch_rdiv(c, s2), "int_softmax c_int");
  kernel_require(p.x0_int < 0 && p.c_int > 0 && p.c_int < (std::int64_t{1} << 48),
          "int_softmax: input scaling factor out of range (needs 1 <= c / s^2 < 2^48)");
  // QuantAct(16) on [0, c_int 2^30]: scale = max(|min|, |max|) (>= 1e-8) / 32767.
  const float range = static_cast<float>(p.c_int) * 0x1p30f;
  const float act = torch_div_scalar(range, 32767.0);
  p.to16 = quant::dyadic_from_scale(1.0 / static_cast<double>(act), "int_softmax QuantAct(16)");
  // A 32-bit integer scaled by a power of two, far from the double range's ends: exact.
  p.k = static_cast<double>(p.to16.multiplier) * quant::pow2(30 - p.to16.shift);
  return p;
}

// e16 of one element with x = x_int - row max (<= 0): the scalar reference of the steps up to
// the 16-bit requantization, exact (z <= c_int < 2^48, z * multiplier < 2^80 in int128).
inline std::int32_t int_softmax_exp16(std::int64_t x, const IntSoftmaxParams& p) {
  const std::int64_t lo = 30 * p.x0_int;
  x = x > lo ? x : lo;
  const std::int64_t q = x / p.x0_int;  // both <= 0 / < 0: C++ truncation is the floor here
  const std::int64_t r = x - p.x0_int * q;
  std::int64_t z = r * (r + p.b_int) + p.c_int;
  if (z < 0) z = 0;  // clamp(min = 0) of e = z 2^(30 - q); z > 0 for every r in (x0_int, 0]
  // e = z 2^(30 - q); round(e * m / 2^k) = round(z * m / 2^(k - 30 + q)).
  const std::int64_t v = quant::round_half_even_shift(static_cast<quant::int128>(z) * p.to16.multiplier,
                                                      p.to16.shift - 30 + static_cast<int>(q));
  return static_cast<std::int32_t>(quant::clamp_i64(v, -32768, 32767));
}

// The normalization of one row of e16 values (n of them, scratch e) into out: the scalar reference.
inline void int_softmax_normalize(const std::int32_t* e, std::size_t n, const IntSoftmaxParams& p, std::int32_t* out) {
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += e[i];
  // factor = floor(2^32 / sum) as torch computes it: reciprocal(float(sum)) * 2^32 in float32.
  const std::int64_t factor = floor_to_int64(torch_rdiv(0x1p32, static_cast<float>(sum)), "int_softmax factor");
  const int sh = 32 - p.output_bit;
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(floor_shift(e[i] * factor, sh));
}

// The nearest integer (ties to even) to each lane of v, 0 <= v < 2^51, big = 2^52: adding 2^52
// rounds away the fraction in the FPU's default mode. (xsimd's floor and trunc of doubles go through
// 64-bit integer conversions, which SSE2 and AVX2 do one lane at a time.)
template <class Arch>
xsimd::batch<double, Arch> round_nonneg(xsimd::batch<double, Arch> v, xsimd::batch<double, Arch> big) {
  return (v + big) - big;
}

// The scalar reference of a whole row (x: integers held in doubles or floats; e: doubles or int32):
// the vector paths' fallback.
template <class T, class E>
std::int64_t int_softmax_e16_row_scalar(const T* x, std::size_t n, T xmax, const IntSoftmaxParams& p, E* e) {
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t v = int_softmax_exp16(static_cast<std::int64_t>(x[i] - xmax), p);
    e[i] = static_cast<E>(v);
    sum += v;
  }
  return sum;
}

// e[i] = e16 of x[i] - xmax for i < n (x: integers held in doubles, xmax their row max), stored as
// doubles (exact integers in [0, 32767]); returns their sum (exact: < 2^53 for any n that fits in
// memory). e must not overlap x (a row near a tie is redone from x). The double-lane path and its exactness: see the header comment. (The
// callers widen their int32 or float rows into doubles with plain loops, which the compiler
// vectorizes: xsimd 8.1's converting loads go through a stack buffer, a store-forwarding stall.)
template <class Arch>
std::int64_t int_softmax_e16_row(const double* x, std::size_t n, double xmax, const IntSoftmaxParams& p, double* e) {
  using BD = xsimd::batch<double, Arch>;
  using BL = xsimd::batch<std::int64_t, Arch>;
  constexpr std::size_t L = BD::size;
  const double x0 = static_cast<double>(p.x0_int);
  const BD vx0(x0), vinv(1.0 / x0), vlo(30.0 * x0), vb(static_cast<double>(p.b_int)), vc(static_cast<double>(p.c_int));
  const BD vmax(xmax);
  const BD vm(p.k);
  const BD one(1.0), zero(0.0), top(32767.0), big(0x1p52), bias(0x1p52 + 1023.0), danger(0.5 - 0x1p-30);
  BD acc(0.0);
  xsimd::batch_bool<double, Arch> near_tie(false);
  alignas(64) double buf[L];
  const std::size_t full = n - n % L;
  for (std::size_t i = 0; i < full; i += L) {
    const BD d = xsimd::max(BD::load_unaligned(x + i) - vmax, vlo);  // x - max, clamped at 30 x0_int
    // q = floor(d / x0_int) from the nearest integer to d (1 / x0_int): that is the floor or
    // one above it (the product is within 2^-47 of the quotient), and r says which.
    BD q = round_nonneg(d * vinv, big);
    BD r = d - vx0 * q;
    const auto high = r > zero;
    q = xsimd::select(high, q - one, q);
    r = xsimd::select(high, r + vx0, r);
    const BD z = xsimd::max(r * (r + vb) + vc, zero);
    // 2^-q: the biased exponent 1023 - q sits in the low bits of 2^52 + 1023 - q; shift it into
    // the exponent field (the 2^52's own exponent bits fall off the top).
    const BD p2 = xsimd::bitwise_cast<BD>(xsimd::bitwise_cast<BL>(bias - q) << 52);
    const BD v = (z * vm) * p2;
    const BD y = round_nonneg(v, big);
    // Within 2^-30 of a half-integer, the double may have rounded across it: such a row is redone
    // exactly (rare: the values would have to fall within 2^-30 of one of 2^16 points).
    near_tie = near_tie | (xsimd::abs(v - y) > danger);
    const BD ym = xsimd::min(y, top);
    ym.store_unaligned(e + i);
    acc += ym;
  }
  if (xsimd::any(near_tie)) return int_softmax_e16_row_scalar(x, n, xmax, p, e);
  // The lanes' sums by hand: xsimd::hadd on avx512 doubles trips GCC 12's -Wuninitialized.
  acc.store_aligned(buf);
  std::int64_t sum = 0;
  for (std::size_t j = 0; j < L; ++j) sum += static_cast<std::int64_t>(buf[j]);
  for (std::size_t i = full; i < n; ++i) {
    const std::int32_t v = int_softmax_exp16(static_cast<std::int64_t>(x[i] - xmax), p);
    e[i] = v;
    sum += v;
  }
  return sum;
}

// int_softmax_e16_row for rows of 16-bit integers held in floats (|x - xmax| <= 2^17), all in
// float lanes (twice as many as doubles), when |x0_int| < 2^22 and b_int < 2^24 (the float
// wrapper's s >= 1e-6 gives |x0_int| <= 693100, b_int < 2^22); e16 as int32. Other rows go to the
// scalar reference. Same results as the scalar reference, bit for bit:
// - x - max, x0_int and b_int are exact in a float; q comes from the nearest integer to
//   x (1 / x0_int) (relative error below 2^-22, so the floor or one above it, and r says which)
//   and r = x - x0_int q is exact: |x0_int q| <= |x - max| + |x0_int| < 2^24; so is r + b_int.
// - z = r (r + b_int) + c_int and v = z K 2^-q (K = p.k, e16 = round(v)) are not
//   exact. With A = c_int + |x0_int| (|x0_int| + b_int) >= c_int + |r (r + b_int)|, the float z
//   (rounded c_int, product and sum, or one fused multiply-add) is within 2^-23 A (1 + 2^-24) of
//   z <= A, and z K in floats (K rounded, one product) within 2^-22 A K (1 + 2^-22) of the exact
//   value; 2^-q scales exactly. So the float v is within E 2^-q, E = 2^-22 A K (1 + 2^-20), of
//   the exact one (E ~ 0.015 for every s: A K ~ 1.85 x 32767), and its nearest integer y is the
//   exact round(v) unless |v - y| + E 2^-q >= 1/2 (compared in floats: rounding is monotonic,
//   so no lane that must be flagged escapes). A batch with such a lane (~2 E 2^-q of the lanes
//   at each q: in the model's attention rows a few batches in a hundred, more in nearly flat
//   rows) is redone in double lanes (int_softmax_e16_row, exact).
template <class Arch>
std::int64_t int_softmax_e16_row_float(const float* x, std::size_t n, float xmax, const IntSoftmaxParams& p,
                                       std::int32_t* e) {
  using BF = xsimd::batch<float, Arch>;
  using BI = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t L = BF::size;
  constexpr std::int64_t x0_limit = std::int64_t{1} << 22, b_limit = std::int64_t{1} << 24;
  if (p.x0_int <= -x0_limit || p.b_int >= b_limit) return int_softmax_e16_row_scalar(x, n, xmax, p, e);
  const float x0 = static_cast<float>(p.x0_int);
  const double k = p.k;
  const double a = static_cast<double>(p.c_int) +
                   static_cast<double>(-p.x0_int) * static_cast<double>(p.b_int - p.x0_int);
  // E rounded up to a float (the factor 1 + 2^-20 covers the double and float roundings).
  const float bound = static_cast<float>(a * k * 0x1p-22 * (1.0 + 0x1p-20) * (1.0 + 0x1p-20));
  const BF vx0(x0), vinv(1.0f / x0), vmax(xmax), zero(0.0f), one(1.0f), half(0.5f), big(0x1.8p23f);
  // 30 x0_int: exact below 2^24; above, every x - max (>= -2^17) is above it however it rounds.
  const BF vlo(30.0f * x0), vb(static_cast<float>(p.b_int)), vc(static_cast<float>(p.c_int));
  const BF vk(static_cast<float>(k)), vbound(bound), top(32767.0f);
  alignas(64) double xd[L], ed[L];
  // e16 of the L integers src[0, L) into dst[0, L).
  auto batch = [&](const float* src, std::int32_t* dst) {
    const BF d = xsimd::max(BF::load_unaligned(src) - vmax, vlo);  // x - max, clamped at 30 x0_int
    BF q = (d * vinv + big) - big;  // nearest integer (|.| <= 31)
    BF r = d - vx0 * q;
    const auto high = r > zero;
    q = xsimd::select(high, q - one, q);
    r = xsimd::select(high, r + vx0, r);
    const BF z = xsimd::max(r * (r + vb) + vc, zero);
    // 2^-q: the biased exponent 127 - q shifted into a float's exponent field.
    const BF p2 = xsimd::bitwise_cast<BF>((BI(127) - xsimd::to_int(q)) << 23);
    const BF v = (z * vk) * p2;
    const BF y = (v + big) - big;  // nearest integer, ties to even (0 <= v < 2^22)
    if (xsimd::any(xsimd::abs(v - y) + vbound * p2 >= half)) {  // rare: see above
      // These L lanes again in double lanes (exact but for their own far rarer near-ties).
      for (std::size_t j = 0; j < L; ++j) xd[j] = src[j];
      int_softmax_e16_row<Arch>(xd, L, static_cast<double>(xmax), p, ed);
      for (std::size_t j = 0; j < L; ++j) dst[j] = static_cast<std::int32_t>(ed[j]);
      return BI::load_unaligned(dst);
    }
    const BI e16 = xsimd::to_int(xsimd::min(y, top));
    e16.store_unaligned(dst);
    return e16;
  };
  // The sum in int32 lanes, carried into int64 every 2^16 - 1 batches (each adds <= 32767 a lane).
  std::int64_t sum = 0;
  BI acc(0);
  std::size_t batches = 0;
  auto carry = [&] {
    alignas(64) std::int32_t lanes[L];
    acc.store_aligned(lanes);
    for (std::size_t j = 0; j < L; ++j) sum += lanes[j];
    acc = BI(0);
    batches = 0;
  };
  const std::size_t full = n - n % L;
  for (std::size_t i = 0; i < full; i += L) {
    acc += batch(x + i, e + i);
    if (++batches == 65535) carry();
  }
  carry();
  if (full < n) {  // the tail in a batch of its own, padded with its last element
    alignas(64) float tail[L];
    alignas(64) std::int32_t et[L];
    for (std::size_t j = 0; j < L; ++j) tail[j] = x[full + j < n ? full + j : n - 1];
    batch(tail, et);
    for (std::size_t j = 0; j < n - full; ++j) sum += (e[full + j] = et[j]);
  }
  return sum;
}

// e[i] = floor(e[i] factor / 2^(32 - output_bit)) in place, factor = floor(2^32 / sum) as
// int_softmax_normalize computes it. Exact in double lanes: e factor < 2^15 2^32, the
// power-of-two scaling and the floor are exact. @pre sum > 0.
template <class Arch>
void int_softmax_normalize_row(double* e, std::size_t n, std::int64_t sum, const IntSoftmaxParams& p) {
  using BD = xsimd::batch<double, Arch>;
  constexpr std::size_t L = BD::size;
  const std::int64_t factor = floor_to_int64(torch_rdiv(0x1p32, static_cast<float>(sum)), "int_softmax factor");
  const double f = static_cast<double>(factor), down = std::ldexp(1.0, p.output_bit - 32);
  const BD vf(f), vdown(down), big(0x1p52), one(1.0);
  const std::size_t full = n - n % L;
  for (std::size_t i = 0; i < full; i += L) {
    const BD w = (BD::load_unaligned(e + i) * vf) * vdown;  // exact, >= 0
    const BD t = round_nonneg(w, big);
    xsimd::select(t > w, t - one, t).store_unaligned(e + i);  // floor(w)
  }
  for (std::size_t i = full; i < n; ++i) e[i] = std::floor((e[i] * f) * down);
}

// out[i] = floor(e[i] factor / 2^(32 - output_bit)) / 2^output_bit (the output dequantized),
// factor = floor(2^32 / sum) as int_softmax_normalize computes it, in int32 lanes: with factor =
// 2^8 fh + fl (fl < 2^8), floor(e factor / 2^sh) = floor((e fh + floor(e fl / 2^8)) / 2^(sh - 8)),
// and for e < 2^15, factor < 2^24 every term is below 2^31 (a row's sum is at least its max's
// e16, 32767, so factor < 2^17.1; a larger one takes the scalar reference). @pre sum > 0,
// 0 <= e[i] <= 32767.
template <class Arch>
void int_softmax_normalize_dequant(const std::int32_t* e, std::size_t n, std::int64_t sum, const IntSoftmaxParams& p,
                                   float* out) {
  using BI = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t L = BI::size;
  const std::int64_t factor = floor_to_int64(torch_rdiv(0x1p32, static_cast<float>(sum)), "int_softmax factor");
  const int sh = 32 - p.output_bit;
  const float down = 1.0f / static_cast<float>(1 << p.output_bit);
  const std::size_t full = factor < (std::int64_t{1} << 24) ? n - n % L : 0;
  const BI fh(static_cast<std::int32_t>(factor >> 8)), fl(static_cast<std::int32_t>(factor & 255));
  for (std::size_t i = 0; i < full; i += L) {
    const BI v = BI::load_unaligned(e + i);
    const BI w = (v * fh + ((v * fl) >> 8)) >> (sh - 8);
    (xsimd::to_float(w) * down).store_unaligned(out + i);
  }
  for (std::size_t i = full; i < n; ++i) out[i] = static_cast<float>(floor_shift(e[i] * factor, sh)) * down;
}

// y = IntSoftmax(x) per row: x is rows x cols int32 with row stride ld_x, y rows x cols with
// row stride ld_y (may be the same array as x: each row is read before it is written). Returns the
// output scaling factor 1 / 2^output_bit (I-BERT's attention uses output_bit = 8).
// @pre 0 < cols <= ld_x, ld_y; s finite and > 0; 1 <= output_bit <= 16 (checked).
template <class Arch>
float int_softmax_rows(const std::int32_t* x, std::size_t rows, std::size_t cols, std::size_t ld_x, float s,
                       int output_bit, std::int32_t* y, std::size_t ld_y) {
  kernel_require(cols > 0 && cols <= ld_x && cols <= ld_y, "int_softmax_rows: needs 0 < cols <= ld");
  const IntSoftmaxParams p = int_softmax_params(s, output_bit);
  using B = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t L = B::size;
  std::vector<double> xd(cols), e(cols);  // scratch rows, once per call
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t* xr = x + r * ld_x;
    std::int32_t m = std::numeric_limits<std::int32_t>::min();
    const std::size_t full = cols - cols % L;
    if (full > 0) {
      B acc = B::load_unaligned(xr);
      for (std::size_t i = L; i < full; i += L) acc = xsimd::max(acc, B::load_unaligned(xr + i));
      m = max_lane(acc);
    }
    for (std::size_t i = full; i < cols; ++i) m = xr[i] > m ? xr[i] : m;
    for (std::size_t i = 0; i < cols; ++i) xd[i] = xr[i];
    const std::int64_t sum = int_softmax_e16_row<Arch>(xd.data(), cols, m, p, e.data());
    int_softmax_normalize_row<Arch>(e.data(), cols, sum, p);
    std::int32_t* yr = y + r * ld_y;
    for (std::size_t i = 0; i < cols; ++i) yr[i] = static_cast<std::int32_t>(e[i]);
  }
  return 1.0f / static_cast<float>(1 << output_bit);
}

}  // inline namespace STILE_XSIMD_ABI
}  // namespace stile::ibert

namespace stile {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

// softmax(scale * x) per row, in place, through IntSoftmax, as the float model will call it.
// Quantization in front (what I-BERT feeds IntSoftmax): there, the scores are the int32
// accumulator of 8-bit Q times 8-bit K with scale s_q s_k / sqrt(d), one scale per tensor. Here
// each row of scale * x is quantized on its own, symmetric, 16 bits (QuantAct's formula: step
// max|row| / 32767, at least 1e-6, round half to even, clamp to [-32767, 32766]), which is no
// coarser than I-BERT's per-tensor accumulator grid. The output is I-BERT's: 8 bits
// (probabilities in multiples of 1/256, rounded down), dequantized.
// @pre 0 < cols <= ld, scale > 0 (checked).
template <class Arch>
void softmax_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale) {
  kernel_require(cols > 0 && cols <= ld, "softmax_integer_rows: needs 0 < cols <= ld");
  kernel_require(scale > 0.0f, "softmax_integer_rows: scale must be > 0");
  using BF = xsimd::batch<float, Arch>;
  constexpr std::size_t L = BF::size;
  const std::size_t full = cols - cols % L;
  // Scratch for one row, allocated once per call: the 16-bit integers (as floats: exact) and e16.
  std::vector<float> q(cols);
  std::vector<std::int32_t> e(cols);
  const BF vscale(scale);
  for (std::size_t r = 0; r < rows; ++r) {
    float* xr = x + r * ld;
    // The row's max and min: scale * x and the quantization below are monotonic in x, so the
    // extremes of scale * x are scale times these, and the max of the integers is their max's.
    float hi = xr[0], lo_x = xr[0];
    if (full > 0) {
      BF vhi = BF::load_unaligned(xr), vlo = vhi;
      for (std::size_t i = L; i < full; i += L) {
        const BF v = BF::load_unaligned(xr + i);
        vhi = xsimd::max(vhi, v);
        vlo = xsimd::min(vlo, v);
      }
      hi = ibert::max_lane(vhi);
      lo_x = -ibert::max_lane(-vlo);
    }
    for (std::size_t i = full; i < cols; ++i) {
      hi = xr[i] > hi ? xr[i] : hi;
      lo_x = xr[i] < lo_x ? xr[i] : lo_x;
    }
    const float top = hi * scale, bottom = lo_x * scale;
    ibert::SymmetricQuant qp = ibert::symmetric_quant(std::fmax(std::fabs(top), std::fabs(bottom)), 16);
    // A row that is (nearly) flat: its 16-bit step would be below 1e-6 and the constants c / s^2
    // would grow past 48 bits; a step of 1e-6 still resolves every difference that matters to exp.
    if (qp.scale < 1e-6f) qp.scale = 1e-6f;
    // quantize_symmetric on scale * x, in float lanes (the integers are below 2^16: exact).
    const float inv = 1.0f / qp.scale;
    const float lo = static_cast<float>(qp.lo), hi_q = static_cast<float>(qp.hi);
    auto quantize = [&](float v) {
      const float t = std::nearbyint(v * inv);
      return t < lo ? lo : t > hi_q ? hi_q : t;
    };
    for (std::size_t i = 0; i < full; i += L) {
      // nearbyint_as_int: quantize_symmetric's rounding (one instruction; |v| <= 32768 here).
      const BF v = xsimd::to_float(xsimd::nearbyint_as_int((BF::load_unaligned(xr + i) * vscale) * BF(inv)));
      xsimd::min(xsimd::max(v, BF(lo)), BF(hi_q)).store_unaligned(q.data() + i);
    }
    for (std::size_t i = full; i < cols; ++i) q[i] = quantize(xr[i] * scale);
    const ibert::IntSoftmaxParams p = ibert::int_softmax_params(qp.scale, 8);
    const std::int64_t sum = ibert::int_softmax_e16_row_float<Arch>(q.data(), cols, quantize(top), p, e.data());
    ibert::int_softmax_normalize_dequant<Arch>(e.data(), cols, sum, p, xr);
  }
}

}  // inline namespace STILE_XSIMD_ABI

namespace ibert {
using stile::softmax_integer_rows;  // also reachable beside the integer kernel it wraps
}  // namespace ibert

}  // namespace stile
