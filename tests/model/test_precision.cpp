// The model in each number format (ops/precision.hpp): the presets, a precision per layer, the
// weight memory each format takes, the errors of a bad precision, and on the default model the
// sentence embeddings of every preset against fp32's (the full SST-2 dev figures are
// bench/eval_precision's, in docs/benchmarks/forward.md).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "stile/core/op_times.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/ops/precision.hpp"
#include "support/default_model.hpp"
#include "support/error_of.hpp"
#include "support/random_bert.hpp"
#include "support/row_cosine.hpp"
#include "support/rng.hpp"
#include "support/temp_dir.hpp"
#include "support/token_rows.hpp"

namespace fs = std::filesystem;

namespace {

using stile_test::min_row_cosine;

constexpr std::size_t kLayers = 2;

// A tiny random BERT: hidden 64, 2 layers, 4 heads, FFN 128, 60 tokens, 64 positions.
const fs::path& tiny_model() {
  static const stile_test::TempDir dir("precision_model");
  static const bool written = [] {
    stile_test::Rng rng{4242};
    const stile_test::RandomBertScales scales{
        .word_embeddings = 0.5f, .embeddings = 0.1f, .matrices = 0.08f, .biases = 0.05f, .layer_norm = 0.05f};
    stile_test::write_random_bert(
        dir.path, {64, kLayers, 4, 128, 60, 64}, scales, [&] { return rng.unit() + rng.unit(); },
        [](const fs::path&, bool ok) { REQUIRE(ok); });
    return true;
  }();
  (void)written;
  return dir.path;
}

stile::Encoding tokens(std::size_t n, std::size_t salt) { return stile_test::spread_tokens(n, salt, 60); }

std::vector<float> encode(const stile::BertModel& m) {
  const std::vector<stile::Encoding> batch{tokens(9, 1), tokens(23, 2), tokens(1, 3)};
  std::vector<float> hidden;
  m.encode(batch, hidden);
  return hidden;
}

}  // namespace

TEST_CASE("precision presets: the four names and what they set; an unknown name lists them") {
  const stile::ModelPrecision fp16 = stile::precision_preset("fp16");
  CHECK(fp16.uniform.format(stile::LinearOp::kFfnIn) == stile::LinearFormat::kF16);
  CHECK(fp16.uniform.ops == stile::OpFormats{});
  const stile::ModelPrecision int8 = stile::precision_preset("int8");
  CHECK(int8.uniform.format(stile::LinearOp::kQkv) == stile::LinearFormat::kInt8);
  CHECK(int8.uniform.ops.layer_norm == stile::NormFormat::kInt8);
  CHECK(int8.uniform.ops.gelu == stile::GeluFormat::kErfApprox);
  CHECK(int8.uniform.ops.softmax == stile::SoftmaxFormat::kF32);
  const stile::ModelPrecision ibert = stile::precision_preset("ibert");
  CHECK(ibert.uniform.ops.layer_norm == stile::NormFormat::kInteger);
  CHECK(ibert.uniform.ops.gelu == stile::GeluFormat::kInteger);
  CHECK(ibert.uniform.ops.softmax == stile::SoftmaxFormat::kInteger);
  const std::string e = stile_test::error_of([] { stile::precision_preset("int4"); });
  CHECK(e.find("unknown precision 'int4'") != std::string::npos);
  CHECK(e.find("fp32, fp16, int8, ibert") != std::string::npos);
}

TEST_CASE("every preset computes the random model close to fp32, in less weight memory") {
  const stile::BertModel fp32 = stile::BertModel::load(tiny_model());
  const std::vector<float> want = encode(fp32);
  std::size_t fp32_bytes = 0;
  for (const auto& l : fp32.weights().layers) fp32_bytes += l.linear_bytes();
  // Cosine floors per preset: fp16 weights round at 2^-11; int8 at about 1/127 of each channel's
  // largest weight, and I-BERT's integer operators add their own rounding.
  const std::vector<std::pair<std::string, double>> floors{{"fp16", 0.99999}, {"int8", 0.995}, {"ibert", 0.99}};
  for (const auto& [name, floor] : floors) {
    DYNAMIC_SECTION(name) {
      const stile::BertModel m = stile::BertModel::load(tiny_model(), stile::precision_preset(name));
      const std::vector<float> got = encode(m);
      CHECK(min_row_cosine(got, want, 64) > floor);
      CHECK(got != want);  // it did compute in another format
      std::size_t bytes = 0;
      for (const auto& l : m.weights().layers) bytes += l.linear_bytes();
      CHECK(bytes < (name == "fp16" ? fp32_bytes / 2 + 1 : fp32_bytes / 3));
    }
  }
}

