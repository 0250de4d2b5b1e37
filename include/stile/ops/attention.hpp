#pragma once
// Multi-head self-attention over a batch of sequences packed back to back (no padding rows):
// for each (sequence, head), scores = Q_h K_h^T, P = softmax(scale * scores), ctx_h = P V_h, with
// scale = 1/sqrt(head_dim), or 1 when Q was pre-scaled at load (the fp32 model does that); the
// softmax in fp32 or I-BERT's integer-only one (ops/precision.hpp). Q, K
// and V are read in place from the fused QKV activations through the GEMM's strides and codecs,
// and ctx_h is written in place into its columns of ctx: no head split or merge copies. A family's
// position term (ops/position_terms.hpp: MPNet's relative position bias, DeBERTa's c2p and p2c) is
// added to the scaled scores before the softmax; a local layer's window (ModernBERT) limits each
// softmax to its keys.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/position_terms.hpp"

namespace stile {

// One head for `rows` queries against all s keys of their sequence: scores [rows x s] (row stride
// s, the caller's buffer), softmax rows complete, ctx_h [rows x head_dim] (row stride ld_ctx) =
// P V_h. Q_h, K_h, V_h are column slices read in place (strides ld_q, ld_kv). Single-threaded: the
// callers parallelize over heads or query tiles. ctx may alias q (the scores GEMM is done with
// Q_h before ctx_h is written). `positions` (of head `head`; the rows are queries first_query...)
// adds the family's terms to the scaled scores: MPNet's bias by key - query, DeBERTa's c2p and p2c;
// its window, when not 0, limits query i to the keys j with |i - j| <= window (the others'
// probabilities are 0, as the reference's masked scores give).
inline void attention_head(const float* q, std::size_t ld_q, const float* k, const float* v, std::size_t ld_kv,
                           std::size_t rows, std::size_t s, std::size_t head_dim, float scale, float* scores,
                           float* ctx, std::size_t ld_ctx, SoftmaxFormat softmax = SoftmaxFormat::kF32,
                           const AttentionPositions& positions = {}, std::size_t head = 0,
                           std::size_t first_query = 0) {
  ThreadPool& serial = single_thread_pool();
  gemm(rows, q, ld_q, DenseF32(k, s, head_dim, ld_kv), scores, s, epilogue::None{}, &serial);
  // softmax_rows scales what it is given: a term joins the scores already scaled.
  const float unscale = 1.0f / scale;
  if (positions.relative_bias != nullptr) {
    const float* bias = positions.head_bias(head);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* b = bias - static_cast<std::ptrdiff_t>(first_query + r);
      float* row = scores + r * s;
      if (scale == 1.0f) {
        for (std::size_t j = 0; j < s; ++j) row[j] += b[j];
      } else {
        for (std::size_t j = 0; j < s; ++j) row[j] += b[j] * unscale;
      }
    }
  }
  if (positions.disentangled()) {
    // c2p[r][row] = Q_r . PK[row], p2c[j][row] = K_j . PQ[row]: all rows, then gathered.
    const std::size_t R = positions.pos_rows;
    static thread_local AlignedBuffer<float> c2p, p2c;
    if (positions.pos_key != nullptr) {
      c2p.resize(rows * R);
      gemm(rows, q, ld_q, DenseF32(positions.pos_key + head * head_dim, R, head_dim, positions.pos_ld), c2p.data(), R,
           epilogue::None{}, &serial);
    }
    if (positions.pos_query != nullptr) {
      p2c.resize(s * R);
      gemm(s, k, ld_kv, DenseF32(positions.pos_query + head * head_dim, R, head_dim, positions.pos_ld), p2c.data(),
           R, epilogue::None{}, &serial);
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const std::int32_t* rel = positions.rel_row + (first_query + r);  // rel[-j] = row(i, j)
      float* row = scores + r * s;
      for (std::size_t j = 0; j < s; ++j) {
        const auto at = static_cast<std::size_t>(rel[-static_cast<std::ptrdiff_t>(j)]);
        float term = 0.0f;
        if (positions.pos_key != nullptr) term += c2p.data()[r * R + at];
        if (positions.pos_query != nullptr) term += p2c.data()[j * R + at];
        row[j] += scale == 1.0f ? term : term * unscale;
      }
    }
  }
  const std::size_t window = positions.window;
  if (window == 0 || window + 1 >= s) {
    softmax_rows(softmax, scores, rows, s, s, scale);
  } else {
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t i = first_query + r;
      const std::size_t lo = i > window ? i - window : 0, hi = std::min(s, i + window + 1);
      float* row = scores + r * s;
      std::fill(row, row + lo, 0.0f);
      std::fill(row + hi, row + s, 0.0f);
      softmax_rows(softmax, row + lo, 1, hi - lo, s, scale);
    }
  }
  gemm(rows, scores, s, DenseF32Transposed(v, head_dim, s, ld_kv), ctx, ld_ctx, epilogue::None{}, &serial);
}

// qkv: [tokens x 3d] (row stride ld_qkv), Q at column 0, K at d, V at 2d; head h uses columns
// [h * head_dim, (h + 1) * head_dim) of each. seq_offsets: n + 1 row offsets of the sequences.
// ctx: [tokens x d], row stride ld_ctx. positions: the family's position term (none for BERT);
// its span must cover the longest sequence.
inline void self_attention(const float* qkv, std::size_t ld_qkv, std::span<const std::size_t> seq_offsets,
                           std::size_t num_heads, std::size_t head_dim, float* ctx, std::size_t ld_ctx,
                           ThreadPool& pool, float scale = 1.0f, SoftmaxFormat softmax = SoftmaxFormat::kF32,
                           const AttentionPositions& positions = {}) {
  const std::size_t d = num_heads * head_dim;
  const std::size_t num_seqs = seq_offsets.size() - 1;
  for (std::size_t i = 0; positions.span != 0 && i < num_seqs; ++i) {
    require(seq_offsets[i + 1] - seq_offsets[i] <= positions.span,
            "attention: a sequence longer than its position term's span");
  }
  // One task per (sequence, head); each runs its small GEMMs on its own thread.
  pool.run(num_seqs * num_heads, [&](std::size_t task, std::size_t) {
    const std::size_t seq = task / num_heads, h = task % num_heads;
    const std::size_t begin = seq_offsets[seq], s = seq_offsets[seq + 1] - begin;
    if (s == 0) return;
    static thread_local AlignedBuffer<float> scores;
    scores.resize(s * s);
    const float* q = qkv + begin * ld_qkv + h * head_dim;
    attention_head(q, ld_qkv, q + d, q + 2 * d, ld_qkv, s, s, head_dim, scale, scores.data(),
                   ctx + begin * ld_ctx + h * head_dim, ld_ctx, softmax, positions, h);
  });
}

}  // namespace stile
