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
#include "stile/text/unicode_forms.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

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
