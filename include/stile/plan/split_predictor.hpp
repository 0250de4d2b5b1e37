#pragma once
// The latency predictor of the cooperative layer (hetero/split_layer.hpp), after muLayer's
// Neurosurgeon-style model: per processor, operator kind and format, a least-squares fit of a
// call's time on profiled runs,
//   ms = fixed_ms + ms_per_gflop x GFLOP + ms_per_mb x MB   (coefficients >= 0),
// with the call's FLOPs and bytes (weights of its slice, activations in and out). A split at p
// scales each call's slice, so the same fits cost every ratio; the layer's predicted time is, per
// operator, the slower of the two processors' parts (they run at once and meet at its end). The
// profile is stored as JSON with the machine it was measured on:
//   {
//     "format": "stile-split-profile", "version": 1,
//     "machine": { ... },                       free-form: what it was measured on
//     "fits": [ {"processor": "cpu:0", "op": "linear", "format": "int8",
//                "fixed_ms": 0.004, "ms_per_gflop": 3.1, "ms_per_mb": 0.01, "samples": 80}, ... ]
//   }
// ops: "linear", "attention" (formats: the softmax's, "fp32"), "layer_norm" (the LayerNorm's).
// load() refuses anything else with "stile: <file>: <problem>" (unknown keys included).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/ops/precision.hpp"
#include "stile/plan/split_point.hpp"

namespace stile {

// What a call costs in work: GFLOP and MB moved.
struct OpFeatures {
  double gflop = 0;
  double mbytes = 0;
};

struct LatencySample {
  OpFeatures features;
  double ms = 0;
};

struct LatencyFit {
  double fixed_ms = 0, ms_per_gflop = 0, ms_per_mb = 0;
  std::size_t samples = 0;
  double predict(const OpFeatures& f) const { return fixed_ms + ms_per_gflop * f.gflop + ms_per_mb * f.mbytes; }
};

// Least squares on the relative error (each sample weighted by 1 / its time, so short calls count
// as much as long ones), with non-negative coefficients: the best of the fits over every subset of
// the three terms whose solution is non-negative. @pre samples have ms > 0.
inline LatencyFit fit_latency(std::span<const LatencySample> samples) {
  require(!samples.empty(), "fit_latency: no samples");
  LatencyFit best;
  double best_err = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < 8; ++mask) {
    std::array<std::size_t, 3> idx{};
    std::size_t n = 0;
    for (std::size_t t = 0; t < 3; ++t) {
      if ((mask >> t) & 1u) idx[n++] = t;
    }
    // Normal equations of the weighted problem, n x n (n <= 3), by Gaussian elimination.
    double A[3][4] = {};
    for (const LatencySample& s : samples) {
      require(s.ms > 0 && std::isfinite(s.ms), "fit_latency: a sample's time must be positive");
      const double w = 1.0 / s.ms;
      const double x[3] = {1.0, s.features.gflop, s.features.mbytes};
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < n; ++j) A[i][j] += w * w * x[idx[i]] * x[idx[j]];
        A[i][n] += w * w * x[idx[i]] * s.ms;
      }
    }
    bool singular = false;
    for (std::size_t c = 0; c < n && !singular; ++c) {
      std::size_t piv = c;
      for (std::size_t r = c + 1; r < n; ++r) {
        if (std::abs(A[r][c]) > std::abs(A[piv][c])) piv = r;
      }
      if (std::abs(A[piv][c]) < 1e-300) {
        singular = true;
        break;
      }
      for (std::size_t j = 0; j <= n; ++j) std::swap(A[c][j], A[piv][j]);
      for (std::size_t r = 0; r < n; ++r) {
        if (r == c) continue;
        const double f = A[r][c] / A[c][c];
        for (std::size_t j = c; j <= n; ++j) A[r][j] -= f * A[c][j];
      }
    }
    if (singular) continue;
    double coef[3] = {0, 0, 0};
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      coef[idx[i]] = A[i][n] / A[i][i];
      ok = ok && std::isfinite(coef[idx[i]]) && coef[idx[i]] >= 0;
    }
    if (!ok) continue;
    LatencyFit fit{coef[0], coef[1], coef[2], samples.size()};
    double err = 0;
    for (const LatencySample& s : samples) {
      const double e = (fit.predict(s.features) - s.ms) / s.ms;
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = fit;
    }
  }
  require(std::isfinite(best_err), "fit_latency: no non-negative fit (degenerate samples)");
  return best;
}

