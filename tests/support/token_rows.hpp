#pragma once
// A made-up tokenized sequence for the tiny random models: n token ids spread over a vocabulary
// (id (7 i + 13 salt) mod vocab), token type 0, all attended.
#include <cstddef>
#include <cstdint>

#include "stile/text/wordpiece.hpp"

namespace stile_test {

inline stile::Encoding spread_tokens(std::size_t n, std::size_t salt, std::size_t vocab) {
  stile::Encoding e;
  for (std::size_t i = 0; i < n; ++i) {
    e.input_ids.push_back(static_cast<std::int32_t>((i * 7 + salt * 13) % vocab));
    e.token_type_ids.push_back(0);
    e.attention_mask.push_back(1);
  }
  return e;
}

}  // namespace stile_test
