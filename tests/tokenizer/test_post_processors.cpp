// The added vocabulary, truncation and post-processors of tokenizer.json against the reference
// (tokenizers 0.23.3): fixtures from scripts/make_post_processor_fixtures.py under data/post/,
// each a small tokenizer.json (WordLevel model) and the reference's encodings of texts and pairs,
// with and without special tokens, under truncation with strides and overflowing windows. The
// normalizer, pre-tokenizers and model here are small stand-ins (Lowercase on ASCII,
// WhitespaceSplit, ByteLevel on ASCII text, WordLevel), enough for the fixtures' texts.
// Then the readers' errors on malformed JSON.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/text/added_vocabulary.hpp"
#include "stile/text/post_processors.hpp"
#include "stile/text/truncation.hpp"
#include "stile/text/utf8.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;
using stile::Encoding;
using stile::TokenOffsets;
using namespace stile::tok;

namespace {

std::string to_utf8(std::u32string_view s) {
  std::string out;
  for (const char32_t c : s) stile::utf8::append(out, c);
  return out;
}

// WordLevel: one token per piece, [UNK] when the piece is not in the vocabulary.
class WordLevel final : public Model {
 public:
  WordLevel(const json& j) {
    for (auto it = j.at("vocab").begin(); it != j.at("vocab").end(); ++it) {
      const auto id = it.value().get<std::int32_t>();
      vocab_[it.key()] = id;
      by_id_[id] = it.key();
    }
    unk_ = vocab_.at(j.at("unk_token").get<std::string>());
  }
  void tokenize(std::u32string_view piece, std::vector<Token>& out) const override {
    const auto it = vocab_.find(to_utf8(piece));
    out.push_back({it == vocab_.end() ? unk_ : it->second, 0, static_cast<std::uint32_t>(piece.size())});
  }
  std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    const auto it = vocab_.find(std::string(token));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string_view> id_to_token(std::int32_t id) const override {
    const auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    return std::string_view(it->second);
  }
  std::size_t vocab_size() const override { return vocab_.size(); }
  std::optional<std::int32_t> unk_id() const override { return unk_; }
  std::string_view continuing_subword_prefix() const override { return {}; }
  std::size_t id_end() const override {
    std::size_t end = 0;
    for (const auto& entry : by_id_) end = std::max(end, static_cast<std::size_t>(entry.first) + 1);
    return end;
  }

