#pragma once
// One encoder layer's fp32 weights as trained (Hugging Face's layout, Q not pre-scaled), the
// source from which each device takes its part in the multi-device modes (dist/ws_layer.hpp,
// dist/tiled1d_layer.hpp, dist/tiled2d_layer.hpp): read from a checkpoint, or made on the spot
// at any shape (a BERT-large-shaped layer for tests and benchmarks; its weights mean nothing).
// single_device_layer() runs it whole with the library's layer operator (ops/encoder_layer.hpp):
// the reference the modes are tested against.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/file_error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/checkpoint_names.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/ops/encoder_layer.hpp"

namespace stile {

struct DenseLayer {
  std::size_t hidden = 0, heads = 0, ffn = 0;  // d, H, d_ff
  float layer_norm_eps = 1e-12f;
  std::vector<float> wqkv;  // [3d x d]: W_q, W_k, W_v rows
  std::vector<float> bqkv;  // [3d]
  std::vector<float> wo;    // [d x d]
  std::vector<float> bo, ln1_gamma, ln1_beta;
  std::vector<float> w1;  // [d_ff x d]
  std::vector<float> b1;  // [d_ff]
  std::vector<float> w2;  // [d x d_ff]
  std::vector<float> b2, ln2_gamma, ln2_beta;

  std::size_t head_dim() const noexcept { return heads == 0 ? 0 : hidden / heads; }
  // Bytes of the GEMM weights (fp32).
  std::size_t weight_bytes() const noexcept { return (4 * hidden * hidden + 2 * hidden * ffn) * sizeof(float); }

  EncoderConfig config() const {
    EncoderConfig c;
    c.hidden = hidden;
    c.num_heads = heads;
    c.intermediate = ffn;
    c.layer_norm_eps = layer_norm_eps;
    return c;
  }

  // Layer `layer` of a BERT checkpoint (config checked against the tensors' shapes; errors name the
  // file and the tensor).
  static DenseLayer from_checkpoint(const SafetensorsFile& file, const EncoderConfig& c, std::size_t layer) {
    require(layer < c.num_layers, concat("dense layer: layer ", layer, " of ", c.num_layers));
    if (*c.layer_difference() != '\0') {
      fail_in_file(file.path(), "model_type \"", c.model_type, "\": its layer has ", c.layer_difference(),
                   ", which the split layer does not run (BERT's layer only; BertModel runs ", c.model_type, ")");
    }
    DenseLayer L;
    L.hidden = c.hidden, L.heads = c.num_heads, L.ffn = c.intermediate;
    L.layer_norm_eps = static_cast<float>(c.layer_norm_eps);
    const LayerTensorNames n = CheckpointNames::of(c, file).layer(layer);
    const auto load = [&](const std::string& name, std::size_t rows, std::size_t cols) {
      const TensorInfo& t = file.tensor(name);
      const bool matrix = cols != 0;
      const bool ok = matrix ? t.shape.size() == 2 && t.shape[0] == static_cast<std::int64_t>(rows) &&
                                   t.shape[1] == static_cast<std::int64_t>(cols)
                             : t.shape.size() == 1 && t.shape[0] == static_cast<std::int64_t>(rows);
      if (!ok) fail_in_file(file.path(), "tensor '", name, "' has the wrong shape for the config");
      return file.to_f32(t);
    };
    const std::size_t d = c.hidden, ff = c.intermediate;
    for (const auto& [weight, bias] : {std::pair{&n.q_weight, &n.q_bias}, std::pair{&n.k_weight, &n.k_bias},
                                       std::pair{&n.v_weight, &n.v_bias}}) {
      const std::vector<float> w = load(*weight, d, d);
      const std::vector<float> b = load(*bias, d, 0);
      L.wqkv.insert(L.wqkv.end(), w.begin(), w.end());
      L.bqkv.insert(L.bqkv.end(), b.begin(), b.end());
    }
    L.wo = load(n.attn_out_weight, d, d);
    L.bo = load(n.attn_out_bias, d, 0);
    L.ln1_gamma = load(n.ln1_weight, d, 0);
    L.ln1_beta = load(n.ln1_bias, d, 0);
    L.w1 = load(n.ffn_in_weight, ff, d);
    L.b1 = load(n.ffn_in_bias, ff, 0);
    L.w2 = load(n.ffn_out_weight, d, ff);
    L.b2 = load(n.ffn_out_bias, d, 0);
    L.ln2_gamma = load(n.ln2_weight, d, 0);
    L.ln2_beta = load(n.ln2_bias, d, 0);
    return L;
  }

