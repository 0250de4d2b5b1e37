#pragma once
// What the tokenizer.json models (wordpiece_model.hpp, wordlevel_model.hpp, bpe_model.hpp,
// unigram_model.hpp) share: a token <-> id vocabulary read from JSON with errors naming the field,
// a flat hash map of 64-bit keys (the BPE merges, per-character ids), and a trie over code points
// (WordPiece's longest match, Unigram's common-prefix search).
//
// The reference (tokenizers/src/models) keys everything by UTF-8 strings in hash maps. A model
// here gets a split's code points, so the hot paths look code points up directly: a vocab token
// that is valid UTF-8 matches a run of code points exactly when its bytes match the run's bytes,
// so the results are the same without re-encoding each candidate.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok::model_detail {

// Refused as absurd: more vocab entries or merges than any real tokenizer has (the largest have
// a few hundred thousand), ids beyond what Token::id (int32) holds.
inline constexpr std::size_t kMaxEntries = std::size_t{1} << 24;
inline constexpr std::uint64_t kMaxId = std::numeric_limits<std::int32_t>::max() - 1;

struct StringHash {
  using is_transparent = void;
  [[nodiscard]] std::size_t operator()(std::string_view text) const noexcept {
    return std::hash<std::string_view>{}(text);
  }
};
using IdMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// A valid UTF-8 string's code points (false when it is not valid UTF-8).
inline bool decode_utf8(std::string_view text, std::u32string& out) {
  out.clear();
  for (std::size_t at = 0; at < text.size();) {
    const utf8::DecodedChar d = utf8::decode(text, at);
    if (!d.valid) return false;
    out.push_back(d.code_point);
    at += d.size;
  }
  return true;
}

inline void append_utf8(std::string& out, std::u32string_view text) {
  for (const char32_t c : text) utf8::append(out, c);
}

[[nodiscard]] inline std::uint32_t utf8_size(char32_t c) noexcept {
  if (c < 0x80) return 1;
  if (c < 0x800) return 2;
  if (c < 0x10000 || c > 0x10FFFF) return 3;  // utf8::append writes U+FFFD for what cannot be encoded
  return 4;
}

// Strings -> ids in one flat table (hash, id, place in a pool of the strings' bytes), so a lookup
// is about two cache misses where std::unordered_map<std::string, ...> costs three or four: the
// hot lookups of WordPiece's words and the vocab's tokens.
class StringTable {
 public:
  StringTable() { entries_.resize(16); }