 private:
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::int32_t, std::string> by_id_;
  std::int32_t unk_ = 0;
};

class AsciiLowercase final : public Normalizer {
 public:
  void normalize(NormalizedString& s) const override {
    s.map([](char32_t c) { return (c >= U'A' && c <= U'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ? c + 32 : c; });
  }
};

// GPT-2's byte to character map.
char32_t byte_char(unsigned b) {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256, 0);
    std::vector<bool> direct(256, false);
    for (unsigned c = '!'; c <= '~'; ++c) direct[c] = true;
    for (unsigned c = 0xA1; c <= 0xAC; ++c) direct[c] = true;
    for (unsigned c = 0xAE; c <= 0xFF; ++c) direct[c] = true;
    unsigned n = 0;
    for (unsigned c = 0; c < 256; ++c) t[c] = direct[c] ? c : 256 + n++;
    return t;
  }();
  return table[b];
}

bool is_letter(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_space(char32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// GPT-2's pattern on ASCII text (no contractions): ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
std::vector<PatternMatch> gpt2_matches(std::u32string_view t) {
  std::vector<PatternMatch> out;
  const auto cls = [](char32_t c) { return is_letter(c) ? 0 : is_digit(c) ? 1 : is_space(c) ? 3 : 2; };
  std::size_t i = 0;
  while (i < t.size()) {
    std::size_t j = i;
    if (t[i] == ' ' && i + 1 < t.size() && cls(t[i + 1]) != 3) {
      const int k = cls(t[i + 1]);
      j = i + 1;
      while (j < t.size() && cls(t[j]) == k) ++j;
    } else if (cls(t[i]) != 3) {
      const int k = cls(t[i]);
      while (j < t.size() && cls(t[j]) == k) ++j;
    } else {
      while (j < t.size() && cls(t[j]) == 3) ++j;
      if (j < t.size() && j - i >= 2)
        --j;  // \s+(?!\S): leave the last one for the next word
      else if (j < t.size())
        j = i + 1;
    }
    out.push_back({i, j, true});
    i = j;
  }
  if (out.empty()) out.push_back({0, 0, false});
  return out;
}

struct CaseTruncation {
  std::optional<stile::Truncation> truncation;
  TruncationDirection direction = TruncationDirection::right;
};

struct Pipeline {
  json tokenizer;
  std::unique_ptr<WordLevel> model;
  std::unique_ptr<Normalizer> normalizer;
  AddedVocabulary added;
  std::unique_ptr<const PostProcessor> processor;
  std::string pre;  // "ByteLevel" or "WhitespaceSplit"
  bool prefix_space = false;

  explicit Pipeline(const json& j) : tokenizer(j) {
    model = std::make_unique<WordLevel>(j.at("model"));
    if (!j.at("normalizer").is_null()) {
      REQUIRE(j.at("normalizer").at("type") == "Lowercase");
      normalizer = std::make_unique<AsciiLowercase>();
    }
    pre = j.at("pre_tokenizer").at("type").get<std::string>();
    if (pre == "ByteLevel") prefix_space = j.at("pre_tokenizer").at("add_prefix_space").get<bool>();
    const JsonPlace place{"fixture.json", ""};
    added = AddedVocabulary::read(j.at("added_tokens"), place / "added_tokens", *model, normalizer.get());
    processor = read_post_processor(j.at("post_processor"), place / "post_processor", *model, added);
  }

  Encoding encode_one(std::string_view text, std::int32_t type_id) const {
    PreTokenizedString p = added.extract_and_normalize(text, normalizer.get());
    if (pre == "WhitespaceSplit") {
      p.split([](std::size_t, NormalizedString&& s) {
        return s.split(find_char_matches(s.chars(), added_detail::is_white_space), SplitBehavior::removed);
      });
    } else {
      p.split([this](std::size_t, NormalizedString&& s) {
        if (prefix_space && !s.empty() && s.chars()[0] != ' ') s.prepend(U" ");
        auto pieces = s.split(gpt2_matches(s.chars()), SplitBehavior::isolated);
        for (NormalizedString& piece : pieces)
          piece.map([](char32_t c) { return byte_char(static_cast<unsigned>(c)); });
        return pieces;
      });
    }
    Encoding e;
    for (Split& split : p.splits()) {
      std::vector<Token> tokens;
      if (split.tokens) {
        tokens = *split.tokens;
      } else {
        model->tokenize(split.normalized.chars(), tokens);
      }
      for (const Token& t : tokens) {
        const Origin o = split.normalized.original_range(t.begin, t.end);
        e.input_ids.push_back(t.id);
        e.token_type_ids.push_back(type_id);
        e.offsets.push_back({o.begin, o.end});
      }
    }
    return e;
  }

  Encoding encode(const std::string& text, const std::optional<std::string>& pair, bool add,
                  const CaseTruncation& truncation, bool with_texts = true) const {
    Encoding first = encode_one(text, 0);
    std::optional<Encoding> second;
    if (pair) second = encode_one(*pair, 1);
    const std::optional<std::string_view> a = with_texts ? std::optional<std::string_view>(text) : std::nullopt;
    const std::optional<std::string_view> b =
        with_texts && pair ? std::optional<std::string_view>(*pair) : std::nullopt;
    return post_process(processor.get(), std::move(first), std::move(second), add, truncation.truncation, a, b,
                        truncation.direction);
  }
};

json read_fixture(const std::string& name) {
  std::ifstream in(std::string(STILE_TEST_DATA_DIR) + "/post/" + name + ".json");
  REQUIRE(in.good());
  return json::parse(in);
}

// Byte offsets into `text` as the reference's character offsets.
std::uint32_t char_offset(std::string_view text, std::uint32_t byte) {
  std::uint32_t chars = 0;
  for (std::size_t at = 0; at < byte && at < text.size();) {
    at += stile::utf8::decode(text, at).size;
    ++chars;
  }
  return chars;
}

CaseTruncation truncation_of(const json& j) {
  if (j.is_null()) return {};
  stile::Truncation t;
  t.max_length = j.at("max_length").get<std::size_t>();
  t.stride = j.at("stride").get<std::size_t>();
  const std::string s = j.at("strategy").get<std::string>();
  t.strategy = s == "longest_first" ? stile::TruncationStrategy::longest_first
               : s == "only_first"  ? stile::TruncationStrategy::only_first
                                    : stile::TruncationStrategy::only_second;
  return {t, j.at("direction") == "left" ? TruncationDirection::left : TruncationDirection::right};
}

// The differences between an encoding and the reference's, "" when none.
std::string compare(const Encoding& got, const json& want, const std::string& text, const std::string& pair,
                    const std::string& where) {
  std::ostringstream diff;
  const auto ids = want.at("ids").get<std::vector<std::int32_t>>();
  if (got.input_ids != ids) diff << where << " ids differ; ";
  if (got.token_type_ids != want.at("type_ids").get<std::vector<std::int32_t>>()) diff << where << " type ids differ; ";
  if (got.sequence_ids != want.at("sequence_ids").get<std::vector<std::int32_t>>()) {
    diff << where << " sequence ids differ; ";
  }
  std::vector<std::int32_t> mask(got.special_tokens_mask.begin(), got.special_tokens_mask.end());
  if (mask != want.at("special_tokens_mask").get<std::vector<std::int32_t>>())
    diff << where << " special mask differs; ";
  if (got.attention_mask != std::vector<std::int32_t>(ids.size(), 1)) diff << where << " attention mask; ";
  const json& offsets = want.at("offsets");
  if (got.offsets.size() != offsets.size()) {
    diff << where << " " << got.offsets.size() << " offsets, want " << offsets.size() << "; ";
  } else {
    for (std::size_t i = 0; i < offsets.size(); ++i) {
      // Pairs are ASCII in the fixtures (bytes are characters); a single text may not be.
      const std::uint32_t b = pair.empty() ? char_offset(text, got.offsets[i].begin) : got.offsets[i].begin;
      const std::uint32_t e = pair.empty() ? char_offset(text, got.offsets[i].end) : got.offsets[i].end;
      if (b != offsets[i][0].get<std::uint32_t>() || e != offsets[i][1].get<std::uint32_t>()) {
        diff << where << " offsets[" << i << "] (" << b << ", " << e << ") want " << offsets[i].dump() << "; ";
      }
    }
  }
  const json& overflowing = want.at("overflowing");
  if (got.overflowing.size() != overflowing.size()) {
    diff << where << " " << got.overflowing.size() << " overflowing, want " << overflowing.size() << "; ";
  } else {
    for (std::size_t i = 0; i < overflowing.size(); ++i) {
      diff << compare(got.overflowing[i], overflowing[i], text, pair,
                      where + ".overflowing[" + std::to_string(i) + "]");
    }
  }
  return diff.str();
}

// with_texts false: post_process without the texts (as PostProcessor::process), where the trims
// of lstrip/rstrip added tokens come from their offsets (the fixtures' whitespace is ASCII).
void check_fixture(const std::string& name, bool with_texts = true) {
  const json fixture = read_fixture(name);
  const Pipeline pipeline(fixture.at("tokenizer"));
  std::size_t matched = 0;
  std::size_t total = 0;
  for (const json& c : fixture.at("cases")) {
    const auto text = c.at("text").get<std::string>();
    const std::optional<std::string> pair =
        c.at("pair").is_null() ? std::nullopt : std::optional<std::string>(c.at("pair").get<std::string>());
    const bool add = c.at("add_special_tokens").get<bool>();
    const CaseTruncation truncation = truncation_of(c.at("truncation"));
    INFO(name << " case " << c.dump());
    ++total;
    if (c.contains("error")) {
      CHECK_THROWS_AS(pipeline.encode(text, pair, add, truncation, with_texts), stile::Error);
      ++matched;
      continue;
    }
    const Encoding got = pipeline.encode(text, pair, add, truncation, with_texts);
    const std::string diff = compare(got, c.at("expected"), text, pair.value_or(""), "");
    CHECK(diff == "");
    if (diff.empty()) ++matched;
  }
  INFO(name << ": " << matched << " of " << total << " cases as the reference");
  CHECK(matched == total);
  CHECK(total > 100);
}

JsonPlace place() { return {"tok.json", "post_processor"}; }

}  // namespace

TEST_CASE("added vocabulary as the reference: ids, single_word, lstrip/rstrip, normalized", "[tokenizer][post]") {
  check_fixture("added");
}

TEST_CASE("post-processors, truncation and overflowing as the reference", "[tokenizer][post]") {
  for (const char* name : {"post_bert", "post_roberta", "post_roberta_prefix", "post_roberta_notrim", "post_bytelevel",
                           "post_template", "post_template_odd", "post_sequence", "post_none"}) {
    SECTION(name) { check_fixture(name); }
  }
  SECTION("RoBERTa's lstrip <mask> without the texts") {
    check_fixture("post_roberta", false);
    check_fixture("post_bytelevel", false);
  }
}

TEST_CASE("word characters of single_word (probed table)", "[tokenizer][post]") {
  using added_detail::is_word_char;
  CHECK(is_word_char(U'a'));
  CHECK(is_word_char(U'_'));
  CHECK(is_word_char(U'7'));
  CHECK(is_word_char(U'\u00e9'));
  CHECK(is_word_char(U'\u4e2d'));
  CHECK(is_word_char(U'\u0301'));  // a mark
  CHECK(is_word_char(U'\u24b6'));  // circled A: So, but Alphabetic
  CHECK_FALSE(is_word_char(U' '));
  CHECK_FALSE(is_word_char(U'-'));
  CHECK_FALSE(is_word_char(U'\u3000'));
  CHECK_FALSE(is_word_char(U'\U0001F600'));
  CHECK(added_detail::is_white_space(U'\u3000'));
  CHECK_FALSE(added_detail::is_white_space(U'\u200b'));
}

TEST_CASE("truncation windows and errors", "[tokenizer][post]") {
  Encoding e;
  for (std::int32_t i = 0; i < 7; ++i) {
    e.input_ids.push_back(i);
    e.token_type_ids.push_back(0);
    e.offsets.push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + 1)});
  }
  SECTION("right, stride 1") {
    truncate_encoding(e, 3, 1, TruncationDirection::right);
    CHECK(e.input_ids == std::vector<std::int32_t>{0, 1, 2});
    REQUIRE(e.overflowing.size() == 2);
    CHECK(e.overflowing[0].input_ids == std::vector<std::int32_t>{2, 3, 4});
    CHECK(e.overflowing[1].input_ids == std::vector<std::int32_t>{4, 5, 6});
  }
  SECTION("left, stride 1") {
    truncate_encoding(e, 3, 1, TruncationDirection::left);
    CHECK(e.input_ids == std::vector<std::int32_t>{4, 5, 6});
    REQUIRE(e.overflowing.size() == 2);
    CHECK(e.overflowing[0].input_ids == std::vector<std::int32_t>{2, 3, 4});
    CHECK(e.overflowing[1].input_ids == std::vector<std::int32_t>{0, 1, 2});
  }
  SECTION("stride too long") {
    CHECK_THROWS_WITH(truncate_encoding(e, 3, 3, TruncationDirection::right), Contains("stride 3"));
  }
  SECTION("only_second on one text") {
    stile::Truncation t;
    t.max_length = 3;
    t.strategy = stile::TruncationStrategy::only_second;
    CHECK_THROWS_WITH(truncate_encodings(e, nullptr, t), Contains("second text"));
  }
  SECTION("max_length below the special tokens: the reference cuts nothing") {
    const WordLevel model(json::parse(R"({"vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2},"unk_token":"[UNK]"})"));
    const AddedVocabulary added;
    const auto bert = read_post_processor(
        json::parse(R"({"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]})"), place(), model, added);
    stile::Truncation t;
    t.max_length = 1;
    const Encoding out = post_process(bert.get(), e, std::nullopt, true, t);
    CHECK(out.size() == 9);
    CHECK(out.overflowing.empty());
  }
}

