// The tokenizer.json models (wordpiece_model.hpp, bpe_model.hpp, unigram_model.hpp,
// wordlevel_model.hpp, model_reader.hpp): the reference's ids and offsets per piece on models it
// trained (tests/tokenizer/data/models, scripts/make_model_fixtures.py), its rules on hand-made
// vocabs (merge order and ties, unk fusing, byte fallback, Viterbi ties), and clear errors for
// malformed model JSON.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/text/model_reader.hpp"
#include "stile/text/utf8.hpp"

using Catch::Matchers::Contains;
using stile::tok::JsonPlace;
using stile::tok::Model;
using stile::tok::Token;

namespace {

const std::filesystem::path kDir = std::filesystem::path(STILE_TEST_DATA_DIR) / "models";
const JsonPlace kPlace{"tok.json", "model"};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream text;
  text << stream.rdbuf();
  return text.str();
}

std::u32string code_points(std::string_view text) {
  std::u32string out;
  for (std::size_t at = 0; at < text.size();) {
    const auto d = stile::utf8::decode(text, at);
    out.push_back(d.code_point);
    at += d.size;
  }
  return out;
}

std::unique_ptr<const Model> model_of(std::string_view json_text) {
  return stile::tok::read_model(nlohmann::json::parse(json_text), kPlace);
}

// "id:begin-end ..." for messages and comparisons.
std::string show(const std::vector<Token>& tokens) {
  std::string s;
  for (const Token& t : tokens)
    s += std::to_string(t.id) + ":" + std::to_string(t.begin) + "-" + std::to_string(t.end) + " ";
  return s;
}

std::vector<Token> tokenize(const Model& model, std::u32string_view piece) {
  std::vector<Token> out;
  model.tokenize(piece, out);
  return out;
}
std::string tokens_of(const Model& model, std::string_view piece) { return show(tokenize(model, code_points(piece))); }

struct Parity {
  std::size_t pieces = 0;
  std::size_t same = 0;
  std::vector<std::string> differences;
};

// Every case of NAME.cases.jsonl against the model read from NAME.json.
Parity check_fixture(const std::string& name) {
  const auto model = model_of(read_file(kDir / (name + ".json")));
  std::ifstream cases(kDir / (name + ".cases.jsonl"), std::ios::binary);
  REQUIRE(cases);
  Parity parity;
  for (std::string line; std::getline(cases, line);) {
    const auto c = nlohmann::json::parse(line);
    const std::string piece = c[0].get<std::string>();
    ++parity.pieces;
    std::string expected;
    std::string got;
    if (c[1].is_string()) {
      expected = "error";
      try {
        got = show(tokenize(*model, code_points(piece)));
      } catch (const stile::Error&) {
        got = "error";
      }
    } else {
      for (const auto& t : c[1]) {
        expected += std::to_string(t[0].get<int>()) + ":" + std::to_string(t[1].get<int>()) + "-" +
                    std::to_string(t[2].get<int>()) + " ";
      }
      got = show(tokenize(*model, code_points(piece)));
    }
    if (got == expected) {
      ++parity.same;
    } else if (parity.differences.size() < 5) {
      parity.differences.push_back(piece + " -> " + got + " expected " + expected);
    }
  }
  return parity;
}

}  // namespace

TEST_CASE("models trained by the reference give its ids and offsets on every fixture piece", "[tokenizer][models]") {
  for (const char* name :
       {"wordpiece", "wordpiece_short", "wordpiece_no_prefix", "bpe", "bpe_legacy_fuse", "bpe_ignore_merges",
        "bpe_no_unk", "bpe_byte_fallback", "bpe_affix", "bpe_affix_byte_fallback", "bpe_handmade", "unigram",
        "unigram_byte_fallback", "unigram_ties"}) {
    INFO(name);
    const Parity parity = check_fixture(name);
    for (const std::string& d : parity.differences) UNSCOPED_INFO(d);
    CHECK(parity.pieces > 550);
    CHECK(parity.same == parity.pieces);
  }
}

