#pragma once
// UTF-8 decoding and encoding for text that comes from outside (requests, vocab files).
//
// Ill-formed input is never undefined behaviour: decode() reports it as U+FFFD and says how many
// bytes to skip, which is the "maximal subpart" of the ill-formed sequence (Unicode 15, section
// 3.9, U+FFFD substitution of maximal subparts). That is the same resynchronisation as Python's
// bytes.decode("utf-8", errors="replace") and WHATWG's decoder, so a byte string decodes here to
// the same code points as in the reference tooling, and a truncated sequence never swallows the
// valid character after it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace stile::utf8 {

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

struct DecodedChar {
  char32_t code_point;  // U+FFFD when !valid
  std::uint32_t size;   // bytes consumed, >= 1 (so a decode loop always advances)
  bool valid;
};

// Decodes the character that starts at text[offset]; offset must be < text.size().
[[nodiscard]] inline DecodedChar decode(std::string_view text, std::size_t offset) noexcept {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data()) + offset;
  const std::size_t available = text.size() - offset;
  const unsigned lead = bytes[0];
  if (lead < 0x80) return {lead, 1, true};

  // Table 3-7 of the Unicode standard: the lead byte fixes the length and the allowed range of
  // the second byte (which excludes overlong forms, surrogates and code points above U+10FFFF);
  // later bytes are plain continuation bytes 80..BF.
  std::uint32_t length = 0;
  unsigned second_low = 0x80;
  unsigned second_high = 0xBF;
  char32_t code_point = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code_point = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code_point = lead & 0x0F;
    if (lead == 0xE0) second_low = 0xA0;
    if (lead == 0xED) second_high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code_point = lead & 0x07;
    if (lead == 0xF0) second_low = 0x90;
    if (lead == 0xF4) second_high = 0x8F;
  } else {
    return {kReplacementCharacter, 1, false};  // 80..C1 or F5..FF never start a character
  }
  for (std::uint32_t i = 1; i < length; ++i) {
    const unsigned low = i == 1 ? second_low : 0x80;
    const unsigned high = i == 1 ? second_high : 0xBF;
    if (i >= available || bytes[i] < low || bytes[i] > high) {
      return {kReplacementCharacter, i, false};  // the maximal subpart is bytes [0, i)
    }
    code_point = (code_point << 6) | (bytes[i] & 0x3F);
  }
  return {code_point, length, true};
}

// Byte offset of the first ill-formed sequence, or std::string_view::npos when text is UTF-8.
[[nodiscard]] inline std::size_t find_invalid(std::string_view text) noexcept {
  for (std::size_t offset = 0; offset < text.size();) {
    if (static_cast<unsigned char>(text[offset]) < 0x80) {
      ++offset;
      continue;
    }
    const DecodedChar decoded = decode(text, offset);
    if (!decoded.valid) return offset;
    offset += decoded.size;
  }
  return std::string_view::npos;
}

// Appends the UTF-8 form of a Unicode scalar value (surrogates and values above U+10FFFF are
// written as U+FFFD: they cannot be encoded).
inline void append(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
    return;
  }
  if ((code_point >= 0xD800 && code_point <= 0xDFFF) || code_point > 0x10FFFF) {
    code_point = kReplacementCharacter;
  }
  char buffer[4];
  std::size_t size = 0;
  if (code_point < 0x800) {
    buffer[0] = static_cast<char>(0xC0 | (code_point >> 6));
    size = 1;
  } else if (code_point < 0x10000) {
    buffer[0] = static_cast<char>(0xE0 | (code_point >> 12));
    buffer[1] = static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    size = 2;
  } else {
    buffer[0] = static_cast<char>(0xF0 | (code_point >> 18));
    buffer[1] = static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    buffer[2] = static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    size = 3;
  }
  buffer[size] = static_cast<char>(0x80 | (code_point & 0x3F));
  out.append(buffer, size + 1);
}

// The code points of text, each ill-formed subpart read as U+FFFD (as decode() does).
[[nodiscard]] inline std::u32string to_code_points(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const DecodedChar d = decode(text, at);
    out.push_back(d.code_point);
    at += d.size;
  }
  return out;
}

}  // namespace stile::utf8
