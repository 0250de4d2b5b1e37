// fp16 weights: the scalar half <-> float conversion (every pattern, rounding, specials), the
// quantizer's refusals, and the GEMM on PackedF16 on every Highway target this machine supports:
// the panel decode is exact, so the GEMM equals the fp32 GEMM on the decoded halves.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "for_each_target.hpp"
#include "host_tiles.hpp"
#include "stile/core/half.hpp"
#include "stile/kernels/fp16_weights.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/gemm_impl.hpp"  // instantiates the host tile shape below

namespace {

bool half_is_nan(std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }

// The half nearest to x by brute force over its two neighbours (ties: the even mantissa).
void check_nearest(float x) {
  const std::uint16_t h = stile::float_to_half(x);
  const double v = stile::half_to_float(h);
  INFO("x = " << x << " (0x" << std::hex << std::bit_cast<std::uint32_t>(x) << ") -> 0x" << h);
  if (std::abs(double(x)) >= 65520.0) {
    CHECK((h & 0x7FFFu) == 0x7C00u);
    return;
  }
  REQUIRE((h & 0x7C00u) != 0x7C00u);
  const double err = std::abs(double(x) - v);
  const std::uint16_t mag = h & 0x7FFFu, sign = h & 0x8000u;
  if (mag < 0x7BFFu) {
    const double up = stile::half_to_float(static_cast<std::uint16_t>(sign | (mag + 1)));
    CHECK(err <= std::abs(double(x) - up));
    if (err == std::abs(double(x) - up)) CHECK((mag & 1u) == 0);
  }
  if (mag > 0) {
    const double down = stile::half_to_float(static_cast<std::uint16_t>(sign | (mag - 1)));
    CHECK(err <= std::abs(double(x) - down));
    if (err == std::abs(double(x) - down)) CHECK((mag & 1u) == 0);
  }
}

}  // namespace

