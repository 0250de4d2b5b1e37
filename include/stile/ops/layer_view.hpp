#pragma once
// One encoder layer's weights as the layer operators read them, whatever their codec: the fp32
// model's packed weights (PackedF32) or a layer assembled from shards (StackedDict). A partial
// layer (m of M shards) is just a view with fewer heads and FFN neurons.
#include <cstddef>

#include "stile/ops/position_terms.hpp"
#include "stile/ops/precision.hpp"

namespace stile {

// The weights of one (possibly partial) layer as the layer operators read them: W is any GEMM codec
// (PackedF32 for the fp32 model, StackedDict for shards) or a LinearView (ops/linear.hpp: a format
// chosen per linear layer at run time).
template <class W>
struct LayerView {
  W q;                             // [d' x d]
  W kv;                            // [2d' x d]: K rows, then V rows
  W attn_out;                      // [d x d']
  W ffn_in;                        // [d_ff' x d]
  W ffn_out;                       // [d x d_ff']
  const float* q_bias = nullptr;   // [d']
  const float* kv_bias = nullptr;  // [2d']
  const float* attn_out_bias = nullptr;
  const float* ln1_gamma = nullptr;
  const float* ln1_beta = nullptr;
  const float* ffn_in_bias = nullptr;  // [d_ff']
  const float* ffn_out_bias = nullptr;
  const float* ln2_gamma = nullptr;
  const float* ln2_beta = nullptr;
  std::size_t heads = 0;  // chosen heads; d' = heads x head_dim
  std::size_t head_dim = 0;
  float attn_scale = 1.0f;  // 1/sqrt(head_dim), or 1 if W_q was pre-scaled
  OpFormats ops;            // LayerNorm, GELU and softmax formats (the untiled layer honours them)
  AttentionPositions positions;  // the family's position term in attention (MPNet); empty for BERT
  // The layer's shape (BERT's by default). pre_norm: x += Attn(LN1(x)) (LN1 skipped when ln1_gamma
  // is null), x += FFN(LN2(x)), as ModernBERT; else BERT's post-LayerNorm. gated_ffn: ffn_in makes
  // [input | gate] (2 d_ff' rows) and the FFN is GELU(input) * gate (GEGLU).
  bool pre_norm = false;
  bool gated_ffn = false;

  std::size_t attn_width() const noexcept { return heads * head_dim; }
  std::size_t ffn_width() const noexcept { return gated_ffn ? ffn_in.rows() / 2 : ffn_in.rows(); }
};

// The same layer over other weights (the five matrices in another codec): every bias, LayerNorm
// vector, shape and format of `from`, with the matrices given.
template <class To, class From>
LayerView<To> with_weights(const LayerView<From>& from, To q, To kv, To attn_out, To ffn_in, To ffn_out) {
  LayerView<To> v;
  v.q = q;
  v.kv = kv;
  v.attn_out = attn_out;
  v.ffn_in = ffn_in;
  v.ffn_out = ffn_out;
  v.q_bias = from.q_bias;
  v.kv_bias = from.kv_bias;
  v.attn_out_bias = from.attn_out_bias;
  v.ln1_gamma = from.ln1_gamma;
  v.ln1_beta = from.ln1_beta;
  v.ffn_in_bias = from.ffn_in_bias;
  v.ffn_out_bias = from.ffn_out_bias;
  v.ln2_gamma = from.ln2_gamma;
  v.ln2_beta = from.ln2_beta;
  v.heads = from.heads;
  v.head_dim = from.head_dim;
  v.attn_scale = from.attn_scale;
  v.ops = from.ops;
  v.positions = from.positions;
  v.pre_norm = from.pre_norm;
  v.gated_ffn = from.gated_ffn;
  return v;
}

// Tile sizes of the layer: query rows per attention tile, token rows per MLP tile.
struct LayerTiles {
  std::size_t query = 0;
  std::size_t tokens = 0;
};

// What the layer's memory depends on.
struct LayerMemoryShape {
  std::size_t tokens = 0;      // rows of x (all sequences)
  std::size_t longest = 0;     // the longest sequence
  std::size_t attn_width = 0;  // d'
  std::size_t ffn_width = 0;   // d_ff'
  std::size_t threads = 1;     // workers that may run attention heads at once
  std::size_t head_dim = 0;    // of the attention heads (their kernel's workspace)
};

}  // namespace stile
