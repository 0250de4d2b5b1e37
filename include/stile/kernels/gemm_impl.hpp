#pragma once
// The GEMM's and the dictionary decoder's per-target drivers (kernels/gemm-inl.h, compiled for every Highway target by
// kernels/targets.hpp) behind gemm.hpp's declarations. Heavy: include it only in the translation
// unit that instantiates a GEMM configuration (the stile::compiled library does for the library's
// own, kernels/gemm_instances.hpp; a host does for its own tile shapes).
#include <cstddef>

#include "stile/kernels/dict.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/targets.hpp"

namespace stile::detail {

template <class Cfg>
void run_gemm(const GemmArgs<typename Cfg::Weights, typename Cfg::Epi>& args) {
  using Fn = void (*)(const GemmArgs<typename Cfg::Weights, typename Cfg::Epi>&);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(GemmDriver<Cfg>::Run);
  choose_target(kTable)(args);
}

template <class Tiles>
std::size_t panel_width() {
  using Cfg = GemmConfig<Tiles, DenseF32, epilogue::None>;  // (the macro takes no commas)
  using Fn = std::size_t (*)();
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(GemmDriver<Cfg>::PanelWidth);
  return choose_target(kTable)();
}

template <class Cfg>
void decode_to_packed_on_target(const typename Cfg::Weights& w, float* out) {
  using Fn = void (*)(const typename Cfg::Weights&, float*);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(DecodeToPacked<Cfg>::Run);
  choose_target(kTable)(w, out);
}

template <class Cfg>
void sweep_dict_panels(const DictMatrix& w) {
  using Fn = void (*)(const DictMatrix&);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(DictDecodeSweep<Cfg>::Run);
  choose_target(kTable)(w);
}

}  // namespace stile::detail
