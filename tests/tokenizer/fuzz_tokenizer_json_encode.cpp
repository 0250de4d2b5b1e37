// libFuzzer target: arbitrary bytes encoded with each committed tokenizer.json
// (tests/tokenizer/data/json: WordPiece, byte-level BPE, Unigram, the SentencePiece conversions and
// the mixes), singles and pairs, with and without truncation and stride: never a crash, hang or
// out-of-bounds read, only stile::Error (where truncation leaves no room, as the reference raises),
// and the encoding's invariants kept: at most max_length tokens in the encoding and each overflowing
// window, when max_length leaves room for a token beside the special tokens the post-processor adds
// (without it the reference, and stile, do not truncate at all, or make one window of the rest). Input: byte 0 picks the tokenizer and the options, byte 1 the
// truncation, the rest is the text (a 0xFF byte splits it into a pair). Seeds:
// fuzz_seeds_json_encode/.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/text/tokenizer.hpp"

namespace {

const std::vector<stile::Tokenizer>& tokenizers() {
  static const std::vector<stile::Tokenizer> all = [] {
    const std::filesystem::path dir = std::filesystem::path(__FILE__).parent_path() / "data" / "json";
    std::vector<stile::Tokenizer> out;
    for (const char* name : {"bert_wordpiece", "roberta_bpe", "unigram", "xlm_roberta", "albert", "deberta_v3",
                             "mix_wordpiece", "mix_bpe_suffix", "mix_bpe_bytes", "mix_bytelevel", "mix_unigram_bytes"}) {
      out.push_back(stile::Tokenizer::from_file(dir / (std::string(name) + ".tokenizer.json")));
    }
    return out;
  }();
  return all;
}

void check(const stile::Encoding& e, const stile::Tokenizer& t, std::size_t longest_text, std::size_t max_length) {
  const std::size_t n = e.size();
  if (n > max_length || e.token_type_ids.size() != n || e.attention_mask.size() != n || e.offsets.size() != n ||
      e.special_tokens_mask.size() != n) {
    std::abort();
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (e.input_ids[i] < 0 || static_cast<std::size_t>(e.input_ids[i]) >= t.vocab_size()) std::abort();
    if (e.offsets[i].begin > e.offsets[i].end || e.offsets[i].end > longest_text) std::abort();
  }
  for (const stile::Encoding& window : e.overflowing) check(window, t, longest_text, max_length);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::vector<stile::Tokenizer>& all = tokenizers();
  stile::Tokenizer t = all[data[0] % all.size()];  // copies share the parts
  const bool add_special_tokens = (data[0] / all.size()) % 2 == 0;
  std::size_t max_length = stile::kNoTruncation;
  if (data[1] != 0) {
    const stile::TruncationStrategy strategies[] = {stile::TruncationStrategy::longest_first,
                                                    stile::TruncationStrategy::only_first,
                                                    stile::TruncationStrategy::only_second};
    max_length = 1 + (data[1] & 63u);
    try {
      t.set_truncation(stile::Truncation{max_length, (data[1] >> 6) % max_length, strategies[data[0] % 3]});
    } catch (const stile::Error&) {
      return 0;
    }
  }
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const stile::TokenizeOptions options{.add_special_tokens = add_special_tokens};
  // The special tokens added to a single text and to a pair: the untruncated encodings of empty texts.
  const stile::Tokenizer& plain = all[data[0] % all.size()];
  const auto bound = [&](std::size_t added) { return max_length > added ? max_length : stile::kNoTruncation; };
  try {
    check(t.encode(text, options), t, text.size(), bound(plain.encode("", options).size()));
  } catch (const stile::Error&) {
  }
  if (const std::size_t split = text.find('\xff'); split != std::string_view::npos) {
    // No length bound for pairs: where a part's share of max_length is 0 (longest_first with fewer
    // than 2 tokens to share, or the other part filling it under only_first / only_second), the
    // reference moves that whole part into one overflowing window, and stile does the same.
    try {
      check(t.encode_pair(text.substr(0, split), text.substr(split + 1), options), t, text.size(),
            stile::kNoTruncation);
    } catch (const stile::Error&) {
    }
  }
  return 0;
}
