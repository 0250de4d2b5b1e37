#pragma once
// The weights of a BERT-shaped encoder (BERT, DistilBERT, RoBERTa, ELECTRA, MPNet, ModernBERT,
// DeBERTa-v2: io/encoder_config.hpp),
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
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/rowwise.hpp"
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
  std::vector<float> attn_out_bias, ln1_gamma, ln1_beta;  // [d]; LayerNorm 1 empty: none (pre-norm layer 0)
  LinearWeights ffn1;                                     // [d_ff x d] ([2 d_ff x d] gated)
  std::vector<float> ffn1_bias;                           // [d_ff] ([2 d_ff] gated)
  LinearWeights ffn2;                                     // [d x d_ff]
  std::vector<float> ffn2_bias, ln2_gamma, ln2_beta;      // [d]
  OpFormats ops;                                          // LayerNorm, GELU, softmax
  // DeBERTa: the relative embeddings (LayerNorm'd) through this layer's key projection (c2p) and
  // its pre-scaled query projection (p2c), [2 relative_span x d], fp32; empty when the term is off.
  std::vector<float> pos_key, pos_query;

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
    v.ln1_gamma = ln1_gamma.empty() ? nullptr : ln1_gamma.data();  // none: ModernBERT's layer 0
    v.ln1_beta = ln1_beta.empty() ? nullptr : ln1_beta.data();
    v.ffn_in_bias = ffn1_bias.data();
    v.ffn_out_bias = ffn2_bias.data();
    v.ln2_gamma = ln2_gamma.data();
    v.ln2_beta = ln2_beta.data();
    v.heads = c.num_heads;
    v.head_dim = c.head_dim();
    v.attn_scale = 1.0f;
    v.ops = ops;
    v.pre_norm = c.pre_norm;
    v.gated_ffn = c.gated_ffn;
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
  // ModernBERT's final_norm after the last layer ([d]); else empty.
  std::vector<float> final_ln_gamma, final_ln_beta;
  std::vector<BertLayerWeights> layers;
  ModelPrecision precision;

  bool projects_embeddings() const noexcept { return !embeddings_project_bias.empty(); }

  // For the paths that run BERT's layer and embedding only (the split and mapped models): an error
  // naming what this family adds. `path` prefixes the message, `runner` names the path in it.
  void require_bert_layer(std::string_view path, std::string_view runner) const {
    require(!projects_embeddings(),
            concat(path, ": ", config.model_type, "'s embeddings are projected to hidden_size (",
                   "embedding_size != hidden_size), which ", runner, " does not run (BertModel does)"));
    require(*config.layer_difference() == '\0',
            concat(path, ": ", config.model_type, "'s layer has ", config.layer_difference(), ", which ", runner,
                   " does not run (it runs BERT's layer; BertModel runs ", config.model_type, ")"));
  }

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
    BertWeights w{std::move(config), std::move(file), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, precision};
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
    if (!names.position.empty()) w.position_embeddings = load(names.position, {c.max_position_embeddings, width});
    if (!names.token_type.empty()) w.token_type_embeddings = load(names.token_type, {c.type_vocab_size, width});
    // A tensor the family does not have (ModernBERT's biases: its config says so) is zero: the
    // kernels add it as BERT's, and x + 0 is x.
    auto load_or_zero = [&](const std::string& name, std::size_t n) {
      return name.empty() ? std::vector<float>(n, 0.0f) : load(name, {n});
    };
    w.embed_ln_gamma = load(names.embed_ln_weight, {width});
    w.embed_ln_beta = load_or_zero(names.embed_ln_bias, width);
    if (!names.final_ln_weight.empty()) {
      w.final_ln_gamma = load(names.final_ln_weight, {d});
      w.final_ln_beta = load_or_zero(names.final_ln_bias, d);
    }
    if (!names.project_weight.empty()) {
      w.embeddings_project = convert(stored(names.project_weight, d, width), LinearFormat::kF32);
      w.embeddings_project_bias = load(names.project_bias, {d});
    }
    if (!names.relative_attention_bias.empty()) {
      w.relative_attention_bias = load(names.relative_attention_bias, {c.relative_attention_buckets, c.num_heads});
    }
    // DeBERTa's relative embeddings, LayerNorm'd once (norm_rel_ebd), for every layer's projections.
    std::vector<float> rel;
    const std::size_t rel_rows = 2 * c.relative_span;
    if (!names.rel_embeddings.empty()) {
      rel = load(names.rel_embeddings, {rel_rows, d});
      if (!names.rel_ln_weight.empty()) {
        const std::vector<float> gamma = load(names.rel_ln_weight, {d}), beta = load(names.rel_ln_bias, {d});
        layer_norm_rows(rel.data(), rel_rows, d, d, gamma.data(), beta.data(), c.layer_norm_eps);
      }
    }
    // rows [rel_rows x d] = rel W^T + b, in fp32 whatever the layer's precision.
    auto project_rel = [&](const StoredLinear& weight, const float* bias) {
      std::vector<float> out(rel_rows * d);
      const LinearWeights f32 = convert(weight, LinearFormat::kF32);
      linear(rel_rows, rel.data(), d, f32.view(), out.data(), d, epilogue::Bias{.bias = bias}, &single_thread_pool());
      return out;
    };
    // Q is pre-scaled by the attention's scale: 1/sqrt(head_dim), DeBERTa's 1/sqrt(head_dim x terms).
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim() * (c.disentangled() ? c.score_terms() : 1)));
    const std::size_t ff_in = c.gated_ffn ? 2 * ff : ff;  // GEGLU: input and gate stacked
    for (std::size_t l = 0; l < c.num_layers; ++l) {
      const LayerTensorNames n = names.layer(l);
      BertLayerWeights L;
      const LayerPrecision& lp = precision.layer(l);
      L.ops = lp.ops;
      if (c.gated_ffn && lp.ops.gelu == GeluFormat::kInteger) {
        fail_in_file(w.file.path(), "model_type \"", c.model_type, "\": layer ", l,
                     "'s gated FFN (GEGLU) has no integer-only form, so the integer GELU (the ibert preset) is "
                     "not supported for it (fp32, fp16 and int8 are)");
      }
      std::vector<StoredLinear> qkv;
      if (!n.qkv_weight.empty()) {  // Q, K, V stacked in one tensor (ModernBERT's Wqkv)
        const StoredLinear all = stored(n.qkv_weight, 3 * d, d);
        qkv.push_back(slice_rows(all, 0, d, n.qkv_weight + "[Q]"));
        qkv.push_back(slice_rows(all, d, d, n.qkv_weight + "[K]"));
        qkv.push_back(slice_rows(all, 2 * d, d, n.qkv_weight + "[V]"));
        L.qkv_bias = load_or_zero(n.qkv_bias, 3 * d);
      } else {
        for (const std::string* weight : {&n.q_weight, &n.k_weight, &n.v_weight}) qkv.push_back(stored(*weight, d, d));
        for (const std::string* bias : {&n.q_bias, &n.k_bias, &n.v_bias}) {
          const std::vector<float> bs = load_or_zero(*bias, d);
          L.qkv_bias.insert(L.qkv_bias.end(), bs.begin(), bs.end());
        }
      }
      qkv[0].scale_by(q_scale);
      for (std::size_t i = 0; i < d; ++i) L.qkv_bias[i] *= q_scale;
      if (c.disentangled() && c.c2p) L.pos_key = project_rel(qkv[1], L.qkv_bias.data() + d);
      if (c.disentangled() && c.p2c) L.pos_query = project_rel(qkv[0], L.qkv_bias.data());
      const LinearFormat qkv_format = lp.format(LinearOp::kQkv);
      L.q = convert(qkv[0], qkv_format);
      StoredLinear kv = stack_rows(std::move(qkv[1]), std::move(qkv[2]));
      kv.name = n.kv_weight;
      L.kv = convert(kv, qkv_format);
      L.attn_out = convert(stored(n.attn_out_weight, d, d), lp.format(LinearOp::kAttnOut));
      L.attn_out_bias = load_or_zero(n.attn_out_bias, d);
      if (!n.ln1_weight.empty()) {  // ModernBERT's layer 0 has no attention norm
        L.ln1_gamma = load(n.ln1_weight, {d});
        L.ln1_beta = load_or_zero(n.ln1_bias, d);
      }
      L.ffn1 = convert(stored(n.ffn_in_weight, ff_in, d), lp.format(LinearOp::kFfnIn));
      L.ffn1_bias = load_or_zero(n.ffn_in_bias, ff_in);
      L.ffn2 = convert(stored(n.ffn_out_weight, d, ff), lp.format(LinearOp::kFfnOut));
      L.ffn2_bias = load_or_zero(n.ffn_out_bias, d);
      L.ln2_gamma = load(n.ln2_weight, {d});
      L.ln2_beta = load_or_zero(n.ln2_bias, d);
      w.layers.push_back(std::move(L));
    }
    return w;
  }
};

}  // namespace stile
