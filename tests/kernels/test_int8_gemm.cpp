// The int8 GEMM on every Highway target this machine supports, with and without the dot-product
// instructions (VNNI, AVX-VNNI, sdot): the integer product exactly against a naive loop (u8 = 255
// and the weight range's extremes, where vpmaddubsw would saturate), the fused fp32 epilogue
// against a reference computed from the same quantized integers, the fp32 GEMM within the
// quantization error, both weight schemes, per-row and per-tensor activations, zero rows, and the
// validation of scales and zero points.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "for_each_target.hpp"
#include "int8_test_util.hpp"
#include "stile/kernels/gelu_erf_approx.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/int8_gemm.hpp"

namespace {

const std::vector<std::size_t> kMs = {1, 2, 3, 5, 7, 8, 17, 33, 64};
const std::vector<std::size_t> kNs = {1, 5, 16, 33, 100, 384};
const std::vector<std::size_t> kKs = {1, 3, 4, 5, 17, 64, 384, 1536};

// Shapes to run: all of them natively; under emulation (the aarch64 cross build runs under
// qemu-user) every small one and a few large ones, the naive references being O(MNK).
bool wanted([[maybe_unused]] std::size_t M, [[maybe_unused]] std::size_t N, [[maybe_unused]] std::size_t K) {
#if defined(__x86_64__)
  return true;
#else
  return M * N * K <= (std::size_t{1} << 18) || (M == 64 && N == 384 && K == 1536) ||
         (M == 33 && N == 100 && K == 384) || (M == 17 && N == 384 && K == 384) || (M == 8 && N == 33 && K == 1536);
#endif
}

using stile_test::with_and_without_int8_dot;

// Weights in [-1, 1] with, in every row, entries at both ends (so quantized values reach the range's
// extremes), some rows all zero.
std::vector<float> make_weights(std::size_t N, std::size_t K, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> w(N * K);
  for (float& x : w) x = dist(rng);
  for (std::size_t n = 0; n < N; ++n) {
    w[n * K] = -1.0f;
    if (K > 1) w[n * K + 1] = 1.0f;
    if (n % 7 == 3) std::fill(w.begin() + n * K, w.begin() + (n + 1) * K, 0.0f);
  }
  return w;
}

TEST_CASE("gemm_u8s8_i32 equals the naive integer product exactly", "[int8]") {
  stile_test::for_each_target([] {
    with_and_without_int8_dot([] {
      std::mt19937 rng(7);
      stile::ThreadPool pool(2);
      for (const auto scheme : {stile::Int8Scheme::kSymmetricPerChannel, stile::Int8Scheme::kAsymmetricPerTensor}) {
        for (const std::size_t M : kMs) {
          for (const std::size_t N : kNs) {
            for (const std::size_t K : kKs) {
              if (!wanted(M, N, K)) continue;
              const std::vector<float> wf = make_weights(N, K, rng);
              const stile::Int8Weights w = stile::quantize_int8(wf.data(), N, K, K, scheme, "w");
              // A: mostly 255 (the saturation case) and 0, the rest random; lda > K.
              const std::size_t lda = K + 3, ldc = N + 2;
              std::vector<std::uint8_t> A(M * lda, 0);
              std::uniform_int_distribution<int> byte(0, 255), pick(0, 3);
              for (auto& a : A) {
                const int p = pick(rng);
                a = static_cast<std::uint8_t>(p == 0 ? 0 : p == 1 ? byte(rng) : 255);
              }
              std::vector<std::int32_t> C(M * ldc, -777);
              stile::gemm_u8s8_i32(M, A.data(), lda, w.view, C.data(), ldc, &pool);
              for (std::size_t m = 0; m < M; ++m) {
                for (std::size_t n = 0; n < N; ++n) {
                  std::int64_t ref = 0;
                  for (std::size_t k = 0; k < K; ++k) ref += std::int64_t{A[m * lda + k]} * w.view.stored(n, k);
                  if (C[m * ldc + n] != ref) {
                    FAIL("M " << M << " N " << N << " K " << K << " at " << m << "," << n << ": " << C[m * ldc + n]
                              << " != " << ref);
                  }
                }
                for (std::size_t n = N; n < ldc; ++n) REQUIRE(C[m * ldc + n] == -777);
              }
            }
          }
        }
      }
    });
  });
}

TEST_CASE("quantize_int8 stores the range of the target's kernel", "[int8]") {
  stile_test::for_each_target([] {
    with_and_without_int8_dot([] {
      std::mt19937 rng(3);
      const std::size_t N = 9, K = 13;
      const std::vector<float> wf = make_weights(N, K, rng);
      const std::int32_t qmax = stile::int8_weight_max();
      REQUIRE((qmax == 127 || qmax == 63));
      const auto sym = stile::quantize_int8(wf.data(), N, K, K, stile::Int8Scheme::kSymmetricPerChannel, "w");
      const auto asym = stile::quantize_int8(wf.data(), N, K, K, stile::Int8Scheme::kAsymmetricPerTensor, "w");
      CHECK(sym.view.zero_point == 0);
      for (std::size_t n = 0; n < N; ++n) {
        std::int32_t lo = 1000, hi = -1000, sum = 0;
        for (std::size_t k = 0; k < K; ++k) {
          lo = std::min<std::int32_t>(lo, sym.view.stored(n, k));
          hi = std::max<std::int32_t>(hi, sym.view.stored(n, k));
          sum += asym.view.stored(n, k);
          CHECK(std::abs(sym.view.dequantized(n, k) - wf[n * K + k]) <= sym.view.scales[n] * 0.5f + 1e-7f);
          CHECK(std::abs(asym.view.dequantized(n, k) - wf[n * K + k]) <= asym.view.scales[n] * 0.5f + 1e-6f);
        }
        CHECK(sum == asym.view.col_sums[n]);
        if (n % 7 != 3) {
          CHECK(lo == -qmax);
          CHECK(hi == qmax);
        }
        CHECK(asym.view.scales[n] == asym.view.scales[0]);  // per tensor: broadcast
      }
      // The asymmetric stored range spans [-(qmax + 1), qmax] (its top within a rounding step:
      // the zero point is rounded too).
      std::int32_t lo = 1000, hi = -1000;
      for (std::size_t n = 0; n < N; ++n) {
        for (std::size_t k = 0; k < K; ++k) {
          lo = std::min<std::int32_t>(lo, asym.view.stored(n, k));
          hi = std::max<std::int32_t>(hi, asym.view.stored(n, k));
        }
      }
      CHECK(lo == -(qmax + 1));
      CHECK(hi >= qmax - 1);
      CHECK(hi <= qmax);
    });
  });
}

TEST_CASE("quantize_int8 rounds half to even as std::nearbyint, ties and odd shapes included", "[int8]") {
  // Row n's largest |w| is qmax * 2^-6, so its scale is 2^-6 and w / scale = t + 0.5 exactly: every
  // weight but the maximum is a tie, positive and negative. Odd N and K (K % 4 != 0: the last
  // k-group is partial).
  for (const std::int32_t qmax : {127, 63}) {
    const stile::Int8Packing packing{.nr = 8, .weight_max = qmax};
    const std::size_t N = 11, K = 37;
    std::vector<float> w(N * K);
    for (std::size_t n = 0; n < N; ++n) {
      for (std::size_t k = 0; k < K; ++k) {
        const auto t = static_cast<std::int32_t>((n * K + k) % std::size_t(2 * qmax)) - qmax;  // -qmax .. qmax - 1
        w[n * K + k] = (static_cast<float>(t) + 0.5f) * 0x1p-6f;
      }
      w[n * K + n % K] = static_cast<float>(n % 2 ? -qmax : qmax) * 0x1p-6f;
    }
    const auto q = stile::quantize_int8(w.data(), N, K, K, stile::Int8Scheme::kSymmetricPerChannel, "ties", packing);
    for (std::size_t n = 0; n < N; ++n) {
      REQUIRE(q.view.scales[n] == 0x1p-6f);
      std::int32_t sum = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const auto want = static_cast<std::int32_t>(std::nearbyint(w[n * K + k] * 64.0f));
        INFO("qmax " << qmax << ", row " << n << ", column " << k);
        CHECK(q.view.stored(n, k) == want);
        sum += want;
      }
      CHECK(q.view.col_sums[n] == sum);
    }
  }
}

