#pragma once
// A BERT forward pass executed as an operator-to-processor mapping says (plan/op_graph.hpp's
// nodes, plan/schedule_emulator.hpp's OpMapping): every node runs on its processor, in its number
// format, as processor calls (hetero/processor.hpp). The whole request's nodes are enqueued at
// once and run as hetero/mapped_nodes.hpp describes (dataflow, shared host activations,
// failures: the request that met a failing call fails, naming the processor and the call, and
// the next request runs).
//
//   * Weights: each GEMM weight is held once, in its node's format (converted at load by
//     BertWeights::from with mapped_weights_precision(); shared host memory), and only the
//     node's processor reads it; an OpenCL device converts its nodes' weights on the device at
//     first use. A processor that does not run every format (runs_any_format() false) must be
//     given nodes in its own format (checked at construction).
//   * Host work: the embedding's row gather runs on the driving thread (its LayerNorm on the
//     embedding node's processor); pooling and the classifier, which read the hidden rows after
//     the request, are the caller's (the mapping's processor for them is not used).
//
// One thread drives a MappedForward (encode() is not for concurrent callers), and no other user
// may enqueue on its processors during a request.
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/hetero/mapped_nodes.hpp"
#include "stile/model/bert_weights.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/schedule_emulator.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile {

class MappedForward {
 public:
  // weights: the model, its GEMM weights in the mapping's formats (mapped_weights_precision);
  // processors[i]: the mapping's processor i (kept by the caller, alive while this is). Throws
  // stile::Error for a mapping of another graph, a processor index without a processor, a node in
  // a format its weights or its processor do not have.
  MappedForward(BertWeights weights, OpMapping mapping, std::vector<Processor*> processors)
      : w_(std::move(weights)), run_(op_graph_of(w_.config), std::move(mapping), std::move(processors)) {
    w_.require_bert_layer("mapped forward", "the mapped forward");
    for (const BertLayerWeights& l : w_.layers) views_.push_back(l.view(w_.config));
    for (const LayerView<LinearView>& v : views_) view_ptrs_.push_back(&v);
    const OpGraph& g = run_.graph();
    for (std::size_t n = 0; n < g.size(); ++n) {
      const OpNode& node = g.nodes[n];
      if (MappedNodeRunner::host_only(node.kind)) continue;
      nodes_.push_back(n);
      if (!is_linear(node.kind)) continue;
      const LayerView<LinearView>& v = views_.at(node.layer);
      const LinearFormat want = linear_format_of(run_.mapping().format[n]);
      const LinearView* parts[2] = {nullptr, nullptr};
      switch (node.kind) {
        case OpNodeKind::kQkv: parts[0] = &v.q, parts[1] = &v.kv; break;
        case OpNodeKind::kAttnOut: parts[0] = &v.attn_out; break;
        case OpNodeKind::kFfnIn: parts[0] = &v.ffn_in; break;
        default: parts[0] = &v.ffn_out; break;
      }
      for (const LinearView* lv : parts) {
        if (lv == nullptr) continue;
        require(lv->format == want,
                concat("mapped forward: node ", node.name, " is mapped to ", to_string(run_.mapping().format[n]),
                       " but its weights are ", to_string(lv->format), " (load them with mapped_weights_precision)"));
      }
    }
  }
  MappedForward(const MappedForward&) = delete;
  MappedForward& operator=(const MappedForward&) = delete;

  const EncoderConfig& config() const noexcept { return w_.config; }
  const OpGraph& graph() const noexcept { return run_.graph(); }
  const OpMapping& mapping() const noexcept { return run_.mapping(); }

  // BertModel::encode's contract: `hidden` receives the last hidden states of the real tokens of
  // every sequence, packed; returns each sequence's real length.
  std::vector<std::size_t> encode(std::span<const Encoding> batch, std::vector<float>& hidden) {
    const EncoderConfig& c = w_.config;
    const std::size_t d = c.hidden;
    std::vector<std::size_t> lengths;
    offsets_.assign(1, 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      lengths.push_back(checked_sequence_length(batch[i], i, c.max_positions()));
      offsets_.push_back(offsets_.back() + lengths.back());
    }
    hidden.assign(offsets_.back() * d, 0.0f);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      embed_tokens(batch[i], lengths[i], c, w_.word_embeddings.data(), w_.position_embeddings.data(),
                   w_.token_type_embeddings.data(), hidden.data() + offsets_[i] * d);
    }
    run_.run(nodes_, {.x = hidden.data(),
                      .seq_offsets = offsets_,
                      .hidden = d,
                      .views = view_ptrs_,
                      .embed_gamma = w_.embed_ln_gamma.data(),
                      .embed_beta = w_.embed_ln_beta.data(),
                      .layer_norm_eps = c.layer_norm_eps});
    return lengths;
  }

 private:
  BertWeights w_;
  MappedNodeRunner run_;
  std::vector<LayerView<LinearView>> views_;
  std::vector<const LayerView<LinearView>*> view_ptrs_;
  std::vector<std::size_t> nodes_;  // every node but pooling and the classifier
  std::vector<std::size_t> offsets_;
};

}  // namespace stile
