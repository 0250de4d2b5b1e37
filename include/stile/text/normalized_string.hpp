#pragma once
// A piece of text under normalization that remembers, for every character, which bytes of the
// original text it came from: Hugging Face tokenizers' NormalizedString, the thing every
// normalizer, pre-tokenizer and model of a tokenizer.json pipeline works on.
//
// Representation: the normalized text as code points (UTF-32, so regular expressions and models
// index characters directly), and per code point its origin: bytes [begin, end) of the original
// text, absolute (offsets into the whole text given to the tokenizer, not into this piece).
//
// The reference keeps an alignment per normalized *byte*, relative to the piece, plus the piece's
// shift. Every one of its operations gives all bytes of a character the same alignment, so one
// origin per code point holds exactly the same information; offsets here are the reference's
// alignments plus its original_shift. The rules that decide a new character's origin are the
// reference's, including its corner cases (see transform()).
//
// Ill-formed UTF-8 in the original reads as U+FFFD, one per maximal subpart (utf8.hpp), with the
// subpart's bytes as its origin: the same characters as Python's errors="replace".
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

// Bytes [begin, end) of the original text.
struct Origin {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
  friend bool operator==(const Origin&, const Origin&) = default;
};

// One new character of a transform, as the reference's (char, isize) pairs:
//   change  0: replaces the next old character (and takes its origin);
//   change  1: is inserted (takes the origin of the old character before the cursor, or the
//              piece's start when there is none);
//   change -n: replaces the next old character, and the n old characters after it are removed.
struct CharChange {
  char32_t c;
  int change;
};

// A part of a text found by a pattern: code points [begin, end) of the text searched, and whether
// the pattern matched there. A pattern's list covers the whole text, in order, with no gaps (the
// reference's Pattern::find_matches contract); an empty text gives one entry {0, 0, false}.
struct PatternMatch {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool is_match = false;
};

// What split() does with the parts a pattern matched (the reference's SplitDelimiterBehavior).
// Splitting "the-final--countdown" on '-':
enum class SplitBehavior {
  removed,               // "the" "final" "countdown"
  isolated,              // "the" "-" "final" "-" "-" "countdown"
  merged_with_previous,  // "the-" "final-" "-" "countdown"
  merged_with_next,      // "the" "-final" "-" "-countdown"
  contiguous,            // "the" "-" "final" "--" "countdown"
};

class NormalizedString {
 public:
  NormalizedString() = default;

  // Bytes [begin, end) of `original`, not yet normalized: one character per code point (or per
  // ill-formed subpart, as U+FFFD), each with its own bytes as origin.
  [[nodiscard]] static NormalizedString from_original(std::string_view original, std::size_t begin, std::size_t end) {
    require(begin <= end && end <= original.size(), "NormalizedString::from_original: range out of the text");
    NormalizedString s;
    s.piece_begin_ = static_cast<std::uint32_t>(begin);
    s.chars_.reserve(end - begin);
    s.origins_.reserve(end - begin);
    const std::string_view text = original.substr(0, end);
    for (std::size_t at = begin; at < end;) {
      const utf8::DecodedChar d = utf8::decode(text, at);
      s.chars_.push_back(d.code_point);
      s.origins_.push_back({static_cast<std::uint32_t>(at), static_cast<std::uint32_t>(at + d.size)});
      at += d.size;
    }
    return s;
  }

  [[nodiscard]] std::u32string_view chars() const noexcept { return chars_; }
  [[nodiscard]] std::span<const Origin> origins() const noexcept { return origins_; }
  [[nodiscard]] std::size_t size() const noexcept { return chars_.size(); }
  [[nodiscard]] bool empty() const noexcept { return chars_.empty(); }
  // Where this piece starts in the original: the origin of characters inserted at its front.
  [[nodiscard]] std::uint32_t piece_begin() const noexcept { return piece_begin_; }

  // The original bytes of code points [begin, end) (end > begin): from the first one's start to the
  // last one's end, as the reference's convert_offsets.
  [[nodiscard]] Origin original_range(std::size_t begin, std::size_t end) const {
    require(begin < end && end <= origins_.size(), "NormalizedString::original_range: bad range");
    return {origins_[begin].begin, origins_[end - 1].end};
  }