  // Random weights of this shape (deterministic in `seed`): matrices ~ 0.02 N(0, 1) as BERT's
  // initialization, biases 0.02, LayerNorm gamma 1 +- 0.1 and beta 0.1 so that LayerNorm matters.
  static DenseLayer random(std::size_t d, std::size_t heads, std::size_t ff, std::uint64_t seed) {
    require(heads > 0 && d % heads == 0, "dense layer: hidden must be a multiple of the heads");
    DenseLayer L;
    L.hidden = d, L.heads = heads, L.ffn = ff;
    std::uint64_t s = seed;
    const auto uniform = [&] {  // splitmix64 -> [-0.5, 0.5)
      std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 - 0.5);
    };
    const auto fill = [&](std::size_t n, float offset, float scale) {
      std::vector<float> v(n);
      for (float& x : v) x = offset + scale * 3.4641f * uniform();  // unit variance
      return v;
    };
    L.wqkv = fill(3 * d * d, 0, 0.02f);
    L.bqkv = fill(3 * d, 0, 0.02f);
    L.wo = fill(d * d, 0, 0.02f);
    L.bo = fill(d, 0, 0.02f);
    L.ln1_gamma = fill(d, 1, 0.1f);
    L.ln1_beta = fill(d, 0, 0.1f);
    L.w1 = fill(ff * d, 0, 0.02f);
    L.b1 = fill(ff, 0, 0.02f);
    L.w2 = fill(d * ff, 0, 0.02f);
    L.b2 = fill(d, 0, 0.02f);
    L.ln2_gamma = fill(d, 1, 0.1f);
    L.ln2_beta = fill(d, 0, 0.1f);
    return L;
  }

  // The whole layer as the single-device operator reads it (plain fp32, unpacked).
  LayerView<DenseF32> view() const {
    const std::size_t d = hidden;
    LayerView<DenseF32> v;
    v.q = DenseF32(wqkv.data(), d, d);
    v.kv = DenseF32(wqkv.data() + d * d, 2 * d, d);
    v.attn_out = DenseF32(wo.data(), d, d);
    v.ffn_in = DenseF32(w1.data(), ffn, d);
    v.ffn_out = DenseF32(w2.data(), d, ffn);
    v.q_bias = bqkv.data();
    v.kv_bias = bqkv.data() + d;
    v.attn_out_bias = bo.data();
    v.ln1_gamma = ln1_gamma.data();
    v.ln1_beta = ln1_beta.data();
    v.ffn_in_bias = b1.data();
    v.ffn_out_bias = b2.data();
    v.ln2_gamma = ln2_gamma.data();
    v.ln2_beta = ln2_beta.data();
    v.heads = heads;
    v.head_dim = head_dim();
    v.attn_scale = 1.0f / std::sqrt(static_cast<float>(head_dim()));
    return v;
  }
};

// The layer on one device: the reference of the multi-device modes. x: [tokens x d] in place.
inline void single_device_layer(const DenseLayer& L, float* x, std::span<const std::size_t> seq_offsets,
                                ThreadPool& pool) {
  EncoderWorkspace ws;
  encoder_layer(L.view(), L.config(), x, seq_offsets, ws, pool);
}

}  // namespace stile
