#pragma once
// The GEMM configurations the library itself uses, compiled once in the stile::compiled library
// (kernels/instantiate_kernels.hpp) and declared `extern` here, so that a translation unit that
// calls them compiles no kernel. Any other configuration (a host's own TileShape) is instantiated
// in the translation unit that includes kernels/gemm_impl.hpp.
//
// STILE_FOR_EACH_GEMM_INSTANCE(X) calls X(Weights, Epilogue) for every codec x epilogue pair with
// DefaultTiles. Adding a codec means adding it here, to the parts of instantiate_kernels.hpp, and
// its PanelDecoder to the -inl.h files.
#include "stile/kernels/gemm.hpp"  // GemmConfig, detail::run_gemm (gemm.hpp includes this at its end)

#define STILE_GEMM_EPILOGUES(X, W)  \
  X(W, ::stile::epilogue::None)     \
  X(W, ::stile::epilogue::Bias)     \
  X(W, ::stile::epilogue::BiasGelu) \
  X(W, ::stile::epilogue::BiasResidual) X(W, ::stile::epilogue::Residual)

#define STILE_FOR_EACH_GEMM_INSTANCE(X)                \
  STILE_GEMM_EPILOGUES(X, ::stile::DenseF32)           \
  STILE_GEMM_EPILOGUES(X, ::stile::PackedF32)          \
  STILE_GEMM_EPILOGUES(X, ::stile::DenseF32Transposed) \
  STILE_GEMM_EPILOGUES(X, ::stile::DictMatrix)         \
  STILE_GEMM_EPILOGUES(X, ::stile::StackedDict)        \
  STILE_GEMM_EPILOGUES(X, ::stile::PackedF16)

#define STILE_EXTERN_GEMM_INSTANCE(W, E)                                                            \
  extern template void ::stile::detail::run_gemm<::stile::GemmConfig<::stile::DefaultTiles, W, E>>( \
      const ::stile::GemmArgs<W, E>&);

// Hosts that build every kernel in their own translation units (no stile::compiled) define
// STILE_NO_EXTERN_KERNELS before including stile.
#ifndef STILE_NO_EXTERN_KERNELS
STILE_FOR_EACH_GEMM_INSTANCE(STILE_EXTERN_GEMM_INSTANCE)
extern template std::size_t stile::detail::panel_width<stile::DefaultTiles>();
#endif