// The scalar definition of the activation quantization (rounding half to even).
void quantize_ref(const float* x, std::size_t K, float lo, float hi, std::int32_t qmax, float& scale,
                  std::int32_t& zp, std::vector<std::uint8_t>* q) {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  if (!(hi > lo)) {
    scale = 1.0f;
    zp = 0;
  } else {
    scale = std::max((hi - lo) / static_cast<float>(qmax), std::numeric_limits<float>::min());
    zp = std::clamp(static_cast<std::int32_t>(std::nearbyint(-lo / scale)), 0, qmax);
  }
  if (q == nullptr) return;
  const float inv = 1.0f / scale;
  for (std::size_t k = 0; k < K; ++k) {
    q->push_back(
        static_cast<std::uint8_t>(std::clamp(static_cast<std::int32_t>(std::nearbyint(x[k] * inv)) + zp, 0, qmax)));
  }
}

TEST_CASE("quantize_activations matches its scalar definition", "[int8]") {
  stile_test::for_each_target([] { with_and_without_int8_dot([] {
    const std::int32_t qmax = stile::int8_packing().activation_max;
    // 7-bit activations exactly where the kernel adds two vpmaddubsw results: x86 without a dot
    // product, the only targets with 7-bit weights.
    const bool pairs = stile::int8_weight_max() == 63;
    CHECK(qmax == (pairs ? 127 : 255));
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    for (const std::size_t K : {1u, 3u, 17u, 384u}) {
      const std::size_t M = 6, lda = K + 1;
      std::vector<float> A(M * lda);
      for (float& x : A) x = dist(rng);
      std::fill(A.begin() + lda, A.begin() + lda + K, 0.0f);           // a zero row
      for (std::size_t k = 0; k < K; ++k) A[2 * lda + k] = 1.0f + k;   // all positive
      for (std::size_t k = 0; k < K; ++k) A[3 * lda + k] = -0.5f - k;  // all negative
      for (const auto aq : {stile::ActivationQuant::kPerRow, stile::ActivationQuant::kPerTensor}) {
        stile::QuantizedActivations qa;
        stile::quantize_activations(M, A.data(), lda, K, aq, qa);
        REQUIRE(qa.ld == stile::int8_padded_k(K));
        float tlo = 0.0f, thi = 0.0f;
        for (std::size_t m = 0; m < M; ++m) {
          for (std::size_t k = 0; k < K; ++k) {
            tlo = std::min(tlo, A[m * lda + k]);
            thi = std::max(thi, A[m * lda + k]);
          }
        }
        for (std::size_t m = 0; m < M; ++m) {
          float lo = 0.0f, hi = 0.0f;
          for (std::size_t k = 0; k < K; ++k) {
            lo = std::min(lo, A[m * lda + k]);
            hi = std::max(hi, A[m * lda + k]);
          }
          if (aq == stile::ActivationQuant::kPerTensor) lo = tlo, hi = thi;
          float scale;
          std::int32_t zp;
          std::vector<std::uint8_t> q;
          quantize_ref(A.data() + m * lda, K, lo, hi, qmax, scale, zp, &q);
          CHECK(qa.scale[m] == scale);
          CHECK(qa.zero_point[m] == zp);
          std::int32_t sum = 0;
          for (std::size_t k = 0; k < K; ++k) {
            REQUIRE(qa.data[m * qa.ld + k] == q[k]);
            sum += q[k];
          }
          for (std::size_t k = K; k < qa.ld; ++k) REQUIRE(qa.data[m * qa.ld + k] == 0);
          CHECK(qa.row_sum[m] == sum);
          if (m == 1 && aq == stile::ActivationQuant::kPerRow) {
            CHECK(scale == 1.0f);
            CHECK(zp == 0);
          }
        }
      }
    }
  }); });
}

