#pragma once
// One GEMM weight of a checkpoint as the file stores it, read and validated, and its conversion to
// the LinearWeights of the format a ModelPrecision asks for. A weight is stored
//   * as a float tensor (F32, F16 or BF16) [N x K]: read as fp32 values (exact for F16 and BF16);
//   * or quantized (docs/quantized_checkpoint.md): I8 [N x K] `W` with F32 `W_scale` [N] (per channel, symmetric:
//     `W_zero_point` must be 0) or [1] (per tensor), and I32 `W_zero_point` [1]; the value of
//     W[n][k] is scale[n] * (W[n][k] - zero_point).
// Every field of a quantized weight is outside input: a missing companion, a wrong dtype or shape,
// a scale that is zero, negative, NaN, infinite, subnormal or above kMaxStoredInt8Scale, or a zero
// point outside I8's range is a stile::Error naming the file and the tensor.
//
// Conversion (to_linear): stored int8 to int8 keeps the stored values (repacked for the target's
// micro-kernel, never through fp32) and the stored scheme; any other pair goes through fp32 (int8
// dequantized; fp16 values are exact in fp32, so stored fp16 to fp16 is lossless).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "stile/core/file_error.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/int8_gemm.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/precision.hpp"
#include "stile/quant/int8_weights.hpp"

namespace stile {

// A scale above this is refused: with it, every dequantized value scale * (q - zp), |q - zp| <=
// 255, and every requantization's arithmetic stays finite in fp32.
inline constexpr float kMaxStoredInt8Scale = 1e30f;

inline constexpr std::string_view kInt8ScaleSuffix = "_scale";
inline constexpr std::string_view kInt8ZeroPointSuffix = "_zero_point";

struct StoredLinear {
  std::string name;  // the weight's tensor (for K and V stacked: "<key>+value")
  std::size_t rows = 0, cols = 0;
  bool quantized = false;
  std::vector<float> dense;          // not quantized: [rows x cols]
  std::vector<std::int8_t> q;        // quantized: [rows x cols]
  std::vector<float> scales;         // quantized: [rows] (per tensor: the one scale repeated)
  std::int32_t zero_point = 0;       // quantized: zw' of the stored form
  std::optional<Int8Scheme> scheme;  // the scheme it was stored with, kept through a dequantization

  std::vector<float> dequantized() const {
    if (!quantized) return dense;
    std::vector<float> out(rows * cols);
    for (std::size_t n = 0; n < rows; ++n) {
      for (std::size_t k = 0; k < cols; ++k) {
        out[n * cols + k] = scales[n] * static_cast<float>(std::int32_t{q[n * cols + k]} - zero_point);
      }
    }
    return out;
  }

  // Multiplies every value by s (Q's 1/sqrt(head_dim)): a quantized weight's scales, so its stored
  // values stay as they are.
  void scale_by(float s) {
    for (float& x : quantized ? scales : dense) x *= s;
  }
};

namespace stored_linear_detail {

inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += concat(i == 0 ? "" : ", ", shape[i]);
  return s + "]";
}

inline const TensorInfo& companion(const SafetensorsFile& f, const std::string& weight, std::string_view suffix,
                                   DType dtype) {
  const std::string name = concat(weight, suffix);
  const TensorInfo* t = f.find(name);
  if (t == nullptr) fail_in_file(f.path(), "I8 tensor '", weight, "' has no companion tensor '", name, "'");
  if (t->dtype != dtype) {
    fail_in_file(f.path(), "tensor '", name, "' has dtype ", dtype_name(t->dtype), " (want ", dtype_name(dtype), ")");
  }
  return *t;
}

}  // namespace stored_linear_detail

// Reads the weight `name` [rows x cols] of `file`, validated as above.
inline StoredLinear read_stored_linear(const SafetensorsFile& file, const std::string& name, std::size_t rows,
                                       std::size_t cols) {
  using namespace stored_linear_detail;
  const TensorInfo& t = file.tensor(name);
  if (t.shape.size() != 2 || t.shape[0] != static_cast<std::int64_t>(rows) ||
      t.shape[1] != static_cast<std::int64_t>(cols)) {
    fail_in_file(file.path(), "tensor '", name, "' has the wrong shape ", shape_text(t.shape),
                 " for config.json (want [", rows, ", ", cols, "])");
  }
  StoredLinear w;
  w.name = name;
  w.rows = rows;
  w.cols = cols;
  if (t.dtype != DType::I8) {
    if (!dtype_converts_to_f32(t.dtype)) {
      fail_in_file(file.path(), "tensor '", name, "' has dtype ", dtype_name(t.dtype),
                   "; a linear weight must be F32, F16, BF16 or I8");
    }
    w.dense = file.to_f32(t);
    return w;
  }
  w.quantized = true;
  const std::span<const std::byte> raw = file.bytes(t);
  w.q.resize(raw.size());
  if (!raw.empty()) std::memcpy(w.q.data(), raw.data(), raw.size());

  const TensorInfo& st = companion(file, name, kInt8ScaleSuffix, DType::F32);
  const std::size_t n_scales = st.num_elements();
  if (st.shape.size() != 1 || n_scales == 0 || (n_scales != rows && n_scales != 1)) {
    fail_in_file(file.path(), "tensor '", st.name, "' has shape ", shape_text(st.shape), " (want [", rows,
                 "] per channel or [1] per tensor)");
  }
  const std::vector<float> scales = file.to_f32(st);
  for (std::size_t i = 0; i < scales.size(); ++i) {
    try {
      validate_int8_scale(scales[i], st.name, i);
    } catch (const Error& e) {
      fail_in_file(file.path(), without_prefix(e.what()));
    }
    if (scales[i] > kMaxStoredInt8Scale) {
      fail_in_file(file.path(), "int8 weights '", st.name, "': scale[", i, "] = ", float_text(scales[i]),
                   " is out of range (at most ", float_text(kMaxStoredInt8Scale), ")");
    }
  }
  const bool per_channel = n_scales == rows && rows != 1;
  w.scheme = per_channel ? Int8Scheme::kSymmetricPerChannel : Int8Scheme::kAsymmetricPerTensor;
  w.scales = per_channel ? scales : std::vector<float>(rows, scales[0]);

  const TensorInfo& zt = companion(file, name, kInt8ZeroPointSuffix, DType::I32);
  if (zt.num_elements() != 1 || zt.shape.size() > 1) {
    fail_in_file(file.path(), "tensor '", zt.name, "' has shape ", shape_text(zt.shape), " (want [1])");
  }
  const std::span<const std::byte> zb = file.bytes(zt);
  const std::uint32_t bits =
      std::uint32_t(zb[0]) | std::uint32_t(zb[1]) << 8 | std::uint32_t(zb[2]) << 16 | std::uint32_t(zb[3]) << 24;
  const auto zp = static_cast<std::int32_t>(bits);
  if (zp < std::numeric_limits<std::int8_t>::min() || zp > std::numeric_limits<std::int8_t>::max()) {
    fail_in_file(file.path(), "tensor '", zt.name, "': zero point ", zp, " is outside I8's range [-128, 127]");
  }
  if (per_channel && zp != 0) {
    fail_in_file(file.path(), "tensor '", zt.name, "': zero point ", zp,
                 " with per-channel scales (the per-channel scheme is symmetric: it must be 0)");
  }
  w.zero_point = zp;
  return w;
}

