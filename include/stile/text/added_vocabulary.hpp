#pragma once
// The tokens a tokenizer.json lists under "added_tokens" (special tokens such as [CLS] or <mask>,
// and tokens added on top of a model's vocabulary), and how they are cut out of a text before the
// normalizer, pre-tokenizer and model see it: Hugging Face tokenizers' AddedVocabulary
// (tokenizer/added_vocabulary.rs, with tokenizer/serialization.rs for how the list is read).
//
// What the reference does, kept here on purpose:
// - The "id" of each entry is checked for type but not used: ids are assigned as add_tokens does
//   (the content's id in the model's vocabulary, else the next id from the model's vocab_size).
//   A repeated content keeps its first id and takes the later entry's flags. Empty content is
//   skipped.
// - Matching is leftmost-longest over all contents at once (the reference's Aho-Corasick with
//   MatchKind::LeftmostLongest); a match refused by single_word still consumes its text.
// - Two passes: the contents with normalized=false on the original text, then the ones with
//   normalized=true (their content passed through the normalizer) on each normalized piece.
// Differences: none known for real files. Contents whose normalized form is empty are never
// matched (the reference then splits the text at every byte offset, or panics inside a
// character); contents longer than 4096 bytes are refused (matching costs up to that many steps
// per character of a text).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/text/added_vocabulary_tables.hpp"
#include "stile/text/normalized_string.hpp"
#include "stile/text/pre_tokenized_string.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

struct AddedToken {
  std::string content;
  bool single_word = false;  // match only where no word character (Rust regex \w) touches it
  bool lstrip = false;       // the match takes the whitespace on its left
  bool rstrip = false;       // the match takes the whitespace on its right
  bool normalized = true;    // matched on the normalized text (its content normalized too)
  bool special = false;
  friend bool operator==(const AddedToken&, const AddedToken&) = default;
};

namespace added_detail {

// Rust regex \w as the reference's single_word check sees it (a probed table).
[[nodiscard]] inline bool is_word_char(char32_t c) noexcept {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  const auto& table = added_tables::kWordChar;
  const auto* it = std::upper_bound(std::begin(table), std::end(table), c,
                                    [](char32_t v, const added_tables::CodePointRange& r) { return v < r.first; });
  return it != std::begin(table) && c <= (it - 1)->last;
}

// Rust regex \s and char::is_whitespace: the Unicode White_Space property.
[[nodiscard]] inline bool is_white_space(char32_t c) noexcept {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// The patterns of one pass, as a trie over code points; match() gives the longest pattern that
// starts at a position. Children are sorted (binary search); the root's first characters are
// also kept in a small filter so a text without them costs one lookup per character.
class Trie {
 public:
  [[nodiscard]] bool empty() const noexcept { return nodes_.size() <= 1; }

  void insert(std::u32string_view pattern, std::int32_t id) {
    if (pattern.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    std::size_t node = 0;
    for (const char32_t c : pattern) {
      auto& children = nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), c,
                                 [](const std::pair<char32_t, std::uint32_t>& e, char32_t v) { return e.first < v; });
      if (it != children.end() && it->first == c) {
        node = it->second;
        continue;
      }
      const auto next = static_cast<std::uint32_t>(nodes_.size());
      children.insert(it, {c, next});
      nodes_.emplace_back();
      node = next;
    }
    // Two contents with the same pattern (two normalized contents that normalize alike): the
    // smaller id, as the reference happens to give in the case we checked.
    std::int32_t& value = nodes_[node].value;
    if (value < 0 || id < value) value = id;
    if (pattern[0] < 128)
      ascii_first_[pattern[0] >> 6] |= std::uint64_t{1} << (pattern[0] & 63);
    else
      non_ascii_first_ = true;
  }

  struct Match {
    std::size_t end = 0;
    std::int32_t id = -1;  // -1: no pattern starts here
  };

  // Whether some pattern may start with c (a filter: the scan calls match() only there).
  [[nodiscard]] bool may_start(char32_t c) const noexcept {
    return c < 128 ? (ascii_first_[c >> 6] >> (c & 63) & 1) != 0 : non_ascii_first_;
  }

  [[nodiscard]] Match match(std::u32string_view text, std::size_t begin) const {
    Match best;
    std::size_t node = 0;
    for (std::size_t i = begin; i < text.size(); ++i) {
      const auto& children = nodes_[node].children;
      const char32_t c = text[i];
      auto it = std::lower_bound(children.begin(), children.end(), c,
                                 [](const std::pair<char32_t, std::uint32_t>& e, char32_t v) { return e.first < v; });
      if (it == children.end() || it->first != c) break;
      node = it->second;
      if (nodes_[node].value >= 0) best = {i + 1, nodes_[node].value};
    }
    return best;
  }

 private:
  struct Node {
    std::vector<std::pair<char32_t, std::uint32_t>> children;
    std::int32_t value = -1;
  };
  std::vector<Node> nodes_;
  std::uint64_t ascii_first_[2] = {0, 0};
  bool non_ascii_first_ = false;
};

}  // namespace added_detail

