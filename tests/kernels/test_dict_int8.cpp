// Dictionary weights decoded to int8 (kernels/dict_int8.hpp), on every Highway target this machine
// supports, with and without the dot-product kernels: every stored value is its centroid's int8
// value (or 0 at an outlier), the column sums match, and gemm_dict_int8 equals a double-precision
// reference on activations the u8 quantization represents exactly (so only the weights' rounding,
// which the reference applies too, is left).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "for_each_target.hpp"
#include "int8_test_util.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/kernels/dict_int8.hpp"
#include "stile/kernels/int8_gemm.hpp"
#include "stile/quant/packed_layout.hpp"

namespace {

namespace quant = stile::quant;

struct Dict {
  std::size_t rows, cols;
  unsigned bits;
  std::vector<std::uint8_t> packed, idx;
  std::vector<float> centroids, values;
  std::vector<std::uint32_t> keys;
  std::set<std::pair<std::size_t, std::size_t>> outliers;
  stile::DictMatrix view() const {
    stile::DictMatrix m;
    m.packed = packed.data();
    m.centroids = centroids.data();
    m.outlier_keys = keys.data();
    m.outlier_values = values.data();
    m.n_outliers = keys.size();
    m.n_rows = rows;
    m.n_cols = cols;
    m.bits = bits;
    return m;
  }
};

Dict make_dict(std::size_t rows, std::size_t cols, unsigned bits, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  Dict d{rows, cols, bits, {}, {}, {}, {}, {}, {}};
  d.centroids.resize(std::size_t{1} << bits);
  for (float& c : d.centroids) c = gauss(rng);
  d.idx.resize(rows * cols);
  std::uniform_int_distribution<unsigned> pick(0, (1u << bits) - 1);
  for (auto& i : d.idx) i = static_cast<std::uint8_t>(pick(rng));
  d.packed.resize(quant::packed_bytes(rows, cols, bits));
  quant::pack_indices(rows, cols, bits, d.idx.data(), d.packed.data());
  std::uniform_int_distribution<std::size_t> row(0, rows - 1), col(0, cols - 1);
  d.outliers = {{rows - 1, cols - 1}};
  for (std::size_t i = 0; i < rows * cols / 50; ++i) d.outliers.insert({row(rng), col(rng)});
  std::vector<std::pair<std::uint32_t, float>> kv;
  for (const auto& [n, k] : d.outliers) kv.push_back({quant::outlier_key(n, k, cols), 10.0f + gauss(rng)});
  std::sort(kv.begin(), kv.end());
  for (const auto& [key, v] : kv) {
    d.keys.push_back(key);
    d.values.push_back(v);
  }
  return d;
}

void check_decoded(const Dict& d) {
  const stile::DictInt8Weights w = stile::decode_to_int8(d.view());
  const std::int32_t qmax = stile::int8_weight_max();
  float amax = 0;
  for (const float c : d.centroids) amax = std::max(amax, std::abs(c));
  CHECK(w.scale == amax / static_cast<float>(qmax));
  REQUIRE(w.int8.view.nr == stile::int8_packing().nr);
  std::size_t bad = 0;
  for (std::size_t n = 0; n < d.rows; ++n) {
    std::int32_t sum = 0;
    for (std::size_t k = 0; k < d.cols; ++k) {
      const bool outlier = d.outliers.count({n, k}) != 0;
      const float q = std::nearbyint(d.centroids[d.idx[n * d.cols + k]] / w.scale);
      const std::int32_t want = outlier ? 0 : static_cast<std::int32_t>(std::clamp(q, float(-qmax), float(qmax)));
      const std::int32_t got = w.int8.view.stored(n, k);
      if (got != want && bad++ < 5) UNSCOPED_INFO("n=" << n << " k=" << k << " got " << got << " want " << want);
      sum += want;
    }
    if (w.int8.view.col_sums[n] != sum && bad++ < 5) UNSCOPED_INFO("col sum of row " << n);
  }
  // Padding: columns past K and rows past N of the last panel are zero.
  for (std::size_t n = 0; n < w.int8.view.panels() * w.int8.view.nr; ++n) {
    for (std::size_t k = n < d.rows ? d.cols : 0; k < w.int8.view.padded_cols(); ++k) {
      if (w.int8.view.stored(n, k) != 0 && bad++ < 5) UNSCOPED_INFO("padding n=" << n << " k=" << k);
    }
  }
  // The outlier list: each key's row, column and exact value, in the keys' order.
  REQUIRE(w.outlier_v.size() == d.keys.size());
  for (std::size_t i = 0; i < d.keys.size(); ++i) {
    const std::size_t n = quant::outlier_row(d.keys[i], d.cols), k = quant::outlier_col(d.keys[i], d.cols);
    if ((w.outlier_n[i] != n || w.outlier_k[i] != k || w.outlier_v[i] != d.values[i]) && bad++ < 5) {
      UNSCOPED_INFO("outlier " << i << ": (" << w.outlier_n[i] << ", " << w.outlier_k[i] << ") want (" << n << ", " << k
                               << ")");
    }
  }
  INFO("bits " << d.bits << ", " << d.rows << " x " << d.cols);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("decode_to_int8 stores every centroid's int8 value, outliers apart", "[dict][int8]") {
  stile_test::for_each_target([&] {
    stile_test::with_and_without_int8_dot([&] {
      for (const unsigned bits : {2u, 3u, 4u, 5u, 6u}) {
        for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{64, 300}, {37, 53}, {16, 4}, {70, 1},
                                         {8, 5}, {100, 259}}) {
          Dict d = make_dict(rows, cols, bits, static_cast<std::uint32_t>(rows * 7 + cols + bits));
          check_decoded(d);
          // Keys in the store's order (increasing) and reversed: the decoder follows row groups
          // from key to key without assuming the order.
          std::reverse(d.keys.begin(), d.keys.end());
          std::reverse(d.values.begin(), d.values.end());
          check_decoded(d);
        }
      }
    });
  });
}

