#pragma once
// The pre-tokenizers of a tokenizer.json (Hugging Face tokenizers' src/pre_tokenizers/*.rs) and
// their reader, read_pre_tokenizer. Each cuts the splits of a PreTokenizedString finer through
// NormalizedString::split, so every piece keeps the reference's origins.
//
//   BertPreTokenizer   bert.rs         whitespace removed, punctuation isolated
//   ByteLevel          byte_level.rs   optional leading space, GPT-2 regex, bytes -> GPT-2 alphabet
//   Metaspace          metaspace.rs    ' ' -> replacement, prepend scheme, split before replacement
//   Whitespace         whitespace.rs   Rust regex \w+|[^\w\s]+ (whitespace removed)
//   WhitespaceSplit    whitespace.rs   whitespace removed
//   Punctuation        punctuation.rs  punctuation split per behavior
//   Split              split.rs        a string or (Oniguruma) regex, behavior, invert
//   Digits             digits.rs       numeric characters isolated or contiguous
//   CharDelimiterSplit delimiter.rs    one character removed
//   FixedLength        fixed_length.rs pieces of n characters
//   UnicodeScripts     unicode_scripts a new piece where the script changes (the reference's table)
//   Sequence           sequence.rs     each in turn
//
// Character classes are the reference's, probed per code point (pre_tokenizer_tables.hpp, from
// scripts/make_pre_tokenizer_tables.py): Rust's char::is_whitespace and is_numeric,
// unicode_categories' is_punctuation plus ASCII punctuation, Rust regex's \w and \s. Regexes
// are regex.hpp's (PCRE2 with Oniguruma's semantics and classes).
//
// JSON: fields as the reference's serde reads them (required ones required, defaults where it has
// them, values type-checked; keys it ignores are ignored here too). A "type" stile does not
// read, or a value it does not implement, fails naming the field.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/io/strict_json.hpp"
#include "stile/text/normalized_string.hpp"
#include "stile/text/onig_class_tables.hpp"
#include "stile/text/pre_tokenized_string.hpp"
#include "stile/text/pre_tokenizer_tables.hpp"
#include "stile/text/regex.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/unicode_scripts_table.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

namespace pre_tok_chars {

template <std::size_t N>
[[nodiscard]] inline bool in_ranges(const bert_tables::CodePointRange (&ranges)[N], char32_t c) noexcept {
  const auto* after = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                       [](char32_t v, const bert_tables::CodePointRange& r) { return v < r.first; });
  return after != std::begin(ranges) && c <= std::prev(after)->last;
}

// Rust's char::is_whitespace (White_Space: also U+000B, U+000C, U+0085, unlike BERT's cleaning).
[[nodiscard]] inline bool is_whitespace(char32_t c) noexcept {
  if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
  return in_ranges(pre_tokenizer_tables::kWhitespace, c);
}

// ASCII punctuation or unicode_categories' is_punctuation (Pc Pd Ps Pe Pi Pf Po of its tables).
[[nodiscard]] inline bool is_punctuation(char32_t c) noexcept {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return in_ranges(pre_tokenizer_tables::kPunctuation, c);
}

// Rust's char::is_numeric (Nd, Nl, No).
[[nodiscard]] inline bool is_numeric(char32_t c) noexcept {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(pre_tokenizer_tables::kNumeric, c);
}

// Rust regex's \w and \s (the Whitespace pre-tokenizer's regex).
[[nodiscard]] inline bool is_regex_word(char32_t c) noexcept {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return in_ranges(pre_tokenizer_tables::kRegexWord, c);
}
[[nodiscard]] inline bool is_regex_space(char32_t c) noexcept {
  if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
  return in_ranges(pre_tokenizer_tables::kRegexSpace, c);
}

// GPT-2's byte -> character table (byte_level.rs bytes_char): the printable Latin-1 bytes map to
// themselves, the other 68 to U+0100.. in byte order.
[[nodiscard]] inline const std::array<char32_t, 256>& byte_chars() noexcept {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

}  // namespace pre_tok_chars

