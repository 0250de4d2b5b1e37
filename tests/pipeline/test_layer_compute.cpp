// The engine issues every layer's compute through ops/layer_compute.hpp: a LayerCompute set with
// Engine::set_layer_compute runs each layer of each request (here a wrapper around the CPU
// implementation, so the output must equal the default engine's bit for bit, and ShardedBert's),
// and a LayerCompute that fails makes only the request that met it fail.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "stile/core/arena.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/engine.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sharded_bert.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/text/wordpiece.hpp"
#include "support/converted_store.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"

namespace fs = std::filesystem;

namespace {

// A tiny random BERT: hidden 32, 2 layers, 4 heads, FFN 64, 50 tokens, 64 positions.
void write_checkpoint(const fs::path& dir) {
  stile_test::Rng rng{777};
  const auto unit = [&] { return static_cast<float>(rng()); };
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.05f, .embeddings = 0.05f, .matrices = 0.05f, .biases = 0.05f, .layer_norm = 0.05f};
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";  // the engine's tokenizer needs these
  for (int i = 5; i < 50; ++i) vocab += "tok" + std::to_string(i) + "\n";
  stile_test::write_random_bert(
      dir, {32, 2, 4, 64, 50, 64}, scales, [&] { return unit() + unit() + unit(); },
      [](const fs::path&, bool written) { REQUIRE(written); }, vocab);
}

const stile_test::ConvertedStore& tiny_store() {
  static const stile_test::ConvertedStore s("layer_compute.stile", write_checkpoint, {4, 32});
  return s;
}

stile::Encoding tokens(std::size_t n) {
  stile::Encoding e;
  for (std::size_t i = 0; i < n; ++i) {
    e.input_ids.push_back(static_cast<std::int32_t>(5 + (i * 7) % 40));
    e.token_type_ids.push_back(0);
    e.attention_mask.push_back(1);
  }
  return e;
}

// The CPU layer, counting the layers it runs and failing on request.
class CountingCompute final : public stile::LayerCompute {
 public:
  explicit CountingCompute(std::size_t* layers, bool* fail) : layers_(layers), fail_(fail) {}
  void run(const stile::EncoderConfig& config, std::size_t layer, const stile::ShardShape& shape,
           std::span<const stile::ShardView> shards, const stile::LayerResidentView& resident, float* x,
           std::span<const std::size_t> seq_offsets) override {
    if (*fail_) throw stile::Error("stile: test device: the layer failed");
    ++*layers_;
    stile::CpuLayerCompute(pool_, {}, workspace_, arena_).run(config, layer, shape, shards, resident, x, seq_offsets);
  }

 private:
  std::size_t* layers_;
  bool* fail_;
  stile::ThreadPool pool_{1};
  stile::EncoderWorkspace workspace_;
  stile::Arena arena_;
};

}  // namespace

TEST_CASE("a LayerCompute set on the engine runs every layer, and one that fails fails only its request",
          "[engine][layer_compute]") {
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 3, 4);
  const stile::Encoding e = tokens(9);

  stile::Engine reference(tiny_store().store);
  const stile::EngineResult expected = reference.run(e, plan);
  std::vector<float> hidden;
  stile::ShardedBert::open(tiny_store().store).encode(std::span(&e, 1), hidden, plan);
  REQUIRE(hidden.size() == 9 * 32);
  std::vector<float> pooled(32);
  stile::pool_tokens(hidden, 9, 32, stile::Pooling::kMean, pooled);
  stile::l2_normalize(pooled);
  REQUIRE(expected.embedding.size() == 32);
  for (std::size_t i = 0; i < 32; ++i) CHECK(std::abs(expected.embedding[i] - pooled[i]) <= 1e-6f);

  stile::Engine engine(tiny_store().store);
  std::size_t layers = 0;
  bool fail = false;
  engine.set_layer_compute(std::make_unique<CountingCompute>(&layers, &fail));
  const stile::EngineResult r = engine.run(e, plan);
  CHECK(layers == 2);
  REQUIRE(r.embedding.size() == expected.embedding.size());
  for (std::size_t i = 0; i < r.embedding.size(); ++i) CHECK(r.embedding[i] == expected.embedding[i]);

  fail = true;
  CHECK_THROWS_WITH(engine.run(e, plan), Catch::Contains("test device: the layer failed"));
  CHECK(engine.working_buffer_bytes() == 0);  // released after the failed request
  fail = false;
  const stile::EngineResult again = engine.run(e, plan);
  CHECK(layers == 4);
  for (std::size_t i = 0; i < again.embedding.size(); ++i) CHECK(again.embedding[i] == expected.embedding[i]);

  CHECK_THROWS_WITH(engine.set_layer_compute(nullptr), Catch::Contains("needs a layer compute"));
}