  // Replaces code points [begin, end) by `changes` (see CharChange). `initial_removed`: that many
  // old characters at the start of the range are removed before the first change (the
  // reference's initial_offset). The old characters of the range that no change consumes are
  // removed too.
  void transform_range(std::size_t begin, std::size_t end, std::span<const CharChange> changes,
                       std::size_t initial_removed) {
    require(begin <= end && end <= chars_.size(), "NormalizedString::transform_range: range out of the string");
    std::u32string new_chars;
    std::vector<Origin> new_origins;
    new_chars.reserve(changes.size());
    new_origins.reserve(changes.size());
    std::size_t cursor = begin + initial_removed;  // the next old character a change consumes
    for (const CharChange& change : changes) {
      Origin origin;
      if (change.change > 0) {
        origin = cursor == 0 ? Origin{piece_begin_, piece_begin_} : origins_[cursor - 1];
      } else {
        require(cursor < end, "NormalizedString::transform_range: a change replaces past the range");
        origin = origins_[cursor];
        cursor += 1 + static_cast<std::size_t>(-change.change);
      }
      new_chars.push_back(change.c);
      new_origins.push_back(origin);
    }
    chars_.replace(begin, end - begin, new_chars);
    origins_.erase(origins_.begin() + static_cast<std::ptrdiff_t>(begin),
                   origins_.begin() + static_cast<std::ptrdiff_t>(end));
    origins_.insert(origins_.begin() + static_cast<std::ptrdiff_t>(begin), new_origins.begin(), new_origins.end());
  }
  void transform(std::span<const CharChange> changes, std::size_t initial_removed) {
    transform_range(0, chars_.size(), changes, initial_removed);
  }

  // Each character mapped to one character (keeps the origins).
  template <class F>
  void map(F&& f) {
    for (char32_t& c : chars_) c = f(c);
  }

  // Keeps the characters for which keep(c) is true, with their origins.
  template <class F>
  void filter(F&& keep) {
    std::size_t out = 0;
    for (std::size_t i = 0; i < chars_.size(); ++i) {
      if (!keep(chars_[i])) continue;
      chars_[out] = chars_[i];
      origins_[out] = origins_[i];
      ++out;
    }
    chars_.resize(out);
    origins_.resize(out);
  }

  // The reference's prepend: the first character becomes s's first (keeping its origin), the rest
  // of s and then the old first character are inserted after it with the same origin. Nothing
  // happens to an empty string.
  void prepend(std::u32string_view s) {
    if (chars_.empty() || s.empty()) return;
    std::vector<CharChange> changes;
    changes.reserve(s.size() + 1);
    for (std::size_t i = 0; i < s.size(); ++i) changes.push_back({s[i], i == 0 ? 0 : 1});
    changes.push_back({chars_[0], 1});
    transform_range(0, 1, changes, 0);
  }

  // The reference's append: s inserted after the last character, with its origin; on an empty
  // string, inserted with the piece's start as origin.
  void append(std::u32string_view s) {
    const Origin origin = chars_.empty() ? Origin{piece_begin_, piece_begin_} : origins_.back();
    for (const char32_t c : s) {
      chars_.push_back(c);
      origins_.push_back(origin);
    }
  }

  // Replaces every match of a pattern (a list as PatternMatch describes, over chars()) by
  // `content`: each inserted character takes the origin of the character before the match (the
  // piece's start for a match at the front), as the reference's replace.
  void replace(std::span<const PatternMatch> matches, std::u32string_view content) {
    std::u32string new_chars;
    std::vector<Origin> new_origins;
    new_chars.reserve(chars_.size());
    new_origins.reserve(chars_.size());
    for (const PatternMatch& m : matches) {
      if (!m.is_match) {
        new_chars.append(chars_, m.begin, m.end - m.begin);
        new_origins.insert(new_origins.end(), origins_.begin() + static_cast<std::ptrdiff_t>(m.begin),
                           origins_.begin() + static_cast<std::ptrdiff_t>(m.end));
        continue;
      }
      // The reference starts its cursor after the removed characters of the match, so an inserted
      // character takes the origin of the match's *last* character (the one before the cursor).
      const Origin origin = m.end == 0 ? Origin{piece_begin_, piece_begin_} : origins_[m.end - 1];
      for (const char32_t c : content) {
        new_chars.push_back(c);
        new_origins.push_back(origin);
      }
    }
    chars_ = std::move(new_chars);
    origins_ = std::move(new_origins);
  }

