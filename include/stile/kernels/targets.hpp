#pragma once
// Compiles all of stile's SIMD kernels for every Highway target in one pass (foreach_target).
// Heavy (every kernel for every target): included by the *_impl.hpp headers and by
// kernels/instantiate_kernels.hpp only, never by the light API headers.
//
// Why one pass: Highway's per-target include guards toggle in step with foreach_target, which
// only stays in step if each -inl.h file is compiled once per target per translation unit. Two
// passes that share a file (the GEMM and a standalone activation both need GELU) would compile
// it twice for one target. So every public kernel header includes this one header, and
// all-inl.h lists every per-target file.
#include "stile/kernels/hwy_config.hpp"  // first: Highway settings

#include "stile/kernels/codec.hpp"
#include "stile/kernels/epilogue.hpp"
#include "stile/kernels/gemm_args.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "stile/kernels/all-inl.h"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "stile/kernels/all-inl.h"

namespace stile {

// Index of the target the dispatch tables below should call: the best target that the CPU
// supports among those compiled (or the one a test forced with hwy::SetSupportedTargetsForTest).
inline std::size_t chosen_target_index() {
  hwy::ChosenTarget& chosen = hwy::GetChosenTarget();
  std::size_t index = chosen.GetIndex();
  if (index == 0) {  // not initialized yet, or reset by SetSupportedTargetsForTest
    chosen.Update(hwy::SupportedTargets());
    index = chosen.GetIndex();
  }
  return index;
}

// A dispatch table over the compiled targets for FUNC (a function of the per-target namespaces,
// or Class<Args>::member), indexed by chosen_target_index(): slot 0 ("not chosen yet") is unused.
#define STILE_TARGET_TABLE(FUNC) \
  { nullptr, HWY_CHOOSE_TARGET_LIST(FUNC), HWY_CHOOSE_FALLBACK(FUNC) }

template <class Fn, std::size_t N>
Fn choose_target(const Fn (&table)[N]) {
  static_assert(N == HWY_MAX_DYNAMIC_TARGETS + 2, "a table made by STILE_TARGET_TABLE");
  return table[chosen_target_index()];
}

}  // namespace stile
