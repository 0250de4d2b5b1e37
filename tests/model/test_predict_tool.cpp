// tools/predict against the task-head goldens (data/heads): each subcommand's --format json output
// equals the reference pipelines' answers (labels and scores, the rerank order, the entities with
// their character offsets, the SPLADE terms), and misuse gets its exit status: 2 for a usage error,
// 1 for a model without the asked task's head.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/json_files.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using stile_test::read_json;
using stile_test::TempDir;

namespace {

const fs::path kHeads = fs::path(STILE_TEST_DATA_DIR) / "heads";
constexpr double kTolerance = 1e-5;

struct Run {
  int status = -1;
  std::string out;
};

// predict with `args` (already quoted), the lines of `input` on standard input.
Run predict(const std::string& args, const std::vector<std::string>& input = {}) {
  const TempDir dir("predict_tool");
  const fs::path in = dir.path / "in.txt", out = dir.path / "out.txt";
  {
    std::ofstream f(in, std::ios::binary);
    for (const std::string& line : input) f << line << "\n";
  }
  const std::string command =
      std::string("'") + STILE_PREDICT + "' " + args + " < '" + in.string() + "' > '" + out.string() + "' 2> /dev/null";
  const int raw = std::system(command.c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream f(out, std::ios::binary);
  r.out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return r;
}

std::string model(const std::string& name) { return "--model '" + (kHeads / name).string() + "'"; }

}  // namespace

TEST_CASE("predict classify, rerank, ner and sparse give the reference pipelines' answers", "[heads][tools]") {
  {
    const nlohmann::json golden = read_json(kHeads / "bert_seqcls" / "golden.json");
    std::vector<std::string> texts;
    std::vector<nlohmann::json> want;
    for (const nlohmann::json& c : golden.at("cases")) {
      // One text a line on standard input: a pair, or a text with a line break, does not fit.
      if (!c.at("text_pair").is_null() || c.at("text").get<std::string>().find('\n') != std::string::npos) continue;
      texts.push_back(c.at("text"));
      want.push_back(c.at("pipeline"));
    }
    const Run r = predict("classify " + model("bert_seqcls") + " --format json", texts);
    REQUIRE(r.status == 0);
    const nlohmann::json got = nlohmann::json::parse(r.out);
    REQUIRE(got.size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      INFO(texts[i]);
      CHECK(got[i].at("text") == texts[i]);
      CHECK(got[i].at("label") == want[i][0].at("label"));
      // Both list every label by descending score.
      REQUIRE(got[i].at("scores").size() == want[i].size());
      for (std::size_t k = 0; k < want[i].size(); ++k) {
        CHECK(got[i].at("scores")[k].at("label") == want[i][k].at("label"));
        CHECK(std::abs(got[i].at("scores")[k].at("score").get<double>() - want[i][k].at("score").get<double>()) <=
              kTolerance);
      }
    }
  }
  {
    const nlohmann::json c = read_json(kHeads / "bert_crossencoder" / "golden.json").at("cases").at(0);
    const Run r =
        predict("rerank " + model("bert_crossencoder") + " --format json '" + c.at("query").get<std::string>() + "'",
                c.at("passages").get<std::vector<std::string>>());
    REQUIRE(r.status == 0);
    const nlohmann::json got = nlohmann::json::parse(r.out).at("results");
    REQUIRE(got.size() == c.at("rank").size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].at("index") == c.at("rank")[i].at("corpus_id"));
      CHECK(std::abs(got[i].at("score").get<double>() - c.at("rank")[i].at("score").get<double>()) <= kTolerance);
    }
  }
  {
    const nlohmann::json golden = read_json(kHeads / "bert_ner" / "golden.json");
    std::vector<std::string> texts;
    std::vector<nlohmann::json> want;
    for (const nlohmann::json& c : golden.at("cases")) {
      if (!c.at("stride").is_null() || c.at("text").get<std::string>().find('\n') != std::string::npos) continue;
      texts.push_back(c.at("text"));
      want.push_back(c.at("pipeline").at("first"));
    }
    const Run r = predict("ner " + model("bert_ner") + " --aggregation first --format json", texts);
    REQUIRE(r.status == 0);
    const nlohmann::json got = nlohmann::json::parse(r.out);
    REQUIRE(got.size() == texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      INFO(texts[i]);
      const nlohmann::json& entities = got[i].at("entities");
      REQUIRE(entities.size() == want[i].size());
      for (std::size_t k = 0; k < entities.size(); ++k) {
        CHECK(entities[k].at("entity_group") == want[i][k].at("entity_group"));
        CHECK(entities[k].at("start") == want[i][k].at("start"));
        CHECK(entities[k].at("end") == want[i][k].at("end"));
        CHECK(std::abs(entities[k].at("score").get<double>() - want[i][k].at("score").get<double>()) <= kTolerance);
      }
    }
  }
  {
    const nlohmann::json c = read_json(kHeads / "bert_splade" / "golden.json").at("cases").at(0);
    const Run r = predict("sparse " + model("bert_splade") + " --format json", {c.at("text").get<std::string>()});
    REQUIRE(r.status == 0);
    const nlohmann::json got = nlohmann::json::parse(r.out).at(0);
    // Every term, by descending weight; the reference's, by id.
    std::map<int, double> want;
    for (std::size_t i = 0; i < c.at("indices").size(); ++i) want[c.at("indices")[i]] = c.at("values")[i];
    REQUIRE(got.at("ids").size() == want.size());
    for (std::size_t i = 0; i < got.at("ids").size(); ++i) {
      CHECK(std::abs(got.at("weights")[i].get<double>() - want[got.at("ids")[i].get<int>()]) <= kTolerance);
      if (i > 0) CHECK(got.at("weights")[i - 1].get<double>() >= got.at("weights")[i].get<double>());
    }
    CHECK(got.at("terms")[0] == c.at("top")[0][0]);
  }
}

TEST_CASE("predict: misuse gets its exit status", "[heads][tools]") {
  CHECK(predict("").status == 2);                                                 // no subcommand
  CHECK(predict("tag " + model("bert_ner")).status == 2);                         // not a subcommand
  CHECK(predict("classify", {"text"}).status == 2);                               // no --model
  CHECK(predict("ner " + model("bert_ner") + " --pairs", {"a\tb"}).status == 2);  // a pair to a one-text task
  CHECK(predict("ner " + model("bert_ner") + " --stride x", {"text"}).status == 2);
  CHECK(predict("rerank " + model("bert_crossencoder")).status == 2);          // no query
  CHECK(predict("ner " + model("bert_seqcls"), {"text"}).status == 1);         // no token-classification head
  CHECK(predict("rerank " + model("bert_seqcls") + " q", {"p"}).status == 1);  // three labels: no cross-encoder
  CHECK(predict("classify " + model("bert_seqcls") + " --pairs", {"no tab"}).status == 1);
  CHECK(predict("classify --help").status == 0);
}
