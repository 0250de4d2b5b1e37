#pragma once
// int8 LayerNorm as in the Arm Compute Library BERT work (Kornelsen, M.Sc. thesis, McGill 2023,
// section 4: "we load vectors of 16x 8-bit values and accumulate them using low bit integer
// arithmetic. The computation of the mean and standard deviation, as well as the actual
// normalization, are performed using fp32. Finally, the normalized values are requantized back to
// int8"), with the thesis's asymmetric quantization (a scale and a zero point per tensor, from
// its min and max; here per row).
//
// Per row of C int8 values q with real value scale (q - zero_point):
//   S1 = sum(q), S2 = sum(q^2)                            (int64; exact)
//   mean_q = S1 / C, var_q = (C S2 - S1^2) / C^2           (fp32 from the exact integers)
//   k = scale / sqrt(var_q scale^2 + eps)                  (1 / std of the real values, times scale)
//   y = (q - mean_q) k gamma + beta                        (fp32)
//   out = clamp(round(y / out.scale) + out.zero_point, -128, 127)
// The zero point cancels in q - mean_q, so it enters only through the quantization.
//
// Instantiation contract: a template on the xsimd architecture (normally xsimd::default_arch,
// in a translation unit compiled for it). In layer_norm_int8_row the integer sums are plain loops
// over int8 (compilers vectorize them); the fp32 normalization and requantization run in xsimd
// float batches with a scalar tail of the same formula. The float wrapper runs every step in
// float lanes (see there).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "stile/core/error.hpp"
#include "stile/core/xsimd_abi.hpp"

