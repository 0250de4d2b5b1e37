// plan/importance.hpp and calibrate/layerwise.hpp on a tiny random BERT (2 layers x 2 shards, bits
// {2, 32}) converted on the spot, with a hand-made head: the layer-at-a-time runner equals
// ShardedBert::encode; every configuration of the profile (which starts at the raised layer from
// cached base states) equals a from-scratch ShardedBert run of that configuration; the ranking is
// a permutation ordered by accuracy, then mean log-probability; the JSON round trip and refusals.
#include "stile/plan/importance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "stile/core/thread_pool.hpp"
#include "stile/calibrate/layerwise.hpp"
#include "stile/calibrate/train_head.hpp"
#include "stile/calibrate/importance.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/model/sharded_bert.hpp"
#include "support/converted_store.hpp"
#include "support/error_of.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"
#include "support/temp_dir.hpp"

using Catch::Contains;
namespace fs = std::filesystem;

namespace {

using stile_test::error_of;
using stile_test::Rng;
using stile_test::TempDir;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// A tiny random BERT checkpoint (as in tests/plan/test_device_profile.cpp): hidden 32, 2 layers,
// 2 heads (so 2 shards per layer), FFN 64, 50 tokens. Larger weights than a trained model's so
// that 2 bits and 32 bits differ visibly.
void write_checkpoint(const fs::path& dir) {
  Rng rng{12345};
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.5f, .embeddings = 0.05f, .matrices = 0.2f, .biases = 0.05f, .layer_norm = 0.05f};
  stile_test::write_random_bert(
      dir, {32, 2, 2, 64, 50, 64}, scales, [&] { return float(rng() + rng() + rng()); },
      [](const fs::path&, bool written) { REQUIRE(written); });
}

const stile_test::ConvertedStore& tiny_store() {
  static const stile_test::ConvertedStore s("tiny.stile", write_checkpoint, {2, 32});
  return s;
}

// n sequences of 3..12 random tokens, [CLS]-free (ids only matter to the model here).
std::vector<stile::Encoding> sequences(std::size_t n, std::uint64_t seed) {
  Rng rng{seed};
  std::vector<stile::Encoding> out;
  for (std::size_t i = 0; i < n; ++i) {
    stile::Encoding e;
    const auto len = 3 + static_cast<std::size_t>((rng() + 1) * 5);
    for (std::size_t t = 0; t < len; ++t) {
      e.input_ids.push_back(static_cast<std::int32_t>((rng() + 1) * 25) % 50);
      e.token_type_ids.push_back(0);
      e.attention_mask.push_back(1);
    }
    out.push_back(std::move(e));
  }
  return out;
}

// Sentence embeddings from ShardedBert (the reference path).
std::vector<float> reference_embeddings(const stile::ShardedBert& bert, const std::vector<stile::Encoding>& batch,
                                        const stile::SubmodelPlan& plan, stile::ThreadPool& pool) {
  std::vector<float> hidden;
  const std::vector<std::size_t> lengths = bert.encode(batch, hidden, plan, {.pool = &pool});
  stile::HiddenBatch x;
  for (const std::size_t len : lengths) x.offsets.push_back(x.offsets.back() + len);
  x.hidden = std::move(hidden);
  return stile::mean_pooled_normalized(x, bert.config().hidden);
}

stile::SubmodelPlan all_at(std::size_t layers, std::size_t shards, unsigned bits) {
  return stile::SubmodelPlan::uniform(layers, shards, bits);
}

}  // namespace

TEST_CASE("layerwise: one layer at a time equals ShardedBert::encode", "[eval][layerwise]") {
  const stile::ShardStore store = stile::ShardStore::open(tiny_store().store);
  REQUIRE(store.num_layers() == 2);
  REQUIRE(store.shards_per_layer() == 2);
  const stile::ShardedBert reference(stile::ShardStore::open(tiny_store().store));
  stile::ThreadPool pool(2);
  stile::LayerwiseBert bert(store);
  const std::vector<stile::Encoding> batch = sequences(5, 1);
  stile::SubmodelPlan mixed;
  mixed.layers = {{{1, 32}, {0, 2}}, {{1, 2}}};
  for (const stile::SubmodelPlan& plan : {all_at(2, 2, 32), all_at(2, 2, 2), all_at(1, 1, 32), mixed}) {
    std::vector<float> expected;
    const std::vector<std::size_t> lengths = reference.encode(batch, expected, plan, {.pool = &pool});
    stile::HiddenBatch x = bert.embed(batch);
    bert.run_layers(0, plan.layers, x, pool);
    REQUIRE(x.sequences() == lengths.size());
    for (std::size_t i = 0; i < lengths.size(); ++i) CHECK(x.offsets[i + 1] - x.offsets[i] == lengths[i]);
    CHECK(x.hidden == expected);
  }
  stile::HiddenBatch x = bert.embed(batch);
  CHECK_THROWS_AS(bert.run_layer(2, std::vector<stile::ShardChoice>{{0, 2}}, x, pool), stile::Error);
  CHECK_THROWS_AS(bert.run_layer(0, std::vector<stile::ShardChoice>{{0, 2}, {0, 32}}, x, pool), stile::Error);
  CHECK_THROWS_AS(bert.run_layer(0, std::vector<stile::ShardChoice>{{0, 4}}, x, pool), stile::Error);
}

