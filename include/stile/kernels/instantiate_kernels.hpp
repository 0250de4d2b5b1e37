// stile's compiled kernels: include this file in exactly one translation unit of a program, or
// split it over several by defining STILE_KERNELS_PART to each of its parts in its own
// translation unit (the stile::compiled library does: src/stile_kernels_*.cpp, which
// find_package(stile) builds in the host's project; the parts compile in parallel). It defines
// the light headers' kernel entry points (rowwise.hpp, activation.hpp, active_target.hpp,
// number_formats.hpp) and instantiates every GEMM and decoder configuration of
// kernels/gemm_instances.hpp and the int8 GEMM, each compiled for every Highway target.
//   part 0: the row-wise and activation kernels, the panel width, the dictionary decoders, the
//           dispatch of the number-format kernels (xsimd: number_formats.hpp; the kernels are
//           compiled per architecture in src/stile_xsimd_*.cpp, kernels/instantiate_xsimd_kernels.hpp);
//   parts 1..5: the GEMMs on DenseF32, PackedF32, DenseF32Transposed, DictMatrix, StackedDict;
//   part 6: the int8 GEMM (kernels/int8_gemm.hpp): every epilogue, the exact u8 x s8 product,
//           the activation quantization and the target's int8 packing;
//   part 7: the GEMMs on PackedF16.
// Not a header to include anywhere else (no include guard on purpose: a second inclusion of a
// part in one program is an ODR error).
#include <string>

#include "stile/core/error.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/kernels/activation.hpp"
#include "stile/kernels/attention.hpp"
#include "stile/kernels/gemm_impl.hpp"
#include "stile/kernels/dict_int8.hpp"
#include "stile/kernels/int8_gemm_impl.hpp"
#include "stile/kernels/rowwise.hpp"

#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 0
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <xsimd/xsimd.hpp>

#include "stile/kernels/number_formats.hpp"
#include "stile/kernels/number_formats_table.hpp"
#include "stile/core/xsimd_abi.hpp"
#endif
#include "stile/kernels/targets.hpp"

#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 0
namespace stile {

void layer_norm_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                     const float* beta, float eps) {
  require(cols > 0 && ld >= cols, "layer_norm_rows: need 0 < cols <= ld");
  using Fn = void (*)(float*, std::size_t, std::size_t, std::size_t, const float*, const float*, float);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(LayerNormRows);
  choose_target(kTable)(x, rows, cols, ld, gamma, beta, eps);
}

void softmax_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale) {
  require(cols > 0 && ld >= cols, "softmax_rows: need 0 < cols <= ld");
  require(scale > 0.0f, "softmax_rows: scale must be positive");
  using Fn = void (*)(float*, std::size_t, std::size_t, std::size_t, float);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(SoftmaxRows);
  choose_target(kTable)(x, rows, cols, ld, scale);
}

void attention_rows(const AttentionRowsArgs& a) {
  require(a.q != nullptr && a.k != nullptr && a.v != nullptr && a.ctx != nullptr, "attention_rows: null pointer");
  require(a.rows > 0 && a.keys > 0 && a.head_dim > 0, "attention_rows: rows, keys and head_dim must be positive");
  require(a.first_query + a.rows <= a.keys, "attention_rows: queries past the sequence's end");
  require(a.ld_q >= a.head_dim && a.ld_kv >= a.head_dim && a.ld_ctx >= a.head_dim,
          "attention_rows: a row stride below head_dim");
  require(a.scale > 0.0f, "attention_rows: scale must be positive");
  using Fn = void (*)(const AttentionRowsArgs&);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(AttentionRows<DefaultTiles>::Run);
  choose_target(kTable)(a);
}

std::size_t attention_workspace_floats(std::size_t keys, std::size_t head_dim, bool low_memory) {
  using Fn = std::size_t (*)(std::size_t, std::size_t, bool);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] =
      STILE_TARGET_TABLE(AttentionRows<DefaultTiles>::WorkspaceFloats);
  return choose_target(kTable)(keys, head_dim, low_memory);
}

void gelu_inplace(float* x, std::size_t n) {
  using Fn = void (*)(float*, std::size_t);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(GeluInPlace);
  choose_target(kTable)(x, n);
}

// The xsimd kernels' errors (core/xsimd_abi.hpp): built and thrown here, in baseline code.
void detail::xsimd_kernel_error(const char* what) { throw Error(std::string("stile: ") + what); }
void detail::xsimd_kernel_range_error(const char* what, double value) {
  throw Error(std::string("stile: ") + what + " out of range (" + std::to_string(value) + ")");
}
void detail::xsimd_kernel_scale_error(const char* name, double value) {
  char got[32];
  std::snprintf(got, sizeof got, "%g", value);
  throw Error(std::string("stile: scale of '") + name + "' must be finite and > 0 (got " + got + ")");
}

