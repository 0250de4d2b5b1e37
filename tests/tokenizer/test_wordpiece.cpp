// WordPiece rules on a small in-memory vocabulary, where each expected id can be read off by hand:
// greedy longest match, [UNK] rules, special tokens in the text, truncation, padding, ill-formed
// UTF-8 and the UTF-8 decoder.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/text/utf8.hpp"
#include "stile/text/wordpiece.hpp"

using stile::Encoding;
using stile::InvalidUtf8;
using stile::Padding;
using stile::Vocab;
using stile::WordPieceOptions;
using stile::WordPieceTokenizer;
using Catch::Matchers::Contains;
using Ids = std::vector<std::int32_t>;

namespace {

// ids:                      0     1     2     3     4      5    6     7      8     9      10
constexpr char kVocab[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\n##a\nunaff\n,\n"
    // 11    12     13    14     15     16    17     18
    "cafe\n##s\nhello\nworld\n\xe4\xb8\x80\n!\ne\n##\xc3\xa9\n";

WordPieceTokenizer small_tokenizer(WordPieceOptions options = {}) {
  return WordPieceTokenizer(Vocab::parse(kVocab, "small vocab"), options);
}

}  // namespace

TEST_CASE("greedy longest-match-first WordPiece", "[tokenizer][wordpiece]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  CHECK(tokenizer.tokenize("unaffable") == Ids{9, 7});  // "unaff" beats "un", then "##able"
  CHECK(tokenizer.tokenize("una") == Ids{5, 8});
  CHECK(tokenizer.tokenize("UnAffAble") == Ids{9, 7});  // lower-cased first
  CHECK(tokenizer.tokenize("cafes, hello!") == Ids{11, 12, 10, 13, 16});
  CHECK(tokenizer.tokenize("CAFÉ") == Ids{11});                            // accent stripped
  CHECK(tokenizer.tokenize("hello\xe4\xb8\x80world") == Ids{13, 15, 14});  // CJK is a word of its own
}

TEST_CASE("a word that cannot be covered is one [UNK], whatever matched before", "[tokenizer][wordpiece]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  CHECK(tokenizer.tokenize("unx") == Ids{1});
  CHECK(tokenizer.tokenize("xun hello") == Ids{1, 13});
  CHECK(tokenizer.tokenize("unaffablez") == Ids{1});
}

TEST_CASE("words over max_input_chars_per_word characters are [UNK]", "[tokenizer][wordpiece]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  const std::string at_limit = "un" + std::string(98, 'a');  // un ##a x98: 100 characters
  CHECK(tokenizer.tokenize(at_limit).size() == 99);
  CHECK(tokenizer.tokenize(at_limit + "a") == Ids{1});
  // Characters are counted after normalization: "un" and 98 x "a" + U+0301 are 100 characters
  // once the accents are stripped, not 198.
  std::string accented = "un";
  for (int i = 0; i < 98; ++i) accented += "a\xcc\x81";
  CHECK(tokenizer.tokenize(accented).size() == 99);
  CHECK(tokenizer.tokenize(accented + "a\xcc\x81") == Ids{1});
  WordPieceOptions short_words;
  short_words.max_input_chars_per_word = 4;
  const WordPieceTokenizer strict = small_tokenizer(short_words);
  CHECK(strict.tokenize("unaa") == Ids{5, 8, 8});
  CHECK(strict.tokenize("unaaa") == Ids{1});
}

TEST_CASE("the cased normalizer keeps case and accents", "[tokenizer][wordpiece]") {
  WordPieceOptions cased;
  cased.normalizer.lowercase = false;
  const WordPieceTokenizer tokenizer = small_tokenizer(cased);
  CHECK(tokenizer.tokenize("Hello hello") == Ids{1, 13});
  CHECK(tokenizer.tokenize("e\xc3\xa9") == Ids{17, 18});  // "é" kept: e ##é
  WordPieceOptions lower_only;
  lower_only.normalizer.strip_accents = false;
  CHECK(small_tokenizer(lower_only).tokenize("E\xc3\x89") == Ids{17, 18});  // lower-cased, accent kept
}

TEST_CASE("special tokens written in the text become their ids", "[tokenizer][wordpiece]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  CHECK(tokenizer.tokenize("hello[SEP]world") == Ids{13, 3, 14});
  CHECK(tokenizer.tokenize("[CLS][MASK] [PAD][UNK]") == Ids{2, 4, 0, 1});
  CHECK(tokenizer.tokenize("[sep]") == Ids{1, 1, 1});  // not special: [ sep ] with '[' unknown
  CHECK(tokenizer.tokenize("[[SEP]") == Ids{1, 3});
  WordPieceOptions split;
  split.split_special_tokens = true;
  CHECK(small_tokenizer(split).tokenize("hello[SEP]") == Ids{13, 1, 1, 1});
}

TEST_CASE("encode adds [CLS] and [SEP] and truncates to max_length", "[tokenizer][wordpiece]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  const Encoding encoding = tokenizer.encode("hello world");
  CHECK(encoding.input_ids == Ids{2, 13, 14, 3});
  CHECK(encoding.token_type_ids == Ids{0, 0, 0, 0});
  CHECK(encoding.attention_mask == Ids{1, 1, 1, 1});
  CHECK(tokenizer.encode("").input_ids == Ids{2, 3});
  CHECK(tokenizer.encode("hello world hello", 4).input_ids == Ids{2, 13, 14, 3});
  CHECK(tokenizer.encode("hello world", 2).input_ids == Ids{2, 3});
  CHECK(tokenizer.encode(std::string(2000, '!'), stile::kNoTruncation).size() == 2002);
  CHECK(tokenizer.encode(std::string(2000, '!')).size() == 512);  // the default max_length
  CHECK_THROWS_WITH(tokenizer.encode("x", 1), Contains("max_length"));
  WordPieceOptions too_short;
  too_short.max_length = 1;
  CHECK_THROWS_WITH(small_tokenizer(too_short), Contains("max_length"));
}

TEST_CASE("encode_pair: type ids and longest-first truncation", "[tokenizer][wordpiece]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  const Encoding pair = tokenizer.encode_pair("hello", "world!");
  CHECK(pair.input_ids == Ids{2, 13, 3, 14, 16, 3});
  CHECK(pair.token_type_ids == Ids{0, 0, 0, 1, 1, 1});
  CHECK(pair.attention_mask == Ids{1, 1, 1, 1, 1, 1});
  const auto lengths = [&](const std::string& a, const std::string& b, std::size_t max_length) {
    const Encoding e = tokenizer.encode_pair(a, b, max_length);
    std::size_t first = 0;
    for (const std::int32_t type : e.token_type_ids) first += type == 0;
    return std::array<std::size_t, 2>{first - 2, e.size() - first - 1};
  };
  const auto words = [](std::size_t n) {
    std::string text;
    for (std::size_t i = 0; i < n; ++i) text += "! ";
    return text;
  };
  // The same table as tokenizers' truncate_encodings_longest_first test (budget 7 = 10 - 3).
  CHECK(lengths(words(2), words(8), 10) == std::array<std::size_t, 2>{2, 5});
  CHECK(lengths(words(4), words(4), 10) == std::array<std::size_t, 2>{3, 4});
  CHECK(lengths(words(8), words(2), 10) == std::array<std::size_t, 2>{5, 2});
  CHECK(lengths(words(8), words(4), 10) == std::array<std::size_t, 2>{4, 3});
  CHECK(lengths(words(8), words(8), 10) == std::array<std::size_t, 2>{3, 4});
  CHECK(lengths(words(0), words(8), 10) == std::array<std::size_t, 2>{0, 7});
  CHECK(lengths(words(8), words(8), 3) == std::array<std::size_t, 2>{0, 0});
  CHECK_THROWS_WITH(tokenizer.encode_pair("a", "b", 2), Contains("max_length"));
}

TEST_CASE("a batch is padded to its longest encoding", "[tokenizer][wordpiece]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  const std::vector<std::string> texts = {"hello", "hello world !", ""};
  const std::vector<Encoding> batch = tokenizer.encode_batch(texts);
  REQUIRE(batch.size() == 3);
  CHECK(batch[0].input_ids == Ids{2, 13, 3, 0, 0});
  CHECK(batch[0].attention_mask == Ids{1, 1, 1, 0, 0});
  CHECK(batch[0].token_type_ids == Ids{0, 0, 0, 0, 0});
  CHECK(batch[1].input_ids == Ids{2, 13, 14, 16, 3});
  CHECK(batch[2].input_ids == Ids{2, 3, 0, 0, 0});
  const std::array<std::string_view, 2> views = {"hello", "world world"};
  const std::vector<Encoding> unpadded = tokenizer.encode_batch(views, Padding::none);
  CHECK(unpadded[0].size() == 3);
  CHECK(unpadded[1].size() == 4);
  CHECK(tokenizer.encode_batch(std::vector<std::string>{}).empty());
}

TEST_CASE("ill-formed UTF-8 is dropped by default, or an error naming the offset", "[tokenizer][utf8]") {
  const WordPieceTokenizer tokenizer = small_tokenizer();
  CHECK(tokenizer.tokenize("hel\xfflo") == Ids{13});      // dropped without splitting the word
  CHECK(tokenizer.tokenize("hello\xe4\xb8") == Ids{13});  // a truncated character at the end
  CHECK(tokenizer.tokenize("\xe4\xb8hello") == Ids{13});  // ... and at the start: "h" survives
  WordPieceOptions strict;
  strict.invalid_utf8 = InvalidUtf8::error;
  const WordPieceTokenizer checking = small_tokenizer(strict);
  CHECK(checking.tokenize("hello \xe4\xb8\x80") == Ids{13, 15});
  CHECK_THROWS_WITH(checking.encode("hello\xff"), Contains("not valid UTF-8") && Contains("offset 5"));
  CHECK_THROWS_WITH(checking.encode_pair("ok", "\xc0\xaf"), Contains("second text") && Contains("offset 0"));
  CHECK_THROWS_AS(checking.tokenize("\xed\xa0\x80"), stile::Error);  // an encoded surrogate
}

TEST_CASE("the UTF-8 decoder round-trips every scalar value and resynchronises", "[tokenizer][utf8]") {
  namespace utf8 = stile::utf8;
  for (char32_t c = 0; c < 0x110000; c += (c < 0x3000 ? 1 : 97)) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string bytes;
    utf8::append(bytes, c);
    const utf8::DecodedChar decoded = utf8::decode(bytes, 0);
    REQUIRE(decoded.valid);
    REQUIRE(decoded.code_point == c);
    REQUIRE(decoded.size == bytes.size());
    REQUIRE(utf8::find_invalid(bytes) == std::string_view::npos);
  }
  // Maximal subparts: a truncated sequence is one U+FFFD and the next character survives.
  CHECK(utf8::decode("\xe2\x82"
                     "a",
                     0)
            .size == 2);
  CHECK(utf8::decode("\xf0\x9f\x99"
                     "x",
                     0)
            .size == 3);
  CHECK(utf8::decode("\xed\xa0\x80", 0).size == 1);      // surrogate: ED is followed by 80..9F only
  CHECK(utf8::decode("\xf4\x90\x80\x80", 0).size == 1);  // above U+10FFFF
  CHECK(utf8::decode("\xc0\xaf", 0).size == 1);          // overlong
  CHECK(utf8::decode("\xe0\x80\xaf", 0).size == 1);
  CHECK(utf8::find_invalid("ok \xc3\xa9 \xc3") == 6);
  std::string surrogate_out;
  utf8::append(surrogate_out, 0xD800);
  CHECK(surrogate_out == "\xef\xbf\xbd");
  // Random bytes: decoding always advances, stays in bounds and never yields an invalid scalar.
  std::mt19937 random(7);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(static_cast<std::size_t>(random() % 16), '\0');
    for (char& b : bytes) b = static_cast<char>(random() & 0xFF);
    for (std::size_t at = 0; at < bytes.size();) {
      const utf8::DecodedChar decoded = utf8::decode(bytes, at);
      REQUIRE(decoded.size >= 1);
      REQUIRE(at + decoded.size <= bytes.size());
      REQUIRE(decoded.code_point <= 0x10FFFF);
      REQUIRE_FALSE((decoded.code_point >= 0xD800 && decoded.code_point <= 0xDFFF));
      at += decoded.size;
    }
  }
}
