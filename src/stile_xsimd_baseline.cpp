// stile::compiled's xsimd kernels for the flags the library is built with (x86-64: sse2; AArch64:
// NEON): see include/stile/kernels/instantiate_xsimd_kernels.hpp.
#define STILE_XSIMD_TABLE number_format_kernels_baseline
#define STILE_XSIMD_LEVEL XsimdLevel::kBaseline
#include "stile/kernels/instantiate_xsimd_kernels.hpp"
