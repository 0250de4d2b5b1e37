#pragma once
// The regular expressions of a tokenizer.json (Split's "Regex" patterns, ByteLevel's GPT-2
// pattern, Replace normalizers), with the reference's semantics: Hugging Face tokenizers runs them
// with Oniguruma (utils/onig.rs, the onig crate's find_iter, Oniguruma's default syntax), here
// they run with PCRE2 (the 32-bit code-unit library, UTF + UCP, JIT-compiled) directly on code
// points.
//
// What is the reference's here, and why:
// - find_matches() is the reference's Pattern::find_matches for a SysRegex: the whole text
//   covered in order, matches flagged; an empty text gives {0, 0, false}.
// - The match loop is onig's find_iter: each search starts where the last match ended (earlier
//   text stays visible to look-behind and \b); an empty match right where the previous match
//   ended is skipped by moving the start one character on (so "a*" over "aab" gives [0,2) and
//   [3,3), never [2,2)); an empty match elsewhere is kept.
// - Oniguruma's syntax is translated where PCRE2 reads the same text differently (see
//   translate_onig_pattern): ^ and $ match at line ends (PCRE2_MULTILINE), (?m) means "dot
//   matches newline" ((?s)), \h is a hex digit, \v is U+000B only, \uHHHH is a code point,
//   {,n} is {0,n}. What PCRE2 cannot express (absent operator (?~...), \y \Y, character-class
//   intersection &&, nested classes, callouts, other option letters) is refused by name.
// - Unicode classes \s, \d, \w, \p{L}, \p{N}, \p{Han}... are Oniguruma's: where PCRE2's tables
//   differ (PCRE2 10.42 has Unicode 14, the reference's Oniguruma Unicode 16; \w, \s and scripts
//   are defined differently), the class becomes PCRE2 items holding exactly Oniguruma's code
//   points (unicode_regex_tables.hpp, generated from the reference by
//   scripts/make_pre_tokenizer_tables.py). Other properties and spellings follow PCRE2's tables.
//
// Thread safety: a const Regex may be used from many threads at once; the match data, match
// context and JIT stack are per thread (thread_local), allocated once per thread.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 32
#endif
#include <pcre2.h>

#include "stile/core/error.hpp"
#include "stile/text/normalized_string.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/unicode_regex_tables.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

namespace regex_detail {

inline std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) utf8::append(out, c);
  return out;
}

inline void append_ascii(std::u32string& out, std::string_view s) {
  for (const char c : s) out.push_back(static_cast<char32_t>(static_cast<unsigned char>(c)));
}

