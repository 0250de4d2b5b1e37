// model/linear_head.hpp and model/heads_file.hpp: the head's logits and prediction, the logistic
// regression (its objective's gradient against a hand derivation and finite differences, a
// separable problem solved exactly, determinism across thread counts), and the heads file's JSON
// round trip and refusals.
#include "stile/model/linear_head.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "stile/core/thread_pool.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/calibrate/train_head.hpp"
#include "support/error_of.hpp"
#include "support/rng.hpp"

using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using stile_test::error_of;
using stile_test::Rng;

fs::path temp_file(const std::string& stem) {
  static int counter = 0;
  return fs::temp_directory_path() /
         ("stile_test_eval_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + stem);
}

}  // namespace

TEST_CASE("linear head: logits, prediction, log-probability", "[eval][linear_head]") {
  const stile::LinearHead head{{"a", "b", "c"}, {1, 0, 0, 1, 1, 1}, {0.5f, 0.0f, -1.0f}};
  head.check(2);
  CHECK(head.classes() == 3);
  CHECK(head.hidden() == 2);
  const std::vector<float> e{2.0f, -1.0f};
  const std::vector<double> z = head.logits(e);
  CHECK(z == std::vector<double>{2.5, -1.0, 0.0});
  CHECK(head.predict(e) == 0);
  const double lse = std::log(std::exp(2.5) + std::exp(-1.0) + std::exp(0.0));
  CHECK(head.log_probability(e, 1) == Approx(-1.0 - lse).epsilon(1e-12));
  CHECK_THROWS_AS(head.logits(std::vector<float>{1.0f}), stile::Error);
  CHECK_THROWS_AS(head.check(3), stile::Error);
  CHECK_THROWS_AS((stile::LinearHead{{"a", "b"}, {1, 2, 3}, {0, 0}}.check()), stile::Error);
  const stile::HeadScore s = stile::score_head(head, std::vector<float>{2, -1, 0, 3}, std::vector<std::size_t>{0, 0});
  CHECK(s.correct == 1);  // the second row scores 0.5, 3, 2: class b
  CHECK(s.accuracy() == 0.5);
}

TEST_CASE("logistic regression: the objective's gradient is the hand-derived one", "[eval][linear_head]") {
  // Two rows, two features, two classes, at W = 0, b = 0: p = (1/2, 1/2) for both rows, so
  // loss = ln 2 and, with r_i = p_i - onehot(y_i) = (-1/2, 1/2) for y = 0 and (1/2, -1/2) for y = 1,
  // dW_0 = mean(-1/2 x_1, 1/2 x_2) = ((-1/2 + 3/2) / 2, (-1 - 1/2) / 2) = (1/2, -3/4), dW_1 = -dW_0,
  // db = mean(-1/2, 1/2) = 0 for both classes.
  const std::vector<float> x{1, 2, 3, -1};
  const std::vector<std::size_t> y{0, 1};
  std::vector<double> g;
  const double loss = stile::logistic_objective(std::vector<double>(6, 0.0), x, 2, y, 2, 0.0, g);
  CHECK(loss == Approx(std::log(2.0)).epsilon(1e-15));
  REQUIRE(g.size() == 6);
  CHECK(g[0] == Approx(0.5));
  CHECK(g[1] == Approx(-0.75));
  CHECK(g[2] == Approx(-0.5));
  CHECK(g[3] == Approx(0.75));
  CHECK(g[4] == Approx(0.0).margin(1e-15));
  CHECK(g[5] == Approx(0.0).margin(1e-15));
  // With l2 = 0.1 at W = (1, 0; 0, 0): the penalty adds 0.05 to the loss and 0.1 W to dW; and
  // the logits move: row 1 has z = (1, 0), row 2 z = (3, 0).
  std::vector<double> params{1, 0, 0, 0, 0, 0};
  const double loss2 = stile::logistic_objective(params, x, 2, y, 2, 0.1, g);
  const double p1 = 1 / (1 + std::exp(-1.0)), p2 = 1 / (1 + std::exp(-3.0));  // p(class 0)
  CHECK(loss2 == Approx((-std::log(p1) - std::log(1 - p2)) / 2 + 0.05).epsilon(1e-12));
  CHECK(g[0] == Approx(((p1 - 1) * 1 + p2 * 3) / 2 + 0.1).epsilon(1e-12));
  CHECK(g[1] == Approx(((p1 - 1) * 2 + p2 * -1) / 2).epsilon(1e-12));
  CHECK(g[4] == Approx(((p1 - 1) + p2) / 2).epsilon(1e-12));
  CHECK(g[5] == Approx(-((p1 - 1) + p2) / 2).epsilon(1e-12));
}

