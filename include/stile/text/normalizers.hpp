#pragma once
// The normalizers of a tokenizer.json, each a Normalizer over a NormalizedString, and
// read_normalizer(), which builds one from its JSON. They follow Hugging Face tokenizers'
// normalizers/*.rs and the NormalizedString methods they call (tokenizer/normalizer.rs): the same
// output text, and the same (char, change) streams, so every character's origin is the
// reference's.
//
//   NFD NFKD NFC NFKC   unicode.rs: unicode-normalization-alignments (Unicode 9.0 data, in
//                       normalizer_unicode_tables.hpp); see unicode_nf() for the change rules
//   Lowercase           utils.rs: Rust's char::to_lowercase (U+0130 -> "i\u0307")
//   StripAccents        strip.rs: removes the crate's combining marks (Mn, Mc, Me of Unicode 9.0)
//   Strip               strip.rs: Rust's char::is_whitespace at either end
//   Replace             replace.rs: a string or an (Oniguruma) regex, every match -> content
//   Prepend             prepend.rs
//   BertNormalizer      bert.rs (character classes from bert_normalizer.hpp)
//   Nmt                 unicode.rs do_nmt
//   Precompiled         precompiled.rs + spm_precompiled: SentencePiece's charsmap, grapheme by
//                       grapheme (precompiled_charsmap.hpp reads the charsmap)
//   ByteLevel           byte_level.rs: each UTF-8 byte -> GPT-2's printable character for it
//   Sequence            utils.rs
//
// Speed: text that a Unicode form leaves alone (ASCII, and most Latin, for NFC) is found by a
// scan and not rewritten; otherwise the work is one pass with buffers per call, nothing per
// character.
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/text/bert_normalizer.hpp"
#include "stile/text/normalized_string.hpp"
#include "stile/text/normalizer_unicode_tables.hpp"
#include "stile/text/precompiled_charsmap.hpp"
#include "stile/text/regex.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

namespace unicode_props {

// Per code point, what the normalizers need to know, from normalizer_unicode_tables.hpp.
struct CharRecord {
  std::uint16_t canonical = 0;  // offset in kDecompositionPool
  std::uint16_t compatibility = 0;
  std::uint8_t canonical_size = 0;      // 0: none
  std::uint8_t compatibility_size = 0;  // 0: none (NFKD then decomposes as NFD does)
  std::uint8_t ccc = 0;
  std::uint8_t flags = 0;
  char32_t lower = 0;  // 0: lower-cases to itself
  friend bool operator<(const CharRecord& a, const CharRecord& b) {
    return std::tie(a.canonical, a.compatibility, a.canonical_size, a.compatibility_size, a.ccc, a.flags, a.lower) <
           std::tie(b.canonical, b.compatibility, b.canonical_size, b.compatibility_size, b.ccc, b.flags, b.lower);
  }
};

enum CharFlag : std::uint8_t {
  kMark = 1,               // StripAccents removes it
  kCompositionSecond = 2,  // the second character of some composition pair
  kNfdInert = 4,           // NFD leaves it alone in any context (no decomposition, starter)
  kNfkdInert = 8,
  kNfcInert = 16,          // NFC leaves it alone, and nothing before it composes with it
  kNfkcInert = 32,
};

inline constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                          kHangulTBase = 0x11A7;
inline constexpr std::uint32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28,
                               kHangulNCount = kHangulVCount * kHangulTCount,
                               kHangulSCount = kHangulLCount * kHangulNCount;

class CharTable {
 public:
  [[nodiscard]] static const CharTable& get() {
    static const CharTable table;
    return table;
  }

  [[nodiscard]] const CharRecord& operator[](char32_t c) const noexcept {
    if (c >= 0x110000) return records_[0];
    return records_[stage2_[(static_cast<std::size_t>(stage1_[c >> kShift]) << kShift) | (c & kMask)]];
  }

  // The primary composite of a + b (the crate's compose(): Hangul arithmetic, then its table).
  [[nodiscard]] std::optional<char32_t> compose(char32_t a, char32_t b) const noexcept {
    if (a >= kHangulLBase && a < kHangulLBase + kHangulLCount && b >= kHangulVBase &&
        b < kHangulVBase + kHangulVCount) {
      return kHangulSBase + ((a - kHangulLBase) * kHangulVCount + (b - kHangulVBase)) * kHangulTCount;
    }
    if (a >= kHangulSBase && a < kHangulSBase + kHangulSCount && b > kHangulTBase &&
        b < kHangulTBase + kHangulTCount && (a - kHangulSBase) % kHangulTCount == 0) {
      return a + (b - kHangulTBase);
    }
    if ((operator[](b).flags & kCompositionSecond) == 0) return std::nullopt;
    const std::uint64_t key = (static_cast<std::uint64_t>(a) << 32) | b;
    const auto it = std::lower_bound(pair_keys_.begin(), pair_keys_.end(), key);
    if (it == pair_keys_.end() || *it != key) return std::nullopt;
    return pair_values_[static_cast<std::size_t>(it - pair_keys_.begin())];
  }