// The largest 16-bit partial sums the kernels form: every activation at the top code, every
// weight at +-qmax, so each vpmaddubsw pair (and the pair kernel's sum of two) is at its bound;
// a kernel that saturated or wrapped would miss the exact +-K.
TEST_CASE("gemm_int8 is exact at the extremes of its codes", "[int8]") {
  stile_test::for_each_target([] { with_and_without_int8_dot([] {
    for (const std::size_t K : {8u, 12u, 1536u}) {  // an even and an odd number of k-groups
      const std::size_t M = 5, N = 33;
      const std::vector<float> A(M * K, 1.0f);
      std::vector<float> W(N * K);
      for (std::size_t n = 0; n < N; ++n) std::fill(W.begin() + n * K, W.begin() + (n + 1) * K, n % 2 ? -1.0f : 1.0f);
      const auto w = stile::quantize_int8(W.data(), N, K, K);
      std::vector<float> C(M * N);
      stile::gemm_int8(M, A.data(), K, w.view, C.data(), N);
      stile::QuantizedActivations qa;
      stile::quantize_activations(M, A.data(), K, K, stile::ActivationQuant::kPerRow, qa);
      REQUIRE(qa.data[0] == stile::int8_packing().activation_max);
      REQUIRE(std::abs(w.view.stored(0, 0)) == stile::int8_weight_max());
      INFO("K " << K);
      for (std::size_t i = 0; i < C.size(); ++i) {
        const double want = (i % N) % 2 ? -double(K) : double(K);
        REQUIRE(std::abs(C[i] - want) <= 1e-5 * K);
      }
    }
  }); });
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

struct EpiCase {
  bool bias, gelu, residual;
};

template <class Epi>
void check_epilogue(std::size_t M, std::size_t N, std::size_t K, stile::Int8Scheme scheme, stile::ActivationQuant aq,
                    std::size_t threads, bool in_place, std::mt19937& rng) {
  constexpr bool kBias = Epi::has_bias, kGelu = Epi::activation == stile::Activation::kGelu, kRes = Epi::has_residual;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::size_t lda = K + 1, ldc = N + 3;
  std::vector<float> A(M * lda), bias(N), residual(M * ldc), wf = make_weights(N, K, rng);
  for (float& x : A) x = dist(rng) * 3.0f;
  if (M > 2) std::fill(A.begin() + lda, A.begin() + lda + K, 0.0f);  // a zero row of A
  for (float& x : bias) x = dist(rng);
  for (float& x : residual) x = dist(rng);
  const stile::Int8Weights w = stile::quantize_int8(wf.data(), N, K, K, scheme, "w");
  std::vector<float> C(M * ldc, -777.0f);
  if (in_place) C = residual;
  Epi epi;
  if constexpr (kBias) epi.bias = bias.data();
  if constexpr (kRes) {
    epi.residual = in_place ? C.data() : residual.data();
    epi.residual_ld = ldc;
  }
  stile::ThreadPool pool(threads);
  stile::gemm_int8(M, A.data(), lda, w.view, C.data(), ldc, epi, &pool, aq);

  stile::QuantizedActivations qa;
  stile::quantize_activations(M, A.data(), lda, K, aq, qa);
  double worst_exact = 0.0, worst_fp32 = 0.0;
  for (std::size_t m = 0; m < M; ++m) {
    for (std::size_t n = 0; n < N; ++n) {
      // From the same integers: sa sw sum (a - za)(w - zw').
      std::int64_t acc = 0;
      double mag = 0.0, exact = 0.0, err_bound = 0.0;
      const double sa = qa.scale[m], sw = w.view.scales[n];
      for (std::size_t k = 0; k < K; ++k) {
        const std::int64_t a = std::int64_t{qa.data[m * qa.ld + k]} - qa.zero_point[m];
        const std::int64_t b = std::int64_t{w.view.stored(n, k)} - w.view.zero_point;
        acc += a * b;
        mag += std::abs(double(a * b));
        const double x = A[m * lda + k], y = wf[n * K + k];
        exact += x * y;
        // |x y - qx qy| <= |x| dy + |y| dx + dx dy with dx <= sa / 2, dy <= sw / 2.
        err_bound += std::abs(x) * sw * 0.5 + std::abs(y) * sa * 0.5 + sa * sw * 0.25;
      }
      double ref = sa * sw * double(acc), scale = sa * sw * mag;
      if (kBias) {
        ref += bias[n];
        exact += bias[n];
        scale += std::abs(bias[n]);
      }
      if (kGelu) {
        ref = gelu_ref(ref);
        exact = gelu_ref(exact);  // GELU is 1.13-Lipschitz
        err_bound *= 1.13;
      }
      if (kRes) {
        ref += residual[m * ldc + n];
        exact += residual[m * ldc + n];
        scale += std::abs(residual[m * ldc + n]);
      }
      const double got = C[m * ldc + n];
      worst_exact = std::max(worst_exact, std::abs(got - ref) / std::max(scale, 1e-20));
      const double e = std::abs(got - exact) / (err_bound * 1.0001 + 1e-5 * (scale + 1.0));
      worst_fp32 = std::max(worst_fp32, e);
    }
    for (std::size_t n = N; n < ldc && !in_place; ++n) REQUIRE(C[m * ldc + n] == -777.0f);
  }
  INFO("M " << M << " N " << N << " K " << K << " bias " << kBias << " gelu " << kGelu << " residual " << kRes
            << " in place " << in_place);
  CHECK(worst_exact < 2e-6);
  CHECK(worst_fp32 <= 1.0);
}

TEST_CASE("gemm_int8 matches the reference from the same integers and the fp32 product", "[int8]") {
  stile_test::for_each_target([] {
    with_and_without_int8_dot([] {
      std::mt19937 rng(5);
      const std::vector<std::array<std::size_t, 3>> shapes = {{1, 1, 1},     {2, 5, 3},     {3, 16, 4},
                                                              {5, 33, 5},    {7, 100, 17},  {8, 384, 64},
                                                              {17, 33, 384}, {33, 5, 1536}, {64, 100, 384}};
      std::size_t i = 0;
      for (const auto scheme : {stile::Int8Scheme::kSymmetricPerChannel, stile::Int8Scheme::kAsymmetricPerTensor}) {
        for (const auto aq : {stile::ActivationQuant::kPerRow, stile::ActivationQuant::kPerTensor}) {
          for (const auto& s : shapes) {
            const std::size_t threads = 1 + (i++ % 3);
            check_epilogue<stile::epilogue::None>(s[0], s[1], s[2], scheme, aq, threads, false, rng);
            check_epilogue<stile::epilogue::Bias>(s[0], s[1], s[2], scheme, aq, threads, false, rng);
            check_epilogue<stile::epilogue::BiasGelu>(s[0], s[1], s[2], scheme, aq, threads, false, rng);
            check_epilogue<stile::epilogue::BiasResidual>(s[0], s[1], s[2], scheme, aq, threads, false, rng);
            check_epilogue<stile::epilogue::Residual>(s[0], s[1], s[2], scheme, aq, threads, false, rng);
            check_epilogue<stile::epilogue::BiasResidual>(s[0], s[1], s[2], scheme, aq, threads, true, rng);
          }
        }
      }
    });
  });
}

TEST_CASE("gemm_int8 is close to the fp32 GEMM at a BERT shape", "[int8]") {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t M = 32, N = 384, K = 384;
  std::vector<float> A(M * K), W(N * K), C8(M * N), C32(M * N);
  for (float& x : A) x = dist(rng);
  for (float& x : W) x = dist(rng) * 0.05f;
  const auto w8 = stile::quantize_int8(W.data(), N, K, K);
  stile::gemm_int8(M, A.data(), K, w8.view, C8.data(), N);
  stile::gemm(M, A.data(), K, stile::DenseF32(W.data(), N, K), C32.data(), N);
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < C8.size(); ++i) {
    num += (C8[i] - C32[i]) * double(C8[i] - C32[i]);
    den += C32[i] * double(C32[i]);
  }
  // 8-bit weights and activations: a relative RMS error of about 1%.
  CHECK(std::sqrt(num / den) < (stile::int8_weight_max() == 127 ? 0.02 : 0.04));
}

