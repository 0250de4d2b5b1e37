#pragma once
// The element-wise and row-wise operators in the number formats other than fp32, fp32 in and out
// (each quantizes its input as its method prescribes, computes in its format, and dequantizes):
// the Arm Compute Library BERT recipe's int8 LayerNorm and erf-approximated GELU, and I-BERT's
// integer-only GELU, softmax and LayerNorm. Light: the xsimd templates behind them
// (kernels/int8_layernorm.hpp, kernels/gelu_erf_approx.hpp, kernels/ibert*.hpp) are compiled in
// stile::compiled once per xsimd architecture (x86-64: sse2, fma3+avx2, avx512bw; AArch64: its
// baseline, NEON; elsewhere: whatever the flags give), each in a translation unit of its own
// (src/stile_xsimd_*.cpp, kernels/instantiate_xsimd_kernels.hpp), and each call runs the best one
// this CPU supports (runtime dispatch; the results are the same bit for bit on every
// architecture). Signatures and preconditions as rowwise.hpp's.
#include <cstddef>
#include <string>
#include <vector>

namespace stile {

void layer_norm_int8_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                          const float* beta, float eps);
void layer_norm_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                             const float* beta, float eps);
void gelu_erf_approx_inplace(float* x, std::size_t n);
void gelu_integer_inplace(float* x, std::size_t n);
// gelu_integer_inplace on a block x[0, n) of a larger tensor whose max |x| is absmax (the
// quantization's range): the blocks of a tensor, each run with the tensor's absmax, give the
// floats of one call over the whole tensor, so it can be split over threads. @pre absmax finite,
// >= max |x[i]|.
void gelu_integer_inplace(float* x, std::size_t n, float absmax);
void softmax_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale);

// The xsimd architectures of the kernels above that this CPU can run, best first, by xsimd's names
// ("avx512bw", "fma3+avx2", "sse2", "arm64+neon", ...). The CPU check is Highway's (instruction
// set and operating-system support), so a test that limits Highway's targets
// (hwy::SetSupportedTargetsForTest) limits these too.
std::vector<std::string> number_formats_archs();
// The architecture the kernels run now: the one set by set_number_formats_arch, else the one named
// by the environment variable STILE_NUMBER_FORMATS_ARCH (read at the first call; for benchmarks),
// else the first of number_formats_archs().
std::string number_formats_arch();
// Runs the kernels on architecture `name` (one of number_formats_archs()) from now on, in every
// thread; "" goes back to the default. For tests and benchmarks. Throws stile::Error naming the
// architecture if this build or this CPU lacks it.
void set_number_formats_arch(const std::string& name);

}  // namespace stile
