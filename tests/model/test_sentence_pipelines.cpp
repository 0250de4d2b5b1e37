// sentence-transformers pipelines against SentenceTransformer.encode: the directories under
// data/sentence (scripts/make_sentence_goldens.py) are what sentence-transformers saved for small
// random-weight encoders of data/families with every pooling mode, several at once, the older
// pooling flags, include_prompt false, Dense modules (Tanh, Identity without bias, GELU with a
// residual projection), Normalize, named prompts with a default and a max length shorter than a
// text. Each is loaded as a user's model directory (SentenceEncoder::load) with the family's
// weights and tokenizer copied in. Then each pooling mode on a hand-computed case, and a bad
// pipeline's errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/io/safetensors_writer.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "support/error_of.hpp"
#include "support/json_files.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using stile::Pooling;
using stile::SentenceEncoder;
using stile_test::error_of;
using stile_test::read_json;
using stile_test::write_file;
using stile_test::TempDir;

namespace {

const fs::path kData = STILE_TEST_DATA_DIR;
const fs::path kPipelines = kData / "sentence";
// sentence-transformers' own float32 arithmetic against stile's: the encoders agree within 1.4e-6
// (test_families); pooling, Dense and Normalize add a few roundings.
constexpr double kTolerance = 1e-5;


// A pipeline's directory as a user has it: the saved files plus the family's weights and tokenizer.
void make_model_dir(const std::string& name, const fs::path& dir) {
  const nlohmann::json golden = read_json(kPipelines / name / "golden.json");
  fs::copy(kPipelines / name, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const fs::path family = kData / "families" / golden.at("family").get<std::string>();
  for (const char* file : {"model.safetensors", "tokenizer.json"}) fs::copy_file(family / file, dir / file);
}

std::vector<std::string> pipeline_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kPipelines)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("sentence pipelines: SentenceEncoder equals SentenceTransformer.encode on every saved pipeline",
          "[model][golden]") {
  const std::vector<std::string> names = pipeline_names();
  REQUIRE(names.size() >= 6);
  double worst = 0.0;
  for (const std::string& name : names) {
    INFO("pipeline " << name);
    const TempDir temp(name);
    make_model_dir(name, temp.path);
    const SentenceEncoder encoder = SentenceEncoder::load(temp.path);
    const nlohmann::json golden = read_json(kPipelines / name / "golden.json");
    CHECK(encoder.dim() == golden.at("dim").get<std::size_t>());
    std::vector<std::vector<float>> one_by_one;
    for (const nlohmann::json& c : golden.at("cases")) {
      const std::string text = c.at("text").get<std::string>();
      const std::optional<std::string> prompt =
          c.at("prompt_name").is_null() ? std::nullopt : std::optional(c.at("prompt_name").get<std::string>());
      INFO("text \"" << text << "\", prompt " << prompt.value_or("(default)"));
      CHECK(encoder.encode(text, prompt).input_ids == c.at("ids").get<std::vector<std::int32_t>>());
      const std::vector<float> got = encoder.embed(text, nullptr, prompt);
      const std::vector<float> want = c.at("embedding").get<std::vector<float>>();
      REQUIRE(got.size() == want.size());
      double d = 0.0;
      for (std::size_t i = 0; i < got.size(); ++i) d = std::max(d, std::abs(double(got[i]) - want[i]));
      CHECK(d <= kTolerance);
      worst = std::max(worst, d);
      one_by_one.push_back(got);
    }
    // A batch (one encoder run over every text of the same prompt) gives each text's embedding.
    const nlohmann::json& first = golden.at("cases").at(0);
    const std::optional<std::string> prompt = first.at("prompt_name").is_null()
                                                  ? std::nullopt
                                                  : std::optional(first.at("prompt_name").get<std::string>());
    std::vector<std::string> texts;
    std::vector<std::size_t> rows;
    for (std::size_t i = 0; i < golden.at("cases").size(); ++i) {
      if (golden.at("cases")[i].at("prompt_name") == first.at("prompt_name")) {
        texts.push_back(golden.at("cases")[i].at("text").get<std::string>());
        rows.push_back(i);
      }
    }
    const std::vector<std::vector<float>> batch = encoder.embed_batch(texts, nullptr, prompt);
    REQUIRE(batch.size() == rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      for (std::size_t k = 0; k < batch[i].size(); ++k) CHECK(std::abs(batch[i][k] - one_by_one[rows[i]][k]) <= 1e-6f);
    }
  }
  std::printf("sentence pipelines: %zu pipelines, max abs diff %.3g against sentence-transformers\n", names.size(),
              worst);
}

TEST_CASE("sentence pipelines: the prompts, the truncation and the modules read from the files", "[model]") {
  const TempDir temp;
  make_model_dir("lasttoken_mean_prompts", temp.path);
  const SentenceEncoder encoder = SentenceEncoder::load(temp.path);
  CHECK(encoder.config().max_seq_length == 24);  // tokenizer_config.json's model_max_length
  CHECK(encoder.config().modules.pooling.modes == std::vector{Pooling::kLastToken, Pooling::kMean});
  CHECK_FALSE(encoder.config().modules.pooling.include_prompt);
  CHECK(encoder.prompt_text(std::nullopt) == "query: ");  // the default prompt
  CHECK(encoder.prompt_text("passage") == "passage: ");
  CHECK(encoder.prompt_tokens("query") == 4);  // [CLS] que ##ry : (the trailing [SEP] is not the prompt's)
  CHECK(encoder.prompt_tokens("document") == 0);  // sentence-transformers saves an empty "document" prompt
  CHECK_THAT(error_of([&] { (void)encoder.embed("text", nullptr, "summary"); }),
             Contains("no prompt named \"summary\"") && Contains("document, passage, query"));

  const TempDir dense;
  make_model_dir("legacy_sqrt_weighted_dense2", dense.path);
  const SentenceEncoder two_dense = SentenceEncoder::load(dense.path);
  const stile::SentenceModules& m = two_dense.config().modules;
  CHECK(m.pooling.modes == std::vector{Pooling::kMeanSqrtLen, Pooling::kWeightedMean});
  REQUIRE(m.dense.size() == 2);
  CHECK(m.dense[0].activation == stile::DenseModule::Activation::kIdentity);
  CHECK(m.dense[0].bias.empty());
  CHECK(m.dense[1].activation == stile::DenseModule::Activation::kGelu);
  CHECK(m.dense[1].residual.size() == 16 * 48);
  CHECK(two_dense.dim() == 16);
  CHECK(two_dense.hidden() == 64);
}

TEST_CASE("sentence pipelines: a long text embedded in windows (embed_long)", "[model]") {
  // A 24-token pipeline that leaves its prompt out of the pooling, and one that normalizes.
  for (const char* name : {"lasttoken_mean_prompts", "mpnet_mean_normalize"}) {
    INFO("pipeline " << name);
    const TempDir temp;
    make_model_dir(name, temp.path);
    nlohmann::json tokenizer_config = read_json(temp.path / "tokenizer_config.json");
    tokenizer_config["model_max_length"] = 24;  // windows of 24 tokens
    write_file(temp.path / "tokenizer_config.json", tokenizer_config.dump());
    const SentenceEncoder encoder = SentenceEncoder::load(temp.path);
    REQUIRE(encoder.config().max_seq_length == 24);
    // Fits in one window: embed's embedding exactly.
    CHECK(encoder.embed_long("A short text.", 4) == encoder.embed("A short text."));
    const std::string text =
        "it is a sprawling , ambitious and often very funny picture that never quite finds the heart it keeps "
        "promising , but the cast is game and the last act lands , and the score is lovely throughout";
    const std::size_t stride = 4;
    // By hand: the windows, each embedded as embed does, the mean weighted by their tokens.
    stile::Tokenizer windowed = encoder.tokenizer();
    windowed.set_truncation(stile::Truncation{.max_length = encoder.config().max_seq_length, .stride = stride});
    const std::string prompt(encoder.prompt_text(std::nullopt));
    stile::Encoding first = windowed.encode(prompt + text);
    std::vector<stile::Encoding> windows = std::move(first.overflowing);
    first.overflowing.clear();
    windows.insert(windows.begin(), std::move(first));
    REQUIRE(windows.size() >= 3);
    std::vector<double> mean(encoder.dim(), 0.0);
    double tokens = 0;
    for (std::size_t w = 0; w < windows.size(); ++w) {
      const std::vector<float> e =
          encoder.embed_encoded(std::span(&windows[w], 1), nullptr, w == 0 ? encoder.prompt_tokens(std::nullopt) : 0)[0];
      for (std::size_t i = 0; i < e.size(); ++i) mean[i] += double(windows[w].size()) * e[i];
      tokens += double(windows[w].size());
    }
    double norm = 0;
    for (double& v : mean) {
      v /= tokens;
      norm += v * v;
    }
    const double scale = encoder.config().modules.normalize ? 1.0 / std::sqrt(norm) : 1.0;
    const std::vector<float> got = encoder.embed_long(text, stride);
    REQUIRE(got.size() == mean.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - mean[i] * scale) < 1e-6);
    CHECK(got != encoder.embed(text));  // embed sees the first window only
    CHECK_THAT(error_of([&] { (void)encoder.embed_long(text, 22); }), Contains("stride 22"));
  }
}

