// Stacks of shard blocks decoded to int8 (kernels/dict_int8_stack.hpp) and the int8 linear layer
// over them (ops/linear.hpp's DictInt8View), on every Highway target this machine supports, with
// and without the dot-product kernels, on odd shapes with dictionary blocks of mixed bitwidths and
// fp32 blocks, stacked by rows and by columns. Against a naive reference: the stack decoded to
// fp32 (stile::dequantize) and multiplied in double precision.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "for_each_target.hpp"
#include "int8_test_util.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/kernels/dict_int8_stack.hpp"
#include "stile/ops/linear.hpp"
#include "stile/quant/packed_layout.hpp"

namespace {

namespace quant = stile::quant;

// One block: a dictionary of `bits` (2..6) with a few outliers, or fp32 (32) with a few large weights.
struct Block {
  std::size_t rows, cols;
  unsigned bits;
  std::vector<std::uint8_t> packed;
  std::vector<float> centroids, values;
  std::vector<std::uint32_t> keys;
  stile::DictMatrix view() const {
    stile::DictMatrix m;
    m.packed = packed.data();
    m.centroids = bits == 32 ? nullptr : centroids.data();
    m.outlier_keys = keys.data();
    m.outlier_values = values.data();
    m.n_outliers = keys.size();
    m.n_rows = rows;
    m.n_cols = cols;
    m.bits = bits;
    return m;
  }
};

// `spread`: the centroids' scale, different per block so the column stacks' common scale matters.
Block make_block(std::size_t rows, std::size_t cols, unsigned bits, float spread, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, spread);
  Block b{rows, cols, bits, {}, {}, {}, {}};
  b.packed.resize(quant::packed_bytes(rows, cols, bits));
  if (bits == 32) {
    std::vector<float> w(rows * cols);
    for (float& v : w) v = gauss(rng);
    w[0] = 40.0f * spread;  // a large weight: an outlier in a column stack with a narrower dictionary
    std::vector<float> slabs(b.packed.size() / sizeof(float));
    quant::pack_f32(rows, cols, w.data(), slabs.data());
    std::memcpy(b.packed.data(), slabs.data(), b.packed.size());
    return b;
  }
  b.centroids.resize(std::size_t{1} << bits);
  for (float& c : b.centroids) c = gauss(rng);
  std::vector<std::uint8_t> idx(rows * cols);
  std::uniform_int_distribution<unsigned> pick(0, (1u << bits) - 1);
  for (auto& i : idx) i = static_cast<std::uint8_t>(pick(rng));
  quant::pack_indices(rows, cols, bits, idx.data(), b.packed.data());
  std::set<std::uint32_t> keys = {quant::outlier_key(rows - 1, cols - 1, cols)};
  std::uniform_int_distribution<std::size_t> row(0, rows - 1), col(0, cols - 1);
  for (std::size_t i = 0; i < rows * cols / 40; ++i) keys.insert(quant::outlier_key(row(rng), col(rng), cols));
  for (const std::uint32_t k : keys) {
    b.keys.push_back(k);
    b.values.push_back(6.0f * spread + gauss(rng));
  }
  return b;
}

struct Stack {
  std::vector<Block> blocks;
  std::vector<stile::DictMatrix> views;
  stile::StackedDict stack;
};

