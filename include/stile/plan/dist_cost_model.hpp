#pragma once
// The latency and memory model of a layer split over devices (plan/layer_partition.hpp), which the
// LP partitioner (plan/lp_partition.hpp) minimizes. On the active devices S (|S| = P), one layer
// takes T = sum over the two blocks of the max over devices of (compute + transfer):
//   WS  attention: a_r F_head spf_r + lat_r + (H - a_r) s hd 4 / bw_r        (all-gather of context)
//       MLP:       (f_r / d_ff) s F_row spf_r + lat_r + (1 - f_r / d_ff) s d 4 / bw_r  (rows gathered)
//   1D  attention: a_r (F_head + 2 s hd d) spf_r + lat_r + 2 (P - 1) / P s d 4 / bw_r (all-reduce)
//       MLP:       f_r 4 s d spf_r + the same all-reduce
// with s tokens, F_head = 2 s d 3 hd + 4 s^2 hd (a head's Q/K/V and attention), F_row = 2 d^2 + 4 d d_ff
// (a token row's output projection and MLP), spf = seconds per FLOP; one device alone has no
// transfer. Memory: WS needs the whole layer's weights on every device; 1D a_r 16 d hd + f_r 8 d
// bytes; 2D its grid block (1/P of the layer at even shares).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/plan/layer_partition.hpp"

namespace stile {

// One device as the partitioner sees it (measured: dist/device_probe.hpp).
struct DistDevice {
  double seconds_per_flop = 0;  // running the layer's GEMMs
  double free_bytes = 0;        // what it can give to weights
  double bytes_per_second = 0;  // its link's bandwidth
  double latency_seconds = 0;   // a collective's fixed cost on its link
};

// Re-partitioning at run time: each device's seconds per FLOP as measured over the last request
// (its compute time over the FLOPs of its share). When some device's measurement differs from its
// profile by more than `tolerance` (relative), every device that measured takes its measurement, so
// that all shares are planned from the same kind of figure (a profile from the GEMMs alone and a
// whole layer's time differ by the layer's other work); returns whether that happened, i.e. whether
// the next request should be planned anew. A device that measured nothing (dropped) keeps its own.
inline bool update_speeds(std::vector<DistDevice>& devices, const std::vector<double>& measured_seconds_per_flop,
                          double tolerance = 0.25) {
  require(measured_seconds_per_flop.size() == devices.size(), "update_speeds: one measurement per device");
  const auto measured = [&](std::size_t r) {
    const double m = measured_seconds_per_flop[r];
    return m > 0 && std::isfinite(m);
  };
  bool changed = false;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    const double p = devices[r].seconds_per_flop;
    if (measured(r) && std::fabs(measured_seconds_per_flop[r] - p) > tolerance * p) changed = true;
  }
  if (!changed) return false;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    if (measured(r)) devices[r].seconds_per_flop = measured_seconds_per_flop[r];
  }
  return true;
}

struct DistLayerShape {
  std::size_t hidden = 0, heads = 0, ffn = 0, tokens = 0;
  std::size_t head_dim() const noexcept { return heads == 0 ? 0 : hidden / heads; }
  double layer_weight_bytes() const noexcept {
    return 4.0 * (4.0 * static_cast<double>(hidden) * hidden + 2.0 * static_cast<double>(hidden) * ffn);
  }
};

// The linear pieces of one device's block times: time(x) = slope x + constant.
struct BlockCost {
  double slope = 0, constant = 0;
  double at(double x) const noexcept { return slope * x + constant; }
};