// The features of the calls the cooperative layer makes.
inline std::size_t linear_weight_bytes(LinearFormat f) {
  return f == LinearFormat::kF32 ? 4 : f == LinearFormat::kF16 ? 2 : 1;
}
// Channels n of an N x K linear layer for M rows, weights in `format`.
inline OpFeatures linear_features(std::size_t M, std::size_t n, std::size_t K, LinearFormat format) {
  const double m = double(M), nn = double(n), k = double(K);
  return {2.0 * m * nn * k * 1e-9, (nn * k * double(linear_weight_bytes(format)) + 4.0 * (m * k + m * nn)) * 1e-6};
}
// `heads` heads of head_dim over sequences of the given lengths.
inline OpFeatures attention_features(std::span<const std::size_t> lengths, std::size_t heads, std::size_t head_dim) {
  double fl = 0, by = 0;
  for (const std::size_t s : lengths) {
    fl += 4.0 * double(s) * double(s) * double(head_dim);
    by += 4.0 * (4.0 * double(s) * double(head_dim) + double(s) * double(s));
  }
  return {fl * double(heads) * 1e-9, by * double(heads) * 1e-6};
}
inline OpFeatures layer_norm_features(std::size_t rows, std::size_t d) {
  return {8.0 * double(rows) * double(d) * 1e-9, 8.0 * double(rows) * double(d) * 1e-6};
}

struct SplitProfile {
  struct Entry {
    std::string processor, op, format;
    LatencyFit fit;
  };
  nlohmann::json machine = nlohmann::json::object();
  std::vector<Entry> fits;

  const LatencyFit* find(std::string_view processor, std::string_view op, std::string_view format) const {
    for (const Entry& e : fits) {
      if (e.processor == processor && e.op == op && e.format == format) return &e.fit;
    }
    return nullptr;
  }
  const LatencyFit& at(std::string_view processor, std::string_view op, std::string_view format) const {
    const LatencyFit* f = find(processor, op, format);
    if (f == nullptr) {
      throw Error(concat("stile: the split profile has no fit for processor '", processor, "', op '", op,
                         "', format '", format, "'"));
    }
    return *f;
  }

  nlohmann::json to_json() const {
    nlohmann::json list = nlohmann::json::array();
    for (const Entry& e : fits) {
      list.push_back({{"processor", e.processor},
                      {"op", e.op},
                      {"format", e.format},
                      {"fixed_ms", e.fit.fixed_ms},
                      {"ms_per_gflop", e.fit.ms_per_gflop},
                      {"ms_per_mb", e.fit.ms_per_mb},
                      {"samples", e.fit.samples}});
    }
    return {{"format", "stile-split-profile"}, {"version", 1}, {"machine", machine}, {"fits", list}};
  }

