#pragma once
// The runtime arguments of one GEMM call, shared by the dispatcher and every target's driver.
#include <cstddef>

#include "stile/core/thread_pool.hpp"

namespace stile {

template <class Weights, class Epi>
struct GemmArgs {
  std::size_t M = 0;
  const float* A = nullptr;  // [M x K], row stride lda
  std::size_t lda = 0;
  const Weights* W = nullptr;  // N x K in its stored format
  float* C = nullptr;          // [M x N], row stride ldc
  std::size_t ldc = 0;
  Epi epi{};
  ThreadPool* pool = nullptr;
};

}  // namespace stile
