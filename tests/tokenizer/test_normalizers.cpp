// The normalizers of a tokenizer.json (text/normalizers.hpp) against the reference: every golden
// of data/normalizers.jsonl (scripts/make_normalizer_goldens.py: Hugging Face tokenizers' output
// text and each character's origin), a few cases spelled out, and the reader's errors for
// malformed JSON (each naming the field).
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_files.hpp"
#include "stile/text/normalizers.hpp"

namespace {

using Catch::Matchers::Contains;
using stile::tok::JsonPlace;
using stile::tok::NormalizedString;
using stile::tok::Origin;

nlohmann::json read_json(const std::filesystem::path& file) {
  std::ifstream stream(file, std::ios::binary);
  if (!stream) throw std::runtime_error("cannot open " + file.string());
  std::stringstream text;
  text << stream.rdbuf();
  return nlohmann::json::parse(text.str());
}

std::unique_ptr<const stile::tok::Normalizer> normalizer_of(std::string_view json_text) {
  return stile::tok::read_normalizer(nlohmann::json::parse(json_text), JsonPlace{"tok.json", "normalizer"});
}

struct Result {
  std::u32string chars;
  std::vector<Origin> origins;
};

Result run(const stile::tok::Normalizer& normalizer, std::string_view text) {
  NormalizedString s = NormalizedString::from_original(text, 0, text.size());
  normalizer.normalize(s);
  return {std::u32string(s.chars()), std::vector<Origin>(s.origins().begin(), s.origins().end())};
}

// Origins as [[begin, end], ...] for a readable failure message.
std::string origins_text(const std::vector<Origin>& origins) {
  std::string out = "[";
  for (const Origin& o : origins) {
    out.append("[").append(std::to_string(o.begin)).append(",").append(std::to_string(o.end)).append("]");
  }
  out.append("]");
  return out;
}

}  // namespace

TEST_CASE("normalizers: every golden of the reference, text and origins", "[normalizers]") {
  const auto lines = stile_test::read_lines(stile_test::data_dir() / "normalizers.jsonl");
  REQUIRE(lines.size() > 600);
  std::map<std::string, std::unique_ptr<const stile::tok::Normalizer>> from_files;
  std::map<std::string, std::size_t> per_label;
  std::size_t checked = 0;
  for (const std::string& line : lines) {
    const nlohmann::json g = nlohmann::json::parse(line);
    std::unique_ptr<const stile::tok::Normalizer> own;
    const stile::tok::Normalizer* normalizer = nullptr;
    if (g["normalizer"].is_null()) {
      const std::string source = g["normalizer_from"].get<std::string>();
      auto& cached = from_files[source];
      if (!cached) {
        const nlohmann::json file = read_json(stile_test::data_dir() / source);
        cached = stile::tok::read_normalizer(file["normalizer"], JsonPlace{source, "normalizer"});
      }
      normalizer = cached.get();
    } else {
      own = stile::tok::read_normalizer(g["normalizer"], JsonPlace{"golden", "normalizer"});
      normalizer = own.get();
    }
    REQUIRE(normalizer != nullptr);
    const std::string text = g["text"].get<std::string>();
    const Result got = run(*normalizer, text);
    std::u32string want_chars;
    for (const auto& c : g["chars"]) want_chars.push_back(c.get<char32_t>());
    std::vector<Origin> want_origins;
    for (const auto& o : g["origins"]) want_origins.push_back({o[0].get<std::uint32_t>(), o[1].get<std::uint32_t>()});
    INFO(g["label"].get<std::string>() << " " << g["normalizer"].dump() << " on " << nlohmann::json(text).dump());
    CHECK(got.chars == want_chars);
    CHECK(origins_text(got.origins) == origins_text(want_origins));
    ++per_label[g["label"].get<std::string>()];
    ++checked;
  }
  CHECK(checked == lines.size());
  for (const char* label : {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Nmt", "ByteLevel", "Bert",
                            "Strip", "Prepend", "Replace", "Sequence", "Precompiled (xlm_roberta)",
                            "Precompiled (albert)"}) {
    INFO(label);
    CHECK(per_label[label] >= 20);
  }
}

