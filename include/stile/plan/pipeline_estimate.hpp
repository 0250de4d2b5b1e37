#pragma once
// What a plan will cost on this device, from its profile: the layer pipeline replayed on the
// profiled times. IO reads the layers' non-preloaded shards one after another; IO of layer k waits
// for a working-buffer slot (compute of layer k - slots done); compute of layer k starts when its
// IO and compute of layer k-1 are done.
//
// A layer's IO time: by default each version costs its profiled T_io (one read each). The engine
// reads versions that lie next to each other in the file as one request, so a store's layer IO
// model (layer_io_model) charges the per-request latency once per contiguous run: on emulated
// eMMC twelve 4-bit shards of a MiniLM layer cost 12.5 ms in one read against 17.0 ms in twelve
// (docs/design-notes.md).
//
// A layer's compute time: T_comp' (the profile's compute right after a read) when it waits for its
// own IO, as a layer computed on flash-read weights does (threads idle through the stall, weights
// just written to memory by the device); also for the first layer (its threads idled through the
// word rows' reads) and for a layer whose versions are all preloaded (held since the last request,
// whose reads and activations have since passed through the caches: measured at 0.86x T_comp'
// and 1.43x T_comp, docs/design-notes.md). T_comp only when a layer follows the previous
// layer's compute without waiting on versions read ahead.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <set>
#include <span>
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
  double compute_ms = 0;  // the layers' compute, summed (T_comp or T_comp' per layer, as above)
};

// The IO time of reading `versions` of layer `layer` (empty function: the sum of their T_io).
using LayerIoTime = std::function<double(std::size_t layer, std::span<const ShardChoice> versions)>;

inline double layer_io_ms(const DeviceProfile& profile, const LayerIoTime& layer_io, std::size_t layer,
                          std::span<const ShardChoice> versions) {
  if (versions.empty()) return 0;
  if (layer_io) return layer_io(layer, versions);
  double t = 0;
  for (const ShardChoice& c : versions) t += profile.io_ms_at(c.bits);
  return t;
}

// The versions of layer k that are read (not preloaded).
inline std::vector<ShardChoice> versions_to_read(const std::vector<ShardChoice>& layer, std::size_t k,
                                                 const std::set<ShardKey>& preloaded) {
  std::vector<ShardChoice> out;
  for (const ShardChoice& c : layer) {
    if (preloaded.count({k, c.shard, c.bits}) == 0) out.push_back(c);
  }
  return out;
}

inline PipelineEstimate estimate_pipeline(const DeviceProfile& profile, const SubmodelPlan& plan, std::size_t tokens,
                                          std::size_t slots, const std::set<ShardKey>& preloaded = {},
                                          const LayerIoTime& layer_io = {}) {
  require(slots >= 1, "pipeline estimate: at least one working-buffer slot is needed");
  PipelineEstimate e;
  const std::size_t n = plan.layers.size();
  std::vector<double> compute_end(n, 0.0);
  double io_end = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double io = layer_io_ms(profile, layer_io, k, versions_to_read(plan.layers[k], k, preloaded));
    unsigned widest = 0;  // a layer's compute is profiled at one bitwidth: its widest shard's (the slowest decode)
    for (const ShardChoice& c : plan.layers[k]) widest = std::max(widest, c.bits);
    const double io_start = std::max(io_end, k >= slots ? compute_end[k - slots] : 0.0);
    io_end = io_start + io;
    e.io_ms += io;
    const double free_at = k == 0 ? 0.0 : compute_end[k - 1];
    const double start = std::max(free_at, io_end);
    e.stall_ms += start - free_at;
    const bool read_ahead = k > 0 && io > 0 && io_end < free_at;
    const std::size_t m = plan.layers[k].size();
    const double compute = read_ahead ? profile.compute_ms_at(widest, tokens, m)
                                      : profile.compute_after_read_ms_at(widest, tokens, m);
    e.compute_ms += compute;
    compute_end[k] = start + compute;
  }
  e.total_ms = n == 0 ? 0.0 : compute_end.back();
  return e;
}

