// The outlier-aware dictionary quantizer (quant/dictionary.hpp) against direct computations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "stile/quant/dictionary.hpp"

namespace q = stile::quant;

namespace {

// BERT-like weights: mostly Gaussian, a few heavy-tailed ones.
std::vector<float> weights(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.01f, 0.04f);
  std::student_t_distribution<float> tail(2.0f);
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = i % 97 == 0 ? 0.04f * tail(rng) : g(rng);
  return w;
}

}  // namespace

TEST_CASE("the Gaussian fit and the outlier rule follow the log-likelihood threshold", "[quant]") {
  std::vector<float> a = weights(5000, 1);
  const std::vector<float> b = weights(3000, 2);
  for (std::size_t i = 0; i < 6; ++i) a[100 * i + 1] = i % 2 ? 1.0f : -1.0f;  // 25 sigma out
  const std::array<std::span<const float>, 2> parts = {a, b};
  const q::GaussianFit g = q::fit_gaussian(parts);
  double sum = 0, sq = 0;
  for (auto p : parts)
    for (float w : p) sum += w;
  const double mean = sum / 8000.0;
  for (auto p : parts)
    for (float w : p) sq += (w - mean) * (w - mean);
  CHECK(g.mean == Approx(mean).epsilon(1e-12));
  CHECK(g.variance == Approx(sq / 8000.0).epsilon(1e-12));
  for (double threshold : {-4.0, -2.0, 0.0}) {
    const q::OutlierBounds bounds = q::outlier_bounds(g, threshold);
    std::size_t outliers = 0;
    for (auto p : parts) {
      for (float w : p) {
        const double ll = g.log_likelihood(w);
        if (std::abs(ll - threshold) < 1e-9) continue;  // on the boundary: either side is right
        REQUIRE(bounds.is_outlier(w) == (ll < threshold));
        outliers += bounds.is_outlier(w);
      }
    }
    if (threshold == -4.0) {  // the far weights are caught, the bulk is not
      CHECK(outliers >= 6);
      CHECK(outliers < 8000 / 50);
    }
  }
}

TEST_CASE("equal-population dictionaries: cluster means, refinement never worse, error falls with bits", "[quant]") {
  const std::vector<float> w = weights(20000, 4);
  q::QuantizerOptions no_refine;
  no_refine.refine = false;
  const q::DictionaryFit plain = q::fit_dictionary(w, 2, no_refine);
  std::vector<float> sorted = w;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t c = 0; c < 4; ++c) {  // 4 clusters of 5000 sorted values each
    double s = 0;
    for (std::size_t i = c * 5000; i < (c + 1) * 5000; ++i) s += sorted[i];
    // (Each mean rounded to the nearest fp16 value: within 2^-11 of itself.)
    CHECK(plain.centroids[c] == Approx(s / 5000.0).epsilon(1.0 / 2048));
    CHECK(stile::half_to_float(stile::float_to_half(plain.centroids[c])) == plain.centroids[c]);
  }
  CHECK(plain.l1 == Approx(q::l1_error(sorted, plain.centroids)));

  double previous = INFINITY;
  for (unsigned bits = 2; bits <= 6; ++bits) {
    const q::DictionaryFit fit = q::fit_dictionary(w, bits, q::QuantizerOptions{});
    REQUIRE(fit.centroids.size() == (std::size_t{1} << bits));
    REQUIRE(std::is_sorted(fit.centroids.begin(), fit.centroids.end()));
    for (float c : fit.centroids) CHECK(stile::half_to_float(stile::float_to_half(c)) == c);  // fp16 values
    CHECK(fit.l1 <= fit.l1_before_refine);
    CHECK(fit.l1 == Approx(q::l1_error(sorted, fit.centroids)));
    INFO("bits " << bits << " l1 " << fit.l1);
    CHECK(fit.l1 < previous);
    previous = fit.l1;
  }
  // Refinement helps on a bell-shaped distribution at 2 bits (equal population puts the outer
  // centroids too far out).
  const q::DictionaryFit refined = q::fit_dictionary(w, 2, q::QuantizerOptions{});
  CHECK(refined.refine_steps > 0);
  CHECK(refined.l1 < plain.l1);
  // Centroids past fp16's range are kept as they are (never rounded to infinity).
  CHECK(q::round_centroid_to_half(70000.0f) == 70000.0f);
  CHECK(q::round_centroid_to_half(1.0f + 1.0f / 4096) == 1.0f);  // a tie, to even
  // Degenerate inputs: fewer values than clusters, all equal values, no values.
  CHECK(q::fit_dictionary({1.0f, 2.0f}, 3, no_refine).centroids.size() == 8);
  CHECK(q::fit_dictionary(std::vector<float>(10, 0.5f), 4, q::QuantizerOptions{}).l1 == 0.0);
  CHECK(q::fit_dictionary({}, 2, no_refine).centroids.size() == 4);
}

TEST_CASE("index_matrix picks the nearest centroid and lists outliers exactly, in slab order", "[quant]") {
  const std::size_t rows = 37, cols = 11;
  std::vector<float> w = weights(rows * cols, 9);
  w[0] = 5.0f;                 // first row, first column
  w[rows * cols - 1] = -5.0f;  // last row, last column
  const std::array<std::span<const float>, 1> parts = {w};
  const q::GaussianFit g = q::fit_gaussian(parts);
  const q::OutlierBounds bounds = q::outlier_bounds(g, -4.0);
  const q::DictionaryFit fit = q::fit_dictionary(w, 3, q::QuantizerOptions{});
  const q::QuantizedIndices qi = q::index_matrix(w.data(), rows, cols, fit.centroids, bounds);
  for (std::size_t i = 0; i < rows * cols; ++i) {
    const float got = fit.centroids[qi.indices[i]];
    for (float c : fit.centroids) REQUIRE(std::abs(w[i] - got) <= std::abs(w[i] - c));
  }
  REQUIRE(std::is_sorted(qi.outlier_keys.begin(), qi.outlier_keys.end()));
  std::size_t expected = 0;
  for (float x : w) expected += bounds.is_outlier(x);
  REQUIRE(qi.outlier_keys.size() == expected);
  REQUIRE(expected >= 2);
  for (std::size_t i = 0; i < qi.outlier_keys.size(); ++i) {
    const std::size_t n = q::outlier_row(qi.outlier_keys[i], cols), k = q::outlier_col(qi.outlier_keys[i], cols);
    REQUIRE(qi.outlier_values[i] == w[n * cols + k]);
    REQUIRE(bounds.is_outlier(w[n * cols + k]));
  }
}
