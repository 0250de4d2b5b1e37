#pragma once
// The weights of a BERT-shaped encoder (BERT, DistilBERT, RoBERTa, ELECTRA, MPNet: io/encoder_config.hpp),
// read from a Hugging Face safetensors checkpoint by its family's tensor names
// (io/checkpoint_names.hpp) and checked against its config: an fp32 (or F16/BF16) checkpoint, or a
// quantized one written by `convert --checkpoint` (docs/quantized_checkpoint.md), whose I8 / F16
// GEMM weights become int8 / fp16 weights without a round trip of their values through fp32 when
// the precision asks for their format (through fp32 when it asks for another:
// model/stored_linear.hpp). Transformed once at load, never per request:
//   * K and V of a layer are stacked into one [2d x d] weight, so one GEMM makes both;
//   * Q's weight and bias are scaled by 1/sqrt(head_dim), so attention needs no separate scale;
//   * every GEMM weight is converted to the format its ModelPrecision names (ops/precision.hpp) and
//     packed into its GEMM's panel layout for the CPU's SIMD target (fp32, fp16 or int8), so no
//     request transposes or converts a weight.
// The word-embedding table (the largest tensor of a small BERT) stays in the memory-mapped file:
// only the rows of a request's tokens are ever touched (an F16 / BF16 table is converted to fp32
// once, at load).
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stile/core/file_error.hpp"
#include "stile/io/checkpoint_names.hpp"
#include "stile/io/encoder_config.hpp"
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
  std::span<const float> word_embeddings;    // [vocab x e], in the mapped file (e: config.embedding_dim())
  std::vector<float> word_embeddings_f32;    // the table converted, when the file holds it as F16 / BF16
  std::vector<float> position_embeddings;    // [max_position_embeddings x e]
  std::vector<float> token_type_embeddings;  // [type_vocab x e]; empty when the family has none
  std::vector<float> embed_ln_gamma, embed_ln_beta;  // [e]
  // ELECTRA's embeddings_project ([d x e], fp32 whatever the precision), when e != d; else empty.
  LinearWeights embeddings_project;
  std::vector<float> embeddings_project_bias;  // [d]
  // MPNet's relative_attention_bias ([buckets x heads], fp32 whatever the precision); else empty.
  std::vector<float> relative_attention_bias;
  std::vector<BertLayerWeights> layers;
  ModelPrecision precision;

  bool projects_embeddings() const noexcept { return !embeddings_project_bias.empty(); }

  // Reads config.json and model.safetensors from model_dir, converting each layer to `precision`
  // (one LayerPrecision per layer, or its uniform one).
  static BertWeights load(const std::filesystem::path& model_dir, const ModelPrecision& precision = {}) {
    EncoderConfig config = read_encoder_config((model_dir / "config.json").string());
    SafetensorsFile file = SafetensorsFile::open(safetensors_checkpoint(model_dir).string());
    return from(std::move(config), std::move(file), precision);
  }

  static BertWeights from(EncoderConfig config, SafetensorsFile file, const ModelPrecision& precision = {}) {
    require(
        precision.layers.empty() || precision.layers.size() == config.num_layers,
        concat("model precision: ", precision.layers.size(), " layer precisions for ", config.num_layers, " layers"));
    BertWeights w{std::move(config), std::move(file), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, precision};
    const EncoderConfig& c = w.config;
    const std::size_t d = c.hidden, ff = c.intermediate, width = c.embedding_dim();
    // The family's tensor names (io/checkpoint_names.hpp); BERT's prefix is "bert." from a
    // BertFor... head, none from BertModel.
    const CheckpointNames names = CheckpointNames::of(c, w.file);
    auto tensor = [&](const std::string& full, std::vector<std::size_t> shape) {
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
      return read_stored_linear(w.file, name, rows, cols);
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
    // An F32 table is read in place; an F16 / BF16 one (a half-precision checkpoint) is converted once.
    if (const std::string word = tensor(names.word, {c.vocab_size, width}); w.file.tensor(word).dtype == DType::F32) {
      w.word_embeddings = w.file.f32_span(word);
    } else {
      w.word_embeddings_f32 = w.file.to_f32(word);
      w.word_embeddings = w.word_embeddings_f32;
    }
    w.position_embeddings = load(names.position, {c.max_position_embeddings, width});
    if (!names.token_type.empty()) w.token_type_embeddings = load(names.token_type, {c.type_vocab_size, width});
    w.embed_ln_gamma = load(names.embed_ln_weight, {width});
    w.embed_ln_beta = load(names.embed_ln_bias, {width});
    if (!names.project_weight.empty()) {
      w.embeddings_project = convert(stored(names.project_weight, d, width), LinearFormat::kF32);
      w.embeddings_project_bias = load(names.project_bias, {d});
    }
    if (!names.relative_attention_bias.empty()) {
      w.relative_attention_bias = load(names.relative_attention_bias, {c.relative_attention_buckets, c.num_heads});
    }
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
    for (std::size_t l = 0; l < c.num_layers; ++l) {
      const LayerTensorNames n = names.layer(l);
      BertLayerWeights L;
      const LayerPrecision& lp = precision.layer(l);
      L.ops = lp.ops;
      std::vector<StoredLinear> qkv;
      L.qkv_bias.reserve(3 * d);
      for (const auto& [weight, bias] : {std::pair{&n.q_weight, &n.q_bias}, std::pair{&n.k_weight, &n.k_bias},
                                         std::pair{&n.v_weight, &n.v_bias}}) {
        qkv.push_back(stored(*weight, d, d));
        std::vector<float> bs = load(*bias, {d});
        if (weight == &n.q_weight) {
          qkv.back().scale_by(q_scale);
          for (float& x : bs) x *= q_scale;
        }
        L.qkv_bias.insert(L.qkv_bias.end(), bs.begin(), bs.end());
      }
      const LinearFormat qkv_format = lp.format(LinearOp::kQkv);
      L.q = convert(qkv[0], qkv_format);
      StoredLinear kv = stack_rows(std::move(qkv[1]), std::move(qkv[2]));
      kv.name = n.kv_weight;
      L.kv = convert(kv, qkv_format);
      L.attn_out = convert(stored(n.attn_out_weight, d, d), lp.format(LinearOp::kAttnOut));
      L.attn_out_bias = load(n.attn_out_bias, {d});
      L.ln1_gamma = load(n.ln1_weight, {d});
      L.ln1_beta = load(n.ln1_bias, {d});
      L.ffn1 = convert(stored(n.ffn_in_weight, ff, d), lp.format(LinearOp::kFfnIn));
      L.ffn1_bias = load(n.ffn_in_bias, {ff});
      L.ffn2 = convert(stored(n.ffn_out_weight, d, ff), lp.format(LinearOp::kFfnOut));
      L.ffn2_bias = load(n.ffn_out_bias, {d});
      L.ln2_gamma = load(n.ln2_weight, {d});
      L.ln2_beta = load(n.ln2_bias, {d});
      w.layers.push_back(std::move(L));
    }
    return w;
  }
};

}  // namespace stile
