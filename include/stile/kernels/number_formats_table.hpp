#pragma once
// The table of entry points that each per-architecture translation unit of stile::compiled defines
// for the xsimd kernels of number_formats.hpp (kernels/instantiate_xsimd_kernels.hpp), and which
// the dispatcher (kernels/instantiate_kernels.hpp, part 0) chooses from. Plain data, constant
// initialized: nothing in it runs before main.
#include <cstddef>

namespace stile::detail {

// What a CPU must support to run a table, as Highway detects it.
enum class XsimdLevel { kBaseline, kAvx2, kAvx512 };

struct NumberFormatKernels {
  const char* arch;  // xsimd's name of the architecture
  XsimdLevel level;
  void (*layer_norm_int8_rows)(float*, std::size_t, std::size_t, std::size_t, const float*, const float*, float);
  void (*layer_norm_integer_rows)(float*, std::size_t, std::size_t, std::size_t, const float*, const float*, float);
  void (*gelu_erf_approx_inplace)(float*, std::size_t);
  void (*gelu_integer_inplace)(float*, std::size_t);
  void (*gelu_integer_block)(float*, std::size_t, float);
  void (*softmax_integer_rows)(float*, std::size_t, std::size_t, std::size_t, float);
};

// src/stile_xsimd_baseline.cpp (every processor: the flags stile::compiled is built with), and on
// x86-64 src/stile_xsimd_avx2.cpp and src/stile_xsimd_avx512.cpp.
extern const NumberFormatKernels number_format_kernels_baseline;
#if defined(__x86_64__)
extern const NumberFormatKernels number_format_kernels_avx2;
extern const NumberFormatKernels number_format_kernels_avx512;
#endif

}  // namespace stile::detail
