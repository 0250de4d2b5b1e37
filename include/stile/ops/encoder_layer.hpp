#pragma once
// One BERT encoder layer (post-LayerNorm, as BERT), untiled, in place over packed token rows:
//   x = LN1(x + Attention(x) W_o^T + b_o)
//   x = LN2(x + GELU(x W_1^T + b_1) W_2^T + b_2)
// Every bias, exact GELU and residual add is fused into the GEMM that produces it (a GELU in another
// format runs after it, ops/formatted_ops.hpp). All activations of the layer are held at once
// ([s x 3d'], [s x d'], [s x d_ff'] and an [s x s] score buffer per thread); ops/tiled_layer.hpp is
// the memory-frugal variant of the same layer (BERT's attention only). A family's position term
// (MPNet's relative bias: the view's `positions`) is added inside attention. Each linear layer runs in its weights' format and
// LayerNorm, GELU and softmax in the view's OpFormats (ops/precision.hpp).
#include <cstddef>
#include <span>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/op_times.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/linear.hpp"

namespace stile {

// Scratch activations of one layer, reused by every layer of a request.
struct EncoderWorkspace {
  AlignedBuffer<float> qkv;  // [tokens x 3d']
  AlignedBuffer<float> ctx;  // [tokens x d']
  AlignedBuffer<float> ffn;  // [tokens x d_ff']
  OpTimes* times = nullptr;  // when set, each operator's time is added to it

  void reserve(std::size_t tokens, std::size_t attn_width, std::size_t ffn_width) {
    qkv.resize(tokens * 3 * attn_width);
    ctx.resize(tokens * attn_width);
    ffn.resize(tokens * ffn_width);
  }
};

// Bytes the untiled layer holds at its peak: its workspace and one [s x s] score buffer per
// thread (attention.hpp).
inline std::size_t untiled_layer_peak_bytes(const LayerMemoryShape& m) {
  return sizeof(float) *
         (m.tokens * (3 * m.attn_width + m.attn_width + m.ffn_width) + m.threads * m.longest * m.longest);
}

// x: [tokens x d], the packed rows of all sequences; seq_offsets: n + 1 row offsets.
template <class W>
void encoder_layer(const LayerView<W>& w, const EncoderConfig& c, float* x, std::span<const std::size_t> seq_offsets,
                   EncoderWorkspace& ws, ThreadPool& pool) {
  const std::size_t tokens = seq_offsets.back();
  const std::size_t d = c.hidden, da = w.attn_width(), ff = w.ffn_width();
  const OpFormats& f = w.ops;
  ws.reserve(tokens, da, ff);
  OpTimer timer(ws.times);
  // Q, K, V side by side in one [tokens x 3d'] buffer, as attention reads them.
  linear(tokens, x, d, w.q, ws.qkv.data(), 3 * da, epilogue::Bias{.bias = w.q_bias}, &pool);
  linear(tokens, x, d, w.kv, ws.qkv.data() + da, 3 * da, epilogue::Bias{.bias = w.kv_bias}, &pool);
  timer.lap(OpKind::kQkv);
  self_attention(ws.qkv.data(), 3 * da, seq_offsets, w.heads, w.head_dim, ws.ctx.data(), da, pool, w.attn_scale,
                 f.softmax, w.positions);
  timer.lap(OpKind::kAttention);
  linear(tokens, ws.ctx.data(), da, w.attn_out, x, d, epilogue::BiasResidual{w.attn_out_bias, x, d}, &pool);
  timer.lap(OpKind::kAttnOut);
  layer_norm_rows(f.layer_norm, x, tokens, d, d, w.ln1_gamma, w.ln1_beta, c.layer_norm_eps, &pool);
  timer.lap(OpKind::kLayerNorm);
  if (f.gelu == GeluFormat::kExact) {
    linear(tokens, x, d, w.ffn_in, ws.ffn.data(), ff, epilogue::BiasGelu{.bias = w.ffn_in_bias}, &pool);
    timer.lap(OpKind::kFfnIn);
  } else if (f.gelu == GeluFormat::kErfApprox) {  // fused into the int8 GEMM (ops/linear.hpp)
    linear(tokens, x, d, w.ffn_in, ws.ffn.data(), ff, epilogue::BiasGeluErfApprox{.bias = w.ffn_in_bias}, &pool);
    timer.lap(OpKind::kFfnIn);
  } else {
    linear(tokens, x, d, w.ffn_in, ws.ffn.data(), ff, epilogue::Bias{.bias = w.ffn_in_bias}, &pool);
    timer.lap(OpKind::kFfnIn);
    gelu_inplace(f.gelu, ws.ffn.data(), tokens * ff, &pool);
    timer.lap(OpKind::kGelu);
  }
  linear(tokens, ws.ffn.data(), ff, w.ffn_out, x, d, epilogue::BiasResidual{w.ffn_out_bias, x, d}, &pool);
  timer.lap(OpKind::kFfnOut);
  layer_norm_rows(f.layer_norm, x, tokens, d, d, w.ln2_gamma, w.ln2_beta, c.layer_norm_eps, &pool);
  timer.lap(OpKind::kLayerNorm);
}

}  // namespace stile