TEST_CASE("importance: ranking by correct count, then mean log-probability, then position", "[eval][importance]") {
  auto score = [](std::size_t correct, double lp) {
    stile::HeadScore s;
    s.correct = correct;
    s.total = 10;
    s.mean_log_prob = lp;
    return s;
  };
  // Layer 0: shards 1 and 2 tie on accuracy; shard 2's higher log-probability puts it first.
  // Layer 1: shards 0 and 1 tie on both: position decides. Across layers, 8 correct beats 7.
  const std::vector<std::vector<stile::HeadScore>> scores{
      {score(7, -0.5), score(8, -0.6), score(8, -0.4)},
      {score(6, -0.3), score(6, -0.3), score(9, -0.9)},
  };
  const stile::ShardImportance r = stile::rank_importance(scores);
  CHECK(r.ranking == stile::ShardRanking{{2, 1, 0}, {2, 0, 1}});
  const stile::ImportanceOrder expected{{1, 2}, {0, 2}, {0, 1}, {0, 0}, {1, 0}, {1, 1}};
  CHECK(r.order == expected);
}

TEST_CASE("importance: every configuration equals a from-scratch run; the ranking follows the scores",
          "[eval][importance]") {
  const stile::ShardStore store = stile::ShardStore::open(tiny_store().store);
  const stile::ShardedBert reference(stile::ShardStore::open(tiny_store().store));
  const std::size_t N = 2, M = 2, d = 32;
  stile::ThreadPool pool(2);
  const std::vector<stile::Encoding> batch = sequences(12, 2);
  // A hand-made head: two classes along two fixed directions; labels are the head's own
  // predictions on the fp32 model, so the full model scores 12/12 and 2-bit shards lose some.
  stile::LinearHead head{{"a", "b"}, std::vector<float>(2 * d), {0.0f, 0.0f}};
  Rng rng{99};
  for (float& w : head.weight) w = static_cast<float>(rng() * 4);
  const std::vector<float> full = reference_embeddings(reference, batch, all_at(N, M, 32), pool);
  std::vector<std::size_t> labels;
  for (std::size_t i = 0; i < batch.size(); ++i)
    labels.push_back(head.predict(std::span<const float>(full).subspan(i * d, d)));

  std::size_t calls = 0, last_total = 0;
  stile::ImportanceOptions options;
  options.batch = 5;  // three batches, the last one short
  options.pool = &pool;
  options.progress = [&](std::size_t done, std::size_t total) {
    ++calls;
    CHECK(done == calls);
    last_total = total;
  };
  const stile::ImportanceProfile p = stile::profile_importance(store, batch, labels, head, options);
  CHECK(calls == 3 * (2 + N * M));
  CHECK(last_total == calls);
  CHECK(p.store == "tiny.stile");
  CHECK(p.num_layers == N);
  CHECK(p.shards_per_layer == M);
  CHECK(p.sentences == 12);
  CHECK(p.base_bits == 2);
  CHECK(p.raised_bits == 32);
  CHECK(p.full.correct == 12);

  auto expect_equal = [&](const stile::HeadScore& got, const stile::SubmodelPlan& plan) {
    const stile::HeadScore want = stile::score_head(head, reference_embeddings(reference, batch, plan, pool), labels);
    CHECK(got.correct == want.correct);
    CHECK(got.total == 12);
    CHECK(got.mean_log_prob == Approx(want.mean_log_prob).epsilon(1e-12));
  };
  expect_equal(p.base, all_at(N, M, 2));
  expect_equal(p.full, all_at(N, M, 32));
  REQUIRE(p.shards.size() == N);
  for (std::size_t l = 0; l < N; ++l) {
    REQUIRE(p.shards[l].size() == M);
    for (std::size_t s = 0; s < M; ++s) {
      stile::SubmodelPlan plan = all_at(N, M, 2);
      plan.layers[l][s].bits = 32;
      expect_equal(p.shards[l][s], plan);
    }
  }
  // The configurations must differ (else the test could not see a wrong cache): raising a shard
  // moves the log-probability.
  std::set<double> distinct{p.base.mean_log_prob};
  for (const auto& layer : p.shards) {
    for (const auto& s : layer) distinct.insert(s.mean_log_prob);
  }
  CHECK(distinct.size() == 1 + N * M);

  // Ranking: permutations, the global order all pairs once, sorted by the key, agreeing per layer.
  REQUIRE(p.ranking.size() == N);
  for (const auto& layer : p.ranking) {
    std::vector<std::size_t> sorted = layer;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<std::size_t>{0, 1});
  }
  REQUIRE(p.order.size() == N * M);
  CHECK(std::set<stile::LayerShard>(p.order.begin(), p.order.end()).size() == N * M);
  for (std::size_t i = 1; i < p.order.size(); ++i) {
    const stile::HeadScore& a = p.shards[p.order[i - 1].layer][p.order[i - 1].shard];
    const stile::HeadScore& b = p.shards[p.order[i].layer][p.order[i].shard];
    CHECK((a.correct > b.correct || (a.correct == b.correct && a.mean_log_prob >= b.mean_log_prob)));
  }
  for (std::size_t l = 0; l < N; ++l) {
    std::vector<std::size_t> from_order;
    for (const stile::LayerShard& ls : p.order) {
      if (ls.layer == l) from_order.push_back(ls.shard);
    }
    CHECK(from_order == p.ranking[l]);
  }

  // The batch size changes nothing but rounding-free bookkeeping.
  options.batch = 64;
  options.progress = nullptr;
  const stile::ImportanceProfile q = stile::profile_importance(store, batch, labels, head, options);
  CHECK(q.ranking == p.ranking);
  CHECK(q.base.correct == p.base.correct);
  CHECK(q.base.mean_log_prob == Approx(p.base.mean_log_prob).epsilon(1e-12));

  // Bad input.
  CHECK_THROWS_AS(stile::profile_importance(store, batch, std::vector<std::size_t>(3, 0), head, options), stile::Error);
  std::vector<std::size_t> bad = labels;
  bad[0] = 2;
  CHECK_THAT(error_of([&] { stile::profile_importance(store, batch, bad, head, options); }),
             Contains("label 2 is outside the head's classes"));
  stile::ImportanceOptions same_bits = options;
  same_bits.base_bits = 32;
  CHECK_THROWS_AS(stile::profile_importance(store, batch, labels, head, same_bits), stile::Error);
  stile::ImportanceOptions missing_bits = options;
  missing_bits.base_bits = 4;
  CHECK_THAT(error_of([&] { stile::profile_importance(store, batch, labels, head, missing_bits); }),
             Contains("lacks 4 or 32 bits"));
}