// The number-format kernels (number_formats.hpp): a table per xsimd architecture, compiled in its own
// translation unit (kernels/instantiate_xsimd_kernels.hpp), chosen per call.
namespace {

// Best first.
constexpr const detail::NumberFormatKernels* kNumberFormatTables[] = {
#if defined(__x86_64__)
    &detail::number_format_kernels_avx512,
    &detail::number_format_kernels_avx2,
#endif
    &detail::number_format_kernels_baseline,
};

// Whether this CPU (and its operating system) runs a table, by Highway's detection; AVX-512 also
// needs AVX512CD, which xsimd's avx512bw assumes and Highway's AVX3 does not check.
bool cpu_runs(const detail::NumberFormatKernels& k) {
  if (k.level == detail::XsimdLevel::kBaseline) return true;
#if HWY_ARCH_X86
  const std::int64_t targets = hwy::SupportedTargets();
  if (k.level == detail::XsimdLevel::kAvx2) return (targets & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) != 0;
  if (k.level == detail::XsimdLevel::kAvx512) {
    return (targets & (HWY_AVX3 | HWY_AVX3_DL)) != 0 && xsimd::available_architectures().avx512cd;
  }
#endif
  return false;
}
const detail::NumberFormatKernels* find_number_format_table(const std::string& name) {
  for (const detail::NumberFormatKernels* k : kNumberFormatTables) {
    if (name == k->arch) {
      require(cpu_runs(*k), "number-format kernels: this CPU does not support the xsimd architecture '" + name + "'");
      return k;
    }
  }
  std::string known;
  for (const auto* k : kNumberFormatTables) known += std::string(known.empty() ? "" : ", ") + k->arch;
  throw Error("stile: number-format kernels: xsimd architecture '" + name + "' not built (built: " + known + ")");
}
std::atomic<const detail::NumberFormatKernels*> g_forced_number_formats{nullptr};
// The best table, once per Highway target choice ((index + 1) << 8 | table): hwy::SupportedTargets()
// runs CPUID (tens of us under a hypervisor); the choice is cached, changed only by tests' limits.
std::atomic<std::uint64_t> g_best_number_formats{0};
const detail::NumberFormatKernels& number_format_kernels() {
  if (const detail::NumberFormatKernels* k = g_forced_number_formats.load(std::memory_order_acquire)) return *k;
  static const detail::NumberFormatKernels* const from_env = []() -> const detail::NumberFormatKernels* {
    const char* env = std::getenv("STILE_NUMBER_FORMATS_ARCH");
    return env != nullptr && *env != '\0' ? find_number_format_table(env) : nullptr;
  }();
  if (from_env != nullptr) return *from_env;
  const std::uint64_t key = std::uint64_t{chosen_target_index() + 1} << 8, best = g_best_number_formats.load();
  if ((best & ~std::uint64_t{0xff}) == key) return *kNumberFormatTables[best & 0xff];
  std::size_t i = 0;  // the last table, the baseline, runs everywhere
  while (i + 1 < std::size(kNumberFormatTables) && !cpu_runs(*kNumberFormatTables[i])) ++i;
  g_best_number_formats.store(key | i);
  return *kNumberFormatTables[i];
}
}  // namespace

std::vector<std::string> number_formats_archs() {
  std::vector<std::string> out;
  for (const detail::NumberFormatKernels* k : kNumberFormatTables) {
    if (cpu_runs(*k)) out.emplace_back(k->arch);
  }
  return out;
}

std::string number_formats_arch() { return number_format_kernels().arch; }

void set_number_formats_arch(const std::string& name) {
  g_forced_number_formats.store(name.empty() ? nullptr : find_number_format_table(name), std::memory_order_release);
}

void layer_norm_int8_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                          const float* beta, float eps) {
  require(cols > 0 && ld >= cols, "layer_norm_int8_rows: need 0 < cols <= ld");
  number_format_kernels().layer_norm_int8_rows(x, rows, cols, ld, gamma, beta, eps);
}
void layer_norm_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, const float* gamma,
                             const float* beta, float eps) {
  require(cols > 0 && ld >= cols, "layer_norm_integer_rows: need 0 < cols <= ld");
  number_format_kernels().layer_norm_integer_rows(x, rows, cols, ld, gamma, beta, eps);
}
void gelu_erf_approx_inplace(float* x, std::size_t n) { number_format_kernels().gelu_erf_approx_inplace(x, n); }
void gelu_integer_inplace(float* x, std::size_t n) { number_format_kernels().gelu_integer_inplace(x, n); }
void gelu_integer_inplace(float* x, std::size_t n, float absmax) {
  require(std::isfinite(absmax) && absmax >= 0.0f, "gelu_integer_inplace: absmax must be finite and >= 0");
  number_format_kernels().gelu_integer_block(x, n, absmax);
}
void softmax_integer_rows(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale) {
  require(cols > 0 && ld >= cols, "softmax_integer_rows: need 0 < cols <= ld");
  require(scale > 0.0f, "softmax_integer_rows: scale must be positive");
  number_format_kernels().softmax_integer_rows(x, rows, cols, ld, scale);
}