inline bool is_hex(char32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
inline bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

// Oniguruma's class for an escape ("\\s") or a property name ("L"), where PCRE2's differs: PCRE2
// class items with exactly its code points; nullptr where the two agree.
inline const unicode_regex_tables::OnigClass* onig_class(std::u32string_view name) {
  for (const auto& e : unicode_regex_tables::kOnigClasses) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

[[noreturn]] inline void refuse_pattern(std::u32string_view p, std::string_view what, const JsonPlace& place) {
  place.fail("pattern ", json_excerpt(nlohmann::json(u32_to_utf8(p))), ": ", what,
             " has no PCRE2 equivalent (stile does not support it)");
}

}  // namespace regex_detail

// Translates an Oniguruma pattern (its default syntax, as the onig crate compiles it) into PCRE2
// syntax with the same meaning; refuses, through place, what has no PCRE2 counterpart.
[[nodiscard]] inline std::u32string translate_onig_pattern(std::u32string_view p, const JsonPlace& place) {
  using namespace regex_detail;
  std::u32string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  std::size_t class_start = 0;  // index in p of the first item of the open class
  const auto refuse = [&](std::string_view what) { refuse_pattern(p, what, place); };
  // Adds a class escape or property, with Oniguruma's code points where PCRE2's tables differ.
  const auto add_class = [&](std::u32string_view escape, std::u32string_view name, bool negated) {
    const unicode_regex_tables::OnigClass* onig = onig_class(name);
    if (onig == nullptr) {
      out.append(escape);
    } else if (!in_class) {
      append_ascii(out, negated ? "[^" : "[");
      out.append(onig->items);
      out.push_back(']');
    } else if (!negated) {
      out.append(onig->items);
    } else if (!onig->complement.empty()) {
      out.append(onig->complement);
    } else {
      refuse("a negated Unicode class (\\S, \\W, \\D, \\P{..}) inside [...]");
    }
  };
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char32_t c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) {
        out.push_back(c);  // PCRE2 reports the trailing backslash
        continue;
      }
      const char32_t e = p[++i];
      switch (e) {
        case 'h':
          append_ascii(out, in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
          break;
        case 'H':
          append_ascii(out, in_class ? "\\x{0}-/:-@G-`g-\\x{10ffff}" : "[^0-9a-fA-F]");
          break;
        case 'v':
          append_ascii(out, "\\x{b}");
          break;
        case 'u': {
          if (i + 4 >= p.size() + 0 || !is_hex(p[i + 1]) || !is_hex(p[i + 2]) || !is_hex(p[i + 3]) ||
              !is_hex(p[i + 4])) {
            refuse("\\u without four hex digits");
          }
          append_ascii(out, "\\x{");
          out.append(p.substr(i + 1, 4));
          out.push_back('}');
          i += 4;
          break;
        }
        case 'y':
        case 'Y':
          refuse_pattern(p, "\\y / \\Y (text segment boundary)", place);
        case 'O':
          refuse_pattern(p, "\\O", place);
        case 'Q':
        case 'E':
          refuse_pattern(p, "\\Q...\\E", place);
        case 'd':
        case 's':
        case 'w':
        case 'D':
        case 'S':
        case 'W': {
          const char32_t lower = e | 0x20;
          const char32_t name[3] = {'\\', lower, 0};
          const char32_t escape[3] = {'\\', e, 0};
          add_class(std::u32string_view(escape, 2), std::u32string_view(name, 2), e != lower);
          break;
        }
        case 'p':
        case 'P': {
          // \p{Name}, \p{^Name}, \P{Name}: the property's extra code points when its tables
          // differ (the name as written; Oniguruma also accepts other spellings, which then
          // follow PCRE2's tables).
          if (i + 1 < p.size() && p[i + 1] == '{') {
            const std::size_t close = p.find('}', i + 2);
            if (close == std::u32string_view::npos) refuse("\\p{ without }");
            std::u32string_view name = p.substr(i + 2, close - i - 2);
            bool negated = e == 'P';
            if (!name.empty() && name[0] == '^') {
              negated = !negated;
              name.remove_prefix(1);
            }
            const std::u32string escape(p.substr(i - 1, close - i + 2));
            add_class(escape, name, negated);
            i = close;
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
          break;
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && i > class_start) {
        in_class = false;
      } else if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {
          const std::size_t close = p.find(U":]", i + 2);
          if (close == std::u32string_view::npos) refuse("[: without :]");
          out.append(p.substr(i, close + 2 - i));
          i = close + 1;
          continue;
        }
        refuse("a nested character class [...[...]...]");
      } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        refuse("character-class intersection &&");
      }
      out.push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      class_start = i + 1;  // a ']' right here is a literal
      continue;
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '*') refuse("(* (callout or verb)");
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      const char32_t k = i + 2 < p.size() ? p[i + 2] : 0;
      if (k == '~') refuse("the absent operator (?~...)");
      if (k == '{') refuse("a callout (?{...})");
      // Option groups: (?imx-imx) and (?imx-imx:...). Oniguruma's m is PCRE2's s.
      std::size_t j = i + 2;
      bool letters = false;
      while (j < p.size() && ((p[j] >= 'a' && p[j] <= 'z') || (p[j] >= 'A' && p[j] <= 'Z') || p[j] == '-')) {
        letters = true;
        ++j;
      }
      if (letters && j < p.size() && (p[j] == ')' || p[j] == ':')) {
        out.append(U"(?");
        for (std::size_t q = i + 2; q < j; ++q) {
          const char32_t o = p[q];
          if (o == 'i' || o == 'x' || o == '-') {
            out.push_back(o);
          } else if (o == 'm') {
            out.push_back('s');
          } else {
            refuse("an option letter other than i, m, x in (?...)");
          }
        }
        i = j - 1;
        continue;
      }
      out.push_back(c);
      continue;
    }
    if (c == '{' && i + 1 < p.size() && p[i + 1] == ',') {
      std::size_t j = i + 2;
      while (j < p.size() && is_digit(p[j])) ++j;
      if (j > i + 2 && j < p.size() && p[j] == '}') {
        append_ascii(out, "{0");
        continue;  // the ",n}" follows as written
      }
    }
    out.push_back(c);
  }
  return out;
}

// Rust's regex::escape as PCRE2 text: every ASCII character that is not a letter, digit or
// underscore escaped (PCRE2 reads "\" before such a character as the character itself).
[[nodiscard]] inline std::u32string escape_pattern(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size() * 2);
  for (const char32_t c : s) {
    const bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c < 0x80 && !word && c > ' ') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

class Regex {
 public:
  Regex() = default;

  // A tokenizer.json regex (Oniguruma syntax, UTF-8). A pattern refused by the translation or by
  // PCRE2 fails through place, with PCRE2's message and the offset in the translated pattern.
  [[nodiscard]] static Regex compile(std::string_view utf8_pattern, const JsonPlace& place) {
    const std::u32string translated = translate_onig_pattern(utf8::to_code_points(utf8_pattern), place);
    return compile_pcre2(translated, utf8_pattern, place);
  }

  // The regex that matches `literal` as it is (the reference's regex::escape + SysRegex).
  [[nodiscard]] static Regex literal(std::u32string_view literal, const JsonPlace& place) {
    const std::u32string escaped = escape_pattern(literal);
    return compile_pcre2(escaped, regex_detail::u32_to_utf8(literal), place);
  }

