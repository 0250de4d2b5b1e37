#pragma once
// What a plan will cost on this device, from its profile: the layer pipeline replayed on the
// profiled times. IO reads the layers' non-preloaded shards one after another; IO of layer k waits
// for a working-buffer slot (compute of layer k - slots done); compute of layer k starts when its
// IO and compute of layer k-1 are done.
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

}  // namespace stile
