#pragma once
// Where a layer split between two processors cuts: the split point of a linear layer's output
// channels for a share p, and the head-to-processor mapping of attention with the least
// predicted latency. Pure functions: the cooperative layer (hetero/split_layer.hpp) runs what they
// say, the split predictor (plan/split_predictor.hpp) costs it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "stile/core/error.hpp"

namespace stile {

// The split ratios the cooperative layer and the predictor consider: 0, 0.125, ..., 1.
inline std::vector<double> split_grid() {
  std::vector<double> g;
  for (int i = 0; i <= 8; ++i) g.push_back(i / 8.0);
  return g;
}

// The first channel of processor 1's slice: p x N rounded to a multiple of `granule`, 0 for
// p <= 0 and N for p >= 1.
inline std::size_t split_point(std::size_t N, double p, std::size_t granule) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return N;
  const std::size_t g = std::max<std::size_t>(1, granule);
  const auto n = static_cast<std::size_t>(std::llround(p * static_cast<double>(N) / static_cast<double>(g))) * g;
  return std::min(n, N);
}

// The head-to-processor mapping with the least predicted latency, max(sum of processor 0's heads'
// costs, sum of processor 1's), by enumerating every mapping (up to 2^20; beyond, greedy, longest
// first). cost0[h], cost1[h]: head h's predicted time on each processor (any unit).
inline std::vector<std::uint8_t> best_head_mapping(std::span<const double> cost0, std::span<const double> cost1) {
  require(cost0.size() == cost1.size(), "best_head_mapping: one cost per head on each processor");
  const std::size_t H = cost0.size();
  std::vector<std::uint8_t> best(H, 0);
  if (H == 0) return best;
  if (H <= 20) {
    double best_t = std::numeric_limits<double>::infinity();
    std::uint32_t best_mask = 0;
    for (std::uint32_t mask = 0; mask < (std::uint32_t{1} << H); ++mask) {  // bit h set: head h on processor 1
      double t0 = 0, t1 = 0;
      for (std::size_t h = 0; h < H; ++h) ((mask >> h) & 1u ? t1 : t0) += ((mask >> h) & 1u ? cost1[h] : cost0[h]);
      const double t = std::max(t0, t1);
      if (t < best_t) {
        best_t = t;
        best_mask = mask;
      }
    }
    for (std::size_t h = 0; h < H; ++h) best[h] = static_cast<std::uint8_t>((best_mask >> h) & 1u);
    return best;
  }
  std::vector<std::size_t> order(H);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost0[a] > cost0[b]; });
  double t0 = 0, t1 = 0;
  for (const std::size_t h : order) {
    if (t0 + cost0[h] <= t1 + cost1[h]) {
      t0 += cost0[h];
    } else {
      t1 += cost1[h];
      best[h] = 1;
    }
  }
  return best;
}

}  // namespace stile
