#pragma once
// One encoder layer, untiled, in place over packed token rows. BERT's (post-LayerNorm):
//   x = LN1(x + Attention(x) W_o^T + b_o)
//   x = LN2(x + GELU(x W_1^T + b_1) W_2^T + b_2)
// and, as the view describes it (ops/layer_view.hpp), ModernBERT's: pre-LayerNorm
//   x = x + Attention(LN1(x)) W_o^T + b_o          (LN1 none in its layer 0)
//   x = x + FFN(LN2(x)),  FFN gated: (GELU(input) * gate) W_2^T + b_2, [input | gate] = h W_1^T + b_1
// Every bias, exact GELU and residual add is fused into the GEMM that produces it (a GELU in another
// format, or a gated one, runs after it, ops/formatted_ops.hpp). A family's position term (the
// view's `positions`: MPNet's relative bias, ModernBERT's rotary positions, applied here to Q and
// K, and its sliding window) acts inside attention. All activations of the layer are held at once
// ([s x 3d'], [s x d'], [s x d_ff'] and the attention kernel's workspace per thread, linear in s);
// ops/tiled_layer.hpp is
// the memory-frugal variant of BERT's layer. Each linear layer runs in its weights' format and
// LayerNorm, GELU and softmax in the view's OpFormats (ops/precision.hpp).
#include <algorithm>
#include <cstddef>
#include <span>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/op_times.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/position_terms.hpp"

namespace stile {

// Scratch activations of one layer, reused by every layer of a request.
struct EncoderWorkspace {
  AlignedBuffer<float> qkv;  // [tokens x 3d']
  AlignedBuffer<float> ctx;  // [tokens x d']
  AlignedBuffer<float> ffn;  // [tokens x d_ff'] (x 2 for a gated FFN)
  AlignedBuffer<float> normed;  // [tokens x d]: a pre-LayerNorm layer's normalized input
  OpTimes* times = nullptr;  // when set, each operator's time is added to it

