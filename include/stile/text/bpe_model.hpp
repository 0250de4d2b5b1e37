#pragma once
// tokenizer.json's "BPE" model (the reference's models/bpe/model.rs, word.rs, serialization.rs).
//
// A piece starts as one symbol per character: the vocab id of the character (with
// continuing_subword_prefix before every character but the first, end_of_word_suffix after the
// last), else its UTF-8 bytes as "<0xNN>" tokens (byte_fallback, all bytes or none), else
// unk_token (consecutive ones fused into one when fuse_unk), else nothing. Then merges apply in
// the reference's order: a min-heap of (rank, position) over adjacent pairs, stale entries
// skipped when the pair at the position no longer makes the entry's token (word.rs merge_all;
// equal heap entries are identical, so any heap pops the same sequence). With ignore_merges a
// piece that is itself a vocab token is that token.
//
// Offsets: the reference gives each symbol a byte length (a byte fallback token one byte, the
// prefix's and suffix's bytes included) and reports running sums; here those byte ranges become
// the code points they touch, which is what the reference's pipeline makes of them (a byte
// fallback token of "é" covers "é").
//
// Pieces seen before come from a per-thread cache (model_vocab.hpp's PieceCache, the reference's
// kind: merging is deterministic, so the tokens are the same).
//
// Not implemented, refused when read: dropout other than null or 0 (random merges cannot be
// reproduced).
#include <algorithm>
#include <array>
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

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel final : public Model {
 public:
  using Merges = std::vector<std::pair<std::string, std::string>>;

  // Errors (as the reference's builder, at load): a merge naming a token not in the vocab, or
  // whose merged token (a + b without b's continuing_subword_prefix bytes) is not in it; errors
  // name place / "merges" [i].
  BpeModel(model_detail::TokenVocab vocab, const Merges& merges, BpeOptions options, const JsonPlace& place)
      : vocab_(std::move(vocab)), options_(std::move(options)) {
    using namespace model_detail;
    if (options_.unk_token) unk_id_ = vocab_.find(*options_.unk_token);
    prefix_ = options_.continuing_subword_prefix.value_or("");
    suffix_ = options_.end_of_word_suffix.value_or("");
    const std::size_t prefix_len = prefix_.size();
    std::string merged;
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const auto& [a, b] = merges[i];
      const auto a_id = vocab_.find(a);
      if (!a_id) (place / "merges")[i].fail("BPE merge names \"", a, "\", which is not in the vocab");
      const auto b_id = vocab_.find(b);
      if (!b_id) (place / "merges")[i].fail("BPE merge names \"", b, "\", which is not in the vocab");
      if (b.size() < prefix_len) {
        (place / "merges")[i].fail("BPE merge's second token \"", b, "\" is shorter than continuing_subword_prefix");
      }
      merged.assign(a);
      merged.append(b, prefix_len);
      const auto new_id = vocab_.find(merged);
      if (!new_id) {
        (place / "merges")[i].fail("BPE merge \"", a, "\" + \"", b, "\" makes \"", merged,
                                   "\", which is not in the vocab");
      }
      // A pair listed twice keeps its later rank, as the reference's map does.
      merges_.set(pair_key(*a_id, *b_id), (static_cast<std::uint64_t>(i) << 32) | static_cast<std::uint32_t>(*new_id));
    }
    build_char_ids();
    byte_ids_ = byte_token_ids([&](std::string_view name) { return vocab_.find(name); });
  }

  // Reads {"type": "BPE", "vocab", "merges", "dropout", "unk_token", "continuing_subword_prefix",
  // "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges"}: vocab and merges
  // required, the options null or absent for their defaults (as the reference); other keys are
  // ignored, as the reference does. merges: ["a b", ...] (lines starting "#version" skipped, as
  // a merges.txt) or [["a", "b"], ...].
  [[nodiscard]] static BpeModel from_json(const nlohmann::json& j, const JsonPlace& place) {
    using namespace model_detail;
    if (!j.is_object()) place.fail("BPE model must be a JSON object, got ", json_excerpt(j));
    if (!j.contains("vocab") || !j.contains("merges")) place.fail("BPE model: missing \"vocab\" or \"merges\"");
    BpeOptions options;
    if (const auto it = j.find("dropout"); it != j.end() && !it->is_null()) {
      if (!it->is_number()) (place / "dropout").fail("must be a number or null, got ", json_excerpt(*it));
      if (it->get<double>() != 0.0) {
        (place / "dropout")
            .fail("BPE dropout ", json_excerpt(*it),
                  " is not supported (stile reads null or 0: random merges cannot give the reference's results)");
      }
    }
    const auto optional_string = [&](const char* key) -> std::optional<std::string> {
      const auto it = j.find(key);
      return it == j.end() ? std::nullopt : read_optional_string(*it, place / key);
    };
    const auto optional_bool = [&](const char* key) {
      const auto it = j.find(key);
      return it == j.end() || it->is_null() ? false : read_bool(*it, place / key);
    };
    options.unk_token = optional_string("unk_token");
    options.continuing_subword_prefix = optional_string("continuing_subword_prefix");
    options.end_of_word_suffix = optional_string("end_of_word_suffix");
    options.fuse_unk = optional_bool("fuse_unk");
    options.byte_fallback = optional_bool("byte_fallback");
    options.ignore_merges = optional_bool("ignore_merges");
    TokenVocab vocab = read_vocab_object(j["vocab"], place / "vocab");
    const Merges merges = read_merges(j["merges"], place / "merges");
    return BpeModel(std::move(vocab), merges, std::move(options), place);
  }

  [[nodiscard]] static Merges read_merges(const nlohmann::json& j, const JsonPlace& place) {
    using namespace model_detail;
    if (!j.is_array()) place.fail("must be a JSON array, got ", json_excerpt(j));
    if (j.size() > kMaxEntries) place.fail("has ", j.size(), " entries, more than ", kMaxEntries, " (absurd)");
    Merges merges;
    merges.reserve(j.size());
    const bool pairs = j.empty() || j[0].is_array();
    for (std::size_t i = 0; i < j.size(); ++i) {
      const nlohmann::json& m = j[i];
      if (pairs) {
        if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string()) {
          place[i].fail("must be a pair [\"a\", \"b\"] of strings like the others, got ", json_excerpt(m));
        }
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        continue;
      }
      if (!m.is_string()) place[i].fail("must be a string \"a b\" like the others, got ", json_excerpt(m));
      const std::string& line = m.get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        place[i].fail("must be two tokens separated by one space, got ", json_excerpt(m));
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
    return merges;
  }

  void tokenize(std::u32string_view piece, std::vector<Token>& out) const override {
    const std::size_t n = piece.size();
    if (n == 0) return;
    if (options_.ignore_merges) {
      thread_local std::string bytes;
      bytes.clear();
      model_detail::append_utf8(bytes, piece);
      if (const auto id = vocab_.find(bytes)) {
        out.push_back({*id, 0, static_cast<std::uint32_t>(n)});
        return;
      }
    }
    if (use_cache_ && cache_.lookup(piece, out)) return;
    const std::size_t first = out.size();
    thread_local Scratch scratch;
    make_word(piece, scratch);
    merge_all(scratch);
    emit(scratch, n, out);
    if (use_cache_) cache_.store(piece, out.data() + first, out.size() - first);
  }

  // Turns the per-thread cache of pieces off (before the model is shared): for measuring it.
  void disable_cache() noexcept { use_cache_ = false; }

  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    return vocab_.find(token);
  }
  [[nodiscard]] std::optional<std::string_view> id_to_token(std::int32_t id) const override { return vocab_.token(id); }
  [[nodiscard]] std::size_t vocab_size() const override { return vocab_.size(); }
  [[nodiscard]] std::size_t id_end() const override { return vocab_.id_end(); }
  [[nodiscard]] std::optional<std::int32_t> unk_id() const override {
    return options_.unk_token ? vocab_.find(*options_.unk_token) : std::nullopt;
  }
  [[nodiscard]] std::string_view continuing_subword_prefix() const override { return prefix_; }
  [[nodiscard]] const BpeOptions& options() const noexcept { return options_; }

 private:
  struct Symbol {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    std::uint32_t len;  // bytes, as the reference counts them; 0: merged into its left neighbour
  };
  struct Merge {
    std::uint32_t rank;
    std::uint32_t pos;
    std::int32_t new_id;
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Merge> heap;
    std::vector<std::uint32_t> char_bytes;  // char_bytes[i]: byte offset of character i; [n]: total
  };
  // The ids of a character alone, with the prefix, with the suffix, with both (-1: none).
  using CharIds = std::array<std::int32_t, 4>;

  [[nodiscard]] static std::uint64_t pair_key(std::int32_t a, std::int32_t b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }

  void build_char_ids() {
    using model_detail::decode_utf8;
    for (auto& ids : ascii_ids_) ids.fill(-1);
    std::u32string cps;
    const auto set = [&](std::string_view text, int form, std::int32_t id) {
      if (!decode_utf8(text, cps) || cps.size() != 1) return;
      const char32_t c = cps[0];
      if (c < ascii_ids_.size()) {
        ascii_ids_[c][static_cast<std::size_t>(form)] = id;
        return;
      }
      const std::uint32_t* index = other_index_.find(c);
      std::uint32_t at = 0;
      if (index == nullptr) {
        at = static_cast<std::uint32_t>(other_ids_.size());
        other_ids_.push_back({-1, -1, -1, -1});
        other_index_.set(c, at);
      } else {
        at = *index;
      }
      other_ids_[at][static_cast<std::size_t>(form)] = id;
    };
    for (const auto& [token, id] : vocab_.ids()) {
      const std::string_view t = token;
      set(t, 0, id);
      if (!prefix_.empty() && t.starts_with(prefix_)) {
        const std::string_view rest = t.substr(prefix_.size());
        set(rest, 1, id);
        if (!suffix_.empty() && rest.ends_with(suffix_)) set(rest.substr(0, rest.size() - suffix_.size()), 3, id);
      }
      if (!suffix_.empty() && t.ends_with(suffix_)) set(t.substr(0, t.size() - suffix_.size()), 2, id);
    }
  }

  [[nodiscard]] std::int32_t char_id(char32_t c, int form) const noexcept {
    if (c < ascii_ids_.size()) return ascii_ids_[c][static_cast<std::size_t>(form)];
    const std::uint32_t* index = other_index_.find(c);
    return index == nullptr ? -1 : other_ids_[*index][static_cast<std::size_t>(form)];
  }

  static void add(std::vector<Symbol>& symbols, std::int32_t id, std::uint32_t len) {
    const auto size = static_cast<std::int32_t>(symbols.size());
    if (size > 0) symbols.back().next = size;
    symbols.push_back({id, size - 1, -1, len});
  }

  // The reference's merge_word up to merge_all: one symbol per character (or per byte, or a
  // fused unknown run).
  void make_word(std::u32string_view piece, Scratch& scratch) const {
    std::vector<Symbol>& symbols = scratch.symbols;
    symbols.clear();
    scratch.char_bytes.clear();
    std::uint32_t bytes = 0;
    std::int32_t unk_id = -1;  // a pending unknown run
    std::uint32_t unk_len = 0;
    const std::size_t n = piece.size();
    for (std::size_t i = 0; i < n; ++i) {
      const char32_t c = piece[i];
      const std::uint32_t byte_len = model_detail::utf8_size(c);
      scratch.char_bytes.push_back(bytes);
      bytes += byte_len;
      const int form = (i > 0 && !prefix_.empty() ? 1 : 0) | (i + 1 == n && !suffix_.empty() ? 2 : 0);
      if (const std::int32_t id = char_id(c, form); id >= 0) {
        if (unk_id >= 0) {
          add(symbols, unk_id, unk_len);
          unk_id = -1;
        }
        add(symbols, id, byte_len);
        continue;
      }
      if (options_.byte_fallback && add_byte_fallback(c, form, symbols)) continue;
      if (options_.unk_token) {
        if (!unk_id_) {
          throw Error(concat("stile: BPE model: unk_token \"", *options_.unk_token,
                             "\" is not in the vocab, and a character needs it"));
        }
        if (unk_id >= 0 && options_.fuse_unk) {
          unk_len += byte_len;
        } else {
          if (unk_id >= 0) add(symbols, unk_id, unk_len);
          unk_id = *unk_id_;
          unk_len = byte_len;
        }
      }
    }
    if (unk_id >= 0) add(symbols, unk_id, unk_len);
    scratch.char_bytes.push_back(bytes);
  }

  // The "<0xNN>" tokens of the bytes the reference looks up: the prefix's and suffix's too.
  bool add_byte_fallback(char32_t c, int form, std::vector<Symbol>& symbols) const {
    thread_local std::string text;
    text.clear();
    if ((form & 1) != 0) text += prefix_;
    utf8::append(text, c);
    if ((form & 2) != 0) text += suffix_;
    for (const char b : text) {
      if (byte_ids_[static_cast<unsigned char>(b)] < 0) return false;
    }
    for (const char b : text) add(symbols, byte_ids_[static_cast<unsigned char>(b)], 1);
    return true;
  }

  // word.rs merge_all without dropout.
  void merge_all(Scratch& scratch) const {
    std::vector<Symbol>& symbols = scratch.symbols;
    std::vector<Merge>& heap = scratch.heap;
    heap.clear();
    // Min-heap on (rank, pos): std heap functions keep the greatest on top, so "less" is "after".
    const auto after = [](const Merge& x, const Merge& y) {
      return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
    };
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      if (const std::uint64_t* m = merges_.find(pair_key(symbols[i].id, symbols[i + 1].id))) {
        heap.push_back({static_cast<std::uint32_t>(*m >> 32), static_cast<std::uint32_t>(i),
                        static_cast<std::int32_t>(*m & 0xFFFFFFFFu)});
      }
    }
    std::make_heap(heap.begin(), heap.end(), after);
    const auto size = static_cast<std::int32_t>(symbols.size());
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), after);
      const Merge top = heap.back();
      heap.pop_back();
      Symbol& current = symbols[top.pos];
      if (current.len == 0 || current.next == -1) continue;
      const auto next_pos = static_cast<std::size_t>(current.next);
      const Symbol right = symbols[next_pos];
      const std::uint64_t* m = merges_.find(pair_key(current.id, right.id));
      if (m == nullptr || static_cast<std::int32_t>(*m & 0xFFFFFFFFu) != top.new_id) continue;  // stale
      current.id = top.new_id;
      current.len += right.len;
      current.next = right.next;
      symbols[next_pos].len = 0;
      if (right.next > -1 && right.next < size)
        symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int32_t>(top.pos);
      if (current.prev >= 0) {
        const auto prev = static_cast<std::size_t>(current.prev);
        if (const std::uint64_t* pm = merges_.find(pair_key(symbols[prev].id, current.id))) {
          heap.push_back({static_cast<std::uint32_t>(*pm >> 32), static_cast<std::uint32_t>(prev),
                          static_cast<std::int32_t>(*pm & 0xFFFFFFFFu)});
          std::push_heap(heap.begin(), heap.end(), after);
        }
      }
      if (current.next > -1 && current.next < size) {
        const auto next = static_cast<std::size_t>(current.next);
        if (const std::uint64_t* nm = merges_.find(pair_key(current.id, symbols[next].id))) {
          heap.push_back(
              {static_cast<std::uint32_t>(*nm >> 32), top.pos, static_cast<std::int32_t>(*nm & 0xFFFFFFFFu)});
          std::push_heap(heap.begin(), heap.end(), after);
        }
      }
    }
  }

  // The surviving symbols, their byte ranges (running sums of len) as the code points they touch.
  static void emit(const Scratch& scratch, std::size_t n, std::vector<Token>& out) {
    const std::vector<std::uint32_t>& char_bytes = scratch.char_bytes;  // n + 1 entries
    const std::uint32_t total = char_bytes[n];
    std::uint32_t pos = 0;
    std::size_t ci = 0;  // the character holding byte pos
    for (const Symbol& s : scratch.symbols) {
      if (s.len == 0) continue;
      const std::uint32_t end = pos + s.len;
      while (ci < n && char_bytes[ci + 1] <= pos) ++ci;
      // Past the end only where the reference's own offsets run past the piece (byte fallback of
      // a prefix or suffix): the last character then.
      const auto begin_char = static_cast<std::uint32_t>(std::min(ci, n - 1));
      std::uint32_t end_char = static_cast<std::uint32_t>(n);
      if (end < total) {
        std::size_t cj = ci;
        while (cj < n && char_bytes[cj + 1] <= end - 1) ++cj;
        end_char = static_cast<std::uint32_t>(cj + 1);
      }
      out.push_back({s.id, begin_char, std::max(end_char, begin_char + 1)});
      pos = end;
    }
  }

  model_detail::TokenVocab vocab_;
  BpeOptions options_;
  std::string prefix_;
  std::string suffix_;
  std::optional<std::int32_t> unk_id_;
  model_detail::FlatMap64<std::uint64_t> merges_;  // (a, b) -> rank << 32 | new id
  std::array<CharIds, 128> ascii_ids_{};
  model_detail::FlatMap64<std::uint32_t> other_index_;  // code point -> index into other_ids_
  std::vector<CharIds> other_ids_;
  std::array<std::int32_t, 256> byte_ids_{};
  model_detail::PieceCache cache_;
  bool use_cache_ = true;
};

}  // namespace stile::tok
