#pragma once
// I-BERT's integer-only LayerNorm, exactly as the reference computes it:
// kssteven418/I-BERT, fairseq/quantization/utils/quant_modules.py, class IntLayerNorm (forward,
// set_shift, overflow_fallback). Per row of C integers x (any input scale: the result does not
// depend on it):
//   mean   = round(sum(x) / C)                              (torch.round: ties to even)
//   y      = x - mean
//   var    = sum(floor(y / 2^shift)^2)                      (shift: the module's buffer, 0 fresh)
//   if any row's var >= 2^32 (overflow_handling, the reference's default): shift = max(shift,
//   max over rows of ceil(log2(sqrt(sum(y^2) / 2^32)))), var recomputed for every row
//   std    = isqrt(var) 2^shift                             (integer square root, Newton)
//   factor = floor(2^31 / (std + 0.0001))
//   out    = floor(y factor / 2) + floor((beta / gamma) / (sqrt(C) / 2^30))
//   output scale (per column) = sqrt(C) / 2^30 gamma
// The reference takes the square root in float32 ("To be replaced with integer-sqrt kernel that
// produces the same output"); the integer square root here is the paper's (I-BERT, Algorithm 4:
// Newton's iteration from 2^ceil(bits/2), stopping when it stops decreasing), which gives
// floor(sqrt(var)) exactly. eps plays no part: the reference adds 0.0001 to std instead.
//
// Exactness: constants (factor, the bias integers, the scales) in float32 as the reference derives
// them (kernels/ibert_common.hpp); sums, the variance and y * factor are exact integers (the
// reference's float32 tensors round them above 2^24; scripts/make_ibert_goldens.py reports where
// that would differ). The output integers are int64: |floor(y factor / 2)| <= 2^30, but the
// bias integers grow as beta / gamma does.
//
// Vector paths: int_layer_norm_rows sums a row in int32 lanes (when C max|x| < 2^31, always for
// 16-bit inputs) and takes the variance and the output per element in int64 and int128.
// layer_norm_integer_rows, whose rows are 16-bit, runs every step in double lanes, exactly (the
// bounds are at the function).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "stile/core/error.hpp"
#include "stile/kernels/ibert_common.hpp"
#include "stile/quant/dyadic.hpp"
#include "stile/core/xsimd_abi.hpp"

