#pragma once
// The position terms a family adds inside attention (io/encoder_config.hpp), which
// ops/attention.hpp applies to one head's scores between Q K^T and the softmax. BERT and its kin have
// none (their positions are in the embeddings):
//   MPNet  an additive bias per head that depends on key - query only: the relative position falls
//          in one of 32 buckets (16 per direction: exact below 8, log-spaced from 8 to 128, the
//          last bucket beyond), and the bucket's row of relative_attention_bias ([buckets x heads],
//          shared by every layer) gives each head's bias, as the reference's
//          MPNetEncoder.compute_position_bias. The bias is computed once per request for its
//          longest sequence and read by every layer.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stile {

// What attention adds to a head's scores; empty for BERT's layer.
struct AttentionPositions {
  // MPNet: head h's bias for key - query = r (|r| < span) at relative_bias[h * (2 span - 1) + span - 1 + r].
  const float* relative_bias = nullptr;
  std::size_t span = 0;

  bool empty() const noexcept { return relative_bias == nullptr; }
  // Head h's bias, centred on r = 0 (index it with key - query).
  const float* head_bias(std::size_t h) const noexcept { return relative_bias + h * (2 * span - 1) + span - 1; }
};

// MPNet's bucket of a relative position (key - query), the reference's relative_position_bucket with
// num_buckets 32 and max_distance 128: in float32, as torch computes it (its log-spaced buckets'
// boundaries at 16, 32 and 64 are exact there and here).
inline std::size_t mpnet_relative_bucket(std::ptrdiff_t key_minus_query) {
  constexpr std::int64_t kHalf = 16, kExact = 8;  // buckets per direction; exact below 8
  const std::int64_t n = -static_cast<std::int64_t>(key_minus_query);
  const std::int64_t base = n < 0 ? kHalf : 0;
  const std::int64_t a = n < 0 ? -n : n;
  if (a < kExact) return static_cast<std::size_t>(base + a);
  // log(n / 8) / log(128 / 8) * (16 - 8), truncated toward zero, at most 15.
  const float ratio = std::log(static_cast<float>(a) / static_cast<float>(kExact));
  const auto large = kExact + static_cast<std::int64_t>(ratio / static_cast<float>(std::log(16.0)) * 8.0f);
  return static_cast<std::size_t>(base + (large < kHalf - 1 ? large : kHalf - 1));
}

// MPNet's bias of every head for sequences of up to `span` tokens, laid out as
// AttentionPositions::relative_bias: table is relative_attention_bias ([buckets x heads]).
inline void mpnet_relative_bias(const float* table, std::size_t heads, std::size_t span, std::vector<float>& out) {
  const std::size_t width = span == 0 ? 0 : 2 * span - 1;
  out.assign(heads * width, 0.0f);
  for (std::size_t i = 0; i < width; ++i) {
    const std::ptrdiff_t r = static_cast<std::ptrdiff_t>(i) - static_cast<std::ptrdiff_t>(span - 1);
    const float* row = table + mpnet_relative_bucket(r) * heads;
    for (std::size_t h = 0; h < heads; ++h) out[h * width + i] = row[h];
  }
}

}  // namespace stile
