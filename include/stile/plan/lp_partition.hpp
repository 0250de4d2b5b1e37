#pragma once
// The multi-device partitioner (Hepti's LP): which devices take part, in which mode, with how many
// whole heads and FFN neurons each (plan/layer_partition.hpp), from each device's measured profile.
// The latency model it minimizes: plan/dist_cost_model.hpp.
//
// solve_layer_partition: the relaxed shares as a linear program (minimize T_att + T_mlp subject to
// T_block >= each device's block time, shares summing to H and d_ff, 1D's memory rows), solved by
// COIN-OR CLP (Debian's coinor-libclp-dev, EPL-2.0; optional at build time: STILE_HAVE_CLP); the
// shares rounded to whole heads and neurons (from the LP's floors, each remaining unit to the
// device whose block time grows least: exact for these min-max blocks when compute dominates
// transfer); devices left with nothing dropped and the LP re-solved without them; the mode
// switched WS -> 1D -> 2D when a device's free memory no longer holds what the mode needs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/plan/dist_cost_model.hpp"
#include "stile/plan/layer_partition.hpp"

#if defined(STILE_HAVE_CLP)
#include <ClpSimplex.hpp>
#include <CoinPackedMatrix.hpp>
#endif

namespace stile {

constexpr bool lp_partition_available() noexcept {
#if defined(STILE_HAVE_CLP)
  return true;
#else
  return false;
#endif
}

struct LayerPartitionPlan {
  Partition partition;               // over all devices; a dropped device has no heads and no neurons
  std::vector<std::size_t> dropped;  // devices left out
  double predicted_seconds = 0;      // the model's T (2D: not modelled, 0)
  std::vector<double> lp_heads, lp_neurons;  // the last LP's relaxed shares (kept devices; empty for 2D)
  std::size_t lp_solves = 0;
  std::vector<std::string> notes;    // why a mode was left, which devices were dropped
};

#if defined(STILE_HAVE_CLP)

namespace lp_detail {

struct Relaxed {
  bool feasible = false;
  std::vector<double> heads, neurons;  // per device of `ids`
};

// The LP over the devices `ids` (indices into devices).
inline Relaxed solve_relaxed(const std::vector<DistDevice>& devices, const std::vector<std::size_t>& ids,
                             const DistLayerShape& L, DistMode mode) {
  const std::size_t n = ids.size();
  const int cols = static_cast<int>(2 * n + 2), ta = static_cast<int>(2 * n), tf = ta + 1;
  std::vector<int> row_index, col_index;
  std::vector<double> value, row_lo, row_hi;
  const auto entry = [&](int row, int col, double v) {
    row_index.push_back(row);
    col_index.push_back(col);
    value.push_back(v);
  };
  int row = 0;
  const double inf = COIN_DBL_MAX;
  for (std::size_t k = 0; k < n; ++k) {
    for (int block = 0; block < 2; ++block) {
      const BlockCost c = block_cost(devices[ids[k]], L, mode, block, n);
      entry(row, static_cast<int>(block == 0 ? k : n + k), c.slope);  // slope x - T <= -constant
      entry(row, block == 0 ? ta : tf, -1.0);
      row_lo.push_back(-inf);
      row_hi.push_back(-c.constant);
      ++row;
    }
  }
  for (int block = 0; block < 2; ++block) {  // shares sum to the layer's
    for (std::size_t k = 0; k < n; ++k) entry(row, static_cast<int>(block == 0 ? k : n + k), 1.0);
    const double total = static_cast<double>(block == 0 ? L.heads : L.ffn);
    row_lo.push_back(total);
    row_hi.push_back(total);
    ++row;
  }
  if (mode == DistMode::k1d) {  // what each device holds
    for (std::size_t k = 0; k < n; ++k) {
      entry(row, static_cast<int>(k), attn_bytes_per_head(L));
      entry(row, static_cast<int>(n + k), mlp_bytes_per_neuron(L));
      row_lo.push_back(-inf);
      row_hi.push_back(devices[ids[k]].free_bytes);
      ++row;
    }
  }
  std::vector<double> col_lo(static_cast<std::size_t>(cols), 0.0), col_hi(static_cast<std::size_t>(cols)), obj(static_cast<std::size_t>(cols), 0.0);
  for (std::size_t k = 0; k < n; ++k) {
    col_hi[k] = static_cast<double>(L.heads);
    col_hi[n + k] = static_cast<double>(L.ffn);
  }
  col_lo[static_cast<std::size_t>(ta)] = col_lo[static_cast<std::size_t>(tf)] = -inf;
  col_hi[static_cast<std::size_t>(ta)] = col_hi[static_cast<std::size_t>(tf)] = inf;
  obj[static_cast<std::size_t>(ta)] = obj[static_cast<std::size_t>(tf)] = 1.0;
  const CoinPackedMatrix matrix(false, row_index.data(), col_index.data(), value.data(),
                                static_cast<CoinBigIndex>(value.size()));
  ClpSimplex model;
  model.setLogLevel(0);
  model.loadProblem(matrix, col_lo.data(), col_hi.data(), obj.data(), row_lo.data(), row_hi.data());
  model.dual();
  Relaxed out;
  out.feasible = model.isProvenOptimal();
  if (!out.feasible) return out;
  const double* x = model.getColSolution();
  out.heads.assign(x, x + n);
  out.neurons.assign(x + n, x + 2 * n);
  return out;
}

// Whole units of one block from the relaxed shares: floors, then each remaining unit to the device
// whose block time after it is least (and whose memory still holds it). False if none can.
inline bool round_block(const std::vector<DistDevice>& devices, const std::vector<std::size_t>& ids,
                        const DistLayerShape& L, DistMode mode, int block, const std::vector<double>& relaxed,
                        std::size_t total, std::vector<std::size_t>& units, const std::vector<double>& used_bytes) {
  const std::size_t n = ids.size();
  const double unit_bytes = block == 0 ? attn_bytes_per_head(L) : mlp_bytes_per_neuron(L);
  units.assign(n, 0);
  std::size_t given = 0;
  for (std::size_t k = 0; k < n; ++k) {
    units[k] = static_cast<std::size_t>(std::floor(std::max(0.0, relaxed[k]) + 1e-9));
    units[k] = std::min(units[k], total);
    given += units[k];
  }
  while (given > total) {  // the LP's rounding noise: take back from the largest
    --*std::max_element(units.begin(), units.end());
    --given;
  }
  for (; given < total; ++given) {
    std::size_t best = n;
    double best_t = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < n; ++k) {
      if (mode == DistMode::k1d &&
          used_bytes[k] + unit_bytes * static_cast<double>(units[k] + 1) > devices[ids[k]].free_bytes) {
        continue;
      }
      const double t = block_cost(devices[ids[k]], L, mode, block, n).at(static_cast<double>(units[k] + 1));
      if (t < best_t) best_t = t, best = k;
    }
    if (best == n) return false;
    ++units[best];
  }
  return true;
}

}  // namespace lp_detail