// Odd shapes, blocks starting off a panel row / k-group (decoded apart and placed value by value),
// mixed bits; or, `aligned`, dictionary blocks that start on a panel row (every target's nr
// divides 32) or a k-group, decoded straight into place beside an fp32 block placed by copy, the
// last column block ending off a k-group.
Stack make_stack(bool by_rows, std::uint32_t seed, bool aligned = false) {
  Stack s;
  if (aligned && by_rows) {
    s.blocks.push_back(make_block(32, 37, 3, 1.0f, seed));
    s.blocks.push_back(make_block(32, 37, 32, 0.5f, seed + 1));
    s.blocks.push_back(make_block(64, 37, 5, 2.0f, seed + 2));
    s.blocks.push_back(make_block(19, 37, 2, 0.3f, seed + 3));
  } else if (aligned) {
    s.blocks.push_back(make_block(45, 16, 4, 1.0f, seed));
    s.blocks.push_back(make_block(45, 12, 32, 0.5f, seed + 1));
    s.blocks.push_back(make_block(45, 20, 6, 2.0f, seed + 2));
    s.blocks.push_back(make_block(45, 6, 2, 0.3f, seed + 3));
  } else if (by_rows) {
    s.blocks.push_back(make_block(13, 37, 3, 1.0f, seed));
    s.blocks.push_back(make_block(16, 37, 32, 0.5f, seed + 1));
    s.blocks.push_back(make_block(32, 37, 5, 2.0f, seed + 2));
    s.blocks.push_back(make_block(7, 37, 2, 0.3f, seed + 3));
  } else {
    s.blocks.push_back(make_block(29, 16, 4, 1.0f, seed));
    s.blocks.push_back(make_block(29, 13, 32, 0.5f, seed + 1));
    s.blocks.push_back(make_block(29, 20, 6, 2.0f, seed + 2));
    s.blocks.push_back(make_block(29, 5, 2, 0.3f, seed + 3));
  }
  for (const Block& b : s.blocks) s.views.push_back(b.view());
  s.stack = by_rows ? stile::stack_rows(s.views) : stile::stack_cols(s.views);
  return s;
}

// The fp32 value of every weight of the decoded stack: scale * stored, or the exact outlier.
std::vector<double> decoded_weights(const stile::DictInt8Weights& w) {
  const stile::Int8Matrix& v = w.int8.view;
  std::vector<double> out(v.rows() * v.cols());
  for (std::size_t n = 0; n < v.rows(); ++n) {
    for (std::size_t k = 0; k < v.cols(); ++k) out[n * v.cols() + k] = double(v.scales[n]) * v.stored(n, k);
  }
  for (std::size_t i = 0; i < w.outlier_v.size(); ++i) {
    out[w.outlier_n[i] * v.cols() + w.outlier_k[i]] += double(w.outlier_v[i]);
  }
  return out;
}

using stile::ThreadPool;

