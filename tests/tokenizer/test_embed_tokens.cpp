// tools/embed --tokens against the tokenizer goldens: every SST-2 dev sentence, fed on standard
// input, gives the reference ids of sst2_dev.ids, each with its vocabulary line as its piece and
// the library tokenizer's byte offsets (--format json), and the text format lists
// "piece id begin end" per token. Skipped with a warning when the model or dev.tsv is missing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "golden_files.hpp"
#include "support/temp_dir.hpp"
#include "stile/text/tokenizer.hpp"

using namespace stile_test;

namespace {

// Runs embed with `flags` on the lines of `input` (standard input); its standard output.
std::string run_embed(const std::string& flags, const std::filesystem::path& input, const TempDir& dir) {
  const std::filesystem::path out = dir.path / "out.txt";
  const std::string command = std::string("'") + STILE_EMBED + "' --model '" + STILE_MODEL_DIR + "' " + flags + " < '" +
                              input.string() + "' > '" + out.string() + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream in(out, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// vocab.txt's lines: line i is the piece of id i ('#' lines included: "#" and "##ing" are pieces).
std::vector<std::string> vocab_lines() {
  std::ifstream in(model_vocab(), std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("embed --tokens gives the reference ids and their pieces", "[tokenizer][golden][embed]") {
  const std::filesystem::path dev = std::filesystem::path(STILE_SHARED_DIR) / "data" / "sst2" / "dev.tsv";
  if (!std::filesystem::exists(model_vocab()) || !std::filesystem::exists(dev)) {
    WARN("SKIPPED: " << model_vocab().string() << " or " << dev.string() << " is missing");
    return;
  }
  const std::vector<std::string> vocab = vocab_lines();
  const std::vector<std::string> expected = read_lines(data_dir() / "sst2_dev.ids");
  const TempDir dir("embed_tokens");
  const std::filesystem::path input = dir.path / "sentences.txt";
  std::vector<std::string> sentences;
  {
    const std::vector<std::string> lines = read_lines(dev);
    std::ofstream out(input, std::ios::binary);
    for (std::size_t i = 1; i < lines.size(); ++i) {
      if (lines[i].empty()) continue;
      sentences.push_back(split(lines[i], '\t').at(0));
      out << sentences.back() << "\n";
    }
  }
  REQUIRE(sentences.size() == expected.size());

  const stile::Tokenizer tokenizer = stile::Tokenizer::from_model_dir(STILE_MODEL_DIR);
  // The offsets embed prints are the library's (their parity with the reference is
  // test_tokenizer_json's): "begin end" of token t of sentence i.
  const auto offsets_of = [&](std::size_t i) { return tokenizer.encode(sentences[i]).offsets; };

  SECTION("json: text, tokens, ids and offsets of every sentence") {
    const nlohmann::json rows = nlohmann::json::parse(run_embed("--tokens --format json", input, dir));
    REQUIRE(rows.size() == sentences.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      INFO("SST-2 dev sentence #" << i << ": " << sentences[i]);
      CHECK(rows[i].at("text") == sentences[i]);
      const auto ids = rows[i].at("ids").get<std::vector<std::int32_t>>();
      CHECK(ids == parse_ids(expected[i]));
      std::vector<std::string> pieces;
      for (const std::int32_t id : ids) pieces.push_back(vocab.at(static_cast<std::size_t>(id)));
      CHECK(rows[i].at("tokens").get<std::vector<std::string>>() == pieces);
      std::vector<std::vector<std::uint32_t>> want_offsets;
      for (const stile::TokenOffsets& o : offsets_of(i)) want_offsets.push_back({o.begin, o.end});
      CHECK(rows[i].at("offsets").get<std::vector<std::vector<std::uint32_t>>>() == want_offsets);
    }
  }
  SECTION("text: the sentence and its token count, then \"piece id begin end\" per token") {
    const std::string text = run_embed("--tokens", input, dir);
    std::string want;
    for (std::size_t i = 0; i < sentences.size(); ++i) {
      const std::vector<std::int32_t> ids = parse_ids(expected[i]);
      const std::vector<stile::TokenOffsets> offsets = offsets_of(i);
      REQUIRE(offsets.size() == ids.size());
      want += (i == 0 ? "" : "\n") + sentences[i] + " (" + std::to_string(ids.size()) + " tokens)\n";
      for (std::size_t t = 0; t < ids.size(); ++t) {
        want += vocab.at(static_cast<std::size_t>(ids[t])) + " " + std::to_string(ids[t]) + " " +
                std::to_string(offsets[t].begin) + " " + std::to_string(offsets[t].end) + "\n";
      }
    }
    CHECK(text == want);
  }
}
