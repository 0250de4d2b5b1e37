// The dictionary codec (kernels/dict-inl.h) on every Highway target this machine supports: the
// SIMD panel decoder against the scalar reference bit for bit, for every bitwidth and every panel
// width the tiles use; the GEMM on DictMatrix and StackedDict weights (mixed bitwidths, aligned
// and misaligned blocks) against a naive double-precision reference; bad stacks refused.
//
// The packed bytes of every matrix end at a page that is mapped PROT_NONE, so a decoder that
// reads one byte past the matrix crashes the test instead of passing by luck.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "for_each_target.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/gemm_impl.hpp"  // instantiates the tests' own tile shapes
#include "stile/quant/dictionary.hpp"
#include "stile/quant/packed_layout.hpp"

namespace {

namespace quant = stile::quant;

// `size` bytes that end where an inaccessible page begins.
class GuardedBytes {
 public:
  explicit GuardedBytes(std::size_t size) : size_(size) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    map_bytes_ = (size + page - 1) / page * page + page;
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    map_ = static_cast<std::uint8_t*>(p);
    REQUIRE(mprotect(map_ + map_bytes_ - page, page, PROT_NONE) == 0);
    data_ = map_ + map_bytes_ - page - size;
  }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  ~GuardedBytes() { munmap(map_, map_bytes_); }
  std::uint8_t* data() { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* map_ = nullptr;
  std::uint8_t* data_ = nullptr;
  std::size_t map_bytes_ = 0, size_ = 0;
};

// A random quantized matrix and the truth it encodes (dense: each weight its centroid, or its
// outlier value).
struct Quantized {
  std::size_t rows = 0, cols = 0;
  unsigned bits = 0;
  std::unique_ptr<GuardedBytes> packed;
  std::vector<float> centroids;
  std::vector<std::uint32_t> keys;
  std::vector<float> values;
  std::vector<float> dense;

