#pragma once
// What a GEMM does to each output tile while it is still in registers, so an operator never makes
// a second pass over C: C = act(A * W^T + bias) + residual. The choice of steps is compile-time
// (each combination compiles to its own micro-kernel tail); the pointers are runtime.
#include <cstddef>

namespace stile {

enum class Activation {
  kNone,
  kGelu,          // exact: 0.5 x (1 + erf(x / sqrt 2)), as BERT
  kGeluErfApprox  // erf by Abramowitz-Stegun 7.1.27 (the Arm Compute Library BERT recipe); the int8
                  // GEMM only (kernels/int8_gemm_instances.hpp)
};

template <bool kHasBias, Activation kAct, bool kHasResidual>
struct Epilogue {
  static constexpr bool has_bias = kHasBias;
  static constexpr Activation activation = kAct;
  static constexpr bool has_residual = kHasResidual;

  const float* bias = nullptr;      // [N], added per output column
  const float* residual = nullptr;  // [M x N] with row stride residual_ld; may equal C (in place)
  std::size_t residual_ld = 0;      //   when residual_ld == ldc and there is no activation
};

namespace epilogue {
using None = Epilogue<false, Activation::kNone, false>;
using Bias = Epilogue<true, Activation::kNone, false>;
using BiasGelu = Epilogue<true, Activation::kGelu, false>;
using BiasGeluErfApprox = Epilogue<true, Activation::kGeluErfApprox, false>;
using BiasResidual = Epilogue<true, Activation::kNone, true>;
using Residual = Epilogue<false, Activation::kNone, true>;
}  // namespace epilogue

template <class T>
inline constexpr bool is_epilogue_v = false;
template <bool B, Activation A, bool R>
inline constexpr bool is_epilogue_v<Epilogue<B, A, R>> = true;

}  // namespace stile
