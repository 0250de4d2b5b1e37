#pragma once
// STILE_XSIMD_ABI: the name of the inline namespace that holds everything the xsimd kernel headers
// define (quant/dyadic.hpp, kernels/gelu_erf_approx.hpp, kernels/ibert_*.hpp,
// kernels/int8_layernorm.hpp), one name per set of instruction-set flags.
//
// Why (the ODR hazard): stile::compiled compiles those kernels once per instruction set, each in
// its own translation unit with its own -m flags (src/stile_xsimd_*.cpp), and picks one at run
// time (number_formats.hpp). An inline function, or a template not keyed on the architecture,
// compiled with -mavx512f in one translation unit and with the baseline flags in another would be
// two different codes under one symbol, and the linker keeps one of them for every caller: the
// AVX-512 copy could end up called on a CPU without AVX-512 (SIGILL). The remedy is PyTorch ATen's
// (`inline namespace CPU_CAPABILITY`): the namespace below is named after the instruction-set
// macros the translation unit is compiled with, so each copy has a name of its own, while callers
// still write stile::ibert::int_softmax_params. Templates on the xsimd architecture differ by their
// argument as well. What those headers use from outside (the standard library, stile::Error) must
// not be emitted as out-of-line code in the per-instruction-set objects either: so the kernels
// raise their errors through the functions below, which build and throw the stile::Error in
// stile::compiled's baseline code (kernels/instantiate_kernels.hpp, part 0), and allocate only
// through std::vector, whose code the compiler inlines. tests/kernels/check_xsimd_symbols.cmake
// (ctest: test_xsimd_symbols) fails if one of those objects defines a global function outside its
// own namespace, or has a static initializer.
//
// A host that includes these headers with flags of its own gets a namespace of its own too.

// One token per instruction-set macro that changes what the compiler may emit (empty if unset).
#if defined(__SSE3__)
#define STILE_XSIMD_ABI_S3 _s3
#else
#define STILE_XSIMD_ABI_S3
#endif
#if defined(__SSSE3__)
#define STILE_XSIMD_ABI_SS3 _ss3
#else
#define STILE_XSIMD_ABI_SS3
#endif
#if defined(__SSE4_1__)
#define STILE_XSIMD_ABI_S41 _s41
#else
#define STILE_XSIMD_ABI_S41
#endif
#if defined(__SSE4_2__)
#define STILE_XSIMD_ABI_S42 _s42
#else
#define STILE_XSIMD_ABI_S42
#endif
#if defined(__AVX__)
#define STILE_XSIMD_ABI_A _a
#else
#define STILE_XSIMD_ABI_A
#endif
#if defined(__AVX2__)
#define STILE_XSIMD_ABI_A2 _a2
#else
#define STILE_XSIMD_ABI_A2
#endif
#if defined(__FMA__)
#define STILE_XSIMD_ABI_F _f
#else
#define STILE_XSIMD_ABI_F
#endif
#if defined(__F16C__)
#define STILE_XSIMD_ABI_H _h
#else
#define STILE_XSIMD_ABI_H
#endif
#if defined(__BMI2__)
#define STILE_XSIMD_ABI_B2 _b2
#else
#define STILE_XSIMD_ABI_B2
#endif
#if defined(__AVX512F__)
#define STILE_XSIMD_ABI_K _k
#else
#define STILE_XSIMD_ABI_K
#endif
#if defined(__AVX512BW__)
#define STILE_XSIMD_ABI_KBW _kbw
#else
#define STILE_XSIMD_ABI_KBW
#endif
#if defined(__AVX512DQ__)
#define STILE_XSIMD_ABI_KDQ _kdq
#else
#define STILE_XSIMD_ABI_KDQ
#endif
#if defined(__AVX512CD__)
#define STILE_XSIMD_ABI_KCD _kcd
#else
#define STILE_XSIMD_ABI_KCD
#endif
#if defined(__AVX512VL__)
#define STILE_XSIMD_ABI_KVL _kvl
#else
#define STILE_XSIMD_ABI_KVL
#endif
#if defined(__ARM_NEON)
#define STILE_XSIMD_ABI_N _n
#else
#define STILE_XSIMD_ABI_N
#endif
#if defined(__ARM_FEATURE_SVE)
#define STILE_XSIMD_ABI_SVE _sve
#else
#define STILE_XSIMD_ABI_SVE
#endif

// Token pasting in two levels, so that the arguments are expanded first.
#define STILE_XSIMD_ABI_PASTE8_(a, b, c, d, e, f, g, h) a##b##c##d##e##f##g##h
#define STILE_XSIMD_ABI_PASTE8(a, b, c, d, e, f, g, h) STILE_XSIMD_ABI_PASTE8_(a, b, c, d, e, f, g, h)
#define STILE_XSIMD_ABI_PASTE3_(a, b, c) a##b##c
#define STILE_XSIMD_ABI_PASTE3(a, b, c) STILE_XSIMD_ABI_PASTE3_(a, b, c)
// xsimd_abi (x86-64 baseline, or no SIMD flags), xsimd_abi_s3_ss3_s41_s42_a_a2_f (-mavx2 -mfma), ...
#define STILE_XSIMD_ABI                                                                                         \
  STILE_XSIMD_ABI_PASTE3(                                                                                       \
      xsimd_abi,                                                                                                \
      STILE_XSIMD_ABI_PASTE8(STILE_XSIMD_ABI_S3, STILE_XSIMD_ABI_SS3, STILE_XSIMD_ABI_S41, STILE_XSIMD_ABI_S42, \
                             STILE_XSIMD_ABI_A, STILE_XSIMD_ABI_A2, STILE_XSIMD_ABI_F, STILE_XSIMD_ABI_H),      \
      STILE_XSIMD_ABI_PASTE8(STILE_XSIMD_ABI_B2, STILE_XSIMD_ABI_K, STILE_XSIMD_ABI_KBW, STILE_XSIMD_ABI_KDQ,   \
                             STILE_XSIMD_ABI_KCD, STILE_XSIMD_ABI_KVL, STILE_XSIMD_ABI_N, STILE_XSIMD_ABI_SVE))

namespace stile::detail {

// The xsimd kernels' errors (see above; defined in stile::compiled, kernels/instantiate_kernels.hpp):
// stile::Error("stile: " + what), "stile: <what> out of range (<value>)", and "stile: scale of
// '<name>' must be finite and > 0 (got <value>)".
[[noreturn]] void xsimd_kernel_error(const char* what);
[[noreturn]] void xsimd_kernel_range_error(const char* what, double value);
[[noreturn]] void xsimd_kernel_scale_error(const char* name, double value);

}  // namespace stile::detail

namespace stile {
inline namespace STILE_XSIMD_ABI {

// require() of core/error.hpp for the xsimd kernels: throws stile::Error("stile: " + what) unless ok.
inline void kernel_require(bool ok, const char* what) {
  if (!ok) detail::xsimd_kernel_error(what);
}

}  // namespace STILE_XSIMD_ABI
}  // namespace stile