TEST_CASE("trim_offsets moves offsets by characters of the text, as the reference's character offsets",
          "[tokenizer][post]") {
  // The reference on "\ufffd" with ByteLevel(add_prefix_space) and trim_offsets: the prefix space
  // "Ġ" takes the first character's offsets (0, 1 character); its trailing space moves the end back
  // one character, to 0 (the three byte tokens keep the whole character).
  const WordLevel model(json::parse(R"({"vocab":{"[UNK]":0,"\u0120":1,"x":2},"unk_token":"[UNK]"})"));
  const AddedVocabulary added;
  const auto bytelevel = read_post_processor(
      json::parse(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})"), place(),
      model, added);
  Encoding e;
  e.input_ids = {1, 2, 2, 2};
  e.token_type_ids = {0, 0, 0, 0};
  e.offsets = {{0, 3}, {0, 3}, {0, 3}, {0, 3}};
  const std::string text = "\xEF\xBF\xBD";
  const Encoding with_text = post_process(bytelevel.get(), e, std::nullopt, true, std::nullopt, text);
  CHECK(with_text.offsets == std::vector<TokenOffsets>{{0, 0}, {0, 3}, {0, 3}, {0, 3}});
  // Without the text, by the bytes 'Ġ' stands for.
  const Encoding without = post_process(bytelevel.get(), e, std::nullopt, true, std::nullopt);
  CHECK(without.offsets == std::vector<TokenOffsets>{{0, 2}, {0, 3}, {0, 3}, {0, 3}});
}