TEST_CASE("gemm_int8's fused erf-approximated GELU equals a Bias GEMM followed by the scalar formula", "[int8]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const std::size_t M = 17, N = 100, K = 64;
  std::vector<float> A(M * K), W(N * K), bias(N), fused(M * N), plain(M * N);
  for (float& x : A) x = dist(rng);
  for (float& x : W) x = dist(rng) * 0.2f;
  for (float& x : bias) x = dist(rng);
  stile_test::for_each_target([&] {
    const auto w8 = stile::quantize_int8(W.data(), N, K, K);
    stile::gemm_int8(M, A.data(), K, w8.view, fused.data(), N, stile::epilogue::BiasGeluErfApprox{.bias = bias.data()});
    stile::gemm_int8(M, A.data(), K, w8.view, plain.data(), N, stile::epilogue::Bias{.bias = bias.data()});
    double worst = 0.0;
    for (std::size_t i = 0; i < plain.size(); ++i) {
      worst = std::max(worst, std::abs(double(fused[i]) - stile::gelu_erf_approx(plain[i])));
    }
    CHECK(worst < 1e-5);  // the same formula in float lanes, up to the order of its float operations
    // ...and the formula is GELU within its published bound (5e-4 on erf, times |x| / 2).
    for (std::size_t i = 0; i < plain.size(); ++i) {
      const double x = plain[i], exact = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
      CHECK(std::abs(fused[i] - exact) <= 5e-4 * std::abs(x) / 2 + 1e-5);
    }
  });
}

