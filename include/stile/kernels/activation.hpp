#pragma once
// Activations as standalone kernels (the GEMM fuses them into its epilogue instead; these are
// for the unfused variants and for tests of the per-target math).
#include <cstddef>

#include "stile/kernels/targets.hpp"

namespace stile {

namespace detail {
struct GeluDispatch {
  using Fn = void (*)(float*, std::size_t);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(GeluInPlace);
};
}  // namespace detail

// x[i] = 0.5 x[i] (1 + erf(x[i] / sqrt 2)) for i < n, exact GELU as BERT uses it.
inline void gelu_inplace(float* x, std::size_t n) {
  choose_target(detail::GeluDispatch::kTable)(x, n);
}

}  // namespace stile
