#pragma once
// Online re-profiling: how far a device's real times have drifted from its profile. The profile
// is measured once, on a quiet device; an app's board is later busier (the app's own threads on
// the same cores, another reader on the same flash), and a plan made from the quiet profile then
// misses its deadlines. After each request the engine hands its timeline here; the tracker
// compares the measured compute and IO with what the profile says they cost and keeps, for each,
// a high quantile (90%) of the ratio over the last `window` requests: a deadline is met or missed
// by the slow requests, and on a busy device the ratio spreads (docs/design-notes.md), so a
// plan sized for the median ratio leaves the slower half of the requests without margin. Over 15 requests the 90% quantile is the second largest ratio: one late read,
// 10-100x, moves it not at all. The engine re-plans with the profile scaled by these ratios when
// either has moved more than `replan_change` from the scale it plans with now
// (EngineOptions::reprofile).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <deque>
#include <vector>

#include "stile/plan/device_profile.hpp"
#include "stile/plan/pipeline_estimate.hpp"
#include "stile/pipeline/timeline.hpp"

namespace stile {

struct LoadScale {
  double io = 1, compute = 1;  // measured / profiled
};

class LoadTracker {
 public:
  explicit LoadTracker(std::size_t window = 15, double replan_change = 0.05, double quantile = 0.9)
      : window_(std::max<std::size_t>(window, 1)), replan_change_(replan_change), quantile_(std::clamp(quantile, 0.0, 1.0)) {}

  // One request: its timeline, and the profile's estimate of its layers' compute (the plan's
  // compute_ms, from the unscaled profile). IO is compared read by read: the profile's cost line
  // (latency per request + bytes / bandwidth) for the requests and bytes the layers really read.
  void observe(const DeviceProfile& base, const Timeline& t, double profiled_compute_ms) {
    // A conversion kept for later requests is not the compute the profile timed.
    const double compute = t.compute_ms() - t.conversion_ms();
    if (profiled_compute_ms > 0 && compute > 0) push(compute_, compute / profiled_compute_ms);
    const ReadCostLine line = read_cost_line(base);
    double read_ms = 0, estimated_ms = 0;
    for (const LayerTimes& l : t.layers) {
      if (l.reads == 0) continue;
      read_ms += l.read_end_ms - l.io_start_ms;
      estimated_ms += static_cast<double>(l.reads) * line.latency_ms + static_cast<double>(l.bytes_read) * line.ms_per_byte;
    }
    if (estimated_ms > 0 && read_ms > 0) push(io_, read_ms / estimated_ms);
  }

  // The smoothed ratios now (1 where nothing was observed yet).
  LoadScale measured() const { return {quantile(io_), quantile(compute_)}; }

  // Whether `measured()` has moved from `applied` by more than the re-plan threshold.
  bool should_replan(const LoadScale& applied) const {
    const LoadScale now = measured();
    const auto moved = [&](double a, double b) { return std::abs(a - b) > replan_change_ * b; };
    return moved(now.io, applied.io) || moved(now.compute, applied.compute);
  }

  // `base` with its IO and compute times scaled.
  static DeviceProfile scaled(DeviceProfile base, const LoadScale& s) {
    for (auto* times : {&base.io_ms, &base.layer_io_ms}) {
      for (double& t : *times) t *= s.io;
    }
    for (auto* table : {&base.compute_ms, &base.compute_after_read_ms}) {
      for (auto& per_length : *table) {
        for (auto& per_m : per_length) {
          for (double& t : per_m) t *= s.compute;
        }
      }
    }
    return base;
  }

 private:
  void push(std::deque<double>& q, double ratio) {
    // Bounded: a ratio past these says the measurement, not the device, went wrong.
    q.push_back(std::clamp(ratio, 0.25, 20.0));
    if (q.size() > window_) q.pop_front();
  }
  // The ceil(quantile * n)-th smallest of the window (1 where nothing was observed yet).
  double quantile(const std::deque<double>& q) const {
    if (q.empty()) return 1;
    std::vector<double> v(q.begin(), q.end());
    const auto rank = static_cast<std::size_t>(std::ceil(quantile_ * static_cast<double>(v.size())));
    const std::size_t at = std::min(v.size() - 1, rank > 0 ? rank - 1 : 0);
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
    return v[at];
  }

  std::size_t window_;
  double replan_change_;
  double quantile_;
  std::deque<double> io_, compute_;
};

}  // namespace stile
