#pragma once
// I-BERT's integer-only GELU (i-GELU), exactly as the reference computes it:
// kssteven418/I-BERT, fairseq/quantization/utils/quant_modules.py, class IntGELU (int_erf and
// forward). erf(t) on |t| <= 1.769 is the second-order polynomial a (|t| + b)^2 + c with
// a = -0.2888, b = -1.769, c = 1 (clipped at |t| = -b, sign restored), evaluated on integers:
//   s_erf = s / 1.4142                                  (x / sqrt 2: the scale shrinks instead)
//   b_int = floor(b / s_erf), c_int = floor((c / a) / s_erf^2)
//   y     = sign(x) ((min(|x|, -b_int) + b_int)^2 + c_int)       scale a s_erf^2
//   y     = floor(y / 2^14)                                      scale a s_erf^2 2^14  (= s_sig)
//   one   = floor(1 / s_sig)                                     (1 in the erf's scale)
//   out   = x (y + one)                                          scale s s_sig / 2
// The output scale is negative (a < 0), as in the reference; out * scale is the GELU value.
//
// Exactness: the constants are derived in float32 as the reference does (kernels/ibert_common.hpp);
// the element-wise values are exact integers. The reference holds them in float32, which is
// exact below 2^24 and rounds above; an integer-only implementation computes them exactly, and so
// does this one (scripts/make_ibert_goldens.py reports where the two would differ).
//
// Vector path: int32 lanes when the bounds computed from the constants and the largest |x|
// guarantee that nothing overflows 32 bits (the case for 16-bit inputs with |x| scales of BERT's
// FFN); otherwise every element goes through the scalar reference in int64. Same results.
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

struct IntGeluParams {
  std::int64_t b_int = 0;     // floor(-1.769 / s_erf), negative
  std::int64_t c_int = 0;     // floor((1 / -0.2888) / s_erf^2), negative
  std::int64_t one_int = 0;   // floor(1 / s_sig): the reference's shift_int, negative
  float output_scale = 0.0f;  // s * s_sig / 2, negative
};

// The per-call constants for input scaling factor s. @pre s finite and > 0 (checked).
inline IntGeluParams int_gelu_params(float s) {
  quant::check_scale(s, "int_gelu input");
  constexpr double k = 1.4142, coeff0 = -0.2888, coeff1 = -1.769, coeff2 = 1.0 / -0.2888;
  constexpr int n = 14;
  const float s_erf = torch_div_scalar(s, k);
  const float s_erf2 = s_erf * s_erf;
  IntGeluParams p;
  p.b_int = floor_to_int64(torch_rdiv(coeff1, s_erf), "int_gelu b_int");
  p.c_int = floor_to_int64(torch_rdiv(coeff2, s_erf2), "int_gelu c_int");
  float s_sig = torch_mul_scalar(s_erf2, coeff0);
  s_sig = torch_mul_scalar(s_sig, static_cast<double>(1 << n));
  p.one_int = floor_to_int64(torch_rdiv(1.0, s_sig), "int_gelu shift_int");
  p.output_scale = torch_div_scalar(s * s_sig, 2.0);
  return p;
}

// The scalar reference of one element, in int64 (exact while |x| (|y| + |one_int|) < 2^63,
// which int_gelu checks).
inline std::int64_t int_gelu_scalar(std::int64_t x, const IntGeluParams& p) {
  const std::int64_t sign = (x > 0) - (x < 0);
  std::int64_t a = x < 0 ? -x : x;
  a = a < -p.b_int ? a : -p.b_int;
  const std::int64_t t = a + p.b_int;
  std::int64_t y = sign * (t * t + p.c_int);
  y = floor_shift(y, 14);
  return x * (y + p.one_int);
}

// Whether IntGELU runs in int32 lanes for inputs with |x| <= xmax: the bounds computed from the
// constants show that no intermediate passes 31 bits. |y| <= (b^2 + |c|) / 2^14 + 1 after the
// shift; the factor is |y + one| <= that + |one|; the product x (y + one) at most xmax times it.
// Throws, as int_gelu does, when even int64 would overflow.
inline bool int_gelu_fits_int32(const IntGeluParams& p, std::int64_t xmax) {
  const double bb = static_cast<double>(p.b_int) * static_cast<double>(p.b_int);
  const double ybound = (bb + std::fabs(static_cast<double>(p.c_int))) / 16384.0 + 1.0;
  const double fbound = ybound + std::fabs(static_cast<double>(p.one_int));
  const double pbound = static_cast<double>(xmax) * fbound;
  if (!(pbound < 0x1p62) || !(bb + std::fabs(static_cast<double>(p.c_int)) < 0x1p62)) {
    detail::xsimd_kernel_error("int_gelu: products overflow 64 bits for this scaling factor and input range");
  }
  constexpr double i32 = 0x1p31 - 1.0;
  return bb <= i32 && std::fabs(static_cast<double>(p.c_int)) <= i32 && fbound <= i32 && pbound <= i32;
}

