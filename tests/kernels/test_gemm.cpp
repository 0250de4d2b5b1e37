// The GEMM against a naive double-precision reference, on every Highway target this machine
// supports, for edge shapes, every epilogue, several thread counts and host-chosen tile shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "for_each_target.hpp"
#include "host_tiles.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/gemm_impl.hpp"  // instantiates the tests' own tile shapes

namespace {

struct Problem {
  std::size_t M, N, K;
  std::size_t lda, ldc;
  std::vector<float> A, W, bias, residual, C;
};

Problem make_problem(std::size_t M, std::size_t N, std::size_t K, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Problem p{M, N, K, K + 3, N + 5, {}, {}, {}, {}, {}};  // padded strides catch stride bugs
  p.A.resize(M * p.lda);
  p.W.resize(N * K);
  p.bias.resize(N);
  p.residual.resize(M * p.ldc);
  for (auto* v : {&p.A, &p.W, &p.bias, &p.residual}) {
    for (float& x : *v) x = dist(rng);
  }
  p.C.assign(M * p.ldc, -777.0f);  // the gaps between rows must stay untouched
  return p;
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// Naive reference. Returns the reference C and, per element, the scale sum_k |a||w| + |extras|
// against which the rounding error of a float computation is measured.
void reference(const Problem& p, bool bias, bool gelu, bool residual, std::vector<double>& ref,
               std::vector<double>& scale) {
  ref.assign(p.M * p.N, 0.0);
  scale.assign(p.M * p.N, 0.0);
  for (std::size_t m = 0; m < p.M; ++m) {
    for (std::size_t n = 0; n < p.N; ++n) {
      double acc = 0.0, mag = 0.0;
      for (std::size_t k = 0; k < p.K; ++k) {
        const double t = double(p.A[m * p.lda + k]) * double(p.W[n * p.K + k]);
        acc += t;
        mag += std::abs(t);
      }
      if (bias) {
        acc += p.bias[n];
        mag += std::abs(p.bias[n]);
      }
      if (gelu) acc = gelu_ref(acc);
      if (residual) {
        acc += p.residual[m * p.ldc + n];
        mag += std::abs(p.residual[m * p.ldc + n]);
      }
      ref[m * p.N + n] = acc;
      scale[m * p.N + n] = mag;
    }
  }
}

// Relative error <= 1e-5 of each element against its scale; untouched padding.
void check(const Problem& p, const std::vector<float>& C, bool bias, bool gelu, bool residual) {
  std::vector<double> ref, scale;
  reference(p, bias, gelu, residual, ref, scale);
  double worst = 0.0;
  for (std::size_t m = 0; m < p.M; ++m) {
    for (std::size_t n = 0; n < p.N; ++n) {
      const double err = std::abs(C[m * p.ldc + n] - ref[m * p.N + n]) / std::max(scale[m * p.N + n], 1e-30);
      worst = std::max(worst, err);
    }
    for (std::size_t n = p.N; n < p.ldc; ++n) {
      if (C[m * p.ldc + n] != -777.0f && !residual) FAIL("wrote past column N at row " << m);
    }
  }
  INFO("M=" << p.M << " N=" << p.N << " K=" << p.K << " worst relative error " << worst);
  CHECK(worst <= 1e-5);
}

// How the test hands W to the GEMM: as stored (DenseF32), pre-packed for the current target
// (PackedF32), or transposed with a padded, unaligned row stride (DenseF32Transposed, read in place).
enum class Layout { kDense, kPacked, kTransposed };

// Runs every epilogue on W in the given layout.
template <class Tiles, Layout kLayout = Layout::kDense>
void run_all_epilogues(std::size_t M, std::size_t N, std::size_t K, stile::ThreadPool& pool) {
  Problem p = make_problem(M, N, K, static_cast<std::uint32_t>(M * 131 + N * 7 + K));
  const stile::DenseF32 dense(p.W.data(), N, K);
  stile::PackedWeights packed;
  std::vector<float> transposed;
  const std::size_t ldt = N + 3;
  if constexpr (kLayout == Layout::kPacked) packed = stile::pack_weights<Tiles>(dense);
  if constexpr (kLayout == Layout::kTransposed) {
    transposed.assign(K * ldt, 0.0f);
    for (std::size_t n = 0; n < N; ++n) {
      for (std::size_t k = 0; k < K; ++k) transposed[k * ldt + n] = p.W[n * K + k];
    }
  }
  const auto w = [&] {
    if constexpr (kLayout == Layout::kPacked) {
      return packed.view;
    } else if constexpr (kLayout == Layout::kTransposed) {
      return stile::DenseF32Transposed(transposed.data(), N, K, ldt);
    } else {
      return dense;
    }
  }();
  {
    auto C = p.C;
    stile::gemm<Tiles>(M, p.A.data(), p.lda, w, C.data(), p.ldc, stile::epilogue::None{}, &pool);
    check(p, C, false, false, false);
  }
  {
    auto C = p.C;
    stile::gemm<Tiles>(M, p.A.data(), p.lda, w, C.data(), p.ldc, stile::epilogue::Bias{.bias = p.bias.data()}, &pool);
    check(p, C, true, false, false);
  }
  {
    auto C = p.C;
    stile::gemm<Tiles>(M, p.A.data(), p.lda, w, C.data(), p.ldc, stile::epilogue::BiasGelu{.bias = p.bias.data()},
                       &pool);
    check(p, C, true, true, false);
  }
  {
    auto C = p.C;
    stile::gemm<Tiles>(M, p.A.data(), p.lda, w, C.data(), p.ldc,
                       stile::epilogue::BiasResidual{p.bias.data(), p.residual.data(), p.ldc}, &pool);
    check(p, C, true, false, true);
  }
  {
    // In place: C starts as the residual and the result overwrites it.
    auto C = p.residual;
    stile::gemm<Tiles>(M, p.A.data(), p.lda, w, C.data(), p.ldc,
                       stile::epilogue::BiasResidual{p.bias.data(), C.data(), p.ldc}, &pool);
    check(p, C, true, false, true);
  }
}

using stile_test::for_each_target;

}  // namespace

TEST_CASE("gemm equals the naive reference on every target, shape and epilogue", "[gemm]") {
  std::string names;
  for (const std::int64_t t : hwy::SupportedAndGeneratedTargets()) names += std::string(hwy::TargetName(t)) + " ";
  WARN("Highway targets tested: " << names);
  stile::ThreadPool pool1(1), pool2(2), pool3(3);
  for_each_target([&] {
    for (const std::size_t M : {1, 7, 16, 128, 384}) {
      for (const auto& nk : {std::pair<std::size_t, std::size_t>{37, 53}, {100, 300}, {257, 129}, {19, 600}}) {
        run_all_epilogues<stile::DefaultTiles>(M, nk.first, nk.second, M % 2 ? pool1 : pool2);
      }
    }
    // N beyond NC (several jc blocks), several threads with uneven chunks.
    run_all_epilogues<stile::DefaultTiles>(9, 1100, 70, pool3);
  });
}

TEST_CASE("gemm with a host-chosen tile shape crosses every cache block", "[gemm]") {
  // Small MC / NC / KC so that even small problems span several blocks of each.
  using Small = stile_test::SmallHostTiles;
  using Tall = stile::TileShape<1, 4, 8, 1, 4>;
  stile::ThreadPool pool2(2);
  for_each_target([&] {
    run_all_epilogues<Small>(29, 61, 77, pool2);
    run_all_epilogues<Tall>(5, 13, 17, pool2);
  });
}

TEST_CASE("gemm on weights packed at load equals the reference", "[gemm]") {
  stile::ThreadPool pool2(2);
  for_each_target([&] {
    for (const std::size_t M : {1, 7, 128}) run_all_epilogues<stile::DefaultTiles, Layout::kPacked>(M, 100, 300, pool2);
    run_all_epilogues<stile_test::SmallHostTiles, Layout::kPacked>(29, 61, 77, pool2);
  });
  // Weights packed for another panel width are refused, not misread.
  std::vector<float> A(4 * 8), W(6 * 8), C(4 * 6);
  stile::PackedWeights packed = stile::pack_weights(stile::DenseF32(W.data(), 6, 8));
  packed.view.nr *= 2;
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, packed.view, C.data(), 6), Catch::Contains("panel width"));
}