  stile::DictMatrix view() const {
    stile::DictMatrix m;
    m.packed = packed->data();
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

// half_centroids: every centroid an fp16 value, as the converter makes them (quant/dictionary.hpp),
// which AVX2 decodes through two byte planes; else most centroids are not.
Quantized make_quantized(std::size_t rows, std::size_t cols, unsigned bits, std::uint32_t seed,
                         bool half_centroids = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  Quantized q;
  q.rows = rows;
  q.cols = cols;
  q.bits = bits;
  q.dense.resize(rows * cols);
  q.packed = std::make_unique<GuardedBytes>(quant::packed_bytes(rows, cols, bits));
  if (bits == 32) {
    for (float& w : q.dense) w = gauss(rng);
    std::vector<float> slabs(q.packed->size() / sizeof(float));
    quant::pack_f32(rows, cols, q.dense.data(), slabs.data());
    std::memcpy(q.packed->data(), slabs.data(), q.packed->size());
    return q;
  }
  const std::size_t entries = std::size_t{1} << bits;
  q.centroids.resize(entries);
  for (float& c : q.centroids) c = gauss(rng);
  if (half_centroids) {
    for (float& c : q.centroids) c = quant::round_centroid_to_half(c);
    // fp16's edges: -0, the smallest subnormal and the largest finite value (kept apart from the
    // outliers' values).
    const float edges[] = {-0.0f, 1.0f / 16777216.0f, -65504.0f};
    for (std::size_t i = 0; i < 3 && i < entries; ++i) q.centroids[entries - 1 - i] = edges[i];
  }
  std::uniform_int_distribution<unsigned> pick(0, static_cast<unsigned>(entries - 1));
  std::vector<std::uint8_t> idx(rows * cols);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    idx[i] = static_cast<std::uint8_t>(pick(rng));
    q.dense[i] = q.centroids[idx[i]];
  }
  quant::pack_indices(rows, cols, bits, idx.data(), q.packed->data());
  // Outliers: the four corners and about 1% of the rest, with values no centroid has.
  std::set<std::pair<std::size_t, std::size_t>> at = {{0, 0}, {0, cols - 1}, {rows - 1, 0}, {rows - 1, cols - 1}};
  std::uniform_int_distribution<std::size_t> row(0, rows - 1), col(0, cols - 1);
  for (std::size_t i = 0; i < rows * cols / 100; ++i) at.insert({row(rng), col(rng)});
  std::vector<std::pair<std::uint32_t, float>> outliers;
  for (const auto& [n, k] : at) {
    const float v = (gauss(rng) > 0 ? 1.0f : -1.0f) * (4.0f + std::abs(gauss(rng)));
    outliers.push_back({quant::outlier_key(n, k, cols), v});
    q.dense[n * cols + k] = v;
  }
  std::sort(outliers.begin(), outliers.end());
  for (const auto& [key, v] : outliers) {
    q.keys.push_back(key);
    q.values.push_back(v);
  }
  return q;
}

// Panel widths beyond the target's own: half a group, a quarter, two and four groups side by
// side, and NR = 2 (the scalar path of every target).
using Nr2 = stile::TileShape<2, 2, 16, 4, 8>;
using Nr4 = stile::TileShape<4, 4, 64, 16, 64>;
using Nr8 = stile::TileShape<3, 8, 16, 9, 24>;
using Nr32 = stile::TileShape<4, 32, 64, 16, 128>;
using Nr64 = stile::TileShape<2, 64, 32, 8, 128>;
// Panels of two groups in the fused GEMM: Nr32 where it fits the registers (256-bit vectors and
// wider), one row of 32 on the 128-bit and scalar targets (Nr32's 4 rows there would unroll to
// 32-128 accumulators: spills, and most of this file's compile time).
struct Nr32Gemm {
  template <std::int64_t kTarget>
  using For = std::conditional_t<(kTarget & (HWY_SSE4 | HWY_SSSE3 | HWY_SCALAR | HWY_EMU128)) != 0,
                                 stile::TileShape<1, 32, 64, 16, 128>, Nr32>;
};

// decode_to_packed against the row-major truth: every weight bit for bit, padding rows 0.
template <class Tiles, class W>
void check_decode(const W& w, const std::vector<float>& truth) {
  const stile::PackedWeights p = stile::decode_to_packed<Tiles>(w);
  const std::size_t nr = p.view.nr, N = w.rows(), K = w.cols();
  REQUIRE(nr == stile::gemm_panel_width<Tiles>());
  const std::size_t panels = (N + nr - 1) / nr;
  std::size_t bad = 0;
  for (std::size_t n = 0; n < panels * nr; ++n) {
    for (std::size_t k = 0; k < K; ++k) {
      const float got = p.view.data[((n / nr) * K + k) * nr + n % nr];
      const float want = n < N ? truth[n * K + k] : 0.0f;
      if (std::memcmp(&got, &want, sizeof(float)) != 0 && bad++ < 5) {
        UNSCOPED_INFO("n=" << n << " k=" << k << " got " << got << " want " << want);
      }
    }
  }
  INFO("N=" << N << " K=" << K << " NR=" << nr);
  CHECK(bad == 0);
}

template <class W>
void check_decode_all_widths(const W& w, const std::vector<float>& truth) {
  check_decode<stile::DefaultTiles>(w, truth);
  check_decode<Nr2>(w, truth);
  check_decode<Nr4>(w, truth);
  check_decode<Nr8>(w, truth);
  check_decode<Nr32>(w, truth);
  check_decode<Nr64>(w, truth);
}

// A GEMM problem on weights whose dense truth is `w` (N x K): A, bias, residual, and the naive
// reference computed once (dot and sum |a w|), the epilogues applied on top.
struct Problem {
  std::size_t M, N, K, lda, ldc;
  std::vector<float> A, bias, residual;
  std::vector<double> dot, mag;
};

Problem make_problem(std::size_t M, const std::vector<float>& w, std::size_t N, std::size_t K, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Problem p{M, N, K, K + 3, N + 5, {}, {}, {}, {}, {}};  // padded strides catch stride bugs
  p.A.resize(M * p.lda);
  p.bias.resize(N);
  p.residual.resize(M * p.ldc);
  for (auto* v : {&p.A, &p.bias, &p.residual}) {
    for (float& x : *v) x = dist(rng);
  }
  p.dot.assign(M * N, 0.0);
  p.mag.assign(M * N, 0.0);
  for (std::size_t m = 0; m < M; ++m) {
    for (std::size_t n = 0; n < N; ++n) {
      double acc = 0.0, mag = 0.0;
      for (std::size_t k = 0; k < K; ++k) {
        const double t = double(p.A[m * p.lda + k]) * double(w[n * K + k]);
        acc += t;
        mag += std::abs(t);
      }
      p.dot[m * N + n] = acc;
      p.mag[m * N + n] = mag;
    }
  }
  return p;
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// Relative error <= 1e-5 of each element against sum |a w| + |bias| (+ |residual|), as in
// test_gemm; the gaps between the rows of C untouched.
void check(const Problem& p, const std::vector<float>& C, bool gelu, bool residual) {
  double worst = 0.0;
  for (std::size_t m = 0; m < p.M; ++m) {
    for (std::size_t n = 0; n < p.N; ++n) {
      double ref = p.dot[m * p.N + n] + p.bias[n];
      double scale = p.mag[m * p.N + n] + std::abs(p.bias[n]);
      if (gelu) ref = gelu_ref(ref);
      if (residual) {
        ref += p.residual[m * p.ldc + n];
        scale += std::abs(p.residual[m * p.ldc + n]);
      }
      worst = std::max(worst, std::abs(C[m * p.ldc + n] - ref) / std::max(scale, 1e-30));
    }
    for (std::size_t n = p.N; n < p.ldc; ++n) {
      if (C[m * p.ldc + n] != -777.0f) FAIL("wrote past column N at row " << m);
    }
  }
  INFO("M=" << p.M << " N=" << p.N << " K=" << p.K << " worst relative error " << worst);
  CHECK(worst <= 1e-5);
}

// C = A W^T + bias through stile::gemm on the weights w.
template <class Tiles, class W>
void run_bias(const Problem& p, const W& w, stile::ThreadPool& pool) {
  std::vector<float> C(p.M * p.ldc, -777.0f);
  stile::gemm<Tiles>(p.M, p.A.data(), p.lda, w, C.data(), p.ldc, stile::epilogue::Bias{.bias = p.bias.data()}, &pool);
  check(p, C, false, false);
}

// Bias, BiasGelu and BiasResidual through stile::gemm on the weights w.
template <class Tiles, class W>
void run_epilogues(const Problem& p, const W& w, stile::ThreadPool& pool) {
  const std::vector<float> fresh(p.M * p.ldc, -777.0f);
  run_bias<Tiles>(p, w, pool);
  {
    auto C = fresh;
    stile::gemm<Tiles>(p.M, p.A.data(), p.lda, w, C.data(), p.ldc, stile::epilogue::BiasGelu{.bias = p.bias.data()},
                       &pool);
    check(p, C, true, false);
  }
  {
    auto C = fresh;
    stile::gemm<Tiles>(p.M, p.A.data(), p.lda, w, C.data(), p.ldc,
                       stile::epilogue::BiasResidual{p.bias.data(), p.residual.data(), p.ldc}, &pool);
    check(p, C, false, true);
  }
}

using stile_test::for_each_target;

constexpr unsigned kAllBits[] = {2, 3, 4, 5, 6, 32};
constexpr std::size_t kAllM[] = {1, 7, 32, 130, 300};  // 300 > MC = 144: the decode-once path

// Blocks of a row stack: aligned (32, 16) and misaligned (24, 40 start off a group; 20 and 5
// off a vector) row counts, each at its own bitwidth, 77 cols.
std::vector<Quantized> row_blocks() {
  const std::pair<std::size_t, unsigned> spec[] = {{32, 4}, {24, 3}, {40, 6}, {20, 32}, {5, 2}, {16, 5}, {24, 4}};
  std::vector<Quantized> blocks;
  std::uint32_t seed = 100;
  for (const auto& [rows, bits] : spec) blocks.push_back(make_quantized(rows, 77, bits, seed++));
  return blocks;
}

// Blocks of a column stack: 45 rows, 332 cols in all (more than KC = 256 of the default tiles).
std::vector<Quantized> col_blocks() {
  const std::pair<std::size_t, unsigned> spec[] = {{64, 4}, {37, 2}, {130, 6}, {1, 32}, {100, 5}};
  std::vector<Quantized> blocks;
  std::uint32_t seed = 200;
  for (const auto& [cols, bits] : spec) blocks.push_back(make_quantized(45, cols, bits, seed++));
  return blocks;
}

std::vector<stile::DictMatrix> views(const std::vector<Quantized>& blocks) {
  std::vector<stile::DictMatrix> v;
  for (const Quantized& q : blocks) v.push_back(q.view());
  return v;
}

}  // namespace

TEST_CASE("the panel decoder equals the scalar reference bit for bit", "[dict]") {
  // The reference itself against the truth the matrices were made from.
  for (const unsigned bits : kAllBits) {
    const Quantized q = make_quantized(37, 53, bits, bits);
    std::vector<float> decoded(q.dense.size());
    stile::dequantize(q.view(), decoded.data());
    INFO("bits " << bits);
    CHECK(std::memcmp(decoded.data(), q.dense.data(), decoded.size() * sizeof(float)) == 0);
  }
  for_each_target([&] {
    std::mt19937 rng(7);
    for (const unsigned bits : kAllBits) {
      std::vector<std::pair<std::size_t, std::size_t>> shapes = {{37, 53}, {16, 8}, {1, 1}, {100, 301}, {70, 2}};
      for (int i = 0; i < 4; ++i) shapes.push_back({1 + rng() % 90, 1 + rng() % 130});  // random shapes too
      for (const auto& [rows, cols] : shapes) {
        INFO("bits " << bits << ", " << rows << " x " << cols);
        const Quantized q = make_quantized(rows, cols, bits, static_cast<std::uint32_t>(rows * 31 + cols + bits));
        check_decode_all_widths(q.view(), q.dense);
      }
    }
    const std::vector<Quantized> rb = row_blocks(), cb = col_blocks();
    const std::vector<stile::DictMatrix> rv = views(rb), cv = views(cb);
    const stile::StackedDict by_rows = stile::stack_rows(rv), by_cols = stile::stack_cols(cv);
    std::vector<float> truth(by_rows.rows() * by_rows.cols());
    stile::dequantize(by_rows, truth.data());
    check_decode_all_widths(by_rows, truth);
    truth.assign(by_cols.rows() * by_cols.cols(), 0.0f);
    stile::dequantize(by_cols, truth.data());
    check_decode_all_widths(by_cols, truth);
  });
}

TEST_CASE("dictionaries of fp16 values (the converter's) decode bit for bit", "[dict]") {
  // The two-plane path on AVX2 and AVX3 (kernels/dict_bytes-inl.h): odd and even column counts
  // (a last k by itself), half-group and multi-group panels (check_decode_all_widths), outliers.
  for_each_target([&] {
    for (const unsigned bits : {2u, 3u, 4u, 5u, 6u}) {
      for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{37, 53}, {100, 301}, {16, 8}, {64, 2}}) {
        INFO("bits " << bits << ", " << rows << " x " << cols);
        const Quantized q = make_quantized(rows, cols, bits, static_cast<std::uint32_t>(rows + cols + bits), true);
        check_decode_all_widths(q.view(), q.dense);
      }
    }
  });
}

