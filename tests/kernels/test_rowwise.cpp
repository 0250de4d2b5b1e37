// Softmax and LayerNorm rows against double-precision references, on every supported target,
// with row lengths that leave vector tails and a row stride wider than the row.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "stile/kernels/rowwise.hpp"
#include "stile/kernels/hwy_config.hpp"  // before Highway

#include <hwy/targets.h>

TEST_CASE("softmax_rows and layer_norm_rows match double references on every target", "[rowwise]") {
  CHECK_THROWS(stile::softmax_rows(nullptr, 0, 1, 1, 0.0f));
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (const std::size_t cols : {1, 3, 8, 13, 64, 129, 384}) {
      const std::size_t rows = 5, ld = cols + 7;
      std::vector<float> x(rows * ld);
      for (float& v : x) v = dist(rng);
      x[0] = -200.0f;  // far below the max: exp underflows, must not turn into NaN
      std::vector<float> gamma(cols), beta(cols);
      for (std::size_t i = 0; i < cols; ++i) {
        gamma[i] = 1.0f + 0.01f * float(i);
        beta[i] = 0.1f * float(i % 7);
      }

      // softmax(scale * x): attention's 1/sqrt(head_dim) on odd row lengths, 1 on even ones.
      const double scale = cols % 2 ? 0.17677669529 : 1.0;
      std::vector<float> s = x;
      stile::softmax_rows(s.data(), rows, cols, ld, static_cast<float>(scale));
      std::vector<float> l = x;
      stile::layer_norm_rows(l.data(), rows, cols, ld, gamma.data(), beta.data(), 1e-12f);
      double worst_softmax = 0, worst_ln = 0;
      for (std::size_t r = 0; r < rows; ++r) {
        const float* in = x.data() + r * ld;
        double mx = -1e30, sum = 0, mean = 0, var = 0;
        for (std::size_t i = 0; i < cols; ++i) mx = std::max(mx, double(in[i]));
        for (std::size_t i = 0; i < cols; ++i) sum += std::exp(scale * (double(in[i]) - mx));
        for (std::size_t i = 0; i < cols; ++i) mean += in[i];
        mean /= double(cols);
        for (std::size_t i = 0; i < cols; ++i) var += (in[i] - mean) * (in[i] - mean);
        var /= double(cols);
        for (std::size_t i = 0; i < cols; ++i) {
          const double p = std::exp(scale * (double(in[i]) - mx)) / sum;
          worst_softmax = std::max(worst_softmax, std::abs(s[r * ld + i] - p) / std::max(p, 1e-30) * (p > 1e-30));
          const double y = (in[i] - mean) / std::sqrt(var + 1e-12) * gamma[i] + beta[i];
          worst_ln = std::max(worst_ln, std::abs(l[r * ld + i] - y));
        }
        for (std::size_t i = cols; i < ld; ++i) {  // the gap between rows is untouched
          REQUIRE(s[r * ld + i] == x[r * ld + i]);
          REQUIRE(l[r * ld + i] == x[r * ld + i]);
        }
      }
      INFO("target " << hwy::TargetName(target) << " cols " << cols);
      // Inputs span about +-16: exp's relative error grows with |x - max| (about 1e-7 per unit).
      CHECK(worst_softmax <= 5e-6);
      CHECK(worst_ln <= 2e-5);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}
