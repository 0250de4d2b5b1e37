#pragma once
// Outlier-aware dictionary quantization (the scheme of STI): per layer, fit a Gaussian to all of
// the layer's shard weights; a weight whose log-likelihood under it is below a threshold is an
// outlier and is kept exactly in fp32; the remaining weights of a shard are sorted and cut into
// 2^k clusters of equal population, each represented by its mean (the dictionary), and every
// weight is stored as the k-bit index of its nearest centroid.
//
// Equal-population clusters spend the centroids where the weights are dense, which is what a
// bell-shaped distribution wants. An optional refinement (1-D Lloyd / k-means: assign each weight
// to its nearest centroid, move each centroid to the mean of its weights, repeat) lowers the error
// further; it stops as soon as the mean absolute (L1) error stops falling and keeps the best
// dictionary seen, so it never makes a dictionary worse.
//
// Every centroid is rounded to the nearest fp16 value (kept as a float): such a dictionary
// decodes through two byte planes instead of four on AVX2 (kernels/dict_bytes-inl.h), which is
// faster. The rounding moves a centroid by at most 2^-11 of itself (2^-25 absolute below 2^-14,
// where fp16 is subnormal), far less than the quantization error itself; the refinement rounds
// each step's means the same way, and the L1 errors are those of the rounded dictionaries.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/half.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile::quant {

struct QuantizerOptions {
  double outlier_log_likelihood = -4.0;  // weights with log N(w; mean, var) below are outliers
  bool refine = true;                    // Lloyd refinement of the equal-population centroids
  std::size_t max_refine_steps = 32;
};

struct GaussianFit {
  double mean = 0.0;
  double variance = 0.0;

  double log_likelihood(double w) const noexcept {
    const double d = w - mean;
    return -0.5 * std::log(2.0 * std::numbers::pi * variance) - d * d / (2.0 * variance);
  }
};

// Mean and variance (population) over several spans of weights, in double.
inline GaussianFit fit_gaussian(std::span<const std::span<const float>> parts) {
  double sum = 0.0, count = 0.0;
  for (auto p : parts) {
    for (float w : p) sum += w;
    count += static_cast<double>(p.size());
  }
  require(count > 0, "fit_gaussian: no weights");
  const double mean = sum / count;
  double sq = 0.0;
  for (auto p : parts) {
    for (float w : p) sq += (w - mean) * (w - mean);
  }
  // A constant layer would give variance 0 (no finite likelihood); any positive floor keeps the
  // rule defined, and then nothing is an outlier.
  return {mean, std::max(sq / count, 1e-30)};
}

// The outlier rule as a pair of bounds: w is an outlier iff w < low or w > high. Solving
// log N(w) < t for |w - mean| gives the same set, and comparisons are cheaper than logs.
struct OutlierBounds {
  double low = -INFINITY, high = INFINITY;
  bool is_outlier(float w) const noexcept { return w < low || w > high; }
};

inline OutlierBounds outlier_bounds(const GaussianFit& g, double threshold) {
  // log N(w) < t  <=>  (w - mean)^2 > 2 var (-0.5 log(2 pi var) - t)
  const double r2 = 2.0 * g.variance * (-0.5 * std::log(2.0 * std::numbers::pi * g.variance) - threshold);
  if (r2 <= 0.0) return {INFINITY, -INFINITY};  // every weight is below the threshold
  const double r = std::sqrt(r2);
  return {g.mean - r, g.mean + r};
}

// Index of the centroid nearest to w; `mid` holds the 2^k - 1 midpoints of the ascending
// centroids. Ties go to the lower centroid.
inline unsigned nearest_centroid(std::span<const float> mid, float w) noexcept {
  // The number of midpoints below w.
  return static_cast<unsigned>(std::lower_bound(mid.begin(), mid.end(), w) - mid.begin());
}

inline std::vector<float> midpoints(std::span<const float> centroids) {
  std::vector<float> mid(centroids.size() - 1);
  for (std::size_t i = 0; i + 1 < centroids.size(); ++i) {
    mid[i] = static_cast<float>(0.5 * (double(centroids[i]) + double(centroids[i + 1])));
  }
  return mid;
}

// Mean absolute error of representing the ascending `sorted` values by their nearest centroid.
inline double l1_error(std::span<const float> sorted, std::span<const float> centroids) {
  if (sorted.empty()) return 0.0;
  const std::vector<float> mid = midpoints(centroids);
  double err = 0.0;
  std::size_t c = 0;
  for (float w : sorted) {  // sorted: the nearest centroid only moves up
    while (c < mid.size() && w > mid[c]) ++c;
    err += std::abs(double(w) - double(centroids[c]));
  }
  return err / static_cast<double>(sorted.size());
}

