// stile's tokenizer.json pipeline against Hugging Face's tokenizers: every golden case
// of every committed tokenizer (tests/tokenizer/data/json, written by
// scripts/make_tokenizer_json_goldens.py) and of all-MiniLM-L6-v2's own tokenizer.json gives the
// reference's ids, type ids, byte offsets, special tokens mask and overflowing windows, and an
// error where the reference raises; malformed files give errors naming the file and the field.
// The full 100,000-string sweep is scripts/tokenizer-parity.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/text/tokenizer.hpp"

using nlohmann::json;

namespace {

const std::filesystem::path kData = std::filesystem::path(STILE_TEST_DATA_DIR) / "json";
const std::filesystem::path kModelTokenizer = std::filesystem::path(STILE_MODEL_DIR) / "tokenizer.json";

const char* const kCommitted[] = {"bert_wordpiece", "roberta_bpe",    "unigram",       "xlm_roberta",
                                  "albert",         "deberta_v3",     "mix_wordpiece", "mix_bpe_suffix",
                                  "mix_bpe_bytes",  "mix_bytelevel",  "mix_unigram_bytes"};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string from_hex(const std::string& hex) {
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

// The golden's fields of an encoding, as the script writes them.
json fields(const stile::Encoding& e) {
  json offsets = json::array();
  for (const stile::TokenOffsets& o : e.offsets) offsets.push_back({o.begin, o.end});
  json special = json::array();
  for (const std::uint8_t m : e.special_tokens_mask) special.push_back(static_cast<int>(m));
  json overflowing = json::array();
  for (const stile::Encoding& w : e.overflowing) overflowing.push_back(fields(w));
  return {{"ids", e.input_ids},
          {"type_ids", e.token_type_ids},
          {"offsets", offsets},
          {"special_tokens_mask", special},
          {"overflowing", overflowing}};
}

stile::TruncationStrategy strategy(const std::string& name) {
  if (name == "only_first") return stile::TruncationStrategy::only_first;
  if (name == "only_second") return stile::TruncationStrategy::only_second;
  return stile::TruncationStrategy::longest_first;
}

// stile's answer to one golden case: the fields, or {"error": message}.
json answer(stile::Tokenizer& tokenizer, const json& c) {
  try {
    tokenizer.set_truncation(std::nullopt);
    if (!c.at("truncation").is_null()) {
      const json& t = c.at("truncation");
      tokenizer.set_truncation(stile::Truncation{t.at("max_length").get<std::size_t>(), t.at("stride").get<std::size_t>(),
                                                 strategy(t.at("strategy").get<std::string>())});
    }
    const stile::TokenizeOptions options{.add_special_tokens = c.at("add_special_tokens").get<bool>()};
    const std::string text = from_hex(c.at("text").get<std::string>());
    if (c.at("pair").is_null()) return fields(tokenizer.encode(text, options));
    return fields(tokenizer.encode_pair(text, from_hex(c.at("pair").get<std::string>()), options));
  } catch (const stile::Error& error) {
    return {{"error", error.what()}};
  }
}

std::string shown(const json& c) {
  std::ostringstream s;
  s << "text " << json(from_hex(c.at("text").get<std::string>())).dump(-1, ' ', true, json::error_handler_t::replace);
  if (!c.at("pair").is_null()) {
    s << " pair " << json(from_hex(c.at("pair").get<std::string>())).dump(-1, ' ', true, json::error_handler_t::replace);
  }
  s << " add_special_tokens " << c.at("add_special_tokens") << " truncation " << c.at("truncation");
  return s.str();
}

// Every case of a golden file: the number that differ (the first few are printed).
void check_golden(const std::filesystem::path& tokenizer_file, const std::filesystem::path& golden) {
  stile::Tokenizer tokenizer = stile::Tokenizer::from_file(tokenizer_file);
  std::ifstream in(golden);
  REQUIRE(in);
  std::size_t cases = 0;
  std::size_t errors = 0;
  std::size_t differ = 0;
  std::string line;
  while (std::getline(in, line)) {
    const json expected = json::parse(line);
    const json got = answer(tokenizer, expected);
    ++cases;
    bool same = true;
    if (expected.contains("error")) {
      ++errors;
      same = got.contains("error");
    } else if (got.contains("error")) {
      same = false;
    } else {
      for (const char* field : {"ids", "type_ids", "offsets", "special_tokens_mask", "overflowing"}) {
        same = same && got.at(field) == expected.at(field);
      }
    }
    if (!same && ++differ <= 3) {
      json want = expected;
      for (const char* k : {"text", "pair", "add_special_tokens", "truncation"}) want.erase(k);
      UNSCOPED_INFO("case " << cases << ": " << shown(expected) << "\n  reference: " << want.dump().substr(0, 600)
                            << "\n  stile:     " << got.dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 600));
    }
  }
  INFO(golden.filename().string() << ": " << differ << " of " << cases << " cases differ (" << errors
                                  << " are errors in the reference)");
  CHECK(cases >= 300);
  CHECK(differ == 0);
}

// A committed tokenizer.json as JSON, to break in one place.
json committed(const char* name) { return json::parse(read_file(kData / (std::string(name) + ".tokenizer.json"))); }

// from_json of a broken file: a stile::Error whose message names the file and each of `names`.
void check_refused(const json& j, std::initializer_list<std::string_view> names) {
  const std::string text = j.dump();
  try {
    (void)stile::Tokenizer::from_json(text, "broken/tokenizer.json");
    FAIL("read without an error: " << text.substr(0, 300));
  } catch (const stile::Error& error) {
    const std::string message = error.what();
    INFO(message);
    CHECK(message.find("broken/tokenizer.json") != std::string::npos);
    for (const std::string_view name : names) CHECK(message.find(name) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("tokenizer.json: every golden case of every committed tokenizer equals the reference") {
  for (const char* name : kCommitted) {
    DYNAMIC_SECTION(name) {
      check_golden(kData / (std::string(name) + ".tokenizer.json"), kData / (std::string(name) + ".golden.jsonl"));
    }
  }
}

TEST_CASE("tokenizer.json: all-MiniLM-L6-v2's own tokenizer.json equals the reference on its goldens") {
  if (!std::filesystem::exists(kModelTokenizer)) {
    WARN("skipped: " << kModelTokenizer << " is missing (scripts/fetch-model)");
    return;
  }
  check_golden(kModelTokenizer, kData / "minilm.golden.jsonl");
}

TEST_CASE("tokenizer.json: the committed tokenizers' vocabularies and special tokens") {
  const stile::Tokenizer roberta = stile::Tokenizer::from_file(kData / "roberta_bpe.tokenizer.json");
  CHECK(roberta.token_to_id("<s>") == 0);
  CHECK(roberta.token_to_id("</s>") == 2);
  REQUIRE(roberta.token_to_id("<mask>").has_value());
  CHECK(roberta.id_to_token(*roberta.token_to_id("<mask>")) == "<mask>");
  CHECK(roberta.vocab_size() == 3001);
  const stile::Tokenizer xlmr = stile::Tokenizer::from_file(kData / "xlm_roberta.tokenizer.json");
  CHECK(xlmr.token_to_id("<unk>") == 3);
  CHECK(xlmr.token_to_id("<mask>") == 3001);
  CHECK_FALSE(xlmr.token_to_id("no such token here").has_value());
}

TEST_CASE("tokenizer.json: a vocabulary whose ids have holes: vocab_size() is one past the largest id") {
  // The reference reads such a vocabulary (its get_vocab_size() counts the 3 tokens); an embedding
  // table for it needs 6 rows, as the unknown token's id is 5.
  const stile::Tokenizer t = stile::Tokenizer::from_json(
      R"({"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},)"
      R"("post_processor":null,"decoder":null,"model":{"type":"WordLevel","unk_token":"<unk>",)"
      R"("vocab":{"a":1,"b":2,"<unk>":5}}})",
      "holes/tokenizer.json");
  CHECK(t.vocab_size() == 6);
  const stile::Encoding e = t.encode("a b c");
  CHECK(e.input_ids == std::vector<std::int32_t>{1, 2, 5});
}

TEST_CASE("tokenizer.json: malformed files are refused naming the file and the field") {
  SECTION("not JSON") {
    CHECK_THROWS_WITH(stile::Tokenizer::from_json("{\"model\": ", "broken/tokenizer.json"),
                      Catch::Contains("broken/tokenizer.json"));
    CHECK_THROWS_AS(stile::Tokenizer::from_json("", "broken/tokenizer.json"), stile::Error);
    CHECK_THROWS_AS(stile::Tokenizer::from_json("[1, 2, 3]", "broken/tokenizer.json"), stile::Error);
  }
  SECTION("missing model or vocab") {
    json j = committed("bert_wordpiece");
    j.erase("model");
    check_refused(j, {"model"});
    j = committed("bert_wordpiece");
    j["model"].erase("vocab");
    check_refused(j, {"model", "vocab"});
    j = committed("unigram");
    j["model"].erase("vocab");
    check_refused(j, {"model", "vocab"});
  }
  SECTION("wrong types") {
    json j = committed("bert_wordpiece");
    j["model"]["vocab"] = "not a map";
    check_refused(j, {"model", "vocab"});
    j = committed("bert_wordpiece");
    j["normalizer"]["lowercase"] = "yes";
    check_refused(j, {"normalizer", "lowercase"});
    j = committed("roberta_bpe");
    j["model"]["merges"] = 7;
    check_refused(j, {"model", "merges"});
    j = committed("unigram");
    j["model"]["vocab"][5] = json::array({"piece", "not a score"});
    check_refused(j, {"model", "vocab"});
    j = committed("mix_wordpiece");
    j["added_tokens"][0]["special"] = "true";
    check_refused(j, {"added_tokens", "special"});
    j = committed("mix_wordpiece");
    j["pre_tokenizer"]["pretokenizers"][1]["individual_digits"] = 1;
    check_refused(j, {"pre_tokenizer", "individual_digits"});
    j = committed("unigram");
    j["post_processor"]["single"] = "<s> $A </s>";
    check_refused(j, {"post_processor", "single"});
  }
  SECTION("merges naming unknown tokens") {
    json j = committed("roberta_bpe");
    j["model"]["merges"][0] = json::array({"zzzq", "qqqz"});
    check_refused(j, {"model", "merges"});
    j = committed("mix_bpe_suffix");
    j["model"]["merges"].push_back(json::array({"th", "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"}));
    check_refused(j, {"model", "merges"});
  }
  SECTION("a corrupt precompiled charsmap") {
    json j = committed("xlm_roberta");
    json& precompiled = j["normalizer"]["normalizers"][0];
    REQUIRE(precompiled["type"] == "Precompiled");
    const std::string blob = precompiled["precompiled_charsmap"].get<std::string>();
    precompiled["precompiled_charsmap"] = "!!not base64!!";
    check_refused(j, {"normalizer", "precompiled_charsmap"});
    precompiled["precompiled_charsmap"] = blob.substr(0, 16);  // a trie size beyond the blob
    check_refused(j, {"normalizer", "precompiled_charsmap"});
    precompiled["precompiled_charsmap"] = "AAAA";
    check_refused(j, {"normalizer", "precompiled_charsmap"});
  }
  SECTION("absurd sizes and ids") {
    json j = committed("mix_wordpiece");
    j["added_tokens"][6]["id"] = 1LL << 33;  // not a u32 (the reference refuses it; it ignores a u32 id)
    check_refused(j, {"added_tokens", "id"});
    j = committed("bert_wordpiece");
    j["model"]["vocab"]["[UNK]"] = -5;
    check_refused(j, {"model", "vocab"});
    j = committed("unigram");
    j["model"]["unk_id"] = 1u << 30;
    check_refused(j, {"model", "unk_id"});
    j = committed("bert_wordpiece");
    j["truncation"] = {{"max_length", -1}, {"stride", 0}, {"strategy", "LongestFirst"}, {"direction", "Right"}};
    check_refused(j, {"truncation", "max_length"});
  }
  SECTION("unknown and unsupported component types") {
    json j = committed("bert_wordpiece");
    j["normalizer"] = {{"type", "UnicodeScripts"}};
    check_refused(j, {"normalizer", "UnicodeScripts"});
    j = committed("bert_wordpiece");
    j["pre_tokenizer"] = {{"type", "NoSuchPreTokenizer"}};
    check_refused(j, {"pre_tokenizer", "NoSuchPreTokenizer"});
    j = committed("bert_wordpiece");
    j["model"]["type"] = "NoSuchModel";
    check_refused(j, {"model", "NoSuchModel"});
    j = committed("bert_wordpiece");
    j["post_processor"] = {{"type", "NoSuchProcessor"}};
    check_refused(j, {"post_processor", "NoSuchProcessor"});
    j = committed("roberta_bpe");
    j["model"]["dropout"] = 0.1;
    check_refused(j, {"model", "dropout"});
  }
}