  static SplitProfile from_json(const nlohmann::json& j, const std::string& file) {
    const std::string_view d = "split profile";
    if (!j.is_object()) json_fail(file, d, "must be a JSON object, got ", json_excerpt(j));
    json_only_keys(j, {"format", "version", "machine", "fits"}, d, file);
    json_check_format(j, "stile-split-profile", "a split profile", 1, "", d, file);
    SplitProfile p;
    p.machine = json_object_member(j, "machine", d, file);
    const nlohmann::json& list = json_array_member(j, "fits", d, file);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string where = concat("fit ", i);
      const nlohmann::json& e = list[i];
      if (!e.is_object()) json_fail(file, where, "must be a JSON object, got ", json_excerpt(e));
      json_only_keys(e, {"processor", "op", "format", "fixed_ms", "ms_per_gflop", "ms_per_mb", "samples"}, where, file);
      Entry out;
      out.processor = json_string_member(e, "processor", where, file);
      out.op = json_string_member(e, "op", where, file);
      out.format = json_string_member(e, "format", where, file);
      if (out.processor.empty() || out.op.empty() || out.format.empty()) {
        json_fail(file, where, "\"processor\", \"op\" and \"format\" must not be empty");
      }
      if (p.find(out.processor, out.op, out.format) != nullptr) {
        json_fail(file, where, "a second fit for processor '", out.processor, "', op '", out.op, "', format '",
                  out.format, "'");
      }
      out.fit.fixed_ms = json_nonnegative(json_member(e, "fixed_ms", where, file), "\"fixed_ms\"", where, file);
      out.fit.ms_per_gflop =
          json_nonnegative(json_member(e, "ms_per_gflop", where, file), "\"ms_per_gflop\"", where, file);
      out.fit.ms_per_mb = json_nonnegative(json_member(e, "ms_per_mb", where, file), "\"ms_per_mb\"", where, file);
      out.fit.samples = json_whole(json_member(e, "samples", where, file), "\"samples\"", where, file);
      p.fits.push_back(std::move(out));
    }
    return p;
  }

  void save(const std::filesystem::path& path) const {
    std::string text;
    try {
      text = to_json().dump(2) + "\n";
    } catch (const nlohmann::json::exception& e) {
      fail_in_file(path.string(), "cannot write the split profile: ", e.what());
    }
    write_file_atomically(path, text);
  }
  static constexpr std::uintmax_t kMaxBytes = 1 << 20;
  static constexpr int kMaxJsonDepth = 16;
  static SplitProfile load(const std::filesystem::path& path) {
    return from_json(read_json_file(path, kMaxBytes, kMaxJsonDepth, "the split profile"), path.string());
  }
};

// One side of a split: the processor's name (its fits in the profile), its linear format and
// channel granule.
struct SplitSide {
  std::string processor;
  LinearFormat format = LinearFormat::kF32;
  std::size_t granule = 1;
};

// The shape of one encoder layer's call: sequence lengths (batch), hidden size, heads, FFN width.
struct SplitLayerShape {
  std::vector<std::size_t> lengths;
  std::size_t hidden = 0, heads = 0, ffn = 0;
  NormFormat layer_norm = NormFormat::kF32;
  std::size_t tokens() const {
    std::size_t t = 0;
    for (const std::size_t s : lengths) t += s;
    return t;
  }
};

struct SplitChoice {
  double p = 1.0;
  std::vector<std::uint8_t> heads;  // processor of each head
  double predicted_ms = 0;
};

