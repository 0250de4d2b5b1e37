#pragma once
// The reference's Unicode operations on a NormalizedString, with its Unicode versions (tables
// probed from it: normalizer_unicode_tables.hpp): NFD / NFKD / NFC / NFKC as the
// unicode-normalization-alignments crate gives them, (char, change) per character; Rust's
// char::to_lowercase; the crate's combining marks. normalizers.hpp builds the normalizers on them.
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

#include "stile/text/normalized_string.hpp"
#include "stile/text/normalizer_unicode_tables.hpp"
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

}  // namespace stile::tok