  void reserve(std::size_t tokens, std::size_t attn_width, std::size_t ffn_width) {
    qkv.resize(tokens * 3 * attn_width);
    ctx.resize(tokens * attn_width);
    ffn.resize(tokens * ffn_width);
  }
};

// Bytes the untiled layer holds at its peak: its workspace and the attention kernel's per thread
// (packed K and V of a head and a tile of scores, kernels/attention.hpp).
inline std::size_t untiled_layer_peak_bytes(const LayerMemoryShape& m) {
  return sizeof(float) * (m.tokens * (3 * m.attn_width + m.attn_width + m.ffn_width) +
                          m.threads * attention_workspace_floats(m.longest, m.head_dim));
}

// x: [tokens x d], the packed rows of all sequences; seq_offsets: n + 1 row offsets.
template <class W>
void encoder_layer(const LayerView<W>& w, const EncoderConfig& c, float* x, std::span<const std::size_t> seq_offsets,
                   EncoderWorkspace& ws, ThreadPool& pool) {
  const std::size_t tokens = seq_offsets.back();
  const std::size_t d = c.hidden, da = w.attn_width(), ff = w.ffn_width();
  const std::size_t ff_in = w.ffn_in.rows();  // 2 ff when gated: input and gate
  const OpFormats& f = w.ops;
  ws.reserve(tokens, da, ff_in);
  OpTimer timer(ws.times);
  // Pre-LayerNorm (ModernBERT): attention and the FFN read LN(x), a copy; their outputs are added
  // to x. Post-LayerNorm (BERT): they read x, and x is normalized after each residual add.
  const auto normed = [&](const float* gamma, const float* beta) -> const float* {
    if (gamma == nullptr) return x;  // ModernBERT's layer 0: no attention norm
    ws.normed.resize(tokens * d);
    std::copy_n(x, tokens * d, ws.normed.data());
    layer_norm_rows(f.layer_norm, ws.normed.data(), tokens, d, d, gamma, beta, c.layer_norm_eps, &pool);
    timer.lap(OpKind::kLayerNorm);
    return ws.normed.data();
  };
  const float* in = w.pre_norm ? normed(w.ln1_gamma, w.ln1_beta) : x;
  // Q, K, V side by side in one [tokens x 3d'] buffer, as attention reads them.
  linear(tokens, in, d, w.q, ws.qkv.data(), 3 * da, epilogue::Bias{.bias = w.q_bias}, &pool);
  linear(tokens, in, d, w.kv, ws.qkv.data() + da, 3 * da, epilogue::Bias{.bias = w.kv_bias}, &pool);
  if (w.positions.rotary_cos != nullptr) {  // rotary positions: Q and K of each sequence's tokens
    const std::size_t n = seq_offsets.size() - 1;
    for (std::size_t i = 0; i < n; ++i) {
      require(seq_offsets[i + 1] - seq_offsets[i] <= w.positions.span,
              "encoder layer: a sequence longer than its rotary tables");
    }
    pool.run(n, [&](std::size_t i, std::size_t) {
      float* q = ws.qkv.data() + seq_offsets[i] * 3 * da;
      const std::size_t s = seq_offsets[i + 1] - seq_offsets[i];
      apply_rotary(q, 3 * da, s, 0, w.heads, w.head_dim, w.positions.rotary_cos, w.positions.rotary_sin);
      apply_rotary(q + da, 3 * da, s, 0, w.heads, w.head_dim, w.positions.rotary_cos, w.positions.rotary_sin);
    });
  }
  timer.lap(OpKind::kQkv);
  self_attention(ws.qkv.data(), 3 * da, seq_offsets, w.heads, w.head_dim, ws.ctx.data(), da, pool, w.attn_scale,
                 f.softmax, w.positions);
  timer.lap(OpKind::kAttention);
  linear(tokens, ws.ctx.data(), da, w.attn_out, x, d, epilogue::BiasResidual{w.attn_out_bias, x, d}, &pool);
  timer.lap(OpKind::kAttnOut);
  if (!w.pre_norm) {
    layer_norm_rows(f.layer_norm, x, tokens, d, d, w.ln1_gamma, w.ln1_beta, c.layer_norm_eps, &pool);
    timer.lap(OpKind::kLayerNorm);
  }
  const float* h = w.pre_norm ? normed(w.ln2_gamma, w.ln2_beta) : x;
  if (w.gated_ffn) {
    // GEGLU: [input | gate] from one GEMM, then GELU(input) * gate over the input half, which the
    // second GEMM reads (row stride 2 ff).
    linear(tokens, h, d, w.ffn_in, ws.ffn.data(), ff_in, epilogue::Bias{.bias = w.ffn_in_bias}, &pool);
    timer.lap(OpKind::kFfnIn);
    constexpr std::size_t kMinRowsPerTask = 16;
    const std::size_t tasks = std::min(pool.num_threads(), std::max<std::size_t>(1, tokens / kMinRowsPerTask));
    pool.run(tasks, [&](std::size_t t, std::size_t) {
      for (std::size_t r = t * tokens / tasks; r < (t + 1) * tokens / tasks; ++r) {
        float* input = ws.ffn.data() + r * ff_in;
        const float* gate = input + ff;
        gelu_inplace(f.gelu, input, ff);
        for (std::size_t i = 0; i < ff; ++i) input[i] *= gate[i];
      }
    });
    timer.lap(OpKind::kGelu);
    linear(tokens, ws.ffn.data(), ff_in, w.ffn_out, x, d, epilogue::BiasResidual{w.ffn_out_bias, x, d}, &pool);
    timer.lap(OpKind::kFfnOut);
    return;  // gated is pre-LayerNorm only (ModernBERT)
  }
  if (f.gelu == GeluFormat::kExact) {
    linear(tokens, h, d, w.ffn_in, ws.ffn.data(), ff, epilogue::BiasGelu{.bias = w.ffn_in_bias}, &pool);
    timer.lap(OpKind::kFfnIn);
  } else if (f.gelu == GeluFormat::kErfApprox) {  // fused into the int8 GEMM (ops/linear.hpp)
    linear(tokens, h, d, w.ffn_in, ws.ffn.data(), ff, epilogue::BiasGeluErfApprox{.bias = w.ffn_in_bias}, &pool);
    timer.lap(OpKind::kFfnIn);
  } else {
    linear(tokens, h, d, w.ffn_in, ws.ffn.data(), ff, epilogue::Bias{.bias = w.ffn_in_bias}, &pool);
    timer.lap(OpKind::kFfnIn);
    gelu_inplace(f.gelu, ws.ffn.data(), tokens * ff, &pool);
    timer.lap(OpKind::kGelu);
  }
  linear(tokens, ws.ffn.data(), ff, w.ffn_out, x, d, epilogue::BiasResidual{w.ffn_out_bias, x, d}, &pool);
  timer.lap(OpKind::kFfnOut);
  if (!w.pre_norm) {
    layer_norm_rows(f.layer_norm, x, tokens, d, d, w.ln2_gamma, w.ln2_beta, c.layer_norm_eps, &pool);
    timer.lap(OpKind::kLayerNorm);
  }
}

}  // namespace stile