// Splits every untokenized split on the characters for which is_match(c), as behavior says.
template <class F>
inline void split_on_chars(PreTokenizedString& text, F&& is_match, SplitBehavior behavior) {
  text.split([&](std::size_t, NormalizedString&& s) {
    return s.split(find_char_matches(s.chars(), is_match), behavior);
  });
}

// The reference splits twice (whitespace removed, then punctuation isolated); one pass cutting the
// same pieces gives the same slices (a slice of a slice keeps the origins) with half the copies.
class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& text) const override {
    text.split([](std::size_t, NormalizedString&& s) {
      const std::u32string_view chars = s.chars();
      std::vector<PatternMatch> parts;  // is_match: removed (whitespace)
      std::size_t run = 0;              // start of the current run of other characters
      for (std::size_t i = 0; i < chars.size(); ++i) {
        const char32_t c = chars[i];
        const bool space = pre_tok_chars::is_whitespace(c);
        if (!space && !pre_tok_chars::is_punctuation(c)) continue;
        if (run < i) parts.push_back({run, i, false});
        parts.push_back({i, i + 1, space});
        run = i + 1;
      }
      if (run < chars.size() || parts.empty()) parts.push_back({run, chars.size(), false});
      return s.split(parts, SplitBehavior::removed);
    });
  }
};

class WhitespaceSplit final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& text) const override {
    split_on_chars(text, pre_tok_chars::is_whitespace, SplitBehavior::removed);
  }
};

// `\w+|[^\w\s]+` (Rust regex), inverted, removed: runs of word characters and runs of other
// non-space characters are the pieces; whitespace goes.
class Whitespace final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedString& text) const override {
    text.split([](std::size_t, NormalizedString&& s) {
      const std::u32string_view chars = s.chars();
      std::vector<PatternMatch> parts;
      enum Kind { space, word, other };
      const auto kind = [](char32_t c) {
        if (pre_tok_chars::is_regex_word(c)) return word;
        return pre_tok_chars::is_regex_space(c) ? space : other;
      };
      for (std::size_t i = 0; i < chars.size();) {
        const Kind k = kind(chars[i]);
        std::size_t j = i + 1;
        while (j < chars.size() && kind(chars[j]) == k) ++j;
        parts.push_back({i, j, k == space});  // the regex's matches are kept (inverted)
        i = j;
      }
      if (parts.empty()) parts.push_back({0, 0, false});
      return s.split(parts, SplitBehavior::removed);
    });
  }
};

class Punctuation final : public PreTokenizer {
 public:
  explicit Punctuation(SplitBehavior behavior) : behavior_(behavior) {}
  void pre_tokenize(PreTokenizedString& text) const override {
    split_on_chars(text, pre_tok_chars::is_punctuation, behavior_);
  }

 private:
  SplitBehavior behavior_;
};

class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual_digits) : individual_(individual_digits) {}
  void pre_tokenize(PreTokenizedString& text) const override {
    split_on_chars(text, pre_tok_chars::is_numeric, individual_ ? SplitBehavior::isolated : SplitBehavior::contiguous);
  }

 private:
  bool individual_;
};

class CharDelimiterSplit final : public PreTokenizer {
 public:
  explicit CharDelimiterSplit(char32_t delimiter) : delimiter_(delimiter) {}
  void pre_tokenize(PreTokenizedString& text) const override {
    const char32_t d = delimiter_;
    split_on_chars(text, [d](char32_t c) { return c == d; }, SplitBehavior::removed);
  }

 private:
  char32_t delimiter_;
};

class FixedLength final : public PreTokenizer {
 public:
  explicit FixedLength(std::size_t length) : length_(length) {}
  void pre_tokenize(PreTokenizedString& text) const override {
    const std::size_t n = length_;
    text.split([n](std::size_t, NormalizedString&& s) {
      std::vector<NormalizedString> pieces;
      pieces.reserve(s.size() / n + 1);
      for (std::size_t at = 0; at < s.size(); at += n) pieces.push_back(s.slice(at, std::min(s.size(), at + n)));
      return pieces;
    });
  }