 private:
  static constexpr unsigned kShift = 7;
  static constexpr char32_t kMask = (1u << kShift) - 1;

  CharTable();

  std::vector<std::uint16_t> stage1_;
  std::vector<std::uint16_t> stage2_;
  std::vector<CharRecord> records_;
  std::vector<std::uint64_t> pair_keys_;
  std::vector<char32_t> pair_values_;
};

[[nodiscard]] inline bool is_hangul_syllable(char32_t c) noexcept {
  return c >= kHangulSBase && c < kHangulSBase + kHangulSCount;
}

// One character of a decomposed stream: the crate's (char, change), with its combining class.
struct NfItem {
  char32_t c;
  int change;
  std::uint8_t ccc;
};

// The crate's decomposition of text (per character: full decomposition, first character change 0,
// the others 1; then each run of non-starters stably sorted by combining class, the changes
// travelling with their characters), appended to out.
inline void decompose(const CharTable& table, std::u32string_view text, bool compat, std::vector<NfItem>& out) {
  const std::size_t first = out.size();
  for (const char32_t c : text) {
    if (c < 0x80) {
      out.push_back({c, 0, 0});
      continue;
    }
    if (is_hangul_syllable(c)) {
      const std::uint32_t s = c - kHangulSBase;
      out.push_back({kHangulLBase + s / kHangulNCount, 0, 0});
      out.push_back({kHangulVBase + (s % kHangulNCount) / kHangulTCount, 1, 0});
      if (s % kHangulTCount != 0) out.push_back({kHangulTBase + s % kHangulTCount, 1, 0});
      continue;
    }
    const CharRecord& r = table[c];
    std::size_t offset = 0;
    std::size_t size = 0;
    if (compat && r.compatibility_size != 0) {
      offset = r.compatibility;
      size = r.compatibility_size;
    } else if (r.canonical_size != 0) {
      offset = r.canonical;
      size = r.canonical_size;
    }
    if (size == 0) {
      out.push_back({c, 0, r.ccc});
      continue;
    }
    for (std::size_t k = 0; k < size; ++k) {
      const char32_t d = normalizer_tables::kDecompositionPool[offset + k];
      out.push_back({d, k == 0 ? 0 : 1, table[d].ccc});
    }
  }
  // Canonical ordering.
  const auto by_class = [](const NfItem& a, const NfItem& b) { return a.ccc < b.ccc; };
  for (std::size_t i = first; i < out.size();) {
    if (out[i].ccc == 0) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < out.size() && out[end].ccc != 0) ++end;
    if (end - i > 1) {
      const auto b = out.begin() + static_cast<std::ptrdiff_t>(i);
      const auto e = out.begin() + static_cast<std::ptrdiff_t>(end);
      if (end - i <= 16) {
        for (auto it = b + 1; it != e; ++it) {  // insertion sort: stable, no allocation
          const NfItem item = *it;
          auto hole = it;
          while (hole != b && (hole - 1)->ccc > item.ccc) {
            *hole = *(hole - 1);
            --hole;
          }
          *hole = item;
        }
      } else {
        std::stable_sort(b, e, by_class);
      }
    }
    i = end;
  }
}

// The crate's recomposition (recompose.rs) over a decomposed stream, with its change arithmetic:
// a character absorbed into the composee adds its change, less one, to the composee's.
inline void compose(const CharTable& table, std::span<const NfItem> in, std::vector<CharChange>& out,
                    std::vector<CharChange>& buffer) {
  buffer.clear();
  bool have_composee = false;
  CharChange composee{0, 0};
  int last_ccc = -1;  // -1: none
  for (const NfItem& item : in) {
    const CharChange ch{item.c, item.change};
    const int ch_class = item.ccc;
    if (!have_composee) {
      if (ch_class != 0) {
        out.push_back(ch);
      } else {
        composee = ch;
        have_composee = true;
      }
      continue;
    }
    if (last_ccc < 0) {
      if (const auto r = table.compose(composee.c, ch.c)) {
        composee = {*r, composee.change + ch.change - 1};
        continue;
      }
      if (ch_class == 0) {
        out.push_back(composee);
        composee = ch;
      } else {
        buffer.push_back(ch);
        last_ccc = ch_class;
      }
      continue;
    }
    if (last_ccc >= ch_class) {
      if (ch_class == 0) {
        out.push_back(composee);
        out.insert(out.end(), buffer.begin(), buffer.end());
        buffer.clear();
        composee = ch;
        last_ccc = -1;
      } else {
        buffer.push_back(ch);
        last_ccc = ch_class;
      }
      continue;
    }
    if (const auto r = table.compose(composee.c, ch.c)) {
      composee = {*r, composee.change + ch.change - 1};
      continue;
    }
    buffer.push_back(ch);
    last_ccc = ch_class;
  }
  if (have_composee) out.push_back(composee);
  out.insert(out.end(), buffer.begin(), buffer.end());
}

