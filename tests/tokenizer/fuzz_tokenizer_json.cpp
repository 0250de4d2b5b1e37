// libFuzzer target: Tokenizer::from_json over arbitrary bytes must throw stile::Error or succeed,
// never crash, hang, leak or throw anything else (libFuzzer reports an escaping exception as a
// crash); a tokenizer it accepts must encode a few texts (singles, pairs, truncated with a stride)
// with its invariants kept. Seeds: fuzz_seeds_json/ (small tokenizer.json files of each kind).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "stile/core/error.hpp"
#include "stile/text/tokenizer.hpp"

namespace {

void check(const stile::Encoding& e, const stile::Tokenizer& t, std::size_t longest_text) {
  const std::size_t n = e.size();
  if (e.token_type_ids.size() != n || e.attention_mask.size() != n || e.offsets.size() != n ||
      e.special_tokens_mask.size() != n) {
    std::abort();
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (e.input_ids[i] < 0 || static_cast<std::size_t>(e.input_ids[i]) >= t.vocab_size()) std::abort();
    if (e.offsets[i].begin > e.offsets[i].end || e.offsets[i].end > longest_text) std::abort();
  }
  for (const stile::Encoding& window : e.overflowing) check(window, t, longest_text);
}

void encode_some(stile::Tokenizer& t) {
  constexpr std::string_view kTexts[] = {"", "Hello, world! The movie's great.", "  caf\xc3\xa9 \xe4\xb8\xad 123 <s> [CLS]",
                                         "\xed\xa0\x80\xff ab\xe2\x82"};
  for (int truncated = 0; truncated < 2; ++truncated) {
    try {
      t.set_truncation(truncated ? std::optional<stile::Truncation>(stile::Truncation{6, 1}) : std::nullopt);
      for (const std::string_view text : kTexts) {
        check(t.encode(text), t, text.size());
        check(t.encode_pair(text, kTexts[1], {.add_special_tokens = false}), t, std::max(text.size(), kTexts[1].size()));
      }
    } catch (const stile::Error&) {
      // truncation that leaves no room (the reference raises there too)
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  std::optional<stile::Tokenizer> t;
  try {
    t.emplace(stile::Tokenizer::from_json(json, "fuzz/tokenizer.json"));
  } catch (const stile::Error&) {
    return 0;
  }
  encode_some(*t);
  return 0;
}
