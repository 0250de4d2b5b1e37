#pragma once
// The importance profile of a shard store: how much each shard matters to a task, measured as
// accuracy on a calibration set (never the evaluation set). The planners (plan/planner.hpp) use
// it to choose which m shards of a layer a width-m submodel keeps and which shards get more bits.
//
// It is measured offline, by calibrate/importance.hpp (how, and how shards are ranked, is
// described there); this header is the file format the runtime reads.
//
// The JSON file (STORE.importance.json, tools/importance):
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
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/strict_json.hpp"
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
    fail_in_file(file, what, ": \"mean_log_prob\" must be a finite number <= 0, got ", json_excerpt(lp));
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
  json_check_format(j, kImportanceFormatName, "an importance profile", kImportanceVersion, "", "", file);
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
  for (auto [key, out] :
       {std::pair<const char*, unsigned*>{"base_bits", &p.base_bits}, {"raised_bits", &p.raised_bits}}) {
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
  return from_json(
      read_json_file(path, importance_detail::kMaxBytes, importance_detail::kMaxJsonDepth, "the importance profile"),
      path.string());
}

// The ranking and global order of an importance profile file, for the planners and
// SubmodelPlan::uniform.
inline ShardImportance load_importance(const std::filesystem::path& path) {
  ImportanceProfile p = ImportanceProfile::load(path);
  return ShardImportance{std::move(p.ranking), std::move(p.order)};
}

}  // namespace stile