inline CharTable::CharTable() {
  using namespace normalizer_tables;
  std::unordered_map<char32_t, CharRecord> special;
  special.reserve(8192);
  for (const Decomposition& d : kDecompositions) {
    CharRecord& r = special[d.code_point];
    r.canonical = d.canonical;
    r.canonical_size = d.canonical_size;
    r.compatibility = d.compatibility;
    r.compatibility_size = d.compatibility_size;
  }
  for (const CombiningClass& c : kCombiningClasses) special[c.code_point].ccc = c.ccc;
  for (const Composition& c : kCompositions) special[c.second].flags |= kCompositionSecond;
  for (const CaseMapping& m : kLowercase) special[m.code_point].lower = m.lower;
  for (const Range& range : kCombiningMarks) {
    for (char32_t c = range.first; c <= range.last; ++c) special[c].flags |= kMark;
  }
  for (char32_t c = kHangulVBase; c < kHangulVBase + kHangulVCount; ++c) special[c].flags |= kCompositionSecond;
  for (char32_t c = kHangulTBase + 1; c < kHangulTBase + kHangulTCount; ++c) special[c].flags |= kCompositionSecond;
  pair_keys_.reserve(std::size(kCompositions));
  pair_values_.reserve(std::size(kCompositions));
  for (const Composition& c : kCompositions) {  // sorted by (first, second)
    pair_keys_.push_back((static_cast<std::uint64_t>(c.first) << 32) | c.second);
    pair_values_.push_back(c.composite);
  }
  // The records are complete but for the inert flags, which need decompose()/compose(): give the
  // table a first form without them, then compute them per character that has data.
  // Two stages: 128-character blocks; a block with no data is block 0 (all the default record),
  // and a block equal to the one before it (the Hangul syllables) is shared.
  const auto build = [&] {
    records_.assign(1, CharRecord{});
    std::map<CharRecord, std::uint16_t> ids;
    ids.emplace(CharRecord{}, 0);
    std::vector<std::pair<char32_t, std::uint16_t>> entries;
    entries.reserve(special.size());
    for (const auto& [c, r] : special) {
      const auto [it, inserted] = ids.emplace(r, static_cast<std::uint16_t>(records_.size()));
      if (inserted) records_.push_back(r);
      entries.emplace_back(c, it->second);
    }
    std::sort(entries.begin(), entries.end());
    constexpr std::size_t kBlock = std::size_t{1} << kShift;
    stage1_.assign(0x110000 >> kShift, 0);
    stage2_.assign(kBlock, 0);
    std::array<std::uint16_t, kBlock> block{};
    std::size_t e = 0;
    for (std::size_t b = 0; b < stage1_.size(); ++b) {
      const std::size_t block_end = (b + 1) << kShift;
      if (e == entries.size() || entries[e].first >= block_end) continue;
      block.fill(0);
      for (; e < entries.size() && entries[e].first < block_end; ++e) block[entries[e].first & kMask] = entries[e].second;
      const std::size_t previous = stage2_.size() - kBlock;
      if (previous != 0 && std::equal(block.begin(), block.end(), stage2_.begin() + static_cast<std::ptrdiff_t>(previous))) {
        stage1_[b] = static_cast<std::uint16_t>(previous >> kShift);
        continue;
      }
      stage1_[b] = static_cast<std::uint16_t>(stage2_.size() >> kShift);
      stage2_.insert(stage2_.end(), block.begin(), block.end());
    }
  };
  build();
  // Inert: for any character without data (a starter, no decomposition, not a second) all four
  // forms leave it alone; it is the default record's flags, set below. For the others, check.
  constexpr std::uint8_t kAllInert = kNfdInert | kNfkdInert | kNfcInert | kNfkcInert;
  std::vector<NfItem> items;
  std::vector<CharChange> changes, buffer;
  const auto leaves_alone = [&](char32_t c, bool compat, bool composed) {
    items.clear();
    changes.clear();
    const char32_t one[1] = {c};
    decompose(*this, std::u32string_view(one, 1), compat, items);
    if (!composed) return items.size() == 1 && items[0].c == c;
    unicode_props::compose(*this, items, changes, buffer);
    return changes.size() == 1 && changes[0].c == c && changes[0].change == 0;
  };
  for (auto& [c, r] : special) {
    if (r.ccc != 0 || is_hangul_syllable(c)) continue;
    std::uint8_t inert = 0;
    if (leaves_alone(c, false, false)) inert |= kNfdInert;
    if (leaves_alone(c, true, false)) inert |= kNfkdInert;
    if ((r.flags & kCompositionSecond) == 0) {
      if (leaves_alone(c, false, true)) inert |= kNfcInert;
      if (leaves_alone(c, true, true)) inert |= kNfkcInert;
    }
    r.flags = static_cast<std::uint8_t>(r.flags | inert);
  }
  // Hangul syllables decompose; LV and LVT recompose to themselves (a following T is a second,
  // so it is not inert and the syllable is looked at with it).
  for (char32_t c = kHangulSBase; c < kHangulSBase + kHangulSCount; ++c) {
    CharRecord& r = special[c];
    r.flags = static_cast<std::uint8_t>(r.flags | kNfcInert | kNfkcInert);
  }
  build();
  // The default record (id 0) is every character with no data: inert in all forms.
  records_[0].flags = kAllInert;
}

