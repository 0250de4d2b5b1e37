// The integer and approximate element-wise and row-wise kernels (quant/dyadic.hpp,
// kernels/gelu_erf_approx.hpp, kernels/ibert_*.hpp, kernels/int8_layernorm.hpp), instantiated for
// xsimd::default_arch. This file is compiled once per instruction-set family (tests/kernels/
// CMakeLists.txt: stile_add_xsimd_test), each with that family's flags; a program whose family
// the CPU lacks says so and checks nothing. Checks: I-BERT kernels bit-exact against the goldens
// of scripts/make_ibert_goldens.py and against their scalar references; erf within 5e-4 of
// std::erf; the float wrappers within stated tolerances of double-precision GELU, softmax and
// LayerNorm on BERT-range inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xsimd/xsimd.hpp>

#include "stile/core/error.hpp"
#include "stile/kernels/gelu_erf_approx.hpp"
#include "stile/kernels/ibert_gelu.hpp"
#include "stile/kernels/ibert_layernorm.hpp"
#include "stile/kernels/ibert_softmax.hpp"
#include "stile/kernels/int8_layernorm.hpp"
#include "stile/quant/dyadic.hpp"
#include "int_ops_composed.hpp"

namespace {

using Arch = xsimd::default_arch;
using int_ops_composed::float_bits;

// False (with a warning) when this CPU cannot run the family the program was compiled for.
bool cpu_runs_arch() {
  if (xsimd::available_architectures().best >= Arch::version()) return true;
  WARN("skipped: this CPU does not support " << Arch::name() << ", the xsimd architecture of this build");
  return false;
}

nlohmann::json goldens() {
  std::ifstream in(std::string(STILE_TEST_DATA_DIR) + "/ibert_goldens.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

float bits_to_float(const nlohmann::json& j) { return std::bit_cast<float>(j.get<std::uint32_t>()); }

double gelu_exact(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

TEST_CASE("the program tests the xsimd architecture its build asked for", "[int_ops]") {
  const std::string expected = STILE_TEST_XSIMD_ARCH;
  if (!expected.empty()) CHECK(std::string(Arch::name()) == expected);
  WARN("xsimd arch of this program: " << Arch::name()
                                      << (xsimd::available_architectures().best >= Arch::version()
                                              ? ""
                                              : " (not on this CPU)"));
}

TEST_CASE("dyadic: batch_frexp, round half to even, validation", "[int_ops][dyadic]") {
  INFO("xsimd arch " << Arch::name());
  using stile::quant::dyadic_from_scale;
  using stile::quant::dyadic_mul;
  const auto half = dyadic_from_scale(0.5, "t");
  CHECK(half.multiplier == (std::int64_t{1} << 30));
  CHECK(half.shift == 31);
  const auto tenth = dyadic_from_scale(0.1, "t");  // 0.8 * 2^-3: 0.8 * 2^31 = 1717986918.4
  CHECK(tenth.multiplier == 1717986918);
  CHECK(tenth.shift == 34);
  const auto near_one = dyadic_from_scale(std::nextafter(1.0, 0.0), "t");  // f rounds up to 2^31
  CHECK(near_one.multiplier == (std::int64_t{1} << 31));
  // Ties go to even, as torch.round.
  CHECK(dyadic_mul(3, half) == 2);
  CHECK(dyadic_mul(5, half) == 2);
  CHECK(dyadic_mul(-3, half) == -2);
  CHECK(dyadic_mul(-5, half) == -2);
  CHECK(dyadic_mul(7, half) == 4);
  // Against double arithmetic where that is exact (|z| m < 2^53).
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> scale(1e-4, 4.0);
  std::uniform_int_distribution<std::int32_t> zd(-(1 << 20), 1 << 20);
  for (int t = 0; t < 2000; ++t) {
    const auto d = dyadic_from_scale(scale(rng), "t");
    const std::int32_t z = zd(rng);
    const double expect =
        std::nearbyint(static_cast<double>(z) * static_cast<double>(d.multiplier) / std::ldexp(1.0, d.shift));
    REQUIRE(dyadic_mul(z, d) == static_cast<std::int64_t>(expect));
  }
  // int32 -> int8 with clamping; int32 -> int32.
  const std::int32_t z[] = {0, 100, -100, 1000, -1000, 255, 257};
  std::int8_t o8[7];
  stile::quant::requantize_to_int8(z, 7, half, o8);
  CHECK(std::vector<int>(o8, o8 + 7) == std::vector<int>{0, 50, -50, 127, -128, 127, 127});
  std::int32_t o32[7];
  stile::quant::requantize_to_int32(z, 7, stile::quant::dyadic_rescale(1.0f, 4.0f, "t"), o32);
  CHECK(std::vector<int>(o32, o32 + 7) == std::vector<int>{0, 25, -25, 250, -250, 64, 64});
  // Bad scales throw, naming the tensor.
  for (const double bad :
       {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    try {
      (void)dyadic_from_scale(bad, "encoder.layer.3.output");
      FAIL("no throw for scale " << bad);
    } catch (const stile::Error& e) {
      CHECK(std::string(e.what()).find("encoder.layer.3.output") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(stile::quant::dyadic_rescale(1.0f, 0.0f, "x"), stile::Error);
}

TEST_CASE("gelu_erf_approx: erf within 5e-4 of std::erf, GELU within 2.5e-4 |x|", "[int_ops][gelu_erf_approx]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  using B = xsimd::batch<float, Arch>;
  double worst_erf = 0.0;
  alignas(64) float buf[B::size];
  for (float t = -6.0f; t <= 6.0f; t += 1.0f / 1024.0f) {
    const B e = stile::erf_approx<Arch>(B(t));
    e.store_aligned(buf);
    worst_erf = std::max(worst_erf, std::abs(static_cast<double>(buf[0]) - std::erf(static_cast<double>(t))));
    worst_erf = std::max(worst_erf, std::abs(static_cast<double>(stile::erf_approx(t)) - std::erf(double(t))));
  }
  CHECK(worst_erf <= 5e-4);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (const std::size_t n : {1, 3, 7, 16, 33, 100, 1000}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    std::vector<float> y = x;
    stile::gelu_erf_approx_inplace<Arch>(y.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("n " << n << " x " << x[i]);
      REQUIRE(std::abs(y[i] - gelu_exact(x[i])) <= 2.5e-4 * std::abs(x[i]) + 1e-6);
      REQUIRE(std::abs(y[i] - stile::gelu_erf_approx(x[i])) <= 1e-6 * std::max(1.0f, std::abs(x[i])));
    }
  }
}

TEST_CASE("I-BERT IntGELU: bit-exact against the goldens and the scalar reference", "[int_ops][ibert]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  const auto g = goldens();
  REQUIRE(g["gelu"].size() >= 15);
  for (const auto& c : g["gelu"]) {
    const auto x = c["x"].get<std::vector<std::int32_t>>();
    const auto expect = c["y"].get<std::vector<std::int64_t>>();
    std::vector<std::int64_t> y(x.size());
    const float so = stile::ibert::int_gelu<Arch>(x.data(), x.size(), bits_to_float(c["scale_bits"]), y.data());
    CHECK(y == expect);
    CHECK(std::bit_cast<std::uint32_t>(so) == c["out_scale_bits"].get<std::uint32_t>());
  }
  // Vector path against the scalar reference on a long input (16-bit grid, BERT FFN scale).
  std::mt19937 rng(5);
  std::uniform_int_distribution<std::int32_t> d(-32767, 32766);
  std::vector<std::int32_t> x(1031);
  for (auto& v : x) v = d(rng);
  const float s = 10.0f / 32767.0f;
  std::vector<std::int64_t> y(x.size());
  stile::ibert::int_gelu<Arch>(x.data(), x.size(), s, y.data());
  const auto p = stile::ibert::int_gelu_params(s);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == stile::ibert::int_gelu_scalar(x[i], p));
  CHECK_THROWS_AS(stile::ibert::int_gelu<Arch>(x.data(), 1, 0.0f, y.data()), stile::Error);
  // A scale so fine that the products pass 64 bits is refused, not wrapped.
  const std::int32_t big = 2147483647;
  CHECK_THROWS_AS(stile::ibert::int_gelu<Arch>(&big, 1, 1e-9f, y.data()), stile::Error);
}

TEST_CASE("I-BERT IntSoftmax: bit-exact against the goldens", "[int_ops][ibert]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  const auto g = goldens();
  REQUIRE(g["softmax"].size() >= 15);
  for (const auto& c : g["softmax"]) {
    const auto rows = c["x"].get<std::vector<std::vector<std::int32_t>>>();
    const auto expect = c["y"].get<std::vector<std::vector<std::int32_t>>>();
    const auto expect16 = c["e16"].get<std::vector<std::vector<std::int32_t>>>();
    const std::size_t R = rows.size(), C = rows[0].size(), ld = C + 3;
    const float s = bits_to_float(c["scale_bits"]);
    const int out_bit = c["output_bit"].get<int>();
    std::vector<std::int32_t> x(R * ld, 12345);
    for (std::size_t r = 0; r < R; ++r) std::copy(rows[r].begin(), rows[r].end(), x.begin() + r * ld);
    std::vector<std::int32_t> y(R * ld, -7);
    const float so = stile::ibert::int_softmax_rows<Arch>(x.data(), R, C, ld, s, out_bit, y.data(), ld);
    CHECK(so == std::ldexp(1.0f, -out_bit));
    const auto p = stile::ibert::int_softmax_params(s, out_bit);
    for (std::size_t r = 0; r < R; ++r) {
      INFO("row " << r << " of " << R << " x " << C);
      CHECK(std::vector<std::int32_t>(y.begin() + r * ld, y.begin() + r * ld + C) == expect[r]);
      CHECK(y[r * ld + C] == -7);  // nothing past the row is written
      const std::int32_t m = *std::max_element(rows[r].begin(), rows[r].end());
      for (std::size_t i = 0; i < C; ++i) {
        REQUIRE(stile::ibert::int_softmax_exp16(std::int64_t{rows[r][i]} - m, p) == expect16[r][i]);
      }
    }
    // In place gives the same.
    stile::ibert::int_softmax_rows<Arch>(x.data(), R, C, ld, s, out_bit, x.data(), ld);
    for (std::size_t r = 0; r < R; ++r) {
      CHECK(std::vector<std::int32_t>(x.begin() + r * ld, x.begin() + r * ld + C) == expect[r]);
    }
  }
  std::int32_t one = 0;
  CHECK_THROWS_AS(stile::ibert::int_softmax_rows<Arch>(&one, 1, 1, 1, 0.1f, 0, &one, 1), stile::Error);
}

TEST_CASE("I-BERT IntLayerNorm: bit-exact against the goldens", "[int_ops][ibert]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  const auto g = goldens();
  REQUIRE(g["layernorm"].size() >= 3);
  bool saw_overflow_shift = false;
  for (const auto& c : g["layernorm"]) {
    const auto rows = c["x"].get<std::vector<std::vector<std::int32_t>>>();
    const auto expect = c["y"].get<std::vector<std::vector<std::int64_t>>>();
    const std::size_t R = rows.size(), C = rows[0].size(), ld = C + 1;
    std::vector<float> gamma, beta;
    for (const auto& b : c["gamma_bits"]) gamma.push_back(bits_to_float(b));
    for (const auto& b : c["beta_bits"]) beta.push_back(bits_to_float(b));
    std::vector<std::int32_t> x(R * ld, 99);
    for (std::size_t r = 0; r < R; ++r) std::copy(rows[r].begin(), rows[r].end(), x.begin() + r * ld);
    std::vector<std::int64_t> y(R * C);
    std::vector<float> so(C);
    const int shift = stile::ibert::int_layer_norm_rows<Arch>(x.data(), R, C, ld, 0.01f, gamma.data(), beta.data(),
                                                              c["shift_in"].get<int>(), y.data(), C, so.data());
    INFO(R << " x " << C);
    CHECK(shift == c["shift_out"].get<int>());
    saw_overflow_shift = saw_overflow_shift || shift > c["shift_in"].get<int>();
    for (std::size_t r = 0; r < R; ++r) {
      CHECK(std::vector<std::int64_t>(y.begin() + r * C, y.begin() + (r + 1) * C) == expect[r]);
    }
    for (std::size_t i = 0; i < C; ++i) REQUIRE(std::bit_cast<std::uint32_t>(so[i]) == c["out_scale_bits"][i]);
  }
  CHECK(saw_overflow_shift);
  for (const std::uint64_t n :
       {0ull, 1ull, 2ull, 3ull, 4ull, 15ull, 16ull, 17ull, 4294967295ull, 1ull << 40, (1ull << 62) + 12345}) {
    const std::uint64_t r = stile::ibert::isqrt_newton(n);
    CHECK(r * r <= n);
    CHECK((r + 1) * (r + 1) > n);
  }
}

TEST_CASE("I-BERT float wrappers stay close to fp32 GELU, softmax and LayerNorm", "[int_ops][ibert]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  std::mt19937 rng(7);
  // GELU on FFN pre-activations: mostly N(0, 1.5), some to +-10. i-GELU's erf polynomial is off
  // by up to about 0.018 of |GELU| scale (the paper's L-inf error over [-4, 4]); plus half a
  // 16-bit step.
  {
    std::normal_distribution<float> d(0.0f, 1.5f);
    std::vector<float> x(3001);
    for (float& v : x) v = std::clamp(d(rng), -10.0f, 10.0f);
    x[0] = 10.0f;
    x[1] = -10.0f;
    x[2] = 0.0f;
    std::vector<float> y = x;
    stile::gelu_integer_inplace<Arch>(y.data(), y.size());
    double worst = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(y[i] - gelu_exact(x[i])));
    INFO("worst |error| " << worst);
    CHECK(worst <= 0.02);
  }
  // Softmax on attention scores (scale 1/8 applied by the kernel): 8-bit outputs rounded down
  // (1/256), plus i-exp's relative error.
  {
    std::normal_distribution<float> d(0.0f, 16.0f);
    for (const std::size_t cols : {1, 7, 64, 128, 384}) {
      const std::size_t rows = 6, ld = cols + 5;
      std::vector<float> x(rows * ld);
      for (float& v : x) v = d(rng);
      std::vector<float> y = x;
      const float scale = 0.125f;
      stile::softmax_integer_rows<Arch>(y.data(), rows, cols, ld, scale);
      double worst = 0.0;
      for (std::size_t r = 0; r < rows; ++r) {
        const float* in = x.data() + r * ld;
        double mx = -1e30, sum = 0.0;
        for (std::size_t i = 0; i < cols; ++i) mx = std::max(mx, double(in[i]) * scale);
        for (std::size_t i = 0; i < cols; ++i) sum += std::exp(double(in[i]) * scale - mx);
        for (std::size_t i = 0; i < cols; ++i) {
          worst = std::max(worst, std::abs(y[r * ld + i] - std::exp(double(in[i]) * scale - mx) / sum));
        }
        for (std::size_t i = cols; i < ld; ++i) REQUIRE(y[r * ld + i] == x[r * ld + i]);
      }
      INFO("cols " << cols << " worst |error| " << worst);
      CHECK(worst <= 1.0 / 256 + 1e-3);
    }
  }
  // LayerNorm on hidden states: N(0.1, 1) with a few outlier dimensions (BERT has them).
  {
    const std::size_t rows = 5, cols = 768, ld = 770;
    std::normal_distribution<float> d(0.1f, 1.0f);
    std::uniform_real_distribution<float> gu(0.5f, 1.5f), bu(-0.3f, 0.3f);
    std::vector<float> x(rows * ld), gamma(cols), beta(cols);
    for (float& v : x) v = d(rng);
    for (std::size_t r = 0; r < rows; ++r) x[r * ld + 17] = 12.0f, x[r * ld + 300] = -9.0f;
    for (std::size_t i = 0; i < cols; ++i) gamma[i] = gu(rng), beta[i] = bu(rng);
    std::vector<float> yi = x, y8 = x;
    stile::layer_norm_integer_rows<Arch>(yi.data(), rows, cols, ld, gamma.data(), beta.data(), 1e-12f);
    stile::layer_norm_int8_rows<Arch>(y8.data(), rows, cols, ld, gamma.data(), beta.data(), 1e-12f);
    double worst_i = 0.0, worst_8 = 0.0, worst_8_bound = 1.0;
    for (std::size_t r = 0; r < rows; ++r) {
      const float* in = x.data() + r * ld;
      double mean = 0.0, var = 0.0, lo = 0.0, hi = 0.0, ylo = 0.0, yhi = 0.0;
      for (std::size_t i = 0; i < cols; ++i) mean += in[i];
      mean /= double(cols);
      for (std::size_t i = 0; i < cols; ++i) var += (in[i] - mean) * (in[i] - mean);
      var /= double(cols);
      std::vector<double> ref(cols);
      for (std::size_t i = 0; i < cols; ++i) {
        ref[i] = (in[i] - mean) / std::sqrt(var + 1e-12) * gamma[i] + beta[i];
        lo = std::min(lo, double(in[i])), hi = std::max(hi, double(in[i]));
        ylo = std::min(ylo, ref[i]), yhi = std::max(yhi, ref[i]);
      }
      // int8: half an output step, plus half an input step through the normalization (times
      // gamma <= 1.5), plus the statistics' own error from the input grid.
      const double in_step = (hi - lo) / 255.0, out_step = (yhi - ylo) / 255.0;
      const double bound = 0.5 * out_step + 1.5 * (0.5 * in_step / std::sqrt(var)) * 1.5 + 0.01;
      for (std::size_t i = 0; i < cols; ++i) {
        worst_i = std::max(worst_i, std::abs(yi[r * ld + i] - ref[i]));
        const double e8 = std::abs(y8[r * ld + i] - ref[i]);
        worst_8 = std::max(worst_8, e8);
        worst_8_bound = std::min(worst_8_bound, bound - e8);
      }
      for (std::size_t i = cols; i < ld; ++i) {
        REQUIRE(yi[r * ld + i] == x[r * ld + i]);
        REQUIRE(y8[r * ld + i] == x[r * ld + i]);
      }
    }
    INFO("integer LN worst " << worst_i << ", int8 LN worst " << worst_8);
    CHECK(worst_i <= 1e-3);
    CHECK(worst_8_bound >= 0.0);
  }
}

TEST_CASE("the float wrappers handle zeros, tiny and constant inputs", "[int_ops][ibert]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  for (const float v : {0.0f, 1e-7f, -3e-5f, 0.01f}) {
    INFO("value " << v);
    std::vector<float> g(37, v);
    g[5] = -v;
    stile::gelu_integer_inplace<Arch>(g.data(), g.size());
    // i-GELU's erf polynomial is 1 + a b^2 = 0.096 (not 0) just right of 0, and -0.096 just
    // left: near 0 its GELU is off by about 0.048 |x|, plus the 1e-6 floor of the grid step.
    CHECK(std::abs(g[0] - gelu_exact(v)) <= 0.05 * std::abs(v) + 2e-6);
    CHECK(std::abs(g[5] - gelu_exact(-v)) <= 0.05 * std::abs(v) + 2e-6);
    std::vector<float> s(2 * 19, v);
    stile::softmax_integer_rows<Arch>(s.data(), 2, 19, 19, 1.0f);
    for (const float p : s) CHECK(std::abs(p - 1.0f / 19) <= 1.0 / 256 + 1e-3);  // uniform rows
    std::vector<float> gamma(24, 1.25f), beta(24), a(24, v), b(24, v);
    for (std::size_t i = 0; i < 24; ++i) beta[i] = 0.01f * float(i);
    stile::layer_norm_integer_rows<Arch>(a.data(), 1, 24, 24, gamma.data(), beta.data(), 1e-12f);
    stile::layer_norm_int8_rows<Arch>(b.data(), 1, 24, 24, gamma.data(), beta.data(), 1e-5f);
    for (std::size_t i = 0; i < 24; ++i) {  // a constant row normalizes to beta
      CHECK(std::abs(a[i] - beta[i]) <= 1e-6);
      CHECK(std::abs(b[i] - beta[i]) <= 0.5 * 0.23 / 255 + 1e-6);
    }
  }
}

TEST_CASE("int8 LayerNorm: vector path equals the scalar reference", "[int_ops][int8_layernorm]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> qd(-128, 127);
  std::uniform_real_distribution<float> gu(0.5f, 1.5f), bu(-0.3f, 0.3f);
  for (const std::size_t cols : {1, 5, 16, 37, 768}) {
    std::vector<std::int8_t> q(cols), y(cols);
    std::vector<float> gamma(cols), beta(cols);
    for (auto& v : q) v = static_cast<std::int8_t>(qd(rng));
    for (std::size_t i = 0; i < cols; ++i) gamma[i] = gu(rng), beta[i] = bu(rng);
    const stile::AffineInt8 in{0.05f, 3}, out = stile::affine_int8_params(-4.0f, 4.5f);
    stile::layer_norm_int8_row<Arch>(q.data(), cols, in, gamma.data(), beta.data(), 1e-5f, out, y.data());
    const auto st = stile::int8_row_stats(q.data(), cols, in, 1e-5f);
    for (std::size_t i = 0; i < cols; ++i) {
      const float v = stile::int8_layer_norm_value(q[i], st, gamma[i], beta[i]);
      // The vector path fuses the last multiply-add; the result may sit on the other side of a
      // rounding boundary, never further.
      INFO("cols " << cols << " i " << i << " value " << v);
      REQUIRE(std::abs(int(y[i]) - int(stile::quantize_int8(v, out))) <= 1);
    }
  }
}

TEST_CASE("IntSoftmax's float and double lanes equal the int128 reference on every 16-bit input", "[int_ops][ibert]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  // All of x - max in [-65533, 0] (what the float wrapper's 16-bit rows give), for scaling
  // factors from the wrapper's floor 1e-6 up (c_int from ~2^41 down to a few).
  std::vector<double> d(65534), e(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = -static_cast<double>(i);
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> lu(std::log(1e-6f), std::log(0.5f));
  std::vector<float> scales = {1e-6f, 3.0517578e-5f, 1.2207031e-4f, 2.4414062e-4f, 1e-3f, 0.02f, 0.3f};
  for (int k = 0; k < 12; ++k) scales.push_back(std::exp(lu(rng)));
  for (const float s : scales) {
    INFO("s " << s);
    const stile::ibert::IntSoftmaxParams p = stile::ibert::int_softmax_params(s, 8);
    const std::int64_t sum = stile::ibert::int_softmax_e16_row<Arch>(d.data(), d.size(), 0.0, p, e.data());
    std::int64_t ref_sum = 0;
    std::size_t bad = 0;
    for (std::size_t i = 0; i < d.size(); ++i) {
      const std::int32_t ref = stile::ibert::int_softmax_exp16(-static_cast<std::int64_t>(i), p);
      ref_sum += ref;
      bad += e[i] != static_cast<double>(ref);
    }
    CHECK(bad == 0);
    CHECK(sum == ref_sum);
    // The float lanes the float wrapper uses (|x0_int| < 2^22 for every s here), its near-tie
    // chunks redone in double lanes.
    REQUIRE(p.x0_int > -(std::int64_t{1} << 22));
    std::vector<float> df(d.begin(), d.end());
    std::vector<std::int32_t> en(df.size());
    const std::int64_t sum_n = stile::ibert::int_softmax_e16_row_float<Arch>(df.data(), df.size(), 0.0f, p, en.data());
    CHECK(std::equal(en.begin(), en.end(), e.begin()));
    CHECK(sum_n == ref_sum);
  }
}

TEST_CASE("the vector float wrappers equal the integer kernels' composition bit for bit", "[int_ops][ibert]") {
  INFO("xsimd arch " << Arch::name());
  if (!cpu_runs_arch()) return;
  std::mt19937 rng(33);
  for (const std::size_t cols : {1, 5, 16, 37, 256, 384}) {
    const std::size_t rows = 9, ld = cols + 3;
    for (const float sigma : {1e-7f, 0.5f, 3.0f, 40.0f}) {
      INFO("cols " << cols << " sigma " << sigma);
      const auto [x, gamma, beta] = int_ops_composed::wrapper_inputs(rows, cols, ld, sigma, rng);

      std::vector<float> a = x, b = x;
      stile::softmax_integer_rows<Arch>(a.data(), rows, cols, ld, 0.17677669f);
      int_ops_composed::softmax_integer_rows_composed<Arch>(b.data(), rows, cols, ld, 0.17677669f);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < a.size(); ++i) bad += float_bits(a[i]) != float_bits(b[i]);
      CHECK(bad == 0);

      a = x, b = x;
      stile::layer_norm_integer_rows<Arch>(a.data(), rows, cols, ld, gamma.data(), beta.data(), 1e-12f);
      int_ops_composed::layer_norm_integer_rows_composed<Arch>(b.data(), rows, cols, ld, gamma.data(), beta.data());
      bad = 0;
      for (std::size_t i = 0; i < a.size(); ++i) bad += float_bits(a[i]) != float_bits(b[i]);
      CHECK(bad == 0);

      a = x, b = x;
      stile::gelu_integer_inplace<Arch>(a.data(), a.size());
      int_ops_composed::gelu_integer_inplace_composed<Arch>(b.data(), b.size());
      bad = 0;
      for (std::size_t i = 0; i < a.size(); ++i) bad += float_bits(a[i]) != float_bits(b[i]);
      CHECK(bad == 0);
    }
  }
}
