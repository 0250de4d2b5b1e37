#pragma once
// BERT's WordPiece tokenizer, giving the same ids as Hugging Face's fast BertTokenizer
// (transformers.AutoTokenizer on a BERT checkpoint) for a vocab.txt and its normalizer settings.
//
//   WordPieceTokenizer tokenizer = WordPieceTokenizer::load(model_dir / "vocab.txt");
//   Encoding one = tokenizer.encode("A sentence.");                // [CLS] ... [SEP]
//   Encoding two = tokenizer.encode_pair("A question?", "A passage.");  // [CLS] a [SEP] b [SEP]
//
// What it does, in HF's order:
//   - special tokens written in the text ("[SEP]", "[CLS]", "[PAD]", "[UNK]", "[MASK]", exactly so
//     written) become their ids, and the text between them is tokenized on its own (HF's default;
//     options.split_special_tokens = true tokenizes them as plain text instead);
//   - BertNormalizer + BertPreTokenizer (bert_normalizer.hpp) make words;
//   - each word becomes the longest vocabulary prefix, then the longest "##" continuation, and so
//     on; a word that cannot be covered so, or has more than max_input_chars_per_word (100)
//     characters, becomes one [UNK];
//   - [CLS] A [SEP] (B [SEP]), token_type_ids 0 for A's part and 1 for B's, truncation to
//     max_length with HF's longest_first rule for pairs.
//
// Ill-formed UTF-8 (requests come from outside): by default each ill-formed sequence reads as
// U+FFFD, which cleaning drops, so the result is HF's on bytes.decode("utf-8", errors="replace")
// and an invalid byte never splits or breaks the word it sits in. With options.invalid_utf8 =
// InvalidUtf8::error, encode throws stile::Error naming the byte offset instead. Never a crash.
//
// max_length defaults to 512, the checkpoint's model_max_length (HF truncates only when asked;
// a model cannot take more anyway). sentence-transformers models truncate shorter: all-MiniLM-L6-v2
// uses 256 (max_seq_length in sentence_bert_config.json); pass that as options.max_length.
//
// Differences from HF, all deliberate: a max_length too small for the special tokens (< 2, or
// < 3 for a pair) throws, where HF silently skips truncation; encode_pair(a, "") is a pair with an
// empty second text ([CLS] a [SEP] [SEP], as the tokenizers library gives), where transformers'
// tokenizer(a, "") drops an empty pair; only BERT's normalizer options are offered (no
// do_basic_tokenize=false, no never_split lists).
//
// Thread safety: a const WordPieceTokenizer may be used from many threads at once.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/text/bert_normalizer.hpp"
#include "stile/text/encoding.hpp"
#include "stile/core/file_error.hpp"
#include "stile/text/utf8.hpp"
#include "stile/text/vocab.hpp"

namespace stile {

struct WordPieceOptions {
  BertNormalizerOptions normalizer{};          // defaults: uncased (lowercase, strip accents)
  std::size_t max_length = 512;                // tokens including [CLS]/[SEP]; the model's limit
  std::size_t max_input_chars_per_word = 100;  // longer words become [UNK]
  bool split_special_tokens = false;           // true: "[SEP]" in the text is plain text
  InvalidUtf8 invalid_utf8 = InvalidUtf8::replace;
};

class WordPieceTokenizer {
 public:
  explicit WordPieceTokenizer(Vocab vocab, WordPieceOptions options = {})
      : vocab_(std::move(vocab)),
        options_(options),
        normalizer_(options.normalizer),
        cls_id_(vocab_.id_of("[CLS]")),
        sep_id_(vocab_.id_of("[SEP]")),
        unk_id_(vocab_.id_of("[UNK]")),
        pad_id_(vocab_.id_of("[PAD]")) {
    require(options_.max_length >= 2,
            "WordPieceTokenizer: options.max_length must leave room for [CLS] and [SEP] (>= 2)");
    for (const std::string_view special : {"[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]"}) {
      if (const auto id = vocab_.find(special)) special_tokens_.push_back({special, *id});
    }
  }

  // Reads vocab.txt (see vocab.hpp for what is validated).
  [[nodiscard]] static WordPieceTokenizer load(const std::filesystem::path& vocab_txt, WordPieceOptions options = {}) {
    return WordPieceTokenizer(Vocab::load(vocab_txt), options);
  }

  // Appends the ids of text to ids: no special tokens around it, no truncation.
  void tokenize(std::string_view text, std::vector<std::int32_t>& ids) const {
    check_utf8(text, "the text");
    Scratch scratch;
    tokenize_into(text, ids, scratch);
  }
  [[nodiscard]] std::vector<std::int32_t> tokenize(std::string_view text) const {
    std::vector<std::int32_t> ids;
    tokenize(text, ids);
    return ids;
  }