class AddedVocabulary {
 public:
  static constexpr std::size_t kMaxContentBytes = 4096;

  AddedVocabulary() = default;

  // tokenizer.json's "added_tokens" (null or absent: empty), read as the reference does (see the
  // top of this file). Each entry needs id (u32), content (string) and the five flags (bools);
  // other keys are ignored, as by the reference. `normalizer` (may be null) gives the normalized
  // contents; `model` the ids of contents already in its vocabulary.
  [[nodiscard]] static AddedVocabulary read(const nlohmann::json& j, const JsonPlace& place, const Model& model,
                                            const Normalizer* normalizer) {
    AddedVocabulary vocabulary;
    if (j.is_null()) return vocabulary;
    if (!j.is_array()) place.fail("must be a JSON array of added tokens, got ", json_excerpt(j));
    if (j.size() > (std::size_t{1} << 24)) place.fail("has ", j.size(), " entries (stile reads at most 2^24)");
    std::vector<AddedToken> tokens;
    tokens.reserve(j.size());
    for (std::size_t i = 0; i < j.size(); ++i) {
      const JsonPlace at = place[i];
      const nlohmann::json& e = j[i];
      if (!e.is_object()) at.fail("must be a JSON object, got ", json_excerpt(e));
      const auto member = [&](std::string_view key) -> const nlohmann::json& {
        const auto it = e.find(key);
        if (it == e.end()) at.fail("missing \"", key, "\"");
        return *it;
      };
      const nlohmann::json& id = member("id");
      if (!id.is_number_unsigned() || id.get<std::uint64_t>() > 0xFFFFFFFFu) {
        (at / "id").fail("must be an unsigned 32-bit integer, got ", json_excerpt(id));
      }
      AddedToken token;
      const nlohmann::json& content = member("content");
      if (!content.is_string()) (at / "content").fail("must be a string, got ", json_excerpt(content));
      token.content = content.get<std::string>();
      // Matching walks a content's characters at each position of a text: bound that walk.
      if (token.content.size() > kMaxContentBytes) {
        (at / "content")
            .fail("is ", token.content.size(), " bytes long (stile reads added tokens of at most ", kMaxContentBytes,
                  ")");
      }
      const auto flag = [&](std::string_view key) {
        const nlohmann::json& v = member(key);
        if (!v.is_boolean()) (at / key).fail("must be true or false, got ", json_excerpt(v));
        return v.get<bool>();
      };
      token.single_word = flag("single_word");
      token.lstrip = flag("lstrip");
      token.rstrip = flag("rstrip");
      token.normalized = flag("normalized");
      token.special = flag("special");
      tokens.push_back(std::move(token));
    }
    vocabulary.add_tokens(tokens, model, normalizer);
    return vocabulary;
  }

