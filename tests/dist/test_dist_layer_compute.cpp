// The multi-device layer as the engine's LayerCompute (dist/dist_layer_compute.hpp): 1..3 in-process
// ranks, each with its own engine over the same shard store, run the same request with WS or 1D
// layers split in whole shards with uneven weights (and a rank with none); every rank's embedding
// equals the single-device engine's to 1e-5, for a plan with all shards and one with fewer.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stile/dist/dist_layer_compute.hpp"
#include "stile/dist/inprocess_communicator.hpp"
#include "stile/engine.hpp"
#include "stile/text/wordpiece.hpp"
#include "support/converted_store.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"

namespace fs = std::filesystem;
using namespace stile;

namespace {

// A small random BERT: hidden 64, 2 layers, 8 heads, FFN 128, 50 tokens, 64 positions.
void write_checkpoint(const fs::path& dir) {
  stile_test::Rng rng{4242};
  const auto unit = [&] { return static_cast<float>(rng()); };
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.05f, .embeddings = 0.05f, .matrices = 0.05f, .biases = 0.05f, .layer_norm = 0.05f};
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 5; i < 50; ++i) vocab += "tok" + std::to_string(i) + "\n";
  stile_test::write_random_bert(
      dir, {64, 2, 8, 128, 50, 64}, scales, [&] { return unit() + unit() + unit(); },
      [](const fs::path&, bool written) { REQUIRE(written); }, vocab);
}

const stile_test::ConvertedStore& store() {
  static const stile_test::ConvertedStore s("dist_layer_compute.stile", write_checkpoint, {4, 32});
  return s;
}

Encoding tokens(std::size_t n) {
  Encoding e;
  for (std::size_t i = 0; i < n; ++i) {
    e.input_ids.push_back(static_cast<std::int32_t>(5 + (i * 7) % 40));
    e.token_type_ids.push_back(0);
    e.attention_mask.push_back(1);
  }
  return e;
}

}  // namespace

TEST_CASE("the engine with a multi-device LayerCompute equals the single-device engine") {
  const Encoding e = tokens(13);
  const std::size_t shards = store().report.shards;
  REQUIRE(shards >= 4);
  for (const std::size_t m : {shards, shards - 3}) {
    const SubmodelPlan plan = SubmodelPlan::uniform(2, m, 32);
    const EngineResult want = Engine(store().store).run(e, plan);
    for (const DistMode mode : {DistMode::kWs, DistMode::k1d}) {
      for (const std::vector<double>& weights :
           std::vector<std::vector<double>>{{1}, {2, 1}, {3, 0, 2}}) {
        const int n = static_cast<int>(weights.size());
        InProcessGroup group(n, std::chrono::seconds(60));
        std::vector<std::vector<float>> got(weights.size());
        std::vector<std::string> errors(weights.size());
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
          threads.emplace_back([&, r] {
            try {
              ThreadPool pool(1);
              Engine engine(store().store);
              engine.set_layer_compute(std::make_unique<DistLayerCompute>(group.communicator(r), mode, weights, pool));
              got[static_cast<std::size_t>(r)] = engine.run(e, plan).embedding;
            } catch (const std::exception& ex) {
              errors[static_cast<std::size_t>(r)] = ex.what();
            }
          });
        }
        for (auto& t : threads) t.join();
        for (std::size_t r = 0; r < weights.size(); ++r) {
          INFO(mode_name(mode) << ", " << m << " of " << shards << " shards, rank " << r << " of " << n << ": "
                               << errors[r]);
          REQUIRE(errors[r].empty());
          REQUIRE(got[r].size() == want.embedding.size());
          float diff = 0;
          for (std::size_t i = 0; i < got[r].size(); ++i) diff = std::max(diff, std::abs(got[r][i] - want.embedding[i]));
          CHECK(diff <= 1e-5f);
        }
      }
    }
  }
}

TEST_CASE("the multi-device LayerCompute refuses 2D and a weight count that is not the ranks'") {
  InProcessGroup group(2);
  ThreadPool pool(1);
  CHECK_THROWS_WITH(DistLayerCompute(group.communicator(0), DistMode::k2d, {1, 1}, pool), Catch::Contains("WS or 1D"));
  CHECK_THROWS_WITH(DistLayerCompute(group.communicator(0), DistMode::k1d, {1, 1, 1}, pool),
                    Catch::Contains("one weight per rank"));
}
