#pragma once
// The weights of a BERT encoder, read from a Hugging Face safetensors checkpoint and checked
// against its config: an fp32 (or F16/BF16) checkpoint, or a quantized one written by `convert
// --checkpoint` (docs/quantized_checkpoint.md), whose I8 / F16 GEMM weights become int8 / fp16
// weights without a round trip of their values through fp32 when the precision asks for their
// format (through fp32 when it asks for another: model/stored_linear.hpp). Transformed once at
// load, never per request:
//   * K and V of a layer are stacked into one [2d x d] weight, so one GEMM makes both;
//   * Q's weight and bias are scaled by 1/sqrt(head_dim), so attention needs no separate scale;
//   * every GEMM weight is converted to the format its ModelPrecision names (ops/precision.hpp) and
//     packed into its GEMM's panel layout for the CPU's SIMD target (fp32, fp16 or int8), so no
//     request transposes or converts a weight.
// The word-embedding table (the largest tensor of a small BERT) stays in the memory-mapped file:
// only the rows of a request's tokens are ever touched.
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stile/io/encoder_config.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/model/stored_linear.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/precision.hpp"

namespace stile {

struct BertLayerWeights {
  LinearWeights q;                                        // [d x d], pre-scaled
  LinearWeights kv;                                       // [2d x d]: K, then V
  std::vector<float> qkv_bias;                            // [3d]: Q (pre-scaled), K, V
  LinearWeights attn_out;                                 // [d x d]
  std::vector<float> attn_out_bias, ln1_gamma, ln1_beta;  // [d]
  LinearWeights ffn1;                                     // [d_ff x d]
  std::vector<float> ffn1_bias;                           // [d_ff]
  LinearWeights ffn2;                                     // [d x d_ff]
  std::vector<float> ffn2_bias, ln2_gamma, ln2_beta;      // [d]
  OpFormats ops;                                          // LayerNorm, GELU, softmax

  // Bytes of the GEMM weights in their formats.
  std::size_t linear_bytes() const noexcept {
    return q.bytes() + kv.bytes() + attn_out.bytes() + ffn1.bytes() + ffn2.bytes();
  }

  // The view the layer operators read (all heads; Q pre-scaled, so attention's scale is 1).
  LayerView<LinearView> view(const EncoderConfig& c) const {
    LayerView<LinearView> v;
    v.q = q.view();
    v.kv = kv.view();
    v.attn_out = attn_out.view();
    v.ffn_in = ffn1.view();
    v.ffn_out = ffn2.view();
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
    v.ops = ops;
    return v;
  }
};

struct BertWeights {
  EncoderConfig config;
  SafetensorsFile file;                      // keeps the word embeddings mapped
  std::span<const float> word_embeddings;    // [vocab x d], in the mapped file
  std::vector<float> position_embeddings;    // [max_positions x d]
  std::vector<float> token_type_embeddings;  // [type_vocab x d]
  std::vector<float> embed_ln_gamma, embed_ln_beta;
  std::vector<BertLayerWeights> layers;
  ModelPrecision precision;

  // Reads config.json and model.safetensors from model_dir, converting each layer to `precision`
  // (one LayerPrecision per layer, or its uniform one).
  static BertWeights load(const std::filesystem::path& model_dir, const ModelPrecision& precision = {}) {
    EncoderConfig config = read_encoder_config((model_dir / "config.json").string());
    SafetensorsFile file = SafetensorsFile::open((model_dir / "model.safetensors").string());
    return from(std::move(config), std::move(file), precision);
  }

  static BertWeights from(EncoderConfig config, SafetensorsFile file, const ModelPrecision& precision = {}) {
    require(
        precision.layers.empty() || precision.layers.size() == config.num_layers,
        concat("model precision: ", precision.layers.size(), " layer precisions for ", config.num_layers, " layers"));
    BertWeights w{std::move(config), std::move(file), {}, {}, {}, {}, {}, {}, precision};
    const EncoderConfig& c = w.config;
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
    // A GEMM weight in the format of its layer's precision (model/stored_linear.hpp: stored int8
    // stays int8, any other pair goes through fp32); a weight the format cannot hold, or a bad
    // quantized one, is an error naming the file and the tensor.
    auto stored = [&](const std::string& name, std::size_t rows, std::size_t cols) {
      return read_stored_linear(w.file, prefix + name, rows, cols);
    };
    auto convert = [&](const StoredLinear& weight, LinearFormat format) {
      try {
        return to_linear(weight, format, precision.int8_scheme);
      } catch (const Error& e) {
        const std::string_view what = e.what();
        if (what.starts_with(concat("stile: ", w.file.path(), ": "))) throw;
        fail_in_file(w.file.path(), without_prefix(what));
      }
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
      const LayerPrecision& lp = precision.layer(l);
      L.ops = lp.ops;
      std::vector<StoredLinear> qkv;
      L.qkv_bias.reserve(3 * d);
      for (const char* part : {"query", "key", "value"}) {
        qkv.push_back(stored(p + "attention.self." + part + ".weight", d, d));
        std::vector<float> bs = load(p + "attention.self." + part + ".bias", {d});
        if (part[0] == 'q') {
          qkv.back().scale_by(q_scale);
          for (float& x : bs) x *= q_scale;
        }
        L.qkv_bias.insert(L.qkv_bias.end(), bs.begin(), bs.end());
      }
      const LinearFormat qkv_format = lp.format(LinearOp::kQkv);
      L.q = convert(qkv[0], qkv_format);
      StoredLinear kv = stack_rows(std::move(qkv[1]), std::move(qkv[2]));
      kv.name = prefix + p + "attention.self.key/value.weight";
      L.kv = convert(kv, qkv_format);
      L.attn_out = convert(stored(p + "attention.output.dense.weight", d, d), lp.format(LinearOp::kAttnOut));
      L.attn_out_bias = load(p + "attention.output.dense.bias", {d});
      L.ln1_gamma = load(p + "attention.output.LayerNorm.weight", {d});
      L.ln1_beta = load(p + "attention.output.LayerNorm.bias", {d});
      L.ffn1 = convert(stored(p + "intermediate.dense.weight", ff, d), lp.format(LinearOp::kFfnIn));
      L.ffn1_bias = load(p + "intermediate.dense.bias", {ff});
      L.ffn2 = convert(stored(p + "output.dense.weight", d, ff), lp.format(LinearOp::kFfnOut));
      L.ffn2_bias = load(p + "output.dense.bias", {d});
      L.ln2_gamma = load(p + "output.LayerNorm.weight", {d});
      L.ln2_beta = load(p + "output.LayerNorm.bias", {d});
      w.layers.push_back(std::move(L));
    }
    return w;
  }
};

}  // namespace stile