TEST_CASE("normalizers: cases spelled out", "[normalizers]") {
  SECTION("NFKC: a ligature becomes two characters of the same origin") {
    const Result r = run(*normalizer_of(R"({"type":"NFKC"})"), "\xEF\xAC\x81");  // U+FB01
    CHECK(r.chars == U"fi");
    CHECK(origins_text(r.origins) == "[[0,3][0,3]]");
  }
  SECTION("NFC: a base and a separate mark compose; the composite keeps the base's origin only") {
    const Result r = run(*normalizer_of(R"({"type":"NFC"})"), "e\xCC\x81x");
    CHECK(r.chars == U"\u00e9x");
    CHECK(origins_text(r.origins) == "[[0,1][3,4]]");
  }
  SECTION("NFC: Unicode 9.0 data (U+1DFA, new in 10.0, is a starter there: no reordering)") {
    const Result r = run(*normalizer_of(R"({"type":"NFD"})"), "a\xE1\xB7\xBA\xCC\x81");  // a U+1DFA U+0301
    CHECK(r.chars == U"a\u1dfa\u0301");
  }
  SECTION("Lowercase: U+0130 is two characters; final sigma is not special") {
    const Result r = run(*normalizer_of(R"({"type":"Lowercase"})"), "\xC4\xB0\xCE\xA3");
    CHECK(r.chars == U"i\u0307\u03c3");
    CHECK(origins_text(r.origins) == "[[0,2][0,2][2,4]]");
  }
  SECTION("Prepend: the prefix shares the first character's origin") {
    const Result r = run(*normalizer_of(R"({"type":"Prepend","prepend":"\u2581"})"), "ab");
    CHECK(r.chars == U"\u2581ab");
    CHECK(origins_text(r.origins) == "[[0,1][0,1][1,2]]");
    CHECK(run(*normalizer_of(R"({"type":"Prepend","prepend":"\u2581"})"), "").chars.empty());
  }
  SECTION("Replace: the content takes the origin of the match's last character") {
    const Result r = run(*normalizer_of(R"({"type":"Replace","pattern":{"String":"ab"},"content":"XYZ"})"), "cabd");
    CHECK(r.chars == U"cXYZd");
    CHECK(origins_text(r.origins) == "[[0,1][2,3][2,3][2,3][3,4]]");
  }
  SECTION("Strip: Rust's whitespace at the ends only") {
    const Result r = run(*normalizer_of(R"({"type":"Strip","strip_left":true,"strip_right":false})"),
                         "\xE3\x80\x80 a b \xC2\x85");
    CHECK(r.chars == U"a b \u0085");
  }
  SECTION("ByteLevel: each byte one character, the first replacing, the others inserted") {
    const Result r = run(*normalizer_of(R"({"type":"ByteLevel"})"), " \xC3\xA9");
    CHECK(r.chars == U"\u0120\u00c3\u00a9");
    CHECK(origins_text(r.origins) == "[[0,1][1,3][1,3]]");
  }
  SECTION("BertNormalizer: controls dropped, CJK spaced, accents stripped, lower-cased") {
    const Result r = run(*normalizer_of(R"({"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,
                                          "strip_accents":null,"lowercase":true})"),
                         "\x01\xC3\x89t\xC3\xA9\xE4\xB8\xAD");
    CHECK(r.chars == U"ete \u4e2d ");
  }
  SECTION("Sequence: parts run in order; null is no normalizer") {
    const Result r = run(*normalizer_of(R"({"type":"Sequence","normalizers":[{"type":"NFKD"},
                                          {"type":"StripAccents"},{"type":"Lowercase"}]})"),
                         "\xC3\x89\xEF\xAC\x81");
    CHECK(r.chars == U"efi");
    CHECK(normalizer_of("null") == nullptr);
  }
}

TEST_CASE("normalizers: Precompiled reads SentencePiece's charsmap as the reference does", "[normalizers]") {
  const nlohmann::json file = read_json(stile_test::data_dir() / "json/xlm_roberta.tokenizer.json");
  const nlohmann::json& precompiled = file["normalizer"]["normalizers"][0];
  REQUIRE(precompiled["type"] == "Precompiled");
  const auto normalizer = stile::tok::read_normalizer(precompiled, JsonPlace{"xlm", "normalizer"});
  // NFKC by rule; a grapheme under 6 bytes whose first character has a rule is replaced whole
  // (the mark after the fullwidth A is gone), a longer one character by character.
  CHECK(run(*normalizer, "\xEF\xBC\xA1\xCC\x81").chars == U"A");
  CHECK(run(*normalizer, "\xEF\xBC\xA1\xCC\x81\xCC\x81").chars == U"A\u0301\u0301");
  CHECK(run(*normalizer, "\xEF\xAC\x81x").chars == U"fix");
  CHECK(run(*normalizer, "plain ascii").chars == U"plain ascii");

  SECTION("base64 as the base64 crate's STANDARD engine reads it") {
    CHECK(stile::tok::decode_base64("") == std::string());
    CHECK(stile::tok::decode_base64("YQ==") == std::string("a"));
    CHECK(stile::tok::decode_base64("YWI=") == std::string("ab"));
    CHECK(stile::tok::decode_base64("YWJj") == std::string("abc"));
    CHECK_FALSE(stile::tok::decode_base64("YQ"));      // padding required
    CHECK_FALSE(stile::tok::decode_base64("YR=="));    // non-zero trailing bits
    CHECK_FALSE(stile::tok::decode_base64("Y Q=="));   // no whitespace
    CHECK_FALSE(stile::tok::decode_base64("YQ==YQ=="));  // padding only at the end
    CHECK_FALSE(stile::tok::decode_base64("Y=Q="));
  }
}

