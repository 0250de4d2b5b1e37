// A checkpoint's own classification head (model/checkpoint_classifier.hpp): stile's logits against
// PyTorch's on a tiny random checkpoint with a head (data/tiny_classifier, made with its logits by
// scripts/make_classifier_goldens.py), and the errors of a malformed head.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors_test_util.hpp"
#include "stile/calibrate/layerwise.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/checkpoint_classifier.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "support/converted_store.hpp"
#include "support/error_of.hpp"

namespace {

const std::filesystem::path kDir = std::filesystem::path(STILE_TEST_DATA_DIR) / "tiny_classifier";

// A safetensors file in memory with F32 tensors given as (name, shape, values).
struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};
stile::SafetensorsFile file_of(const std::vector<Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<std::byte> data;
  for (const Tensor& t : tensors) {
    const std::size_t begin = data.size();
    for (const float v : t.values) stile_test::append_le(data, v);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  return stile::SafetensorsFile::from_memory(stile_test::make_safetensors(header.dump(), data), "head.safetensors");
}

}  // namespace

TEST_CASE("checkpoint classifier: stile's logits are PyTorch's on a tiny random checkpoint", "[model][classifier]") {
  const stile::SentenceEncoder encoder = stile::SentenceEncoder::load(kDir);
  const std::optional<stile::LinearHead> head = stile::load_checkpoint_classifier(kDir);
  REQUIRE(head.has_value());
  CHECK(head->labels == std::vector<std::string>{"negative", "positive"});
  std::ifstream in(kDir / "logits.json");
  const nlohmann::json goldens = nlohmann::json::parse(in);
  REQUIRE(goldens["cases"].size() == 6);
  double worst = 0;
  for (const nlohmann::json& c : goldens["cases"]) {
    const std::string text = c["text"];
    INFO(text);
    // The same tokens as the reference tokenizer, so the logits compare the model and head alone.
    CHECK(encoder.tokenizer().encode(text).input_ids == c["token_ids"].get<std::vector<std::int32_t>>());
    const std::vector<double> logits = head->logits(encoder.embed(text));
    const std::vector<double> want = c["logits"].get<std::vector<double>>();
    REQUIRE(logits.size() == want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      // fp32 through two layers and a normalization: 1e-4 on logits of magnitude ~3.
      CHECK(std::abs(logits[k] - want[k]) < 1e-4);
      worst = std::max(worst, std::abs(logits[k] - want[k]));
    }
  }
  WARN("max |logit - PyTorch| " << worst);
}

TEST_CASE("checkpoint classifier: converted to a shard store, the engine's path gives PyTorch's logits",
          "[model][classifier]") {
  // The converter takes the BERT tensors and leaves the classifier (train_heads --model-head puts it
  // into the heads sidecar); the layer-at-a-time runner that train_heads and the planner's
  // evaluation use, every shard at 32 bits, then the head, must give the reference logits.
  const stile_test::ConvertedStore converted("tiny_classifier.stile", kDir, {4, 32});
  const stile::ShardStore store = stile::ShardStore::open(converted.store);
  const stile::SentenceEncoder encoder = stile::SentenceEncoder::load(kDir);
  const stile::LinearHead head = *stile::load_checkpoint_classifier(kDir);
  stile::LayerwiseBert bert(store);
  stile::ThreadPool pool(1);
  std::vector<stile::ShardChoice> all;
  for (std::size_t s = 0; s < store.shards_per_layer(); ++s) all.push_back({s, 32});
  std::ifstream in(kDir / "logits.json");
  const nlohmann::json goldens = nlohmann::json::parse(in);
  for (const nlohmann::json& c : goldens["cases"]) {
    INFO(c["text"].get<std::string>());
    const stile::Encoding e = encoder.tokenizer().encode(c["text"].get<std::string>());
    stile::HiddenBatch x = bert.embed(std::span(&e, 1));
    for (std::size_t l = 0; l < store.num_layers(); ++l) bert.run_layer(l, all, x, pool);
    const std::vector<double> logits = head.logits(stile::mean_pooled_normalized(x, store.config().hidden));
    const std::vector<double> want = c["logits"].get<std::vector<double>>();
    for (std::size_t k = 0; k < want.size(); ++k) CHECK(std::abs(logits[k] - want[k]) < 1e-4);
  }
}

