#pragma once
// How a BERT layer is cut into M shards (docs/shards.md), and the byte layout of one shard
// version (one shard at one bitwidth) as the store holds it and the engine reads it.
//
// Shard i of a layer with H heads of head_dim, hidden d and FFN width d_ff:
//   heads [i H/M, (i+1) H/M) of attention: rows [i d/M, (i+1) d/M) of W_q, W_k and W_v (with
//   their biases) and the same columns of W_o; FFN neurons [i d_ff/M, (i+1) d_ff/M): those rows
//   of W_1 (with their biases) and those columns of W_2.
// The biases of W_o and W_2 and both LayerNorms are summed over all shards, so they stay whole,
// fp32, in the layer's resident block.
//
// A shard version's bytes: the six matrices below, each as its packed slabs
// (quant/packed_layout.hpp), then each matrix's outlier keys and outlier values, then the fp32
// biases of Q, K, V and FFN1 slices; every section starts 64-byte aligned (SIMD loads), offsets
// relative to the start of the version. The dictionary (centroids) of the version is kept in the
// store's manifest, not here.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "stile/core/error.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile {

enum class ShardMatrix : std::uint8_t { kQuery, kKey, kValue, kAttnOut, kFfnIn, kFfnOut };
inline constexpr std::size_t kShardMatrices = 6;
inline constexpr std::array<const char*, kShardMatrices> kShardMatrixNames = {
    "query", "key", "value", "attention_output", "ffn_in", "ffn_out"};

// The dimensions of one shard of a layer.
struct ShardShape {
  std::size_t hidden = 0;     // d
  std::size_t attn_rows = 0;  // d / M: rows of each of Q, K, V (= columns of W_o)
  std::size_t heads = 0;      // H / M
  std::size_t ffn_rows = 0;   // d_ff / M: rows of W_1 (= columns of W_2)

  static ShardShape of(const EncoderConfig& c, std::size_t shards) {
    require(shards > 0 && c.num_heads % shards == 0 && c.intermediate % shards == 0,
            "shard layout: " + std::to_string(shards) + " shards do not divide the model's " +
                std::to_string(c.num_heads) + " heads and " + std::to_string(c.intermediate) + " FFN neurons evenly");
    return {c.hidden, c.hidden / shards, c.num_heads / shards, c.intermediate / shards};
  }

  std::size_t rows(ShardMatrix m) const noexcept {
    switch (m) {
      case ShardMatrix::kQuery:
      case ShardMatrix::kKey:
      case ShardMatrix::kValue: return attn_rows;
      case ShardMatrix::kAttnOut:
      case ShardMatrix::kFfnOut: return hidden;
      case ShardMatrix::kFfnIn: return ffn_rows;
    }
    return 0;
  }
  std::size_t cols(ShardMatrix m) const noexcept {
    switch (m) {
      case ShardMatrix::kQuery:
      case ShardMatrix::kKey:
      case ShardMatrix::kValue:
      case ShardMatrix::kFfnIn: return hidden;
      case ShardMatrix::kAttnOut: return attn_rows;
      case ShardMatrix::kFfnOut: return ffn_rows;
    }
    return 0;
  }
  // fp32 biases carried by a shard: Q, K, V slices, then the FFN1 slice.
  std::size_t bias_floats() const noexcept { return 3 * attn_rows + ffn_rows; }
  std::size_t weights() const noexcept { return 4 * attn_rows * hidden + 2 * ffn_rows * hidden; }
};

inline constexpr std::size_t kShardSectionAlign = 64;

// Byte offsets of every section of one shard version.
struct ShardVersionLayout {
  struct Section {
    std::size_t offset = 0;
    std::size_t size = 0;
  };
  std::array<Section, kShardMatrices> packed, outlier_keys, outlier_values;
  Section biases;
  std::size_t total = 0;  // bytes of the version (the last section's end, 64-byte aligned)
};

inline ShardVersionLayout shard_version_layout(const ShardShape& shape, unsigned bits,
                                               const std::array<std::uint32_t, kShardMatrices>& outliers) {
  quant::require_supported_bits(bits);
  ShardVersionLayout layout;
  std::size_t at = 0;
  auto place = [&](std::size_t size) {
    ShardVersionLayout::Section s{at, size};
    at = (at + size + kShardSectionAlign - 1) / kShardSectionAlign * kShardSectionAlign;
    return s;
  };
  for (std::size_t m = 0; m < kShardMatrices; ++m) {
    const auto which = static_cast<ShardMatrix>(m);
    layout.packed[m] = place(quant::packed_bytes(shape.rows(which), shape.cols(which), bits));
  }
  for (std::size_t m = 0; m < kShardMatrices; ++m) {
    layout.outlier_keys[m] = place(outliers[m] * sizeof(std::uint32_t));
    layout.outlier_values[m] = place(outliers[m] * sizeof(float));
  }
  layout.biases = place(shape.bias_floats() * sizeof(float));
  layout.total = at;
  return layout;
}

}  // namespace stile