TEST_CASE("read_model dispatches on type, or on the fields as the reference's untagged reader", "[tokenizer][models]") {
  const auto wp = model_of(R"({"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
                                "max_input_chars_per_word":100,"vocab":{"[UNK]":0,"un":1,"##aff":2,"##able":3}})");
  CHECK(dynamic_cast<const stile::tok::WordPieceModel*>(wp.get()) != nullptr);
  CHECK(tokens_of(*wp, "unaffable") == "1:0-2 2:2-5 3:5-9 ");
  CHECK(tokens_of(*wp, "unaffablex") == "0:0-10 ");  // one unk for the whole word
  CHECK(wp->token_to_id("##aff") == 2);
  CHECK(wp->id_to_token(3) == "##able");
  CHECK_FALSE(wp->id_to_token(4));
  CHECK(wp->vocab_size() == 4);

  // No "type": merges make it BPE; WordPiece's fields WordPiece; {vocab, unk_token} WordLevel;
  // a list vocab Unigram.
  CHECK(dynamic_cast<const stile::tok::BpeModel*>(model_of(R"({"vocab":{"a":0},"merges":[]})").get()));
  CHECK(dynamic_cast<const stile::tok::WordPieceModel*>(
      model_of(R"({"unk_token":"a","continuing_subword_prefix":"##","max_input_chars_per_word":5,"vocab":{"a":0}})")
          .get()));
  const auto wl = model_of(R"({"vocab":{"<unk>":0,"hello":1},"unk_token":"<unk>"})");
  CHECK(dynamic_cast<const stile::tok::WordLevelModel*>(wl.get()));
  CHECK(tokens_of(*wl, "hello") == "1:0-5 ");
  CHECK(tokens_of(*wl, "héllo") == "0:0-5 ");
  CHECK(dynamic_cast<const stile::tok::UnigramModel*>(model_of(R"({"vocab":[["a",-1.0]],"unk_id":null})").get()));
  CHECK_THROWS_WITH(model_of(R"({"type":"Fancy","vocab":{}})"),
                    Contains("tok.json: model.type") && Contains("\"Fancy\" is not supported"));
}

TEST_CASE("BPE merges by rank, then position, skipping stale pairs, as word.rs", "[tokenizer][models]") {
  // "aaa": (a a) at 0 and 1 tie on rank; position 0 goes first: [aa][a].
  const auto m = model_of(R"({"type":"BPE","vocab":{"a":0,"aa":1,"b":2,"ab":3,"aab":4,"c":5},
                               "merges":[["a","a"],["a","b"],["aa","b"]]})");
  CHECK(tokens_of(*m, "aaa") == "1:0-2 0:2-3 ");
  CHECK(tokens_of(*m, "aaaa") == "1:0-2 1:2-4 ");
  // "aab": (a a) rank 0 first -> [aa][b] -> (aa b) rank 2 -> [aab].
  CHECK(tokens_of(*m, "aab") == "4:0-3 ");
  // "x" is not in the vocab and there is no unk_token: dropped. The reference's offsets are
  // running sums of the symbols' lengths, so "c" after it reports x's place (2-3), as here.
  CHECK(tokens_of(*m, "abxc") == "3:0-2 5:2-3 ");
  // Merges written as "a b" strings (with a merges.txt "#version" line) give the same model.
  const auto legacy = model_of(R"({"type":"BPE","vocab":{"a":0,"aa":1,"b":2,"ab":3,"aab":4,"c":5},
                                    "merges":["#version: 0.2","a a","a b","aa b"]})");
  CHECK(tokens_of(*legacy, "aaab") == tokens_of(*m, "aaab"));
}

