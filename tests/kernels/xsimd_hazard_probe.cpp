// A deliberate instance of the ODR hazard that include/stile/core/xsimd_abi.hpp describes, for
// test_xsimd_symbols_catches_hazard (which must fail on it): an inline function outside any
// xsimd_abi namespace, compiled with -mavx2 and emitted out of line (its address is taken). Never
// linked into anything.
#include <cstddef>

inline float xsimd_hazard_probe_sum(const float* x, std::size_t n) {
  float s = 0.0f;
  for (std::size_t i = 0; i < n; ++i) s += x[i];
  return s;
}
extern float (*const xsimd_hazard_probe)(const float*, std::size_t);
float (*const xsimd_hazard_probe)(const float*, std::size_t) = &xsimd_hazard_probe_sum;
