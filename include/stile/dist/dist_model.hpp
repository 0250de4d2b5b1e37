#pragma once
// A BERT encoder whose layers run on several devices (dist/make_dist_layer.hpp): the embeddings on
// every rank (they are a lookup), then every layer split by the partition. Its hidden states equal
// BertModel::encode's (model/bert_model.hpp) up to float rounding.
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "stile/core/thread_pool.hpp"
#include "stile/dist/communicator.hpp"
#include "stile/dist/dense_layer.hpp"
#include "stile/dist/make_dist_layer.hpp"
#include "stile/model/bert_weights.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile {

class DistModel {
 public:
  // `weights` (fp32, kept for the embeddings) must outlive the model. Collective.
  DistModel(const BertWeights& weights, const Partition& p, Communicator& comm) : w_(weights) {
    weights.require_bert_layer("dist model", "the split model");
    for (std::size_t l = 0; l < weights.config.num_layers; ++l) {
      const DenseLayer dense = DenseLayer::from_checkpoint(weights.file, weights.config, l);
      layers_.push_back(make_dist_layer(dense, p, comm));
    }
  }

  std::size_t weight_bytes() const {
    std::size_t s = 0;
    for (const auto& l : layers_) s += l->weight_bytes();
    return s;
  }
  void set_trace(DistTrace* t) {
    for (const auto& l : layers_) l->set_trace(t);
  }

  // The input embedding of one sequence (word + position + type, LayerNorm): [len x d] into hidden.
  void embed(const Encoding& e, std::vector<float>& hidden) const {
    const EncoderConfig& c = w_.config;
    const std::size_t len = checked_sequence_length(e, 0, c.max_positions());
    hidden.assign(len * c.hidden, 0.0f);
    embed_tokens(e, len, c, w_.word_embeddings.data(), w_.position_embeddings.data(), w_.token_type_embeddings.data(),
                 hidden.data());
    layer_norm_rows(hidden.data(), len, c.hidden, c.hidden, w_.embed_ln_gamma.data(), w_.embed_ln_beta.data(),
                    c.layer_norm_eps);
  }

  // Every layer over x ([tokens x d], in place). Collective.
  void run_layers(float* x, std::span<const std::size_t> seq_offsets, ThreadPool& pool) {
    for (const auto& l : layers_) l->run(x, seq_offsets, pool);
  }

 private:
  const BertWeights& w_;
  std::vector<std::unique_ptr<DistLayer>> layers_;
};

}  // namespace stile