namespace {

stile::ImportanceProfile sample_profile() {
  stile::ImportanceProfile p;
  p.store = "tiny.stile";
  p.num_layers = 2;
  p.shards_per_layer = 3;
  p.split = {{.seed = 1, .train = 5, .calibration = 10}, 20};
  p.sentences = 10;
  auto score = [](std::size_t correct, double lp) {
    stile::HeadScore s;
    s.correct = correct;
    s.total = 10;
    s.mean_log_prob = lp;
    return s;
  };
  p.base = score(6, -0.7);
  p.full = score(9, -0.2);
  p.shards = {{score(7, -0.5), score(8, -0.6), score(8, -0.4)}, {score(6, -0.3), score(6, -0.31), score(9, -0.9)}};
  stile::ShardImportance r = stile::rank_importance(p.shards);
  p.ranking = r.ranking;
  p.order = r.order;
  return p;
}

}  // namespace

TEST_CASE("importance profile: save and load round trip; load_importance", "[eval][importance]") {
  TempDir dir("importance_json");
  const fs::path path = dir.path / "tiny.stile.importance.json";
  CHECK(stile::importance_path_for(dir.path / "tiny.stile") == path);
  const stile::ImportanceProfile p = sample_profile();
  p.save(path);
  const stile::ImportanceProfile q = stile::ImportanceProfile::load(path);
  CHECK(q.store == p.store);
  CHECK(q.split == p.split);
  CHECK(q.head == "gold");
  CHECK(q.sentences == 10);
  CHECK(q.base.correct == 6);
  CHECK(q.base.mean_log_prob == p.base.mean_log_prob);
  CHECK(q.full.correct == 9);
  for (std::size_t l = 0; l < 2; ++l) {
    for (std::size_t s = 0; s < 3; ++s) {
      CHECK(q.shards[l][s].correct == p.shards[l][s].correct);
      CHECK(q.shards[l][s].mean_log_prob == p.shards[l][s].mean_log_prob);
    }
  }
  CHECK(q.ranking == p.ranking);
  CHECK(q.order == p.order);
  const stile::ShardImportance i = stile::load_importance(path);
  CHECK(i.ranking == stile::ShardRanking{{2, 1, 0}, {2, 0, 1}});
  CHECK(i.order == p.order);
  // The ranking drives SubmodelPlan::uniform: the top shard of each layer.
  CHECK(stile::SubmodelPlan::uniform(2, 1, 2, i.ranking).layers ==
        std::vector<std::vector<stile::ShardChoice>>{{{2, 2}}, {{2, 2}}});
}