TEST_CASE("normalizers: malformed JSON is refused naming the field", "[normalizers]") {
  const auto refused = [](std::string_view json_text, std::string_view a, std::string_view b = "") {
    INFO(json_text);
    CHECK_THROWS_WITH(normalizer_of(json_text), Contains(std::string(a)) && Contains(std::string(b)));
  };
  refused(R"([1])", "stile: tok.json: normalizer:", "JSON object or null");
  refused(R"({})", "normalizer:", "no \"type\"");
  refused(R"({"type":3})", "normalizer.type", "must be a string");
  refused(R"({"type":"UnicodeScripts"})", "normalizer.type", "\"UnicodeScripts\" is not a normalizer stile reads");
  refused(R"({"type":"Strip","strip_left":true})", "normalizer", "Strip needs \"strip_right\"");
  refused(R"({"type":"Strip","strip_left":1,"strip_right":true})", "normalizer.strip_left", "true or false");
  refused(R"({"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"lowercase":"yes"})",
          "normalizer.lowercase", "true or false");
  refused(R"({"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"lowercase":true,
             "strip_accents":0})",
          "normalizer.strip_accents", "true, false or null");
  refused(R"({"type":"Prepend","prepend":5})", "normalizer.prepend", "must be a string");
  refused(R"({"type":"Prepend"})", "normalizer", "Prepend needs \"prepend\"");
  refused(R"({"type":"Replace","pattern":"x","content":"y"})", "normalizer.pattern", "{\"String\": ...}");
  refused(R"({"type":"Replace","pattern":{"Glob":"x"},"content":"y"})", "normalizer.pattern", "{\"Regex\": ...}");
  refused(R"({"type":"Replace","pattern":{"String":1},"content":"y"})", "normalizer.pattern.String",
          "must be a string");
  refused(R"({"type":"Replace","pattern":{"String":"x"}})", "normalizer", "Replace needs \"content\"");
  refused(R"({"type":"Replace","pattern":{"Regex":"(unclosed"},"content":"y"})", "normalizer.pattern.Regex");
  refused(R"({"type":"Sequence","normalizers":{}})", "normalizer.normalizers", "must be an array");
  refused(R"({"type":"Sequence","normalizers":[{"type":"NFC"},null]})", "normalizer.normalizers[1]",
          "must not be null");
  refused(R"({"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Nope"}]})", "normalizer.normalizers[1].type",
          "\"Nope\"");
  std::string deep = R"({"type":"NFC"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type":"Sequence","normalizers":[)" + deep + "]}";
  refused(deep, "nested more than");
  refused(R"({"type":"Precompiled"})", "normalizer", "Precompiled needs \"precompiled_charsmap\"");
  refused(R"({"type":"Precompiled","precompiled_charsmap":null})", "normalizer.precompiled_charsmap",
          "must be a base64 string");
  refused(R"({"type":"Precompiled","precompiled_charsmap":"not base64!"})", "normalizer.precompiled_charsmap",
          "not valid base64");
  refused(R"({"type":"Precompiled","precompiled_charsmap":"AAA="})", "normalizer.precompiled_charsmap",
          "too short");
  // A trie of 16 bytes announced, 4 present.
  refused(R"({"type":"Precompiled","precompiled_charsmap":"EAAAAAAAAAA="})", "normalizer.precompiled_charsmap",
          "truncated");
  // An empty trie.
  refused(R"({"type":"Precompiled","precompiled_charsmap":"AAAAAA=="})", "normalizer.precompiled_charsmap",
          "trie is empty");
  // A one-unit trie followed by strings that are not UTF-8 (0xFF).
  refused(R"({"type":"Precompiled","precompiled_charsmap":"BAAAAAAAAAD/"})", "normalizer.precompiled_charsmap",
          "not UTF-8");
}

TEST_CASE("normalizers: a corrupt trie never reads out of bounds", "[normalizers]") {
  // One unit whose offset points far outside the array: every lookup says "no rule".
  std::string blob = {4, 0, 0, 0};
  const std::uint32_t unit = 0xFFFFFC00u;  // offset bits all set
  for (int k = 0; k < 4; ++k) blob.push_back(static_cast<char>((unit >> (8 * k)) & 0xFF));
  blob += "x";
  const auto map = stile::tok::PrecompiledCharsmap::parse(blob, JsonPlace{"t", "m"});
  stile::tok::PrecompiledNormalizer normalizer(map);
  CHECK(run(normalizer, "abc \xC3\xA9").chars == U"abc \u00e9");
}
