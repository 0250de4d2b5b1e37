#pragma once
// A BERT forward pass executed as an operator-to-processor mapping says (plan/op_graph.hpp's
// nodes, plan/schedule_emulator.hpp's OpMapping): every node runs on its processor, in its number
// format, as processor calls (hetero/processor.hpp).
//
//   * Dataflow: the driving thread enqueues the whole request at once, in graph (topological)
//     order. A node that reads a node of another processor is preceded on its queue by a WaitCall
//     on the producer's event, which the producer's queue signals after it: each node waits for its
//     producers only, and parallel branches (attention heads) on different processors run at the
//     same time. A processor already synchronised with a later node of that producer's queue does
//     not wait again (queues are in order). The driver then sleeps until every queue is done.
//   * Memory: activations live in host memory shared by all processors ([tokens x d] hidden rows
//     updated in place, [tokens x 3d] Q/K/V, [tokens x d] context, [tokens x d_ff] FFN): between
//     CPU clusters a transfer is the event's hand-off and the consumer's cache misses, never a copy.
//     An OpenCL device copies its inputs in and its outputs back on each call (non-blocking writes
//     and reads on its queue) and waits for events on the driving thread.
//   * Weights: each GEMM weight is held once, in its node's format (converted at load by
//     BertWeights::from with mapped_weights_precision(); shared host memory), and only the
//     node's processor reads it; an OpenCL device converts its nodes' weights on the device at
//     first use. A processor that does not run every format (runs_any_format() false) must be
//     given nodes in its own format (checked at construction).
//   * Host work: the embedding's row gather runs on the driving thread (its LayerNorm on the
//     embedding node's processor); pooling and the classifier, which read the hidden rows after
//     the request, are the caller's (the mapping's processor for them is not used).
//   * Failure: a failing call fails its processor's queue; its signals still fire, marked failed,
//     so its consumers fail too instead of reading garbage, and encode() throws the first failure
//     that was not such a consequence (naming the processor and the call) after every queue has
//     stopped. Every processor is usable again for the next request.
//
// One thread drives a MappedForward (encode() is not for concurrent callers), and no other user
// may enqueue on its processors during a request.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/hetero/processor.hpp"
#include "stile/model/bert_weights.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/schedule_emulator.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile {

// The operator graph of config `c` (one sequence of one token: the nodes do not depend on the
// token count).
inline OpGraph op_graph_of(const BertConfig& c, std::size_t classes = 2) {
  return bert_op_graph(
      {.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate, .tokens = 1,
       .classes = classes});
}

// The ModelPrecision to load a model's weights with for `formats`: each linear layer in its
// node's format (every format combination of linear nodes is one; LayerNorm, GELU and softmax
// formats are the mapped forward's business, per node).
inline ModelPrecision mapped_weights_precision(const OpGraph& g, const std::vector<NumberFormat>& formats) {
  require(formats.size() == g.size(), "mapped forward: one format per node expected");
  ModelPrecision p;
  p.layers.assign(g.layer_nodes.size(), LayerPrecision{});
  for (std::size_t n = 0; n < g.size(); ++n) {
    const OpNode& node = g.nodes[n];
    const LinearFormat f = linear_format_of(formats[n]);
    auto set = [&](LinearOp op) { p.layers.at(node.layer).linear[static_cast<std::size_t>(op)] = f; };
    switch (node.kind) {
      case OpNodeKind::kQkv: set(LinearOp::kQkv); break;
      case OpNodeKind::kAttnOut: set(LinearOp::kAttnOut); break;
      case OpNodeKind::kFfnIn: set(LinearOp::kFfnIn); break;
      case OpNodeKind::kFfnOut: set(LinearOp::kFfnOut); break;
      default: break;
    }
  }
  return p;
}

