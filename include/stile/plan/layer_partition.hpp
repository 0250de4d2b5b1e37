#pragma once
// How an encoder layer is split over devices (the plan that dist/'s multi-device layers follow and
// plan/lp_partition.hpp makes), in whole heads and whole FFN neurons (the unit the shard layout
// cuts a layer in, store/shard_layout.hpp), with uneven shares:
//   WS  (weight-stationary, Hepti): every device holds the whole layer; heads[r] heads of
//       Q/K/V and attention on device r, then token rows in proportion to neurons[r] for the
//       output projection, both LayerNorms and the MLP.
//   1D  (Megatron): device r holds heads[r] heads (Q/K/V rows, W_o columns) and neurons[r] FFN
//       neurons (W_1 rows, W_2 columns) only.
//   2D: a grid of grid_rows x grid_cols devices, rank = i * grid_cols + j; grid row i holds heads[i]
//       heads and neurons[i] neurons, grid column j the hidden columns cols[j] of every weight it
//       reads from the hidden state (and the same rows of W_o and W_2), so a device holds one block
//       of every matrix: finer than whole heads when memory is short.
// A device may get 0 of something (a device dropped by the partitioner gets nothing at all).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"

namespace stile {

enum class DistMode { kWs, k1d, k2d };

inline std::string_view mode_name(DistMode m) noexcept {
  return m == DistMode::kWs ? "ws" : m == DistMode::k1d ? "1d" : "2d";
}
inline DistMode parse_mode(std::string_view s) {
  if (s == "ws") return DistMode::kWs;
  if (s == "1d") return DistMode::k1d;
  if (s == "2d") return DistMode::k2d;
  throw Error(concat("stile: unknown mode '", s, "' (ws, 1d or 2d)"));
}

struct Partition {
  DistMode mode = DistMode::kWs;
  std::vector<std::size_t> heads;    // per rank (WS, 1D) or per grid row (2D)
  std::vector<std::size_t> neurons;  // likewise
  std::vector<std::size_t> cols;     // 2D: hidden columns per grid column; empty otherwise

  std::size_t grid_rows() const noexcept { return heads.size(); }
  std::size_t grid_cols() const noexcept { return mode == DistMode::k2d ? cols.size() : 1; }
  std::size_t ranks() const noexcept { return grid_rows() * grid_cols(); }
};

// `total` whole units split in proportion to `weights` (largest remainder; ties to the lower
// index), so that the parts sum to total exactly. @pre weights not all zero, none negative.
inline std::vector<std::size_t> proportional_split(std::size_t total, const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) {
    require(w >= 0 && std::isfinite(w), "proportional split: a negative or non-finite weight");
    sum += w;
  }
  require(sum > 0, "proportional split: all weights are zero");
  std::vector<std::size_t> out(weights.size());
  std::vector<std::pair<double, std::size_t>> rest;
  std::size_t given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double exact = static_cast<double>(total) * weights[i] / sum;
    out[i] = static_cast<std::size_t>(std::floor(exact));
    given += out[i];
    rest.push_back({exact - static_cast<double>(out[i]), i});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; given < total; ++k, ++given) ++out[rest[k % rest.size()].second];
  return out;
}

inline std::vector<std::size_t> even_split(std::size_t total, std::size_t parts) {
  return proportional_split(total, std::vector<double>(parts, 1.0));
}

// An even partition of a layer (heads, neurons, hidden columns) over `ranks` devices in `mode`; 2D
// on the most square grid with grid_rows >= grid_cols.
inline Partition even_partition(DistMode mode, std::size_t ranks, std::size_t heads, std::size_t ffn,
                                std::size_t hidden) {
  Partition p;
  p.mode = mode;
  std::size_t rows = ranks, cols = 1;
  if (mode == DistMode::k2d) {
    for (std::size_t c = 1; c * c <= ranks; ++c) {
      if (ranks % c == 0) cols = c;
    }
    rows = ranks / cols;
    p.cols = even_split(hidden, cols);
  }
  p.heads = even_split(heads, rows);
  p.neurons = even_split(ffn, rows);
  return p;
}

// Checks a partition against a layer and a number of ranks; the error says what does not add up.
inline void check_partition(const Partition& p, std::size_t ranks, std::size_t heads, std::size_t ffn,
                            std::size_t hidden) {
  const auto sum = [](const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); };
  const std::string m(mode_name(p.mode));
  require(p.heads.size() == p.neurons.size(), "partition (" + m + "): heads and neurons given for different device counts");
  require(p.ranks() == ranks, concat("partition (", m, "): for ", p.ranks(), " devices, run on ", ranks, " ranks"));
  require(sum(p.heads) == heads, concat("partition (", m, "): ", sum(p.heads), " heads given, the layer has ", heads));
  require(sum(p.neurons) == ffn, concat("partition (", m, "): ", sum(p.neurons), " FFN neurons given, the layer has ", ffn));
  if (p.mode == DistMode::k2d) {
    require(sum(p.cols) == hidden, concat("partition (2d): ", sum(p.cols), " hidden columns given, the layer has ", hidden));
  } else {
    require(p.cols.empty(), "partition (" + m + "): hidden columns are split in 2d only");
  }
}

// "heads 6+6, neurons 768+768" (and "cols ..." for 2D): for logs.
inline std::string partition_text(const Partition& p) {
  const auto join = [](const std::vector<std::size_t>& v) {
    std::string s;
    for (std::size_t x : v) {
      if (!s.empty()) s += '+';
      s += std::to_string(x);
    }
    return s;
  };
  std::string s = concat(mode_name(p.mode), ": heads ", join(p.heads), ", neurons ", join(p.neurons));
  if (p.mode == DistMode::k2d) s += concat(", cols ", join(p.cols), " (grid ", p.grid_rows(), "x", p.grid_cols(), ")");
  return s;
}

// Bytes of fp32 GEMM weights device `rank` holds in the partition's mode (d: hidden, hd: head
// dim); LayerNorm parameters and biases (every mode holds them whole, a few KB) are left out.
inline std::size_t partition_weight_bytes(const Partition& p, std::size_t rank, std::size_t d, std::size_t hd,
                                          std::size_t ffn) {
  switch (p.mode) {
    case DistMode::kWs: return (4 * d * d + 2 * d * ffn) * sizeof(float);
    case DistMode::k1d: return (4 * d * p.heads[rank] * hd + 2 * d * p.neurons[rank]) * sizeof(float);
    case DistMode::k2d: {
      const std::size_t i = rank / p.grid_cols(), j = rank % p.grid_cols();
      return (4 * p.cols[j] * p.heads[i] * hd + 2 * p.cols[j] * p.neurons[i]) * sizeof(float);
    }
  }
  return 0;
}

}  // namespace stile
