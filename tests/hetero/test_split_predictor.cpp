// The split predictor (plan/split_predictor.hpp): the least-squares fit recovers known
// coefficients, a profile round-trips through JSON and its strict reader refuses what it must,
// and the chosen p follows the processors' relative speed.
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/plan/split_predictor.hpp"
#include "support/error_of.hpp"
#include "support/temp_dir.hpp"

namespace {

stile::SplitProfile synthetic(double slow) {
  stile::SplitProfile p;
  p.machine = {{"cpu", "test"}};
  // Processor 1 is `slow` times slower on the linear layers; attention and LayerNorm alike.
  p.fits.push_back({"cpu:0", "linear", "int8", {0.001, 1.0, 0.0, 10}});
  p.fits.push_back({"cpu:0", "attention", "fp32", {0.001, 3.0, 0.0, 10}});
  p.fits.push_back({"cpu:0", "layer_norm", "fp32", {0.0005, 0.0, 0.1, 10}});
  p.fits.push_back({"cpu:1", "linear", "fp16", {0.001, slow, 0.0, 10}});
  p.fits.push_back({"cpu:1", "attention", "fp32", {0.001, 3.0, 0.0, 10}});
  p.fits.push_back({"cpu:1", "layer_norm", "fp32", {0.0005, 0.0, 0.1, 10}});
  return p;
}

const std::array<stile::SplitSide, 2> kSides{stile::SplitSide{"cpu:0", stile::LinearFormat::kInt8, 16},
                                             stile::SplitSide{"cpu:1", stile::LinearFormat::kF16, 32}};

}  // namespace

TEST_CASE("fit_latency recovers the coefficients of exact samples and keeps them non-negative", "[predictor]") {
  std::vector<stile::LatencySample> s;
  for (int i = 1; i <= 12; ++i) {
    const stile::OpFeatures f{0.01 * i, 0.3 * ((i * 7) % 5 + 1)};
    s.push_back({f, 0.02 + 2.5 * f.gflop + 0.04 * f.mbytes});
  }
  const stile::LatencyFit fit = stile::fit_latency(s);
  CHECK(fit.fixed_ms == Approx(0.02).epsilon(1e-6));
  CHECK(fit.ms_per_gflop == Approx(2.5).epsilon(1e-6));
  CHECK(fit.ms_per_mb == Approx(0.04).epsilon(1e-6));
  // Times that fall with the work would need a negative slope: the fit drops that term instead.
  std::vector<stile::LatencySample> falling;
  for (int i = 1; i <= 5; ++i) falling.push_back({{0.1 * i, 0.0}, 1.0 - 0.1 * i});
  const stile::LatencyFit f2 = stile::fit_latency(falling);
  CHECK(f2.ms_per_gflop >= 0);
  CHECK(f2.fixed_ms >= 0);
  CHECK_THROWS_WITH(stile::fit_latency({}), Catch::Contains("no samples"));
}

TEST_CASE("the predicted split follows the processors' relative speed", "[predictor]") {
  const stile::SplitLayerShape shape{{128}, 768, 12, 3072, stile::NormFormat::kF32};
  // Equal processors: half and half; processor 1 three times slower: 3/4 on processor 0.
  CHECK(stile::choose_split(synthetic(1.0), kSides, shape).p == 0.5);
  CHECK(stile::choose_split(synthetic(3.0), kSides, shape).p == 0.75);
  // Far slower: everything on processor 0.
  CHECK(stile::choose_split(synthetic(100.0), kSides, shape).p == 1.0);
  // At p = 1 the layer is processor 0's calls, one after another.
  const stile::SplitProfile prof = synthetic(3.0);
  const std::vector<std::uint8_t> heads(12, 0);
  const auto& lin = prof.at("cpu:0", "linear", "int8");
  const double T = 128, d = 768, ff = 3072;
  double want = 0;
  for (const auto& [N, K] : {std::pair{d, d}, std::pair{2 * d, d}, std::pair{d, d}, std::pair{ff, d}, std::pair{d, ff}}) {
    want += lin.predict(stile::linear_features(128, std::size_t(N), std::size_t(K), stile::LinearFormat::kInt8));
  }
  want += prof.at("cpu:0", "attention", "fp32").predict(stile::attention_features(std::vector<std::size_t>{128}, 12, 64));
  want += 2 * prof.at("cpu:0", "layer_norm", "fp32").predict(stile::layer_norm_features(128, 768));
  CHECK(stile::predict_split_layer_ms(prof, kSides, shape, 1.0, heads) == Approx(want).epsilon(1e-12));
  (void)T;
  CHECK_THROWS_WITH(stile::predict_split_layer_ms(stile::SplitProfile{}, kSides, shape, 1.0, heads),
                    Catch::Contains("the split profile has no fit for processor 'cpu:0'"));
}

TEST_CASE("a split profile round-trips through its JSON file; the reader refuses bad files by name", "[predictor]") {
  stile_test::TempDir dir;
  const auto path = dir.path / "split.json";
  const stile::SplitProfile p = synthetic(2.0);
  p.save(path);
  const stile::SplitProfile q = stile::SplitProfile::load(path);
  REQUIRE(q.fits.size() == p.fits.size());
  CHECK(q.machine == p.machine);
  CHECK(q.at("cpu:1", "linear", "fp16").ms_per_gflop == 2.0);
  CHECK(q.to_json() == p.to_json());

  const auto refused = [&](nlohmann::json j, const std::string& want) {
    const std::string e = stile_test::error_of([&] { stile::SplitProfile::from_json(j, "bad.json"); });
    CHECK_THAT(e, Catch::Contains("bad.json") && Catch::Contains(want));
  };
  nlohmann::json good = p.to_json();
  nlohmann::json j = good;
  j["extra"] = 1;
  refused(j, "unknown key \"extra\"");
  j = good;
  j["version"] = 2;
  refused(j, "version 2 is not supported");
  j = good;
  j["format"] = "stile-device-profile";
  refused(j, "\"format\"");
  j = good;
  j["fits"][0]["fixed_ms"] = -1.0;
  refused(j, "\"fixed_ms\" must be a finite number >= 0");
  j = good;
  j["fits"][1] = j["fits"][0];
  refused(j, "a second fit for processor 'cpu:0'");
  j = good;
  j["fits"][0].erase("samples");
  refused(j, "missing \"samples\"");
  j = good;
  j["fits"][0]["op"] = "";
  refused(j, "must not be empty");
  refused(nlohmann::json::array(), "must be a JSON object");
}