const char* active_target_name() {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    return hwy::TargetName(target);  // the list is ordered best first
  }
  return "none";
}

void set_simd_target(std::string_view name) {
  std::string known;
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (name == hwy::TargetName(target)) {
      hwy::SetSupportedTargetsForTest(target);
      return;
    }
    known += known.empty() ? "" : ", ";
    known += hwy::TargetName(target);
  }
  throw Error("stile: SIMD target '" + std::string(name) + "' is not one this CPU has and stile compiled (" + known +
              ")");
}

}  // namespace stile

template std::size_t stile::detail::panel_width<stile::DefaultTiles>();
template void stile::detail::decode_to_packed_on_target<
    stile::GemmConfig<stile::DefaultTiles, stile::DictMatrix, stile::epilogue::None>>(const stile::DictMatrix&, float*);
template void stile::detail::decode_to_packed_on_target<
    stile::GemmConfig<stile::DefaultTiles, stile::StackedDict, stile::epilogue::None>>(const stile::StackedDict&,
                                                                                       float*);
template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kAuto>>(const stile::DictMatrix&);
template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kTree>>(const stile::DictMatrix&);
template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kGather>>(const stile::DictMatrix&);
template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kBytes>>(const stile::DictMatrix&);
#endif  // part 0

#define STILE_DEFINE_GEMM_INSTANCE(W, E)                                                     \
  template void ::stile::detail::run_gemm<::stile::GemmConfig<::stile::DefaultTiles, W, E>>( \
      const ::stile::GemmArgs<W, E>&);
#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 1
STILE_GEMM_EPILOGUES(STILE_DEFINE_GEMM_INSTANCE, ::stile::DenseF32)
#endif
#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 2
STILE_GEMM_EPILOGUES(STILE_DEFINE_GEMM_INSTANCE, ::stile::PackedF32)
#endif
#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 3
STILE_GEMM_EPILOGUES(STILE_DEFINE_GEMM_INSTANCE, ::stile::DenseF32Transposed)
#endif
#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 4
STILE_GEMM_EPILOGUES(STILE_DEFINE_GEMM_INSTANCE, ::stile::DictMatrix)
#endif
#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 5
STILE_GEMM_EPILOGUES(STILE_DEFINE_GEMM_INSTANCE, ::stile::StackedDict)
#endif
#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 7
STILE_GEMM_EPILOGUES(STILE_DEFINE_GEMM_INSTANCE, ::stile::PackedF16)
#endif
#undef STILE_DEFINE_GEMM_INSTANCE

#if !defined(STILE_KERNELS_PART) || STILE_KERNELS_PART == 6
namespace stile::detail {

void run_u8s8_i32(const Int8GemmArgs<epilogue::None>& args) {
  using Fn = void (*)(const Int8GemmArgs<epilogue::None>&);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(RunU8S8I32);
  choose_target(kTable)(args);
}

Int8Packing int8_packing_on_target() {
  using Fn = Int8Packing (*)();
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(Int8PackingOnTarget);
  return choose_target(kTable)();
}

void quantize_activations_on_target(std::size_t M, const float* A, std::size_t lda, std::size_t K, ActivationQuant aq,
                                    QuantizedActivations& out, ThreadPool* pool) {
  using Fn = void (*)(std::size_t, const float*, std::size_t, std::size_t, ActivationQuant, QuantizedActivations&,
                      ThreadPool*);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(QuantizeActivationsOnTarget);
  choose_target(kTable)(M, A, lda, K, aq, out, pool);
}

void dict_to_int8_on_target(const DictMatrix& m, const std::int8_t* table, std::int8_t* packed,
                            std::size_t panel_stride, std::int32_t* col_sums) {
  using Fn = void (*)(const DictMatrix&, const std::int8_t*, std::int8_t*, std::size_t, std::int32_t*);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(DictToInt8::Run);
  choose_target(kTable)(m, table, packed, panel_stride, col_sums);
}

}  // namespace stile::detail

#define STILE_DEFINE_INT8_GEMM_INSTANCE(E) \
  template void ::stile::detail::run_int8_gemm<E>(const ::stile::detail::Int8GemmArgs<E>&);
STILE_FOR_EACH_INT8_GEMM_INSTANCE(STILE_DEFINE_INT8_GEMM_INSTANCE)
#undef STILE_DEFINE_INT8_GEMM_INSTANCE
#endif  // part 6