  // Sets text's id (replacing an earlier one).
  void set(std::string_view text, std::int32_t id) {
    if ((size_ + 1) * 2 > entries_.size()) grow();
    const std::uint64_t h = hash(text);
    std::size_t i = h & (entries_.size() - 1);
    for (;; i = (i + 1) & (entries_.size() - 1)) {
      Entry& e = entries_[i];
      if (e.id < 0) break;
      if (e.hash == h && view(e) == text) {
        e.id = id;
        return;
      }
    }
    entries_[i] = {h, static_cast<std::uint32_t>(pool_.size()), static_cast<std::uint32_t>(text.size()), id};
    pool_.append(text);
    ++size_;
  }
  [[nodiscard]] std::optional<std::int32_t> find(std::string_view text) const noexcept {
    const std::uint64_t h = hash(text);
    for (std::size_t i = h & (entries_.size() - 1);; i = (i + 1) & (entries_.size() - 1)) {
      const Entry& e = entries_[i];
      if (e.id < 0) return std::nullopt;
      if (e.hash == h && e.size == text.size() && view(e) == text) return e.id;
    }
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct Entry {
    std::uint64_t hash = 0;
    std::uint32_t offset = 0;
    std::uint32_t size = 0;
    std::int32_t id = -1;  // -1: empty slot
  };
  [[nodiscard]] static std::uint64_t hash(std::string_view text) noexcept {
    // std::hash's bytes, mixed so the low bits (the slot) depend on all of them.
    const std::uint64_t h = std::hash<std::string_view>{}(text);
    return (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull ^ (h >> 32);
  }
  [[nodiscard]] std::string_view view(const Entry& e) const noexcept {
    return std::string_view(pool_).substr(e.offset, e.size);
  }
  void grow() {
    std::vector<Entry> old(entries_.size() * 2);
    old.swap(entries_);
    for (const Entry& e : old) {
      if (e.id < 0) continue;
      std::size_t i = e.hash & (entries_.size() - 1);
      while (entries_[i].id >= 0) i = (i + 1) & (entries_.size() - 1);
      entries_[i] = e;
    }
  }

  std::vector<Entry> entries_;
  std::string pool_;
  std::size_t size_ = 0;
};

// Token <-> id. Ids need not be dense (the reference allows holes); the reverse table is a
// vector, so ids far beyond the number of tokens are refused when read (read_vocab_object).
class TokenVocab {
 public:
  TokenVocab() = default;
  // Moved, never copied: by_id_ points into ids_'s nodes, which a move keeps and a copy would not.
  TokenVocab(TokenVocab&&) noexcept = default;
  TokenVocab& operator=(TokenVocab&&) noexcept = default;
  TokenVocab(const TokenVocab&) = delete;
  TokenVocab& operator=(const TokenVocab&) = delete;
  ~TokenVocab() = default;

  // Adds token with id, replacing an earlier id of the same token (as the reference's map does).
  void set(std::string token, std::int32_t id) {
    table_.set(token, id);
    auto [it, inserted] = ids_.insert_or_assign(std::move(token), id);
    (void)inserted;
    const auto index = static_cast<std::size_t>(id);
    if (index >= by_id_.size()) by_id_.resize(index + 1, nullptr);
    by_id_[index] = &it->first;
  }
  [[nodiscard]] std::optional<std::int32_t> find(std::string_view token) const { return table_.find(token); }
  [[nodiscard]] std::optional<std::string_view> token(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= by_id_.size() || by_id_[static_cast<std::size_t>(id)] == nullptr) {
      return std::nullopt;
    }
    return std::string_view(*by_id_[static_cast<std::size_t>(id)]);
  }
  [[nodiscard]] std::size_t size() const noexcept { return ids_.size(); }
  [[nodiscard]] std::size_t id_end() const noexcept { return by_id_.size(); }  // one past the largest id
  [[nodiscard]] const IdMap& ids() const noexcept { return ids_; }
  [[nodiscard]] const StringTable& table() const noexcept { return table_; }

 private:
  IdMap ids_;  // for iterating; lookups go to table_
  StringTable table_;
  std::vector<const std::string*> by_id_;  // points at ids_'s keys (node-based: stable)
};

// A JSON string member's value, or a clear error naming the field.
inline const std::string& read_string(const nlohmann::json& j, const JsonPlace& place) {
  if (!j.is_string()) place.fail("must be a string, got ", json_excerpt(j));
  return j.get_ref<const std::string&>();
}
// null -> nullopt, else a string.
inline std::optional<std::string> read_optional_string(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null()) return std::nullopt;
  return read_string(j, place);
}
inline bool read_bool(const nlohmann::json& j, const JsonPlace& place) {
  if (!j.is_boolean()) place.fail("must be true or false, got ", json_excerpt(j));
  return j.get<bool>();
}
// A whole number >= 0 that fits in the reference's type (u32 ids, usize sizes).
inline std::uint64_t read_whole(const nlohmann::json& j, std::uint64_t max, const JsonPlace& place) {
  std::uint64_t v = 0;
  if (j.is_number_unsigned()) {
    v = j.get<std::uint64_t>();
  } else if (j.is_number_integer() && j.get<std::int64_t>() >= 0) {
    v = static_cast<std::uint64_t>(j.get<std::int64_t>());
  } else {
    place.fail("must be a whole number >= 0, got ", json_excerpt(j));
  }
  if (v > max) place.fail("is ", v, ", more than ", max, " (absurd)");
  return v;
}