TEST_CASE("checkpoint classifier: a checkpoint without one has none", "[model][classifier]") {
  const stile::SafetensorsFile f = file_of({{"pooler.dense.bias", {2}, {0.f, 1.f}}});
  CHECK_FALSE(stile::read_checkpoint_classifier(f, 2).has_value());
}

TEST_CASE("checkpoint classifier: a malformed head is refused, naming the file and the problem",
          "[model][classifier]") {
  using stile_test::error_of;
  const std::vector<float> w6(6, 0.5f);
  auto read = [](const std::vector<Tensor>& t, std::size_t hidden = 3) {
    return stile::read_checkpoint_classifier(file_of(t), hidden);
  };
  CHECK(read({{"classifier.weight", {2, 3}, w6}, {"classifier.bias", {2}, {0.f, 0.f}}})->classes() == 2);
  CHECK_THAT(error_of([&] { read({{"classifier.weight", {2, 3}, w6}}); }),
             Catch::Contains("head.safetensors") && Catch::Contains("classifier.weight but not classifier.bias"));
  CHECK_THAT(error_of([&] { read({{"classifier.bias", {2}, {0.f, 0.f}}}); }),
             Catch::Contains("classifier.bias but not classifier.weight"));
  CHECK_THAT(error_of([&] { read({{"classifier.weight", {6}, w6}, {"classifier.bias", {2}, {0.f, 0.f}}}); }),
             Catch::Contains("must be [classes, hidden]"));
  CHECK_THAT(error_of([&] { read({{"classifier.weight", {2, 3}, w6}, {"classifier.bias", {3}, {0.f, 0.f, 0.f}}}); }),
             Catch::Contains("classifier.bias must be [2]"));
  CHECK_THAT(error_of([&] { read({{"classifier.weight", {2, 3}, w6}, {"classifier.bias", {2}, {0.f, 0.f}}}, 4); }),
             Catch::Contains("the model's hidden size is 4"));
  std::vector<float> bad = w6;
  bad[4] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THAT(error_of([&] { read({{"classifier.weight", {2, 3}, bad}, {"classifier.bias", {2}, {0.f, 0.f}}}); }),
             Catch::Contains("non-finite"));
  CHECK_THAT(error_of([&] {
               stile::read_checkpoint_classifier(
                   file_of({{"classifier.weight", {2, 3}, w6}, {"classifier.bias", {2}, {0.f, 0.f}}}), 3, {"only"});
             }),
             Catch::Contains("2 classes, 1 class names"));
}

TEST_CASE("checkpoint classifier: id2label must name every class once", "[model][classifier]") {
  using stile_test::error_of;
  using nlohmann::json;
  CHECK(stile::classifier_labels(json::object(), 2, "config.json") == std::vector<std::string>{"0", "1"});
  CHECK(stile::classifier_labels(json{{"id2label", {{"1", "pos"}, {"0", "neg"}}}}, 2, "config.json") ==
        std::vector<std::string>{"neg", "pos"});
  CHECK_THAT(error_of([] { stile::classifier_labels(json{{"id2label", {{"0", "neg"}}}}, 2, "config.json"); }),
             Catch::Contains("config.json") && Catch::Contains("each of the classifier's 2 classes"));
  CHECK_THAT(error_of([] { stile::classifier_labels(json{{"id2label", {{"0", "a"}, {"7", "b"}}}}, 2, "c.json"); }),
             Catch::Contains("key \"7\" is not a new class id 0..1"));
  CHECK_THAT(error_of([] { stile::classifier_labels(json{{"id2label", {{"0", "a"}, {"1", ""}}}}, 2, "c.json"); }),
             Catch::Contains("class 1 needs a non-empty name"));
}