TEST_CASE("gemm on transposed weights (attention's V) equals the reference", "[gemm]") {
  stile::ThreadPool pool1(1), pool2(2);
  for_each_target([&] {
    // Full panels read in place (N a multiple of every NR), edge panels copied, and M beyond MC
    // (the KC x NC block decoded once and shared by the MC blocks).
    for (const std::size_t M : {1, 8, 32, 300}) {
      for (const auto& nk : {std::pair<std::size_t, std::size_t>{32, 512}, {64, 130}, {37, 53}, {96, 300}}) {
        run_all_epilogues<stile::DefaultTiles, Layout::kTransposed>(M, nk.first, nk.second, M % 2 ? pool1 : pool2);
      }
    }
    run_all_epilogues<stile_test::SmallHostTiles, Layout::kTransposed>(29, 61, 77, pool2);
  });
}

TEST_CASE("gemm rejects bad arguments with a clear error", "[gemm]") {
  std::vector<float> A(4 * 8), W(6 * 8), C(4 * 6), bias(6);
  const stile::DenseF32 w(W.data(), 6, 8);
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 7, w, C.data(), 6), Catch::Contains("lda"));
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, w, C.data(), 5), Catch::Contains("ldc"));
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, w, A.data(), 6), Catch::Contains("overlaps"));
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, w, C.data(), 6, stile::epilogue::Bias{}), Catch::Contains("bias"));
  using GeluResidual = stile::Epilogue<true, stile::Activation::kGelu, true>;
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, w, C.data(), 6, GeluResidual{bias.data(), C.data(), 6}),
                    Catch::Contains("in-place"));
  const stile::DenseF32 empty_k(W.data(), 6, 0);
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 8, empty_k, C.data(), 6), Catch::Contains("K"));
}
