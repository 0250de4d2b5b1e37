// stile::compiled's xsimd kernels for AVX-512 (xsimd avx512bw: F, CD, DQ, BW), compiled with
// -mavx512f -mavx512cd -mavx512dq -mavx512bw -mfma on x86-64 only: see
// include/stile/kernels/instantiate_xsimd_kernels.hpp.
#define STILE_XSIMD_TABLE number_format_kernels_avx512
#define STILE_XSIMD_LEVEL XsimdLevel::kAvx512
#include "stile/kernels/instantiate_xsimd_kernels.hpp"
static_assert(std::is_same_v<xsimd::default_arch, xsimd::avx512bw>, "built without the AVX-512 flags");
