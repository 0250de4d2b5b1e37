// The default model's tokenizer against Hugging Face's fast BertTokenizer: exact id equality on
// every golden written by scripts/make_tokenizer_goldens.py, for each of stile's three ways to
// read it: the tokenizer.json pipeline on the model's tokenizer.json (what embed uses), the same
// pipeline built from its vocab.txt, and the vocab.txt WordPieceTokenizer (what the shard store
// and the engine use). All three equal the reference, so all three give the same ids.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "golden_files.hpp"
#include "stile/text/tokenizer.hpp"
#include "stile/text/wordpiece.hpp"

using stile::Encoding;
using namespace stile_test;

namespace {

// One of the tokenizers under test, as encode functions with a max_length (tokens, special
// tokens included; the reference truncates at the checkpoint's 512 unless a golden says less).
struct UnderTest {
  std::string name;
  std::function<Encoding(std::string_view, std::size_t)> encode;
  std::function<Encoding(std::string_view, std::string_view, std::size_t)> encode_pair;
};

UnderTest pipeline(std::string name, const stile::Tokenizer& base) {
  const auto truncated = [base](std::size_t max_length) {
    stile::Tokenizer t = base;
    t.set_truncation(stile::Truncation{.max_length = max_length});
    return t;
  };
  return {std::move(name), [truncated](std::string_view text, std::size_t n) { return truncated(n).encode(text); },
          [truncated](std::string_view a, std::string_view b, std::size_t n) { return truncated(n).encode_pair(a, b); }};
}

// The model's tokenizers (uncased, or cased: do_lower_case=False), or none (with a warning) when
// the model has not been fetched.
std::vector<UnderTest> model_tokenizers(bool cased = false) {
  if (!std::filesystem::exists(model_vocab())) {
    WARN("SKIPPED: " << model_vocab().string()
                     << " is missing; run scripts/fetch-model (scripts/test does) to compare against the goldens");
    return {};
  }
  stile::BertNormalizerOptions normalizer;
  normalizer.lowercase = !cased;
  std::vector<UnderTest> all;
  if (!cased) {  // the model's tokenizer.json is the uncased one
    all.push_back(pipeline("tokenizer.json", stile::Tokenizer::from_file(model_vocab().parent_path() / "tokenizer.json")));
  }
  all.push_back(pipeline("vocab.txt pipeline", stile::Tokenizer::from_vocab(stile::Vocab::load(model_vocab()), normalizer)));
  const stile::WordPieceTokenizer legacy =
      stile::WordPieceTokenizer::load(model_vocab(), stile::WordPieceOptions{.normalizer = normalizer});
  all.push_back({"vocab.txt WordPieceTokenizer",
                 [legacy](std::string_view text, std::size_t n) { return legacy.encode(text, n); },
                 [legacy](std::string_view a, std::string_view b, std::size_t n) { return legacy.encode_pair(a, b, n); }});
  return all;
}

std::vector<std::string> hard_cases() {
  std::vector<std::string> cases;
  for (const std::string& line : read_lines(data_dir() / "hard_cases.txt")) cases.push_back(parse_json_string(line));
  return cases;
}

void check_cases(const UnderTest& tokenizer, const std::vector<std::string>& texts,
                 const std::filesystem::path& ids_file, const char* what) {
  const std::vector<std::string> expected = read_lines(ids_file);
  REQUIRE(expected.size() == texts.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::vector<std::int32_t> ids = tokenizer.encode(texts[i], 512).input_ids;
    const std::vector<std::int32_t> want = parse_ids(expected[i]);
    INFO(tokenizer.name << ", " << what << " #" << i << ": \"" << escaped(texts[i]) << "\"");
    CHECK(ids == want);
    if (ids != want) ++mismatches;
  }
  WARN(tokenizer.name << ": compared " << texts.size() << " " << what << " with the reference: " << mismatches
                      << " mismatches");
}

}  // namespace

TEST_CASE("hard cases give the reference ids", "[tokenizer][golden]") {
  const std::vector<std::string> cases = hard_cases();
  CHECK(cases.size() >= 300);
  for (const UnderTest& tokenizer : model_tokenizers()) {
    check_cases(tokenizer, cases, data_dir() / "hard_cases.ids", "hard cases");
  }
}