// Rust's char::is_whitespace (White_Space).
[[nodiscard]] constexpr bool is_rust_whitespace(char32_t c) noexcept {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// Rust's char::to_lowercase when it is one character (all but U+0130).
[[nodiscard]] inline char32_t to_lower(char32_t c) noexcept {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const char32_t l = CharTable::get()[c].lower;
  return l == 0 ? c : l;
}

[[nodiscard]] inline bool is_combining_mark(char32_t c) noexcept {
  return c >= 0x300 && (CharTable::get()[c].flags & kMark) != 0;
}

}  // namespace unicode_props

// ----------------------------------------------------------------------------------------------
// The NormalizedString operations the normalizers share.

enum class UnicodeForm { nfd, nfkd, nfc, nfkc };

// NormalizedString::nfd/nfkd/nfc/nfkc: the crate's (char, change) stream through transform().
// Only the span from the first character the form may touch (less the starter before it, which
// may compose with it) to the last one is rewritten: outside it the stream is the characters
// themselves with change 0.
inline void unicode_normalize(NormalizedString& s, UnicodeForm form) {
  using namespace unicode_props;
  const std::uint8_t inert_flag = form == UnicodeForm::nfd    ? kNfdInert
                                  : form == UnicodeForm::nfkd ? kNfkdInert
                                  : form == UnicodeForm::nfc  ? kNfcInert
                                                              : kNfkcInert;
  const std::u32string_view text = s.chars();
  const CharTable& table = CharTable::get();
  const auto inert = [&](char32_t c) { return c < 0x80 || (table[c].flags & inert_flag) != 0; };
  std::size_t begin = 0;
  while (begin < text.size() && inert(text[begin])) ++begin;
  if (begin == text.size()) return;
  std::size_t end = text.size();
  while (end > begin && inert(text[end - 1])) --end;
  const bool composed = form == UnicodeForm::nfc || form == UnicodeForm::nfkc;
  const bool compat = form == UnicodeForm::nfkd || form == UnicodeForm::nfkc;
  if (composed && begin > 0) --begin;
  std::vector<NfItem> items;
  items.reserve((end - begin) * 2);
  decompose(table, text.substr(begin, end - begin), compat, items);
  std::vector<CharChange> changes;
  changes.reserve(items.size());
  if (composed) {
    std::vector<CharChange> buffer;
    compose(table, items, changes, buffer);
  } else {
    for (const NfItem& item : items) changes.push_back({item.c, item.change});
  }
  s.transform_range(begin, end, changes, 0);
}

// NormalizedString::lowercase.
inline void lowercase(NormalizedString& s) {
  const std::u32string_view text = s.chars();
  if (text.find(char32_t{0x130}) == std::u32string_view::npos) {
    s.map(unicode_props::to_lower);
    return;
  }
  std::vector<CharChange> changes;
  changes.reserve(text.size() + 8);
  for (const char32_t c : text) {
    if (c == 0x130) {
      changes.push_back({'i', 0});
      changes.push_back({0x307, 1});
    } else {
      changes.push_back({unicode_props::to_lower(c), 0});
    }
  }
  s.transform(changes, 0);
}