TEST_CASE("pool_tokens: each mode on a hand-computed sequence, with and without a prompt left out", "[model]") {
  // 3 tokens x 2 features.
  const std::vector<float> h = {1, -2, 3, 4, -5, 6};
  const auto pooled = [&](Pooling mode, std::size_t skip) {
    std::vector<float> out(2);
    stile::pool_tokens(h, 3, 2, mode, out, skip);
    return out;
  };
  CHECK(pooled(Pooling::kCls, 0) == std::vector<float>{1, -2});
  CHECK(pooled(Pooling::kCls, 1) == std::vector<float>{3, 4});
  CHECK(pooled(Pooling::kMax, 0) == std::vector<float>{3, 6});
  CHECK(pooled(Pooling::kMax, 2) == std::vector<float>{-5, 6});
  CHECK(pooled(Pooling::kMean, 0) == std::vector<float>{-1.0f / 3, 8.0f / 3});
  CHECK(pooled(Pooling::kMean, 1) == std::vector<float>{-1, 5});
  CHECK(pooled(Pooling::kMeanSqrtLen, 0)[1] == Approx(8.0 / std::sqrt(3.0)));
  // Weights 1, 2, 3 by position; a left-out prompt keeps the others' positions (2 and 3).
  CHECK(pooled(Pooling::kWeightedMean, 0)[0] == Approx((1.0 + 6.0 - 15.0) / 6.0));
  CHECK(pooled(Pooling::kWeightedMean, 1)[0] == Approx((6.0 - 15.0) / 5.0));
  CHECK(pooled(Pooling::kLastToken, 0) == std::vector<float>{-5, 6});
  // Every token left out: the reference's values (row 0, -inf, zeros).
  CHECK(pooled(Pooling::kCls, 3) == std::vector<float>{1, -2});
  CHECK(pooled(Pooling::kMax, 3)[0] == -std::numeric_limits<float>::infinity());
  CHECK(pooled(Pooling::kMean, 3) == std::vector<float>{0, 0});
  CHECK(pooled(Pooling::kLastToken, 3) == std::vector<float>{0, 0});
}