namespace lp_detail {

// The LP, rounding and dropping of devices with nothing, over the devices `ids`.
inline LayerPartitionPlan solve_on(const std::vector<DistDevice>& devices, const DistLayerShape& L, DistMode mode,
                                   std::vector<std::size_t> ids) {
  LayerPartitionPlan plan;
  if (mode == DistMode::kWs) {
    for (const std::size_t r : ids) {
      if (devices[r].free_bytes < L.layer_weight_bytes()) {
        plan.notes.push_back(concat("ws: device ", r, " cannot hold the whole layer (", lp_detail::megabytes(L.layer_weight_bytes()),
                                    ", it has ", lp_detail::megabytes(devices[r].free_bytes), ")"));
        return plan;
      }
    }
  }
  for (;;) {
    const lp_detail::Relaxed relaxed = lp_detail::solve_relaxed(devices, ids, L, mode);
    ++plan.lp_solves;
    if (!relaxed.feasible) {
      plan.notes.push_back(concat(mode_name(mode), ": the LP is infeasible on ", ids.size(),
                                  " devices (their memory cannot hold the layer in this mode)"));
      plan.partition.heads.clear();
      return plan;
    }
    std::vector<std::size_t> heads, neurons;
    const std::vector<double> none(ids.size(), 0.0);
    bool ok = lp_detail::round_block(devices, ids, L, mode, 0, relaxed.heads, L.heads, heads, none);
    std::vector<double> used(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) used[k] = lp_detail::attn_bytes_per_head(L) * static_cast<double>(ok ? heads[k] : 0);
    ok = ok && lp_detail::round_block(devices, ids, L, mode, 1, relaxed.neurons, L.ffn, neurons,
                                      mode == DistMode::k1d ? used : none);
    if (!ok) {
      plan.notes.push_back(concat(mode_name(mode), ": no rounding to whole heads and neurons fits the devices' memory"));
      plan.partition.heads.clear();
      return plan;
    }
    plan.lp_heads = relaxed.heads, plan.lp_neurons = relaxed.neurons;
    std::vector<std::size_t> kept;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (heads[k] > 0 || neurons[k] > 0) kept.push_back(ids[k]);
    }
    if (kept.size() == ids.size() || kept.empty()) {
      plan.partition.mode = mode;
      plan.partition.heads.assign(devices.size(), 0);
      plan.partition.neurons.assign(devices.size(), 0);
      for (std::size_t k = 0; k < ids.size(); ++k) {
        plan.partition.heads[ids[k]] = heads[k];
        plan.partition.neurons[ids[k]] = neurons[k];
      }
      for (std::size_t r = 0; r < devices.size(); ++r) {
        if (plan.partition.heads[r] == 0 && plan.partition.neurons[r] == 0) plan.dropped.push_back(r);
      }
      plan.predicted_seconds = predicted_seconds(devices, L, plan.partition);
      return plan;
    }
    for (const std::size_t r : ids) {
      if (std::find(kept.begin(), kept.end(), r) == kept.end()) {
        plan.notes.push_back(concat(mode_name(mode), ": device ", r, " got no whole head or neuron: dropped, LP re-solved"));
      }
    }
    ids = kept;
  }
}

}  // namespace lp_detail