TEST_CASE("hard cases with the cased normalizer give the reference ids", "[tokenizer][golden]") {
  // do_lower_case=False: no lower-casing, no accent stripping
  for (const UnderTest& tokenizer : model_tokenizers(/*cased=*/true)) {
    check_cases(tokenizer, hard_cases(), data_dir() / "hard_cases_cased.ids", "hard cases (cased)");
  }
}

TEST_CASE("every SST-2 dev sentence gives the reference ids", "[tokenizer][golden]") {
  const std::filesystem::path dev = std::filesystem::path(STILE_SHARED_DIR) / "data" / "sst2" / "dev.tsv";
  if (!std::filesystem::exists(dev)) {
    WARN("SKIPPED: " << dev.string() << " is missing");
    return;
  }
  std::vector<std::string> lines = read_lines(dev);
  REQUIRE(!lines.empty());
  REQUIRE(lines.front() == "sentence\tlabel");
  std::vector<std::string> sentences;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    if (!lines[i].empty()) sentences.push_back(split(lines[i], '\t').at(0));
  }
  CHECK(sentences.size() == 872);
  for (const UnderTest& tokenizer : model_tokenizers()) {
    check_cases(tokenizer, sentences, data_dir() / "sst2_dev.ids", "SST-2 dev sentences");
  }
}

TEST_CASE("sentence pairs give the reference ids and type ids, truncated longest-first", "[tokenizer][golden]") {
  for (const UnderTest& tokenizer : model_tokenizers()) {
    std::size_t compared = 0;
    for (const std::string& line : read_lines(data_dir() / "pairs.tsv")) {
      const std::vector<std::string> fields = split(line, '\t');
      REQUIRE(fields.size() == 5);
      const std::size_t max_length = std::stoul(fields[0]);
      const std::string a = parse_json_string(fields[1]);
      const std::string b = parse_json_string(fields[2]);
      INFO(tokenizer.name << ", max_length " << max_length << ": \"" << escaped(a) << "\" / \"" << escaped(b) << "\"");
      const Encoding encoding = tokenizer.encode_pair(a, b, max_length);
      CHECK(encoding.input_ids == parse_ids(fields[3]));
      CHECK(encoding.token_type_ids == parse_ids(fields[4]));
      CHECK(encoding.attention_mask == std::vector<std::int32_t>(encoding.size(), 1));
      ++compared;
    }
    CHECK(compared >= 100);
    WARN(tokenizer.name << ": compared " << compared << " sentence pairs with the reference");
  }
}

TEST_CASE("single texts truncated to small lengths give the reference ids", "[tokenizer][golden]") {
  for (const UnderTest& tokenizer : model_tokenizers()) {
    std::size_t compared = 0;
    for (const std::string& line : read_lines(data_dir() / "truncation.tsv")) {
      const std::vector<std::string> fields = split(line, '\t');
      REQUIRE(fields.size() == 3);
      const std::size_t max_length = std::stoul(fields[0]);
      const std::string text = parse_json_string(fields[1]);
      INFO(tokenizer.name << ", max_length " << max_length << ": \"" << escaped(text) << "\"");
      const Encoding encoding = tokenizer.encode(text, max_length);
      CHECK(encoding.input_ids == parse_ids(fields[2]));
      CHECK(encoding.size() <= max_length);
      ++compared;
    }
    CHECK(compared >= 100);
    WARN(tokenizer.name << ": compared " << compared << " truncated texts with the reference");
  }
}

TEST_CASE("ill-formed UTF-8 reads as Python's errors=\"replace\" then cleaned", "[tokenizer][golden][utf8]") {
  for (const UnderTest& tokenizer : model_tokenizers()) {
    std::size_t compared = 0;
    for (const std::string& line : read_lines(data_dir() / "invalid_utf8.tsv")) {
      const std::vector<std::string> fields = split(line, '\t');
      REQUIRE(fields.size() == 2);
      const std::string bytes = from_hex(fields[0]);
      INFO(tokenizer.name << ", bytes " << fields[0]);
      CHECK(tokenizer.encode(bytes, 512).input_ids == parse_ids(fields[1]));
      ++compared;
    }
    CHECK(compared >= 30);
    WARN(tokenizer.name << ": compared " << compared << " ill-formed byte strings with the reference");
  }
}
