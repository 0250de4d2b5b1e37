// One per-architecture translation unit of stile::compiled's xsimd kernels (number_formats.hpp):
// src/stile_xsimd_baseline.cpp, stile_xsimd_avx2.cpp and stile_xsimd_avx512.cpp include this file
// after defining STILE_XSIMD_TABLE (the table's name) and STILE_XSIMD_LEVEL, and are compiled with
// their architecture's -m flags (cmake/StileDependencies.cmake, stile_xsimd_sources). It
// instantiates the kernels for xsimd::default_arch, the best architecture those flags enable, and
// defines the table of their entry points, which the dispatcher picks from at run time.
//
// Everything compiled here is in the inline namespace core/xsimd_abi.hpp names after the flags,
// or a template on the architecture: see there for the ODR hazard this avoids. Nothing else may be
// defined here: no static initializers, no inline function of another header that is not inlined
// (test_xsimd_symbols checks the objects). Not a header to include anywhere else (no include guard
// on purpose).
#include <xsimd/xsimd.hpp>

#include "stile/kernels/gelu_erf_approx.hpp"
#include "stile/kernels/ibert_gelu.hpp"
#include "stile/kernels/ibert_layernorm.hpp"
#include "stile/kernels/ibert_softmax.hpp"
#include "stile/kernels/int8_layernorm.hpp"
#include "stile/kernels/number_formats_table.hpp"

namespace stile::detail {

extern constinit const NumberFormatKernels STILE_XSIMD_TABLE;
constinit const NumberFormatKernels STILE_XSIMD_TABLE = {
    xsimd::default_arch::name(),
    STILE_XSIMD_LEVEL,
    &layer_norm_int8_rows<xsimd::default_arch>,
    &layer_norm_integer_rows<xsimd::default_arch>,
    &gelu_erf_approx_inplace<xsimd::default_arch>,
    &gelu_integer_inplace<xsimd::default_arch>,
    &gelu_integer_inplace<xsimd::default_arch>,
    &softmax_integer_rows<xsimd::default_arch>,
};

}  // namespace stile::detail
