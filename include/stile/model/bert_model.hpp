#pragma once
// The BERT-shaped encoder (BERT, DistilBERT, RoBERTa / XLM-R / CamemBERT, ELECTRA, MPNet,
// ModernBERT, DeBERTa-v2/v3: one forward, the family's differences read from its description,
// io/encoder_config.hpp): token ids in, last
// hidden states out, for a batch of sequences of different lengths packed back to back, so no
// work is spent on padding. Pooling helpers turn
// hidden states into sentence embeddings (mean or CLS, then optional L2 normalization).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/core/op_times.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/model/bert_weights.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/model/pooling.hpp"
#include "stile/ops/encoder_layer.hpp"

namespace stile {

class BertModel {
 public:
  // Reads config.json and model.safetensors from model_dir, in `precision` (ops/precision.hpp:
  // precision_preset("int8"), say); stile::Error names a bad file.
  static BertModel load(const std::filesystem::path& model_dir, const ModelPrecision& precision = {}) {
    return BertModel(BertWeights::load(model_dir, precision));
  }
  explicit BertModel(BertWeights weights) : w_(std::move(weights)) {}

  const EncoderConfig& config() const noexcept { return w_.config; }
  const BertWeights& weights() const noexcept { return w_; }

  // Runs the encoder on every sequence of `batch`. Only tokens whose attention_mask is 1 are
  // computed; each mask must be 1...1 0...0 (what a tokenizer's padding makes). `hidden`
  // receives the last hidden state of the real tokens of all sequences, concatenated in order:
  // [sum of real lengths x hidden]. Returns the real length of each sequence. `times`, when set,
  // receives each operator's time (added to what it holds).
  std::vector<std::size_t> encode(std::span<const Encoding> batch, std::vector<float>& hidden,
                                  ThreadPool* pool = nullptr, OpTimes* times = nullptr) const {
    ThreadPool& threads = pool != nullptr ? *pool : default_thread_pool();
    const EncoderConfig& c = w_.config;
    const std::size_t d = c.hidden;
    std::vector<std::size_t> lengths;
    std::vector<std::size_t> offsets{0};
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::size_t len = real_length(batch[i], i);
      lengths.push_back(len);
      offsets.push_back(offsets.back() + len);
    }
    const std::size_t tokens = offsets.back();
    OpTimer timer(times);
    // The embeddings, at their own width (ELECTRA's embedding_size), then projected to hidden.
    const std::size_t e = c.embedding_dim();
    std::vector<float> narrow;
    std::vector<float>& embedded = w_.projects_embeddings() ? narrow : hidden;
    embedded.assign(tokens * e, 0.0f);
    for (std::size_t i = 0; i < batch.size(); ++i) embed(batch[i], lengths[i], embedded.data() + offsets[i] * e);
    if (tokens == 0) {
      hidden.assign(0, 0.0f);
      return lengths;
    }
    layer_norm_rows(w_.precision.embedding_layer_norm, embedded.data(), tokens, e, e, w_.embed_ln_gamma.data(),
                    w_.embed_ln_beta.data(), c.layer_norm_eps, &threads);
    if (w_.projects_embeddings()) {
      hidden.assign(tokens * d, 0.0f);
      linear(tokens, narrow.data(), e, w_.embeddings_project.view(), hidden.data(), d,
             epilogue::Bias{.bias = w_.embeddings_project_bias.data()}, &threads);
    }
    timer.lap(OpKind::kEmbedding);
    // The position terms, made once for the longest sequence and read by every layer: MPNet's
    // relative position bias, ModernBERT's rotary tables (global and local bases), DeBERTa's
    // relative embedding rows (its projections are the layer's, made at load).
    const std::size_t longest = *std::max_element(lengths.begin(), lengths.end());
    std::vector<float> relative_bias, cos_global, sin_global, cos_local, sin_local;
    AttentionPositions global, local;
    if (!w_.relative_attention_bias.empty()) {
      mpnet_relative_bias(w_.relative_attention_bias.data(), c.num_heads, longest, relative_bias);
      global = {.relative_bias = relative_bias.data(), .span = longest};
    }
    if (c.rotary()) {
      rotary_tables(c.rope_theta_global, c.head_dim(), longest, cos_global, sin_global);
      rotary_tables(c.rope_theta_local, c.head_dim(), longest, cos_local, sin_local);
      global = {.span = longest, .rotary_cos = cos_global.data(), .rotary_sin = sin_global.data()};
      local = {.span = longest, .rotary_cos = cos_local.data(), .rotary_sin = sin_local.data(),
               .window = c.local_attention / 2};
    }
    std::vector<std::int32_t> rel_rows;  // DeBERTa: relative embedding row by query - key
    if (c.disentangled()) {
      deberta_relative_rows(longest, c.relative_span, c.position_buckets, c.max_relative_positions, rel_rows);
      global = {.span = longest,
                .pos_rows = 2 * c.relative_span,
                .pos_ld = d,
                .rel_row = rel_rows.data() + (longest - 1)};
    }
    EncoderWorkspace ws;
    ws.times = times;
    for (std::size_t l = 0; l < w_.layers.size(); ++l) {
      const BertLayerWeights& layer = w_.layers[l];
      LayerView<LinearView> view = layer.view(c);
      view.positions = c.local_layer(l) ? local : global;
      if (!layer.pos_key.empty()) view.positions.pos_key = layer.pos_key.data();
      if (!layer.pos_query.empty()) view.positions.pos_query = layer.pos_query.data();
      encoder_layer(view, c, hidden.data(), offsets, ws, threads);
    }
    if (!w_.final_ln_gamma.empty()) {  // ModernBERT's final_norm
      OpTimer final_timer(times);
      layer_norm_rows(w_.precision.layer(c.num_layers - 1).ops.layer_norm, hidden.data(), tokens, d, d,
                      w_.final_ln_gamma.data(), w_.final_ln_beta.data(), c.layer_norm_eps, &threads);
      final_timer.lap(OpKind::kLayerNorm);
    }
    return lengths;
  }

 private:
  std::size_t real_length(const Encoding& e, std::size_t index) const {
    return checked_sequence_length(e, index, w_.config.max_positions());
  }

  void embed(const Encoding& e, std::size_t len, float* out) const {
    embed_tokens(e, len, w_.config, w_.word_embeddings.data(), w_.position_embeddings.data(),
                 w_.token_type_embeddings.data(), out);
  }

  BertWeights w_;
};

}  // namespace stile
