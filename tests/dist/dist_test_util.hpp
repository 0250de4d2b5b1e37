#pragma once
// Shared by the multi-device tests: uneven partitions of every mode for n ranks, and the largest
// difference between two activations.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "stile/plan/layer_partition.hpp"

namespace stile_test {

// Uneven shares for n ranks (weights 3, 1, 2, 1, ...); with `zero`, rank 1 gets nothing (a
// dropped device) when n > 1.
inline std::vector<std::size_t> uneven(std::size_t total, std::size_t n, bool zero) {
  static const double w[] = {3, 1, 2, 1, 2, 3};
  std::vector<double> weights(n);
  for (std::size_t r = 0; r < n; ++r) weights[r] = w[r % 6];
  if (zero && n > 1) weights[1] = 0;
  return stile::proportional_split(total, weights);
}

// The partitions a test runs on n ranks: every mode, uneven, with and without a dropped rank; 2D on
// every grid shape of n devices.
inline std::vector<stile::Partition> test_partitions(std::size_t n, std::size_t heads, std::size_t ffn,
                                                     std::size_t hidden) {
  std::vector<stile::Partition> out;
  for (const stile::DistMode m : {stile::DistMode::kWs, stile::DistMode::k1d}) {
    for (const bool zero : {false, true}) {
      if (zero && n == 1) continue;
      out.push_back({m, uneven(heads, n, zero), uneven(ffn, n, zero), {}});
    }
  }
  for (std::size_t cols = 1; cols <= n; ++cols) {
    if (n % cols != 0) continue;
    const std::size_t rows = n / cols;
    out.push_back({stile::DistMode::k2d, uneven(heads, rows, false), uneven(ffn, rows, false), uneven(hidden, cols, false)});
  }
  return out;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = a.size() == b.size() ? 0.0f : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace stile_test