TEST_CASE("logistic regression: gradient matches finite differences (3 classes, random point)", "[eval][linear_head]") {
  Rng rng{7};
  const std::size_t n = 600, d = 5, C = 3;  // > 2 chunks of rows
  std::vector<float> x(n * d);
  std::vector<std::size_t> y(n);
  for (auto& v : x) v = static_cast<float>(rng());
  for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<std::size_t>((rng() + 1) * 1.5) % C;
  std::vector<double> params(C * (d + 1));
  for (auto& v : params) v = rng();
  std::vector<double> g, ignored;
  stile::logistic_objective(params, x, d, y, C, 0.3, g);
  stile::ThreadPool pool(2);
  std::vector<double> g_pool;
  stile::logistic_objective(params, x, d, y, C, 0.3, g_pool, &pool);
  CHECK(g_pool == g);  // fixed chunks: bit-identical with threads
  for (std::size_t p = 0; p < params.size(); ++p) {
    const double h = 1e-6;
    std::vector<double> plus = params, minus = params;
    plus[p] += h;
    minus[p] -= h;
    const double fd = (stile::logistic_objective(plus, x, d, y, C, 0.3, ignored) -
                       stile::logistic_objective(minus, x, d, y, C, 0.3, ignored)) /
                      (2 * h);
    CHECK(g[p] == Approx(fd).epsilon(1e-6).margin(1e-8));
  }
}

TEST_CASE("logistic regression: a separable problem is solved exactly, deterministically", "[eval][linear_head]") {
  // 400 points in 8 dimensions, the class given by the sign of a fixed direction, with a margin.
  Rng rng{11};
  const std::size_t n = 400, d = 8;
  std::vector<float> x;
  std::vector<std::size_t> y;
  while (y.size() < n) {
    std::vector<float> p(d);
    double proj = 0;
    for (std::size_t j = 0; j < d; ++j) {
      p[j] = static_cast<float>(rng());
      proj += (j % 2 == 0 ? 1.0 : -0.5) * p[j];
    }
    if (std::abs(proj) < 0.2) continue;
    x.insert(x.end(), p.begin(), p.end());
    y.push_back(proj > 0 ? 1 : 0);
  }
  stile::LogisticRegressionReport report;
  const stile::LinearHead head = stile::train_logistic_regression(x, d, y, {"neg", "pos"}, {}, &report);
  CHECK(report.train_accuracy == 1.0);
  CHECK(stile::score_head(head, x, y).accuracy() == 1.0);
  CHECK(report.converged);
  CHECK(report.gradient_max < 1e-6);
  CHECK(head.labels == std::vector<std::string>{"neg", "pos"});
  // The same answer with a thread pool (the gradient's sums are in fixed chunks).
  stile::ThreadPool pool(2);
  stile::LogisticRegressionOptions with_pool;
  with_pool.pool = &pool;
  const stile::LinearHead again = stile::train_logistic_regression(x, d, y, {"neg", "pos"}, with_pool);
  CHECK(again.weight == head.weight);
  CHECK(again.bias == head.bias);
  // Bad input.
  CHECK_THROWS_AS(stile::train_logistic_regression(x, d, y, {"only"}), stile::Error);
  std::vector<std::size_t> bad = y;
  bad[3] = 2;
  CHECK_THAT(error_of([&] {
               stile::train_logistic_regression(x, d, bad, {"neg", "pos"});
             }),
             Contains("label 2 of row 3"));
  CHECK_THROWS_AS(stile::train_logistic_regression(std::span<const float>(x).first(10), d, y, {"neg", "pos"}),
                  stile::Error);
}

TEST_CASE("logistic regression: the optimum's gradient is zero on a noisy problem", "[eval][linear_head]") {
  Rng rng{3};
  const std::size_t n = 1000, d = 16;
  std::vector<float> x(n * d);
  std::vector<std::size_t> y(n);
  for (auto& v : x) v = static_cast<float>(rng() * 0.1);
  for (std::size_t i = 0; i < n; ++i) y[i] = (x[i * d] + 0.05 * rng() > 0) ? 1 : 0;
  stile::LogisticRegressionReport report;
  const stile::LinearHead head = stile::train_logistic_regression(x, d, y, {"a", "b"}, {.l2 = 1e-3}, &report);
  CHECK(report.converged);
  // Check at the float head (what is stored): the gradient is small, not just the double iterate's.
  std::vector<double> params(head.weight.begin(), head.weight.end());
  params.insert(params.end(), head.bias.begin(), head.bias.end());
  std::vector<double> g;
  stile::logistic_objective(params, x, d, y, 2, 1e-3, g);
  for (const double v : g) CHECK(std::abs(v) < 1e-5);
  CHECK(report.train_accuracy > 0.7);
}