// {"token": id, ...} (WordPiece, WordLevel, BPE). Refused: not an object, an id that is not a
// whole number or is beyond int32, two tokens with one id (the reference would keep either,
// depending on hash order), ids far beyond the number of tokens (a reverse table that large).
inline TokenVocab read_vocab_object(const nlohmann::json& j, const JsonPlace& place) {
  if (!j.is_object()) place.fail("must be a JSON object {token: id}, got ", json_excerpt(j));
  if (j.size() > kMaxEntries) place.fail("has ", j.size(), " entries, more than ", kMaxEntries, " (absurd)");
  std::uint64_t max_id = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const nlohmann::json& v = it.value();
    // The place (a string) is made only for the error: this loop runs once per token.
    const bool plain = v.is_number_unsigned() && v.get<std::uint64_t>() <= kMaxId;
    max_id =
        std::max(max_id, plain ? v.get<std::uint64_t>() : read_whole(v, kMaxId, place / concat("\"", it.key(), "\"")));
  }
  if (!j.empty() && max_id >= 4 * static_cast<std::uint64_t>(j.size()) + 65536) {
    place.fail("has ids up to ", max_id, " for ", j.size(), " tokens (absurd holes)");
  }
  TokenVocab vocab;
  std::vector<const std::string*> owner(j.empty() ? 0 : static_cast<std::size_t>(max_id) + 1, nullptr);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const auto id = it.value().get<std::uint64_t>();
    if (owner[id] != nullptr) {
      place.fail("tokens \"", *owner[id], "\" and \"", it.key(), "\" both have id ", id);
    }
    owner[id] = &it.key();
    vocab.set(it.key(), static_cast<std::int32_t>(id));
  }
  return vocab;
}

// An open-addressing hash map from 64-bit keys (never ~0) to small values, for the hot paths: key
// and value side by side, so a lookup costs one cache miss (std::unordered_map's node per entry
// costs two or three).
template <class Value>
class FlatMap64 {
 public:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};

  FlatMap64() { rehash(16); }

  // Sets key's value (replacing an earlier one); returns where it is stored (valid until the next set).
  Value* set(std::uint64_t key, Value value) {
    if ((size_ + 1) * 2 > entries_.size()) rehash(entries_.size() * 2);
    std::size_t i = slot(key);
    while (entries_[i].key != kEmpty && entries_[i].key != key) i = (i + 1) & mask_;
    if (entries_[i].key == kEmpty) ++size_;
    entries_[i] = {key, value};
    return &entries_[i].value;
  }
  [[nodiscard]] const Value* find(std::uint64_t key) const noexcept {
    for (std::size_t i = slot(key);; i = (i + 1) & mask_) {
      if (entries_[i].key == key) return &entries_[i].value;
      if (entries_[i].key == kEmpty) return nullptr;
    }
  }
  [[nodiscard]] Value* find(std::uint64_t key) noexcept {
    return const_cast<Value*>(static_cast<const FlatMap64&>(*this).find(key));
  }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct Entry {
    std::uint64_t key = kEmpty;
    Value value{};
  };
  [[nodiscard]] std::size_t slot(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void rehash(std::size_t capacity) {
    std::vector<Entry> old(capacity);
    old.swap(entries_);
    mask_ = capacity - 1;
    shift_ = 64 - std::countr_zero(capacity);
    size_ = 0;
    for (const Entry& e : old) {
      if (e.key != kEmpty) set(e.key, e.value);
    }
  }

  std::vector<Entry> entries_;
  std::size_t mask_ = 0;
  int shift_ = 60;
  std::size_t size_ = 0;
};

