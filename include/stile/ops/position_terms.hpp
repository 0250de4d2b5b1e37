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
//   ModernBERT  rotary positions: Q and K of token t (its index in its sequence) rotated per head,
//          pair (i, i + head_dim / 2) by the angle t * theta^(-2i / head_dim) (the reference's
//          rotate_half form; theta: the global or the local layers' base), and on the local layers
//          a sliding window: a query attends to the keys at most `window` tokens away (the
//          reference's bidirectional sliding-window mask, window = local_attention / 2).
//   DeBERTa-v2/v3  disentangled attention: for query i and key j, with r = the bucket of i - j
//          (exact up to position_buckets / 2, log-spaced beyond up to max_relative_positions: the
//          reference's make_log_bucket_position) and row(i, j) = clamp(r + span, 0, 2 span - 1),
//          c2p adds Q_i . PK[row] and p2c adds K_j . PQ[row], where PK and PQ are the layer's key
//          and query projections of the LayerNorm'd relative embeddings (made once at load; PQ
//          through the pre-scaled query projection, so both terms carry the attention's scale).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stile {

// What attention adds to a head's scores; empty for BERT's layer.
struct AttentionPositions {
  // MPNet: head h's bias for key - query = r (|r| < span) at relative_bias[h * (2 span - 1) + span - 1 + r].
  const float* relative_bias = nullptr;
  std::size_t span = 0;  // the longest sequence the tables cover
  // ModernBERT: cos and sin of token t's angles at [t * head_dim / 2 + i] (applied by
  // apply_rotary to Q and K before attention), and the local layers' window (0: global).
  const float* rotary_cos = nullptr;
  const float* rotary_sin = nullptr;
  std::size_t window = 0;
  // DeBERTa: the layer's PK (c2p) and PQ (p2c), [pos_rows x d] (row stride pos_ld; head h at
  // columns h * head_dim), either null when its term is off; rel_row[i - j] (|i - j| < span) is
  // row(i, j).
  const float* pos_key = nullptr;
  const float* pos_query = nullptr;
  std::size_t pos_rows = 0, pos_ld = 0;
  const std::int32_t* rel_row = nullptr;

  bool disentangled() const noexcept { return pos_key != nullptr || pos_query != nullptr; }
  bool empty() const noexcept {
    return relative_bias == nullptr && rotary_cos == nullptr && window == 0 && !disentangled();
  }
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

// DeBERTa's bucket of a relative position (query - key), the reference's make_log_bucket_position
// in float32: exact while |r| <= bucket_size / 2, else sign(r) (ceil(log(|r| / mid) /
// log((max_position - 1) / mid) * (mid - 1)) + mid).
inline std::int64_t deberta_relative_bucket(std::int64_t r, std::size_t bucket_size, std::size_t max_position) {
  const auto mid = static_cast<std::int64_t>(bucket_size / 2);
  const std::int64_t a = r < 0 ? -r : r;
  if (a <= mid) return r;
  const float ratio = std::log(static_cast<float>(a) / static_cast<float>(mid)) /
                      std::log(static_cast<float>(static_cast<double>(max_position - 1) / static_cast<double>(mid)));
  const auto log_pos = static_cast<std::int64_t>(std::ceil(ratio * static_cast<float>(mid - 1))) + mid;
  return r < 0 ? -log_pos : log_pos;
}

// rel_row for sequences of up to `span` tokens (out[span - 1 + (i - j)]): bucket_size 0 means no
// buckets (the relative position itself); rows clamped to [0, 2 relative_span).
inline void deberta_relative_rows(std::size_t span, std::size_t relative_span, std::size_t bucket_size,
                                  std::size_t max_position, std::vector<std::int32_t>& out) {
  out.assign(span == 0 ? 0 : 2 * span - 1, 0);
  const auto att = static_cast<std::int64_t>(relative_span);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::int64_t r = static_cast<std::int64_t>(k) - static_cast<std::int64_t>(span - 1);
    const std::int64_t b = bucket_size > 0 ? deberta_relative_bucket(r, bucket_size, max_position) : r;
    const std::int64_t row = b + att < 0 ? 0 : b + att > 2 * att - 1 ? 2 * att - 1 : b + att;
    out[k] = static_cast<std::int32_t>(row);
  }
}

// The rotary tables for tokens 0..span-1 of a head of head_dim (even) values, base theta: the
// reference's inv_freq = 1 / theta^(2i / head_dim) and angle t * inv_freq[i], in float32.
inline void rotary_tables(float theta, std::size_t head_dim, std::size_t span, std::vector<float>& cos_out,
                          std::vector<float>& sin_out) {
  const std::size_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  for (std::size_t i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  cos_out.resize(span * half);
  sin_out.resize(span * half);
  for (std::size_t t = 0; t < span; ++t) {
    for (std::size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i];
      cos_out[t * half + i] = std::cos(angle);
      sin_out[t * half + i] = std::sin(angle);
    }
  }
}

// Rotates the `heads` heads of `rows` rows of x (row stride ld; head h at columns h * head_dim) as
// token positions first_position... : for each pair (a, b) = (x[i], x[i + head_dim / 2]),
// a' = a cos - b sin, b' = b cos + a sin.
inline void apply_rotary(float* x, std::size_t ld, std::size_t rows, std::size_t first_position, std::size_t heads,
                         std::size_t head_dim, const float* cos_table, const float* sin_table) {
  const std::size_t half = head_dim / 2;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* c = cos_table + (first_position + r) * half;
    const float* s = sin_table + (first_position + r) * half;
    for (std::size_t h = 0; h < heads; ++h) {
      float* a = x + r * ld + h * head_dim;
      float* b = a + half;
      for (std::size_t i = 0; i < half; ++i) {
        const float ai = a[i], bi = b[i];
        a[i] = ai * c[i] - bi * s[i];
        b[i] = bi * c[i] + ai * s[i];
      }
    }
  }
}

}  // namespace stile