TEST_CASE("gemm on a DictMatrix equals the naive reference", "[dict]") {
  stile::ThreadPool pool1(1), pool2(2);
  for_each_target([&] {
    for (const unsigned bits : kAllBits) {
      // Odd cols; 300 cols cross the KC = 256 block of the default tiles.
      for (const auto& [N, K] : {std::pair<std::size_t, std::size_t>{53, 131}, {37, 300}}) {
        const Quantized q = make_quantized(N, K, bits, static_cast<std::uint32_t>(N + K + bits));
        const stile::DictMatrix w = q.view();
        for (const std::size_t M : kAllM) {
          INFO("bits " << bits);
          const Problem p = make_problem(M, q.dense, N, K, static_cast<std::uint32_t>(M));
          run_epilogues<stile::DefaultTiles>(p, w, M % 2 ? pool1 : pool2);
        }
      }
      // Host tiles: small cache blocks (every block crossed), and panels of two groups. (The
      // epilogues do not depend on the codec: one is enough here.)
      const Quantized q = make_quantized(61, 77, bits, bits);
      const Problem p = make_problem(29, q.dense, 61, 77, bits);
      run_bias<Nr8>(p, q.view(), pool2);
      run_bias<Nr32Gemm>(p, q.view(), pool1);
    }
  });
}