void check_stack(bool by_rows, bool aligned, ThreadPool* pool) {
  const Stack s = make_stack(by_rows, by_rows ? 11u : 23u, aligned);
  const std::size_t N = s.stack.rows(), K = s.stack.cols();
  std::vector<float> ref(N * K);
  stile::dequantize(s.stack, ref.data());
  const stile::DictInt8Weights w = stile::decode_to_int8(s.stack, pool);
  const stile::Int8Matrix& v = w.int8.view;
  REQUIRE(v.rows() == N);
  REQUIRE(v.cols() == K);
  const std::int32_t qmax = stile::int8_weight_max();

  // The scale rule: a row stack's rows take their block's scale, a column stack's the largest
  // dictionary block's.
  float common = 0;
  for (const Block& b : s.blocks) {
    if (b.bits != 32) common = std::max(common, stile::dict_int8_scale(b.view(), qmax));
  }
  std::size_t n0 = 0;
  for (const Block& b : s.blocks) {
    for (std::size_t n = 0; n < (by_rows ? b.rows : N); ++n) {
      float want = common;
      if (by_rows && b.bits != 32) want = stile::dict_int8_scale(b.view(), qmax);
      if (by_rows && b.bits == 32) {
        float amax = 0;
        for (std::size_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(ref[(n0 + n) * K + k]));
        want = amax / float(qmax);
      }
      CHECK(v.scales[n0 + n] == want);
    }
    if (by_rows) n0 += b.rows;
  }

  // Every weight: stored = round(w / scale) of its row, or 0 and exact in the outlier list; the
  // column sums match the stored values.
  std::set<std::pair<std::size_t, std::size_t>> outliers;
  for (std::size_t i = 0; i < w.outlier_v.size(); ++i) {
    outliers.insert({w.outlier_n[i], w.outlier_k[i]});
    CHECK(w.outlier_v[i] == ref[w.outlier_n[i] * K + w.outlier_k[i]]);
  }
  CHECK(outliers.size() == w.outlier_v.size());
  std::size_t bad = 0;
  for (std::size_t n = 0; n < N; ++n) {
    std::int32_t sum = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const std::int32_t got = v.stored(n, k);
      const std::int32_t want =
          outliers.count({n, k}) != 0 ? 0 : static_cast<std::int32_t>(std::nearbyint(ref[n * K + k] / v.scales[n]));
      if (got != want && bad++ < 5) UNSCOPED_INFO("n=" << n << " k=" << k << " got " << got << " want " << want);
      if (std::abs(want) > qmax && bad++ < 5) UNSCOPED_INFO("n=" << n << " k=" << k << " out of range " << want);
      sum += got;
    }
    if (v.col_sums[n] != sum && bad++ < 5) UNSCOPED_INFO("col sum of row " << n);
  }
  for (std::size_t n = 0; n < v.panels() * v.nr; ++n) {  // padding rows and columns stay 0
    for (std::size_t k = n < N ? K : 0; k < v.padded_cols(); ++k) {
      if (v.stored(n, k) != 0 && bad++ < 5) UNSCOPED_INFO("padding n=" << n << " k=" << k);
    }
  }
  INFO((by_rows ? "rows" : "cols") << " stacked, " << N << " x " << K << ", " << w.outlier_v.size() << " outliers");
  CHECK(bad == 0);
  // The fp32 blocks' large weight is an outlier in a column stack (beyond the dictionaries' range).
  if (!by_rows) CHECK(outliers.count({0, 16}) == 1);

  // Decoded into the buffers of another stack's decode (larger and smaller): the same bytes,
  // padding included, the same scales, sums and outliers in the same order.
  for (const bool other_aligned : {!aligned, aligned}) {
    const Stack other = make_stack(!by_rows, 5u, other_aligned);
    stile::DictInt8Weights previous = stile::decode_to_int8(other.stack, pool);
    const stile::DictInt8Weights again = stile::decode_to_int8(s.stack, pool, &previous);
    const stile::Int8Matrix& a = again.int8.view;
    REQUIRE(a.rows() == N);
    REQUIRE(a.cols() == K);
    REQUIRE(a.panels() == v.panels());
    CHECK(std::equal(v.packed, v.packed + v.panels() * v.padded_cols() * v.nr, a.packed));
    CHECK(std::equal(v.scales, v.scales + v.panels() * v.nr, a.scales));
    CHECK(std::equal(v.col_sums, v.col_sums + v.panels() * v.nr, a.col_sums));
    CHECK(again.outlier_n == w.outlier_n);
    CHECK(again.outlier_k == w.outlier_k);
    CHECK(again.outlier_v == w.outlier_v);
  }
}

using stile_test::exact_activations;

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

TEST_CASE("a stack of shards decodes to int8 with one scale per row as documented", "[dict][int8]") {
  ThreadPool pool(2);
  stile_test::for_each_target([&] {
    stile_test::with_and_without_int8_dot([&] {
      for (const bool by_rows : {true, false}) {
        for (const bool aligned : {false, true}) {
          check_stack(by_rows, aligned, nullptr);
          check_stack(by_rows, aligned, &pool);
        }
      }
    });
  });
}

