#pragma once
// The classification heads of a shard store, one per submodel shape, in one JSON file beside the
// store (STORE.heads.json, written by tools/train_heads). A head is fit to the embeddings of
// one submodel, so a submodel of another shape needs its own.
//
//   {
//     "format": "stile-heads",                  exactly this
//     "version": 2,                             2 added "calibration_accuracy" (version 1 files:
//                                               run tools/train_heads again)
//     "store": "minilm.stile",                  the shard store's file name
//     "num_layers": 6, "shards_per_layer": 12,  the store's shape (bounds the keys below)
//     "split": {"seed": 20261123, "train": 8000, "calibration": 1000, "rows": 65349},
//                                               Sst2Split (model/data_split.hpp; rows: its row
//                                               count, so another train.tsv is noticed)
//     "heads": {
//       "gold": {...},                          the full model, every shard at 32 bits
//       "6x12": {...}, "4x8": {...}, ...        n layers x m shards per layer, all at 32 bits
//     }
//   }
//
// Each head: the keys of head_to_json (model/linear_head.hpp: labels, weight, bias) and
//   "train_accuracy": x                         on its own training rows
//   "calibration_accuracy": x                   on the split's calibration rows, which no head is
//                                               fit to: what the planner compares shapes by
//   "ranking": [[...], ...] or null             the per-layer shard ranking whose top m shards the
//                                               submodel kept (null: shards 0..m-1; the gold head
//                                               keeps all shards, so null)
// Shape keys: "gold" or "<n>x<m>" with 1 <= n <= num_layers, 1 <= m <= shards_per_layer; a ranking
// is num_layers permutations of 0..shards_per_layer-1. Unknown keys are refused. Errors are
// "stile: <file>: <problem>".
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/model/data_split.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/model/submodel.hpp"

namespace stile {

inline constexpr std::string_view kHeadsFormatName = "stile-heads";
inline constexpr std::uint64_t kHeadsVersion = 2;

// The split a heads file was trained on: Sst2Split and the row count of the train.tsv it split.
struct RecordedSplit {
  Sst2Split split;
  std::size_t rows = 0;
  bool operator==(const RecordedSplit&) const = default;
};

struct StoredHead {
  LinearHead head;
  double train_accuracy = 0;
  double calibration_accuracy = 0;
  ShardRanking ranking;  // empty: shards 0..m-1 (or the whole model)
};

// "<n>x<m>".
inline std::string shape_key(std::size_t layers, std::size_t shards) {
  return std::to_string(layers) + "x" + std::to_string(shards);
}

// Parses "<n>x<m>" (decimal, no sign or leading zero); false when `key` is not one.
inline bool parse_shape_key(std::string_view key, std::size_t& layers, std::size_t& shards) {
  const std::size_t x = key.find('x');
  if (x == std::string_view::npos) return false;
  auto number = [](std::string_view s, std::size_t& out) {
    if (s.empty() || s.size() > 6 || s[0] == '0') return false;
    out = 0;
    for (const char ch : s) {
      if (ch < '0' || ch > '9') return false;
      out = out * 10 + static_cast<std::size_t>(ch - '0');
    }
    return true;
  };
  return number(key.substr(0, x), layers) && number(key.substr(x + 1), shards);
}

// STORE.heads.json beside the store.
inline std::filesystem::path heads_path_for(const std::filesystem::path& store) {
  std::filesystem::path p = store;
  p += ".heads.json";
  return p;
}

namespace heads_detail {

inline constexpr std::uintmax_t kMaxBytes = std::uintmax_t{256} << 20;  // ~80 shapes of MiniLM are ~1.5 MB
inline constexpr int kMaxJsonDepth = 8;

}  // namespace heads_detail

// What is wrong with `ranking` as `layers` permutations of 0..shards-1; empty when nothing is.
inline std::string ranking_problem(const ShardRanking& ranking, std::size_t layers, std::size_t shards) {
  if (ranking.size() != layers) return concat("the ranking has ", ranking.size(), " layers, expected ", layers);
  for (std::size_t l = 0; l < layers; ++l) {
    if (ranking[l].size() != shards) {
      return concat("the ranking of layer ", l, " has ", ranking[l].size(), " shards, expected ", shards);
    }
    std::vector<bool> seen(shards, false);
    for (const std::size_t s : ranking[l]) {
      if (s >= shards || seen[s]) {
        return concat("the ranking of layer ", l, " is not a permutation of 0..", shards - 1);
      }
      seen[s] = true;
    }
  }
  return {};
}

// Throws stile::Error "stile: <what>: <problem>" unless `ranking` is complete (ranking_problem).
inline void check_full_ranking(const ShardRanking& ranking, std::size_t layers, std::size_t shards,
                               std::string_view what) {
  const std::string problem = ranking_problem(ranking, layers, shards);
  if (!problem.empty()) throw Error(concat("stile: ", what, ": ", problem));
}

// A ranking from JSON ([[...], ...] of whole numbers); shape checked by check_full_ranking.
inline ShardRanking ranking_from_json(const nlohmann::json& v, std::size_t layers, std::size_t shards,
                                      std::string_view what, std::string_view file) {
  if (!v.is_array()) fail_in_file(file, what, " must be an array of per-layer arrays, got ", json_excerpt(v));
  ShardRanking r;
  for (const auto& layer : v) {
    if (!layer.is_array()) fail_in_file(file, what, " must hold arrays, got ", json_excerpt(layer));
    std::vector<std::size_t>& out = r.emplace_back();
    for (const auto& s : layer) {
      if (!s.is_number_unsigned() && !(s.is_number_integer() && s.get<std::int64_t>() >= 0)) {
        fail_in_file(file, what, " must hold whole numbers >= 0, got ", json_excerpt(s));
      }
      const auto x = s.get<std::uint64_t>();
      out.push_back(x > shards ? shards : static_cast<std::size_t>(x));  // out of range: caught below
    }
  }
  const std::string problem = ranking_problem(r, layers, shards);
  if (!problem.empty()) fail_in_file(file, what, ": ", problem);
  return r;
}

inline nlohmann::json recorded_split_to_json(const RecordedSplit& s) {
  return nlohmann::json{
      {"seed", s.split.seed}, {"train", s.split.train}, {"calibration", s.split.calibration}, {"rows", s.rows}};
}

// {"seed", "train", "calibration", "rows"}, the parts fitting in the rows.
inline RecordedSplit recorded_split_from_json(const nlohmann::json& split, std::string_view file) {
  if (!split.is_object()) fail_in_file(file, "\"split\" must be an object, got ", json_excerpt(split));
  constexpr std::string_view where = "\"split\"";
  json_only_keys(split, {"seed", "train", "calibration", "rows"}, where, file);
  RecordedSplit r;
  r.split.seed = json_whole(json_member(split, "seed", where, file), "\"split\".\"seed\"", "", file);
  r.split.train =
      static_cast<std::size_t>(json_whole(json_member(split, "train", where, file), "\"split\".\"train\"", "", file));
  r.split.calibration = static_cast<std::size_t>(
      json_whole(json_member(split, "calibration", where, file), "\"split\".\"calibration\"", "", file));
  r.rows =
      static_cast<std::size_t>(json_whole(json_member(split, "rows", where, file), "\"split\".\"rows\"", "", file));
  if (r.split.train > r.rows || r.split.calibration > r.rows - r.split.train) {
    fail_in_file(file, "\"split\": ", r.split.train, " training + ", r.split.calibration,
                 " calibration rows do not fit in ", r.rows, " rows");
  }
  return r;
}

struct HeadsFile {
  std::string store;  // the store's file name
  std::size_t num_layers = 0, shards_per_layer = 0;
  RecordedSplit split;
  std::map<std::string, StoredHead> heads;  // "gold", "<n>x<m>"