  // A pattern already in PCRE2 syntax (for stile's own fixed patterns).
  [[nodiscard]] static Regex compile_pcre2(std::u32string_view pattern, std::string_view shown,
                                           const JsonPlace& place) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
    if (context == nullptr) throw Error("stile: regex: out of memory");
    pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // Oniguruma's: only \n ends a line
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, context);
    pcre2_compile_context_free(context);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      const int n = pcre2_get_error_message(error, message, 256);
      std::u32string text;
      for (int k = 0; k < n; ++k) text.push_back(static_cast<char32_t>(message[k]));
      place.fail("pattern ", json_excerpt(nlohmann::json(std::string(shown))), " is not a valid regex: ",
                 regex_detail::u32_to_utf8(text), " (at code point ", offset, " of the pattern as PCRE2 reads it)");
    }
    Regex r;
    r.code_.reset(code);
    // JIT is an optimisation only: where it is unavailable (qemu, some CPUs) the interpreter runs.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return r;
  }

  [[nodiscard]] bool valid() const noexcept { return code_ != nullptr; }

  // The reference's Pattern::find_matches for this regex over text (code points).
  [[nodiscard]] std::vector<PatternMatch> find_matches(std::u32string_view text) const {
    std::vector<PatternMatch> out;
    find_matches(text, out);
    return out;
  }

  // The same, into out (cleared first), so a caller can reuse its buffer.
  void find_matches(std::u32string_view text, std::vector<PatternMatch>& out) const {
    out.clear();
    if (text.empty()) {
      out.push_back({0, 0, false});
      return;
    }
    require(code_ != nullptr, "stile: Regex::find_matches on an empty Regex");
    check_scalar_values(text);
    Scratch& s = scratch();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const std::size_t n = text.size();
    std::size_t prev = 0;                 // end of the part already covered
    std::size_t start = 0;                // where the next search starts (onig's last_end)
    std::size_t last_match_end = SIZE_MAX;
    while (start <= n) {
      const int rc = pcre2_match(code_.get(), subject, n, start, PCRE2_NO_UTF_CHECK, s.data, s.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) fail_match(rc);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
      const std::size_t b = ov[0];
      const std::size_t e = ov[1];
      if (b == e && e == last_match_end) {
        start += 1;  // onig: no empty match right after the previous one; move one character on
        continue;
      }
      start = e;
      last_match_end = e;
      if (b > prev) out.push_back({prev, b, false});
      out.push_back({b, e, true});
      prev = e;
    }
    if (prev < n) out.push_back({prev, n, false});
  }

 private:
  struct CodeFree {
    void operator()(pcre2_code* c) const noexcept { pcre2_code_free(c); }
  };

  // One per thread: match data for the whole match only (ovector of one pair is enough for any
  // pattern: PCRE2 fills it and returns 0 when groups do not fit), a JIT stack up to 1 MiB.
  struct Scratch {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;
    Scratch() {
      data = pcre2_match_data_create(1, nullptr);
      context = pcre2_match_context_create(nullptr);
      stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
      if (data == nullptr || context == nullptr) throw Error("stile: regex: out of memory");
      if (stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~Scratch() {
      pcre2_jit_stack_free(stack);
      pcre2_match_context_free(context);
      pcre2_match_data_free(data);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  // PCRE2 is told not to check the subject (it would re-check the rest of it on every search);
  // a code point it cannot hold is refused here once instead.
  static void check_scalar_values(std::u32string_view text) {
    for (const char32_t c : text) {
      if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        throw Error(concat("stile: regex: the text holds ", static_cast<std::uint32_t>(c),
                           ", not a Unicode scalar value"));
      }
    }
  }

  [[noreturn]] static void fail_match(int rc) {
    PCRE2_UCHAR message[256];
    const int n = pcre2_get_error_message(rc, message, 256);
    std::u32string text;
    for (int k = 0; k < n; ++k) text.push_back(static_cast<char32_t>(message[k]));
    throw Error(concat("stile: regex: matching failed: ", regex_detail::u32_to_utf8(text)));
  }

  std::unique_ptr<pcre2_code, CodeFree> code_;
};

// The reference's Pattern for a plain string (tokenizer/pattern.rs, &str): the non-overlapping
// occurrences of needle, leftmost first; an empty needle matches nothing.
[[nodiscard]] inline std::vector<PatternMatch> find_string_matches(std::u32string_view text,
                                                                   std::u32string_view needle) {
  std::vector<PatternMatch> out;
  if (text.empty()) {
    out.push_back({0, 0, false});
    return out;
  }
  if (needle.empty()) {
    out.push_back({0, text.size(), false});
    return out;
  }
  std::size_t prev = 0;
  for (std::size_t at = text.find(needle); at != std::u32string_view::npos; at = text.find(needle, at)) {
    if (at > prev) out.push_back({prev, at, false});
    out.push_back({at, at + needle.size(), true});
    at += needle.size();
    prev = at;
  }
  if (prev < text.size()) out.push_back({prev, text.size(), false});
  return out;
}

}  // namespace stile::tok
