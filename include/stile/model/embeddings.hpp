#pragma once
// The input embedding of a BERT-shaped encoder, shared by the in-memory model and the sharded one:
// checks of a tokenizer Encoding against the model, and the sum word[id] + position[row] +
// token_type[type] (before the embedding LayerNorm), as the model's description says
// (io/encoder_config.hpp: RoBERTa's positions start after its padding index, DistilBERT has no
// token types, ELECTRA's sum is embedding_size wide). Where the word rows come from is the
// caller's business: the in-memory model reads a mapped table, the sharded one reads just the
// request's rows from disk.
#include <algorithm>
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

// Token ids and types of the first len tokens inside the model's vocabulary and types. A family
// without token types (DistilBERT) takes type 0 only: what a tokenizer writes for one text.
inline void check_token_ids(const Encoding& e, std::size_t len, const EncoderConfig& c) {
  for (std::size_t t = 0; t < len; ++t) {
    const std::int32_t id = e.input_ids[t];
    const std::int32_t type = e.token_type_ids.empty() ? 0 : e.token_type_ids[t];
    require(id >= 0 && static_cast<std::size_t>(id) < c.vocab_size,
            "encode: token id " + std::to_string(id) + " is outside the vocabulary");
    if (c.type_vocab_size == 0) {
      require(type == 0, "encode: token_type_ids has type " + std::to_string(type) + " at token " +
                             std::to_string(t) + ", but " + c.model_type + " has no token types (only 0)");
      continue;
    }
    require(type >= 0 && static_cast<std::size_t>(type) < c.type_vocab_size,
            "encode: token type " + std::to_string(type) + " is outside the model's types");
  }
}

// out[t] += position[row of t] + token_type[type of t] for t < len; out holds the word rows, of
// width c.embedding_dim(). The row of t is t, or for RoBERTa the reference's
// create_position_ids_from_input_ids: padding_idx + (non-padding tokens up to t), and padding_idx
// for a padding token. token_type is unused (may be null) when the model has no types, position
// when it has no position table (ModernBERT, DeBERTa-v3).
inline void add_position_and_type(const Encoding& e, std::size_t len, const EncoderConfig& c, const float* position,
                                  const float* token_type, float* out) {
  const std::size_t d = c.embedding_dim();
  const bool typed = c.type_vocab_size != 0;
  if (!c.position_table) {  // positions inside attention (ModernBERT, DeBERTa-v3): types only, if any
    for (std::size_t t = 0; typed && t < len; ++t) {
      const std::size_t type = e.token_type_ids.empty() ? 0 : static_cast<std::size_t>(e.token_type_ids[t]);
      const float* tt = token_type + type * d;
      float* r = out + t * d;
      for (std::size_t i = 0; i < d; ++i) r[i] = r[i] + tt[i];
    }
    return;
  }
  std::size_t counted = 0;  // RoBERTa: non-padding tokens so far
  for (std::size_t t = 0; t < len; ++t) {
    std::size_t row = t;
    if (c.has_padding_position()) {
      const std::size_t pad = c.padding_idx();
      row = static_cast<std::size_t>(e.input_ids[t]) == pad ? pad : pad + ++counted;
    }
    const float* pos = position + row * d;
    float* r = out + t * d;
    if (typed) {
      const std::size_t type = e.token_type_ids.empty() ? 0 : static_cast<std::size_t>(e.token_type_ids[t]);
      const float* tt = token_type + type * d;
      for (std::size_t i = 0; i < d; ++i) r[i] = r[i] + pos[i] + tt[i];
    } else {
      for (std::size_t i = 0; i < d; ++i) r[i] = r[i] + pos[i];
    }
  }
}

// The embedding sum of the first len tokens of e into out ([len x c.embedding_dim()]): the word
// rows of `word_table` ([vocab x e]), plus position and type (before the embedding LayerNorm).
inline void embed_tokens(const Encoding& e, std::size_t len, const EncoderConfig& c, const float* word_table,
                         const float* position, const float* token_type, float* out) {
  check_token_ids(e, len, c);
  const std::size_t d = c.embedding_dim();
  for (std::size_t t = 0; t < len; ++t) {
    std::copy_n(word_table + static_cast<std::size_t>(e.input_ids[t]) * d, d, out + t * d);
  }
  add_position_and_type(e, len, c, position, token_type, out);
}

}  // namespace stile
