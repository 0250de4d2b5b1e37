#pragma once
// BERT's input embedding, shared by the in-memory model and the sharded one: checks of a
// tokenizer Encoding against the model, and the sum word[id] + position[t] + token_type[type]
// (before the embedding LayerNorm). Where the word rows come from is the caller's business: the
// in-memory model reads a mapped table, the sharded one reads just the request's rows from disk.
#include <cstddef>
#include <cstdint>
#include <string>

#include "stile/core/error.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile {

// The number of real tokens of sequence `index` (its attention mask must be 1...1 0...0), checked
// against the model's positions.
inline std::size_t checked_sequence_length(const Encoding& e, std::size_t index, std::size_t max_positions) {
  const std::size_t n = e.input_ids.size();
  const std::string which = "encode: sequence " + std::to_string(index);
  require(e.token_type_ids.empty() || e.token_type_ids.size() == n,
          which + ": token_type_ids and input_ids differ in length");
  require(e.attention_mask.empty() || e.attention_mask.size() == n,
          which + ": attention_mask and input_ids differ in length");
  std::size_t len = n;
  if (!e.attention_mask.empty()) {
    len = 0;
    while (len < n && e.attention_mask[len] == 1) ++len;
    for (std::size_t t = len; t < n; ++t) {
      require(e.attention_mask[t] == 0, which + ": attention_mask must be 1...1 0...0");
    }
  }
  require(len <= max_positions, which + " has " + std::to_string(len) + " tokens, more than the model's " +
                                    std::to_string(max_positions) + " positions");
  return len;
}

// Token ids and types of the first len tokens inside the model's vocabulary and types.
inline void check_token_ids(const Encoding& e, std::size_t len, const EncoderConfig& c) {
  for (std::size_t t = 0; t < len; ++t) {
    const std::int32_t id = e.input_ids[t];
    const std::int32_t type = e.token_type_ids.empty() ? 0 : e.token_type_ids[t];
    require(id >= 0 && static_cast<std::size_t>(id) < c.vocab_size,
            "encode: token id " + std::to_string(id) + " is outside the vocabulary");
    require(type >= 0 && static_cast<std::size_t>(type) < c.type_vocab_size,
            "encode: token type " + std::to_string(type) + " is outside the model's types");
  }
}

// out[t] += position[t] + token_type[type of t] for t < len; out holds the word rows.
inline void add_position_and_type(const Encoding& e, std::size_t len, const EncoderConfig& c, const float* position,
                                  const float* token_type, float* out) {
  const std::size_t d = c.hidden;
  for (std::size_t t = 0; t < len; ++t) {
    const std::size_t type = e.token_type_ids.empty() ? 0 : static_cast<std::size_t>(e.token_type_ids[t]);
    const float* pos = position + t * d;
    const float* tt = token_type + type * d;
    float* row = out + t * d;
    for (std::size_t i = 0; i < d; ++i) row[i] = row[i] + pos[i] + tt[i];
  }
}

}  // namespace stile
