#pragma once
// A clustered low-rank word-embedding table (MCUBERT's compressed embedding, docs/format.md
// "Low-rank word embeddings"): the tokens are split into clusters by frequency; a cluster is
// either kept full (its rows as they are) or stored as U (tokens x r) and V (r x d), row t of the
// table being U[t] V. This header is what the runtime needs: how one row of U is coded in bytes
// (fp32, or int8 with a per-row scale) and the reconstruction of a row (one GEMV of r x d). The
// offline factorization that makes such a table is quant/lowrank_factorize.hpp (Eigen).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace stile::quant {

// How one row of U (r values) is stored.
enum class WordRowCodec : std::uint8_t {
  kF32,   // r fp32 values: 4 r bytes
  kInt8,  // an fp32 scale, then r int8 values q (value = scale * q): 4 + r bytes
};

inline std::string_view word_row_codec_name(WordRowCodec c) noexcept { return c == WordRowCodec::kF32 ? "f32" : "int8"; }
inline std::optional<WordRowCodec> parse_word_row_codec(std::string_view name) noexcept {
  if (name == "f32") return WordRowCodec::kF32;
  if (name == "int8") return WordRowCodec::kInt8;
  return std::nullopt;
}

// The bytes of one stored row of `values` values.
inline constexpr std::size_t word_row_bytes(WordRowCodec c, std::size_t values) noexcept {
  return c == WordRowCodec::kF32 ? 4 * values : 4 + values;
}

// Codes `u` into out (word_row_bytes(c, u.size()) bytes). int8: symmetric, scale = max |u| / 127
// (0 for a zero row), values rounded to nearest.
inline void encode_word_row(WordRowCodec c, std::span<const float> u, std::span<std::byte> out) noexcept {
  if (c == WordRowCodec::kF32) {
    std::memcpy(out.data(), u.data(), u.size_bytes());
    return;
  }
  float most = 0.0f;
  for (const float x : u) most = std::max(most, std::abs(x));
  const float scale = most / 127.0f;
  std::memcpy(out.data(), &scale, sizeof scale);
  for (std::size_t k = 0; k < u.size(); ++k) {
    const float q = scale == 0.0f ? 0.0f : std::nearbyint(u[k] / scale);
    out[4 + k] = static_cast<std::byte>(static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f)));
  }
}

// The r values of a stored row (in.size() == word_row_bytes(c, u.size())).
inline void decode_word_row(WordRowCodec c, std::span<const std::byte> in, std::span<float> u) noexcept {
  if (c == WordRowCodec::kF32) {
    std::memcpy(u.data(), in.data(), u.size_bytes());
    return;
  }
  float scale = 0.0f;
  std::memcpy(&scale, in.data(), sizeof scale);
  for (std::size_t k = 0; k < u.size(); ++k) u[k] = scale * static_cast<float>(static_cast<std::int8_t>(in[4 + k]));
}

// out[d] = u[r] V[r x d] (V row-major). Row by row of V, so the inner loop runs over d contiguous
// floats and vectorizes; r d multiply-adds (MiniLM at r = 128: 49k, well under a microsecond's
// worth of the 0.3 ms a row read costs on eMMC).
inline void reconstruct_word_row(std::span<const float> u, const float* v, std::size_t d, float* out) noexcept {
  std::fill(out, out + d, 0.0f);
  for (std::size_t k = 0; k < u.size(); ++k) {
    const float a = u[k];
    const float* row = v + k * d;
    for (std::size_t j = 0; j < d; ++j) out[j] += a * row[j];
  }
}

// One cluster of a low-rank table, as the converter hands it to the store writer.
struct LowRankCluster {
  std::vector<std::int32_t> tokens;      // the token ids, in the order of their rows
  std::size_t rank = 0;                  // r; equal to d: a full cluster (no V, U holds the rows)
  WordRowCodec codec = WordRowCodec::kF32;
  std::vector<float> u;                  // tokens.size() x rank, row-major
  std::vector<float> v;                  // rank x d, row-major; empty for a full cluster

  bool full(std::size_t d) const noexcept { return rank == d; }
  // Parameters (values of U and V) and stored bytes (U rows coded, V fp32).
  std::size_t params(std::size_t d) const noexcept { return tokens.size() * rank + (full(d) ? 0 : rank * d); }
  std::size_t bytes(std::size_t d) const noexcept {
    return tokens.size() * word_row_bytes(codec, rank) + (full(d) ? 0 : 4 * rank * d);
  }
};

// A whole word table: every token in exactly one cluster.
struct LowRankWordTable {
  std::size_t rows = 0;  // vocab_size
  std::size_t cols = 0;  // d
  std::vector<LowRankCluster> clusters;

  std::size_t params() const noexcept {
    std::size_t n = 0;
    for (const LowRankCluster& c : clusters) n += c.params(cols);
    return n;
  }
  std::size_t bytes() const noexcept {
    std::size_t n = 0;
    for (const LowRankCluster& c : clusters) n += c.bytes(cols);
    return n;
  }
  // The table as the store gives it back ([rows x cols] fp32): every row reconstructed from its
  // coded U row and V (so int8 rounding included). For the converter's report and for tests.
  std::vector<float> reconstruct() const {
    std::vector<float> out(rows * cols, 0.0f);
    std::vector<std::byte> coded;
    std::vector<float> u;
    for (const LowRankCluster& c : clusters) {
      coded.resize(word_row_bytes(c.codec, c.rank));
      u.resize(c.rank);
      for (std::size_t i = 0; i < c.tokens.size(); ++i) {
        encode_word_row(c.codec, std::span(c.u).subspan(i * c.rank, c.rank), coded);
        decode_word_row(c.codec, coded, u);
        float* row = out.data() + static_cast<std::size_t>(c.tokens[i]) * cols;
        if (c.full(cols)) {
          std::copy(u.begin(), u.end(), row);
        } else {
          reconstruct_word_row(u, c.v.data(), cols, row);
        }
      }
    }
    return out;
  }
};

}  // namespace stile::quant