TEST_CASE("importance profile: every kind of bad file is refused, naming it", "[eval][importance]") {
  const nlohmann::json good = sample_profile().to_json();
  CHECK_NOTHROW(stile::ImportanceProfile::from_json(good, "i.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return error_of([&] { stile::ImportanceProfile::from_json(j, "i.json"); });
  };
  CHECK_THAT(refused([](auto& j) { j["format"] = "stile-heads"; }), Contains("i.json: \"format\""));
  CHECK_THAT(refused([](auto& j) { j["version"] = 0; }), Contains("i.json: version 0 is not supported"));
  CHECK_THAT(refused([](auto& j) { j["bogus"] = 0; }), Contains("i.json: unknown key \"bogus\""));
  CHECK_THAT(refused([](auto& j) { j.erase("global_order"); }), Contains("missing \"global_order\""));
  CHECK_THAT(refused([](auto& j) { j["sentences"] = 0; }), Contains("\"sentences\" = 0"));
  CHECK_THAT(refused([](auto& j) { j["raised_bits"] = 33; }), Contains("\"raised_bits\" = 33 is outside 1..32"));
  CHECK_THAT(refused([](auto& j) { j["base"]["correct"] = 11; }), Contains("\"base\": 11 correct of 10 sentences"));
  CHECK_THAT(refused([](auto& j) { j["full"]["accuracy"] = 0.5; }), Contains("\"full\": \"accuracy\" 0.5 is not"));
  CHECK_THAT(refused([](auto& j) { j["shards"][1][2]["mean_log_prob"] = 0.1; }),
             Contains("\"shards\"[1][2]: \"mean_log_prob\" must be a finite number <= 0"));
  CHECK_THAT(refused([](auto& j) { j["shards"][1].erase(2); }), Contains("\"shards\"[1] must be an array of 3 scores"));
  CHECK_THAT(refused([](auto& j) { j["ranking"][0] = {2, 2, 0}; }), Contains("layer 0 is not a permutation of 0..2"));
  CHECK_THAT(refused([](auto& j) {
               j["global_order"][0] = {1, 3};
             }),
             Contains("\"global_order\"[0] = [1, 3] is outside"));
  CHECK_THAT(refused([](auto& j) { j["global_order"][1] = j["global_order"][0]; }), Contains("appears twice"));
  CHECK_THAT(refused([](auto& j) { j["global_order"][0] = {1}; }), Contains("must be a [layer, shard] pair"));
  CHECK_THAT(refused([](auto& j) { j["global_order"].erase(5); }),
             Contains("must be an array of 6 [layer, shard] pairs"));
  CHECK_THAT(refused([](auto& j) { std::swap(j["global_order"][3], j["global_order"][2]); }),
             Contains("ranks layer 0's shards differently from \"ranking\""));
  CHECK_THAT(refused([](auto& j) { j["split"]["calibration"] = 16; }), Contains("do not fit in 20 rows"));

  TempDir dir("importance_bad");
  const fs::path path = dir.path / "x.importance.json";
  write_text(path, "[1, 2");
  CHECK_THAT(error_of([&] { stile::ImportanceProfile::load(path); }),
             Contains(path.string() + ": the importance profile is not valid JSON"));
  CHECK_THAT(error_of([&] { stile::load_importance(dir.path / "missing.json"); }),
             Contains("missing.json: cannot read the importance profile"));
}
