#pragma once
// Measuring the importance profile of a shard store (its file format, ImportanceProfile, is
// plan/importance.hpp): how much each shard matters to a task, as accuracy on a calibration set
// (never the evaluation set).
//
// Measurement: the base configuration is the whole model with every shard at the lowest stored
// bitwidth (2). For each (layer, shard), that one shard is raised to 32 bits, the rest stay at 2,
// and a fixed classification head (the gold head: trained on the fp32 model's embeddings,
// model/heads_file.hpp) classifies the calibration sentences. A shard whose precision matters
// more raises accuracy more.
//
// Ranking (ours): on 1000 sentences, single-shard upgrades move accuracy by a few sentences, so
// many shards tie. Shards are ranked by correct count, ties broken by the mean log-probability the
// head gives the true label (continuous, so it separates shards that flip no decision but move
// the head's confidence), then by (layer, shard) so the order is total. The per-layer ranking and
// the global order follow the same key; restricted to one layer, the global order is that layer's
// ranking (what the planner requires).
//
// Cost: the hidden states below the raised shard's layer equal the base run's, so each
// configuration starts at its layer from the base run's states: per batch of MiniLM, 6 (base) +
// 6 (full precision, for reference) + 12 * (6 + 5 + ... + 1) = 264 layer runs instead of
// 6 + 6 + 72 * 6 = 444 (calibrate/layerwise.hpp).
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/calibrate/layerwise.hpp"
#include "stile/calibrate/train_head.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/model/submodel.hpp"
#include "stile/plan/importance.hpp"
#include "stile/plan/planner.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile {

// The per-layer ranking and the global order from scores[layer][shard] (see the top: correct
// count, then mean log-probability, then layer and shard; all descending importance).
inline ShardImportance rank_importance(const std::vector<std::vector<HeadScore>>& scores) {
  ImportanceOrder all;
  for (std::size_t l = 0; l < scores.size(); ++l) {
    for (std::size_t s = 0; s < scores[l].size(); ++s) all.push_back({l, s});
  }
  auto more_important = [&](const LayerShard& a, const LayerShard& b) {
    const HeadScore& x = scores[a.layer][a.shard];
    const HeadScore& y = scores[b.layer][b.shard];
    if (x.correct != y.correct) return x.correct > y.correct;
    if (x.mean_log_prob != y.mean_log_prob) return x.mean_log_prob > y.mean_log_prob;
    return a < b;
  };
  std::sort(all.begin(), all.end(), more_important);
  ShardImportance out;
  out.ranking.resize(scores.size());
  for (const LayerShard& ls : all) out.ranking[ls.layer].push_back(ls.shard);
  out.order = std::move(all);
  return out;
}

struct ImportanceOptions {
  unsigned base_bits = 0;      // 0: the store's lowest bitwidth
  unsigned raised_bits = 0;    // 0: the store's highest
  std::size_t batch = 64;      // sentences per layer run
  ThreadPool* pool = nullptr;  // null: the default pool
  // Called after each configuration of each batch: (done, total).
  std::function<void(std::size_t, std::size_t)> progress;
};

