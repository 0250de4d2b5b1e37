#pragma once
// Multi-head self-attention over a batch of sequences packed back to back (no padding rows):
// for each (sequence, head), scores = Q_h K_h^T, P = softmax(scale * scores), ctx_h = P V_h, with
// scale = 1/sqrt(head_dim) or 1 when Q was pre-scaled at load (the fp32 model does that). Q, K and V are read in place from the fused QKV
// activations through the GEMM's strides and codecs, and ctx_h is written in place into its
// columns of ctx: no head split or merge copies.
#include <cstddef>
#include <span>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/rowwise.hpp"

namespace stile {

// qkv: [tokens x 3d] (row stride ld_qkv), Q at column 0, K at d, V at 2d; head h uses columns
// [h * head_dim, (h + 1) * head_dim) of each. seq_offsets: n + 1 row offsets of the sequences.
// ctx: [tokens x d], row stride ld_ctx.
inline void self_attention(const float* qkv, std::size_t ld_qkv, std::span<const std::size_t> seq_offsets,
                           std::size_t num_heads, std::size_t head_dim, float* ctx,
                           std::size_t ld_ctx, ThreadPool& pool, float scale = 1.0f) {
  const std::size_t d = num_heads * head_dim;
  const std::size_t num_seqs = seq_offsets.size() - 1;
  // One task per (sequence, head); each runs its small GEMMs on its own thread.
  pool.run(num_seqs * num_heads, [&](std::size_t task, std::size_t) {
    const std::size_t seq = task / num_heads, h = task % num_heads;
    const std::size_t begin = seq_offsets[seq], s = seq_offsets[seq + 1] - begin;
    if (s == 0) return;
    static thread_local AlignedBuffer<float> scores;
    scores.resize(s * s);
    const float* q = qkv + begin * ld_qkv + h * head_dim;
    const float* k = q + d;
    const float* v = q + 2 * d;
    ThreadPool& serial = single_thread_pool();
    gemm(s, q, ld_qkv, DenseF32(k, s, head_dim, ld_qkv), scores.data(), s, epilogue::None{}, &serial);
    softmax_rows(scores.data(), s, s, s, scale);
    gemm(s, scores.data(), s, DenseF32Transposed(v, head_dim, s, ld_qkv),
         ctx + begin * ld_ctx + h * head_dim, ld_ctx, epilogue::None{}, &serial);
  });
}

}  // namespace stile