TEST_CASE("BPE unk, fuse_unk, byte_fallback and ignore_merges follow model.rs", "[tokenizer][models]") {
  const std::string vocab = R"("vocab":{"<unk>":0,"a":1,"b":2,"ab":3,"<0xC3>":4,"<0xA9>":5})";
  const auto plain = model_of(R"({"type":"BPE","unk_token":"<unk>",)" + vocab + R"(,"merges":[["a","b"]]})");
  CHECK(tokens_of(*plain, "xyab") == "0:0-1 0:1-2 3:2-4 ");
  const auto fused =
      model_of(R"({"type":"BPE","unk_token":"<unk>","fuse_unk":true,)" + vocab + R"(,"merges":[["a","b"]]})");
  CHECK(tokens_of(*fused, "xyab") == "0:0-2 3:2-4 ");
  // Byte fallback: each byte token of "é" covers "é"; "☃" has no byte tokens -> unk.
  const auto bytes =
      model_of(R"({"type":"BPE","unk_token":"<unk>","byte_fallback":true,)" + vocab + R"(,"merges":[["a","b"]]})");
  CHECK(tokens_of(*bytes, "aébab") == "1:0-1 4:1-2 5:1-2 2:2-3 3:3-5 ");
  CHECK(tokens_of(*bytes, "a☃") == "1:0-1 0:1-2 ");
  // ignore_merges: a piece in the vocab is that token even where merges would not make it.
  const auto ignore =
      model_of(R"({"type":"BPE","ignore_merges":true,"vocab":{"a":0,"b":1,"ab":2,"ba":3},"merges":[["a","b"]]})");
  CHECK(tokens_of(*ignore, "ba") == "3:0-2 ");
  const auto merging = model_of(R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"ba":3},"merges":[["a","b"]]})");
  CHECK(tokens_of(*merging, "ba") == "1:0-1 0:1-2 ");
  // An unk_token missing from the vocab fails only when a character needs it, as the reference.
  const auto missing = model_of(R"({"type":"BPE","unk_token":"<unk>","vocab":{"a":0},"merges":[]})");
  CHECK(tokens_of(*missing, "aa") == "0:0-1 0:1-2 ");
  CHECK_THROWS_WITH(tokenize(*missing, U"ax"), Contains("unk_token \"<unk>\" is not in the vocab"));
}

TEST_CASE("Unigram: Viterbi with the reference's ties, fused unknowns and byte fallback", "[tokenizer][models]") {
  // model.rs's own example: "abcdacdxx" -> abcd a cd xx (xx one fused unk).
  const auto m = model_of(R"({"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["a",0.0],["b",0.0],["c",0.0],
                               ["d",0.0],["cd",1.0],["ab",2.0],["abc",5.0],["abcd",10.0]]})");
  CHECK(tokens_of(*m, "abcdacdxx") == "8:0-4 1:4-5 5:5-7 0:7-9 ");
  // Ties: a+b and ab both score -2 -> the first offer to position 2 stays (a then b... from 0:
  // "a" reaches 1, "ab" reaches 2 first with -2; "b" from 1 offers -2 too, not better).
  const auto ties =
      model_of(R"({"type":"Unigram","unk_id":0,"vocab":[["<unk>",-5.0],["a",-1.0],["b",-1.0],["ab",-2.0]]})");
  CHECK(tokens_of(*ties, "ab") == "3:0-2 ");
  // Byte fallback: every byte token of a fused unknown run covers the whole run.
  const auto bytes = model_of(R"({"type":"Unigram","unk_id":0,"byte_fallback":true,"vocab":[["<unk>",0.0],["a",-1.0],
                                   ["<0xE2>",-2.0],["<0x98>",-2.0],["<0x83>",-2.0]]})");
  CHECK(tokens_of(*bytes, "a☃☃a") == "1:0-1 2:1-3 3:1-3 4:1-3 2:1-3 3:1-3 4:1-3 1:3-4 ");
  CHECK(tokens_of(*bytes, "é") == "0:0-1 ");  // no <0xC3>: unk
  // No unk_id: an uncovered character is an error, as the reference.
  const auto no_unk = model_of(R"({"type":"Unigram","unk_id":null,"vocab":[["a",-1.0]]})");
  CHECK(tokens_of(*no_unk, "aa") == "0:0-1 0:1-2 ");
  CHECK_THROWS_WITH(tokenize(*no_unk, U"ab"), Contains("no unk_id"));
  // Scores as the reference's JSON reader makes them (serde_json, an ulp off for some 17-digit
  // numbers): here "." + ".." and ".." + "." differ only in the last bit of a sum, and the
  // reference takes ".." first (probed with tokenizers 0.23.3; correctly rounded scores give the other).
  const auto ulp = model_of(R"({"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],[".",-4.312542176404268],
      ["..",-6.809289696929832],["trap",-10.100150588370788],["ther",-7.3012273003155705],["girl",-10.118894817789469],
      ["er",-5.8158074499168375]]})");
  CHECK(tokens_of(*ulp, "trapthergirler...") == "3:0-4 4:4-8 5:8-12 6:12-14 2:14-16 1:16-17 ");
  CHECK(stile::tok::model_detail::serde_json_f64(-3.6827196691956363) == -3.682719669195636);
  CHECK(stile::tok::model_detail::serde_json_f64(-7.2496483889214485) == -7.249648388921448);
  CHECK(stile::tok::model_detail::serde_json_f64(-4.312542176404268) == -4.312542176404268);
  // Extremes, as the reference reads them back (to_str): unchanged.
  CHECK(stile::tok::model_detail::serde_json_f64(1e-320) == 1e-320);
  CHECK(stile::tok::model_detail::serde_json_f64(-2.5e-310) == -2.5e-310);
  CHECK(stile::tok::model_detail::serde_json_f64(1.7976931348623157e308) == 1.7976931348623157e308);
  CHECK(stile::tok::model_detail::serde_json_f64(0.30000000000000004) == 0.30000000000000004);
  // Duplicate pieces: the last one's id and score.
  const auto dup = model_of(R"({"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["a",-1.0],["a",-3.0]]})");
  CHECK(tokens_of(*dup, "a") == "2:0-1 ");
  CHECK(dup->token_to_id("a") == 2);
  CHECK(dup->id_to_token(1) == "a");
}