TEST_CASE("sentence pipelines: a bad module is refused naming its file", "[model]") {
  struct Bad {
    const char* file;
    std::string contents;  // "" removes the file
    const char* says;
  };
  const std::vector<Bad> bads = {
      {"2_Dense/config.json", R"({"in_features": 64, "out_features": 48, "bias": false})", "in_features 64"},
      {"2_Dense/config.json",
       R"({"in_features": 128, "out_features": 48, "activation_function": "torch.nn.modules.activation.Softsign"})",
       "activation_function"},
      {"2_Dense/config.json", R"({"in_features": 128, "out_features": 40})", "linear.weight"},
      {"2_Dense/config.json", R"({"in_features": 128, "out_features": 48, "module_input_name": "token_embeddings"})",
       "module_input_name"},
      {"2_Dense/model.safetensors", "", "is missing"},
      {"3_Dense/config.json", R"({"in_features": 48, "out_features": 16, "use_residual": true})", "residual.weight"},
      {"1_Pooling/config.json", R"({"pooling_mode": ["mean", "median"]})", "median"},
      {"modules.json",
       R"([{"path": "", "type": "sentence_transformers.models.Transformer"},
           {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"path": "3_Normalize", "type": "sentence_transformers.models.Normalize"},
           {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])",
       "before Normalize"},
  };
  for (const Bad& bad : bads) {
    INFO(bad.file << ": " << bad.contents);
    const TempDir temp;
    make_model_dir("legacy_sqrt_weighted_dense2", temp.path);
    if (bad.contents.empty()) {
      fs::remove(temp.path / bad.file);
    } else {
      write_file(temp.path / bad.file, bad.contents);
    }
    if (std::string(bad.file) == "3_Dense/config.json") {
      // the residual projection's weight removed from the weights file
      const fs::path weights = temp.path / "3_Dense/model.safetensors";
      std::vector<stile::TensorToWrite> kept;
      {
        const stile::SafetensorsFile f = stile::SafetensorsFile::open(weights.string());
        for (const char* name : {"linear.weight", "linear.bias"}) {
          const std::span<const std::byte> bytes = f.bytes(name);
          kept.push_back({name, f.tensor(name).dtype, f.tensor(name).shape, {bytes.begin(), bytes.end()}});
        }
      }
      stile::write_file_bytes(weights.string(), stile::safetensors_bytes(std::move(kept)));
    }
    const std::string message = error_of([&] { (void)SentenceEncoder::load(temp.path); });
    INFO("-> " << message);
    CHECK_THAT(message, Contains(bad.says));
    CHECK_THAT(message, Contains(temp.path.string()));
  }
}
