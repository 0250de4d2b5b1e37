#pragma once
// tokenizer.json's "WordPiece" model (the reference's models/wordpiece/mod.rs and
// serialization.rs): greedy longest-match-first over a {token: id} vocab, pieces after the first
// looked up with continuing_subword_prefix ("##"); a piece with more than
// max_input_chars_per_word characters, or one that cannot be covered, becomes one unk_token
// covering the whole piece.
//
// The reference tries sequence[start..end] for every end from the longest down, a hash lookup
// each. Here the vocab is a trie over code points (one for the first piece, one for
// continuations with the prefix stripped, as wordpiece.hpp's continuation lookup), so the longest
// match is one walk from start: the same token, since both find the longest vocab entry. Before
// the walk, one hash lookup of the whole rest of the word (most words are tokens themselves).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/text/model_vocab.hpp"
#include "stile/text/tokenizer_parts.hpp"

namespace stile::tok {

class WordPieceModel final : public Model {
 public:
  WordPieceModel(model_detail::TokenVocab vocab, std::string unk_token, std::string continuing_subword_prefix,
                 std::uint64_t max_input_chars_per_word)
      : vocab_(std::move(vocab)),
        unk_token_(std::move(unk_token)),
        prefix_(std::move(continuing_subword_prefix)),
        max_chars_(max_input_chars_per_word),
        unk_id_(vocab_.find(unk_token_)) {
    std::u32string code_points;
    for (const auto& [token, id] : vocab_.ids()) {
      // A token that is not UTF-8 cannot match code points (the JSON reader gives UTF-8 anyway).
      if (!model_detail::decode_utf8(token, code_points)) continue;
      whole_.insert(code_points, id);
      if (!prefix_.empty() && token.starts_with(prefix_) &&
          model_detail::decode_utf8(std::string_view(token).substr(prefix_.size()), code_points)) {
        continuation_.insert(code_points, id);
        continuation_ids_.set(std::string_view(token).substr(prefix_.size()), id);
      }
    }
  }

  // Reads {"type": "WordPiece", "unk_token", "continuing_subword_prefix",
  // "max_input_chars_per_word", "vocab"} (all four required, as the reference; other keys are
  // ignored, as the reference does).
  [[nodiscard]] static WordPieceModel from_json(const nlohmann::json& j, const JsonPlace& place) {
    using namespace model_detail;
    if (!j.is_object()) place.fail("WordPiece model must be a JSON object, got ", json_excerpt(j));
    for (const char* key : {"unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"}) {
      if (!j.contains(key)) place.fail("WordPiece model: missing \"", key, "\"");
    }
    std::string unk = read_string(j["unk_token"], place / "unk_token");
    std::string prefix = read_string(j["continuing_subword_prefix"], place / "continuing_subword_prefix");
    const std::uint64_t max_chars =
        read_whole(j["max_input_chars_per_word"], ~std::uint64_t{0}, place / "max_input_chars_per_word");
    return WordPieceModel(read_vocab_object(j["vocab"], place / "vocab"), std::move(unk), std::move(prefix), max_chars);
  }

  void tokenize(std::u32string_view piece, std::vector<Token>& out) const override {
    const std::size_t n = piece.size();
    if (n == 0) return;
    if (n > max_chars_) {
      push_unk(n, out);
      return;
    }
    const std::size_t first = out.size();
    const model_detail::CodeTrie& continuation = prefix_.empty() ? whole_ : continuation_;
    const model_detail::StringTable& continuation_ids = prefix_.empty() ? vocab_.table() : continuation_ids_;
    // The rest of the word is most often a token itself (a word in the vocab): one hash lookup of
    // its bytes then, before walking the trie character by character.
    thread_local std::string bytes;
    thread_local std::vector<std::uint32_t> starts;  // starts[i]: byte offset of character i
    bytes.clear();
    starts.clear();
    for (const char32_t c : piece) {
      starts.push_back(static_cast<std::uint32_t>(bytes.size()));
      utf8::append(bytes, c);
    }
    for (std::size_t start = 0; start < n;) {
      const model_detail::StringTable& ids = start == 0 ? vocab_.table() : continuation_ids;
      if (const auto id = ids.find(std::string_view(bytes).substr(starts[start]))) {
        out.push_back({*id, static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(n)});
        return;
      }
      const auto [length, id] = (start == 0 ? whole_ : continuation).longest_prefix(piece.substr(start));
      if (length == 0) {
        out.resize(first);
        push_unk(n, out);
        return;
      }
      out.push_back({id, static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(start + length)});
      start += length;
    }
  }

  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    return vocab_.find(token);
  }
  [[nodiscard]] std::optional<std::string_view> id_to_token(std::int32_t id) const override { return vocab_.token(id); }
  [[nodiscard]] std::size_t vocab_size() const override { return vocab_.size(); }
  [[nodiscard]] std::size_t id_end() const override { return vocab_.id_end(); }

  [[nodiscard]] std::optional<std::int32_t> unk_id() const override { return unk_id_; }
  [[nodiscard]] std::string_view continuing_subword_prefix() const override { return prefix_; }
  [[nodiscard]] const std::string& unk_token() const noexcept { return unk_token_; }

 private:
  void push_unk(std::size_t n, std::vector<Token>& out) const {
    if (!unk_id_) {
      // The reference fails the same way (WordPiece error: Missing [UNK] token from the vocabulary).
      throw Error(
          concat("stile: WordPiece model: unk_token \"", unk_token_, "\" is not in the vocab, and a word needs it"));
    }
    out.push_back({*unk_id_, 0, static_cast<std::uint32_t>(n)});
  }

  model_detail::TokenVocab vocab_;
  std::string unk_token_;
  std::string prefix_;
  std::uint64_t max_chars_;
  std::optional<std::int32_t> unk_id_;
  model_detail::CodeTrie whole_;
  model_detail::CodeTrie continuation_;         // tokens that start with prefix_, prefix stripped
  model_detail::StringTable continuation_ids_;  // the same, by their bytes
};

}  // namespace stile::tok
