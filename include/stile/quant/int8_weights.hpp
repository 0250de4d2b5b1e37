#pragma once
// int8 weights for the u8 x s8 GEMM (kernels/int8_gemm.hpp): quantization of an fp32 weight
// matrix W [N x K] (a PyTorch Linear weight, row-major), its validation, and the packed layout the
// integer micro-kernels read. No SIMD here: packing is done once, at load.
//
// Schemes (Int8Scheme):
//   kSymmetricPerChannel (default): w ~= scale[n] * q, q in [-qmax, qmax], zero point 0.
//   kAsymmetricPerTensor (Arm Compute Library's BERT scheme): w ~= scale * (u - zw), u unsigned in
//     [0, 2 qmax + 1], one scale and one zero point for the whole tensor.
// The stored form is always signed, so that one kernel serves both: the asymmetric scheme stores
// s = u - (qmax + 1) and the effective zero point zw' = zw - (qmax + 1), so u - zw == s - zw'.
// (With qmax = 127 this is the usual s = u - 128.) The per-tensor scale is broadcast into
// scales[n] for every row, so the kernel always reads a per-output-column scale.
//
// qmax is the weight range of the target the GEMM runs on (Int8Packing::weight_max, from
// stile::int8_packing() in kernels/int8_gemm.hpp): 127 where the CPU has a u8 x s8 -> s32 dot
// product (AVX-512 VNNI, AVX-VNNI) or the kernel widens exactly (NEON, scalar); 63 on AVX2 / SSE4
// without VNNI, whose vpmaddubsw sums two u8 x s8 products in saturating s16: 2 * 255 * 127
// overflows it, 2 * 255 * 64 = 32640 does not. This is ONNX Runtime's `reduce_range` and oneDNN's
// 7-bit weights on non-VNNI x86.
//
// Packed layout (panel width nr, K padded to Kp = round_up(K, 4) with zeros):
//   packed[((p * (Kp / 4) + g) * nr + j) * 4 + i] = stored(p * nr + j, 4 g + i)
// i.e. panels of nr output channels, each [Kp/4][nr][4]: one k-group of 4 bytes per output, the
// operand layout of vpdpbusd / sdot (4 consecutive k of one column in one 32-bit lane). Rows past
// N are zero. scales and col_sums are padded with 0 to a whole number of panels, so a kernel may
// load a full panel's worth of them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"  // float_text

namespace stile {

enum class Int8Scheme : std::uint8_t { kSymmetricPerChannel, kAsymmetricPerTensor };

// How the weights are packed for the kernel of one target (see kernels/int8_gemm.hpp).
struct Int8Packing {
  std::size_t nr = 0;           // panel width: output channels per panel
  std::int32_t weight_max = 0;  // qmax: 127, or 63 (7-bit weights) where vpmaddubsw could saturate
  // The top code of gemm_int8's activations (kernels/int8_gemm.hpp): 255, or 127 where the kernel
  // adds two vpmaddubsw results in 16 bits (x86 without a dot product).
  std::int32_t activation_max = 255;
};

inline constexpr std::size_t kInt8KGroup = 4;  // k values per 32-bit lane of the packed layout

inline constexpr std::size_t int8_padded_k(std::size_t K) { return (K + kInt8KGroup - 1) / kInt8KGroup * kInt8KGroup; }

// A non-owning view of int8 weights packed for the kernel (see the layout above).
struct Int8Matrix {
  const std::int8_t* packed = nullptr;
  const float* scales = nullptr;           // [round_up(N, nr)]: per output row (per tensor: broadcast)
  const std::int32_t* col_sums = nullptr;  // [round_up(N, nr)]: sum_k stored(n, k)
  std::int32_t zero_point = 0;             // zw' of the stored form (0 for the symmetric scheme)
  std::size_t n_rows = 0;                  // N: outputs
  std::size_t n_cols = 0;                  // K: inputs
  std::size_t nr = 0;                      // panel width
  std::int32_t weight_max = 127;           // qmax it was quantized with
  Int8Scheme scheme = Int8Scheme::kSymmetricPerChannel;