// The predicted time of one layer split at p (heads mapped as `heads`): per operator, the slower
// side. A side with nothing to do costs nothing. qkv_with_heads: Q, K and V split by the heads
// (SplitPlan::qkv_with_heads), each side's QKV and attention one stretch.
inline double predict_split_layer_ms(const SplitProfile& profile, const std::array<SplitSide, 2>& sides,
                                     const SplitLayerShape& s, double p, std::span<const std::uint8_t> heads,
                                     bool qkv_with_heads = false) {
  const std::size_t g = std::lcm(std::max<std::size_t>(1, sides[0].granule), std::max<std::size_t>(1, sides[1].granule));
  const std::size_t T = s.tokens(), d = s.hidden, ff = s.ffn;
  const auto linear = [&](std::size_t side, std::size_t n, std::size_t K) {
    if (n == 0) return 0.0;
    return profile.at(sides[side].processor, "linear", to_string(sides[side].format))
        .predict(linear_features(T, n, K, sides[side].format));
  };
  const auto split_linear = [&](std::size_t N, std::size_t K) {
    const std::size_t n = split_point(N, p, g);
    return std::array<double, 2>{linear(0, n, K), linear(1, N - n, K)};
  };
  double total = 0;
  std::array<std::size_t, 2> nh{0, 0};
  for (const std::uint8_t h : heads) ++nh[h & 1u];
  std::array<double, 2> att{0, 0};
  for (std::size_t i = 0; i < 2; ++i) {
    if (nh[i] > 0) {
      att[i] = profile.at(sides[i].processor, "attention", "fp32").predict(attention_features(s.lengths, nh[i], d / s.heads));
    }
  }
  if (qkv_with_heads) {
    std::array<double, 2> side{0, 0};
    for (std::size_t i = 0; i < 2; ++i) side[i] = 3 * linear(i, nh[i] * (d / s.heads), d) + att[i];
    total += std::max(side[0], side[1]);
  } else {
    const auto q = split_linear(d, d), kv = split_linear(2 * d, d);
    total += std::max(q[0] + kv[0], q[1] + kv[1]);  // Q and K/V: one meeting point
    total += std::max(att[0], att[1]);
  }
  const auto ln = [&] {
    const std::size_t r = split_point(T, p, 1);
    std::array<double, 2> t{0, 0};
    const std::array<std::size_t, 2> rows{r, T - r};
    for (std::size_t i = 0; i < 2; ++i) {
      if (rows[i] > 0) {
        t[i] = profile.at(sides[i].processor, "layer_norm", to_string(s.layer_norm)).predict(layer_norm_features(rows[i], d));
      }
    }
    return std::max(t[0], t[1]);
  };
  for (const auto& part : {split_linear(d, d), split_linear(ff, d), split_linear(d, ff)}) {
    total += std::max(part[0], part[1]);
  }
  total += 2 * ln();
  return total;
}

// The heads' mapping with the least predicted attention time (best_head_mapping on each head's
// predicted time on each side).
// With qkv_with_heads a head's cost includes its Q, K and V columns on that side.
inline std::vector<std::uint8_t> predicted_head_mapping(const SplitProfile& profile, const std::array<SplitSide, 2>& sides,
                                                        const SplitLayerShape& s, bool qkv_with_heads = false) {
  std::array<std::vector<double>, 2> cost;
  const std::size_t hd = s.hidden / s.heads;
  for (std::size_t i = 0; i < 2; ++i) {
    const LatencyFit& f = profile.at(sides[i].processor, "attention", "fp32");
    // Per head: its share of the work, plus the call's fixed cost spread over the heads.
    double per_head = f.predict(attention_features(s.lengths, 1, hd)) - f.fixed_ms + f.fixed_ms / double(s.heads);
    if (qkv_with_heads) {
      const LatencyFit& l = profile.at(sides[i].processor, "linear", to_string(sides[i].format));
      per_head += 3 * (l.predict(linear_features(s.tokens(), hd, s.hidden, sides[i].format)) - l.fixed_ms);
    }
    cost[i].assign(s.heads, per_head);
  }
  return best_head_mapping(cost[0], cost[1]);
}

// The p of the grid with the least predicted time (ties: the larger p, processor 0 first).
inline SplitChoice choose_split(const SplitProfile& profile, const std::array<SplitSide, 2>& sides,
                                const SplitLayerShape& s, bool qkv_with_heads = false) {
  SplitChoice best;
  best.predicted_ms = std::numeric_limits<double>::infinity();
  const std::vector<std::uint8_t> mapped = predicted_head_mapping(profile, sides, s, qkv_with_heads);
  for (const double p : split_grid()) {
    // At the ends every head goes with the channels (no hand-off); inside, as mapped.
    const std::vector<std::uint8_t> heads = p >= 1.0 ? std::vector<std::uint8_t>(s.heads, 0)
                                            : p <= 0.0 ? std::vector<std::uint8_t>(s.heads, 1)
                                                       : mapped;
    const double t = predict_split_layer_ms(profile, sides, s, p, heads, qkv_with_heads);
    if (t <= best.predicted_ms) {
      best = {p, heads, t};
    }
  }
  return best;
}

}  // namespace stile