bool throws_with(const std::function<void()>& f, const std::string& needle1, const std::string& needle2) {
  try {
    f();
  } catch (const stile::Error& e) {
    const std::string what = e.what();
    INFO(what);
    return what.find(needle1) != std::string::npos && what.find(needle2) != std::string::npos;
  }
  return false;
}

TEST_CASE("int8 weights: scales and zero points are validated, naming the tensor", "[int8]") {
  std::vector<float> wf(4 * 8, 0.25f);
  auto w = stile::quantize_int8(wf.data(), 4, 8, 8, stile::Int8Scheme::kSymmetricPerChannel, "layer3.ffn1");
  std::vector<float> A(2 * 8, 1.0f), C(2 * 4);
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min()}) {
    std::vector<float> scales(w.scales);
    scales[2] = bad;
    stile::Int8Matrix m = w.view;
    m.scales = scales.data();
    CHECK(throws_with([&] { stile::validate(m, "layer3.ffn1"); }, "layer3.ffn1", "scale[2]"));
    CHECK(throws_with([&] { stile::gemm_int8(2, A.data(), 8, m, C.data(), 4); }, "int8 GEMM weights", "scale[2]"));
  }
  stile::Int8Matrix z = w.view;
  z.zero_point = 3;  // the symmetric scheme has none
  CHECK(throws_with([&] { stile::validate(z, "q_proj"); }, "q_proj", "zero point 3"));
  z.scheme = stile::Int8Scheme::kAsymmetricPerTensor;
  z.zero_point = 200;
  CHECK(throws_with([&] { stile::validate(z, "q_proj"); }, "q_proj", "zero point 200"));
  z.zero_point = 3;
  CHECK_NOTHROW(stile::validate(z, "q_proj"));

  wf[5] = std::numeric_limits<float>::quiet_NaN();
  for (const auto scheme : {stile::Int8Scheme::kSymmetricPerChannel, stile::Int8Scheme::kAsymmetricPerTensor}) {
    CHECK(throws_with([&] { (void)stile::quantize_int8(wf.data(), 4, 8, 8, scheme, "attn.out"); }, "attn.out", "nan"));
  }
  // -Inf too, at the row's last column: the error names the weight, whatever the row's maximum.
  wf[5] = 0.25f;
  wf[15] = -std::numeric_limits<float>::infinity();
  CHECK(throws_with(
      [&] { (void)stile::quantize_int8(wf.data(), 4, 8, 8, stile::Int8Scheme::kSymmetricPerChannel, "attn.out"); },
      "weight [1][7]", "inf"));
  std::vector<float> tiny(4 * 8, 1e-40f);  // its scale would be subnormal
  CHECK(throws_with(
      [&] { (void)stile::quantize_int8(tiny.data(), 4, 8, 8, stile::Int8Scheme::kSymmetricPerChannel, "emb"); }, "emb",
      "scale[0]"));

  // Packed for another panel width: refused.
  stile::Int8Matrix other = w.view;
  other.nr = w.view.nr * 2;
  CHECK(throws_with([&] { stile::gemm_int8(2, A.data(), 8, other, C.data(), 4); }, "panel width", ""));
}

