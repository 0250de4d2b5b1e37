#pragma once
// What a plan will cost on this device, from its profile: the layer pipeline replayed on the
// profiled times. IO reads the layers' non-preloaded shards one after another; IO of layer k waits
// for a working-buffer slot (compute of layer k - slots done); compute of layer k starts when its
// IO and compute of layer k-1 are done. Also the trivial planner the engine uses until the
// two-stage planner lands: the whole model at the highest bitwidth the target allows.
#include <algorithm>
#include <cstddef>
#include <set>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/model/submodel.hpp"
#include "stile/pipeline/preload_buffer.hpp"
#include "stile/plan/device_profile.hpp"

namespace stile {

struct PipelineEstimate {
  double total_ms = 0;  // end of the last layer's compute (embeddings and pooling not included)
  double stall_ms = 0;  // compute waiting for IO, summed over layers
  double io_ms = 0;     // storage busy time
};

inline PipelineEstimate estimate_pipeline(const DeviceProfile& profile, const SubmodelPlan& plan, std::size_t tokens,
                                          std::size_t slots, const std::set<ShardKey>& preloaded = {}) {
  require(slots >= 1, "pipeline estimate: at least one working-buffer slot is needed");
  PipelineEstimate e;
  const std::size_t n = plan.layers.size();
  std::vector<double> compute_end(n, 0.0);
  double io_end = 0;
  for (std::size_t k = 0; k < n; ++k) {
    double io = 0;
    unsigned widest = 0;  // a layer's compute is profiled at one bitwidth: its widest shard's (the slowest decode)
    for (const ShardChoice& c : plan.layers[k]) {
      if (preloaded.count({k, c.shard, c.bits}) == 0) io += profile.io_ms_at(c.bits);
      widest = std::max(widest, c.bits);
    }
    const double io_start = std::max(io_end, k >= slots ? compute_end[k - slots] : 0.0);
    io_end = io_start + io;
    e.io_ms += io;
    const double free_at = k == 0 ? 0.0 : compute_end[k - 1];
    const double start = std::max(free_at, io_end);
    e.stall_ms += start - free_at;
    compute_end[k] = start + profile.compute_ms_at(widest, tokens, plan.layers[k].size());
  }
  e.total_ms = n == 0 ? 0.0 : compute_end.back();
  return e;
}

// Every layer with all its shards, at the highest stored bitwidth whose estimated pipelined time
// fits target_ms (the lowest when none does; the highest when target_ms <= 0, meaning no target).
inline SubmodelPlan plan_whole_model(const DeviceProfile& profile, std::size_t tokens, double target_ms,
                                     std::size_t slots, std::size_t preload_budget_bytes = 0) {
  require(!profile.bits.empty(), "whole-model planner: the device profile has no bitwidths");
  const std::size_t n = profile.num_layers, m = profile.shards_per_layer;
  for (auto it = profile.bits.rbegin(); it != profile.bits.rend(); ++it) {
    SubmodelPlan plan = SubmodelPlan::uniform(n, m, *it);
    if (target_ms <= 0) return plan;
    const std::size_t i = static_cast<std::size_t>(profile.bits.rend() - it) - 1;
    const auto bytes_of = [&](const ShardKey&) { return static_cast<std::size_t>(profile.shard_bytes[i]); };
    const std::set<ShardKey> preloaded = preload_set(plan, preload_budget_bytes, bytes_of);
    if (estimate_pipeline(profile, plan, tokens, slots, preloaded).total_ms <= target_ms) return plan;
  }
  return SubmodelPlan::uniform(n, m, profile.bits.front());
}

}  // namespace stile
