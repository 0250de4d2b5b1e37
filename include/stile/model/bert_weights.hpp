#pragma once
// The fp32 weights of a BERT encoder, read from a Hugging Face safetensors checkpoint and
// checked against its config. Transformed once at load, never per request:
//   * K and V of a layer are stacked into one [2d x d] weight, so one GEMM makes both;
//   * Q's weight and bias are scaled by 1/sqrt(head_dim), so attention needs no separate scale;
//   * every GEMM weight is packed into the GEMM's panel layout for the CPU's SIMD target
//     (PackedF32), so no request transposes a weight.
// The word-embedding table (the largest tensor of a small BERT) stays in the memory-mapped file:
// only the rows of a request's tokens are ever touched.
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "stile/io/bert_config.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/ops/layer_view.hpp"

namespace stile {

struct BertLayerWeights {
  PackedWeights q;                                        // [d x d], pre-scaled
  PackedWeights kv;                                       // [2d x d]: K, then V
  std::vector<float> qkv_bias;                            // [3d]: Q (pre-scaled), K, V
  PackedWeights attn_out;                                 // [d x d]
  std::vector<float> attn_out_bias, ln1_gamma, ln1_beta;  // [d]
  PackedWeights ffn1;                                     // [d_ff x d]
  std::vector<float> ffn1_bias;                           // [d_ff]
  PackedWeights ffn2;                                     // [d x d_ff]
  std::vector<float> ffn2_bias, ln2_gamma, ln2_beta;      // [d]

  // The view the layer operators read (all heads; Q pre-scaled, so attention's scale is 1).
  LayerView<PackedF32> view(const BertConfig& c) const {
    LayerView<PackedF32> v{q.view, kv.view, attn_out.view, ffn1.view, ffn2.view};
    v.q_bias = qkv_bias.data();
    v.kv_bias = qkv_bias.data() + c.hidden;
    v.attn_out_bias = attn_out_bias.data();
    v.ln1_gamma = ln1_gamma.data();
    v.ln1_beta = ln1_beta.data();
    v.ffn_in_bias = ffn1_bias.data();
    v.ffn_out_bias = ffn2_bias.data();
    v.ln2_gamma = ln2_gamma.data();
    v.ln2_beta = ln2_beta.data();
    v.heads = c.num_heads;
    v.head_dim = c.head_dim();
    v.attn_scale = 1.0f;
    return v;
  }
};

struct BertWeights {
  BertConfig config;
  SafetensorsFile file;                      // keeps the word embeddings mapped
  std::span<const float> word_embeddings;    // [vocab x d], in the mapped file
  std::vector<float> position_embeddings;    // [max_positions x d]
  std::vector<float> token_type_embeddings;  // [type_vocab x d]
  std::vector<float> embed_ln_gamma, embed_ln_beta;
  std::vector<BertLayerWeights> layers;

  static BertWeights load(const std::filesystem::path& model_dir) {
    BertConfig config = read_bert_config((model_dir / "config.json").string());
    SafetensorsFile file = SafetensorsFile::open((model_dir / "model.safetensors").string());
    return from(std::move(config), std::move(file));
  }

  static BertWeights from(BertConfig config, SafetensorsFile file) {
    BertWeights w{std::move(config), std::move(file), {}, {}, {}, {}, {}, {}};
    const BertConfig& c = w.config;
    const std::size_t d = c.hidden, ff = c.intermediate;
    // Checkpoints saved from BertModel have no prefix; from BertFor... heads, "bert.".
    const std::string prefix = w.file.find("bert.embeddings.word_embeddings.weight") ? "bert." : "";
    auto tensor = [&](const std::string& name, std::vector<std::size_t> shape) {
      const std::string full = prefix + name;
      const TensorInfo& t = w.file.tensor(full);
      bool same = t.shape.size() == shape.size();
      for (std::size_t i = 0; same && i < shape.size(); ++i) same = t.shape[i] == static_cast<std::int64_t>(shape[i]);
      if (!same) {
        std::string want;
        for (std::size_t s : shape) want += (want.empty() ? "" : ", ") + std::to_string(s);
        fail_in_file(w.file.path(), "tensor '", full, "' has the wrong shape for config.json (want [", want, "])");
      }
      return full;
    };
    auto load = [&](const std::string& name, std::vector<std::size_t> shape) {
      return w.file.to_f32(tensor(name, std::move(shape)));
    };
    auto load_packed = [&](const std::string& name, std::size_t rows, std::size_t cols) {
      const std::vector<float> dense = load(name, {rows, cols});
      return pack_weights(DenseF32(dense.data(), rows, cols));
    };
    w.word_embeddings = w.file.f32_span(tensor("embeddings.word_embeddings.weight", {c.vocab_size, d}));
    w.position_embeddings = load("embeddings.position_embeddings.weight", {c.max_position_embeddings, d});
    w.token_type_embeddings = load("embeddings.token_type_embeddings.weight", {c.type_vocab_size, d});
    w.embed_ln_gamma = load("embeddings.LayerNorm.weight", {d});
    w.embed_ln_beta = load("embeddings.LayerNorm.bias", {d});
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
    for (std::size_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "encoder.layer." + std::to_string(l) + ".";
      BertLayerWeights L;
      std::vector<float> qkv_weight;
      qkv_weight.reserve(3 * d * d);
      L.qkv_bias.reserve(3 * d);
      for (const char* part : {"query", "key", "value"}) {
        std::vector<float> wt = load(p + "attention.self." + part + ".weight", {d, d});
        std::vector<float> bs = load(p + "attention.self." + part + ".bias", {d});
        if (part[0] == 'q') {
          for (float& x : wt) x *= q_scale;
          for (float& x : bs) x *= q_scale;
        }
        qkv_weight.insert(qkv_weight.end(), wt.begin(), wt.end());
        L.qkv_bias.insert(L.qkv_bias.end(), bs.begin(), bs.end());
      }
      L.q = pack_weights(DenseF32(qkv_weight.data(), d, d));
      L.kv = pack_weights(DenseF32(qkv_weight.data() + d * d, 2 * d, d));
      L.attn_out = load_packed(p + "attention.output.dense.weight", d, d);
      L.attn_out_bias = load(p + "attention.output.dense.bias", {d});
      L.ln1_gamma = load(p + "attention.output.LayerNorm.weight", {d});
      L.ln1_beta = load(p + "attention.output.LayerNorm.bias", {d});
      L.ffn1 = load_packed(p + "intermediate.dense.weight", ff, d);
      L.ffn1_bias = load(p + "intermediate.dense.bias", {ff});
      L.ffn2 = load_packed(p + "output.dense.weight", d, ff);
      L.ffn2_bias = load(p + "output.dense.bias", {d});
      L.ln2_gamma = load(p + "output.LayerNorm.weight", {d});
      L.ln2_beta = load(p + "output.LayerNorm.bias", {d});
      w.layers.push_back(std::move(L));
    }
    return w;
  }
};

}  // namespace stile