// IntGELU of int32 lanes, for inputs that int_gelu_fits_int32 accepts: int_gelu_scalar's steps.
template <class Arch>
struct IntGeluLanes {
  using B = xsimd::batch<std::int32_t, Arch>;
  B b, nb, c, one, zero;
  explicit IntGeluLanes(const IntGeluParams& p)
      : b(static_cast<std::int32_t>(p.b_int)),
        nb(static_cast<std::int32_t>(-p.b_int)),
        c(static_cast<std::int32_t>(p.c_int)),
        one(static_cast<std::int32_t>(p.one_int)),
        zero(0) {}
  B operator()(B v) const {
    const B t = xsimd::min(xsimd::abs(v), nb) + b;
    const B poly = t * t + c;  // <= 0: (|x| + b)^2 <= b^2 < -c * 0.91
    // sign(x) * poly: poly for x > 0, -poly for x < 0, 0 for x == 0.
    const B sp = xsimd::select(v > zero, poly, xsimd::select(v < zero, -poly, zero));
    return v * ((sp >> 14) + one);  // >> on int32 lanes is arithmetic: the floor of floor_shift
  }
};

// v[i] = IntGELU(v[i]) in place, int32, for inputs that int_gelu_fits_int32 accepts (so no
// intermediate overflows): int_gelu_scalar's steps as a plain loop for the compiler to vectorize.
inline void int_gelu_int32(std::int32_t* v, std::size_t n, const IntGeluParams& p) {
  const std::int32_t b = static_cast<std::int32_t>(p.b_int), c = static_cast<std::int32_t>(p.c_int),
                     one = static_cast<std::int32_t>(p.one_int);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t x = v[i];
    std::int32_t a = x < 0 ? -x : x;
    a = a < -b ? a : -b;
    const std::int32_t t = a + b;
    const std::int32_t poly = t * t + c;
    const std::int32_t sp = x > 0 ? poly : x < 0 ? -poly : 0;
    v[i] = x * ((sp >> 14) + one);  // >> of a negative int32: arithmetic (C++20), the floor
  }
}

// y[i] = IntGELU(x[i]) for i < n with input scaling factor s; returns the output scaling factor.
// @pre s finite and > 0 (checked); x and y do not overlap (not checked).
// Throws stile::Error if the constants or the products do not fit int64 (a scale far finer than
// 32-bit inputs need).
template <class Arch>
float int_gelu(const std::int32_t* x, std::size_t n, float s, std::int64_t* y) {
  const IntGeluParams p = int_gelu_params(s);
  std::int64_t xmax = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t a = x[i] < 0 ? -static_cast<std::int64_t>(x[i]) : x[i];
    xmax = a > xmax ? a : xmax;
  }
  const bool fits32 = int_gelu_fits_int32(p, xmax);
  std::size_t done = 0;
  if (fits32) {
    using B = xsimd::batch<std::int32_t, Arch>;
    constexpr std::size_t L = B::size;
    const IntGeluLanes<Arch> lanes(p);
    alignas(64) std::int32_t buf[L];
    done = n - n % L;
    for (std::size_t i = 0; i < done; i += L) {
      lanes(B::load_unaligned(x + i)).store_aligned(buf);
      for (std::size_t j = 0; j < L; ++j) y[i + j] = buf[j];
    }
  }
  for (std::size_t i = done; i < n; ++i) y[i] = int_gelu_scalar(x[i], p);
  return p.output_scale;
}

}  // inline namespace STILE_XSIMD_ABI
}  // namespace stile::ibert

