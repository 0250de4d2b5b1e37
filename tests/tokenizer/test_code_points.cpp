// Normalization and pre-tokenization of every Unicode code point, against the reference's: for each
// code point c, the words BertNormalizer + BertPreTokenizer make of "a" c "a"
// (data/code_points.txt). This is what checks the generated character tables and the utf8proc
// overrides, all 1,112,064 scalar values; it needs no model.
#include <catch2/catch.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "golden_files.hpp"
#include "stile/text/bert_normalizer.hpp"

using stile::BertNormalizer;
using namespace stile_test;

namespace {

using Words = std::vector<std::u32string>;

Words words_of(const BertNormalizer& normalizer, char32_t c) {
  std::string text = "a";
  stile::utf8::append(text, c);
  text += "a";
  std::vector<char32_t> normalized;
  normalizer.normalize(text, normalized);
  Words words;
  stile::for_each_bert_word(std::span<const char32_t>(normalized),
                            [&](std::span<const char32_t> word) { words.emplace_back(word.begin(), word.end()); });
  return words;
}

std::u32string parse_code_points(std::istream& stream) {
  std::u32string out;
  for (std::string hex; stream >> hex;) out.push_back(static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
  return out;
}

// The standard algorithmic decomposition of a precomposed Hangul syllable (Unicode 3.12).
std::u32string hangul_jamo(char32_t syllable) {
  const char32_t index = syllable - 0xAC00;
  std::u32string jamo{0x1100 + index / 588, 0x1161 + (index % 588) / 28};
  if (index % 28 != 0) jamo.push_back(0x11A7 + index % 28);
  return jamo;
}

// "a" middle "a", built by appending: GCC 12 warns falsely (-Wrestrict, bug 105329) on
// u32string operator+ chains at -O3.
std::u32string between_as(const std::u32string& middle) {
  std::u32string word = U"a";
  word += middle;
  word += U'a';
  return word;
}

Words expected_words(char32_t c, const std::string& kind, std::istream& rest) {
  const std::u32string a = U"a";
  const std::u32string alone(1, c);
  if (kind == "k") return {between_as(alone)};
  if (kind == "d") return {U"aa"};
  if (kind == "s") return {a, a};
  if (kind == "p") return {a, alone, a};
  if (kind == "h") return {between_as(hangul_jamo(c))};
  if (kind == "m") return {between_as(parse_code_points(rest))};
  if (kind == "x") {
    std::string joined;
    rest >> std::ws;
    std::getline(rest, joined);
    Words words;
    for (const std::string& word : split(joined, '|')) {
      std::istringstream word_stream(word);
      words.push_back(parse_code_points(word_stream));
    }
    return words;
  }
  throw std::runtime_error("unknown class " + kind);
}

std::string describe(const Words& words) {
  std::ostringstream out;
  for (std::size_t w = 0; w < words.size(); ++w) {
    out << (w ? " | " : "");
    for (const char32_t c : words[w]) out << std::hex << std::uppercase << static_cast<std::uint32_t>(c) << ' ';
  }
  return out.str();
}

}  // namespace

TEST_CASE("every code point normalizes and splits as in the reference", "[tokenizer][golden][unicode]") {
  const BertNormalizer normalizer;  // uncased: the reference model's settings
  std::size_t compared = 0;
  std::size_t mismatches = 0;
  std::string first_mismatches;
  char32_t next_expected = 0;
  for (const std::string& line : read_lines(data_dir() / "code_points.txt")) {
    std::istringstream fields(line);
    std::string first_hex;
    std::string last_hex;
    std::string kind;
    fields >> first_hex >> last_hex >> kind;
    const auto first = static_cast<char32_t>(std::stoul(first_hex, nullptr, 16));
    const auto last = static_cast<char32_t>(std::stoul(last_hex, nullptr, 16));
    REQUIRE(first == next_expected);  // the file covers every code point once, in order
    const std::streampos rest_at = fields.tellg();
    for (char32_t c = first; c <= last; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;  // surrogates are not characters
      fields.clear();
      fields.seekg(rest_at);
      const Words want = expected_words(c, kind, fields);
      const Words got = words_of(normalizer, c);
      ++compared;
      if (got != want) {
        if (++mismatches <= 20) {
          std::ostringstream message;
          message << "U+" << std::hex << std::uppercase << static_cast<std::uint32_t>(c) << ": got " << describe(got)
                  << " want " << describe(want) << "\n";
          first_mismatches += message.str();
        }
      }
    }
    next_expected = last + 1 == 0xD800 ? 0xE000 : last + 1;
  }
  CHECK(next_expected == 0x110000);
  CHECK(compared == 1112064);
  INFO(first_mismatches);
  CHECK(mismatches == 0);
  WARN("compared the normalization of " << compared << " code points with the reference: " << mismatches
                                        << " mismatches");
}