// ----------------------------------------------------------------------------------------------
// The normalizers.

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  void normalize(NormalizedString& text) const override { unicode_normalize(text, form_); }

 private:
  UnicodeForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(NormalizedString& text) const override { lowercase(text); }
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  void normalize(NormalizedString& text) const override {
    text.filter([](char32_t c) { return !unicode_props::is_combining_mark(c); });
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(NormalizedString& text) const override { text.strip(left_, right_, unicode_props::is_rust_whitespace); }

 private:
  bool left_;
  bool right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::u32string prepend) : prepend_(std::move(prepend)) {}
  void normalize(NormalizedString& text) const override {
    if (text.empty()) return;
    if (prepend_.empty()) {
      // The reference still rewrites the first character, as an insertion at offset 0: it takes
      // the piece's start as its origin (NormalizedString::prepend leaves an empty prefix alone).
      const CharChange first{text.chars()[0], 1};
      text.transform_range(0, 1, std::span<const CharChange>(&first, 1), 0);
      return;
    }
    text.prepend(prepend_);
  }

 private:
  std::u32string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  // A string pattern: its occurrences (the reference compiles regex::escape(string); for a
  // non-empty string that finds the same leftmost, non-overlapping occurrences).
  ReplaceNormalizer(std::u32string literal, std::u32string content, const JsonPlace& place)
      : literal_(std::move(literal)), content_(std::move(content)) {
    if (literal_.empty()) regex_ = Regex::literal(literal_, place);
  }
  ReplaceNormalizer(Regex regex, std::u32string content) : regex_(std::move(regex)), content_(std::move(content)) {}

  void normalize(NormalizedString& text) const override {
    if (regex_.valid()) {
      const std::vector<PatternMatch> matches = regex_.find_matches(text.chars());
      text.replace(matches, content_);
      return;
    }
    if (text.chars().find(literal_) == std::u32string_view::npos) return;
    const std::vector<PatternMatch> matches = find_string_matches(text.chars(), literal_);
    text.replace(matches, content_);
  }

 private:
  std::u32string literal_;
  Regex regex_;
  std::u32string content_;
};

class BertTextNormalizer final : public Normalizer {
 public:
  BertTextNormalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        handle_chinese_chars_(handle_chinese_chars),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void normalize(NormalizedString& text) const override {
    if (clean_text_) {
      text.filter([](char32_t c) { return !bert_chars::is_control(c); });  // NUL and U+FFFD included
      text.map([](char32_t c) { return bert_chars::is_whitespace(c) ? U' ' : c; });
    }
    if (handle_chinese_chars_) {
      const std::u32string_view chars = text.chars();
      if (std::any_of(chars.begin(), chars.end(), bert_chars::is_chinese_char)) {
        std::vector<CharChange> changes;
        changes.reserve(chars.size() + 16);
        for (const char32_t c : chars) {
          if (bert_chars::is_chinese_char(c)) {
            changes.push_back({' ', 0});
            changes.push_back({c, 1});
            changes.push_back({' ', 1});
          } else {
            changes.push_back({c, 0});
          }
        }
        text.transform(changes, 0);
      }
    }
    if (strip_accents_) {
      unicode_normalize(text, UnicodeForm::nfd);
      text.filter([](char32_t c) { return !bert_chars::is_nonspacing_mark(c); });
    }
    if (lowercase_) lowercase(text);
  }

 private:
  bool clean_text_;
  bool handle_chinese_chars_;
  bool strip_accents_;
  bool lowercase_;
};