TEST_CASE("a precision per layer: all-fp32 layers are the fp32 model, one int8 layer changes only its part") {
  const stile::BertModel fp32 = stile::BertModel::load(tiny_model());
  const std::vector<float> want = encode(fp32);

  stile::ModelPrecision same;
  same.layers.assign(kLayers, stile::LayerPrecision{});
  CHECK(encode(stile::BertModel::load(tiny_model(), same)) == want);

  // Layer 1's FFN2 alone in int8, its softmax integer: the output moves a little, and the same
  // per-layer choice gives the same result again (the choice is honoured per layer, not globally).
  stile::ModelPrecision mixed;
  mixed.layers.assign(kLayers, stile::LayerPrecision{});
  mixed.layers[1].linear[static_cast<std::size_t>(stile::LinearOp::kFfnOut)] = stile::LinearFormat::kInt8;
  mixed.layers[1].ops.softmax = stile::SoftmaxFormat::kInteger;
  const stile::BertModel m = stile::BertModel::load(tiny_model(), mixed);
  CHECK(m.weights().layers[0].ffn2.format == stile::LinearFormat::kF32);
  CHECK(m.weights().layers[1].ffn2.format == stile::LinearFormat::kInt8);
  CHECK(m.weights().layers[1].ffn1.format == stile::LinearFormat::kF32);
  const std::vector<float> got = encode(m);
  CHECK(got != want);
  CHECK(min_row_cosine(got, want, 64) > 0.995);

  stile::ModelPrecision wrong;
  wrong.layers.assign(kLayers + 1, stile::LayerPrecision{});
  CHECK(stile_test::error_of([&] {
          stile::BertModel::load(tiny_model(), wrong);
        }).find("3 layer precisions for 2 layers") != std::string::npos);
}

TEST_CASE("each preset gives the same result on one thread and on three") {
  for (const std::string_view name : stile::kPrecisionPresets) {
    const stile::BertModel m = stile::BertModel::load(tiny_model(), stile::precision_preset(name));
    const std::vector<stile::Encoding> batch{tokens(40, 5), tokens(7, 6)};
    std::vector<float> one, three;
    stile::ThreadPool pool1(1), pool3(3);
    m.encode(batch, one, &pool1);
    m.encode(batch, three, &pool3);
    INFO(name);
    CHECK(one == three);  // rows split over threads (LayerNorm, GEMM columns) never change a value
  }
}

TEST_CASE("the operator breakdown accounts for the forward pass") {
  const stile::BertModel m = stile::BertModel::load(tiny_model(), stile::precision_preset("ibert"));
  stile::OpTimes times;
  const std::vector<stile::Encoding> batch{tokens(30, 4)};
  std::vector<float> hidden;
  m.encode(batch, hidden, nullptr, &times);
  for (const stile::OpKind k :
       {stile::OpKind::kEmbedding, stile::OpKind::kQkv, stile::OpKind::kAttention, stile::OpKind::kAttnOut,
        stile::OpKind::kLayerNorm, stile::OpKind::kFfnIn, stile::OpKind::kGelu, stile::OpKind::kFfnOut}) {
    CHECK(times[k] > 0.0);  // each operator class ran and was timed (the ibert preset's GELU is unfused)
  }
}

TEST_CASE("default model: every preset's sentence embeddings against fp32's") {
  REQUIRE_MODEL();
  std::vector<std::string> sentences{
      "a gripping, beautifully shot film", "the plot is thin and the jokes fall flat",
      "it's not the best movie of the year, but it has its moments",
      "an utterly forgettable exercise in style over substance that left the audience cold"};
  if (const char* quick = std::getenv("STILE_TEST_QUICK"); quick != nullptr && std::string(quick) == "1") {
    sentences.resize(1);  // under qemu (the aarch64 tests) one sentence per preset
  }
  const stile::SentenceEncoder fp32 = stile::SentenceEncoder::load(stile_test::model_dir());
  const auto want = fp32.embed_batch(sentences);
  // The accuracy targets are on SST-2 dev (docs/benchmarks/forward.md); here, floors per sentence.
  const std::vector<std::pair<std::string, double>> floors{{"fp16", 0.9999}, {"int8", 0.98}, {"ibert", 0.97}};
  for (const auto& [name, floor] : floors) {
    DYNAMIC_SECTION(name) {
      const stile::SentenceEncoder enc =
          stile::SentenceEncoder::load(stile_test::model_dir(), stile::precision_preset(name));
      const auto got = enc.embed_batch(sentences);
      for (std::size_t i = 0; i < sentences.size(); ++i) {
        double dot = 0;
        for (std::size_t k = 0; k < got[i].size(); ++k) dot += double(got[i][k]) * want[i][k];
        INFO(sentences[i]);
        CHECK(dot > floor);  // both are L2-normalized
      }
    }
  }
}
