#pragma once
// The importance profile of a shard store: how much each shard matters to a task, measured as
// accuracy on a calibration set (never the evaluation set). The planners (plan/planner.hpp) use
// it to choose which m shards of a layer a width-m submodel keeps and which shards get more bits.
//
// Measurement: the base configuration is the whole model with every shard at the lowest stored
// bitwidth (2). For each (layer, shard), that one shard is raised to 32 bits, the rest stay at 2,
// and a fixed classification head (the gold head: trained on the fp32 model's embeddings,
// eval/heads_file.hpp) classifies the calibration sentences. A shard whose precision matters
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
// 6 + 6 + 72 * 6 = 444 (eval/layerwise.hpp).
//
// The JSON file (STORE.importance.json, examples/importance):
//   {
//     "format": "stile-importance", "version": 1,
//     "store": "minilm.stile", "num_layers": 6, "shards_per_layer": 12,
//     "split": {"seed", "train", "calibration", "rows"},   the calibration part was measured on
//     "head": "gold",                                      the head used
//     "sentences": 1000, "base_bits": 2, "raised_bits": 32,
//     "base": {"correct", "accuracy", "mean_log_prob"},    every shard at base_bits
//     "full": {...},                                       every shard at raised_bits (reference)
//     "shards": [[{...} per shard] per layer],             one shard raised
//     "ranking": [[shard ids, most important first] per layer],
//     "global_order": [[layer, shard], ...]                most important first
//   }
// The loader checks the structure strictly (counts within sentences, accuracy = correct /
// sentences, log-probabilities finite and <= 0, the ranking permutations, the global order a
// permutation of every (layer, shard) that agrees with the ranking layer by layer). It does not
// re-derive the ranking from the scores: a ranking measured another way may be stored in this
// format.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/calibrate/layerwise.hpp"
#include "stile/calibrate/train_head.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/model/submodel.hpp"
#include "stile/plan/planner.hpp"

namespace stile {

inline constexpr std::string_view kImportanceFormatName = "stile-importance";
inline constexpr std::uint64_t kImportanceVersion = 1;

struct ImportanceProfile {
  std::string store;
  std::size_t num_layers = 0, shards_per_layer = 0;
  RecordedSplit split;
  std::string head = "gold";
  std::size_t sentences = 0;
  unsigned base_bits = 2, raised_bits = 32;
  HeadScore base, full;
  std::vector<std::vector<HeadScore>> shards;  // [layer][shard]: that shard raised
  ShardRanking ranking;                        // per layer, most important first
  ImportanceOrder order;                       // all (layer, shard), most important first