namespace stile::ibert {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

// floor(sqrt(n)) by Newton's iteration on integers (I-BERT, Algorithm 4).
inline std::uint64_t isqrt_newton(std::uint64_t n) {
  if (n == 0) return 0;
  int bits = 0;
  while (bits < 64 && (n >> bits) != 0) ++bits;
  std::uint64_t x = std::uint64_t{1} << ((bits + 1) / 2);  // 2^ceil(bits / 2) >= sqrt(n)
  for (;;) {
    const std::uint64_t next = (x + n / x) / 2;
    if (next >= x) return x;
    x = next;
  }
}

// The smallest k with v <= 2^(2k + 32): ceil(log2(sqrt(v / 2^32))) of set_shift, on integers.
inline int ibert_ln_needed_shift(quant::int128 v) {
  int k = -16;
  while (v > (static_cast<quant::int128>(1) << (2 * k + 32))) ++k;
  return k;
}

// y = IntLayerNorm(x) per row: x is rows x cols int32 (row stride ld_x) with scaling factor s;
// y is rows x cols int64 (row stride ld_y); out_scale[cols] receives the output scaling factors.
// `shift` is the module's shift buffer (0 for a fresh module); returns the shift used, which a
// caller keeping the module's state stores back. @pre 0 < cols <= ld_x, ld_y; s finite and > 0;
// gamma[i] finite and nonzero; beta finite (checked).
template <class Arch>
int int_layer_norm_rows(const std::int32_t* x, std::size_t rows, std::size_t cols, std::size_t ld_x, float s,
                        const float* gamma, const float* beta, int shift, std::int64_t* y, std::size_t ld_y,
                        float* out_scale) {
  kernel_require(cols > 0 && cols <= ld_x && cols <= ld_y, "int_layer_norm_rows: needs 0 < cols <= ld");
  quant::check_scale(s, "int_layer_norm input");
  kernel_require(shift >= 0 && shift < 32, "int_layer_norm_rows: shift must be in 0..31");
  // dim_sqrt = sqrt(float(C)); scaling_factor = dim_sqrt / 2^30; bias_int = floor((beta / gamma)
  // / scaling_factor); output scale = scaling_factor * gamma.
  const float dim_sqrt = std::sqrt(static_cast<float>(cols));
  const float sf = torch_div_scalar(dim_sqrt, 0x1p30);
  std::vector<std::int64_t> bias_int(cols);
  for (std::size_t i = 0; i < cols; ++i) {
    kernel_require(std::isfinite(gamma[i]) && gamma[i] != 0.0f && std::isfinite(beta[i]),
            "int_layer_norm_rows: gamma must be finite and nonzero, beta finite");
    const float ratio = beta[i] / gamma[i];
    bias_int[i] = floor_to_int64(ratio / sf, "int_layer_norm bias_int");
    out_scale[i] = sf * gamma[i];
  }
  using B = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t L = B::size;
  // Pass 1: means, and the variances with the given shift.
  std::vector<std::int64_t> mean(rows);
  std::vector<quant::int128> var(rows), var0(rows);
  bool overflow = false;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t* xr = x + r * ld_x;
    std::int64_t amax = 0;
    for (std::size_t i = 0; i < cols; ++i) {
      const std::int64_t a = xr[i] < 0 ? -static_cast<std::int64_t>(xr[i]) : xr[i];
      amax = a > amax ? a : amax;
    }
    std::int64_t sum = 0;
    std::size_t done = 0;
    if (static_cast<double>(amax) * static_cast<double>(cols) < 0x1p31) {
      done = cols - cols % L;
      B acc(0);
      for (std::size_t i = 0; i < done; i += L) acc += B::load_unaligned(xr + i);
      sum = xsimd::hadd(acc);
    }
    for (std::size_t i = done; i < cols; ++i) sum += xr[i];
    mean[r] = round_half_even_div(sum, static_cast<std::int64_t>(cols));
    quant::int128 v = 0, v0 = 0;
    for (std::size_t i = 0; i < cols; ++i) {
      const std::int64_t d = xr[i] - mean[r];
      const std::int64_t ds = floor_shift(d, shift);
      v += static_cast<quant::int128>(ds) * ds;
      v0 += static_cast<quant::int128>(d) * d;
    }
    var[r] = v;
    var0[r] = v0;
    overflow = overflow || v >= (static_cast<quant::int128>(1) << 32);
  }
  const quant::int128 limit = static_cast<quant::int128>(1) << 32;
  if (overflow) {
    // overflow_fallback: the shift every row needs, from the unshifted sums of squares; then the
    // variances again. The reference asserts that they now fit; should one not (floor rounding
    // can leave a sum just above 2^32), the shift grows until it does.
    for (std::size_t r = 0; r < rows; ++r) {
      const int k = ibert_ln_needed_shift(var0[r]);
      shift = k > shift ? k : shift;
    }
    for (bool fits = false; !fits; ++shift) {
      fits = true;
      for (std::size_t r = 0; r < rows && fits; ++r) {
        const std::int32_t* xr = x + r * ld_x;
        quant::int128 v = 0;
        for (std::size_t i = 0; i < cols; ++i) {
          const std::int64_t ds = floor_shift(xr[i] - mean[r], shift);
          v += static_cast<quant::int128>(ds) * ds;
        }
        var[r] = v;
        fits = v < limit;
      }
      if (fits) break;
    }
  }
  // Pass 2: normalize.
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t* xr = x + r * ld_x;
    std::int64_t* yr = y + r * ld_y;
    const std::uint64_t std_int = isqrt_newton(static_cast<std::uint64_t>(var[r])) << shift;
    // factor = floor(2^31 / (std_int + 0.0001)): the add, then reciprocal times 2^31, in float32.
    const float denom = static_cast<float>(std_int) + static_cast<float>(0.0001);
    const std::int64_t factor = floor_to_int64(torch_rdiv(0x1p31, denom), "int_layer_norm factor");
    for (std::size_t i = 0; i < cols; ++i) {
      const quant::int128 p = static_cast<quant::int128>(xr[i] - mean[r]) * factor;
      yr[i] = static_cast<std::int64_t>(p >> 1) + bias_int[i];
    }
  }
  return shift;
}

}  // inline namespace STILE_XSIMD_ABI
}  // namespace stile::ibert

