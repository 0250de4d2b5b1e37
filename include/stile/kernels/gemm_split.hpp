#pragma once
// How a GEMM driver (the fp32 one, kernels/gemm-inl.h, and the int8 one, kernels/int8_gemm-inl.h)
// splits its M x N output over the threads. N first: column chunks never duplicate work (each
// thread reads or decodes only its own panels of W). Several chunks per thread let a thread that
// was descheduled catch up. M is split only when N has too few panels to go round.
#include <algorithm>
#include <cstddef>

#include "stile/core/thread_pool.hpp"

namespace stile::detail {

// Calls block(m0, m1, n0, n1) on `pool` for blocks covering [0, M) x [0, N), each a whole number
// of MR rows and NR columns (but the last).
template <class Block>
void run_gemm_blocks(ThreadPool& pool, std::size_t M, std::size_t N, std::size_t MR, std::size_t NR,
                     const Block& block) {
  const std::size_t threads = pool.num_threads();
  const std::size_t n_panels = (N + NR - 1) / NR;
  const std::size_t n_chunks = std::min(n_panels, threads == 1 ? 1 : 4 * threads);
  const std::size_t m_blocks = (M + MR - 1) / MR;
  const std::size_t m_chunks = std::min(m_blocks, std::max<std::size_t>(1, threads / n_chunks));
  pool.run(n_chunks * m_chunks, [&](std::size_t task, std::size_t) {
    const std::size_t ni = task % n_chunks, mi = task / n_chunks;
    const std::size_t n0 = std::min(N, ni * n_panels / n_chunks * NR);
    const std::size_t n1 = std::min(N, (ni + 1) * n_panels / n_chunks * NR);
    const std::size_t m0 = std::min(M, mi * m_blocks / m_chunks * MR);
    const std::size_t m1 = std::min(M, (mi + 1) * m_blocks / m_chunks * MR);
    if (n0 < n1 && m0 < m1) block(m0, m1, n0, n1);
  });
}

}  // namespace stile::detail