namespace stile {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

// GELU on n floats in place through IntGELU, as the float model will call it.
// Quantization in front (what I-BERT feeds IntGELU): there, GELU's input is the int32 accumulator
// of an 8-bit x 8-bit GEMM with scale s_x s_w, which puts the largest |x| of BERT's FFN some 2^14
// to 2^16 steps from zero. Here x is quantized per call, symmetric, 16 bits (QuantAct's formula:
// scale = max|x| / 32767, round half to even, clamp to [-32767, 32766]); the integers run
// through int_gelu and are dequantized with its output scale (the step is at least 1e-6). The
// error against exact GELU is I-BERT's own: the erf polynomial's (its erf(0+) is 1 + a b^2 = 0.096,
// so near 0 the result is off by about 0.05 |x|), plus half a step of the grid.
//
// Vector path: when int_gelu_fits_int32 accepts the 16-bit range (|q| <= 32767), quantization
// and dequantization run in float lanes and IntGELU in int32 between them, block by block (the
// int32 -> float conversion rounds to nearest even, as the int64 -> float one of the scalar path
// does); otherwise the integers go through int_gelu.
//
// absmax: max |x| over the whole tensor that x[0, n) belongs to (the quantization's range), so a
// tensor cut into blocks, each run with the tensor's absmax, gives the floats of one call over it
// (each element's steps do not depend on the others'). @pre absmax >= max |x[i]|.
template <class Arch>
void gelu_integer_inplace(float* x, std::size_t n, float absmax) {
  if (n == 0) return;
  ibert::SymmetricQuant qp = ibert::symmetric_quant(absmax, 16);
  // Inputs (nearly) all zero: their 16-bit step would fall below 1e-6, where the constants grow
  // toward 64 bits (c_int ~ 7 / s^2); a step of 1e-6 still gives GELU to 1e-6 there.
  if (qp.scale < 1e-6f) qp.scale = 1e-6f;
  const ibert::IntGeluParams p = ibert::int_gelu_params(qp.scale);
  if (ibert::int_gelu_fits_int32(p, 32767)) {
    using BF = xsimd::batch<float, Arch>;
    using BI = xsimd::batch<std::int32_t, Arch>;
    constexpr std::size_t L = BF::size;
    const float inv = 1.0f / qp.scale;
    const BF vinv(inv), so(p.output_scale), lo(static_cast<float>(qp.lo)), hi(static_cast<float>(qp.hi));
    const std::size_t full = n - n % L;
    // Blocks through an int32 scratch: quantize in float lanes, IntGELU in a plain loop (xsimd's
    // int32 multiply is one lane at a time on SSE2; the compiler's vectorized loop is not), then
    // dequantize in float lanes.
    constexpr std::size_t block = 1024;  // a multiple of every L
    alignas(64) std::int32_t qb[block];
    for (std::size_t b0 = 0; b0 < full; b0 += block) {
      const std::size_t len = full - b0 < block ? full - b0 : block;
      float* xb = x + b0;
      for (std::size_t i = 0; i < len; i += L) {
        // nearbyint_as_int then the clamp in floats: quantize_symmetric's integers (|v| <= 32768).
        const BF v = xsimd::to_float(xsimd::nearbyint_as_int(BF::load_unaligned(xb + i) * vinv));
        xsimd::to_int(xsimd::min(xsimd::max(v, lo), hi)).store_aligned(qb + i);
      }
      ibert::int_gelu_int32(qb, len, p);
      for (std::size_t i = 0; i < len; i += L) (xsimd::to_float(BI::load_aligned(qb + i)) * so).store_unaligned(xb + i);
    }
    for (std::size_t i = full; i < n; ++i) {
      const float r = std::nearbyint(x[i] * inv);
      const std::int32_t q = r < static_cast<float>(qp.lo)   ? qp.lo
                             : r > static_cast<float>(qp.hi) ? qp.hi
                                                             : static_cast<std::int32_t>(r);
      x[i] = static_cast<float>(ibert::int_gelu_scalar(q, p)) * p.output_scale;
    }
    return;
  }
  std::vector<std::int32_t> q(n);
  ibert::quantize_symmetric<Arch>(x, n, qp, q.data());
  std::vector<std::int64_t> out(n);
  const float so = ibert::int_gelu<Arch>(q.data(), n, qp.scale, out.data());
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(out[i]) * so;
}

// The same over a whole tensor: absmax from x itself.
template <class Arch>
void gelu_integer_inplace(float* x, std::size_t n) {
  gelu_integer_inplace<Arch>(x, n, ibert::abs_max<Arch>(x, n));
}

}  // inline namespace STILE_XSIMD_ABI

namespace ibert {
using stile::gelu_integer_inplace;  // also reachable beside the integer kernel it wraps
}  // namespace ibert

}  // namespace stile
