#pragma once
// Readers for the tokenizer goldens in tests/tokenizer/data (written by
// scripts/make_tokenizer_goldens.py; formats in data/README.md).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "stile/text/utf8.hpp"

namespace stile_test {

inline std::filesystem::path data_dir() { return STILE_TEST_DATA_DIR; }
inline std::filesystem::path model_vocab() { return std::filesystem::path(STILE_MODEL_DIR) / "vocab.txt"; }

// The lines of a text file, without their "\n"; '#' comment lines are skipped.
inline std::vector<std::string> read_lines(const std::filesystem::path& file) {
  std::ifstream stream(file, std::ios::binary);
  if (!stream) throw std::runtime_error("cannot open " + file.string());
  std::vector<std::string> lines;
  for (std::string line; std::getline(stream, line);) {
    if (line.starts_with('#')) continue;
    lines.push_back(line);
  }
  return lines;
}

inline std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find(separator, begin);
    parts.emplace_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

// "101 2023 102" -> {101, 2023, 102}
inline std::vector<std::int32_t> parse_ids(std::string_view text) {
  std::vector<std::int32_t> ids;
  std::istringstream stream{std::string(text)};
  for (long long id; stream >> id;) ids.push_back(static_cast<std::int32_t>(id));
  return ids;
}

// A JSON string literal (as Python's json.dumps(ensure_ascii=True) writes it) -> UTF-8.
inline std::string parse_json_string(std::string_view literal) {
  if (literal.size() < 2 || literal.front() != '"' || literal.back() != '"') {
    throw std::runtime_error("not a JSON string: " + std::string(literal));
  }
  std::string out;
  const auto hex4 = [&](std::size_t at) {
    if (at + 4 > literal.size()) throw std::runtime_error("short \\u escape");
    return static_cast<char32_t>(std::stoul(std::string(literal.substr(at, 4)), nullptr, 16));
  };
  for (std::size_t i = 1; i + 1 < literal.size(); ++i) {
    const char c = literal[i];
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    const char e = literal[++i];
    switch (e) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'u': {
        char32_t cp = hex4(i + 1);
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && literal.substr(i + 1, 2) == "\\u") {
          const char32_t low = hex4(i + 3);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          i += 6;
        }
        stile::utf8::append(out, cp);
        break;
      }
      default: out.push_back(e); break;  // \" \\ \/
    }
  }
  return out;
}

// For messages: the text with non-printable and non-ASCII bytes as \xNN.
inline std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F && byte != '\\') {
      out.push_back(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 15]);
    }
  }
  return out;
}

inline std::string from_hex(std::string_view hex) {
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return bytes;
}

}  // namespace stile_test
