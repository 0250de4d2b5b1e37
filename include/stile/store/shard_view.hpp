#pragma once
// A view of one shard version's bytes (store/shard_layout.hpp) as the six GEMM weight matrices
// and the biases it carries. Nothing is copied or decoded: the GEMM decodes panels straight from
// these bytes. parse() checks everything the decoder relies on (sizes, alignment, dictionary
// length, outlier keys ascending and inside their matrix), so a view over bad bytes is an error,
// never an out-of-bounds read.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "stile/core/error.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/store/shard_layout.hpp"

namespace stile {

struct ShardView {
  unsigned bits = 32;
  std::array<DictMatrix, kShardMatrices> matrices{};
  const float* query_bias = nullptr;   // [attn_rows]
  const float* key_bias = nullptr;     // [attn_rows]
  const float* value_bias = nullptr;   // [attn_rows]
  const float* ffn_in_bias = nullptr;  // [ffn_rows]

  const DictMatrix& matrix(ShardMatrix m) const noexcept { return matrices[static_cast<std::size_t>(m)]; }

  // bytes: the version's bytes, 64-byte aligned; dictionary: its 2^bits centroids (empty at 32
  // bits); both must outlive the view. `what` names the version in errors ("store.stile: layer 3
  // shard 5 at 4 bits").
  static ShardView parse(std::span<const std::byte> bytes, const ShardShape& shape, unsigned bits,
                         std::span<const float> dictionary, const std::array<std::uint32_t, kShardMatrices>& outliers,
                         const std::string& what) {
    auto fail = [&](const std::string& problem) { throw Error("stile: " + what + ": " + problem); };
    if (!quant::is_supported_bits(bits)) fail("unsupported bitwidth " + std::to_string(bits));
    const std::size_t centroids = bits == 32 ? 0 : std::size_t{1} << bits;
    if (dictionary.size() != centroids) {
      fail("the dictionary has " + std::to_string(dictionary.size()) + " entries, expected " +
           std::to_string(centroids));
    }
    for (std::size_t m = 0; m < kShardMatrices; ++m) {
      const auto which = static_cast<ShardMatrix>(m);
      if (outliers[m] > shape.rows(which) * shape.cols(which) || (bits == 32 && outliers[m] != 0)) {
        fail(std::string("impossible outlier count ") + std::to_string(outliers[m]) + " for " + kShardMatrixNames[m]);
      }
    }
    const ShardVersionLayout layout = shard_version_layout(shape, bits, outliers);
    if (bytes.size() != layout.total) {
      fail("holds " + std::to_string(bytes.size()) + " bytes, the layout needs " + std::to_string(layout.total));
    }
    if (reinterpret_cast<std::uintptr_t>(bytes.data()) % kShardSectionAlign != 0) {
      fail("the bytes are not 64-byte aligned in memory");
    }
    const std::byte* base = bytes.data();
    ShardView v;
    v.bits = bits;
    for (std::size_t m = 0; m < kShardMatrices; ++m) {
      const auto which = static_cast<ShardMatrix>(m);
      DictMatrix& d = v.matrices[m];
      d.packed = reinterpret_cast<const std::uint8_t*>(base + layout.packed[m].offset);
      d.centroids = dictionary.empty() ? nullptr : dictionary.data();
      d.outlier_keys = reinterpret_cast<const std::uint32_t*>(base + layout.outlier_keys[m].offset);
      d.outlier_values = reinterpret_cast<const float*>(base + layout.outlier_values[m].offset);
      d.n_outliers = outliers[m];
      d.n_rows = shape.rows(which);
      d.n_cols = shape.cols(which);
      d.bits = bits;
      const std::uint64_t limit = quant::row_groups(d.n_rows) * d.n_cols * quant::kGroupRows;
      for (std::size_t i = 0; i < d.n_outliers; ++i) {
        const std::uint32_t key = d.outlier_keys[i];
        if (key >= limit || quant::outlier_row(key, d.n_cols) >= d.n_rows || (i > 0 && key <= d.outlier_keys[i - 1])) {
          fail(std::string("outlier ") + std::to_string(i) + " of " + kShardMatrixNames[m] +
               " has a bad position (out of range or not ascending)");
        }
      }
    }
    const float* bias = reinterpret_cast<const float*>(base + layout.biases.offset);
    v.query_bias = bias;
    v.key_bias = bias + shape.attn_rows;
    v.value_bias = bias + 2 * shape.attn_rows;
    v.ffn_in_bias = bias + 3 * shape.attn_rows;
    return v;
  }
};

}  // namespace stile