TEST_CASE("gemm on stacked blocks of mixed bitwidths equals the naive reference", "[dict]") {
  const std::vector<Quantized> rb = row_blocks(), cb = col_blocks();
  const std::vector<stile::DictMatrix> rv = views(rb), cv = views(cb);
  const stile::StackedDict by_rows = stile::stack_rows(rv), by_cols = stile::stack_cols(cv);
  CHECK(by_rows.rows() == 161);
  CHECK(by_rows.cols() == 77);
  CHECK(by_cols.rows() == 45);
  CHECK(by_cols.cols() == 332);
  stile::ThreadPool pool1(1), pool2(2);
  for_each_target([&] {
    for (const stile::StackedDict* w : {&by_rows, &by_cols}) {
      std::vector<float> dense(w->rows() * w->cols());
      stile::dequantize(*w, dense.data());
      for (const std::size_t M : kAllM) {
        INFO((w == &by_rows ? "stacked rows" : "stacked cols"));
        const Problem p = make_problem(M, dense, w->rows(), w->cols(), static_cast<std::uint32_t>(M + 5));
        run_epilogues<stile::DefaultTiles>(p, *w, M % 2 ? pool1 : pool2);
      }
      const Problem p = make_problem(29, dense, w->rows(), w->cols(), 9);
      run_bias<Nr8>(p, *w, pool2);
      run_bias<Nr32Gemm>(p, *w, pool1);
    }
  });
}