  // The reference's add_tokens: ids from the added tokens or the model's vocabulary, else new ones
  // after the model's vocab_size; then both passes' patterns rebuilt.
  void add_tokens(std::span<const AddedToken> tokens, const Model& model, const Normalizer* normalizer) {
    std::int64_t next_id = static_cast<std::int64_t>(model.vocab_size());
    if (!by_id_.empty()) {
      std::int64_t max = 0;
      for (const auto& [id, entry] : by_id_) max = std::max<std::int64_t>(max, id);
      if (max >= next_id || model.vocab_size() == 0) next_id = max + 1;
    }
    for (const AddedToken& token : tokens) {
      if (token.content.empty()) continue;
      if (const auto it = by_content_.find(token.content); it != by_content_.end()) {
        if (by_id_.at(it->second).token == token) continue;
      }
      std::int32_t id = 0;
      if (const auto known = token_to_id(token.content, model)) {
        id = *known;
      } else {
        if (next_id > 0x7FFFFFFF) throw Error("stile: added tokens: more ids than a 32-bit id holds");
        id = static_cast<std::int32_t>(next_id++);
      }
      Entry entry{token, {}};
      const NormalizedString original = NormalizedString::from_original(token.content, 0, token.content.size());
      if (token.normalized && normalizer != nullptr) {
        NormalizedString s = original;
        normalizer->normalize(s);
        entry.pattern = std::u32string(s.chars());
      } else {
        entry.pattern = std::u32string(original.chars());
      }
      by_content_[token.content] = id;
      if (token.special) special_contents_.emplace(token.content, true);
      by_id_.insert_or_assign(id, std::move(entry));
    }
    rebuild();
  }

  // Cuts the added tokens out of `text` and normalizes the rest (the reference's
  // extract_and_normalize): the original text split at the normalized=false contents, each other
  // piece normalized by `normalizer` (may be null), then split at the normalized=true contents.
  // Found tokens are splits with tokens = {Token{id, 0, size}}.
  [[nodiscard]] PreTokenizedString extract_and_normalize(std::string_view text, const Normalizer* normalizer) const {
    PreTokenizedString pieces(NormalizedString::from_original(text, 0, text.size()));
    if (!split_trie_.empty()) {
      pieces.split([&](std::size_t, NormalizedString&& s) { return split_with_indices(std::move(s), split_trie_); });
    }
    pieces.split([&](std::size_t, NormalizedString&& s) {
      if (normalizer != nullptr) normalizer->normalize(s);
      return split_with_indices(std::move(s), normalized_trie_);
    });
    return pieces;
  }