namespace stile {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

// LayerNorm per row, in place, through IntLayerNorm, as the float model will call it.
// Quantization in front (what I-BERT feeds IntLayerNorm): there, the input is the output of a
// 16-bit QuantAct (the residual sum), one scale per tensor. Here each row is quantized on its
// own, symmetric, 16 bits (QuantAct's formula: step max|row| / 32767, round half to even, clamp
// to [-32767, 32766]), no coarser than I-BERT's grid, and normalized with a fresh module's shift
// (0, raised per row by the overflow handling as the reference's first call would). The output
// is dequantized with IntLayerNorm's per-column scale. eps is not used by the integer algorithm
// (see above); it is taken for the signature of layer_norm_rows. @pre 0 < cols <= ld, gamma
// finite and nonzero, beta finite, eps >= 0 (checked). The result is
// int_layer_norm_rows's on each row (one row per call, shift 0), dequantized, bit for bit.
template <class Arch>
void layer_norm_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                             const float* beta, float eps) {
  kernel_require(cols > 0 && cols <= ld, "layer_norm_integer_rows: needs 0 < cols <= ld");
  kernel_require(eps >= 0.0f, "layer_norm_integer_rows: eps must be >= 0");
  using BF = xsimd::batch<float, Arch>;
  using BD = xsimd::batch<double, Arch>;
  using BI = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t LF = BF::size, LD = BD::size;
  const std::size_t full_f = cols - cols % LF, full_d = cols - cols % LD;
  // Per call, not per row: the bias integers and the output scales (int_layer_norm_rows's formulas).
  const float dim_sqrt = std::sqrt(static_cast<float>(cols));
  const float sf = ibert::torch_div_scalar(dim_sqrt, 0x1p30);
  std::vector<double> bias(cols);
  std::vector<float> so(cols), q(cols);
  std::vector<double> y(cols);
  double bias_max = 0.0;
  for (std::size_t i = 0; i < cols; ++i) {
    kernel_require(std::isfinite(gamma[i]) && gamma[i] != 0.0f && std::isfinite(beta[i]),
            "layer_norm_integer_rows: gamma must be finite and nonzero, beta finite");
    const float ratio = beta[i] / gamma[i];
    bias[i] = static_cast<double>(ibert::floor_to_int64(ratio / sf, "int_layer_norm bias_int"));
    bias_max = std::fabs(bias[i]) > bias_max ? std::fabs(bias[i]) : bias_max;
    so[i] = sf * gamma[i];
  }
  // The rows' integers are 16-bit (|x| <= 32767, so |x - mean| < 2^16): for C < 2^16 the int32
  // lane sums cannot overflow and the sums of C squares stay below 2^53, so every step below is
  // exact in int32 or double lanes; y factor / 2 too when 2^16 factor + max|bias_int| < 2^51,
  // checked per row. Other rows go through int_layer_norm_rows (int64 and int128).
  const bool lanes_exact = cols < (std::size_t{1} << 16);
  const BD big(0x1.8p52), one(1.0);
  // floor(w) for |w| < 2^51: the nearest integer (adding 1.5 2^52 rounds the fraction away),
  // less one where that rounded up.
  auto floor_small = [&](BD w) {
    const BD t = (w + big) - big;
    return xsimd::select(t > w, t - one, t);
  };
  // For rows the reference runs, sized here: resize() would be emitted out of line by clang, a
  // function outside the ABI namespace (core/xsimd_abi.hpp).
  std::vector<std::int32_t> qi(cols);
  std::vector<std::int64_t> out(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    float* xr = x + r * ld;
    const ibert::SymmetricQuant qp = ibert::symmetric_quant(ibert::abs_max<Arch>(xr, cols), 16);
    auto reference_row = [&] {
      std::vector<float> so_row(cols);
      ibert::quantize_symmetric<Arch>(xr, cols, qp, qi.data());
      ibert::int_layer_norm_rows<Arch>(qi.data(), 1, cols, cols, qp.scale, gamma, beta, 0, out.data(), cols,
                                       so_row.data());
      for (std::size_t i = 0; i < cols; ++i) xr[i] = static_cast<float>(out[i]) * so_row[i];
    };
    if (!lanes_exact) {
      reference_row();
      continue;
    }
    // quantize_symmetric, in float lanes (16-bit integers: exact), and the row sum in int32 lanes
    // (a lane adds at most cols / lanes < 2^16 values of |q| <= 32767: no overflow).
    const float inv = 1.0f / qp.scale, lo = static_cast<float>(qp.lo), hi = static_cast<float>(qp.hi);
    BI isum(0);
    for (std::size_t i = 0; i < full_f; i += LF) {
      // nearbyint_as_int: quantize_symmetric's rounding (one instruction; |v| <= 32768 here).
      const BF v = xsimd::to_float(xsimd::nearbyint_as_int(BF::load_unaligned(xr + i) * BF(inv)));
      const BF c = xsimd::min(xsimd::max(v, BF(lo)), BF(hi));
      c.store_unaligned(q.data() + i);
      isum += xsimd::to_int(c);
    }
    alignas(64) std::int32_t ibuf[LF];
    isum.store_aligned(ibuf);
    std::int64_t sum = 0;
    for (std::size_t j = 0; j < LF; ++j) sum += ibuf[j];
    for (std::size_t i = full_f; i < cols; ++i) {
      const float v = std::nearbyint(xr[i] * inv);
      q[i] = v < lo ? lo : v > hi ? hi : v;
      sum += static_cast<std::int64_t>(q[i]);
    }
    // mean = round(sum / C), ties to even; y = x - mean, widened to doubles by a plain loop.
    const std::int64_t mean = ibert::round_half_even_div(sum, static_cast<std::int64_t>(cols));
    const double meand = static_cast<double>(mean);
    for (std::size_t i = 0; i < cols; ++i) y[i] = static_cast<double>(q[i]) - meand;
    alignas(64) double buf[LD];
    // sum(floor(y / 2^shift)^2); with shift 0 the floors drop out.
    auto sum_sq = [&](int shift) {
      const double down = std::ldexp(1.0, -shift);
      const BD vdown(down);
      BD a(0.0);
      if (shift == 0) {
        for (std::size_t i = 0; i < full_d; i += LD) {
          const BD d = BD::load_unaligned(y.data() + i);
          a += d * d;
        }
      } else {
        for (std::size_t i = 0; i < full_d; i += LD) {
          const BD d = floor_small(BD::load_unaligned(y.data() + i) * vdown);
          a += d * d;
        }
      }
      a.store_aligned(buf);
      double v = 0.0;
      for (std::size_t j = 0; j < LD; ++j) v += buf[j];
      for (std::size_t i = full_d; i < cols; ++i) {
        const double d = std::floor(y[i] * down);
        v += d * d;
      }
      return static_cast<std::int64_t>(v);
    };
    int shift = 0;
    std::int64_t var = sum_sq(0);
    constexpr std::int64_t limit = std::int64_t{1} << 32;
    if (var >= limit) {
      // overflow_fallback, as int_layer_norm_rows for one row.
      const int k = ibert::ibert_ln_needed_shift(var);
      shift = k > 0 ? k : 0;
      while ((var = sum_sq(shift)) >= limit) ++shift;
    }
    const std::uint64_t std_int = ibert::isqrt_newton(static_cast<std::uint64_t>(var)) << shift;
    const float denom = static_cast<float>(std_int) + static_cast<float>(0.0001);
    const std::int64_t factor = ibert::floor_to_int64(ibert::torch_rdiv(0x1p31, denom), "int_layer_norm factor");
    const double f = static_cast<double>(factor);
    if (f * 0x1p16 + bias_max < 0x1p51) {
      // out = floor(y factor / 2) + bias_int: exact (see above).
      const BD vf(f), half(0.5);
      for (std::size_t i = 0; i < full_d; i += LD) {
        const BD w = (BD::load_unaligned(y.data() + i) * vf) * half;
        (floor_small(w) + BD::load_unaligned(bias.data() + i)).store_unaligned(y.data() + i);
      }
      // The tail through pointers: GCC 12 reads the indexed loop, dead when cols is a known
      // multiple of LD after inlining, as out of bounds (-Warray-bounds).
      double* yt = y.data() + full_d;
      const double* bt = bias.data() + full_d;
      for (std::size_t i = 0; i < cols - full_d; ++i) yt[i] = std::floor((yt[i] * f) * 0.5) + bt[i];
      // float(out) * scale: the double holds the int64 exactly, so the conversion rounds alike.
      for (std::size_t i = 0; i < cols; ++i) xr[i] = static_cast<float>(y[i]) * so[i];
    } else {
      reference_row();
    }
  }
}

}  // inline namespace STILE_XSIMD_ABI

namespace ibert {
using stile::layer_norm_integer_rows;  // also reachable beside the integer kernel it wraps
}  // namespace ibert

}  // namespace stile