  std::size_t rows() const noexcept { return n_rows; }
  std::size_t cols() const noexcept { return n_cols; }
  std::size_t padded_cols() const noexcept { return int8_padded_k(n_cols); }
  std::size_t panels() const noexcept { return nr == 0 ? 0 : (n_rows + nr - 1) / nr; }
  // The stored s8 value of W[n][k] and its fp32 value scale[n] * (stored - zw').
  std::int8_t stored(std::size_t n, std::size_t k) const noexcept {
    const std::size_t p = n / nr, j = n % nr, g = k / kInt8KGroup, i = k % kInt8KGroup;
    return packed[((p * (padded_cols() / kInt8KGroup) + g) * nr + j) * kInt8KGroup + i];
  }
  float dequantized(std::size_t n, std::size_t k) const noexcept {
    return scales[n] * static_cast<float>(std::int32_t{stored(n, k)} - zero_point);
  }
};

// Owns the arrays an Int8Matrix views. Move-only (the view points into the buffers it owns).
struct Int8Weights {
  AlignedBuffer<std::int8_t> packed;
  std::vector<float> scales;
  std::vector<std::int32_t> col_sums;
  std::int32_t zero_point = 0;
  Int8Matrix view;

  Int8Weights() = default;
  Int8Weights(Int8Weights&&) noexcept = default;
  Int8Weights& operator=(Int8Weights&&) noexcept = default;
  std::size_t bytes() const noexcept {
    return packed.size() + scales.size() * sizeof(float) + col_sums.size() * sizeof(std::int32_t);
  }
};

// A usable scale: finite, positive and normal (a subnormal scale loses the precision of its
// quotients and its reciprocal overflows). Throws naming the tensor, the index and the value.
inline void validate_int8_scale(float scale, std::string_view tensor_name, std::size_t index) {
  if (!(std::isfinite(scale) && scale >= std::numeric_limits<float>::min())) {
    throw Error("stile: int8 weights '" + std::string(tensor_name) + "': scale[" + std::to_string(index) +
                "] = " + float_text(scale) + " (must be finite, positive and normal)");
  }
}

// Checks what the kernel relies on: the arrays present, a packing, every scale usable (O(N)) and a
// zero point the stored range can hold. Called by quantize_int8 and by gemm_int8 on every call.
inline void validate(const Int8Matrix& w, std::string_view tensor_name) {
  const std::string name(tensor_name);
  if (w.n_rows == 0 || w.n_cols == 0) return;
  if (w.packed == nullptr || w.scales == nullptr || w.col_sums == nullptr) {
    throw Error("stile: int8 weights '" + name + "': missing packed data, scales or column sums");
  }
  if (w.nr == 0) throw Error("stile: int8 weights '" + name + "': panel width 0");
  if (w.weight_max != 127 && w.weight_max != 63) {
    throw Error("stile: int8 weights '" + name + "': weight range " + std::to_string(w.weight_max) +
                " (must be 127 or 63)");
  }
  // A signed accumulation of K products of |(a - za)(w - zw')| <= 255 * 255 stays in int32.
  if (w.n_cols > 32768) {
    throw Error("stile: int8 weights '" + name + "': K = " + std::to_string(w.n_cols) + " > 32768");
  }
  const std::int32_t zmin = w.scheme == Int8Scheme::kSymmetricPerChannel ? 0 : -(w.weight_max + 1);
  const std::int32_t zmax = w.scheme == Int8Scheme::kSymmetricPerChannel ? 0 : w.weight_max;
  if (w.zero_point < zmin || w.zero_point > zmax) {
    throw Error("stile: int8 weights '" + name + "': zero point " + std::to_string(w.zero_point) + " out of range [" +
                std::to_string(zmin) + ", " + std::to_string(zmax) + "]");
  }
  for (std::size_t n = 0; n < w.n_rows; ++n) {
    if (!(std::isfinite(w.scales[n]) && w.scales[n] >= std::numeric_limits<float>::min())) {
      validate_int8_scale(w.scales[n], tensor_name, n);
    }
  }
}

// std::nearbyint in the default rounding mode (to nearest, ties to even) for |x| < 2^22, inline
// and branch-free so that a loop of it vectorizes: on baseline x86-64 (no SSE4.1 roundss)
// std::nearbyint is a libm call per value, which made quantize_int8 most of a mapped layer's
// conversion. Adding 1.5 * 2^23 leaves no fraction bits, so that addition rounds x (ties to
// even: the magic number is even) and the subtraction is exact.
inline float round_half_even_small(float x) {
#if defined(__FAST_MATH__)
  return std::nearbyint(x);  // -ffast-math may fold (x + kMagic) - kMagic into x
#else
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (x + kMagic) - kMagic;
#endif
}

// w's storage made zeroed storage for `panels` panels of nr outputs by Kp (padded) inputs: the
// packed bytes, and a scale and a column sum per output (padding outputs keep 0). Keeps what w
// has allocated when it is large enough (a decode per request reuses its buffers).
inline void zero_int8_weights(Int8Weights& w, std::size_t panels, std::size_t Kp, std::size_t nr) {
  w.packed.resize(panels * Kp * nr);
  w.packed.zero();
  w.scales.assign(panels * nr, 0.0f);
  w.col_sums.assign(panels * nr, 0);
}
inline Int8Weights zeroed_int8_weights(std::size_t panels, std::size_t Kp, std::size_t nr) {
  Int8Weights out;
  zero_int8_weights(out, panels, Kp, nr);
  return out;
}

// Quantizes W [N x K] (row stride ld >= K) with `scheme` and packs it for `packing` (the target's:
// kernels/int8_gemm.hpp has the overload that asks the CPU). A non-finite weight, or one whose
// scale would be unusable, throws naming the tensor. An all-zero row (or tensor) gets scale 1.
inline Int8Weights quantize_int8(const float* w, std::size_t N, std::size_t K, std::size_t ld, Int8Scheme scheme,
                                 std::string_view tensor_name, Int8Packing packing) {
  const std::string name(tensor_name);
  require(w != nullptr || N == 0 || K == 0, "quantize_int8: '" + name + "': no weights");
  require(ld >= K, "quantize_int8: '" + name + "': ld < K");
  require(packing.nr > 0 && (packing.weight_max == 127 || packing.weight_max == 63),
          "quantize_int8: '" + name + "': bad packing");
  const std::int32_t qmax = packing.weight_max;
  const std::size_t nr = packing.nr, Kp = int8_padded_k(K), panels = (N + nr - 1) / nr;
  Int8Weights out = zeroed_int8_weights(panels, Kp, nr);

  // The stored value of one weight; `q` rounds half to even (as nearbyint), as the kernels do.
  float tensor_scale = 1.0f, tensor_inv = 1.0f;
  std::int32_t zw = 0, offset = 0, lo = -qmax, hi = qmax;
  if (scheme == Int8Scheme::kAsymmetricPerTensor) {
    float mn = 0.0f, mx = 0.0f;  // the range always contains 0, so 0 is exact
    for (std::size_t n = 0; n < N; ++n) {
      for (std::size_t k = 0; k < K; ++k) {
        const float x = w[n * ld + k];
        if (!std::isfinite(x)) {
          throw Error("stile: quantize_int8: '" + name + "': weight [" + std::to_string(n) + "][" + std::to_string(k) +
                      "] = " + float_text(x));
        }
        mn = std::min(mn, x);
        mx = std::max(mx, x);
      }
    }
    const std::int32_t qrange = 2 * qmax + 1;  // 255 (or 127)
    if (mx > mn) {
      tensor_scale = (mx - mn) / static_cast<float>(qrange);
      validate_int8_scale(tensor_scale, tensor_name, 0);
      tensor_inv = 1.0f / tensor_scale;
      zw = std::clamp(static_cast<std::int32_t>(std::nearbyint(-mn / tensor_scale)), 0, qrange);
    }
    offset = qmax + 1;
    lo = 0;
    hi = qrange;
  }
  std::vector<std::int8_t> row_stored(K);
  for (std::size_t n = 0; n < N; ++n) {
    const float* row = w + n * ld;
    float scale = tensor_scale, inv = tensor_inv;
    if (scheme == Int8Scheme::kSymmetricPerChannel) {
      // max |x| over the bits of |x|, whose integer order is their float order, Inf and NaN above
      // every finite value: an integer max that vectorizes (a float one does not, for NaN).
      std::uint32_t amax_bits = 0;
      for (std::size_t k = 0; k < K; ++k) {
        amax_bits = std::max(amax_bits, std::bit_cast<std::uint32_t>(row[k]) & 0x7fffffffu);
      }
      const float amax = std::bit_cast<float>(amax_bits);
      for (std::size_t k = 0; !std::isfinite(amax) && k < K; ++k) {
        if (!std::isfinite(row[k])) {
          throw Error("stile: quantize_int8: '" + name + "': weight [" + std::to_string(n) + "][" + std::to_string(k) +
                      "] = " + float_text(row[k]));
        }
      }
      scale = amax > 0.0f ? amax / static_cast<float>(qmax) : 1.0f;
      validate_int8_scale(scale, tensor_name, n);
      inv = 1.0f / scale;
    }
    out.scales[n] = scale;
    // The row's stored values first (a loop that vectorizes: |row[k] * inv| <= 2 qmax + 1 < 2^22
    // in either scheme), then its k-groups of 4 into the panel.
    std::int32_t sum = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const std::int32_t q = std::clamp(static_cast<std::int32_t>(round_half_even_small(row[k] * inv)) + zw, lo, hi);
      const auto s = static_cast<std::int8_t>(q - offset);
      row_stored[k] = s;
      sum += s;
    }
    std::int8_t* panel = out.packed.data() + (n / nr) * Kp * nr + (n % nr) * kInt8KGroup;
    const std::size_t whole = K / kInt8KGroup * kInt8KGroup;
    for (std::size_t k = 0; k < whole; k += kInt8KGroup) {
      std::memcpy(panel + (k / kInt8KGroup) * nr * kInt8KGroup, row_stored.data() + k, kInt8KGroup);
    }
    if (whole < K) std::memcpy(panel + (whole / kInt8KGroup) * nr * kInt8KGroup, row_stored.data() + whole, K - whole);
    out.col_sums[n] = sum;
  }
  out.zero_point = zw - offset;
  out.view =
      Int8Matrix{out.packed.data(), out.scales.data(), out.col_sums.data(), out.zero_point, N, K, nr, qmax, scheme};
  validate(out.view, tensor_name);
  return out;
}

