#pragma once
// A submodel of an elastic model: its first n layers, and in each layer the chosen shards, each at
// one of the store's bitwidths. What the planner decides and the engine runs.
#include <algorithm>
#include <compare>
#include <cstddef>
#include <string>
#include <vector>

#include "stile/core/error.hpp"

namespace stile {

// One chosen shard of a layer: which shard, and at which stored bitwidth.
struct ShardChoice {
  std::size_t shard = 0;
  unsigned bits = 32;
  auto operator<=>(const ShardChoice&) const = default;
};

// One shard version of one layer.
struct ShardKey {
  std::size_t layer = 0;
  std::size_t shard = 0;
  unsigned bits = 0;
  auto operator<=>(const ShardKey&) const = default;
};

// Per layer, its shard ids from most to least important (an importance profile).
using ShardRanking = std::vector<std::vector<std::size_t>>;

// n = layers.size(); each layer's chosen shards in any order, each at most once.
struct SubmodelPlan {
  std::vector<std::vector<ShardChoice>> layers;
  bool operator==(const SubmodelPlan&) const = default;

  // n layers of m shards each, all at `bits`: the m most important shards of each layer when a
  // ranking is given, else shards 0..m-1.
  static SubmodelPlan uniform(std::size_t n, std::size_t m, unsigned bits, const ShardRanking& ranking = {}) {
    require(ranking.empty() || ranking.size() >= n, "submodel plan: the ranking covers " +
                                                        std::to_string(ranking.size()) + " layers, the plan " +
                                                        std::to_string(n));
    SubmodelPlan plan;
    plan.layers.resize(n);
    for (std::size_t l = 0; l < n; ++l) {
      for (std::size_t s = 0; s < m; ++s) {
        if (ranking.empty()) {
          plan.layers[l].push_back({s, bits});
        } else {
          require(s < ranking[l].size(), "submodel plan: layer " + std::to_string(l) + " ranks " +
                                             std::to_string(ranking[l].size()) + " shards, " + std::to_string(m) +
                                             " asked for");
          plan.layers[l].push_back({ranking[l][s], bits});
        }
      }
    }
    return plan;
  }
};

}  // namespace stile
