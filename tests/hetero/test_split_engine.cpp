// The cooperative layer behind the engine (hetero/split_layer_compute.hpp): set on an Engine with
// Engine::set_layer_compute, it decodes each layer's shards into the processors' formats and runs
// them split. fp32 on both processors at a fixed p gives the default engine's embedding; int8 and
// fp16 halves, or the predictor's p (profiled on the first layer), give one within the formats'
// error; a failing processor fails the request with its name, and the engine goes on.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "stile/engine.hpp"
#include "stile/hetero/cpu_cluster.hpp"
#include "stile/hetero/split_layer_compute.hpp"
#include "support/converted_store.hpp"
#include "support/tiny_bert.hpp"

namespace {

const stile_test::ConvertedStore& store() {
  static const stile_test::ConvertedStore s(
      "split_engine.stile", [](const std::filesystem::path& dir) { stile_test::write_tiny_bert(dir, 2, 4242); },
      {4, 32});
  return s;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace

TEST_CASE("the split layer behind the engine gives the default engine's embedding", "[hetero][engine]") {
  const stile::Encoding e = stile_test::tiny_tokens(11);
  for (const unsigned bits : {4u, 32u}) {
    const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 3, bits);
    stile::Engine reference(store().store);
    const std::vector<float> want = reference.run(e, plan).embedding;

    stile::CpuCluster a("cpu:a", {}, stile::LinearFormat::kF32, stile::CpuCluster::Mode::kCallerThread);
    stile::CpuCluster b("cpu:b", {}, stile::LinearFormat::kF32);
    for (const double p : {0.0, 0.5, 1.0}) {
      stile::Engine engine(store().store);
      engine.set_layer_compute(std::make_unique<stile::SplitLayerCompute>(a, b, stile::OpFormats{}, p));
      for (int request = 0; request < 2; ++request) {  // the second from the converted layers kept
        const std::vector<float> got = engine.run(e, plan).embedding;
        REQUIRE(got.size() == want.size());
        double worst = 0;
        for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
        INFO("bits " << bits << " p " << p << " request " << request);
        CHECK(worst <= 1e-5);
      }
    }
  }
}

TEST_CASE("int8 and fp16 processors at the predictor's p stay close to the fp32 engine", "[hetero][engine]") {
  const stile::Encoding e = stile_test::tiny_tokens(13);
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 4, 32);
  stile::Engine reference(store().store);
  const std::vector<float> want = reference.run(e, plan).embedding;
  stile::CpuCluster a("cpu:int8", {}, stile::LinearFormat::kInt8, stile::CpuCluster::Mode::kCallerThread);
  stile::CpuCluster b("cpu:fp16", {}, stile::LinearFormat::kF16);
  stile::Engine engine(store().store);
  auto compute = std::make_unique<stile::SplitLayerCompute>(a, b, stile::OpFormats{}, std::nullopt);
  const stile::SplitLayerCompute* c = compute.get();
  engine.set_layer_compute(std::move(compute));
  const std::vector<float> got = engine.run(e, plan).embedding;
  REQUIRE(c->profile().has_value());  // profiled on the first layer
  CHECK(c->profile()->find("cpu:int8", "linear", "int8") != nullptr);
  CHECK(c->profile()->find("cpu:fp16", "linear", "fp16") != nullptr);
  CHECK(cosine(got, want) > 0.999);
}
