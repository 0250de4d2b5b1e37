#pragma once
// The int8 GEMM's per-target drivers (kernels/int8_gemm-inl.h, compiled for every Highway target
// by kernels/targets.hpp) behind int8_gemm.hpp's declarations. Heavy: include it only in the
// translation unit that instantiates the int8 configurations (stile::compiled does, part 6 of
// kernels/instantiate_kernels.hpp).
#include <cstddef>

#include "stile/kernels/int8_gemm.hpp"
#include "stile/kernels/targets.hpp"

namespace stile::detail {

template <class Epi>
void run_int8_gemm(const Int8GemmArgs<Epi>& args) {
  using Fn = void (*)(const Int8GemmArgs<Epi>&);
  static constexpr Fn kTable[HWY_MAX_DYNAMIC_TARGETS + 2] = STILE_TARGET_TABLE(RunInt8Gemm<Epi>);
  choose_target(kTable)(args);
}

}  // namespace stile::detail
