// The dispatched number-format kernels (kernels/number_formats.hpp): stile::compiled compiles them
// once per xsimd architecture and runs the best one the CPU has. On every architecture this CPU
// runs (forced with set_number_formats_arch): the I-BERT float wrappers equal the reference
// composition of the integer kernels bit for bit (tests/kernels/int_ops_composed.hpp; the integer
// kernels themselves are checked against the goldens of scripts/make_ibert_goldens.py per xsimd
// family by test_int_ops_*), also the integer GELU run in blocks with the tensor's range; the int8
// LayerNorm and erf-approximated GELU, whose fp32 steps may fuse a multiply-add on one
// architecture and not on another, agree with the baseline's within one int8 step and 1e-6. Also:
// the choice follows Highway's detected (or test-limited) targets, and a missing architecture is a
// clear error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <hwy/targets.h>
#include <xsimd/xsimd.hpp>

#include "stile/core/error.hpp"
#include "stile/kernels/number_formats.hpp"
#include "int_ops_composed.hpp"

namespace {

using Baseline = xsimd::default_arch;  // this file is compiled with the library's baseline flags
using int_ops_composed::float_bits;

// Resets the forced architecture however the test case ends.
struct ForcedArch {
  explicit ForcedArch(const std::string& name) { stile::set_number_formats_arch(name); }
  ~ForcedArch() { stile::set_number_formats_arch(""); }
  ForcedArch(const ForcedArch&) = delete;
  ForcedArch& operator=(const ForcedArch&) = delete;
};

std::size_t count_bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += float_bits(a[i]) != float_bits(b[i]);
  return bad;
}

}  // namespace

TEST_CASE("number-format kernels: every architecture the CPU has, against the references", "[number_formats]") {
  const std::vector<std::string> archs = stile::number_formats_archs();
  REQUIRE(!archs.empty());
  CHECK(stile::number_formats_arch() == archs.front());
#if defined(__x86_64__)
  CHECK(archs.back() == "sse2");
#endif
  // The baseline's int8 LayerNorm and erf GELU, computed first, for the other architectures.
  std::vector<std::vector<float>> base_ln8, base_erf;
  for (std::size_t a = archs.size(); a-- > 0;) {
    const std::string& arch = archs[a];
    INFO("xsimd arch " << arch);
    ForcedArch forced(arch);
    CHECK(stile::number_formats_arch() == arch);
    std::size_t shape = 0;
    for (const std::size_t cols : {1, 5, 16, 37, 256, 384}) {
      const std::size_t rows = 9, ld = cols + 3;
      for (const float sigma : {1e-7f, 0.5f, 3.0f, 40.0f}) {
        INFO("cols " << cols << " sigma " << sigma);
        std::mt19937 rng(static_cast<unsigned>(cols * 1000 + sigma * 10));  // the same data on every arch
        const auto [x, gamma, beta] = int_ops_composed::wrapper_inputs(rows, cols, ld, sigma, rng);

        std::vector<float> got = x, want = x;
        stile::softmax_integer_rows(got.data(), rows, cols, ld, 0.17677669f);
        int_ops_composed::softmax_integer_rows_composed<Baseline>(want.data(), rows, cols, ld, 0.17677669f);
        CHECK(count_bit_differences(got, want) == 0);

        got = x, want = x;
        stile::layer_norm_integer_rows(got.data(), rows, cols, ld, gamma.data(), beta.data(), 1e-12f);
        int_ops_composed::layer_norm_integer_rows_composed<Baseline>(want.data(), rows, cols, ld, gamma.data(),
                                                                     beta.data());
        CHECK(count_bit_differences(got, want) == 0);

        got = x, want = x;
        stile::gelu_integer_inplace(got.data(), got.size());
        int_ops_composed::gelu_integer_inplace_composed<Baseline>(want.data(), want.size());
        CHECK(count_bit_differences(got, want) == 0);
        // In three blocks of odd sizes with the tensor's range (how the ops split it over threads).
        got = x;
        float absmax = 0.0f;
        for (const float v : x) absmax = std::max(absmax, std::fabs(v));
        const std::size_t b1 = got.size() / 3 + 1, b2 = 2 * got.size() / 3 + 5;
        stile::gelu_integer_inplace(got.data(), b1, absmax);
        stile::gelu_integer_inplace(got.data() + b1, b2 - b1, absmax);
        stile::gelu_integer_inplace(got.data() + b2, got.size() - b2, absmax);
        CHECK(count_bit_differences(got, want) == 0);

        std::vector<float> ln8 = x, erf = x;
        stile::layer_norm_int8_rows(ln8.data(), rows, cols, ld, gamma.data(), beta.data(), 1e-5f);
        stile::gelu_erf_approx_inplace(erf.data(), erf.size());
        if (a + 1 == archs.size()) {
          base_ln8.push_back(ln8);
          base_erf.push_back(erf);
        } else {
          // One int8 step of the row's output range at most (a fused multiply-add may move a value
          // across a rounding boundary), and the erf GELU within 1e-6 relative.
          std::size_t bad_ln = 0, bad_erf = 0;
          for (std::size_t r = 0; r < rows; ++r) {
            float lo = 0.0f, hi = 0.0f;
            for (std::size_t i = 0; i < cols; ++i) {
              lo = std::min(lo, base_ln8[shape][r * ld + i]);
              hi = std::max(hi, base_ln8[shape][r * ld + i]);
            }
            const float step = (hi - lo) / 255.0f;
            for (std::size_t i = 0; i < cols; ++i) {
              bad_ln += std::fabs(ln8[r * ld + i] - base_ln8[shape][r * ld + i]) > 1.01f * step + 1e-6f;
            }
          }
          for (std::size_t i = 0; i < erf.size(); ++i) {
            bad_erf += std::fabs(erf[i] - base_erf[shape][i]) > 1e-6f * (1.0f + std::fabs(erf[i]));
          }
          CHECK(bad_ln == 0);
          CHECK(bad_erf == 0);
        }
        ++shape;
      }
    }
  }
  CHECK(stile::number_formats_arch() == archs.front());
}

TEST_CASE("number-format kernels: the choice follows Highway's targets; bad names are errors", "[number_formats]") {
  CHECK_THROWS_AS(stile::set_number_formats_arch("no-such-arch"), stile::Error);
  try {
    stile::set_number_formats_arch("no-such-arch");
  } catch (const stile::Error& e) {
    CHECK(std::string(e.what()).find("no-such-arch") != std::string::npos);
  }
#if defined(__x86_64__)
  // Limiting Highway to SSE4 and below limits the xsimd kernels to the baseline.
  hwy::SetSupportedTargetsForTest(HWY_SSE4 | HWY_SSSE3 | HWY_EMU128 | HWY_SCALAR);
  CHECK(stile::number_formats_archs() == std::vector<std::string>{"sse2"});
  CHECK(stile::number_formats_arch() == "sse2");
  CHECK_THROWS_AS(stile::set_number_formats_arch("avx512bw"), stile::Error);
  hwy::SetSupportedTargetsForTest(0);
#endif
  std::vector<float> x(10, 1.0f);
  stile::gelu_integer_inplace(x.data(), x.size());  // runs on whatever is chosen again
  CHECK(x[0] > 0.8f);
}