TEST_CASE("the int8 linear layer over shards adds the outliers before the GELU", "[dict][int8]") {
  ThreadPool pool(2);
  stile_test::for_each_target([&] {
    stile_test::with_and_without_int8_dot([&] {
      for (const bool by_rows : {true, false}) {
        const Stack s = make_stack(by_rows, 7);
        const std::size_t N = s.stack.rows(), K = s.stack.cols(), M = 19, lda = K + 3, ldc = N + 2;
        const stile::DictInt8Weights w = stile::decode_to_int8(s.stack, &pool);
        const std::vector<double> W = decoded_weights(w);
        // The decoded weights are the stack's within half a step of each row's scale.
        std::vector<float> dense(N * K);
        stile::dequantize(s.stack, dense.data());
        for (std::size_t n = 0; n < N; ++n) {
          for (std::size_t k = 0; k < K; ++k) {
            REQUIRE(std::abs(W[n * K + k] - dense[n * K + k]) <= 0.5 * w.int8.view.scales[n] * (1 + 1e-6));
          }
        }
        const std::vector<float> A = exact_activations(M, K, lda);
        std::vector<float> bias(N), residual(M * ldc);
        for (std::size_t n = 0; n < N; ++n) bias[n] = 0.1f * float(n % 7) - 0.3f;
        for (std::size_t i = 0; i < residual.size(); ++i) residual[i] = 0.01f * float(i % 13);
        const stile::DictInt8View view{&w};
        std::vector<float> c_bias(M * ldc), c_gelu(M * ldc), c_approx(M * ldc), c_res = residual;
        stile::linear(M, A.data(), lda, view, c_bias.data(), ldc, stile::epilogue::Bias{.bias = bias.data()}, &pool);
        stile::linear(M, A.data(), lda, view, c_gelu.data(), ldc, stile::epilogue::BiasGelu{.bias = bias.data()},
                      &pool);
        stile::linear(M, A.data(), lda, view, c_approx.data(), ldc,
                      stile::epilogue::BiasGeluErfApprox{.bias = bias.data()}, nullptr);
        stile::linear(M, A.data(), lda, view, c_res.data(), ldc,
                      stile::epilogue::BiasResidual{bias.data(), c_res.data(), ldc}, &pool);
        double worst = 0, worst_approx = 0;  // worst_approx: over the erf-approximation's bound
        for (std::size_t m = 0; m < M; ++m) {
          for (std::size_t n = 0; n < N; ++n) {
            double pre = bias[n], mag = std::abs(double(bias[n]));
            for (std::size_t k = 0; k < K; ++k) {
              pre += double(A[m * lda + k]) * W[n * K + k];
              mag += std::abs(double(A[m * lda + k]) * W[n * K + k]);
            }
            const std::size_t i = m * ldc + n;
            worst = std::max({worst, std::abs(c_bias[i] - pre) / mag, std::abs(c_gelu[i] - gelu(pre)) / mag,
                              std::abs(c_res[i] - (pre + residual[i])) / mag});
            // |erf error| <= 5e-4 (Abramowitz-Stegun 7.1.27), times x / 2 in GELU, plus the GEMM's rounding.
            const double bound = 0.5 * std::abs(pre) * 5e-4 + 1e-5 * mag;
            worst_approx = std::max(worst_approx, std::abs(c_approx[i] - gelu(pre)) / bound);
          }
        }
        INFO((by_rows ? "rows" : "cols") << " stacked: worst relative error " << worst << ", erf-approx GELU "
                                         << worst_approx);
        CHECK(worst <= 1e-5);
        CHECK(worst_approx <= 1.0);
      }
    });
  });
}

TEST_CASE("a stack with a weight that is not finite is a clear error", "[dict][int8]") {
  Stack s = make_stack(false, 3);
  std::vector<float> slabs(s.blocks[1].packed.size() / sizeof(float));
  std::memcpy(slabs.data(), s.blocks[1].packed.data(), s.blocks[1].packed.size());
  slabs[5] = std::nanf("");
  std::memcpy(s.blocks[1].packed.data(), slabs.data(), s.blocks[1].packed.size());
  CHECK_THROWS_WITH(stile::decode_to_int8(s.stack), Catch::Contains("not finite"));
  s.blocks[0].centroids[1] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(stile::decode_to_int8(s.stack), Catch::Contains("not finite"));
}
