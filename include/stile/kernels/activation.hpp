#pragma once
// Activations as standalone kernels (the GEMM fuses them into its epilogue instead; these are
// for the unfused variants and for tests of the per-target math). Light: compiled once, in
// stile::compiled (kernels/instantiate_kernels.hpp).
#include <cstddef>

namespace stile {

// x[i] = 0.5 x[i] (1 + erf(x[i] / sqrt 2)) for i < n, exact GELU as BERT uses it.
void gelu_inplace(float* x, std::size_t n);

}  // namespace stile