namespace {

stile::HeadsFile sample_heads() {
  stile::HeadsFile f;
  f.store = "tiny.stile";
  f.num_layers = 2;
  f.shards_per_layer = 3;
  f.split = {{.seed = 5, .train = 10, .calibration = 4}, 20};
  f.heads["gold"] = {
      stile::LinearHead{{"negative", "positive"}, {0.1f, -0.2f, 0.3f, 1e-8f}, {0.5f, -0.5f}}, 0.9, 0.85, {}};
  f.heads["2x3"] = {
      stile::LinearHead{{"negative", "positive"}, {1.0f / 3, 2, 3, 4}, {0, 1}}, 0.75, 0.5, {{2, 0, 1}, {0, 1, 2}}};
  f.heads["1x1"] = {stile::LinearHead{{"negative", "positive"}, {-1, -2, 3.25f, 4}, {0, 0}}, 1.0, 0.625, {}};
  return f;
}

}  // namespace

TEST_CASE("heads file: save and load round trip, bit-exact floats", "[eval][heads_file]") {
  const fs::path path = temp_file("tiny.stile.heads.json");
  CHECK(stile::heads_path_for("/a/b/tiny.stile") == fs::path("/a/b/tiny.stile.heads.json"));
  const stile::HeadsFile f = sample_heads();
  f.save(path);
  const stile::HeadsFile g = stile::HeadsFile::load(path);
  fs::remove(path);
  CHECK(g.store == "tiny.stile");
  CHECK(g.num_layers == 2);
  CHECK(g.shards_per_layer == 3);
  CHECK(g.split == f.split);
  REQUIRE(g.heads.size() == 3);
  for (const auto& [key, h] : f.heads) {
    const stile::StoredHead& k = g.at(key);
    CHECK(k.head.labels == h.head.labels);
    CHECK(k.head.weight == h.head.weight);
    CHECK(k.head.bias == h.head.bias);
    CHECK(k.train_accuracy == h.train_accuracy);
    CHECK(k.calibration_accuracy == h.calibration_accuracy);
    CHECK(k.ranking == h.ranking);
  }
  CHECK_THAT(error_of([&] { g.at("3x3", "f.json"); }),
             Contains("f.json: has no head \"3x3\" (it has: 1x1, 2x3, gold)"));
  CHECK(fs::exists(path) == false);
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path())) {
    CHECK(entry.path().filename().string().find(path.filename().string() + ".tmp") == std::string::npos);
  }
}

TEST_CASE("heads file: the head of a plan's shape, and the shapes' calibration accuracies", "[eval][heads_file]") {
  const stile::HeadsFile f = sample_heads();
  std::string key;
  using stile::SubmodelPlan;
  CHECK(f.find_for(SubmodelPlan::uniform(1, 1, 4), &key) == &f.heads.at("1x1"));
  CHECK(key == "1x1");
  CHECK(f.find_for(SubmodelPlan::uniform(2, 3, 32), &key) == &f.heads.at("2x3"));  // its own, not gold
  CHECK(key == "2x3");
  stile::HeadsFile gold_only = f;
  gold_only.heads.erase("2x3");
  CHECK(gold_only.find_for(SubmodelPlan::uniform(2, 3, 6), &key) == &gold_only.heads.at("gold"));
  CHECK(key == "gold");
  CHECK(f.find_for(SubmodelPlan::uniform(2, 1, 4)) == nullptr);  // no such head
  SubmodelPlan uneven = SubmodelPlan::uniform(2, 3, 4);
  uneven.layers[1].pop_back();
  CHECK(f.find_for(uneven) == nullptr);  // no head is trained on uneven widths
  CHECK(f.find_for(SubmodelPlan{}) == nullptr);

  const auto accuracy = f.shape_accuracy();
  CHECK(accuracy(1, 1) == 0.625);
  CHECK(accuracy(2, 3) == 0.5);
  CHECK(std::isnan(accuracy(2, 1)));  // no head: not a candidate shape
}