// Packs int8 values already quantized (a stored checkpoint's: model/stored_linear.hpp) for
// `packing`, without touching their values: stored [N x K] row-major, scales [N] (per tensor:
// the one scale repeated), zero_point the stored form's zw' (0 for the symmetric scheme). The
// caller checks that the values fit packing.weight_max (a 7-bit target needs them in [-64, 63]);
// scales and the zero point are validated here, naming the tensor.
inline Int8Weights pack_int8(const std::int8_t* stored, std::size_t N, std::size_t K, const float* scales,
                             std::int32_t zero_point, Int8Scheme scheme, std::string_view tensor_name,
                             Int8Packing packing) {
  const std::string name(tensor_name);
  require((stored != nullptr && scales != nullptr) || N == 0 || K == 0, "pack_int8: '" + name + "': no weights");
  require(packing.nr > 0 && (packing.weight_max == 127 || packing.weight_max == 63),
          "pack_int8: '" + name + "': bad packing");
  const std::size_t nr = packing.nr, Kp = int8_padded_k(K), panels = (N + nr - 1) / nr;
  Int8Weights out = zeroed_int8_weights(panels, Kp, nr);
  for (std::size_t n = 0; n < N; ++n) {
    out.scales[n] = scales[n];
    std::int8_t* panel = out.packed.data() + (n / nr) * Kp * nr;
    const std::size_t j = n % nr;
    std::int32_t sum = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const std::int8_t s = stored[n * K + k];
      panel[((k / kInt8KGroup) * nr + j) * kInt8KGroup + k % kInt8KGroup] = s;
      sum += s;
    }
    out.col_sums[n] = sum;
  }
  out.zero_point = zero_point;
  out.view = Int8Matrix{
      out.packed.data(), out.scales.data(), out.col_sums.data(), zero_point, N, K, nr, packing.weight_max, scheme};
  validate(out.view, tensor_name);
  return out;
}

}  // namespace stile