class MappedForward {
 public:
  // weights: the model, its GEMM weights in the mapping's formats (mapped_weights_precision);
  // processors[i]: the mapping's processor i (kept by the caller, alive while this is). Throws
  // stile::Error for a mapping of another graph, a processor index without a processor, a node in
  // a format its weights or its processor do not have.
  MappedForward(BertWeights weights, OpMapping mapping, std::vector<Processor*> processors)
      : w_(std::move(weights)), g_(op_graph_of(w_.config)), m_(std::move(mapping)), procs_(std::move(processors)) {
    require(m_.processor.size() == g_.size() && m_.format.size() == g_.size(),
            concat("mapped forward: the mapping has ", m_.processor.size(), " nodes, the model's graph ", g_.size()));
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      require(procs_[i] != nullptr, concat("mapped forward: processor ", i, " is missing"));
      for (std::size_t j = 0; j < i; ++j) {
        require(procs_[j] != procs_[i], concat("mapped forward: processors ", j, " and ", i, " are the same"));
      }
    }
    const BertConfig& c = w_.config;
    for (const BertLayerWeights& l : w_.layers) views_.push_back(l.view(c));
    heads_.resize(c.num_heads);
    for (std::size_t h = 0; h < c.num_heads; ++h) heads_[h] = static_cast<std::uint16_t>(h);
    events_ = std::make_unique<ProcessorEvent[]>(g_.size());
    done_ = std::make_unique<ProcessorEvent[]>(procs_.size());
    signal_.assign(g_.size(), false);
    used_.assign(procs_.size(), false);
    for (std::size_t n = 0; n < g_.size(); ++n) {
      const OpNode& node = g_.nodes[n];
      if (host_only(node.kind)) continue;
      require(m_.processor[n] < procs_.size(), concat("mapped forward: node ", node.name, " is mapped to processor ",
                                                      unsigned(m_.processor[n]), " of ", procs_.size()));
      require(has_format(node.kind, m_.format[n]),
              concat("mapped forward: node ", node.name, " has no ", to_string(m_.format[n]), " format"));
      Processor& p = *procs_[m_.processor[n]];
      used_[m_.processor[n]] = true;
      for (const OpEdge& e : node.inputs) {
        if (m_.processor[e.from] != m_.processor[n]) signal_[e.from] = true;
      }
      if (const LinearView* lv = linear_of(n, 0)) {
        const LinearFormat want = linear_format_of(m_.format[n]);
        for (std::size_t part = 0; const LinearView* v = linear_of(n, part); ++part) {
          require(v->format == want, concat("mapped forward: node ", node.name, " is mapped to ", to_string(m_.format[n]),
                                            " but its weights are ", to_string(v->format),
                                            " (load them with mapped_weights_precision)"));
        }
        require(p.runs_any_format() || lv->format == p.format(),
                concat("mapped forward: node ", node.name, " is mapped to ", to_string(m_.format[n]), " on '", p.name(),
                       "', which runs ", to_string(p.format()), " linear layers only"));
      }
    }
    synced_.assign(procs_.size() * procs_.size(), 0);
  }
  MappedForward(const MappedForward&) = delete;
  MappedForward& operator=(const MappedForward&) = delete;

  const BertConfig& config() const noexcept { return w_.config; }
  const OpGraph& graph() const noexcept { return g_; }
  const OpMapping& mapping() const noexcept { return m_; }

  // BertModel::encode's contract: `hidden` receives the last hidden states of the real tokens of
  // every sequence, packed; returns each sequence's real length.
  std::vector<std::size_t> encode(std::span<const Encoding> batch, std::vector<float>& hidden) {
    const BertConfig& c = w_.config;
    const std::size_t d = c.hidden, ff = c.intermediate;
    std::vector<std::size_t> lengths;
    offsets_.assign(1, 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      lengths.push_back(checked_sequence_length(batch[i], i, c.max_position_embeddings));
      offsets_.push_back(offsets_.back() + lengths.back());
    }
    const std::size_t tokens = offsets_.back();
    hidden.assign(tokens * d, 0.0f);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      float* out = hidden.data() + offsets_[i] * d;
      check_token_ids(batch[i], lengths[i], c);
      for (std::size_t t = 0; t < lengths[i]; ++t) {
        std::copy_n(w_.word_embeddings.data() + static_cast<std::size_t>(batch[i].input_ids[t]) * d, d, out + t * d);
      }
      add_position_and_type(batch[i], lengths[i], c, w_.position_embeddings.data(), w_.token_type_embeddings.data(),
                            out);
    }
    if (tokens == 0) return lengths;
    qkv_.resize(tokens * 3 * d);
    ctx_.resize(tokens * d);
    ffn_.resize(tokens * ff);
    x_ = hidden.data();
    tokens_ = tokens;
    ++request_;
    std::fill(synced_.begin(), synced_.end(), 0);
    // The request's calls in node order, then handed over: each processor that waits inside its
    // queue gets its whole list at once (so that no processor runs ahead of a driver still
    // enqueueing and waits for a node not handed over yet), then the others' calls in node order.
    for (auto& l : calls_) l.clear();
    calls_.resize(procs_.size());
    order_.clear();
    for (std::size_t n = 0; n < g_.size(); ++n) {
      if (host_only(g_.nodes[n].kind)) continue;
      const std::size_t pi = m_.processor[n];
      Collect p{this, pi};
      // Per other processor, one wait: for its latest producer of this node (its queue is in order).
      latest_.assign(procs_.size(), 0);
      for (const OpEdge& e : g_.nodes[n].inputs) {
        const std::size_t qi = m_.processor[e.from];
        if (qi != pi) latest_[qi] = std::max(latest_[qi], e.from + 1);
      }
      for (std::size_t qi = 0; qi < procs_.size(); ++qi) {
        std::size_t& seen = synced_[pi * procs_.size() + qi];
        if (latest_[qi] <= seen) continue;  // none there, or already past it
        p.enqueue(WaitCall{&events_[latest_[qi] - 1], request_, g_.nodes[n].name.c_str()});
        seen = latest_[qi];
      }
      enqueue_node(n, p);
      if (signal_[n]) p.enqueue(SignalCall{&events_[n], request_, g_.nodes[n].name.c_str()});
    }
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (used_[i]) calls_[i].push_back(SignalCall{&done_[i], request_, "request"});
      if (procs_[i]->waits_in_queue() && !calls_[i].empty()) procs_[i]->enqueue_batch(calls_[i]);
    }
    std::vector<std::size_t> next(procs_.size(), 0);
    for (const std::size_t i : order_) {
      if (!procs_[i]->waits_in_queue()) procs_[i]->enqueue(calls_[i][next[i]++]);
    }
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (used_[i] && !procs_[i]->waits_in_queue()) procs_[i]->enqueue(calls_[i].back());  // its done signal
    }
    finish();
    return lengths;
  }

 private:
  static bool host_only(OpNodeKind k) { return k == OpNodeKind::kPooling || k == OpNodeKind::kClassifier; }

  // The layer weights of node n (part 0, and part 1: qkv's K/V), or nullptr.
  const LinearView* linear_of(std::size_t n, std::size_t part) {
    const OpNode& node = g_.nodes[n];
    if (node.layer == OpNode::kNoLayer) return nullptr;
    const LayerView<LinearView>& v = views_[node.layer];
    switch (node.kind) {
      case OpNodeKind::kQkv: return part == 0 ? &v.q : part == 1 ? &v.kv : nullptr;
      case OpNodeKind::kAttnOut: return part == 0 ? &v.attn_out : nullptr;
      case OpNodeKind::kFfnIn: return part == 0 ? &v.ffn_in : nullptr;
      case OpNodeKind::kFfnOut: return part == 0 ? &v.ffn_out : nullptr;
      default: return nullptr;
    }
  }

  // Collects a node's calls for processor `pi` (enqueue_node's target during a request).
  struct Collect {
    MappedForward* self;
    std::size_t pi;
    void enqueue(const OpCall& c) const {
      self->calls_[pi].push_back(c);
      self->order_.push_back(pi);
    }
  };

  void enqueue_node(std::size_t n, const Collect& p) {
    const OpNode& node = g_.nodes[n];
    const BertConfig& c = w_.config;
    const std::size_t d = c.hidden, ff = c.intermediate, T = tokens_;
    const NumberFormat f = m_.format[n];
    if (node.kind == OpNodeKind::kEmbedding) {
      p.enqueue(LayerNormCall{x_, 0, T, d, d, w_.embed_ln_gamma.data(), w_.embed_ln_beta.data(), c.layer_norm_eps,
                              norm_format_of(f)});
      return;
    }
    const LayerView<LinearView>& v = views_[node.layer];
    LinearCall call;
    call.M = T;
    switch (node.kind) {
      case OpNodeKind::kQkv: {
        call.op = "q";
        call.A = x_;
        call.lda = d;
        call.w = v.q;
        call.n1 = d;
        call.C = qkv_.data();
        call.ldc = 3 * d;
        call.bias = v.q_bias;
        p.enqueue(call);
        call.op = "kv";
        call.w = v.kv;
        call.n1 = 2 * d;
        call.C = qkv_.data() + d;
        call.bias = v.kv_bias;
        p.enqueue(call);
        return;
      }
      case OpNodeKind::kAttentionHead: {
        AttentionCall a;
        a.qkv = qkv_.data();
        a.ld_qkv = 3 * d;
        a.seq_offsets = offsets_;
        a.heads = std::span<const std::uint16_t>(&heads_[node.slot - 1], 1);
        a.heads_total = v.heads;
        a.head_dim = v.head_dim;
        a.ctx = ctx_.data();
        a.ld_ctx = d;
        a.scale = v.attn_scale;
        a.softmax = f == NumberFormat::kInteger ? SoftmaxFormat::kInteger : SoftmaxFormat::kF32;
        p.enqueue(a);
        return;
      }
      case OpNodeKind::kAttnOut:
      case OpNodeKind::kFfnOut: {
        const bool attn = node.kind == OpNodeKind::kAttnOut;
        call.op = attn ? "attn_out" : "ffn_out";
        call.A = attn ? ctx_.data() : ffn_.data();
        call.lda = attn ? d : ff;
        call.w = attn ? v.attn_out : v.ffn_out;
        call.n1 = d;
        call.C = x_;
        call.ldc = d;
        call.epilogue = LinearEpilogue::kBiasResidual;
        call.bias = attn ? v.attn_out_bias : v.ffn_out_bias;
        call.residual = x_;
        call.residual_ld = d;
        p.enqueue(call);
        return;
      }
      case OpNodeKind::kLayerNorm: {
        const bool first = g_.nodes[n - 1].kind == OpNodeKind::kAttnOut;  // ln1 follows attn_out
        p.enqueue(LayerNormCall{x_, 0, T, d, d, first ? v.ln1_gamma : v.ln2_gamma, first ? v.ln1_beta : v.ln2_beta,
                                c.layer_norm_eps, norm_format_of(f)});
        return;
      }
      case OpNodeKind::kFfnIn: {
        // As encoder_layer: int8 with the erf-approximated GELU fused, integer with I-BERT's GELU
        // after the GEMM (its scale is the whole tensor's), fp32 / fp16 with the exact GELU fused.
        call.op = "ffn_in";
        call.A = x_;
        call.lda = d;
        call.w = v.ffn_in;
        call.n1 = ff;
        call.C = ffn_.data();
        call.ldc = ff;
        call.bias = v.ffn_in_bias;
        const GeluFormat gelu = f == NumberFormat::kInt8      ? GeluFormat::kErfApprox
                                : f == NumberFormat::kInteger ? GeluFormat::kInteger
                                                              : GeluFormat::kExact;
        call.epilogue = gelu == GeluFormat::kInteger ? LinearEpilogue::kBias : LinearEpilogue::kBiasGelu;
        call.gelu = gelu;
        p.enqueue(call);
        if (gelu == GeluFormat::kInteger) p.enqueue(GeluCall{ffn_.data(), T * ff, gelu});
        return;
      }
      default: throw Error("mapped forward: node " + node.name + " has no processor calls");
    }
  }

  // Sleeps until the end of every used queue is reached (no spinning: the processors
  // may need every core), then collects the processors' errors.
  void finish() {
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (!used_[i]) continue;
      for (std::uint32_t now = done_[i].count.load(std::memory_order_acquire); now != request_;
           now = done_[i].count.load(std::memory_order_acquire)) {
        done_[i].count.wait(now, std::memory_order_acquire);
      }
    }
    std::exception_ptr root, consequence;
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (!used_[i]) continue;
      try {
        procs_[i]->wait();
      } catch (const std::exception& e) {
        const bool follows = std::string_view(e.what()).find("an input from another processor failed") !=
                             std::string_view::npos;
        std::exception_ptr& slot = follows ? consequence : root;
        if (!slot) slot = std::current_exception();
      }
    }
    if (root) std::rethrow_exception(root);
    if (consequence) std::rethrow_exception(consequence);
  }

  BertWeights w_;
  OpGraph g_;
  OpMapping m_;
  std::vector<Processor*> procs_;
  std::vector<LayerView<LinearView>> views_;
  std::vector<std::uint16_t> heads_;
  std::unique_ptr<ProcessorEvent[]> events_;  // one per node: reached by its processor's queue
  std::unique_ptr<ProcessorEvent[]> done_;    // one per processor: the end of a request
  std::vector<bool> signal_;                  // node n has a consumer on another processor
  std::vector<bool> used_;                    // processor i runs some node
  std::vector<std::size_t> synced_;           // [p x q]: 1 + the last node of q that p waited for
  std::vector<std::size_t> latest_;           // per processor: 1 + a node's latest producer there
  std::vector<std::size_t> offsets_;
  std::vector<std::vector<OpCall>> calls_;  // per processor: the request's calls
  std::vector<std::size_t> order_;          // the processor of each call, in node order
  AlignedBuffer<float> qkv_, ctx_, ffn_;
  float* x_ = nullptr;
  std::size_t tokens_ = 0;
  std::uint32_t request_ = 0;
};

}  // namespace stile