TEST_CASE("half <-> float: every half round-trips; rounding is to nearest even", "[fp16]") {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = stile::half_to_float(h);
    if (half_is_nan(h)) {
      REQUIRE(std::isnan(f));
      REQUIRE(half_is_nan(stile::float_to_half(f)));
      REQUIRE((stile::float_to_half(f) & 0x8000u) == (h & 0x8000u));
    } else {
      REQUIRE(stile::float_to_half(f) == h);
    }
  }
  // Exact values.
  CHECK(stile::half_to_float(0x3C00) == 1.0f);
  CHECK(stile::half_to_float(0x7BFF) == 65504.0f);
  CHECK(stile::half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(stile::half_to_float(0x0400) == std::ldexp(1.0f, -14));
  CHECK(std::isinf(stile::half_to_float(0xFC00)));
  CHECK(std::signbit(stile::half_to_float(0x8000)));
  // Ties to even: normal, subnormal, subnormal-to-normal, the last finite to inf, zero.
  CHECK(stile::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // 1 | 1 + 2^-10: to 1
  CHECK(stile::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // to 1 + 2^-9
  CHECK(stile::float_to_half(-(1.0f + std::ldexp(1.0f, -11))) == 0xBC00);
  CHECK(stile::float_to_half(3 * std::ldexp(1.0f, -25)) == 0x0002);  // m = 1.5: to 2
  CHECK(stile::float_to_half(5 * std::ldexp(1.0f, -25)) == 0x0002);  // m = 2.5: to 2
  CHECK(stile::float_to_half(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);
  CHECK(stile::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(stile::float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(stile::float_to_half(-std::ldexp(1.0f, -26)) == 0x8000);
  CHECK(stile::float_to_half(65519.0f) == 0x7BFF);
  CHECK(stile::float_to_half(65520.0f) == 0x7C00);  // the tie past 65504 (odd) goes to inf
  CHECK(stile::float_to_half(1e30f) == 0x7C00);
  CHECK(stile::float_to_half(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(half_is_nan(stile::float_to_half(std::numeric_limits<float>::quiet_NaN())));
  // Nearest on random floats of every magnitude a half can hold, and on random bit patterns.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-30, 16);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mant(rng), exp(rng)) * (i % 2 ? -1.0f : 1.0f);
    check_nearest(x);
  }
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(bits(rng));
    if (!std::isnan(x)) check_nearest(x);
  }
}

TEST_CASE("pack_weights_f16 refuses weights fp16 cannot hold, naming the tensor", "[fp16]") {
  std::vector<float> W(3 * 5, 0.5f);
  W[7] = 65504.0f;  // the largest finite half is fine
  CHECK_NOTHROW(stile::pack_weights_f16(stile::DenseF32(W.data(), 3, 5), "ok"));
  W[7] = 65505.0f;
  CHECK_THROWS_AS(stile::pack_weights_f16(stile::DenseF32(W.data(), 3, 5), "encoder.layer.3.ffn1"), stile::Error);
  CHECK_THROWS_WITH(stile::pack_weights_f16(stile::DenseF32(W.data(), 3, 5), "encoder.layer.3.ffn1"),
                    Catch::Contains("encoder.layer.3.ffn1") && Catch::Contains("row 1") && Catch::Contains("column 2"));
  W[7] = -1e6f;
  CHECK_THROWS_WITH(stile::pack_weights_f16(stile::DenseF32(W.data(), 3, 5), "w"), Catch::Contains("fp16"));
  W[7] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(stile::pack_weights_f16(stile::DenseF32(W.data(), 3, 5), "w.nan"), Catch::Contains("w.nan"));
  W[7] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(stile::pack_weights_f16(stile::DenseF32(W.data(), 3, 5)), stile::Error);
  // Packed for another panel width: refused by the GEMM, not misread.
  W[7] = 0.0f;
  std::vector<float> A(4 * 5), C(4 * 3);
  stile::PackedWeightsF16 packed = stile::pack_weights_f16(stile::DenseF32(W.data(), 3, 5));
  CHECK(packed.bytes() == packed.storage.size() * 2);
  packed.view.nr *= 2;
  CHECK_THROWS_WITH(stile::gemm(4, A.data(), 5, packed.view, C.data(), 3), Catch::Contains("panel width"));
}

TEST_CASE("pack_weights_f16 from packed fp32 equals it from the dense weights, on every target", "[fp16]") {
  // Every kind of value: normal halves with ties both ways, subnormal halves, values that round to
  // zero, the largest half and the carries into the exponent; odd shapes so the last panel pads.
  std::mt19937 rng(2024);
  std::uniform_int_distribution<std::uint32_t> bits(0x30000000u, 0x477FE000u);  // 2^-31 .. 65504
  const std::vector<float> special{0.0f,        -0.0f,       65504.0f,    -65504.0f,  0x1p-14f,
                                   0x1p-24f,    0x1p-25f,    0x1.8p-25f,  0x1.002p0f, 0x1.006p0f,
                                   0x1.ffep-1f, 0x1.fffp-1f, 0x1.ffcp15f, 6e-8f,      -3e-5f};
  stile_test::for_each_target([&] {
    for (const auto& [N, K] : {std::pair<std::size_t, std::size_t>{1, 1}, {5, 3}, {37, 53}, {67, 129}}) {
      std::vector<float> W(N * K);
      for (std::size_t i = 0; i < W.size(); ++i) {
        const float x = std::bit_cast<float>(bits(rng));
        W[i] = i < special.size() ? special[i] : (i % 2 ? -x : x);
      }
      const stile::PackedWeightsF16 dense = stile::pack_weights_f16(stile::DenseF32(W.data(), N, K), "w");
      const stile::PackedWeights f32 = stile::pack_weights(stile::DenseF32(W.data(), N, K));
      const stile::PackedWeightsF16 packed = stile::pack_weights_f16(f32.view, "w");
      INFO("N=" << N << " K=" << K);
      REQUIRE(packed.storage.size() == dense.storage.size());
      CHECK(std::equal(packed.storage.data(), packed.storage.data() + packed.storage.size(), dense.storage.data()));
      CHECK(packed.view.rows() == N);
      CHECK(packed.view.cols() == K);
      CHECK(packed.view.nr == dense.view.nr);
    }
    // A weight fp16 cannot hold is refused as from the dense weights: the tensor, its row and column.
    std::vector<float> W(7 * 5, 0.25f);
    for (const float bad :
         {65505.0f, -70000.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      W[6 * 5 + 3] = bad;
      const stile::PackedWeights f32 = stile::pack_weights(stile::DenseF32(W.data(), 7, 5));
      CHECK_THROWS_WITH(stile::pack_weights_f16(f32.view, "layer.2.ffn_in"),
                        Catch::Contains("layer.2.ffn_in") && Catch::Contains("row 6") && Catch::Contains("column 3"));
    }
    W[6 * 5 + 3] = 65504.0f;
    CHECK_NOTHROW(stile::pack_weights_f16(stile::pack_weights(stile::DenseF32(W.data(), 7, 5)).view, "ok"));
  });
}

namespace {

// The GEMM on PackedF16 against (a) the same GEMM on PackedF32 holding the decoded halves, which
// must match bit for bit (same kernel, same summation order, an exact decode), and (b) a double
// reference on the decoded halves, within 1e-5 of sum |a||w| + |bias| + |residual|.
template <class Tiles>
void check_f16_gemm(std::size_t M, std::size_t N, std::size_t K, stile::ThreadPool& pool) {
  std::mt19937 rng(static_cast<std::uint32_t>(M * 131 + N * 7 + K));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::size_t lda = K + 3, ldc = N + 5;
  std::vector<float> A(M * lda), W(N * K), bias(N), res(M * ldc);
  for (auto* v : {&A, &W, &bias, &res}) {
    for (float& x : *v) x = dist(rng);
  }
  std::vector<float> Wd(W.size());  // the weights as the GEMM sees them
  for (std::size_t i = 0; i < W.size(); ++i) Wd[i] = stile::half_to_float(stile::float_to_half(W[i]));
  const stile::PackedWeightsF16 w16 = stile::pack_weights_f16<Tiles>(stile::DenseF32(W.data(), N, K), "test");
  const stile::PackedWeights w32 = stile::pack_weights<Tiles>(stile::DenseF32(Wd.data(), N, K));
  REQUIRE(w16.bytes() * 2 == w32.bytes());

  auto run = [&](const auto& w, auto epi, int which) {
    std::vector<float> C(M * ldc, -777.0f);
    if (which == 4) C = res;  // in place: C is the residual
    if constexpr (decltype(epi)::has_residual) epi.residual = which == 4 ? C.data() : res.data();
    stile::gemm<Tiles>(M, A.data(), lda, w, C.data(), ldc, epi, &pool);
    return C;
  };
  auto both = [&](auto epi, int which, bool has_bias, bool gelu, bool residual) {
    const std::vector<float> c16 = run(w16.view, epi, which), c32 = run(w32.view, epi, which);
    std::size_t differ = 0;
    double worst = 0.0;
    for (std::size_t m = 0; m < M; ++m) {
      for (std::size_t n = 0; n < ldc; ++n) {
        const float got = c16[m * ldc + n];
        if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(c32[m * ldc + n])) ++differ;
        if (n >= N) {
          if (which != 4) REQUIRE(got == -777.0f);  // nothing written past column N
          continue;
        }
        double acc = 0.0, mag = 0.0;
        for (std::size_t k = 0; k < K; ++k) {
          const double t = double(A[m * lda + k]) * double(Wd[n * K + k]);
          acc += t;
          mag += std::abs(t);
        }
        if (has_bias) acc += bias[n], mag += std::abs(bias[n]);
        if (gelu) acc = 0.5 * acc * (1.0 + std::erf(acc / std::sqrt(2.0)));
        if (residual) acc += res[m * ldc + n], mag += std::abs(res[m * ldc + n]);
        worst = std::max(worst, std::abs(double(got) - acc) / std::max(mag, 1e-30));
      }
    }
    INFO("M=" << M << " N=" << N << " K=" << K << " epilogue " << which << " worst relative error " << worst);
    CHECK(differ == 0);
    CHECK(worst <= 1e-5);
  };
  both(stile::epilogue::None{}, 0, false, false, false);
  both(stile::epilogue::Bias{.bias = bias.data()}, 1, true, false, false);
  both(stile::epilogue::BiasGelu{.bias = bias.data()}, 2, true, true, false);
  both(stile::epilogue::BiasResidual{bias.data(), nullptr, ldc}, 3, true, false, true);
  both(stile::epilogue::BiasResidual{bias.data(), nullptr, ldc}, 4, true, false, true);
  both(stile::epilogue::Residual{nullptr, nullptr, ldc}, 5, false, false, true);
}

}  // namespace

TEST_CASE("gemm on PackedF16 equals the fp32 GEMM on the decoded halves, on every target", "[fp16][gemm]") {
  stile::ThreadPool pool1(1), pool2(2), pool3(3);
  stile_test::for_each_target([&] {
    for (std::size_t M = 1; M <= 33; ++M) check_f16_gemm<stile::DefaultTiles>(M, 37, 53, M % 2 ? pool1 : pool2);
    check_f16_gemm<stile::DefaultTiles>(5, 1, 1, pool1);
    check_f16_gemm<stile::DefaultTiles>(7, 257, 301, pool2);               // K over KC: several K blocks
    check_f16_gemm<stile::DefaultTiles>(300, 100, 129, pool2);             // M over MC: whole blocks decoded
    check_f16_gemm<stile::DefaultTiles>(9, 1100, 71, pool3);               // N over NC, uneven chunks
    check_f16_gemm<stile_test::SmallHostTiles>(29, 61, 77, pool2);        // a host's tiles
  });
}

TEST_CASE("the fp16 panel decode is exact for every finite half, on every target", "[fp16][gemm]") {
  // W holds every finite half once (K = 16 per row); A = I16 makes C = W^T, each element one
  // product by 1 plus zeros, so C shows the decoded weights themselves.
  std::vector<float> values;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    if ((i & 0x7C00u) != 0x7C00u) values.push_back(stile::half_to_float(static_cast<std::uint16_t>(i)));
  }
  const std::size_t K = 16, N = values.size() / K;
  REQUIRE(N * K == values.size());
  std::vector<float> A(K * K, 0.0f), C(K * N);
  for (std::size_t k = 0; k < K; ++k) A[k * K + k] = 1.0f;
  stile::ThreadPool pool2(2);
  stile_test::for_each_target([&] {
    const stile::PackedWeightsF16 w = stile::pack_weights_f16(stile::DenseF32(values.data(), N, K));
    stile::gemm(K, A.data(), K, w.view, C.data(), N, stile::epilogue::None{}, &pool2);
    std::size_t wrong = 0;
    for (std::size_t n = 0; n < N; ++n) {
      for (std::size_t k = 0; k < K; ++k) wrong += C[k * N + n] != values[n * K + k];
    }
    CHECK(wrong == 0);
  });
}