namespace stile {
inline namespace STILE_XSIMD_ABI {  // core/xsimd_abi.hpp: one name per instruction-set flags

// real = scale (q - zero_point), q in [-128, 127].
struct AffineInt8 {
  float scale = 1.0f;
  std::int32_t zero_point = 0;
};

// Asymmetric int8 parameters for values in [lo, hi]: the range is widened to contain 0 (so 0 is
// exact), scale = (hi - lo) / 255, zero_point = round(-128 - lo / scale) clamped to [-128, 127].
// A range of width 0 (all zeros) gets scale 1.
inline AffineInt8 affine_int8_params(float lo, float hi) {
  lo = lo < 0.0f ? lo : 0.0f;
  hi = hi > 0.0f ? hi : 0.0f;
  AffineInt8 p;
  const float width = hi - lo;
  p.scale = width > 0.0f ? width / 255.0f : 1.0f;
  const float zp = std::nearbyint(-128.0f - lo / p.scale);
  p.zero_point = zp < -128.0f ? -128 : zp > 127.0f ? 127 : static_cast<std::int32_t>(zp);
  return p;
}

inline std::int8_t quantize_int8(float v, AffineInt8 p) {
  const float r = std::nearbyint(v / p.scale) + static_cast<float>(p.zero_point);
  return static_cast<std::int8_t>(r < -128.0f ? -128 : r > 127.0f ? 127 : static_cast<int>(r));
}

// The fp32 statistics of one int8 row from its exact integer sums: mean_q and k (see above).
struct Int8RowStats {
  float mean_q = 0.0f;
  float k = 0.0f;
};
// From the exact sums s1 = sum(q), s2 = sum(q^2) of a row of cols values.
inline Int8RowStats int8_row_stats_from_sums(std::int64_t s1, std::int64_t s2, std::size_t cols, AffineInt8 in,
                                             float eps) {
  const std::int64_t c = static_cast<std::int64_t>(cols);
  const float cf = static_cast<float>(cols);
  Int8RowStats st;
  st.mean_q = static_cast<float>(s1) / cf;
  const float var_q = static_cast<float>(c * s2 - s1 * s1) / (cf * cf);
  st.k = in.scale / std::sqrt(var_q * in.scale * in.scale + eps);
  return st;
}
inline Int8RowStats int8_row_stats(const std::int8_t* q, std::size_t cols, AffineInt8 in, float eps) {
  std::int64_t s1 = 0, s2 = 0;
  for (std::size_t i = 0; i < cols; ++i) {
    const std::int32_t v = q[i];
    s1 += v;
    s2 += v * v;
  }
  return int8_row_stats_from_sums(s1, s2, cols, in, eps);
}

// The scalar reference of one output element.
inline float int8_layer_norm_value(std::int8_t q, Int8RowStats st, float gamma, float beta) {
  return (static_cast<float>(q) - st.mean_q) * st.k * gamma + beta;
}

// y = int8 LayerNorm(q) of one row: q, y: cols int8 values; in, out: their quantization.
// @pre cols > 0, in.scale > 0, out.scale > 0, eps >= 0 (checked).
template <class Arch>
void layer_norm_int8_row(const std::int8_t* q, std::size_t cols, AffineInt8 in, const float* gamma, const float* beta,
                         float eps, AffineInt8 out, std::int8_t* y) {
  kernel_require(cols > 0 && in.scale > 0.0f && out.scale > 0.0f && eps >= 0.0f,
          "layer_norm_int8_row: needs cols > 0, positive scales, eps >= 0");
  const Int8RowStats st = int8_row_stats(q, cols, in, eps);
  using BF = xsimd::batch<float, Arch>;
  using BI = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t L = BF::size;
  alignas(64) float qf[L];
  alignas(64) std::int32_t qi[L];
  const BF inv_out(1.0f / out.scale);
  const std::size_t full = cols - cols % L;
  for (std::size_t i = 0; i < full; i += L) {
    for (std::size_t j = 0; j < L; ++j) qf[j] = static_cast<float>(q[i + j]);
    const BF c = (BF::load_aligned(qf) - BF(st.mean_q)) * BF(st.k);
    const BF v = xsimd::fma(c, BF::load_unaligned(gamma + i), BF::load_unaligned(beta + i));
    BI r = xsimd::nearbyint_as_int(v * inv_out) + BI(out.zero_point);
    r = xsimd::min(xsimd::max(r, BI(-128)), BI(127));
    r.store_aligned(qi);
    for (std::size_t j = 0; j < L; ++j) y[i + j] = static_cast<std::int8_t>(qi[j]);
  }
  for (std::size_t i = full; i < cols; ++i) {
    const float r = std::nearbyint(int8_layer_norm_value(q[i], st, gamma[i], beta[i]) * (1.0f / out.scale)) +
                    static_cast<float>(out.zero_point);
    y[i] = static_cast<std::int8_t>(r < -128.0f ? -128 : r > 127.0f ? 127 : static_cast<int>(r));
  }
}

// LayerNorm per row, in place, through the int8 kernel, as the float model will call it. Each row
// is quantized to int8 asymmetrically with its own min and max (affine_int8_params), normalized
// by the int8 kernel into int8 whose parameters come from the range of the fp32 result of the
// same row (the dynamic counterpart of the thesis's calibrated output range), and dequantized.
// @pre 0 < cols <= ld, eps >= 0 (checked).
//
// One pass per step, all in vector lanes, no allocation per row: the int8 values are kept as
// floats (exact) in a scratch row, and their sums run in float lanes too: exact while a lane adds
// at most 1024 squares of |q| <= 128 (1024 128^2 = 2^24, a float's last exact integer), so the
// lanes are drained into int64 every 1024 vectors. (Integer lanes would need int32 multiplies,
// which xsimd does one lane at a time on SSE2.) The fp32 values of the normalization are computed
// once, with layer_norm_int8_row's vector formula (and its scalar one in the tail), kept for the
// output range and then requantized: the result is layer_norm_int8_row's, element for element.
template <class Arch>
void layer_norm_int8_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                          const float* beta, float eps) {
  kernel_require(cols > 0 && cols <= ld, "layer_norm_int8_rows: needs 0 < cols <= ld");
  kernel_require(eps >= 0.0f, "layer_norm_int8_rows: eps must be >= 0");
  using BF = xsimd::batch<float, Arch>;
  constexpr std::size_t L = BF::size;
  constexpr std::size_t flush = 1024;  // vectors per float lane sum (see above)
  const std::size_t full = cols - cols % L;
  // Round half to even of values far inside the int32 range (here |v| <= 256 or so): the
  // float -> int32 conversion in the default rounding mode is one instruction on x86 and Arm,
  // where xsimd's nearbyint of floats takes five on SSE2.
  auto round_small = [](BF v) { return xsimd::to_float(xsimd::nearbyint_as_int(v)); };
  std::vector<float> qf(cols), v(cols);  // scratch rows, once per call
  alignas(64) float fbuf[L], gbuf[L];
  for (std::size_t r = 0; r < rows; ++r) {
    float* xr = x + r * ld;
    // Row range.
    float lo = xr[0], hi = xr[0];
    if (full > 0) {
      BF vlo = BF::load_unaligned(xr), vhi = vlo;
      for (std::size_t i = L; i < full; i += L) {
        const BF t = BF::load_unaligned(xr + i);
        vlo = xsimd::min(vlo, t);
        vhi = xsimd::max(vhi, t);
      }
      vlo.store_aligned(fbuf);
      vhi.store_aligned(gbuf);
      for (std::size_t j = 0; j < L; ++j) {
        lo = fbuf[j] < lo ? fbuf[j] : lo;
        hi = gbuf[j] > hi ? gbuf[j] : hi;
      }
    }
    for (std::size_t i = full; i < cols; ++i) {
      lo = xr[i] < lo ? xr[i] : lo;
      hi = xr[i] > hi ? xr[i] : hi;
    }
    const AffineInt8 in = affine_int8_params(lo, hi);
    // Quantize (quantize_int8: round(x / scale) + zero_point, clamped) and the exact sums.
    std::int64_t s1 = 0, s2 = 0;
    {
      const BF vs(in.scale), vz(static_cast<float>(in.zero_point)), qlo(-128.0f), qhi(127.0f);
      BF a1(0.0f), a2(0.0f);
      std::size_t n = 0;
      auto drain = [&] {
        a1.store_aligned(fbuf);
        a2.store_aligned(gbuf);
        for (std::size_t j = 0; j < L; ++j) {
          s1 += static_cast<std::int64_t>(fbuf[j]);
          s2 += static_cast<std::int64_t>(gbuf[j]);
        }
        a1 = BF(0.0f);
        a2 = BF(0.0f);
        n = 0;
      };
      for (std::size_t i = 0; i < full; i += L) {
        const BF t = xsimd::min(xsimd::max(round_small(BF::load_unaligned(xr + i) / vs) + vz, qlo), qhi);
        t.store_unaligned(qf.data() + i);
        a1 += t;
        a2 += t * t;
        if (++n == flush) drain();
      }
      drain();
      for (std::size_t i = full; i < cols; ++i) {
        const std::int8_t qi = quantize_int8(xr[i], in);
        qf[i] = qi;
        s1 += qi;
        s2 += static_cast<std::int32_t>(qi) * qi;
      }
    }
    const Int8RowStats st = int8_row_stats_from_sums(s1, s2, cols, in, eps);
    // The fp32 normalization and its range (the output range contains 0, as affine_int8_params widens it).
    float ylo = 0.0f, yhi = 0.0f;
    {
      const BF vmean(st.mean_q), vk(st.k);
      BF vlo(0.0f), vhi(0.0f);
      for (std::size_t i = 0; i < full; i += L) {
        const BF c = (BF::load_unaligned(qf.data() + i) - vmean) * vk;
        const BF t = xsimd::fma(c, BF::load_unaligned(gamma + i), BF::load_unaligned(beta + i));
        t.store_unaligned(v.data() + i);
        vlo = xsimd::min(vlo, t);
        vhi = xsimd::max(vhi, t);
      }
      vlo.store_aligned(fbuf);
      vhi.store_aligned(gbuf);
      for (std::size_t j = 0; j < L; ++j) {
        ylo = fbuf[j] < ylo ? fbuf[j] : ylo;
        yhi = gbuf[j] > yhi ? gbuf[j] : yhi;
      }
      for (std::size_t i = full; i < cols; ++i) {
        v[i] = int8_layer_norm_value(static_cast<std::int8_t>(qf[i]), st, gamma[i], beta[i]);
        ylo = v[i] < ylo ? v[i] : ylo;
        yhi = v[i] > yhi ? v[i] : yhi;
      }
    }
    const AffineInt8 out = affine_int8_params(ylo, yhi);
    // Requantize (layer_norm_int8_row's rounding) and dequantize: small integers, exact in floats.
    {
      const float inv_out = 1.0f / out.scale;
      const BF vinv(inv_out), vz(static_cast<float>(out.zero_point)), vs(out.scale), qlo(-128.0f), qhi(127.0f);
      for (std::size_t i = 0; i < full; i += L) {
        const BF t = xsimd::min(xsimd::max(round_small(BF::load_unaligned(v.data() + i) * vinv) + vz, qlo), qhi);
        (vs * (t - vz)).store_unaligned(xr + i);
      }
      for (std::size_t i = full; i < cols; ++i) {
        const float t = std::nearbyint(v[i] * inv_out) + static_cast<float>(out.zero_point);
        const float c = t < -128.0f ? -128.0f : t > 127.0f ? 127.0f : t;
        xr[i] = out.scale * (c - static_cast<float>(out.zero_point));
      }
    }
  }
}

}  // inline namespace STILE_XSIMD_ABI
}  // namespace stile