// The fused GEMM decodes each KC x NR panel (each KC x NC block when the rows span several MC
// blocks) just before its micro-kernels run (kernels/gemm-inl.h), patching outliers last;
// decode_to_packed decodes the whole matrix first. The accumulation order
// is the same, so the two GEMMs must agree bit for bit: a panel decoded wrong, skipped or patched
// in the wrong order shows here.
template <class W>
void check_fused_equals_decoded(const W& w, std::size_t M, stile::ThreadPool& pool) {
  const stile::PackedWeights packed = stile::decode_to_packed(w);
  const std::size_t N = w.rows(), K = w.cols();
  std::mt19937 rng(static_cast<std::uint32_t>(M * 7 + N));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> A(M * K), bias(N);
  for (float& x : A) x = dist(rng);
  for (float& x : bias) x = dist(rng);
  std::vector<float> fused(M * N), decoded(M * N);
  const stile::epilogue::BiasGelu epi{.bias = bias.data()};
  stile::gemm(M, A.data(), K, w, fused.data(), N, epi, &pool);
  stile::gemm(M, A.data(), K, packed.view, decoded.data(), N, epi, &pool);
  INFO("M=" << M << " N=" << N << " K=" << K);
  CHECK(std::memcmp(fused.data(), decoded.data(), fused.size() * sizeof(float)) == 0);
}

TEST_CASE("the fused GEMM equals the GEMM on the decoded weights bit for bit", "[dict]") {
  const std::vector<Quantized> rb = row_blocks(), cb = col_blocks();
  const std::vector<stile::DictMatrix> rv = views(rb), cv = views(cb);
  const stile::StackedDict by_rows = stile::stack_rows(rv), by_cols = stile::stack_cols(cv);
  stile::ThreadPool pool(1);
  for_each_target([&] {
    for (const unsigned bits : kAllBits) {
      // 600 cols: three K blocks of the default tiles, the last one short; 70 rows: an edge panel.
      const Quantized q = make_quantized(70, 600, bits, bits + 11);
      for (const std::size_t M : {std::size_t{1}, std::size_t{7}, std::size_t{32}, std::size_t{130}}) {
        INFO("bits " << bits);
        check_fused_equals_decoded(q.view(), M, pool);
      }
    }
    for (const std::size_t M : {std::size_t{5}, std::size_t{32}}) {
      check_fused_equals_decoded(by_rows, M, pool);
      check_fused_equals_decoded(by_cols, M, pool);
    }
  });
}

TEST_CASE("bad quantized weights are refused with a clear error", "[dict]") {
  const Quantized a = make_quantized(16, 8, 4, 1), b = make_quantized(16, 9, 4, 2), c = make_quantized(17, 8, 3, 3);
  const std::vector<stile::DictMatrix> mismatched_cols = {a.view(), b.view()};
  const std::vector<stile::DictMatrix> mismatched_rows = {a.view(), c.view()};
  CHECK_THROWS_WITH(stile::stack_rows(mismatched_cols), Catch::Contains("stack_rows") && Catch::Contains("cols"));
  CHECK_THROWS_WITH(stile::stack_cols(mismatched_rows), Catch::Contains("stack_cols") && Catch::Contains("rows"));
  CHECK_THROWS_WITH(stile::stack_rows({}), Catch::Contains("no blocks"));
  CHECK_NOTHROW(stile::stack_rows(mismatched_rows));
  CHECK_NOTHROW(stile::stack_cols(mismatched_cols));

  stile::DictMatrix seven = a.view();
  seven.bits = 7;
  CHECK_THROWS_WITH(stile::decode_to_packed(seven), Catch::Contains("7 bits"));
  std::vector<float> A(4 * 8), C(4 * 16);
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, seven, C.data(), 16), Catch::Contains("7 bits"));
  const std::vector<stile::DictMatrix> with_seven = {a.view(), seven};
  CHECK_THROWS_WITH(stile::stack_rows(with_seven), Catch::Contains("7 bits"));
  stile::DictMatrix no_centroids = a.view();
  no_centroids.centroids = nullptr;
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, no_centroids, C.data(), 16), Catch::Contains("centroids"));
  // A stack whose shape disagrees with its blocks (made by hand, not by stack_rows).
  stile::StackedDict wrong = stile::stack_rows(mismatched_rows);
  wrong.n_rows += 1;
  std::vector<float> C2(4 * 34);
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, wrong, C2.data(), 34), Catch::Contains("add up"));
}