// A trie over code points whose nodes may hold a value (a token id). An edge carries its child's
// value, so a step is one lookup: the root's ASCII edges in a table, its other edges in a small
// map of their own (hot in cache), the rest in one flat map keyed by (node, code point).
class CodeTrie {
 public:
  // Sets the value at key's node (replacing an earlier one). An empty key is ignored: the
  // reference's search never reports the empty prefix.
  void insert(std::u32string_view key, std::int32_t value) {
    if (key.empty()) return;
    std::uint32_t node = 0;
    Edge* edge = nullptr;
    for (const char32_t c : key) {
      edge = find(node, c);
      if (edge == nullptr) {
        const Edge fresh{++nodes_, -1};
        if (node == 0 && c < 128) {
          root_ascii_[c] = fresh;
          edge = &root_ascii_[c];
        } else if (node == 0) {
          edge = root_.set(c, fresh);
        } else {
          edge = edges_.set(edge_key(node, c), fresh);
        }
      }
      node = edge->child;
    }
    edge->value = value;
  }

  // Calls f(length, value) for every key that is a prefix of text (shortest first).
  template <class F>
  void for_each_prefix(std::u32string_view text, F&& f) const {
    std::uint32_t node = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      const Edge* edge = find(node, text[i]);
      if (edge == nullptr) return;
      if (edge->value >= 0) f(i + 1, edge->value);
      node = edge->child;
    }
  }

  // The longest key that is a prefix of text: {length, value}, or {0, -1}.
  [[nodiscard]] std::pair<std::size_t, std::int32_t> longest_prefix(std::u32string_view text) const {
    std::pair<std::size_t, std::int32_t> best{0, -1};
    for_each_prefix(text, [&](std::size_t length, std::int32_t value) { best = {length, value}; });
    return best;
  }

 private:
  struct Edge {
    std::uint32_t child = 0;  // 0: no edge (the root is never a child)
    std::int32_t value = -1;  // the child's value; -1: no key ends there
  };
  [[nodiscard]] static std::uint64_t edge_key(std::uint32_t node, char32_t c) noexcept {
    return (static_cast<std::uint64_t>(node) << 32) | static_cast<std::uint32_t>(c);
  }
  [[nodiscard]] const Edge* find(std::uint32_t node, char32_t c) const noexcept {
    if (node == 0) {
      if (c < 128) return root_ascii_[c].child == 0 ? nullptr : &root_ascii_[c];
      return root_.find(c);
    }
    return edges_.find(edge_key(node, c));
  }
  [[nodiscard]] Edge* find(std::uint32_t node, char32_t c) noexcept {
    return const_cast<Edge*>(static_cast<const CodeTrie&>(*this).find(node, c));
  }

  std::uint32_t nodes_ = 0;
  std::array<Edge, 128> root_ascii_{};
  FlatMap64<Edge> root_;
  FlatMap64<Edge> edges_;
};

// The double the reference's JSON reader (serde_json without its float_roundtrip feature) makes of
// the number written as the shortest round-trip decimal of x (how the reference, and Python's json,
// write floats): the decimal digits as a u64 significand, converted to double (rounded), then
// multiplied or divided by 10^|exponent| (rounded again): serde_json's f64_from_parts. That is
// one ulp off the correctly rounded value for about one in five 17-digit scores, and Unigram's
// Viterbi ties depend on it (measured: 602 of a 3,000-piece vocab's scores differ; with this, none).
// nlohmann parses correctly rounded, so x is the value the text denotes and its shortest digits
// are the text's digits.
inline double serde_json_f64(double x) {
  if (x == 0.0 || !std::isfinite(x)) return x;
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, std::fabs(x), std::chars_format::scientific);
  const std::string_view text(buffer, static_cast<std::size_t>(result.ptr - buffer));
  const std::size_t e = text.find('e');
  std::uint64_t significand = 0;
  int digits = 0;
  for (std::size_t i = 0; i < e; ++i) {
    if (text[i] == '.') continue;
    significand = significand * 10 + static_cast<std::uint64_t>(text[i] - '0');
    ++digits;
  }
  int exponent = 0;
  std::from_chars(text.data() + e + 1 + (text[e + 1] == '+' ? 1 : 0), text.data() + text.size(), exponent);
  exponent -= digits - 1;
  static const std::array<double, 309> kPow10 = [] {
    std::array<double, 309> table{};
    for (std::size_t k = 0; k < table.size(); ++k) table[k] = std::strtod(concat("1e", k).c_str(), nullptr);
    return table;
  }();
  double f = static_cast<double>(significand);
  while (true) {
    const auto k = static_cast<std::size_t>(exponent < 0 ? -exponent : exponent);
    if (k < kPow10.size()) {
      f = exponent >= 0 ? f * kPow10[k] : f / kPow10[k];
      break;
    }
    if (exponent >= 0) return x;  // serde_json refuses it (out of range); nlohmann gave infinity before this
    f /= 1e308;
    exponent += 308;
  }
  return x < 0 ? -f : f;
}