// a's rows, then b's (K and V into one [2d x d] weight). Two quantized weights of one scheme and
// one zero point stay quantized (the kernel reads a scale per row); otherwise both go to fp32,
// keeping a stored scheme for the requantization.
inline StoredLinear stack_rows(StoredLinear a, StoredLinear b) {
  require(a.cols == b.cols, "stack_rows: different widths");
  StoredLinear out;
  out.name = concat(a.name, "+", b.name);
  out.rows = a.rows + b.rows;
  out.cols = a.cols;
  out.scheme = a.scheme ? a.scheme : b.scheme;
  if (a.quantized && b.quantized && a.scheme == b.scheme && a.zero_point == b.zero_point) {
    out.quantized = true;
    out.q = std::move(a.q);
    out.q.insert(out.q.end(), b.q.begin(), b.q.end());
    out.scales = std::move(a.scales);
    out.scales.insert(out.scales.end(), b.scales.begin(), b.scales.end());
    out.zero_point = a.zero_point;
    return out;
  }
  out.dense = a.dequantized();
  const std::vector<float> bd = b.dequantized();
  out.dense.insert(out.dense.end(), bd.begin(), bd.end());
  return out;
}

// Rows [begin, begin + count) of w (ModernBERT's Q of its stacked Wqkv, say), named `name`.
inline StoredLinear slice_rows(const StoredLinear& w, std::size_t begin, std::size_t count, std::string name) {
  require(begin + count <= w.rows, "slice_rows: rows outside the weight");
  StoredLinear out;
  out.name = std::move(name);
  out.rows = count;
  out.cols = w.cols;
  out.quantized = w.quantized;
  out.zero_point = w.zero_point;
  out.scheme = w.scheme;
  const auto cut = [&](const auto& v, std::size_t width) {
    return std::decay_t<decltype(v)>(v.begin() + static_cast<std::ptrdiff_t>(begin * width),
                                     v.begin() + static_cast<std::ptrdiff_t>((begin + count) * width));
  };
  if (w.quantized) {
    out.q = cut(w.q, w.cols);
    out.scales = cut(w.scales, 1);
  } else {
    out.dense = cut(w.dense, w.cols);
  }
  return out;
}

// The weight in `format`. fp32 and fp16 from fp32 values (dequantized if stored int8); int8 from
// stored int8 values as they are, in the stored scheme, when the target's weight range holds them;
// else (and from float values) quantized with quantize_int8, in the stored scheme if any, else
// `scheme`. Errors name the tensor; the caller adds the file.
inline LinearWeights to_linear(const StoredLinear& w, LinearFormat format, Int8Scheme scheme) {
  if (format == LinearFormat::kInt8 && w.quantized) {
    const Int8Packing packing = int8_packing();
    // A target with 7-bit weights (x86 without VNNI: int8_weight_max() == 63) saturates on stored
    // values beyond [-64, 63]; 8-bit stored weights are then requantized from their dequantized
    // values to the 7-bit range (one more rounding; a file quantized for 7 bits is used as is).
    bool fits = true;
    if (packing.weight_max < 127) {
      fits = w.zero_point >= -(packing.weight_max + 1) && w.zero_point <= packing.weight_max;
      for (std::size_t i = 0; fits && i < w.q.size(); ++i) fits = w.q[i] >= -64 && w.q[i] <= 63;
    }
    if (fits) {
      return LinearWeights::from(pack_int8(w.q.data(), w.rows, w.cols, w.scales.data(), w.zero_point,
                                           w.scheme.value_or(scheme), w.name, packing));
    }
  }
  const std::vector<float> dense = w.dequantized();
  return LinearWeights::make(DenseF32(dense.data(), w.rows, w.cols), format, w.scheme.value_or(scheme), w.name);
}

}  // namespace stile