TEST_CASE("malformed model JSON is refused with the field named", "[tokenizer][models]") {
  const auto fails = [](std::string_view json_text, const std::string& a, const std::string& b) {
    CHECK_THROWS_WITH(model_of(json_text), Contains(a) && Contains(b));
  };
  fails(R"([1,2])", "model", "must be a JSON object");
  fails(R"({"type":3})", "model.type", "must be a string");
  fails(R"({"type":"BPE","vocab":{"a":0}})", "model", "missing \"vocab\" or \"merges\"");
  fails(R"({"type":"BPE","vocab":[],"merges":[]})", "model.vocab", "must be a JSON object");
  fails(R"({"type":"BPE","vocab":{"a":"0"},"merges":[]})", "model.vocab.\"a\"", "whole number");
  fails(R"({"type":"BPE","vocab":{"a":-1},"merges":[]})", "model.vocab.\"a\"", "whole number");
  fails(R"({"type":"BPE","vocab":{"a":1.5},"merges":[]})", "model.vocab.\"a\"", "whole number");
  fails(R"({"type":"BPE","vocab":{"a":0,"b":0},"merges":[]})", "model.vocab", "both have id 0");
  fails(R"({"type":"BPE","vocab":{"a":4000000000},"merges":[]})", "model.vocab.\"a\"", "absurd");
  fails(R"({"type":"BPE","vocab":{"a":0,"b":9000000},"merges":[]})", "model.vocab", "absurd holes");
  fails(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","c"]]})", "model.merges[0]",
        "\"c\", which is not in the vocab");
  fails(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","b"]]})", "model.merges[0]",
        "makes \"ab\", which is not in the vocab");
  fails(R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b c"]})", "model.merges[0]", "one space");
  fails(R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"],"a b"]})", "model.merges[1]", "pair");
  fails(R"({"type":"BPE","vocab":{"a":0},"merges":{}})", "model.merges", "JSON array");
  fails(R"({"type":"BPE","vocab":{"a":0},"merges":[],"dropout":0.1})", "model.dropout", "not supported");
  fails(R"({"type":"BPE","vocab":{"a":0},"merges":[],"fuse_unk":"yes"})", "model.fuse_unk", "true or false");
  fails(R"({"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":5})", "model.unk_token", "must be a string");
  fails(R"({"type":"WordPiece","vocab":{"a":0},"unk_token":"a","continuing_subword_prefix":"##"})", "model",
        "missing \"max_input_chars_per_word\"");
  fails(
      R"({"type":"WordPiece","vocab":{"a":0},"unk_token":"a","continuing_subword_prefix":"##","max_input_chars_per_word":-3})",
      "model.max_input_chars_per_word", "whole number");
  fails(
      R"({"type":"WordPiece","vocab":{"a":0},"unk_token":null,"continuing_subword_prefix":"##","max_input_chars_per_word":3})",
      "model.unk_token", "must be a string");
  fails(R"({"type":"Unigram"})", "model", "missing \"vocab\"");
  fails(R"({"type":"Unigram","vocab":[["a"]]})", "model.vocab[0]", "[piece, score]");
  fails(R"({"type":"Unigram","vocab":[["a","x"]]})", "model.vocab[0]", "[piece, score]");
  fails(R"({"type":"Unigram","vocab":[["a",-1.0]],"unk_id":1})", "model.unk_id", "not in the vocab");
  fails(R"({"type":"Unigram","vocab":[],"unk_id":0})", "model.vocab", "empty");
  fails(R"({"type":"Unigram","vocab":[["a",-1.0]],"byte_fallback":1})", "model.byte_fallback", "true or false");
  fails(R"({"vocab":{"a":0},"merges":[["a","x"]]})", "model.merges[0]", "not in the vocab");  // untagged: BPE's error
  fails(R"({"unk_token":"a"})", "model", "no \"type\"");
  // The error names the file too.
  CHECK_THROWS_WITH(model_of(R"({"type":"BPE"})"), Contains("stile: tok.json: model:"));
}