// A per-thread cache of a model's tokens for pieces it has seen (the reference caches BPE and
// Unigram words the same way: up to 10,000 pieces, of fewer than 256 bytes). A const model stays
// safe to share: each thread has its own maps, found by the model's id (unique per instance, never
// reused, so a new model at a dead one's address cannot see its entries); a thread keeps the maps
// of its last kSlots models.
class PieceCache {
 public:
  static constexpr std::size_t kCapacity = 10000;
  static constexpr std::size_t kMaxPiece = 255;  // code points; the reference: < 256 bytes
  static constexpr std::size_t kSlots = 4;

  PieceCache() : id_(next_id()) {}
  PieceCache(const PieceCache&) : id_(next_id()) {}
  PieceCache& operator=(const PieceCache&) { return *this; }

  // Appends piece's cached tokens to out: true when it was cached.
  bool lookup(std::u32string_view piece, std::vector<Token>& out) const {
    if (piece.size() > kMaxPiece) return false;
    Map& map = this_thread();
    const auto it = map.find(piece);
    if (it == map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void store(std::u32string_view piece, const Token* tokens, std::size_t count) const {
    if (piece.size() > kMaxPiece) return;
    Map& map = this_thread();
    if (map.size() >= kCapacity) return;
    map.emplace(std::u32string(piece), std::vector<Token>(tokens, tokens + count));
  }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::u32string_view text) const noexcept { return std::hash<std::u32string_view>{}(text); }
  };
  using Map = std::unordered_map<std::u32string, std::vector<Token>, Hash, std::equal_to<>>;

  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> counter{0};
    return ++counter;
  }
  Map& this_thread() const {
    thread_local std::vector<std::pair<std::uint64_t, std::unique_ptr<Map>>> slots;
    if (!slots.empty() && slots.front().first == id_) return *slots.front().second;
    for (std::size_t i = 1; i < slots.size(); ++i) {
      if (slots[i].first == id_) {
        std::swap(slots[i], slots.front());
        return *slots.front().second;
      }
    }
    if (slots.size() == kSlots) slots.pop_back();
    slots.insert(slots.begin(), {id_, std::make_unique<Map>()});
    return *slots.front().second;
  }

  std::uint64_t id_;
};

// The id of the byte fallback token "<0xNN>" of every byte (the reference's format "<{:#04X}>"),
// -1 where the vocab has none.
template <class Lookup>
std::array<std::int32_t, 256> byte_token_ids(Lookup&& lookup) {
  std::array<std::int32_t, 256> ids{};
  constexpr char kHex[] = "0123456789ABCDEF";
  for (std::size_t b = 0; b < 256; ++b) {
    const std::string name{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    const std::optional<std::int32_t> id = lookup(name);
    ids[b] = id ? *id : -1;
  }
  return ids;
}

}  // namespace stile::tok::model_detail
