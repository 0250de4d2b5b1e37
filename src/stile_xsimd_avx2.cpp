// stile::compiled's xsimd kernels for AVX2 + FMA (xsimd fma3<avx2>), compiled with -mavx2 -mfma on
// x86-64 only: see include/stile/kernels/instantiate_xsimd_kernels.hpp.
#define STILE_XSIMD_TABLE number_format_kernels_avx2
#define STILE_XSIMD_LEVEL XsimdLevel::kAvx2
#include "stile/kernels/instantiate_xsimd_kernels.hpp"
static_assert(std::is_same_v<xsimd::default_arch, xsimd::fma3<xsimd::avx2>>, "built without -mavx2 -mfma");
