#pragma once
// The plans of the baselines the evaluation compares the elastic planner with (STI's baselines),
// each the largest n x m (max n*m, ties to the deeper submodel, as the planner's stage 1) whose
// time on the device profile fits the target:
//
//   Load&Exec        the submodel read whole at 32 bits, then run: n*m*T_io(32) + n*T_comp(32, m).
//   StdPL-X          the layer pipeline, every shard at X bits, no preload: estimate_pipeline with
//                    2 working-buffer slots.
//   (Load&Exec and StdPL-X take the same layer IO model as the planner, when given: a layer's
//   versions read together cost one latency per contiguous run.)
//   PreloadModel-X   the whole model held in memory at X bits, compute only: n*T_comp(X, m).
//
// Shards per layer: the m most important by the ranking (empty: shards 0..m-1). When not even
// 1 x 1 fits: 1 x 1, meets_target = false (a defined plan, like the planner's). target_ms <= 0:
// no target, the whole model. A bitwidth the profile lacks: the profile's error.
#include <cmath>
#include <cstddef>
#include <string>

#include "stile/core/error.hpp"
#include "stile/model/submodel.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/pipeline_estimate.hpp"
#include "stile/plan/planner.hpp"

namespace stile {

struct BaselinePlan {
  std::string name;  // "Load&Exec", "StdPL-4", "PreloadModel-6"
  SubmodelPlan submodel;
  double estimated_ms = 0;  // the baseline's time model above
  bool meets_target = false;
};

namespace baseline_detail {

template <class Time>
BaselinePlan largest_fitting(std::string name, const DeviceProfile& profile, double target_ms, unsigned bits,
                             const ShardRanking& ranking, Time&& time_of) {
  planner_detail::check_profile(profile);
  require(!std::isnan(target_ms), "baseline planner: the latency target is NaN");
  (void)profile.io_ms_at(bits);  // the profile's error when it lacks the bitwidth
  const std::size_t N = profile.num_layers, M = profile.shards_per_layer;
  std::size_t n = N, m = M;
  if (target_ms > 0) {
    const auto best = largest_submodel(N, M, [&](std::size_t nn, std::size_t mm) {
      return time_of(SubmodelPlan::uniform(nn, mm, bits, ranking)) <= target_ms + kBudgetToleranceMs;
    });
    n = best.first == 0 ? 1 : best.first;
    m = best.first == 0 ? 1 : best.second;
  }
  BaselinePlan out{std::move(name), SubmodelPlan::uniform(n, m, bits, ranking), 0, false};
  out.estimated_ms = time_of(out.submodel);
  out.meets_target = target_ms <= 0 || out.estimated_ms <= target_ms + kBudgetToleranceMs;
  return out;
}

}  // namespace baseline_detail

inline BaselinePlan plan_load_and_exec(const DeviceProfile& profile, std::size_t tokens, double target_ms,
                                       const ShardRanking& ranking = {}, const LayerIoTime& layer_io = {}) {
  return baseline_detail::largest_fitting("Load&Exec", profile, target_ms, 32, ranking, [&](const SubmodelPlan& p) {
    double t = 0;
    for (std::size_t k = 0; k < p.layers.size(); ++k) {
      t += layer_io_ms(profile, layer_io, k, p.layers[k]) + profile.compute_ms_at(32, tokens, p.layers[k].size());
    }
    return t;
  });
}

inline BaselinePlan plan_std_pipeline(const DeviceProfile& profile, std::size_t tokens, double target_ms, unsigned bits,
                                      const ShardRanking& ranking = {}, const LayerIoTime& layer_io = {}) {
  return baseline_detail::largest_fitting(
      "StdPL-" + std::to_string(bits), profile, target_ms, bits, ranking,
      [&](const SubmodelPlan& p) { return estimate_pipeline(profile, p, tokens, 2, {}, layer_io).total_ms; });
}

inline BaselinePlan plan_preload_model(const DeviceProfile& profile, std::size_t tokens, double target_ms,
                                       unsigned bits, const ShardRanking& ranking = {}) {
  return baseline_detail::largest_fitting("PreloadModel-" + std::to_string(bits), profile, target_ms, bits, ranking,
                                          [&](const SubmodelPlan& p) {
                                            double t = 0;
                                            for (const auto& layer : p.layers) {
                                              t += profile.compute_ms_at(bits, tokens, layer.size());
                                            }
                                            return t;
                                          });
}

}  // namespace stile