 private:
  std::size_t length_;
};

// A piece ends where the script changes (unicode_scripts/pre_tokenizer.rs). Script "Any" (' ' and
// code points the reference's table leaves out) never starts a piece nor ends a run; a split that
// starts with such characters loses them (the reference's first cut is at the first other one).
class UnicodeScripts final : public PreTokenizer {
 public:
  [[nodiscard]] static std::uint8_t script(char32_t c) noexcept {
    const auto& table = unicode_scripts_table::kScripts;
    const auto* after = std::upper_bound(std::begin(table), std::end(table), c,
                                         [](char32_t v, const unicode_scripts_table::ScriptRange& r) { return v < r.first; });
    if (after == std::begin(table) || c > std::prev(after)->last) return 0;
    return std::prev(after)->script;
  }

  void pre_tokenize(PreTokenizedString& text) const override {
    text.split([](std::size_t, NormalizedString&& s) {
      const std::u32string_view chars = s.chars();
      std::vector<std::size_t> cuts;
      int last = -1;
      for (std::size_t i = 0; i < chars.size(); ++i) {
        const std::uint8_t sc = script(chars[i]);
        if (sc == 0) continue;
        if (last != sc) cuts.push_back(i);
        last = sc;
      }
      cuts.push_back(chars.size());
      std::vector<NormalizedString> pieces;
      pieces.reserve(cuts.size());
      for (std::size_t k = 0; k + 1 < cuts.size(); ++k) pieces.push_back(s.slice(cuts[k], cuts[k + 1]));
      return pieces;
    });
  }
};

enum class PrependScheme { always, first, never };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {}

  void pre_tokenize(PreTokenizedString& text) const override {
    const char32_t r = replacement_;
    text.split([&](std::size_t, NormalizedString&& s) {
      const std::u32string_view chars = s.chars();
      if (chars.find(U' ') != std::u32string_view::npos) {
        s.replace(find_char_matches(chars, [](char32_t c) { return c == U' '; }), std::u32string_view(&r, 1));
      }
      const bool starts = !s.empty() && s.chars()[0] == r;
      if (!starts && (scheme_ == PrependScheme::always || (scheme_ == PrependScheme::first && s.piece_begin() == 0))) {
        s.prepend(std::u32string_view(&r, 1));
      }
      std::vector<NormalizedString> pieces;
      if (split_) return s.split(find_char_matches(s.chars(), [r](char32_t c) { return c == r; }),
                                 SplitBehavior::merged_with_next);
      pieces.push_back(std::move(s));
      return pieces;
    });
  }

 private:
  char32_t replacement_;
  PrependScheme scheme_;
  bool split_;
};