TEST_CASE("gemm_dict_int8 equals the reference on exactly quantized activations", "[dict][int8]") {
  stile::ThreadPool pool(2);
  stile_test::for_each_target([&] { stile_test::with_and_without_int8_dot([&] {
    const std::size_t M = 9, N = 45, K = 131;
    for (const unsigned bits : {3u, 6u}) {
      const Dict d = make_dict(N, K, bits, bits);
      const stile::DictInt8Weights w = stile::decode_to_int8(d.view());
      const std::vector<float> A = stile_test::exact_activations(M, K, K, 3);
      std::vector<float> C(M * N);
      stile::gemm_dict_int8(M, A.data(), K, w, C.data(), N, &pool);
      double worst = 0;
      for (std::size_t m = 0; m < M; ++m) {
        for (std::size_t n = 0; n < N; ++n) {
          double ref = 0, mag = 0;
          for (std::size_t k = 0; k < K; ++k) {
            const bool outlier = d.outliers.count({n, k}) != 0;
            const auto it = std::lower_bound(d.keys.begin(), d.keys.end(), quant::outlier_key(n, k, K));
            const double wk = outlier ? double(d.values[static_cast<std::size_t>(it - d.keys.begin())])
                                      : double(w.scale) * w.int8.view.stored(n, k);
            ref += double(A[m * K + k]) * wk;
            mag += std::abs(double(A[m * K + k]) * wk);
          }
          worst = std::max(worst, std::abs(C[m * N + n] - ref) / mag);
        }
      }
      INFO("bits " << bits << " worst relative error " << worst);
      CHECK(worst <= 1e-5);
    }
  }); });
}

TEST_CASE("decode_to_int8 refuses 32-bit weights and bad centroids", "[dict][int8]") {
  Dict d = make_dict(16, 8, 4, 1);
  stile::DictMatrix m = d.view();
  m.bits = 32;
  CHECK_THROWS_WITH(stile::decode_to_int8(m), Catch::Contains("32-bit"));
  d.centroids[3] = std::nanf("");
  CHECK_THROWS_WITH(stile::decode_to_int8(d.view()), Catch::Contains("not finite"));
}