  // The head stored under `key`; a missing one is an Error naming `file` and the keys there are.
  const StoredHead& at(const std::string& key, std::string_view file = "heads") const {
    const auto it = heads.find(key);
    if (it == heads.end()) {
      std::string have;
      for (const auto& [k, h] : heads) have += (have.empty() ? "" : ", ") + k;
      fail_in_file(file, "has no head \"", key, "\" (it has: ", have.empty() ? "none" : have,
                   "); tools/train_heads makes them");
    }
    return it->second;
  }

  // The head of `plan`'s shape: "<n>x<m>" when each of its n layers has m shards (the whole model
  // falls back to "gold"); null when the file has none, or when the widths are uneven (no head is
  // trained on such a submodel). `key`, when given, receives the key used.
  const StoredHead* find_for(const SubmodelPlan& plan, std::string* key = nullptr) const {
    if (plan.layers.empty()) return nullptr;
    const std::size_t m = plan.layers.front().size();
    for (const auto& layer : plan.layers) {
      if (layer.size() != m) return nullptr;
    }
    std::string k = shape_key(plan.layers.size(), m);
    auto it = heads.find(k);
    if (it == heads.end() && plan.layers.size() == num_layers && m == shards_per_layer) it = heads.find(k = "gold");
    if (it == heads.end()) return nullptr;
    if (key) *key = k;
    return &it->second;
  }

  // The calibration accuracy of each n x m shape's head, NaN where there is none: what
  // PlannerOptions::shape_accuracy takes.
  std::function<double(std::size_t, std::size_t)> shape_accuracy() const {
    std::map<std::pair<std::size_t, std::size_t>, double> table;
    for (const auto& [key, h] : heads) {
      std::size_t n = 0, m = 0;
      if (parse_shape_key(key, n, m)) table[{n, m}] = h.calibration_accuracy;
    }
    return [table = std::move(table)](std::size_t n, std::size_t m) {
      const auto it = table.find({n, m});
      return it == table.end() ? std::nan("") : it->second;
    };
  }

