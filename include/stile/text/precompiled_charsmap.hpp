#pragma once
// SentencePiece's precompiled_charsmap, as the Precompiled normalizer of a tokenizer.json carries
// it (base64): the reference reads it with the spm_precompiled crate (Precompiled::from,
// DoubleArray::first_prefix_value, Precompiled::transform), which emulates SentencePiece's
// Darts::DoubleArray. Layout: a little-endian u32 (the trie's size in bytes), that many bytes of
// trie units (u32 each), then the normalized strings: UTF-8, each ending with '\0'. A trie value
// is the byte offset of a replacement in that string block.
//
// What is the reference's here: the unit decoding (has_leaf, value, label, offset), the walk that
// stops at a NUL byte and returns the FIRST (shortest) prefix that is a key, a trie size that is
// not a multiple of 4 (its last 1-3 bytes then belong to the string block), and the errors at
// load (too short a blob, strings that are not UTF-8). Where the reference would panic on a
// corrupt trie (an index past the array or past the strings), the lookup here says "no rule".
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/utf8.hpp"

namespace stile::tok {

// Standard base64 (RFC 4648 alphabet, '=' padding required, as the base64 crate's STANDARD
// engine decodes: no whitespace, non-zero trailing bits refused). nullopt when `text` is not that.
[[nodiscard]] inline std::optional<std::string> decode_base64(std::string_view text) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int v[4];
    int padding = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + static_cast<std::size_t>(k)];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++padding;
        continue;
      }
      if (padding > 0) return std::nullopt;  // a character after '='
      v[k] = value(c);
      if (v[k] < 0) return std::nullopt;
    }
    const std::uint32_t bits = (static_cast<std::uint32_t>(v[0]) << 18) | (static_cast<std::uint32_t>(v[1]) << 12) |
                               (static_cast<std::uint32_t>(v[2]) << 6) | static_cast<std::uint32_t>(v[3]);
    if (padding == 2 && (bits & 0xFFFF) != 0) return std::nullopt;
    if (padding == 1 && (bits & 0xFF) != 0) return std::nullopt;
    out.push_back(static_cast<char>(bits >> 16));
    if (padding < 2) out.push_back(static_cast<char>((bits >> 8) & 0xFF));
    if (padding < 1) out.push_back(static_cast<char>(bits & 0xFF));
  }
  return out;
}

class PrecompiledCharsmap {
 public:
  // Reads a decoded blob; errors name `place` (the "precompiled_charsmap" field).
  [[nodiscard]] static PrecompiledCharsmap parse(std::string_view blob, const JsonPlace& place) {
    if (blob.size() < 4) place.fail("the charsmap is ", blob.size(), " bytes, too short to hold its trie size");
    const std::uint32_t trie_bytes = read_u32(blob, 0);
    const std::size_t units = trie_bytes / 4;
    if (units > (blob.size() - 4) / 4) {
      place.fail("the charsmap's trie is ", trie_bytes, " bytes but only ", blob.size() - 4,
                 " bytes follow (truncated)");
    }
    PrecompiledCharsmap map;
    map.array_.reserve(units);
    for (std::size_t i = 0; i < units; ++i) map.array_.push_back(read_u32(blob, 4 + 4 * i));
    map.normalized_ = std::string(blob.substr(4 + 4 * units));
    if (utf8::find_invalid(map.normalized_) != std::string_view::npos) {
      place.fail("the charsmap's normalized strings are not UTF-8");
    }
    if (map.array_.empty()) place.fail("the charsmap's trie is empty");
    return map;
  }

  // The replacement of the shortest prefix of the UTF-8 bytes that is a key (the reference's
  // Precompiled::transform over first_prefix_value), as UTF-8; nullopt when no prefix is a key.
  // `next_byte(i)` gives byte i of the key, or -1 past its end.
  template <class NextByte>
  [[nodiscard]] std::optional<std::string_view> transform(NextByte&& next_byte) const {
    const std::size_t size = array_.size();
    std::size_t node = offset(array_[0]);
    for (std::size_t i = 0;; ++i) {
      const int b = next_byte(i);
      if (b <= 0) return std::nullopt;  // the key's end, or a NUL byte (the reference stops there)
      node ^= static_cast<std::size_t>(b);
      if (node >= size) return std::nullopt;
      const std::uint64_t unit = array_[node];
      if (label(unit) != static_cast<std::uint64_t>(b)) return std::nullopt;
      node ^= offset(unit);
      if (has_leaf(unit)) {
        if (node >= size) return std::nullopt;
        const std::size_t at = static_cast<std::size_t>(value(array_[node]));
        if (at > normalized_.size()) return std::nullopt;
        const std::size_t end = normalized_.find('\0', at);
        return std::string_view(normalized_).substr(at, (end == std::string::npos ? normalized_.size() : end) - at);
      }
    }
  }

  [[nodiscard]] std::size_t trie_units() const noexcept { return array_.size(); }

 private:
  static std::uint32_t read_u32(std::string_view blob, std::size_t at) {
    const auto* b = reinterpret_cast<const unsigned char*>(blob.data()) + at;
    return static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
           (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  }
  static bool has_leaf(std::uint64_t unit) { return ((unit >> 8) & 1) == 1; }
  static std::uint64_t value(std::uint64_t unit) { return unit & ((std::uint64_t{1} << 31) - 1); }
  static std::uint64_t label(std::uint64_t unit) { return unit & ((std::uint64_t{1} << 31) | 0xFF); }
  static std::size_t offset(std::uint64_t unit) {
    return static_cast<std::size_t>((unit >> 10) << ((unit & (std::uint64_t{1} << 9)) >> 6));
  }

  std::vector<std::uint32_t> array_;
  std::string normalized_;
};

}  // namespace stile::tok
