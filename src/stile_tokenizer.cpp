// The tokenizer (stile::Tokenizer, include/stile/text/tokenizer.hpp), compiled once: its readers
// and parts (text/tokenizer_json.hpp) stay out of the translation units that only encode text.
#include "stile/text/tokenizer.hpp"

#include <algorithm>
#include <utility>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/text/tokenizer_json.hpp"

namespace stile {

namespace {

void fill_attention_mask(Encoding& e) {
  if (e.attention_mask.size() != e.input_ids.size()) e.attention_mask.assign(e.input_ids.size(), 1);
  for (Encoding& window : e.overflowing) fill_attention_mask(window);
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  return Tokenizer(tok::read_tokenizer_json_file(tokenizer_json));
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view file_name) {
  return Tokenizer(tok::read_tokenizer_json(json_text, file_name));
}

Tokenizer Tokenizer::from_vocab(const Vocab& vocab, const BertNormalizerOptions& normalizer,
                                std::size_t max_input_chars_per_word) {
  return Tokenizer(tok::bert_parts_from_vocab(vocab, normalizer, max_input_chars_per_word, vocab.source()));
}

Tokenizer Tokenizer::from_model_dir(const std::filesystem::path& dir, const BertNormalizerOptions& bert_normalizer) {
  const std::filesystem::path json = dir / "tokenizer.json";
  if (std::filesystem::exists(json)) return from_file(json);
  const std::filesystem::path vocab = dir / "vocab.txt";
  if (!std::filesystem::exists(vocab)) {
    fail_in_file(dir.string(), "no tokenizer.json and no vocab.txt: stile reads one of them");
  }
  return from_vocab(Vocab::load(vocab), bert_normalizer);
}

Tokenizer::Tokenizer(tok::TokenizerParts parts)
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

void Tokenizer::set_truncation(std::optional<Truncation> truncation) {
  if (truncation) check_truncation(*truncation);
  truncation_ = truncation;
}

void Tokenizer::check_truncation(const Truncation& t) const {
  require(t.max_length >= 1, "Tokenizer: truncation max_length must be at least 1");
  require(t.max_length == kNoTruncation || t.stride < t.max_length,
          "Tokenizer: truncation stride must be smaller than max_length");
}

Encoding Tokenizer::encode(std::string_view text, const TokenizeOptions& options) const {
  Encoding out = tok::post_process(parts_->post_processor.get(), encode_sequence(text, 0), std::nullopt,
                                   options.add_special_tokens, truncation_, text);
  fill_attention_mask(out);
  return out;
}

Encoding Tokenizer::encode_pair(std::string_view first, std::string_view second, const TokenizeOptions& options) const {
  Encoding out = tok::post_process(parts_->post_processor.get(), encode_sequence(first, 0), encode_sequence(second, 1),
                                   options.add_special_tokens, truncation_, first, second);
  fill_attention_mask(out);
  return out;
}

void Tokenizer::pad_to_longest(std::span<Encoding> batch) const {
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

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = parts_->added.token_to_id(token)) return id;
  return parts_->model->token_to_id(token);
}

std::optional<std::string_view> Tokenizer::id_to_token(std::int32_t id) const {
  if (const auto token = parts_->added.id_to_token(id)) return token;
  return parts_->model->id_to_token(id);
}

std::optional<std::int32_t> Tokenizer::unk_id() const { return parts_->model->unk_id(); }

std::string_view Tokenizer::continuing_subword_prefix() const { return parts_->model->continuing_subword_prefix(); }

std::size_t Tokenizer::vocab_size() const { return std::max(parts_->model->id_end(), parts_->added.end_id()); }

Encoding Tokenizer::encode_sequence(std::string_view text, std::int32_t type_id) const {
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

}  // namespace stile