namespace lp_detail {

// The attention (block 0) and MLP (block 1) costs of device r among `active` devices.
inline BlockCost block_cost(const DistDevice& dev, const DistLayerShape& L, DistMode mode, int block, std::size_t active) {
  const double s = static_cast<double>(L.tokens), d = static_cast<double>(L.hidden), hd = static_cast<double>(L.head_dim());
  const double H = static_cast<double>(L.heads), ff = static_cast<double>(L.ffn);
  const double f_head = 2 * s * d * 3 * hd + 4 * s * s * hd;
  const double f_row = 2 * d * d + 4 * d * ff;
  const bool alone = active <= 1;
  const double lat = alone ? 0 : dev.latency_seconds;
  const double inv_bw = alone || dev.bytes_per_second <= 0 ? 0 : 1 / dev.bytes_per_second;
  BlockCost c;
  if (mode == DistMode::kWs) {
    if (block == 0) {
      const double g = s * hd * 4 * inv_bw;  // per head received
      c.slope = f_head * dev.seconds_per_flop - g;
      c.constant = lat + H * g;
    } else {
      const double g = s * d * 4 * inv_bw / ff;  // per neuron's share of rows received
      c.slope = s * f_row * dev.seconds_per_flop / ff - g;
      c.constant = lat + ff * g;
    }
  } else {
    const double p = static_cast<double>(active);
    const double reduce = alone ? 0 : 2 * (p - 1) / p * s * d * 4 * inv_bw;
    c.slope = (block == 0 ? f_head + 2 * s * hd * d : 4 * s * d) * dev.seconds_per_flop;
    c.constant = lat + reduce;
  }
  return c;
}

inline std::string megabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

}  // namespace lp_detail

// FLOPs of a device's share (a heads, f neurons; WS: f / d_ff of the token rows), as the latency
// model counts them: what a measured compute time is divided by.
inline double share_flops(const DistLayerShape& L, DistMode mode, std::size_t a, std::size_t f) {
  const double s = static_cast<double>(L.tokens), d = static_cast<double>(L.hidden), hd = static_cast<double>(L.head_dim());
  const double f_head = 2 * s * d * 3 * hd + 4 * s * s * hd, ff = static_cast<double>(L.ffn);
  if (mode == DistMode::kWs) return static_cast<double>(a) * f_head + static_cast<double>(f) / ff * s * (2 * d * d + 4 * d * ff);
  return static_cast<double>(a) * (f_head + 2 * s * hd * d) + static_cast<double>(f) * 4 * s * d;
}

namespace lp_detail {

inline std::string millis(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
  return buf;
}

inline double attn_bytes_per_head(const DistLayerShape& L) { return 16.0 * L.hidden * L.head_dim(); }
inline double mlp_bytes_per_neuron(const DistLayerShape& L) { return 8.0 * L.hidden; }

}  // namespace lp_detail

// Whether each device holds what `p` gives it (1D, WS; 2D: its grid block).
inline bool partition_fits(const std::vector<DistDevice>& devices, const DistLayerShape& L, const Partition& p) {
  for (std::size_t r = 0; r < p.ranks(); ++r) {
    const bool active = p.mode == DistMode::k2d || p.heads[r] > 0 || p.neurons[r] > 0;
    if (!active) continue;
    if (static_cast<double>(partition_weight_bytes(p, r, L.hidden, L.head_dim(), L.ffn)) > devices[r].free_bytes) {
      return false;
    }
  }
  return true;
}

// T of a WS or 1D partition over all devices (those with no heads and no neurons are dropped).
inline double predicted_seconds(const std::vector<DistDevice>& devices, const DistLayerShape& L, const Partition& p) {
  require(p.mode != DistMode::k2d, "predicted_seconds: WS and 1D only");
  std::size_t active = 0;
  for (std::size_t r = 0; r < p.ranks(); ++r) active += p.heads[r] > 0 || p.neurons[r] > 0;
  double t_attn = 0, t_mlp = 0;
  for (std::size_t r = 0; r < p.ranks(); ++r) {
    if (p.heads[r] == 0 && p.neurons[r] == 0) continue;
    t_attn = std::max(t_attn, lp_detail::block_cost(devices[r], L, p.mode, 0, active).at(static_cast<double>(p.heads[r])));
    t_mlp = std::max(t_mlp, lp_detail::block_cost(devices[r], L, p.mode, 1, active).at(static_cast<double>(p.neurons[r])));
  }
  return t_attn + t_mlp;
}

}  // namespace stile