TEST_CASE("gemm_int8 checks strides and overlaps like gemm", "[int8]") {
  std::vector<float> wf(4 * 8, 0.5f), A(3 * 8, 1.0f), C(3 * 4), bias(4, 0.0f);
  const auto w = stile::quantize_int8(wf.data(), 4, 8, 8);
  CHECK_THROWS_AS(stile::gemm_int8(3, A.data(), 7, w.view, C.data(), 4), stile::Error);
  CHECK_THROWS_AS(stile::gemm_int8(3, A.data(), 8, w.view, C.data(), 3), stile::Error);
  CHECK_THROWS_AS(stile::gemm_int8(2, A.data(), 8, w.view, A.data() + 4, 4), stile::Error);
  CHECK_THROWS_AS(stile::gemm_int8(3, A.data(), 8, w.view, C.data(), 4, stile::epilogue::Bias{}), stile::Error);
  stile::epilogue::BiasGelu gelu_in_place;
  gelu_in_place.bias = bias.data();
  CHECK_NOTHROW(stile::gemm_int8(3, A.data(), 8, w.view, C.data(), 4, gelu_in_place));
  stile::epilogue::BiasResidual bad;  // a residual that overlaps C without being C
  bad.bias = bias.data();
  bad.residual = C.data() + 1;
  bad.residual_ld = 4;
  CHECK_THROWS_AS(stile::gemm_int8(3, A.data(), 8, w.view, C.data(), 4, bad), stile::Error);
}

}  // namespace