// GPT-2's pre-tokenization pattern (byte_level.rs RE), in Oniguruma syntax.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// kGpt2Pattern's matches (as Regex::find_matches gives them), found by hand over Oniguruma's
// classes: every character starts a match there (it is a letter, a number, a space or other), so
// the matches tile the text and each is the pattern's first alternative that fits. Checked
// against the regex over all code points (test_pre_tokenizers).
inline void find_gpt2_matches(std::u32string_view t, std::vector<PatternMatch>& out) {
  enum Class : unsigned char { letter, number, space, other };
  const auto cls = [](char32_t c) -> Class {
    if (c < 0x80) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return letter;
      if (c >= '0' && c <= '9') return number;
      if (c == ' ' || (c >= 9 && c <= 13)) return space;
      return other;
    }
    if (pre_tok_chars::in_ranges(onig_class_tables::kLetter, c)) return letter;
    if (pre_tok_chars::in_ranges(onig_class_tables::kNumber, c)) return number;
    if (pre_tok_chars::in_ranges(onig_class_tables::kSpace, c)) return space;
    return other;
  };
  out.clear();
  const std::size_t n = t.size();
  if (n == 0) {
    out.push_back({0, 0, false});
    return;
  }
  for (std::size_t i = 0; i < n;) {
    const char32_t c = t[i];
    std::size_t end = 0;
    if (c == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
      const char32_t a = t[i + 1];
      const char32_t b = i + 2 < n ? t[i + 2] : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        end = i + 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        end = i + 3;
      }
    }
    if (end == 0) {
      std::size_t j = i;
      if (c == ' ' && i + 1 < n && cls(t[i + 1]) != space) j = i + 1;  // " ?" before a word
      const Class k = cls(t[j]);
      if (k != space) {  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
        end = j + 1;
        while (end < n && cls(t[end]) == k) ++end;
      } else {  // "\s+(?!\S)": the run but its last space when a non-space follows; else "\s+"
        std::size_t q = i + 1;
        while (q < n && cls(t[q]) == space) ++q;
        end = (q < n && q - i > 1) ? q - 1 : q;
      }
    }
    out.push_back({i, end, true});
    i = end;
  }
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool trim_offsets, bool use_regex)
      : add_prefix_space_(add_prefix_space), trim_offsets_(trim_offsets), use_regex_(use_regex) {}

  [[nodiscard]] bool add_prefix_space() const noexcept { return add_prefix_space_; }
  // Used by the post-processor (ByteLevel's process_offsets), not by pre-tokenization.
  [[nodiscard]] bool trim_offsets() const noexcept { return trim_offsets_; }
  [[nodiscard]] bool use_regex() const noexcept { return use_regex_; }

  void pre_tokenize(PreTokenizedString& text) const override {
    text.split([&](std::size_t, NormalizedString&& s) {
      if (add_prefix_space_ && (s.empty() || s.chars()[0] != U' ')) s.prepend(U" ");
      std::vector<NormalizedString> pieces;
      if (!use_regex_) {
        pieces.push_back(std::move(s));
        return pieces;
      }
      thread_local std::vector<PatternMatch> matches;
      find_gpt2_matches(s.chars(), matches);
      return s.split(matches, SplitBehavior::isolated);
    });
    text.normalize([](NormalizedString& s) { to_byte_chars(s); });
  }

  // Each character -> its UTF-8 bytes as GPT-2 characters: the first takes the character's place
  // (change 0), the others are inserted after it (change 1), as the reference's transform.
  static void to_byte_chars(NormalizedString& s) {
    const auto& table = pre_tok_chars::byte_chars();
    const std::u32string_view chars = s.chars();
    if (std::all_of(chars.begin(), chars.end(), [](char32_t c) { return c < 0x80; })) {
      s.map([&table](char32_t c) { return table[c]; });
      return;
    }
    std::vector<CharChange> changes;
    changes.reserve(chars.size() * 2);
    std::string bytes;
    for (const char32_t c : chars) {
      bytes.clear();
      utf8::append(bytes, c);
      for (std::size_t i = 0; i < bytes.size(); ++i) {
        changes.push_back({table[static_cast<unsigned char>(bytes[i])], i == 0 ? 0 : 1});
      }
    }
    s.transform(changes, 0);
  }

 private:
  bool add_prefix_space_;
  bool trim_offsets_;
  bool use_regex_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  // A regex (Oniguruma syntax) or, when !is_regex, a string matched as it is.
  SplitPreTokenizer(std::u32string pattern, bool is_regex, SplitBehavior behavior, bool invert, const JsonPlace& place)
      : behavior_(behavior), invert_(invert) {
    if (is_regex) {
      regex_ = Regex::compile(regex_detail::u32_to_utf8(pattern), place);
    } else if (pattern.empty()) {
      regex_ = Regex::literal(pattern, place);  // matches the empty string at every character
    } else {
      literal_ = std::move(pattern);
    }
  }

  void pre_tokenize(PreTokenizedString& text) const override {
    text.split([&](std::size_t, NormalizedString&& s) {
      std::vector<PatternMatch> matches =
          regex_.valid() ? regex_.find_matches(s.chars()) : find_string_matches(s.chars(), literal_);
      if (invert_) {
        for (PatternMatch& m : matches) m.is_match = !m.is_match;
      }
      return s.split(matches, behavior_);
    });
  }

 private:
  Regex regex_;            // valid for a regex (or the empty string)
  std::u32string literal_;  // otherwise
  SplitBehavior behavior_;
  bool invert_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<const PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(PreTokenizedString& text) const override {
    for (const auto& part : parts_) part->pre_tokenize(text);
  }

 private:
  std::vector<std::unique_ptr<const PreTokenizer>> parts_;
};