// A read costs about latency per request + bytes / bandwidth: a line fitted (least squares) to
// the profile's reads. Without layer reads, the points are the single versions (T_io, one request
// each: the line through them; with one bitwidth only, its T_io scaled by size, no latency term).
// With them (T_io,layer: requests and bytes per layer read), those points join the fit, which then
// takes the bandwidth from reads of the engine's size: single 40-600 KB reads on fast storage are
// mostly latency, and their scatter can make a 6-bit version's transfer look cheaper than a 2-bit
// one's (docs/design-notes.md, "The read cost line from whole-layer reads").
struct ReadCostLine {
  double latency_ms = 0;  // per request
  double ms_per_byte = 0;
};
inline ReadCostLine read_cost_line(const DeviceProfile& p) {
  require(!p.bits.empty() && p.io_ms.size() == p.bits.size() && p.shard_bytes.size() == p.bits.size(),
          "row read estimate: the device profile has no IO times");
  const bool layers = !p.layer_io_ms.empty();
  // Points (requests r, bytes x, ms y); minimize sum (y - r latency - x per_byte)^2.
  double srr = 0, srx = 0, sxx = 0, sry = 0, sxy = 0;
  const auto add = [&](double r, double x, double y) {
    srr += r * r;
    srx += r * x;
    sxx += x * x;
    sry += r * y;
    sxy += x * y;
  };
  for (std::size_t i = 0; i < p.bits.size(); ++i) {
    add(1.0, p.shard_bytes[i], p.io_ms[i]);
    if (layers) add(p.layer_requests[i], p.layer_bytes[i], p.layer_io_ms[i]);
  }
  // det = 0 when every point has the same bytes per request (one bitwidth, no layer reads that
  // merge requests): bytes alone then, through the origin.
  const double det = srr * sxx - srx * srx;
  if (!(det > 1e-9 * srr * sxx)) return {0.0, sxy / std::max(sxx, 1.0)};
  const double per_byte = std::max(0.0, (srr * sxy - srx * sry) / det);
  // Never more than the cheapest measured read: each version then keeps a transfer time >= 0.
  const double latency =
      std::max(0.0, std::min((sry - srx * per_byte) / srr, *std::min_element(p.io_ms.begin(), p.io_ms.end())));
  return {latency, per_byte};
}

// The time to read one `block_bytes` block (a word-embedding row's aligned block under O_DIRECT).
inline double estimated_row_read_ms(const DeviceProfile& p, double block_bytes = 4096) {
  const ReadCostLine line = read_cost_line(p);
  return line.latency_ms + line.ms_per_byte * block_bytes;
}

// A store's layer IO model: `read_runs(layer, versions)` (ShardStore::read_runs, the engine's
// requests) contiguous requests, each paying the line's per-request latency once, and every
// version its transfer: with layer reads in the profile, its mean bytes at its bitwidth on the
// line; without, its T_io less the latency (with one request per version, the default sum
// exactly). Holds a copy of the profile (a few KB).
inline LayerIoTime layer_io_model(const DeviceProfile& profile,
                                  std::function<std::size_t(std::size_t, std::span<const ShardChoice>)> read_runs) {
  const ReadCostLine line = read_cost_line(profile);
  return [profile, line, read_runs = std::move(read_runs)](std::size_t layer, std::span<const ShardChoice> versions) {
    double t = static_cast<double>(read_runs(layer, versions)) * line.latency_ms;
    for (const ShardChoice& c : versions) {
      t += profile.layer_io_ms.empty() ? profile.io_ms_at(c.bits) - line.latency_ms
                                       : profile.shard_bytes_at(c.bits) * line.ms_per_byte;
    }
    return t;
  };
}

}  // namespace stile
