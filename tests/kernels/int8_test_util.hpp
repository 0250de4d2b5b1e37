#pragma once
// For the int8 GEMM's tests: both kinds of kernels on every target, and activations that its
// dynamic quantization reproduces exactly.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "stile/kernels/int8_gemm.hpp"

namespace stile_test {

// Runs body() with the dot-product instructions (VNNI, AVX-VNNI, sdot) allowed, then forbidden
// (the fallback kernels), each in a Catch section of its own. Call it inside for_each_target: a
// loop around for_each_target would repeat its sections' names, and Catch runs a repeated
// section only once.
template <class Body>
void with_and_without_int8_dot(Body body) {
  for (const bool disabled : {false, true}) {
    stile::detail::int8_dot_disabled() = disabled;
    DYNAMIC_SECTION((disabled ? "fallback kernel" : "dot-product kernel")) { body(); }
  }
  stile::detail::int8_dot_disabled() = false;
}

// A = (u - z) / 16 with u in 0..qmax, 0 and qmax in every row, qmax the top code the int8 GEMM
// quantizes to on the kernel chosen now (int8_packing().activation_max) and z = (qmax + 1) / 2:
// per-row quantization then gives back u exactly (scale 1/16, zero point z), so only the
// weights' rounding is left. Rows of lda floats, the columns past K zero.
inline std::vector<float> exact_activations(std::size_t M, std::size_t K, std::size_t lda, std::uint32_t seed = 5) {
  const std::int32_t qmax = stile::int8_packing().activation_max, z = (qmax + 1) / 2;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, qmax);
  std::vector<float> A(M * lda, 0.0f);
  for (std::size_t m = 0; m < M; ++m) {
    for (std::size_t k = 0; k < K; ++k) {
      const int u = k == 0 ? 0 : k == 1 ? qmax : code(rng);
      A[m * lda + k] = static_cast<float>(u - z) / 16.0f;
    }
  }
  return A;
}

}  // namespace stile_test
