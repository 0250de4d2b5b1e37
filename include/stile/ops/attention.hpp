#pragma once
// Multi-head self-attention over a batch of sequences packed back to back (no padding rows):
// for each (sequence, head), ctx_h = softmax(scale * Q_h K_h^T + terms) V_h, with scale =
// 1/sqrt(head_dim), or 1 when Q was pre-scaled at load (the fp32 model does that); the softmax in
// fp32 or I-BERT's integer-only one (ops/precision.hpp). One fused kernel runs each head per tile
// of queries (kernels/attention.hpp). Q, K and V are read in place from the fused QKV activations
// through their strides, and ctx_h is written in place into its columns of ctx: no head split or
// merge copies. A family's position term (ops/position_terms.hpp: MPNet's relative position bias,
// DeBERTa's c2p and p2c) is added to the scores before the softmax; a local layer's window
// (ModernBERT) limits each softmax to its keys.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/attention.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/number_formats.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/position_terms.hpp"

namespace stile {

namespace detail {

// What the position-term callback of attention_rows reads: the family's terms for one head, and
// DeBERTa's c2p and p2c products of the head's queries and keys (computed once per call).
struct HeadPositionTerms {
  const AttentionPositions* positions = nullptr;
  std::size_t head = 0, first_query = 0;  // of the call's first row
  float unscale = 1.0f;                   // 1 / the attention's scale
  const float* c2p = nullptr;             // [rows x pos_rows]: Q_r . PK[row]
  const float* p2c = nullptr;             // [keys x pos_rows]: K_j . PQ[row]

  static void add(const void* context, float* scores, std::size_t ld, std::size_t first_query, std::size_t rows,
                  std::size_t key_begin, std::size_t key_end) {
    const auto& t = *static_cast<const HeadPositionTerms*>(context);
    const AttentionPositions& p = *t.positions;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t i = first_query + r;
      float* row = scores + r * ld;
      if (p.relative_bias != nullptr) {
        const float* b = p.head_bias(t.head) - static_cast<std::ptrdiff_t>(i);  // b[j]: bias of key - query
        for (std::size_t j = key_begin; j < key_end; ++j) row[j] += b[j] * t.unscale;
      }
      if (p.disentangled()) {
        const std::int32_t* rel = p.rel_row + i;  // rel[-j] = row(i, j)
        const std::size_t R = p.pos_rows;
        const float* c2p = t.c2p != nullptr ? t.c2p + (i - t.first_query) * R : nullptr;
        for (std::size_t j = key_begin; j < key_end; ++j) {
          const auto at = static_cast<std::size_t>(rel[-static_cast<std::ptrdiff_t>(j)]);
          float term = 0.0f;
          if (c2p != nullptr) term += c2p[at];
          if (t.p2c != nullptr) term += t.p2c[j * R + at];
          row[j] += term * t.unscale;
        }
      }
    }
  }
};

}  // namespace detail

// One head for `rows` queries (first_query... of their sequence) against all s keys of their
// sequence: ctx_h [rows x head_dim] (row stride ld_ctx) = softmax(scale * Q_h K_h^T + terms) V_h,
// fused per tile of queries (kernels/attention.hpp). Q_h, K_h, V_h are column slices read in place
// (strides ld_q, ld_kv). Single-threaded: the callers parallelize over heads or query ranges. ctx
// may alias q. `positions` (of head `head`) adds the family's terms to the scores: MPNet's bias by
// key - query, DeBERTa's c2p and p2c; its window, when not 0, limits query i to the keys j with
// |i - j| <= window (the others' probabilities are 0, as the reference's masked scores give).
// workspace: null for the kernel's own per-thread buffer, packing the head's K and V (fastest); or
// attention_workspace_floats(s, head_dim, true) floats from a caller that counts its memory (the
// tiled layer), and the kernel runs in low-memory mode.
inline void attention_head(const float* q, std::size_t ld_q, const float* k, const float* v, std::size_t ld_kv,
                           std::size_t rows, std::size_t s, std::size_t head_dim, float scale, float* ctx,
                           std::size_t ld_ctx, SoftmaxFormat softmax = SoftmaxFormat::kF32,
                           const AttentionPositions& positions = {}, std::size_t head = 0, std::size_t first_query = 0,
                           float* workspace = nullptr) {
  detail::HeadPositionTerms terms{
      .positions = &positions, .head = head, .first_query = first_query, .unscale = 1.0f / scale};
  if (positions.disentangled()) {
    // c2p[r][row] = Q_r . PK[row], p2c[j][row] = K_j . PQ[row]: all rows, then gathered per tile.
    const std::size_t R = positions.pos_rows;
    ThreadPool& serial = single_thread_pool();
    static thread_local AlignedBuffer<float> c2p, p2c;
    if (positions.pos_key != nullptr) {
      c2p.resize(rows * R);
      gemm(rows, q, ld_q, DenseF32(positions.pos_key + head * head_dim, R, head_dim, positions.pos_ld), c2p.data(), R,
           epilogue::None{}, &serial);
      terms.c2p = c2p.data();
    }
    if (positions.pos_query != nullptr) {
      p2c.resize(s * R);
      gemm(s, k, ld_kv, DenseF32(positions.pos_query + head * head_dim, R, head_dim, positions.pos_ld), p2c.data(), R,
           epilogue::None{}, &serial);
      terms.p2c = p2c.data();
    }
  }
  const bool has_terms = positions.relative_bias != nullptr || positions.disentangled();
  attention_rows({.q = q,
                  .ld_q = ld_q,
                  .k = k,
                  .v = v,
                  .ld_kv = ld_kv,
                  .rows = rows,
                  .first_query = first_query,
                  .keys = s,
                  .head_dim = head_dim,
                  .scale = scale,
                  .ctx = ctx,
                  .ld_ctx = ld_ctx,
                  .window = positions.window,
                  .terms = has_terms ? &detail::HeadPositionTerms::add : nullptr,
                  .terms_context = &terms,
                  .softmax = softmax == SoftmaxFormat::kInteger ? &softmax_integer_rows : nullptr,
                  .low_memory = workspace != nullptr,
                  .workspace = workspace});
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
  // One task per (sequence, head, range of queries): a range per head while there are enough
  // heads to keep every thread busy, else each head's queries split in up to `parts` ranges (each
  // task packs its head's K and V again: a share of 1 / its queries of the task's work).
  constexpr std::size_t kMinQueriesPerTask = 32;
  const std::size_t wanted = 2 * pool.num_threads(), heads_total = num_seqs * num_heads;
  const std::size_t parts = heads_total >= wanted ? 1 : (wanted + heads_total - 1) / heads_total;
  pool.run(heads_total * parts, [&](std::size_t task, std::size_t) {
    const std::size_t part = task % parts, seq = task / parts / num_heads, h = task / parts % num_heads;
    const std::size_t begin = seq_offsets[seq], s = seq_offsets[seq + 1] - begin;
    const std::size_t ranges = std::min(parts, std::max<std::size_t>(1, s / kMinQueriesPerTask));
    if (s == 0 || part >= ranges) return;
    const std::size_t r0 = part * s / ranges, r1 = (part + 1) * s / ranges;
    const float* kh = qkv + begin * ld_qkv + h * head_dim;
    attention_head(kh + r0 * ld_qkv, ld_qkv, kh + d, kh + 2 * d, ld_qkv, r1 - r0, s, head_dim, scale,
                   ctx + (begin + r0) * ld_ctx + h * head_dim, ld_ctx, softmax, positions, h, r0);
  });
}

}  // namespace stile
