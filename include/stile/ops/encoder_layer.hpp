#pragma once
// One BERT encoder layer (post-LayerNorm, as BERT), in place over packed token rows:
//   x = LN1(x + Attention(x) W_o^T + b_o)
//   x = LN2(x + GELU(x W_1^T + b_1) W_2^T + b_2)
// Every bias, GELU and residual add is fused into the GEMM that produces it.
#include <cstddef>
#include <span>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/model/bert_weights.hpp"
#include "stile/ops/attention.hpp"

namespace stile {

// Scratch activations of one layer, reused by every layer of a request.
struct EncoderWorkspace {
  AlignedBuffer<float> qkv;  // [tokens x 3d]
  AlignedBuffer<float> ctx;  // [tokens x d]
  AlignedBuffer<float> ffn;  // [tokens x d_ff]

  void reserve(std::size_t tokens, std::size_t d, std::size_t d_ff) {
    qkv.resize(tokens * 3 * d);
    ctx.resize(tokens * d);
    ffn.resize(tokens * d_ff);
  }
};

// x: [tokens x d], the packed rows of all sequences; seq_offsets: n + 1 row offsets.
inline void encoder_layer(const BertLayerWeights& w, const BertConfig& c, float* x,
                          std::span<const std::size_t> seq_offsets, EncoderWorkspace& ws,
                          ThreadPool& pool) {
  const std::size_t tokens = seq_offsets.back();
  const std::size_t d = c.hidden, ff = c.intermediate;
  ws.reserve(tokens, d, ff);
  gemm(tokens, x, d, w.qkv.view, ws.qkv.data(), 3 * d,
       epilogue::Bias{.bias = w.qkv_bias.data()}, &pool);
  self_attention(ws.qkv.data(), 3 * d, seq_offsets, c.num_heads, c.head_dim(), ws.ctx.data(), d, pool);
  gemm(tokens, ws.ctx.data(), d, w.attn_out.view, x, d,
       epilogue::BiasResidual{w.attn_out_bias.data(), x, d}, &pool);
  layer_norm_rows(x, tokens, d, d, w.ln1_gamma.data(), w.ln1_beta.data(), c.layer_norm_eps);
  gemm(tokens, x, d, w.ffn1.view, ws.ffn.data(), ff,
       epilogue::BiasGelu{.bias = w.ffn1_bias.data()}, &pool);
  gemm(tokens, ws.ffn.data(), ff, w.ffn2.view, x, d,
       epilogue::BiasResidual{w.ffn2_bias.data(), x, d}, &pool);
  layer_norm_rows(x, tokens, d, d, w.ln2_gamma.data(), w.ln2_beta.data(), c.layer_norm_eps);
}

}  // namespace stile