  // [CLS] text [SEP], truncated to options().max_length tokens (or max_length; kNoTruncation for
  // none).
  [[nodiscard]] Encoding encode(std::string_view text) const { return encode(text, options_.max_length); }
  [[nodiscard]] Encoding encode(std::string_view text, std::size_t max_length) const {
    require(max_length >= 2, "WordPieceTokenizer::encode: max_length must leave room for [CLS] and [SEP] (>= 2)");
    check_utf8(text, "the text");
    Scratch scratch;
    std::vector<std::int32_t> ids;
    tokenize_into(text, ids, scratch);
    if (max_length != kNoTruncation && ids.size() > max_length - 2) ids.resize(max_length - 2);
    Encoding encoding;
    encoding.input_ids.reserve(ids.size() + 2);
    encoding.input_ids.push_back(cls_id_);
    encoding.input_ids.insert(encoding.input_ids.end(), ids.begin(), ids.end());
    encoding.input_ids.push_back(sep_id_);
    encoding.token_type_ids.assign(encoding.input_ids.size(), 0);
    encoding.attention_mask.assign(encoding.input_ids.size(), 1);
    return encoding;
  }

  // [CLS] first [SEP] second [SEP], truncated longest-first to options().max_length (or
  // max_length): while too long, the longer text loses tokens from its end; when both are longer
  // than half the budget, each keeps half (the text that was longer keeps the odd token; the
  // second text on a tie), exactly as HF's TruncationStrategy::LongestFirst.
  [[nodiscard]] Encoding encode_pair(std::string_view first, std::string_view second) const {
    return encode_pair(first, second, options_.max_length);
  }
  [[nodiscard]] Encoding encode_pair(std::string_view first, std::string_view second, std::size_t max_length) const {
    require(max_length >= 3,
            "WordPieceTokenizer::encode_pair: max_length must leave room for [CLS] and two [SEP] (>= 3)");
    check_utf8(first, "the first text");
    check_utf8(second, "the second text");
    Scratch scratch;
    std::vector<std::int32_t> a;
    std::vector<std::int32_t> b;
    tokenize_into(first, a, scratch);
    tokenize_into(second, b, scratch);
    if (max_length != kNoTruncation) truncate_longest_first(a, b, max_length - 3);
    Encoding encoding;
    const std::size_t total = a.size() + b.size() + 3;
    encoding.input_ids.reserve(total);
    encoding.input_ids.push_back(cls_id_);
    encoding.input_ids.insert(encoding.input_ids.end(), a.begin(), a.end());
    encoding.input_ids.push_back(sep_id_);
    encoding.input_ids.insert(encoding.input_ids.end(), b.begin(), b.end());
    encoding.input_ids.push_back(sep_id_);
    encoding.token_type_ids.assign(a.size() + 2, 0);
    encoding.token_type_ids.resize(total, 1);
    encoding.attention_mask.assign(total, 1);
    return encoding;
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

  // Pads every encoding to the longest (input_ids with [PAD], token_type_ids and attention_mask
  // with 0), on the right as HF does.
  void pad_to_longest(std::span<Encoding> batch) const {
    std::size_t longest = 0;
    for (const Encoding& encoding : batch) longest = std::max(longest, encoding.size());
    for (Encoding& encoding : batch) {
      encoding.input_ids.resize(longest, pad_id_);
      encoding.token_type_ids.resize(longest, 0);
      encoding.attention_mask.resize(longest, 0);
    }
  }

  [[nodiscard]] const Vocab& vocab() const noexcept { return vocab_; }
  [[nodiscard]] const WordPieceOptions& options() const noexcept { return options_; }
  [[nodiscard]] std::int32_t cls_id() const noexcept { return cls_id_; }
  [[nodiscard]] std::int32_t sep_id() const noexcept { return sep_id_; }
  [[nodiscard]] std::int32_t unk_id() const noexcept { return unk_id_; }
  [[nodiscard]] std::int32_t pad_id() const noexcept { return pad_id_; }

 private:
  struct SpecialToken {
    std::string_view text;  // points at a string literal
    std::int32_t id;
  };

  // Buffers reused across the words of one call, so the per-word loop does not allocate once
  // they have grown to the longest word.
  struct Scratch {
    std::vector<char32_t> normalized;
    std::string word_bytes;
    std::vector<std::uint32_t> char_ends;  // char_ends[i]: byte offset after character i
  };

  void check_utf8(std::string_view text, const char* which) const {
    if (options_.invalid_utf8 != InvalidUtf8::error) return;
    if (const std::size_t bad = utf8::find_invalid(text); bad != std::string_view::npos) {
      throw Error(concat("stile: WordPieceTokenizer: ", which,
                         " is not valid UTF-8 (ill-formed byte sequence at byte offset ", bad, ")"));
    }
  }

  // Splits text at special tokens written in it, tokenizing the pieces between them.
  void tokenize_into(std::string_view text, std::vector<std::int32_t>& ids, Scratch& scratch) const {
    std::size_t piece_begin = 0;
    if (!options_.split_special_tokens) {
      // All special tokens start with '[' (an ASCII byte never occurs inside a multi-byte
      // character or a maximal ill-formed subpart, so matching bytes is matching characters).
      for (std::size_t at = text.find('['); at != std::string_view::npos; at = text.find('[', at)) {
        const SpecialToken* match = nullptr;
        for (const SpecialToken& special : special_tokens_) {
          if (text.substr(at).starts_with(special.text)) {
            match = &special;
            break;
          }
        }
        if (match == nullptr) {
          ++at;
          continue;
        }
        tokenize_plain(text.substr(piece_begin, at - piece_begin), ids, scratch);
        ids.push_back(match->id);
        at += match->text.size();
        piece_begin = at;
      }
    }
    tokenize_plain(text.substr(piece_begin), ids, scratch);
  }

  void tokenize_plain(std::string_view text, std::vector<std::int32_t>& ids, Scratch& scratch) const {
    if (text.empty()) return;
    scratch.normalized.clear();
    scratch.normalized.reserve(text.size() + 2);  // a good first guess: about a code point per byte
    normalizer_.normalize(text, scratch.normalized);
    for_each_bert_word(std::span<const char32_t>(scratch.normalized),
                       [&](std::span<const char32_t> word) { append_word_pieces(word, ids, scratch); });
  }

  // Greedy longest-match-first WordPiece of one word.
  void append_word_pieces(std::span<const char32_t> word, std::vector<std::int32_t>& ids, Scratch& scratch) const {
    if (word.size() > options_.max_input_chars_per_word) {
      ids.push_back(unk_id_);
      return;
    }
    std::string& bytes = scratch.word_bytes;
    std::vector<std::uint32_t>& char_ends = scratch.char_ends;
    bytes.clear();
    char_ends.clear();
    char_ends.push_back(0);
    for (const char32_t c : word) {
      utf8::append(bytes, c);
      char_ends.push_back(static_cast<std::uint32_t>(bytes.size()));
    }
    const std::size_t first_piece = ids.size();
    const std::size_t chars = word.size();
    for (std::size_t begin = 0; begin < chars;) {
      const bool continuation = begin > 0;
      const std::size_t longest = continuation ? vocab_.longest_continuation_bytes() : vocab_.longest_token_bytes();
      std::size_t end = chars;
      while (end > begin && char_ends[end] - char_ends[begin] > longest) --end;  // cannot match
      std::optional<std::int32_t> id;
      for (; end > begin; --end) {
        const std::string_view piece(bytes.data() + char_ends[begin], char_ends[end] - char_ends[begin]);
        id = continuation ? vocab_.find_continuation(piece) : vocab_.find(piece);
        if (id) break;
      }
      if (!id) {  // some part of the word is not in the vocabulary: the whole word is unknown
        ids.resize(first_piece);
        ids.push_back(unk_id_);
        return;
      }
      ids.push_back(*id);
      begin = end;
    }
  }

  // HF's TruncationStrategy::LongestFirst for a pair, budget = max_length less the 3 special tokens.
  static void truncate_longest_first(std::vector<std::int32_t>& a, std::vector<std::int32_t>& b, std::size_t budget) {
    if (a.size() + b.size() <= budget) return;
    std::size_t shorter = std::min(a.size(), b.size());
    std::size_t longer = 0;
    if (shorter > budget) {
      longer = shorter;
    } else {
      longer = std::max(shorter, budget - shorter);
    }
    if (shorter + longer > budget) {
      shorter = budget / 2;
      longer = shorter + budget % 2;
    }
    const bool a_is_longer = a.size() > b.size();  // on a tie, b counts as the longer
    const std::size_t keep_a = a_is_longer ? longer : shorter;
    const std::size_t keep_b = a_is_longer ? shorter : longer;
    if (a.size() > keep_a) a.resize(keep_a);
    if (b.size() > keep_b) b.resize(keep_b);
  }

  Vocab vocab_;
  WordPieceOptions options_;
  BertNormalizer normalizer_;
  std::int32_t cls_id_;
  std::int32_t sep_id_;
  std::int32_t unk_id_;
  std::int32_t pad_id_;
  std::vector<SpecialToken> special_tokens_;
};

}  // namespace stile