// Measures the importance profile of `store` on `sentences` (tokenized) with `labels`, classified
// by `head` over mean-pooled, L2-normalized embeddings. The caller fills in split and head name.
inline ImportanceProfile profile_importance(const ShardStore& store, std::span<const Encoding> sentences,
                                            std::span<const std::size_t> labels, const LinearHead& head,
                                            const ImportanceOptions& options = {}) {
  const std::size_t N = store.num_layers(), M = store.shards_per_layer(), d = store.config().hidden;
  require(!sentences.empty() && sentences.size() == labels.size(),
          "importance: " + std::to_string(sentences.size()) + " sentences and " + std::to_string(labels.size()) +
              " labels (need the same number, at least one)");
  require(options.batch >= 1, "importance: batch must be at least 1");
  head.check(d);
  for (const std::size_t y : labels) {
    require(y < head.classes(), "importance: label " + std::to_string(y) + " is outside the head's classes");
  }
  ImportanceProfile p;
  p.store = std::filesystem::path(store.name()).filename().string();
  p.num_layers = N;
  p.shards_per_layer = M;
  p.sentences = sentences.size();
  p.base_bits = options.base_bits != 0 ? options.base_bits : store.bits().front();
  p.raised_bits = options.raised_bits != 0 ? options.raised_bits : store.bits().back();
  require(store.has_bits(p.base_bits) && store.has_bits(p.raised_bits),
          "importance: the store " + store.name() + " lacks " + std::to_string(p.base_bits) + " or " +
              std::to_string(p.raised_bits) + " bits");
  require(p.base_bits != p.raised_bits, "importance: base and raised bitwidths are the same");

  ThreadPool& pool = options.pool != nullptr ? *options.pool : default_thread_pool();
  LayerwiseBert bert(store);
  std::vector<ShardChoice> base_layer, full_layer;
  for (std::size_t s = 0; s < M; ++s) {
    base_layer.push_back({s, p.base_bits});
    full_layer.push_back({s, p.raised_bits});
  }
  // Sums per configuration, in batch order (deterministic).
  struct Sum {
    std::size_t correct = 0;
    double log_prob = 0;
  };
  Sum base, full;
  std::vector<std::vector<Sum>> raised(N, std::vector<Sum>(M));
  auto score = [&](const HiddenBatch& x, std::span<const std::size_t> y, Sum& sum) {
    const std::vector<float> e = mean_pooled_normalized(x, d);
    const HeadScore s = score_head(head, e, y);
    sum.correct += s.correct;
    sum.log_prob += s.mean_log_prob * double(y.size());
  };
  const std::size_t batches = (sentences.size() + options.batch - 1) / options.batch;
  const std::size_t per_batch = 2 + N * M, total = batches * per_batch;
  std::size_t done = 0;
  auto tick = [&] {
    ++done;
    if (options.progress) options.progress(done, total);
  };
  for (std::size_t b = 0; b < batches; ++b) {
    const std::size_t begin = b * options.batch, end = std::min(sentences.size(), begin + options.batch);
    const std::span<const std::size_t> y = labels.subspan(begin, end - begin);
    // states[l]: the base configuration's input to layer l.
    std::vector<HiddenBatch> states;
    states.push_back(bert.embed(sentences.subspan(begin, end - begin)));
    for (std::size_t l = 0; l < N; ++l) {
      HiddenBatch next = states.back();
      bert.run_layer(l, base_layer, next, pool);
      states.push_back(std::move(next));
    }
    score(states.back(), y, base);
    tick();
    HiddenBatch x = states.front();
    for (std::size_t l = 0; l < N; ++l) bert.run_layer(l, full_layer, x, pool);
    score(x, y, full);
    tick();
    for (std::size_t l = 0; l < N; ++l) {
      for (std::size_t s = 0; s < M; ++s) {
        std::vector<ShardChoice> one = base_layer;
        one[s].bits = p.raised_bits;
        x = states[l];
        bert.run_layer(l, one, x, pool);
        for (std::size_t k = l + 1; k < N; ++k) bert.run_layer(k, base_layer, x, pool);
        score(x, y, raised[l][s]);
        tick();
      }
    }
  }
  const double n = double(sentences.size());
  auto finish = [&](const Sum& s) {
    HeadScore h;
    h.correct = s.correct;
    h.total = sentences.size();
    h.mean_log_prob = s.log_prob / n;
    return h;
  };
  p.base = finish(base);
  p.full = finish(full);
  p.shards.assign(N, {});
  for (std::size_t l = 0; l < N; ++l) {
    for (std::size_t s = 0; s < M; ++s) p.shards[l].push_back(finish(raised[l][s]));
  }
  ShardImportance ranked = rank_importance(p.shards);
  p.ranking = std::move(ranked.ranking);
  p.order = std::move(ranked.order);
  return p;
}

}  // namespace stile
