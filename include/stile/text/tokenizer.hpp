#pragma once
// stile's tokenizer: a Hugging Face tokenizer.json pipeline (WordPiece, byte-level BPE or
// SentencePiece Unigram, with their normalizers, pre-tokenizers, post-processors and added
// tokens), giving the same ids, type ids and offsets as the tokenizers library.
//
//   Tokenizer tokenizer = Tokenizer::from_model_dir(dir);   // tokenizer.json, else vocab.txt
//   Encoding one = tokenizer.encode("A sentence.");
//   Encoding two = tokenizer.encode_pair("A question?", "A passage.");
//   // one.input_ids, one.offsets[i]: bytes of the text token i came from
//
// Order of work, the reference's (tokenizer/mod.rs encode_single_sequence and post_process):
//   1. added tokens are found in the text (the added vocabulary); the rest is normalized;
//   2. the pre-tokenizer cuts the normalized pieces into words;
//   3. the model turns each word into tokens (every word: the tokenizers library stops early
//      under truncation only after the version stile matches, see truncation.hpp);
//   4. post_processors.hpp's post_process: truncation (max_length less the special tokens the
//      post-processor adds), then the post-processor adds special tokens and merges a pair.
//
// Input bytes that are not UTF-8 read as U+FFFD, one per maximal ill-formed subpart (Python's
// errors="replace"), and offsets count the original bytes. Padding is the caller's
// (pad_to_longest). A const Tokenizer may be used from many threads at once; copies share the
// (immutable) parts.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string_view>
#include <vector>

#include "stile/text/bert_normalizer.hpp"
#include "stile/core/error.hpp"
#include "stile/text/encoding.hpp"
#include "stile/text/vocab.hpp"

namespace stile {

namespace tok {
struct TokenizerParts;  // text/tokenizer_json.hpp
}

struct TokenizeOptions {
  bool add_special_tokens = true;
};

// Its members are compiled once, in stile::compiled (src/stile_tokenizer.cpp): the readers and
// parts behind them (text/tokenizer_json.hpp) are heavy to compile, and a translation unit that
// encodes text needs none of them.
class Tokenizer {
 public:
  // A tokenizer.json file. Throws stile::Error naming the file and the field for anything
  // malformed, and for any component stile does not implement.
  [[nodiscard]] static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // The text of a tokenizer.json; file_name names it in errors.
  [[nodiscard]] static Tokenizer from_json(std::string_view json_text, std::string_view file_name);
  // BERT's pipeline over a vocab.txt (what Hugging Face builds for a BertTokenizerFast from one).
  [[nodiscard]] static Tokenizer from_vocab(const Vocab& vocab, const BertNormalizerOptions& normalizer = {},
                                            std::size_t max_input_chars_per_word = 100);
  // A model directory: its tokenizer.json when there is one, else its vocab.txt with BERT's
  // uncased normalizer (the vocab.txt convention; `bert_normalizer` overrides it, e.g. from
  // tokenizer_config.json's do_lower_case).
  [[nodiscard]] static Tokenizer from_model_dir(const std::filesystem::path& dir,
                                                const BertNormalizerOptions& bert_normalizer = {});

  // Truncation for every later encode (replacing the file's own); nullopt turns it off.
  void set_truncation(std::optional<Truncation> truncation);
  [[nodiscard]] const std::optional<Truncation>& truncation() const noexcept { return truncation_; }

  [[nodiscard]] Encoding encode(std::string_view text, const TokenizeOptions& options = {}) const;
  [[nodiscard]] Encoding encode_pair(std::string_view first, std::string_view second,
                                     const TokenizeOptions& options = {}) const;

  // encode() of each text, padded to the longest by default.
  template <std::ranges::input_range Texts>
  requires std::convertible_to<std::ranges::range_reference_t<Texts>, std::string_view>
  [[nodiscard]] std::vector<Encoding> encode_batch(const Texts& texts, Padding padding = Padding::longest) const {
    std::vector<Encoding> batch;
    if constexpr (std::ranges::sized_range<Texts>) batch.reserve(std::ranges::size(texts));
    for (auto&& text : texts) batch.push_back(encode(std::string_view(text)));
    if (padding == Padding::longest) pad_to_longest(batch);
    return batch;
  }

  // Pads every encoding to the longest, on the right: input_ids with pad_id(), type ids, masks and
  // sequence ids with 0 / 0 / 1 / -1, offsets with {0, 0} (Hugging Face's padding).
  void pad_to_longest(std::span<Encoding> batch) const;

  // The id of a token of the vocabulary or of the added tokens.
  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const;
  [[nodiscard]] std::optional<std::string_view> id_to_token(std::int32_t id) const;
  // Ids run from 0 to vocab_size() - 1: the model's vocabulary and the added tokens (one past the
  // largest id: an embedding table needs this many rows even where the vocabulary's ids have holes).
  [[nodiscard]] std::size_t vocab_size() const;
  // The model's unknown token (nullopt: it has none).
  [[nodiscard]] std::optional<std::int32_t> unk_id() const;
  // The model's mark of a token that continues a word ("##" for WordPiece; "" when it has none).
  [[nodiscard]] std::string_view continuing_subword_prefix() const;
  // The id padding uses: the file's "padding".pad_id, else [PAD] or <pad>, else 0.
  [[nodiscard]] std::int32_t pad_id() const noexcept { return pad_id_; }

 private:
  explicit Tokenizer(tok::TokenizerParts parts);
  void check_truncation(const Truncation& t) const;
  // Steps 1-3 for one text: its tokens with offsets, type id `type_id`, no special tokens.
  [[nodiscard]] Encoding encode_sequence(std::string_view text, std::int32_t type_id) const;

  std::shared_ptr<const tok::TokenizerParts> parts_;
  std::optional<Truncation> truncation_;
  std::int32_t pad_id_ = 0;
};

// A text longer than max_length tokens (special tokens included) covered in windows: the first
// encoding and then its overflowing ones, each repeating the last `stride` tokens of the window
// before (Hugging Face's truncation with a stride). A text that fits gives one window. A stride
// that leaves no new tokens in a window (stride + the special tokens >= max_length) is an error.
inline std::vector<Encoding> encode_windows(const Tokenizer& tokenizer, std::string_view text, std::size_t max_length,
                                            std::size_t stride) {
  const std::size_t specials = tokenizer.encode("").size();
  if (stride + specials >= max_length) {
    throw Error(concat("stile: stride ", stride, " leaves no new tokens in a window of ", max_length, " tokens (",
                       specials, " of them special)"));
  }
  Tokenizer windowed = tokenizer;
  windowed.set_truncation(Truncation{.max_length = max_length, .stride = stride});
  std::vector<Encoding> windows{windowed.encode(text)};
  std::vector<Encoding> rest = std::move(windows[0].overflowing);
  windows[0].overflowing.clear();
  for (Encoding& e : rest) windows.push_back(std::move(e));
  return windows;
}

}  // namespace stile