  nlohmann::json to_json() const {
    nlohmann::json hs = nlohmann::json::object();
    for (const auto& [key, h] : heads) {
      nlohmann::json j = head_to_json(h.head);
      j["train_accuracy"] = h.train_accuracy;
      j["calibration_accuracy"] = h.calibration_accuracy;
      j["ranking"] = h.ranking.empty() ? nlohmann::json(nullptr) : nlohmann::json(h.ranking);
      hs[key] = std::move(j);
    }
    return nlohmann::json{{"format", kHeadsFormatName},
                          {"version", kHeadsVersion},
                          {"store", store},
                          {"num_layers", num_layers},
                          {"shards_per_layer", shards_per_layer},
                          {"split", recorded_split_to_json(split)},
                          {"heads", std::move(hs)}};
  }

  static HeadsFile from_json(const nlohmann::json& j, std::string_view file) {
    if (!j.is_object()) fail_in_file(file, "must be a JSON object, got ", json_excerpt(j));
    json_only_keys(j, {"format", "version", "store", "num_layers", "shards_per_layer", "split", "heads"}, "", file);
    json_check_format(j, kHeadsFormatName, "a heads file", kHeadsVersion, "; tools/train_heads writes it", "", file);
    HeadsFile h;
    h.store = json_string_member(j, "store", "", file);
    const std::uint64_t layers = json_whole(json_member(j, "num_layers", "", file), "\"num_layers\"", "", file);
    const std::uint64_t shards =
        json_whole(json_member(j, "shards_per_layer", "", file), "\"shards_per_layer\"", "", file);
    if (layers < 1 || layers > 4096) fail_in_file(file, "\"num_layers\" = ", layers, " is outside 1..4096");
    if (shards < 1 || shards > 4096) fail_in_file(file, "\"shards_per_layer\" = ", shards, " is outside 1..4096");
    h.num_layers = static_cast<std::size_t>(layers);
    h.shards_per_layer = static_cast<std::size_t>(shards);

    h.split = recorded_split_from_json(json_member(j, "split", "", file), file);

    const nlohmann::json& heads = json_member(j, "heads", "", file);
    if (!heads.is_object()) fail_in_file(file, "\"heads\" must be an object, got ", json_excerpt(heads));
    std::size_t hidden = 0;
    for (const auto& [key, value] : heads.items()) {
      const std::string where = concat("head \"", std::string_view(key).substr(0, 40), "\"");
      std::size_t n = 0, m = 0;
      if (key != "gold") {
        if (!parse_shape_key(key, n, m)) {
          fail_in_file(file, where, ": the key must be \"gold\" or \"<layers>x<shards>\"");
        }
        if (n < 1 || n > h.num_layers || m < 1 || m > h.shards_per_layer) {
          fail_in_file(file, where, ": outside the store's ", h.num_layers, " x ", h.shards_per_layer);
        }
      }
      if (!value.is_object()) fail_in_file(file, where, ": must be a JSON object");
      nlohmann::json core = value;
      StoredHead stored;
      auto accuracy = [&](const char* name) {
        const auto acc = core.find(name);
        if (acc == core.end()) fail_in_file(file, where, ": missing \"", std::string_view(name), "\"");
        if (!acc->is_number() || !(acc->get<double>() >= 0 && acc->get<double>() <= 1)) {
          fail_in_file(file, where, ": \"", std::string_view(name), "\" must be a number in [0, 1], got ",
                       json_excerpt(*acc));
        }
        const double v = acc->get<double>();
        core.erase(acc);
        return v;
      };
      stored.train_accuracy = accuracy("train_accuracy");
      stored.calibration_accuracy = accuracy("calibration_accuracy");
      const auto ranking = core.find("ranking");
      if (ranking == core.end()) fail_in_file(file, where, ": missing \"ranking\" (null for none)");
      if (!ranking->is_null()) {
        stored.ranking =
            ranking_from_json(*ranking, h.num_layers, h.shards_per_layer, concat(where, ": \"ranking\""), file);
      }
      core.erase("ranking");
      stored.head = head_from_json(core, file, where);
      if (hidden == 0) hidden = stored.head.hidden();
      if (stored.head.hidden() != hidden) {
        fail_in_file(file, where, ": hidden size ", stored.head.hidden(), ", other heads have ", hidden);
      }
      h.heads.emplace(key, std::move(stored));
    }
    return h;
  }

  // Temporary file beside `path`, then rename: `path` is the complete new file or untouched.
  void save(const std::filesystem::path& path) const {
    std::string text;
    try {
      text = to_json().dump(1) + "\n";
    } catch (const nlohmann::json::exception& e) {
      fail_in_file(path.string(), "cannot write the heads: ", e.what());
    }
    write_file_atomically(path, text);
  }

  static HeadsFile load(const std::filesystem::path& path) {
    return from_json(read_json_file(path, heads_detail::kMaxBytes, heads_detail::kMaxJsonDepth, "the heads file"),
                     path.string());
  }
};

}  // namespace stile