// The partition of a layer over `devices` in `mode` (WS or 1D), or none (partition.heads empty)
// when the mode cannot hold the layer on them. After the LP (and its re-solves without devices
// left with nothing), the device with the smallest share is left out too as long as that lowers T:
// its link's latency and its share of the all-reduce can cost more than its compute saves.
inline LayerPartitionPlan solve_mode(const std::vector<DistDevice>& devices, const DistLayerShape& L, DistMode mode) {
  std::vector<std::size_t> ids(devices.size());
  for (std::size_t r = 0; r < ids.size(); ++r) ids[r] = r;
  LayerPartitionPlan plan = lp_detail::solve_on(devices, L, mode, ids);
  while (!plan.partition.heads.empty()) {
    std::vector<std::size_t> kept;
    std::size_t smallest = devices.size();
    double smallest_share = 2;
    for (std::size_t r = 0; r < devices.size(); ++r) {
      if (plan.partition.heads[r] == 0 && plan.partition.neurons[r] == 0) continue;
      kept.push_back(r);
      const double share = static_cast<double>(plan.partition.heads[r]) / static_cast<double>(L.heads) +
                           static_cast<double>(plan.partition.neurons[r]) / static_cast<double>(L.ffn);
      if (share < smallest_share) smallest_share = share, smallest = r;
    }
    if (kept.size() <= 1) break;
    kept.erase(std::find(kept.begin(), kept.end(), smallest));
    LayerPartitionPlan without = lp_detail::solve_on(devices, L, mode, kept);
    without.lp_solves += plan.lp_solves;
    if (without.partition.heads.empty() || without.predicted_seconds >= plan.predicted_seconds) {
      plan.lp_solves = without.lp_solves;
      break;
    }
    without.notes.insert(without.notes.begin(), plan.notes.begin(), plan.notes.end());
    without.notes.push_back(concat(mode_name(mode), ": device ", smallest, " left out: T falls from ",
                                   lp_detail::millis(plan.predicted_seconds), " to ",
                                   lp_detail::millis(without.predicted_seconds)));
    plan = std::move(without);
  }
  return plan;
}

#endif  // STILE_HAVE_CLP

// 2D over every device: the most square grid, even shares; none when a device cannot hold its block.
inline LayerPartitionPlan plan_2d(const std::vector<DistDevice>& devices, const DistLayerShape& L) {
  LayerPartitionPlan plan;
  plan.partition = even_partition(DistMode::k2d, devices.size(), L.heads, L.ffn, L.hidden);
  if (!partition_fits(devices, L, plan.partition)) {
    plan.notes.push_back("2d: a device cannot hold its grid block");
    plan.partition.heads.clear();
  }
  return plan;
}

// The partition in `mode`, or in the first of WS, 1D, 2D whose memory needs the devices meet
// (`automatic`). Throws stile::Error when nothing fits (naming the layer's and the devices' bytes)
// or, for WS and 1D, when built without COIN-OR CLP.
inline LayerPartitionPlan solve_layer_partition(const std::vector<DistDevice>& devices, const DistLayerShape& L,
                                                DistMode mode, bool automatic) {
  require(!devices.empty(), "partitioner: no devices");
  require(L.heads > 0 && L.ffn > 0 && L.hidden % L.heads == 0 && L.tokens > 0, "partitioner: bad layer shape");
  std::vector<DistMode> order = automatic ? std::vector<DistMode>{DistMode::kWs, DistMode::k1d, DistMode::k2d}
                                          : std::vector<DistMode>{mode};
  std::vector<std::string> notes;
  for (const DistMode m : order) {
    LayerPartitionPlan plan;
    if (m == DistMode::k2d) {
      plan = plan_2d(devices, L);
    } else {
#if defined(STILE_HAVE_CLP)
      plan = solve_mode(devices, L, m);
#else
      throw Error("stile: partitioner: built without COIN-OR CLP (install coinor-libclp-dev and reconfigure): "
                  "give the shares yourself");
#endif
    }
    notes.insert(notes.end(), plan.notes.begin(), plan.notes.end());
    if (!plan.partition.heads.empty()) {
      plan.notes = notes;
      return plan;
    }
  }
  double total = 0;
  for (const DistDevice& d : devices) total += d.free_bytes;
  std::string why;
  for (const std::string& n : notes) why += "; " + n;
  throw Error(concat("stile: partition cannot fit: the layer's weights are ", lp_detail::megabytes(L.layer_weight_bytes()),
                     ", the ", devices.size(), " devices have ", lp_detail::megabytes(total), " free in all", why));
}

}  // namespace stile