// c rounded to the nearest fp16 value (ties to even), as a float; c itself where that would
// overflow fp16 (no weight is that large: such a dictionary just takes the four-plane decode).
inline float round_centroid_to_half(float c) noexcept {
  const float h = half_to_float(float_to_half(c));
  return std::isfinite(h) || !std::isfinite(c) ? h : c;
}

struct DictionaryFit {
  std::vector<float> centroids;   // 2^bits, ascending
  double l1_before_refine = 0.0;  // mean |w - centroid| of the equal-population dictionary
  double l1 = 0.0;                // ... of the returned dictionary
  std::size_t refine_steps = 0;   // Lloyd steps that lowered the error
};

// The 2^bits-entry dictionary of `values` (the non-outlier weights of a shard): equal-population
// clusters of the sorted values, each centroid its cluster's mean; then the optional refinement.
inline DictionaryFit fit_dictionary(std::vector<float> values, unsigned bits, const QuantizerOptions& opt) {
  require(bits >= 2 && bits <= 6, "fit_dictionary: bits must be 2..6");
  const std::size_t k = std::size_t{1} << bits;
  DictionaryFit fit;
  fit.centroids.assign(k, 0.0f);
  if (values.empty()) return fit;  // a shard of outliers only: the dictionary is never read
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  for (std::size_t c = 0; c < k; ++c) {
    // Cluster c holds sorted values [c n / k, (c + 1) n / k); with fewer values than clusters
    // some are empty and repeat their neighbour's value.
    const std::size_t begin = c * n / k, end = (c + 1) * n / k;
    if (begin == end) {
      fit.centroids[c] = values[std::min(begin, n - 1)];
      continue;
    }
    double sum = 0.0;
    for (std::size_t i = begin; i < end; ++i) sum += values[i];
    fit.centroids[c] = static_cast<float>(sum / static_cast<double>(end - begin));
  }
  for (float& c : fit.centroids) c = round_centroid_to_half(c);  // (monotone: still ascending)
  fit.l1 = fit.l1_before_refine = l1_error(values, fit.centroids);
  if (!opt.refine) return fit;
  std::vector<float> current = fit.centroids;
  for (std::size_t step = 0; step < opt.max_refine_steps; ++step) {
    // Lloyd step over the sorted values: nearest-centroid cells are contiguous runs.
    const std::vector<float> mid = midpoints(current);
    std::vector<float> next = current;
    std::size_t i = 0;
    for (std::size_t c = 0; c < k; ++c) {
      double sum = 0.0;
      std::size_t count = 0;
      while (i < n && (c + 1 == k || values[i] <= mid[c])) {
        sum += values[i++];
        ++count;
      }
      if (count > 0) next[c] = round_centroid_to_half(static_cast<float>(sum / static_cast<double>(count)));
    }
    std::sort(next.begin(), next.end());  // means of ordered cells stay ordered; rounding aside
    const double err = l1_error(values, next);
    if (!(err < fit.l1)) break;  // stopped falling
    fit.l1 = err;
    fit.centroids = next;
    fit.refine_steps = step + 1;
    current = std::move(next);
  }
  return fit;
}

// One matrix quantized against a dictionary: row-major indices, outliers in slab order.
struct QuantizedIndices {
  std::vector<std::uint8_t> indices;        // [rows x cols]
  std::vector<std::uint32_t> outlier_keys;  // ascending quant::outlier_key()s
  std::vector<float> outlier_values;
};

// Indexes w [rows x cols] (row-major) with `centroids`; weights the bounds call outliers are kept
// exactly (their index is still the nearest centroid, and never read).
inline QuantizedIndices index_matrix(const float* w, std::size_t rows, std::size_t cols,
                                     std::span<const float> centroids, const OutlierBounds& bounds) {
  const std::vector<float> mid = midpoints(centroids);
  QuantizedIndices q;
  q.indices.resize(rows * cols);
  for (std::size_t i = 0; i < rows * cols; ++i) q.indices[i] = static_cast<std::uint8_t>(nearest_centroid(mid, w[i]));
  // Outliers in slab order: group by group, column by column, row within the group.
  for (std::size_t g = 0; g < row_groups(rows); ++g) {
    for (std::size_t k = 0; k < cols; ++k) {
      for (std::size_t n = g * kGroupRows; n < std::min(rows, (g + 1) * kGroupRows); ++n) {
        const float v = w[n * cols + k];
        if (bounds.is_outlier(v)) {
          q.outlier_keys.push_back(outlier_key(n, k, cols));
          q.outlier_values.push_back(v);
        }
      }
    }
  }
  return q;
}

}  // namespace stile::quant
