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
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/text/encoding.hpp"
#include "stile/text/tokenizer_json.hpp"

namespace stile {

struct TokenizeOptions {
  bool add_special_tokens = true;
};

class Tokenizer {
 public:
  // A tokenizer.json file. Throws stile::Error naming the file and the field for anything
  // malformed, and for any component stile does not implement.
  [[nodiscard]] static Tokenizer from_file(const std::filesystem::path& tokenizer_json) {
    return Tokenizer(tok::read_tokenizer_json_file(tokenizer_json));
  }
  // The text of a tokenizer.json; file_name names it in errors.
  [[nodiscard]] static Tokenizer from_json(std::string_view json_text, std::string_view file_name) {
    return Tokenizer(tok::read_tokenizer_json(json_text, file_name));
  }
  // BERT's pipeline over a vocab.txt (what Hugging Face builds for a BertTokenizerFast from one).
  [[nodiscard]] static Tokenizer from_vocab(const Vocab& vocab, const BertNormalizerOptions& normalizer = {},
                                            std::size_t max_input_chars_per_word = 100) {
    return Tokenizer(tok::bert_parts_from_vocab(vocab, normalizer, max_input_chars_per_word, vocab.source()));
  }
  // A model directory: its tokenizer.json when there is one, else its vocab.txt with BERT's
  // uncased normalizer (the vocab.txt convention; `bert_normalizer` overrides it, e.g. from
  // tokenizer_config.json's do_lower_case).
  [[nodiscard]] static Tokenizer from_model_dir(const std::filesystem::path& dir,
                                                const BertNormalizerOptions& bert_normalizer = {}) {
    const std::filesystem::path json = dir / "tokenizer.json";
    if (std::filesystem::exists(json)) return from_file(json);
    const std::filesystem::path vocab = dir / "vocab.txt";
    if (!std::filesystem::exists(vocab)) {
      fail_in_file(dir.string(), "no tokenizer.json and no vocab.txt: stile reads one of them");
    }
    return from_vocab(Vocab::load(vocab), bert_normalizer);
  }

  // Truncation for every later encode (replacing the file's own); nullopt turns it off.
  void set_truncation(std::optional<Truncation> truncation) {
    if (truncation) check_truncation(*truncation);
    truncation_ = truncation;
  }
  [[nodiscard]] const std::optional<Truncation>& truncation() const noexcept { return truncation_; }

  [[nodiscard]] Encoding encode(std::string_view text, const TokenizeOptions& options = {}) const {
    Encoding out = tok::post_process(parts_->post_processor.get(), encode_sequence(text, 0), std::nullopt,
                                     options.add_special_tokens, truncation_, text);
    fill_attention_mask(out);
    return out;
  }
  [[nodiscard]] Encoding encode_pair(std::string_view first, std::string_view second,
                                     const TokenizeOptions& options = {}) const {
    Encoding out = tok::post_process(parts_->post_processor.get(), encode_sequence(first, 0), encode_sequence(second, 1),
                                     options.add_special_tokens, truncation_, first, second);
    fill_attention_mask(out);
    return out;
  }

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
  void pad_to_longest(std::span<Encoding> batch) const {
    std::size_t longest = 0;
    for (const Encoding& encoding : batch) longest = std::max(longest, encoding.size());
    for (Encoding& e : batch) {
      const bool tracked = !e.offsets.empty() || e.size() == 0;
      e.input_ids.resize(longest, pad_id_);
      e.token_type_ids.resize(longest, 0);
      e.attention_mask.resize(longest, 0);
      if (tracked) {
        e.offsets.resize(longest);
        e.special_tokens_mask.resize(longest, 1);
        e.sequence_ids.resize(longest, -1);
      }
    }
  }

  // The id of a token of the vocabulary or of the added tokens.
  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const {
    if (const auto id = parts_->added.token_to_id(token)) return id;
    return parts_->model->token_to_id(token);
  }
  [[nodiscard]] std::optional<std::string_view> id_to_token(std::int32_t id) const {
    if (const auto token = parts_->added.id_to_token(id)) return token;
    return parts_->model->id_to_token(id);
  }
  // Ids run from 0 to vocab_size() - 1: the model's vocabulary and the added tokens.
  [[nodiscard]] std::size_t vocab_size() const {
    return std::max(parts_->model->vocab_size(), parts_->added.end_id());
  }
  // The id padding uses: the file's "padding".pad_id, else [PAD] or <pad>, else 0.
  [[nodiscard]] std::int32_t pad_id() const noexcept { return pad_id_; }

 private:
  explicit Tokenizer(tok::TokenizerParts parts)
      : parts_(std::make_shared<const tok::TokenizerParts>(std::move(parts))), truncation_(parts_->truncation) {
    if (truncation_) check_truncation(*truncation_);
    if (parts_->pad_id) {
      pad_id_ = *parts_->pad_id;
    } else if (const auto id = token_to_id("[PAD]")) {
      pad_id_ = *id;
    } else if (const auto pad = token_to_id("<pad>")) {
      pad_id_ = *pad;
    }
  }

  void check_truncation(const Truncation& t) const {
    require(t.max_length >= 1, "Tokenizer: truncation max_length must be at least 1");
    require(t.max_length == kNoTruncation || t.stride < t.max_length,
            "Tokenizer: truncation stride must be smaller than max_length");
  }

  // Steps 1-3 for one text: its tokens with offsets, type id `type_id`, no special tokens.
  [[nodiscard]] Encoding encode_sequence(std::string_view text, std::int32_t type_id) const {
    require(text.size() < 0xFFFFFFFFu, "Tokenizer: a text must be shorter than 4 GiB");
    tok::PreTokenizedString pieces = parts_->added.extract_and_normalize(text, parts_->normalizer.get());
    if (parts_->pre_tokenizer) parts_->pre_tokenizer->pre_tokenize(pieces);

    std::size_t total = 0;
    for (tok::Split& split : pieces.splits()) {
      if (!split.tokens) {
        split.tokens.emplace();
        parts_->model->tokenize(split.normalized.chars(), *split.tokens);
      }
      total += split.tokens->size();
    }

    Encoding e;
    e.input_ids.reserve(total);
    e.offsets.reserve(total);
    for (const tok::Split& split : pieces.splits()) {
      for (const tok::Token& token : *split.tokens) {
        e.input_ids.push_back(token.id);
        const tok::Origin origin = split.normalized.original_range(token.begin, token.end);
        e.offsets.push_back({origin.begin, origin.end});
      }
    }
    e.token_type_ids.assign(e.input_ids.size(), type_id);
    return e;
  }

  static void fill_attention_mask(Encoding& e) {
    if (e.attention_mask.size() != e.input_ids.size()) e.attention_mask.assign(e.input_ids.size(), 1);
    for (Encoding& window : e.overflowing) fill_attention_mask(window);
  }

  std::shared_ptr<const tok::TokenizerParts> parts_;
  std::optional<Truncation> truncation_;
  std::int32_t pad_id_ = 0;
};

}  // namespace stile
