#pragma once
// How a CPU processor runs one OpCall (hetero/processor.hpp) on a thread pool with stile's own
// kernels: a linear call on a slice of output channels reads a slice of the packed weights in
// place (whole panels: no copy), attention runs the listed heads, LayerNorm the listed rows.
#include <cstddef>
#include <variant>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/hetero/processor.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/linear.hpp"

namespace stile {

// The panel width of w's packed layout: output-channel slices start at multiples of it.
inline std::size_t panel_width(const LinearView& w) {
  switch (w.format) {
    case LinearFormat::kF32: return w.f32.nr;
    case LinearFormat::kF16: return w.f16.nr;
    case LinearFormat::kInt8: return w.i8.nr;
  }
  return 1;
}

// Output channels [n0, n1) of w, viewed in place: every format packs whole panels of nr channels
// contiguously (kernels/codec.hpp, quant/int8_weights.hpp), so a slice that starts on a panel is
// a pointer offset. @pre n0 % panel_width(w) == 0, n0 <= n1 <= w.rows().
inline LinearView channel_slice(const LinearView& w, std::size_t n0, std::size_t n1) {
  const std::size_t nr = panel_width(w);
  require(nr > 0 && n0 % nr == 0, "channel_slice: slice start " + std::to_string(n0) +
                                      " is not a multiple of the weights' panel width " + std::to_string(nr));
  require(n0 <= n1 && n1 <= w.rows(), "channel_slice: channels [" + std::to_string(n0) + ", " + std::to_string(n1) +
                                          ") outside the layer's " + std::to_string(w.rows()));
  LinearView s = w;
  const std::size_t panel = n0 / nr;
  switch (w.format) {
    case LinearFormat::kF32:
      s.f32.data = w.f32.data + panel * w.f32.cols() * nr;
      s.f32.n_rows = n1 - n0;
      break;
    case LinearFormat::kF16:
      s.f16.data = w.f16.data + panel * w.f16.cols() * nr;
      s.f16.n_rows = n1 - n0;
      break;
    case LinearFormat::kInt8:
      s.i8.packed = w.i8.packed + panel * w.i8.padded_cols() * nr;
      s.i8.scales = w.i8.scales + n0;
      s.i8.col_sums = w.i8.col_sums + n0;
      s.i8.n_rows = n1 - n0;
      break;
  }
  return s;
}

inline void run_linear_call(const LinearCall& c, ThreadPool& pool) {
  require(c.n0 <= c.n1 && c.n1 <= c.w.rows(), "linear call: channels outside the layer");
  if (c.n0 == c.n1 || c.M == 0) return;
  const LinearView w = channel_slice(c.w, c.n0, c.n1);
  float* C = c.C + c.n0;
  const float* bias = c.bias + c.n0;
  switch (c.epilogue) {
    case LinearEpilogue::kBias: linear(c.M, c.A, c.lda, w, C, c.ldc, epilogue::Bias{.bias = bias}, &pool); return;
    case LinearEpilogue::kBiasResidual:
      linear(c.M, c.A, c.lda, w, C, c.ldc, epilogue::BiasResidual{bias, c.residual + c.n0, c.residual_ld}, &pool);
      return;
    case LinearEpilogue::kBiasGelu:
      if (c.gelu == GeluFormat::kExact) {
        linear(c.M, c.A, c.lda, w, C, c.ldc, epilogue::BiasGelu{.bias = bias}, &pool);
      } else if (c.gelu == GeluFormat::kErfApprox) {
        linear(c.M, c.A, c.lda, w, C, c.ldc, epilogue::BiasGeluErfApprox{.bias = bias}, &pool);
      } else {
        // Its scale is the whole tensor's: a slice would change the result (GeluCall instead).
        throw Error("the integer GELU cannot be fused into a slice of a linear layer");
      }
      return;
  }
}

inline void run_attention_call(const AttentionCall& c, ThreadPool& pool) {
  require(c.seq_offsets.size() >= 2, "attention call: no sequences");
  const std::size_t d = c.heads_total * c.head_dim, nh = c.heads.size(), seqs = c.seq_offsets.size() - 1;
  for (const std::uint16_t h : c.heads) require(h < c.heads_total, "attention call: head index out of range");
  pool.run(seqs * nh, [&](std::size_t task, std::size_t) {
    const std::size_t seq = task / nh, h = c.heads[task % nh];
    const std::size_t begin = c.seq_offsets[seq], s = c.seq_offsets[seq + 1] - begin;
    if (s == 0) return;
    const float* q = c.qkv + begin * c.ld_qkv + h * c.head_dim;
    attention_head(q, c.ld_qkv, q + d, q + 2 * d, c.ld_qkv, s, s, c.head_dim, c.scale, c.ctx + begin * c.ld_ctx + h * c.head_dim, c.ld_ctx, c.softmax);
  });
}

// Runs `call` on `pool`; returns when it is done. Throws stile::Error on failure.
inline void run_on_cpu(const OpCall& call, ThreadPool& pool) {
  if (const auto* l = std::get_if<LinearCall>(&call)) return run_linear_call(*l, pool);
  if (const auto* a = std::get_if<AttentionCall>(&call)) return run_attention_call(*a, pool);
  if (const auto* n = std::get_if<LayerNormCall>(&call)) {
    require(n->r0 <= n->r1, "layer_norm call: rows");
    if (n->r0 == n->r1) return;
    return layer_norm_rows(n->format, n->x + n->r0 * n->ld, n->r1 - n->r0, n->cols, n->ld, n->gamma, n->beta, n->eps,
                           &pool);
  }
  if (const auto* s = std::get_if<SignalCall>(&call)) return signal_event(*s->event, s->request, false);
  if (const auto* w = std::get_if<WaitCall>(&call)) return wait_event(*w->event, w->request);
  const GeluCall& g = std::get<GeluCall>(call);
  gelu_inplace(g.format, g.x, g.n);
}

}  // namespace stile