TEST_CASE("an lstrip added token with a far id (the model's) is trimmed, with a small table", "[tokenizer][post]") {
  const WordLevel model(json::parse(R"({"vocab":{"[UNK]":0,"<s>":1,"</s>":2,"<m>":2000000000},"unk_token":"[UNK]"})"));
  const AddedVocabulary added = AddedVocabulary::read(
      json::parse(R"([{"id":2000000000,"content":"<m>","single_word":false,"lstrip":true,"rstrip":false,
                       "normalized":false,"special":true}])"),
      {"tok.json", "added_tokens"}, model, nullptr);
  REQUIRE(added.token_to_id("<m>") == 2000000000);
  const auto roberta = read_post_processor(json::parse(R"({"type":"RobertaProcessing","sep":["</s>",2],
      "cls":["<s>",1],"trim_offsets":true,"add_prefix_space":false})"),
                                           place(), model, added);
  const std::string text = "ab  <m>";
  const PreTokenizedString pieces = added.extract_and_normalize(text, nullptr);
  REQUIRE(pieces.splits().size() == 2);
  Encoding e;
  e.input_ids = {0, 2000000000};
  e.token_type_ids = {0, 0};
  e.offsets = {{0, 2}, {2, 7}};  // the added token took the two spaces on its left
  const Encoding out = post_process(roberta.get(), e, std::nullopt, true, std::nullopt, text);
  CHECK(out.offsets == std::vector<TokenOffsets>{{0, 0}, {0, 2}, {4, 7}, {0, 0}});
}