// do_nmt: control characters removed, some spaces made ' '.
class NmtNormalizer final : public Normalizer {
 public:
  void normalize(NormalizedString& text) const override {
    text.filter([](char32_t c) {
      return !((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F ||
               c == 0x9F);
    });
    text.map([](char32_t c) -> char32_t {
      switch (c) {
        case 0x09:
        case 0x0A:
        case 0x0C:
        case 0x0D:
        case 0x1680:
        case 0x200B:
        case 0x200C:
        case 0x200D:
        case 0x200E:
        case 0x200F:
        case 0x2028:
        case 0x2029:
        case 0x2581:
        case 0xFEFF:
        case 0xFFFD:
          return U' ';
        default:
          return c;
      }
    });
  }
};

// GPT-2's byte -> character table (processors/byte_level.rs bytes_char): printable Latin-1 bytes
// stand for themselves, the other 68 take U+0100.. in byte order.
[[nodiscard]] inline const std::array<char32_t, 256>& byte_level_chars() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

class ByteLevelNormalizer final : public Normalizer {
 public:
  void normalize(NormalizedString& text) const override {
    if (text.empty()) return;
    const std::array<char32_t, 256>& chars = byte_level_chars();
    std::vector<CharChange> changes;
    changes.reserve(text.size() * 2);
    std::string bytes;
    for (const char32_t c : text.chars()) {
      bytes.clear();
      utf8::append(bytes, c);
      for (std::size_t i = 0; i < bytes.size(); ++i) {
        changes.push_back({chars[static_cast<unsigned char>(bytes[i])], i == 0 ? 0 : 1});
      }
    }
    text.transform(changes, 0);
  }
};

class PrecompiledNormalizer final : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsmap map) : map_(std::move(map)) {
    for (char32_t c = 1; c < 0x80; ++c) {
      const char key[2] = {static_cast<char>(c), 0};
      ascii_[c] = map_.transform([&](std::size_t i) { return i == 0 ? static_cast<int>(key[0]) : -1; });
    }
  }

  void normalize(NormalizedString& text) const override {
    const std::u32string_view chars = text.chars();
    std::vector<CharChange> changes;
    changes.reserve(chars.size() + 8);
    bool modified = false;
    utf8proc_int32_t state = 0;
    for (std::size_t at = 0; at < chars.size();) {
      // The grapheme cluster [at, end) (extended, as unicode-segmentation's graphemes(true)).
      std::size_t end = at + 1;
      while (end < chars.size() && !breaks_between(chars[end - 1], chars[end], state)) ++end;
      const std::u32string_view grapheme = chars.substr(at, end - at);
      if (grapheme.size() == 1 && grapheme[0] < 0x80) {
        const char32_t c = grapheme[0];
        if (c != 0 && ascii_[c]) {
          modified = true;
          replace(changes, 1, *ascii_[c]);
        } else {
          changes.push_back({c, 0});
        }
        at = end;
        continue;
      }
      if (utf8_size(grapheme) < 6) {
        if (const auto norm = lookup(grapheme)) {
          modified = true;
          replace(changes, grapheme.size(), *norm);
          at = end;
          continue;
        }
      }
      for (const char32_t c : grapheme) {
        if (const auto norm = lookup(std::u32string_view(&c, 1))) {
          modified = true;
          replace(changes, 1, *norm);
        } else {
          changes.push_back({c, 0});
        }
      }
      at = end;
    }
    if (modified) text.transform(changes, 0);
  }

 private:
  // The reference's unicode-segmentation knows Unicode 17; utf8proc 2.8 knows 15.0. The marks
  // added since, which join the grapheme before them (Extend, SpacingMark), are told to utf8proc
  // as U+0300 (a plain Extend). A grapheme's extent matters here only through the 6-byte rule,
  // and the probe that finds every such difference is NBSP U+05C4 c for every code point c
  // (U+05C4 survives exactly when c makes the grapheme 6 bytes or more); it found these ranges
  // and no character utf8proc joins that the reference does not. (Prepend characters were
  // probed too, as "mapped character + a": no difference.)
  static utf8proc_int32_t grapheme_proxy(char32_t c) {
    static constexpr std::pair<char32_t, char32_t> kNewExtend[] = {
        {0x897, 0x897},     {0x1ACF, 0x1ADD},   {0x1AE0, 0x1AEB},   {0x10D69, 0x10D6D}, {0x10EFA, 0x10EFC},
        {0x113B8, 0x113C0}, {0x113C2, 0x113C2}, {0x113C5, 0x113C5}, {0x113C7, 0x113CA}, {0x113CC, 0x113D0},
        {0x113D2, 0x113D2}, {0x113E1, 0x113E2}, {0x11B60, 0x11B67}, {0x11F5A, 0x11F5A}, {0x1611E, 0x1612F},
        {0x1E5EE, 0x1E5EF}, {0x1E6E3, 0x1E6E3}, {0x1E6E6, 0x1E6E6}, {0x1E6EE, 0x1E6EF}, {0x1E6F5, 0x1E6F5},
    };
    if (c >= 0x897) {
      for (const auto& [first, last] : kNewExtend) {
        if (c >= first && c <= last) return 0x300;
      }
    }
    return static_cast<utf8proc_int32_t>(c);
  }
  static bool breaks_between(char32_t a, char32_t b, utf8proc_int32_t& state) {
    if (a < 0x80 && b < 0x80) {
      // Two ASCII characters: a boundary unless CR LF (GB3, GB4/5, GB999). ASCII carries no state
      // into the next pair, so utf8proc starts afresh there.
      state = 0;  // UTF8PROC_BOUNDCLASS_START
      return !(a == '\r' && b == '\n');
    }
    return utf8proc_grapheme_break_stateful(grapheme_proxy(a), grapheme_proxy(b), &state) != 0;
  }

  static std::size_t utf8_size(std::u32string_view s) {
    std::size_t n = 0;
    for (const char32_t c : s) n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    return n;
  }

  std::optional<std::string_view> lookup(std::u32string_view key) const {
    // The key's UTF-8 bytes, produced as the trie walk asks for them.
    char buffer[4];
    std::size_t char_index = 0;
    std::size_t char_begin = 0;  // byte index of buffer[0] in the key
    std::size_t char_size = 0;
    return map_.transform([&](std::size_t i) -> int {
      while (i >= char_begin + char_size) {
        if (char_index == key.size()) return -1;
        char_begin += char_size;
        const char32_t c = key[char_index++];
        char_size = encode(c, buffer);
      }
      return static_cast<unsigned char>(buffer[i - char_begin]);
    });
  }

  static std::size_t encode(char32_t c, char* out) {
    if (c < 0x80) {
      out[0] = static_cast<char>(c);
      return 1;
    }
    if (c < 0x800) {
      out[0] = static_cast<char>(0xC0 | (c >> 6));
      out[1] = static_cast<char>(0x80 | (c & 0x3F));
      return 2;
    }
    if (c < 0x10000) {
      out[0] = static_cast<char>(0xE0 | (c >> 12));
      out[1] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out[2] = static_cast<char>(0x80 | (c & 0x3F));
      return 3;
    }
    out[0] = static_cast<char>(0xF0 | (c >> 18));
    out[1] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out[2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out[3] = static_cast<char>(0x80 | (c & 0x3F));
    return 4;
  }

  // precompiled.rs replace(): old_count characters become `norm`: each new character change 0;
  // then, when there are more new ones, the last (new - old) entries of the whole stream become
  // insertions, and when fewer, the last entry of the stream (which may be an earlier
  // character's) absorbs the difference.
  static void replace(std::vector<CharChange>& changes, std::size_t old_count, std::string_view norm) {
    std::ptrdiff_t new_count = 0;
    for (std::size_t at = 0; at < norm.size();) {
      const utf8::DecodedChar d = utf8::decode(norm, at);
      changes.push_back({d.code_point, 0});
      at += d.size;
      ++new_count;
    }
    const std::ptrdiff_t diff = new_count - static_cast<std::ptrdiff_t>(old_count);
    if (diff > 0) {
      for (std::ptrdiff_t k = 0; k < diff && static_cast<std::size_t>(k) < changes.size(); ++k) {
        changes[changes.size() - 1 - static_cast<std::size_t>(k)].change = 1;
      }
    } else if (diff < 0 && !changes.empty()) {
      changes.back().change += static_cast<int>(diff);
    }
  }

  PrecompiledCharsmap map_;
  std::array<std::optional<std::string_view>, 0x80> ascii_{};
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<const Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(NormalizedString& text) const override {
    for (const auto& part : parts_) part->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<const Normalizer>> parts_;
};

// ----------------------------------------------------------------------------------------------
// Reading.

namespace normalizer_json {

inline const nlohmann::json& member(const nlohmann::json& j, std::string_view key, std::string_view type,
                                    const JsonPlace& place) {
  const auto it = j.find(key);
  if (it == j.end()) place.fail(type, " needs \"", key, "\"");
  return *it;
}

inline bool boolean(const nlohmann::json& j, std::string_view key, std::string_view type, const JsonPlace& place) {
  const nlohmann::json& v = member(j, key, type, place);
  if (!v.is_boolean()) (place / key).fail("must be true or false, got ", json_excerpt(v));
  return v.get<bool>();
}

inline const std::string& string(const nlohmann::json& j, std::string_view key, std::string_view type,
                                 const JsonPlace& place) {
  const nlohmann::json& v = member(j, key, type, place);
  if (!v.is_string()) (place / key).fail("must be a string, got ", json_excerpt(v));
  return v.get_ref<const std::string&>();
}

inline std::u32string to_u32(std::string_view s, const JsonPlace& place) {
  if (utf8::find_invalid(s) != std::string_view::npos) place.fail("is not UTF-8");
  return utf8::to_code_points(s);
}

inline constexpr std::size_t kMaxSequence = 1024;
inline constexpr int kMaxDepth = 32;

}  // namespace normalizer_json

inline std::unique_ptr<const Normalizer> read_normalizer(const nlohmann::json& j, const JsonPlace& place,
                                                         int depth);

// null -> nullptr. The types the reference serializes ("type": "NFC", "Sequence", ...); any other
// type, or a field of the wrong type, is refused naming it.
inline std::unique_ptr<const Normalizer> read_normalizer(const nlohmann::json& j, const JsonPlace& place) {
  return read_normalizer(j, place, 0);
}

inline std::unique_ptr<const Normalizer> read_normalizer(const nlohmann::json& j, const JsonPlace& place,
                                                         int depth) {
  using namespace normalizer_json;
  if (j.is_null()) return nullptr;
  if (!j.is_object()) place.fail("a normalizer must be a JSON object or null, got ", json_excerpt(j));
  const auto type_it = j.find("type");
  if (type_it == j.end()) place.fail("the normalizer has no \"type\"");
  if (!type_it->is_string()) (place / "type").fail("must be a string, got ", json_excerpt(*type_it));
  const std::string& type = type_it->get_ref<const std::string&>();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::nfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::nfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::nfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::nfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Nmt") return std::make_unique<NmtNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(boolean(j, "strip_left", type, place),
                                             boolean(j, "strip_right", type, place));
  }
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(to_u32(string(j, "prepend", type, place), place / "prepend"));
  }
  if (type == "BertNormalizer" || type == "Bert") {
    const bool clean_text = boolean(j, "clean_text", type, place);
    const bool handle_chinese_chars = boolean(j, "handle_chinese_chars", type, place);
    const bool lowercase = boolean(j, "lowercase", type, place);
    bool strip_accents = lowercase;  // null or absent: follow lowercase
    if (const auto it = j.find("strip_accents"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean()) (place / "strip_accents").fail("must be true, false or null, got ", json_excerpt(*it));
      strip_accents = it->get<bool>();
    }
    return std::make_unique<BertTextNormalizer>(clean_text, handle_chinese_chars, strip_accents, lowercase);
  }
  if (type == "Replace") {
    const nlohmann::json& pattern = member(j, "pattern", type, place);
    const JsonPlace pattern_place = place / "pattern";
    std::u32string content = to_u32(string(j, "content", type, place), place / "content");
    if (!pattern.is_object() || pattern.size() != 1) {
      pattern_place.fail("must be {\"String\": ...} or {\"Regex\": ...}, got ", json_excerpt(pattern));
    }
    const std::string& kind = pattern.begin().key();
    const nlohmann::json& value = pattern.begin().value();
    if (!value.is_string()) (pattern_place / kind).fail("must be a string, got ", json_excerpt(value));
    const std::string& text = value.get_ref<const std::string&>();
    if (kind == "String") {
      return std::make_unique<ReplaceNormalizer>(to_u32(text, pattern_place / kind), std::move(content),
                                                 pattern_place / kind);
    }
    if (kind == "Regex") {
      (void)to_u32(text, pattern_place / kind);
      return std::make_unique<ReplaceNormalizer>(Regex::compile(text, pattern_place / kind), std::move(content));
    }
    pattern_place.fail("must be {\"String\": ...} or {\"Regex\": ...}, got ", json_excerpt(pattern));
  }
  if (type == "Precompiled") {
    const JsonPlace map_place = place / "precompiled_charsmap";
    const nlohmann::json& v = member(j, "precompiled_charsmap", type, place);
    if (!v.is_string()) map_place.fail("must be a base64 string, got ", json_excerpt(v));
    const std::optional<std::string> blob = decode_base64(v.get_ref<const std::string&>());
    if (!blob) map_place.fail("is not valid base64");
    return std::make_unique<PrecompiledNormalizer>(PrecompiledCharsmap::parse(*blob, map_place));
  }
  if (type == "Sequence") {
    const nlohmann::json& list = member(j, "normalizers", type, place);
    const JsonPlace list_place = place / "normalizers";
    if (!list.is_array()) list_place.fail("must be an array of normalizers, got ", json_excerpt(list));
    if (list.size() > kMaxSequence) list_place.fail("has ", list.size(), " normalizers (at most ", kMaxSequence, ")");
    if (depth >= kMaxDepth) place.fail("Sequences nested more than ", kMaxDepth, " deep");
    std::vector<std::unique_ptr<const Normalizer>> parts;
    parts.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto part = read_normalizer(list[i], list_place[i], depth + 1);
      if (!part) list_place[i].fail("a normalizer of a Sequence must not be null");
      parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  (place / "type").fail("\"", type,
                        "\" is not a normalizer stile reads (it reads: BertNormalizer, ByteLevel, Lowercase, NFC, "
                        "NFD, NFKC, NFKD, Nmt, Precompiled, Prepend, Replace, Sequence, Strip, StripAccents)");
}

}  // namespace stile::tok