  // Added tokens only (the model's vocabulary is separate).
  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view content) const {
    const auto it = by_content_.find(std::string(content));
    if (it == by_content_.end()) return std::nullopt;
    return it->second;
  }
  // The reference's Tokenizer::token_to_id: the added tokens first, then the model.
  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view content, const Model& model) const {
    if (auto id = token_to_id(content)) return id;
    return model.token_to_id(content);
  }
  [[nodiscard]] std::optional<std::string_view> id_to_token(std::int32_t id) const {
    const AddedToken* t = token(id);
    if (t == nullptr) return std::nullopt;
    return std::string_view(t->content);
  }
  [[nodiscard]] const AddedToken* token(std::int32_t id) const {
    const auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &it->second.token;
  }
  // As the reference's is_special_token: a content once added as special stays special.
  [[nodiscard]] bool is_special(std::int32_t id) const {
    const AddedToken* t = token(id);
    return t != nullptr && special_contents_.count(t->content) != 0;
  }
  // The content as matched in the normalized text (the content itself for normalized=false).
  [[nodiscard]] std::optional<std::u32string_view> pattern(std::int32_t id) const {
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    return std::u32string_view(it->second.pattern);
  }
  // f(id, token) for every added token, in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [id, entry] : by_id_) f(id, entry.token);
  }
  [[nodiscard]] std::size_t size() const noexcept { return by_id_.size(); }
  // One past the largest added id (0 without added tokens).
  [[nodiscard]] std::size_t end_id() const noexcept {
    std::size_t end = 0;
    for (const auto& [id, entry] : by_id_) end = std::max(end, static_cast<std::size_t>(id) + 1);
    return end;
  }
  [[nodiscard]] bool empty() const noexcept { return by_id_.empty(); }

 private:
  struct Entry {
    AddedToken token;
    std::u32string pattern;
  };

  void rebuild() {
    split_trie_ = {};
    normalized_trie_ = {};
    for (const auto& [id, entry] : by_id_) {
      (entry.token.normalized ? normalized_trie_ : split_trie_).insert(entry.pattern, id);
    }
  }

  struct Found {
    std::int32_t id;  // -1: not an added token
    std::size_t begin, end;
  };

  // The reference's find_matches, on code points (the same as its bytes: UTF-8 matches of UTF-8
  // patterns start and end on characters).
  [[nodiscard]] std::vector<Found> find_matches(std::u32string_view text, const added_detail::Trie& trie) const {
    std::vector<Found> found;
    if (text.empty() || trie.empty()) {
      found.push_back({-1, 0, text.size()});
      return found;
    }
    std::size_t start_offset = 0;
    for (std::size_t at = 0; at < text.size();) {
      if (!trie.may_start(text[at])) {
        ++at;
        continue;
      }
      const added_detail::Trie::Match m = trie.match(text, at);
      if (m.id < 0) {
        ++at;
        continue;
      }
      std::size_t start = at;
      std::size_t stop = m.end;
      at = m.end;
      const AddedToken& token = by_id_.at(m.id).token;
      if (token.single_word) {
        const bool start_space = start == 0 || !added_detail::is_word_char(text[start - 1]);
        const bool stop_space = stop == text.size() || !added_detail::is_word_char(text[stop]);
        if (!start_space || !stop_space) continue;
      }
      if (token.lstrip) {
        std::size_t new_start = start;
        while (new_start > 0 && added_detail::is_white_space(text[new_start - 1])) --new_start;
        start = std::max(new_start, start_offset);
      }
      if (token.rstrip) {
        while (stop < text.size() && added_detail::is_white_space(text[stop])) ++stop;
      }
      if (start_offset < start) found.push_back({-1, start_offset, start});
      found.push_back({m.id, start, stop});
      start_offset = stop;
    }
    if (start_offset != text.size()) found.push_back({-1, start_offset, text.size()});
    return found;
  }

  [[nodiscard]] std::vector<Split> split_with_indices(NormalizedString&& s, const added_detail::Trie& trie) const {
    std::vector<Split> out;
    if (trie.empty()) {
      out.push_back({std::move(s), std::nullopt});
      return out;
    }
    const std::vector<Found> found = find_matches(s.chars(), trie);
    if (found.size() == 1 && found[0].id < 0) {
      out.push_back({std::move(s), std::nullopt});
      return out;
    }
    out.reserve(found.size());
    for (const Found& f : found) {
      Split split{s.slice(f.begin, f.end), std::nullopt};
      if (f.id >= 0) {
        split.tokens = std::vector<Token>{Token{f.id, 0, static_cast<std::uint32_t>(f.end - f.begin)}};
      }
      out.push_back(std::move(split));
    }
    return out;
  }

  std::unordered_map<std::string, std::int32_t> by_content_;
  std::unordered_map<std::int32_t, Entry> by_id_;
  std::unordered_map<std::string, bool> special_contents_;
  added_detail::Trie split_trie_;       // normalized = false, on the original text
  added_detail::Trie normalized_trie_;  // normalized = true, on the normalized pieces
};

}  // namespace stile::tok