TEST_CASE("heads file: every kind of bad file is refused, naming it", "[eval][heads_file]") {
  const nlohmann::json good = sample_heads().to_json();
  CHECK_NOTHROW(stile::HeadsFile::from_json(good, "h.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return error_of([&] { stile::HeadsFile::from_json(j, "h.json"); });
  };
  CHECK_THAT(refused([](auto& j) { j["format"] = "stile-device-profile"; }), Contains("h.json: \"format\""));
  CHECK_THAT(refused([](auto& j) { j["version"] = 1; }), Contains("h.json: version 1 is not supported"));
  CHECK_THAT(refused([](auto& j) { j["version"] = 3; }), Contains("h.json: version 3 is not supported"));
  CHECK_THAT(refused([](auto& j) { j["extra"] = 1; }), Contains("h.json: unknown key \"extra\""));
  CHECK_THAT(refused([](auto& j) { j.erase("store"); }), Contains("h.json: missing \"store\""));
  CHECK_THAT(refused([](auto& j) { j["num_layers"] = 0; }), Contains("\"num_layers\" = 0 is outside"));
  CHECK_THAT(refused([](auto& j) { j["split"]["train"] = 18; }), Contains("do not fit in 20 rows"));
  CHECK_THAT(refused([](auto& j) { j["split"]["seed"] = -1; }), Contains("\"split\".\"seed\" must be a whole number"));
  CHECK_THAT(refused([](auto& j) { j["split"].erase("rows"); }), Contains("\"split\": missing \"rows\""));
  CHECK_THAT(refused([](auto& j) { j["heads"]["3x1"] = j["heads"]["1x1"]; }), Contains("head \"3x1\": outside"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["big"] = j["heads"]["1x1"]; }), Contains("must be \"gold\" or"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["01x1"] = j["heads"]["1x1"]; }), Contains("must be \"gold\" or"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"]["bias"] = {1.0}; }), Contains("head \"gold\": \"bias\" must be"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"]["bias"][0] = nullptr; }),
             Contains("head \"gold\": \"bias\"[0] must be a finite number"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"]["weight"][1][0] = 1e300; }), Contains("must be a finite float"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"]["weight"][1] = {1.0}; }), Contains("\"weight\"[1] has 1 values"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"]["labels"] = {"x"}; }), Contains("\"labels\" must be"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"]["colour"] = 1; }), Contains("unknown key \"colour\""));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"].erase("ranking"); }), Contains("missing \"ranking\""));
  CHECK_THAT(refused([](auto& j) { j["heads"]["gold"]["train_accuracy"] = 1.5; }), Contains("\"train_accuracy\""));
  CHECK_THAT(refused([](auto& j) { j["heads"]["1x1"]["calibration_accuracy"] = -0.1; }),
             Contains("head \"1x1\": \"calibration_accuracy\" must be a number in [0, 1]"));
  CHECK_THAT(refused([](auto& j) { j["heads"]["1x1"].erase("calibration_accuracy"); }),
             Contains("head \"1x1\": missing \"calibration_accuracy\""));
  CHECK_THAT(refused([](auto& j) {
               j["heads"]["2x3"]["ranking"] = {{0, 1, 2}};
             }),
             Contains("has 1 layers, expected 2"));
  CHECK_THAT(refused([](auto& j) {
               j["heads"]["2x3"]["ranking"][0] = {0, 0, 1};
             }),
             Contains("layer 0 is not a permutation of 0..2"));
  CHECK_THAT(refused([](auto& j) {
               j["heads"]["2x3"]["ranking"][1] = {0, 1, 7};
             }),
             Contains("layer 1 is not a permutation of 0..2"));
  CHECK_THAT(refused([](auto& j) {
               j["heads"]["1x1"]["weight"] = {{1.0, 2.0, 3.0}, {1.0, 2.0, 3.0}};
             }),
             Contains("head \"2x3\": hidden size 2, other heads have 3"));

  const fs::path path = temp_file("bad.heads.json");
  std::ofstream(path) << R"({"format": "stile-heads", "format": "stile-heads"})";
  CHECK_THAT(error_of([&] { stile::HeadsFile::load(path); }), Contains(path.string() + ": the heads file has the key"));
  std::ofstream(path) << "{ not json";
  CHECK_THAT(error_of([&] { stile::HeadsFile::load(path); }),
             Contains(path.string() + ": the heads file is not valid JSON"));
  fs::remove(path);
  CHECK_THAT(error_of([&] { stile::HeadsFile::load(path); }), Contains(path.string() + ": cannot read the heads file"));
  CHECK_THAT(error_of([&] { sample_heads().save("/nonexistent/dir/x.heads.json"); }),
             Contains("/nonexistent/dir/x.heads.json: cannot create the temporary file"));
}
