#pragma once
// The number format of each operator of an encoder layer. A later search (processor and precision
// per operator) picks a LayerPrecision per layer; the named presets are starting points:
//   fp32   every operator in fp32, exact GELU (the reference);
//   fp16   fp16 weights (fp32 accumulate) for the linear layers, the rest fp32;
//   int8   the Arm Compute Library BERT recipe: int8 linear layers (u8 activations quantized per
//          row on the fly x s8 weights), int8 LayerNorm, erf-approximated GELU, fp32 softmax;
//   ibert  I-BERT's integer-only operators wherever I-BERT has one: int8 linear layers, integer
//          GELU, softmax and LayerNorm.
// The attention products (Q K^T and P V) are fp32 in every preset.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/quant/int8_weights.hpp"

namespace stile {

enum class LinearFormat : std::uint8_t { kF32, kF16, kInt8 };
enum class NormFormat : std::uint8_t { kF32, kInt8, kInteger };
enum class GeluFormat : std::uint8_t { kExact, kErfApprox, kInteger };
enum class SoftmaxFormat : std::uint8_t { kF32, kInteger };

// The linear layers of an encoder layer, in the order the layer runs them.
enum class LinearOp : std::uint8_t { kQkv, kAttnOut, kFfnIn, kFfnOut };
inline constexpr std::size_t kLinearOps = 4;

// The formats of the operators that are not linear layers (the linear layers' formats are their
// weights' own: ops/linear.hpp).
struct OpFormats {
  NormFormat layer_norm = NormFormat::kF32;  // both LayerNorms of the layer
  GeluFormat gelu = GeluFormat::kExact;
  SoftmaxFormat softmax = SoftmaxFormat::kF32;
  bool operator==(const OpFormats&) const = default;
};

struct LayerPrecision {
  std::array<LinearFormat, kLinearOps> linear{LinearFormat::kF32, LinearFormat::kF32, LinearFormat::kF32,
                                              LinearFormat::kF32};
  OpFormats ops;

  LinearFormat format(LinearOp op) const noexcept { return linear[static_cast<std::size_t>(op)]; }
  bool operator==(const LayerPrecision&) const = default;
};

// The precision of a whole model: one LayerPrecision per encoder layer, the embedding LayerNorm's
// format, and the int8 weight scheme.
struct ModelPrecision {
  std::vector<LayerPrecision> layers;  // empty: every layer as `uniform`
  LayerPrecision uniform;
  NormFormat embedding_layer_norm = NormFormat::kF32;
  Int8Scheme int8_scheme = Int8Scheme::kSymmetricPerChannel;  // int8 linear layers' weights

  const LayerPrecision& layer(std::size_t l) const { return layers.empty() ? uniform : layers.at(l); }
};

inline const char* to_string(LinearFormat f) {
  switch (f) {
    case LinearFormat::kF32: return "fp32";
    case LinearFormat::kF16: return "fp16";
    case LinearFormat::kInt8: return "int8";
  }
  return "?";
}
inline const char* to_string(NormFormat f) {
  switch (f) {
    case NormFormat::kF32: return "fp32";
    case NormFormat::kInt8: return "int8";
    case NormFormat::kInteger: return "integer";
  }
  return "?";
}
inline const char* to_string(GeluFormat f) {
  switch (f) {
    case GeluFormat::kExact: return "exact";
    case GeluFormat::kErfApprox: return "erf-approx";
    case GeluFormat::kInteger: return "integer";
  }
  return "?";
}
inline const char* to_string(SoftmaxFormat f) { return f == SoftmaxFormat::kF32 ? "fp32" : "integer"; }

inline constexpr std::array<std::string_view, 4> kPrecisionPresets{"fp32", "fp16", "int8", "ibert"};

// One of kPrecisionPresets; anything else is a stile::Error listing them.
inline ModelPrecision precision_preset(std::string_view name) {
  ModelPrecision p;
  LayerPrecision& u = p.uniform;
  if (name == "fp32") return p;
  if (name == "fp16") {
    u.linear.fill(LinearFormat::kF16);
    return p;
  }
  if (name == "int8") {
    u.linear.fill(LinearFormat::kInt8);
    u.ops.layer_norm = NormFormat::kInt8;
    u.ops.gelu = GeluFormat::kErfApprox;
    p.embedding_layer_norm = NormFormat::kInt8;
    return p;
  }
  if (name == "ibert") {
    u.linear.fill(LinearFormat::kInt8);
    u.ops.layer_norm = NormFormat::kInteger;
    u.ops.gelu = GeluFormat::kInteger;
    u.ops.softmax = SoftmaxFormat::kInteger;
    p.embedding_layer_norm = NormFormat::kInteger;
    return p;
  }
  std::string known;
  for (std::string_view k : kPrecisionPresets) known += (known.empty() ? "" : ", ") + std::string(k);
  throw Error("unknown precision '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace stile
