#pragma once
// What the planner decides for a request (plan/planner.hpp makes it; the engine runs it), and the
// importance order it plans by. Light: the engine's API header includes it.
#include <compare>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "stile/model/submodel.hpp"

namespace stile {

// One shard of one layer, without a bitwidth: a position in the importance order.
struct LayerShard {
  std::size_t layer = 0;
  std::size_t shard = 0;
  auto operator<=>(const LayerShard&) const = default;
};

// (layer, shard) pairs from most to least important.
using ImportanceOrder = std::vector<LayerShard>;

struct ElasticPlan {
  SubmodelPlan submodel;       // each layer's shards in importance order
  std::set<ShardKey> preload;  // the versions the preload buffer should hold
  unsigned preload_bits = 0;   // their bitwidth
  std::vector<double> aib_ms;  // AIB(0..n-1) after every debit
  double head_start_ms = 0;    // the slack credited to AIB(0) (0 with count_slack off)
  double compute_ms = 0;       // sum of T_comp over the layers, at the chosen bits
  double estimated_ms = 0;     // estimate_pipeline(slots, preload)
  double estimated_compute_ms = 0;  // its compute part (T_comp' for layers that wait for their read)
  bool valid = false;          // every AIB >= 0 (and, check_pipeline, estimated_ms <= T);
                               // with no target only informative (no head start, no deadline)
  bool meets_target = false;   // valid and compute_ms <= T (always true with no target)
  std::size_t length_bucket = 0;
  std::size_t word_rows = 0;  // the word-embedding rows the request reads, whose time came off T
  std::size_t compute_layers = 0, compute_shards = 0;  // stage 1's n x m
  std::size_t dropped_shards = 0, dropped_layers = 0;  // by the shrink
  unsigned uniform_bits = 0;                           // pass 1's bitwidth for the non-preloaded shards
  std::size_t upgrades = 0;                            // shards pass 2 raised
  std::string explain;                                 // one line a person can read

  std::size_t layers() const { return submodel.layers.size(); }
  std::size_t shards() const {
    std::size_t s = 0;
    for (const auto& layer : submodel.layers) s += layer.size();
    return s;
  }
};

}  // namespace stile