  nlohmann::json to_json() const;
  static ImportanceProfile from_json(const nlohmann::json& j, std::string_view file);
  // Temporary file beside `path`, then rename.
  void save(const std::filesystem::path& path) const;
  static ImportanceProfile load(const std::filesystem::path& path);
};

// STORE.importance.json beside the store.
inline std::filesystem::path importance_path_for(const std::filesystem::path& store) {
  std::filesystem::path p = store;
  p += ".importance.json";
  return p;
}

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

// --- JSON ----------------------------------------------------------------------------------------

namespace importance_detail {

inline constexpr std::uintmax_t kMaxBytes = std::uintmax_t{64} << 20;
inline constexpr int kMaxJsonDepth = 8;

inline nlohmann::json score_to_json(const HeadScore& s) {
  return nlohmann::json{{"correct", s.correct}, {"accuracy", s.accuracy()}, {"mean_log_prob", s.mean_log_prob}};
}

inline HeadScore score_from_json(const nlohmann::json& v, std::size_t sentences, std::string_view what,
                                 std::string_view file) {
  if (!v.is_object()) fail_in_file(file, what, " must be an object, got ", json_excerpt(v));
  json_only_keys(v, {"correct", "accuracy", "mean_log_prob"}, what, file);
  HeadScore s;
  s.total = sentences;
  const std::uint64_t correct =
      json_whole(json_member(v, "correct", what, file), concat(what, ".\"correct\""), "", file);
  if (correct > sentences) fail_in_file(file, what, ": ", correct, " correct of ", sentences, " sentences");
  s.correct = static_cast<std::size_t>(correct);
  const nlohmann::json& acc = json_member(v, "accuracy", what, file);
  if (!acc.is_number() || std::abs(acc.get<double>() - s.accuracy()) > 1e-9) {
    fail_in_file(file, what, ": \"accuracy\" ", json_excerpt(acc), " is not correct / sentences");
  }
  const nlohmann::json& lp = json_member(v, "mean_log_prob", what, file);
  if (!lp.is_number() || !std::isfinite(lp.get<double>()) || lp.get<double>() > 0) {
    fail_in_file(file, what, ": \"mean_log_prob\" must be a finite number <= 0, got ",
                            json_excerpt(lp));
  }
  s.mean_log_prob = lp.get<double>();
  return s;
}

}  // namespace importance_detail

inline nlohmann::json ImportanceProfile::to_json() const {
  namespace d = importance_detail;
  nlohmann::json per_layer = nlohmann::json::array();
  for (const auto& layer : shards) {
    nlohmann::json row = nlohmann::json::array();
    for (const HeadScore& s : layer) row.push_back(d::score_to_json(s));
    per_layer.push_back(std::move(row));
  }
  nlohmann::json global = nlohmann::json::array();
  for (const LayerShard& ls : order) global.push_back({ls.layer, ls.shard});
  return nlohmann::json{{"format", kImportanceFormatName},
                        {"version", kImportanceVersion},
                        {"store", store},
                        {"num_layers", num_layers},
                        {"shards_per_layer", shards_per_layer},
                        {"split", recorded_split_to_json(split)},
                        {"head", head},
                        {"sentences", sentences},
                        {"base_bits", base_bits},
                        {"raised_bits", raised_bits},
                        {"base", d::score_to_json(base)},
                        {"full", d::score_to_json(full)},
                        {"shards", std::move(per_layer)},
                        {"ranking", ranking},
                        {"global_order", std::move(global)}};
}

inline ImportanceProfile ImportanceProfile::from_json(const nlohmann::json& j, std::string_view file) {
  namespace d = importance_detail;
  if (!j.is_object()) fail_in_file(file, "must be a JSON object, got ", json_excerpt(j));
  json_only_keys(j,
                 {"format", "version", "store", "num_layers", "shards_per_layer", "split", "head", "sentences",
                  "base_bits", "raised_bits", "base", "full", "shards", "ranking", "global_order"},
                 "", file);
  const nlohmann::json& format = json_member(j, "format", "", file);
  if (!format.is_string() || format.get<std::string>() != kImportanceFormatName) {
    fail_in_file(file, "\"format\" is ", json_excerpt(format), ", expected \"",
                            kImportanceFormatName, "\" (not an importance profile)");
  }
  const std::uint64_t version = json_whole(json_member(j, "version", "", file), "\"version\"", "", file);
  if (version != kImportanceVersion) {
    fail_in_file(file, "version ", version, " is not supported (this reader supports version ",
                            kImportanceVersion, ")");
  }
  ImportanceProfile p;
  for (auto [key, out] : {std::pair<const char*, std::string*>{"store", &p.store}, {"head", &p.head}}) {
    *out = json_string_member(j, key, "", file);
  }
  const std::uint64_t layers = json_whole(json_member(j, "num_layers", "", file), "\"num_layers\"", "", file);
  const std::uint64_t shards_n =
      json_whole(json_member(j, "shards_per_layer", "", file), "\"shards_per_layer\"", "", file);
  if (layers < 1 || layers > 4096) fail_in_file(file, "\"num_layers\" = ", layers, " is outside 1..4096");
  if (shards_n < 1 || shards_n > 4096) {
    fail_in_file(file, "\"shards_per_layer\" = ", shards_n, " is outside 1..4096");
  }
  const auto N = static_cast<std::size_t>(layers), M = static_cast<std::size_t>(shards_n);
  p.num_layers = N;
  p.shards_per_layer = M;
  p.split = recorded_split_from_json(json_member(j, "split", "", file), file);
  const std::uint64_t sentences = json_whole(json_member(j, "sentences", "", file), "\"sentences\"", "", file);
  if (sentences < 1 || sentences > (std::uint64_t{1} << 40)) {
    fail_in_file(file, "\"sentences\" = ", sentences, " must be at least 1");
  }
  p.sentences = static_cast<std::size_t>(sentences);
  for (auto [key, out] : {std::pair<const char*, unsigned*>{"base_bits", &p.base_bits}, {"raised_bits", &p.raised_bits}}) {
    const std::uint64_t b = json_whole(json_member(j, key, "", file), concat("\"", key, "\""), "", file);
    if (b < 1 || b > 32) fail_in_file(file, "\"", key, "\" = ", b, " is outside 1..32");
    *out = static_cast<unsigned>(b);
  }
  p.base = d::score_from_json(json_member(j, "base", "", file), p.sentences, "\"base\"", file);
  p.full = d::score_from_json(json_member(j, "full", "", file), p.sentences, "\"full\"", file);
  const nlohmann::json& shards = json_member(j, "shards", "", file);
  if (!shards.is_array() || shards.size() != N) {
    fail_in_file(file, "\"shards\" must be an array of ", N, " layers");
  }
  for (std::size_t l = 0; l < N; ++l) {
    if (!shards[l].is_array() || shards[l].size() != M) {
      fail_in_file(file, "\"shards\"[", l, "] must be an array of ", M, " scores");
    }
    std::vector<HeadScore>& row = p.shards.emplace_back();
    for (std::size_t s = 0; s < M; ++s) {
      row.push_back(d::score_from_json(shards[l][s], p.sentences, concat("\"shards\"[", l, "][", s, "]"), file));
    }
  }
  p.ranking = ranking_from_json(json_member(j, "ranking", "", file), N, M, "\"ranking\"", file);
  const nlohmann::json& global = json_member(j, "global_order", "", file);
  if (!global.is_array() || global.size() != N * M) {
    fail_in_file(file, "\"global_order\" must be an array of ", N * M, " [layer, shard] pairs");
  }
  std::set<LayerShard> seen;
  ShardRanking derived(N);
  for (std::size_t i = 0; i < global.size(); ++i) {
    const nlohmann::json& pair = global[i];
    const std::string what = concat("\"global_order\"[", i, "]");
    if (!pair.is_array() || pair.size() != 2) {
      fail_in_file(file, what, " must be a [layer, shard] pair, got ", json_excerpt(pair));
    }
    const std::uint64_t l = json_whole(pair[0], what, "", file), s = json_whole(pair[1], what, "", file);
    if (l >= N || s >= M) fail_in_file(file, what, " = [", l, ", ", s, "] is outside ", N, " x ", M);
    const LayerShard ls{static_cast<std::size_t>(l), static_cast<std::size_t>(s)};
    if (!seen.insert(ls).second) fail_in_file(file, what, " = [", l, ", ", s, "] appears twice");
    derived[ls.layer].push_back(ls.shard);
    p.order.push_back(ls);
  }
  for (std::size_t l = 0; l < N; ++l) {
    if (derived[l] != p.ranking[l]) {
      fail_in_file(file, "\"global_order\" ranks layer ", l, "'s shards differently from \"ranking\"");
    }
  }
  return p;
}

inline void ImportanceProfile::save(const std::filesystem::path& path) const {
  std::string text;
  try {
    text = to_json().dump(1) + "\n";
  } catch (const nlohmann::json::exception& e) {
    fail_in_file(path.string(), "cannot write the importance profile: ", e.what());
  }
  write_file_atomically(path, text);
}

inline ImportanceProfile ImportanceProfile::load(const std::filesystem::path& path) {
  return from_json(read_json_file(path, importance_detail::kMaxBytes, importance_detail::kMaxJsonDepth,
                                             "the importance profile"),
                   path.string());
}

// The ranking and global order of an importance profile file, for the planners and
// SubmodelPlan::uniform.
inline ShardImportance load_importance(const std::filesystem::path& path) {
  ImportanceProfile p = ImportanceProfile::load(path);
  return ShardImportance{std::move(p.ranking), std::move(p.order)};
}

}  // namespace stile
