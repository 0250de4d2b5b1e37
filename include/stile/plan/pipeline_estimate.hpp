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

// The time to read one `block_bytes` block (a word-embedding row's aligned block under O_DIRECT)
// through the profiled storage: T_io is close to latency + bytes / bandwidth, so a line through
// the profile's (shard bytes, T_io) points, read at block_bytes. With one bitwidth only: its
// T_io scaled by size (no latency term).
inline double estimated_row_read_ms(const DeviceProfile& p, double block_bytes = 4096) {
  require(!p.bits.empty() && p.io_ms.size() == p.bits.size() && p.shard_bytes.size() == p.bits.size(),
          "row read estimate: the device profile has no IO times");
  if (p.bits.size() == 1) return p.io_ms[0] * block_bytes / std::max(1.0, p.shard_bytes[0]);
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < p.bits.size(); ++i) {
    mx += p.shard_bytes[i];
    my += p.io_ms[i];
  }
  mx /= static_cast<double>(p.bits.size());
  my /= static_cast<double>(p.bits.size());
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < p.bits.size(); ++i) {
    sxy += (p.shard_bytes[i] - mx) * (p.io_ms[i] - my);
    sxx += (p.shard_bytes[i] - mx) * (p.shard_bytes[i] - mx);
  }
  const double per_byte = sxx > 0 ? std::max(0.0, sxy / sxx) : 0.0;
  const double latency = std::max(0.0, my - per_byte * mx);
  return latency + per_byte * block_bytes;
}

}  // namespace stile
