#pragma once
// The int8 GEMM configurations the library itself uses (every epilogue), compiled once in the
// stile::compiled library (part 6 of kernels/instantiate_kernels.hpp) and declared `extern` here,
// so that a translation unit that calls gemm_int8 compiles no kernel.
#include "stile/kernels/int8_gemm.hpp"  // detail::run_int8_gemm (int8_gemm.hpp includes this at its end)

#define STILE_FOR_EACH_INT8_GEMM_INSTANCE(X) \
  X(::stile::epilogue::None)                 \
  X(::stile::epilogue::Bias)                 \
  X(::stile::epilogue::BiasGelu)             \
  X(::stile::epilogue::BiasGeluErfApprox)    \
  X(::stile::epilogue::BiasResidual)         \
  X(::stile::epilogue::Residual)

#define STILE_EXTERN_INT8_GEMM_INSTANCE(E) \
  extern template void ::stile::detail::run_int8_gemm<E>(const ::stile::detail::Int8GemmArgs<E>&);

#ifndef STILE_NO_EXTERN_KERNELS
STILE_FOR_EACH_INT8_GEMM_INSTANCE(STILE_EXTERN_INT8_GEMM_INSTANCE)
#endif