TEST_CASE("malformed post-processors and added tokens: errors name the field", "[tokenizer][post]") {
  const WordLevel model(json::parse(R"({"vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"a":3},"unk_token":"[UNK]"})"));
  const AddedVocabulary added;
  const auto read = [&](const char* text) { return read_post_processor(json::parse(text), place(), model, added); };
  CHECK(read("null") == nullptr);
  CHECK(read(R"({"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]})")->added_tokens(true) == 3);
  CHECK(read(R"({"type":"RobertaProcessing","sep":["[SEP]",2],"cls":["[CLS]",1],"trim_offsets":true,
                 "add_prefix_space":true})")
            ->added_tokens(true) == 4);
  // As the reference: a RobertaProcessing without its two flags is read as BertProcessing.
  CHECK(read(R"({"type":"RobertaProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]})")->added_tokens(true) == 3);
  CHECK_THROWS_WITH(read(R"({"type":"UnicodeScripts"})"), Contains("tok.json: post_processor.type") &&
                                                              Contains("UnicodeScripts") && Contains("not supported"));
  CHECK_THROWS_WITH(read(R"({"type":"BertProcessing","sep":["[SEP]",2]})"), Contains("missing \"cls\""));
  CHECK_THROWS_WITH(read(R"({"type":"BertProcessing","sep":["[SEP]",-2],"cls":["[CLS]",1]})"),
                    Contains("post_processor.sep[1]"));
  CHECK_THROWS_WITH(read(R"({"type":"BertProcessing","sep":["[SEP]",99],"cls":["[CLS]",1]})"),
                    Contains("post_processor.sep[1]") && Contains("99"));
  CHECK_THROWS_WITH(read(R"({"type":"ByteLevel","add_prefix_space":1,"trim_offsets":true})"),
                    Contains("post_processor.add_prefix_space"));
  const std::string ok_pieces =
      R"("single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
         "pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}])";
  CHECK(read((R"({"type":"TemplateProcessing",)" + ok_pieces +
              R"(,"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[1],"tokens":["[CLS]"]}}})")
                 .c_str())
            ->added_tokens(false) == 1);
  CHECK_THROWS_WITH(read((R"({"type":"TemplateProcessing",)" + ok_pieces + R"(,"special_tokens":{}})").c_str()),
                    Contains("post_processor.single[0].SpecialToken.id") && Contains("[CLS]"));
  CHECK_THROWS_WITH(read((R"({"type":"TemplateProcessing",)" + ok_pieces +
                          R"(,"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[77],"tokens":["[CLS]"]}}})")
                             .c_str()),
                    Contains("post_processor.special_tokens.[CLS].ids[0]") && Contains("77"));
  CHECK_THROWS_WITH(read((R"({"type":"TemplateProcessing",)" + ok_pieces +
                          R"(,"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[1,2],"tokens":["[CLS]"]}}})")
                             .c_str()),
                    Contains("post_processor.special_tokens.[CLS]") && Contains("as many"));
  CHECK_THROWS_WITH(read(R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"C","type_id":0}}],"pair":[],
                             "special_tokens":{}})"),
                    Contains("post_processor.single[0].Sequence.id") && Contains("\"C\""));
  CHECK_THROWS_WITH(read(R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"B","type_id":0}}],"pair":[],
                             "special_tokens":{}})"),
                    Contains("post_processor.single[0].Sequence.id") && Contains("$B"));
  CHECK_THROWS_WITH(read(R"({"type":"TemplateProcessing","single":"[CLS] $A","pair":[],"special_tokens":{}})"),
                    Contains("post_processor.single") && Contains("array of pieces"));
  CHECK_THROWS_WITH(read(R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":-1}}],"pair":[],
                             "special_tokens":{}})"),
                    Contains("post_processor.single[0].Sequence.type_id"));
  CHECK_THROWS_WITH(read(R"({"type":"Sequence","processors":[{"type":"ByteLevel","add_prefix_space":true}]})"),
                    Contains("post_processor.processors[0]") && Contains("missing \"trim_offsets\""));

  const auto read_added = [&](const char* text) {
    return AddedVocabulary::read(json::parse(text), {"tok.json", "added_tokens"}, model, nullptr);
  };
  const char* flags = R"("single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true)";
  const AddedVocabulary ok = read_added(
      (std::string(R"([{"id":5,"content":"<x>",)") + flags + R"(},{"id":1,"content":"[CLS]",)" + flags + "}]").c_str());
  // As the reference: ids come from the model's vocabulary, else after it (the JSON's id is not used).
  CHECK(ok.token_to_id("<x>") == 4);
  CHECK(ok.token_to_id("[CLS]") == 1);
  CHECK(ok.is_special(4));
  CHECK_THROWS_WITH(read_added((std::string(R"([{"id":"5","content":"<x>",)") + flags + "}]").c_str()),
                    Contains("added_tokens[0].id"));
  CHECK_THROWS_WITH(read_added((std::string(R"([{"id":5,"content":3,)") + flags + "}]").c_str()),
                    Contains("added_tokens[0].content"));
  CHECK_THROWS_WITH(read_added(R"([{"id":5,"content":"<x>","single_word":false}])"),
                    Contains("added_tokens[0]") && Contains("missing \"lstrip\""));
  CHECK_THROWS_WITH(read_added(R"([{"id":5,"content":"<x>","single_word":0,"lstrip":false,"rstrip":false,
                                   "normalized":false,"special":true}])"),
                    Contains("added_tokens[0].single_word"));
  CHECK_THROWS_WITH(read_added(R"({"a":1})"), Contains("added_tokens") && Contains("array"));
  const std::string long_content = R"([{"id":5,"content":")" + std::string(5000, 'a') + "\"," + flags + "}]";
  CHECK_THROWS_WITH(read_added(long_content.c_str()), Contains("added_tokens[0].content") && Contains("5000 bytes"));
}
