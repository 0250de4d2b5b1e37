#pragma once
// BERT's text normalization and pre-tokenization, as Hugging Face tokenizers' BertNormalizer and
// BertPreTokenizer do them (the fast tokenizer of every BERT-family checkpoint):
//
//   1. clean text: drop NUL, U+FFFD and control/format/private-use characters; every whitespace
//      character becomes a space
//   2. put spaces around CJK ideographs, so each one is a word of its own
//   3. strip accents: NFD, then drop nonspacing marks (on by default when lower-casing)
//   4. lower-case, character by character
//   5. split into words at whitespace, and make every punctuation character a word of its own
//
// The character classes are the reference's, code point for code point (bert_unicode_tables.hpp
// explains why they are tables and not utf8proc's categories); utf8proc does NFD, combining
// classes and case mapping.
#include <utf8proc.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "stile/text/bert_unicode_tables.hpp"
#include "stile/text/utf8.hpp"

namespace stile {

namespace bert_chars {

template <std::size_t N>
[[nodiscard]] constexpr bool in_ranges(const bert_tables::CodePointRange (&ranges)[N], char32_t c) noexcept {
  const auto* after =
      std::upper_bound(std::begin(ranges), std::end(ranges), c,
                       [](char32_t value, const bert_tables::CodePointRange& range) { return value < range.first; });
  return after != std::begin(ranges) && c <= std::prev(after)->last;
}

// The characters clean_text turns into a space. (Rust's White_Space also has U+000B, U+000C and
// U+0085, but clean_text drops those as controls before it looks for whitespace.)
[[nodiscard]] constexpr bool is_whitespace(char32_t c) noexcept {
  if (c < 0x80) return c == U' ' || c == U'\t' || c == U'\n' || c == U'\r';
  return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The characters clean_text removes.
[[nodiscard]] constexpr bool is_control(char32_t c) noexcept {
  if (c < 0x80) return c != U'\t' && c != U'\n' && c != U'\r' && (c < 0x20 || c == 0x7F);
  return c == utf8::kReplacementCharacter || in_ranges(bert_tables::kControl, c);
}

// The "CJK Unified Ideographs" ranges of the reference's BertNormalizer. (Its Python twin, the slow
// BertTokenizer, starts one range at U+2B820 instead of U+2B920; the fast tokenizer is the
// reference here.)
[[nodiscard]] constexpr bool is_chinese_char(char32_t c) noexcept {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII punctuation (33-47, 58-64, 91-96, 123-126) and the general categories P*.
[[nodiscard]] constexpr bool is_punctuation(char32_t c) noexcept {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  }
  return in_ranges(bert_tables::kPunctuation, c);
}

// Nonspacing marks (Mn), removed when accents are stripped.
[[nodiscard]] constexpr bool is_nonspacing_mark(char32_t c) noexcept {
  return c >= 0x300 && in_ranges(bert_tables::kNonspacingMark, c);
}

// Simple (one code point) lower-case mapping; U+0130 is the one character whose full mapping is
// longer, and BertNormalizer handles it before this is called.
[[nodiscard]] inline char32_t to_lower(char32_t c) noexcept {
  if (c < 0x80) return (c >= U'A' && c <= U'Z') ? c + 32 : c;
  const auto* override_it =
      std::lower_bound(std::begin(bert_tables::kLowercaseOverrides), std::end(bert_tables::kLowercaseOverrides), c,
                       [](const bert_tables::LowercaseOverride& entry, char32_t value) { return entry.from < value; });
  if (override_it != std::end(bert_tables::kLowercaseOverrides) && override_it->from == c) return override_it->to;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

[[nodiscard]] inline std::uint16_t combining_class(char32_t c) noexcept {
  if (c < 0x300) return 0;  // nothing below the combining diacritics block combines
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

}  // namespace bert_chars

struct BertNormalizerOptions {
  bool lowercase = true;              // do_lower_case: true for uncased checkpoints
  std::optional<bool> strip_accents;  // unset: follows lowercase, as in Hugging Face
  bool handle_chinese_chars = true;   // tokenize_chinese_chars
};

class BertNormalizer {
 public:
  explicit BertNormalizer(BertNormalizerOptions options = {})
      : lowercase_(options.lowercase),
        strip_accents_(options.strip_accents.value_or(options.lowercase)),
        handle_chinese_chars_(options.handle_chinese_chars) {}

  // Appends the normalized code points of text to out. Ill-formed UTF-8 reads as U+FFFD (see
  // utf8.hpp), which cleaning then drops: such bytes vanish without splitting the word around them.
  // Characters already in out are never touched (canonical reordering stops at out's old end).
  void normalize(std::string_view text, std::vector<char32_t>& out) const {
    const std::size_t begin = out.size();
    for (std::size_t offset = 0; offset < text.size();) {
      char32_t c = static_cast<unsigned char>(text[offset]);
      if (c < 0x80) {
        ++offset;
      } else {
        const utf8::DecodedChar decoded = utf8::decode(text, offset);
        c = decoded.code_point;
        offset += decoded.size;
      }
      if (bert_chars::is_control(c)) continue;  // NUL and U+FFFD included
      if (bert_chars::is_whitespace(c)) {
        out.push_back(U' ');
      } else if (handle_chinese_chars_ && bert_chars::is_chinese_char(c)) {
        out.push_back(U' ');
        append_decomposed(c, begin, out);
        out.push_back(U' ');
      } else {
        append_decomposed(c, begin, out);
      }
    }
    if (!strip_accents_ && !lowercase_) return;
    // Marks go only after canonical reordering: a mark of class 0 ends a reordering run, so
    // dropping it earlier could reorder what survives differently.
    std::size_t kept = begin;
    for (std::size_t i = begin; i < out.size(); ++i) {
      const char32_t c = out[i];
      if (strip_accents_ && bert_chars::is_nonspacing_mark(c)) continue;
      out[kept++] = lowercase_ ? bert_chars::to_lower(c) : c;
    }
    out.resize(kept);
  }

  [[nodiscard]] bool lowercase() const noexcept { return lowercase_; }
  [[nodiscard]] bool strip_accents() const noexcept { return strip_accents_; }
  [[nodiscard]] bool handle_chinese_chars() const noexcept { return handle_chinese_chars_; }

 private:
  // Appends c, or its canonical decomposition when accents are stripped, keeping every run of
  // combining characters in canonical order (stable by combining class), as NFD requires.
  void append_decomposed(char32_t c, std::size_t begin, std::vector<char32_t>& out) const {
    if (!strip_accents_) {
      // Without NFD, U+0130 lower-cases to two code points; write them now so the lower-casing
      // pass can work in place.
      if (lowercase_ && c == 0x130) {
        out.push_back(U'i');
        out.push_back(0x307);
      } else {
        out.push_back(c);
      }
      return;
    }
    if (c < 0xC0) {  // nothing below U+00C0 decomposes
      out.push_back(c);
      return;
    }
    utf8proc_int32_t parts[kMaxDecomposition];
    utf8proc_ssize_t count = 1;
    if (std::binary_search(std::begin(bert_tables::kNoDecomposition), std::end(bert_tables::kNoDecomposition), c)) {
      parts[0] = static_cast<utf8proc_int32_t>(c);
    } else {
      int boundclass = 0;
      count = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), parts, kMaxDecomposition, UTF8PROC_DECOMPOSE,
                                      &boundclass);
      if (count <= 0 || count > kMaxDecomposition) {  // cannot happen for a scalar value; stay safe
        parts[0] = static_cast<utf8proc_int32_t>(c);
        count = 1;
      }
    }
    for (utf8proc_ssize_t i = 0; i < count; ++i) {
      const auto part = static_cast<char32_t>(parts[i]);
      const std::uint16_t part_class = bert_chars::combining_class(part);
      std::size_t at = out.size();
      if (part_class != 0) {
        while (at > begin && bert_chars::combining_class(out[at - 1]) > part_class) --at;
      }
      out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), part);
    }
  }

  static constexpr utf8proc_ssize_t kMaxDecomposition = 8;  // canonical decompositions have <= 4

  bool lowercase_;
  bool strip_accents_;
  bool handle_chinese_chars_;
};

// Calls on_word(std::span<const char32_t>) for every word of normalized text, in order: whitespace
// separates words and is dropped, each punctuation character is a word of its own.
template <class OnWord>
void for_each_bert_word(std::span<const char32_t> text, OnWord&& on_word) {
  std::size_t word_begin = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool space = bert_chars::is_whitespace(c);
    if (!space && !bert_chars::is_punctuation(c)) continue;
    if (i > word_begin) on_word(text.subspan(word_begin, i - word_begin));
    if (!space) on_word(text.subspan(i, 1));
    word_begin = i + 1;
  }
  if (text.size() > word_begin) on_word(text.subspan(word_begin));
}

}  // namespace stile