namespace pre_tok_json {

inline const nlohmann::json* find(const nlohmann::json& j, std::string_view key) {
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

inline bool read_bool(const nlohmann::json& j, std::string_view key, const JsonPlace& place, const bool* fallback) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr) {
    if (fallback == nullptr) place.fail("missing \"", key, "\"");
    return *fallback;
  }
  if (!v->is_boolean()) (place / key).fail("must be true or false, got ", json_excerpt(*v));
  return v->get<bool>();
}

inline const std::string& read_string(const nlohmann::json& v, const JsonPlace& place) {
  if (!v.is_string()) place.fail("must be a string, got ", json_excerpt(v));
  return v.get_ref<const std::string&>();
}

// A JSON string holding exactly one character (Rust's char).
inline char32_t read_char(const nlohmann::json& j, std::string_view key, const JsonPlace& place) {
  const nlohmann::json* v = find(j, key);
  if (v == nullptr) place.fail("missing \"", key, "\"");
  const std::u32string s = utf8::to_code_points(read_string(*v, place / key));
  if (s.size() != 1) (place / key).fail("must be one character, got ", json_excerpt(*v));
  return s[0];
}

inline SplitBehavior read_behavior(const nlohmann::json& v, const JsonPlace& place) {
  const std::string& s = read_string(v, place);
  if (s == "Removed") return SplitBehavior::removed;
  if (s == "Isolated") return SplitBehavior::isolated;
  if (s == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (s == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (s == "Contiguous") return SplitBehavior::contiguous;
  place.fail("unknown behavior ", json_excerpt(v),
             " (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

}  // namespace pre_tok_json

// null -> nullptr (no pre-tokenizer).
inline std::unique_ptr<const PreTokenizer> read_pre_tokenizer(const nlohmann::json& j, const JsonPlace& place) {
  using namespace pre_tok_json;
  if (j.is_null()) return nullptr;
  if (!j.is_object()) place.fail("must be a JSON object or null, got ", json_excerpt(j));
  const nlohmann::json* type_value = find(j, "type");
  if (type_value == nullptr) place.fail("missing \"type\" (stile does not read untagged pre-tokenizers)");
  const std::string& type = read_string(*type_value, place / "type");
  static constexpr bool kTrue = true;

  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "UnicodeScripts") return std::make_unique<UnicodeScripts>();
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "ByteLevel") {
    const bool add_prefix_space = read_bool(j, "add_prefix_space", place, nullptr);
    const bool trim_offsets = read_bool(j, "trim_offsets", place, nullptr);
    const bool use_regex = read_bool(j, "use_regex", place, &kTrue);
    return std::make_unique<ByteLevel>(add_prefix_space, trim_offsets, use_regex);
  }
  if (type == "Metaspace") {
    const char32_t replacement = read_char(j, "replacement", place);
    PrependScheme scheme = PrependScheme::always;
    if (const nlohmann::json* v = find(j, "prepend_scheme")) {
      const std::string& s = read_string(*v, place / "prepend_scheme");
      if (s == "always") {
        scheme = PrependScheme::always;
      } else if (s == "first") {
        scheme = PrependScheme::first;
      } else if (s == "never") {
        scheme = PrependScheme::never;
      } else {
        (place / "prepend_scheme").fail("unknown prepend scheme ", json_excerpt(*v), " (expected always, first or never)");
      }
    }
    // The legacy field: false means "never", and contradicts any other declared scheme.
    if (const nlohmann::json* v = find(j, "add_prefix_space"); v != nullptr && !v->is_null()) {
      if (!v->is_boolean()) (place / "add_prefix_space").fail("must be true, false or null, got ", json_excerpt(*v));
      if (!v->get<bool>()) {
        if (scheme != PrependScheme::never) {
          (place / "add_prefix_space").fail("false does not match \"prepend_scheme\" (the reference refuses it too)");
        }
        scheme = PrependScheme::never;
      }
    }
    bool split = true;
    if (const nlohmann::json* v = find(j, "split"); v != nullptr && !v->is_null()) {
      if (!v->is_boolean()) (place / "split").fail("must be true, false or null, got ", json_excerpt(*v));
      split = v->get<bool>();
    }
    if (const nlohmann::json* v = find(j, "str_rep"); v != nullptr && !v->is_null()) {
      (void)read_string(*v, place / "str_rep");
    }
    return std::make_unique<Metaspace>(replacement, scheme, split);
  }
  if (type == "Punctuation") {
    SplitBehavior behavior = SplitBehavior::isolated;
    if (const nlohmann::json* v = find(j, "behavior")) behavior = read_behavior(*v, place / "behavior");
    return std::make_unique<Punctuation>(behavior);
  }
  if (type == "Digits") return std::make_unique<Digits>(read_bool(j, "individual_digits", place, nullptr));
  if (type == "CharDelimiterSplit") return std::make_unique<CharDelimiterSplit>(read_char(j, "delimiter", place));
  if (type == "FixedLength") {
    std::uint64_t length = 5;
    if (const nlohmann::json* v = find(j, "length")) length = json_whole(*v, "\"length\"", place.path, place.file);
    if (length == 0 || length > (1u << 30)) {
      (place / "length").fail("must be between 1 and 2^30, got ", length, " (the reference panics on 0)");
    }
    return std::make_unique<FixedLength>(static_cast<std::size_t>(length));
  }
  if (type == "Split") {
    const nlohmann::json* pattern = find(j, "pattern");
    if (pattern == nullptr) place.fail("missing \"pattern\"");
    const JsonPlace pattern_place = place / "pattern";
    if (!pattern->is_object() || pattern->size() != 1) {
      pattern_place.fail("must be {\"String\": ...} or {\"Regex\": ...}, got ", json_excerpt(*pattern));
    }
    const std::string& kind = pattern->begin().key();
    if (kind != "String" && kind != "Regex") {
      pattern_place.fail("unknown pattern kind \"", kind, "\" (expected String or Regex)");
    }
    const std::string& text = read_string(pattern->begin().value(), pattern_place / kind);
    const nlohmann::json* behavior = find(j, "behavior");
    if (behavior == nullptr) place.fail("missing \"behavior\"");
    const SplitBehavior b = read_behavior(*behavior, place / "behavior");
    const bool invert = read_bool(j, "invert", place, nullptr);
    return std::make_unique<SplitPreTokenizer>(utf8::to_code_points(text), kind == "Regex", b, invert,
                                               pattern_place / kind);
  }
  if (type == "Sequence") {
    const nlohmann::json* list = find(j, "pretokenizers");
    if (list == nullptr) place.fail("missing \"pretokenizers\"");
    if (!list->is_array()) (place / "pretokenizers").fail("must be a JSON array, got ", json_excerpt(*list));
    std::vector<std::unique_ptr<const PreTokenizer>> parts;
    for (std::size_t i = 0; i < list->size(); ++i) {
      auto part = read_pre_tokenizer((*list)[i], (place / "pretokenizers")[i]);
      if (part == nullptr) (place / "pretokenizers")[i].fail("must be a pre-tokenizer, got null");
      parts.push_back(std::move(part));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  (place / "type").fail("\"", type,
                        "\" is not a pre-tokenizer stile reads (it reads: BertPreTokenizer, ByteLevel, "
                        "CharDelimiterSplit, Digits, FixedLength, Metaspace, Punctuation, Sequence, Split, "
                        "UnicodeScripts, Whitespace, WhitespaceSplit)");
}

}  // namespace stile::tok