TEST_CASE("a model is usable from many threads at once", "[tokenizer][models]") {
  const auto model = model_of(read_file(kDir / "bpe_byte_fallback.json"));
  const std::u32string piece = U"unbelievably😀é";
  const std::string expected = show(tokenize(*model, piece));
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) got[t] = show(tokenize(*model, piece));
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == expected);
}

// The sweep (not run by default): STILE_MODEL_SWEEP=DIR test_models "[.sweep]" checks every
// NAME.json / NAME.cases.jsonl pair in DIR (scripts/make_model_fixtures.py --out DIR ...) and prints
// parity and the time per 1000 pieces (one thread, the model's tokenize alone).
TEST_CASE("model sweep: parity and speed on a directory of cases", "[.sweep]") {
  const char* dir = std::getenv("STILE_MODEL_SWEEP");
  REQUIRE(dir != nullptr);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".json") && !name.ends_with(".cases.jsonl")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    const std::string name = path.stem().string();
    const auto load_start = std::chrono::steady_clock::now();
    const auto model = model_of(read_file(path));
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count();
    std::ifstream cases(path.parent_path() / (name + ".cases.jsonl"), std::ios::binary);
    std::vector<std::u32string> pieces;
    std::size_t same = 0;
    std::size_t shown = 0;
    for (std::string line; std::getline(cases, line);) {
      const auto c = nlohmann::json::parse(line);
      const std::string piece = c[0].get<std::string>();
      pieces.push_back(code_points(piece));
      std::string expected = "error";
      if (!c[1].is_string()) {
        expected.clear();
        for (const auto& t : c[1]) {
          expected += std::to_string(t[0].get<int>()) + ":" + std::to_string(t[1].get<int>()) + "-" +
                      std::to_string(t[2].get<int>()) + " ";
        }
      }
      std::string got;
      try {
        got = show(tokenize(*model, pieces.back()));
      } catch (const stile::Error&) {
        got = "error";
      }
      if (got == expected) {
        ++same;
      } else if (shown++ < 3) {
        std::printf("  %s: %s -> %s expected %s\n", name.c_str(), piece.c_str(), got.c_str(), expected.c_str());
      }
    }
    std::vector<Token> out;
    std::size_t tokens = 0;
    int rounds = 0;
    const auto start = std::chrono::steady_clock::now();
    double seconds = 0;
    do {
      for (const auto& p : pieces) {
        out.clear();
        try {
          model->tokenize(p, out);
        } catch (const stile::Error&) {
        }
        tokens += out.size();
      }
      ++rounds;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (seconds < 0.5);
    const double pieces_done = static_cast<double>(pieces.size()) * rounds;
    std::printf("%-24s %7zu pieces  parity %7zu/%-7zu (%.2f%%)  %8.1f us/1000 pieces  %6.2f Mtokens/s  load %.1f ms\n",
                name.c_str(), pieces.size(), same, pieces.size(),
                100.0 * static_cast<double>(same) / static_cast<double>(pieces.size()), seconds * 1e9 / pieces_done,
                static_cast<double>(tokens) / seconds / 1e6, load_ms);
    CHECK(same == pieces.size());
  }
}