  // Removes leading and/or trailing characters for which is_space(c) (the reference's lrstrip
  // with Rust's char::is_whitespace, which the caller passes).
  template <class F>
  void strip(bool left, bool right, F&& is_space) {
    std::size_t first = 0;
    std::size_t last = chars_.size();
    if (left) {
      while (first < last && is_space(chars_[first])) ++first;
    }
    if (right) {
      while (last > first && is_space(chars_[last - 1])) --last;
    }
    if (first == 0 && last == chars_.size()) return;
    chars_ = chars_.substr(first, last - first);
    origins_.erase(origins_.begin() + static_cast<std::ptrdiff_t>(last), origins_.end());
    origins_.erase(origins_.begin(), origins_.begin() + static_cast<std::ptrdiff_t>(first));
  }

  // Code points [begin, end) as a piece of their own (the reference's slice): the same origins,
  // and the first one's start as the new piece's start. An empty slice starts where the character
  // at begin does (or at this piece's start past the end).
  [[nodiscard]] NormalizedString slice(std::size_t begin, std::size_t end) const {
    require(begin <= end && end <= chars_.size(), "NormalizedString::slice: range out of the string");
    NormalizedString s;
    s.chars_ = chars_.substr(begin, end - begin);
    s.origins_.assign(origins_.begin() + static_cast<std::ptrdiff_t>(begin),
                      origins_.begin() + static_cast<std::ptrdiff_t>(end));
    s.piece_begin_ = begin < origins_.size() ? origins_[begin].begin : piece_begin_;
    return s;
  }

  // The pieces `matches` cut this string into, with the matched parts treated as `behavior` says
  // (the reference's NormalizedString::split). Empty pieces are kept here; PreTokenizedString
  // drops them.
  [[nodiscard]] std::vector<NormalizedString> split(std::span<const PatternMatch> matches,
                                                    SplitBehavior behavior) const {
    struct Part {
      std::size_t begin, end;
      bool remove;
    };
    std::vector<Part> parts;
    parts.reserve(matches.size());
    switch (behavior) {
      case SplitBehavior::isolated:
        for (const PatternMatch& m : matches) parts.push_back({m.begin, m.end, false});
        break;
      case SplitBehavior::removed:
        for (const PatternMatch& m : matches) parts.push_back({m.begin, m.end, m.is_match});
        break;
      case SplitBehavior::contiguous: {
        bool previous_match = false;
        for (const PatternMatch& m : matches) {
          if (m.is_match == previous_match && !parts.empty()) {
            parts.back().end = m.end;
          } else {
            parts.push_back({m.begin, m.end, false});
          }
          previous_match = m.is_match;
        }
        break;
      }
      case SplitBehavior::merged_with_previous: {
        bool previous_match = false;
        for (const PatternMatch& m : matches) {
          if (m.is_match && !previous_match && !parts.empty()) {
            parts.back().end = m.end;
          } else {
            parts.push_back({m.begin, m.end, false});
          }
          previous_match = m.is_match;
        }
        break;
      }
      case SplitBehavior::merged_with_next: {
        bool previous_match = false;
        for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
          if (it->is_match && !previous_match && !parts.empty()) {
            parts.back().begin = it->begin;
          } else {
            parts.push_back({it->begin, it->end, false});
          }
          previous_match = it->is_match;
        }
        std::reverse(parts.begin(), parts.end());
        break;
      }
    }
    std::vector<NormalizedString> pieces;
    pieces.reserve(parts.size());
    for (const Part& part : parts) {
      if (!part.remove) pieces.push_back(slice(part.begin, part.end));
    }
    return pieces;
  }

 private:
  std::u32string chars_;
  std::vector<Origin> origins_;
  std::uint32_t piece_begin_ = 0;
};

// The pattern "every character for which is_match(c)": each such character a match of its own
// (the reference's Pattern for Fn(char) -> bool).
template <class F>
[[nodiscard]] std::vector<PatternMatch> find_char_matches(std::u32string_view text, F&& is_match) {
  std::vector<PatternMatch> matches;
  if (text.empty()) {
    matches.push_back({0, 0, false});
    return matches;
  }
  std::size_t last = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!is_match(text[i])) continue;
    if (last < i) matches.push_back({last, i, false});
    matches.push_back({i, i + 1, true});
    last = i + 1;
  }
  if (last < text.size()) matches.push_back({last, text.size(), false});
  return matches;
}

}  // namespace stile::tok
