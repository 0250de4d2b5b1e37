#pragma once
// Nodes of a BERT's operator graph (plan/op_graph.hpp) executed where an operator-to-processor
// mapping says (plan/schedule_emulator.hpp's OpMapping): every node on its processor, in its
// number format, as processor calls (hetero/processor.hpp). The mapped forward runs a whole
// request's nodes through it (hetero/mapped_forward.hpp), the engine's mapped layer one layer's
// (hetero/mapped_layer_compute.hpp).
//
//   * A request: begin(), then enqueue() its nodes in one or more batches, in graph (topological)
//     order, then finish(), which sleeps until every queue is done (run() is the three at once).
//     enqueue() returns at once: the engine enqueues a layer and converts the next meanwhile.
//   * Dataflow: a node that reads a node of another processor enqueued earlier in the request is
//     preceded on its queue by a WaitCall on the producer's event, which the producer's queue
//     signals after it: each node waits for its producers only, and parallel branches (attention
//     heads) on different processors run at the same time. A processor already synchronised with a
//     later node of that producer's queue does not wait again (queues are in order). Inputs from
//     nodes of an earlier request are complete.
//   * Memory: activations live in host memory shared by all processors ([tokens x d] hidden rows
//     updated in place; Q/K/V, context and FFN rows here, sized by begin()): between
//     CPU clusters a transfer is the event's hand-off and the consumer's cache misses, never a
//     copy. An OpenCL device copies its inputs in and its outputs back on each call.
//   * Widths: each layer's from its view (LayerView<LinearView>), so a partial layer (m of M heads,
//     m/M of the FFN) runs as well; the caller leaves out the head nodes past the view's heads.
//   * Failure: a failing call fails its processor's queue; its signals still fire, marked failed,
//     so its consumers fail too instead of reading garbage, and finish() throws the first failure
//     that was not such a consequence (naming the processor and the call) after every queue has
//     stopped. Every processor is usable again for the next request.
//
// One thread drives a runner (not for concurrent callers), and no other user may enqueue on its
// processors during a request. The caller keeps `x`, the views' weights and the offsets alive and
// untouched until finish() returns.
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
#include "stile/io/encoder_config.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/precision.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/schedule_emulator.hpp"

namespace stile {

// The operator graph of config `c` (one sequence of one token: the nodes do not depend on the
// token count).
inline OpGraph op_graph_of(const EncoderConfig& c, std::size_t classes = 2) {
  return bert_op_graph({.layers = c.num_layers,
                        .hidden = c.hidden,
                        .heads = c.num_heads,
                        .ffn = c.intermediate,
                        .tokens = 1,
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

// The embedding LayerNorm's format in `formats` (its node's): where a caller runs the embedding
// outside the runner (the engine: EngineOptions::embedding_layer_norm).
inline NormFormat mapped_embedding_norm(const OpGraph& g, const std::vector<NumberFormat>& formats) {
  require(formats.size() == g.size(), "mapped forward: one format per node expected");
  for (std::size_t n = 0; n < g.size(); ++n) {
    if (g.nodes[n].kind == OpNodeKind::kEmbedding) return norm_format_of(formats[n]);
  }
  return NormFormat::kF32;
}

// What a run() reads and writes besides its own buffers.
struct MappedNodeInputs {
  float* x = nullptr;                        // [tokens x hidden], updated in place
  std::span<const std::size_t> seq_offsets;  // sequences + 1 row offsets; tokens = back()
  std::size_t hidden = 0;
  // views[l]: layer l's weights, formats and widths; needed for the layers of the nodes run.
  std::span<const LayerView<LinearView>* const> views;
  // The embedding node's LayerNorm (needed when it runs).
  const float* embed_gamma = nullptr;
  const float* embed_beta = nullptr;
  float layer_norm_eps = 1e-12f;
};

class MappedNodeRunner {
 public:
  // processors[i]: the mapping's processor i (kept by the caller, alive while this is). Throws
  // stile::Error for a mapping of another graph, a processor index without a processor, a node in
  // a format it or its processor does not have. Pooling and the classifier are the caller's (host
  // work after the request): their processors are not checked.
  MappedNodeRunner(OpGraph graph, OpMapping mapping, std::vector<Processor*> processors)
      : g_(std::move(graph)), m_(std::move(mapping)), procs_(std::move(processors)) {
    require(m_.processor.size() == g_.size() && m_.format.size() == g_.size(),
            concat("mapped forward: the mapping has ", m_.processor.size(), " nodes, the model's graph ", g_.size()));
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      require(procs_[i] != nullptr, concat("mapped forward: processor ", i, " is missing"));
      for (std::size_t j = 0; j < i; ++j) {
        require(procs_[j] != procs_[i], concat("mapped forward: processors ", j, " and ", i, " are the same"));
      }
    }
    std::size_t heads = 0;
    for (std::size_t n = 0; n < g_.size(); ++n) {
      const OpNode& node = g_.nodes[n];
      if (host_only(node.kind)) continue;
      require(m_.processor[n] < procs_.size(), concat("mapped forward: node ", node.name, " is mapped to processor ",
                                                      unsigned(m_.processor[n]), " of ", procs_.size()));
      require(has_format(node.kind, m_.format[n]),
              concat("mapped forward: node ", node.name, " has no ", to_string(m_.format[n]), " format"));
      const Processor& p = *procs_[m_.processor[n]];
      require(!is_linear(node.kind) || p.runs_any_format() || linear_format_of(m_.format[n]) == p.format(),
              concat("mapped forward: node ", node.name, " is mapped to ", to_string(m_.format[n]), " on '", p.name(),
                     "', which runs ", to_string(p.format()), " linear layers only"));
      if (node.kind == OpNodeKind::kAttentionHead) heads = std::max(heads, node.slot);
    }
    signal_.assign(g_.size(), false);
    for (std::size_t n = 0; n < g_.size(); ++n) {
      for (const OpEdge& e : g_.nodes[n].inputs) {
        if (!host_only(g_.nodes[n].kind) && m_.processor[e.from] != m_.processor[n]) signal_[e.from] = true;
      }
    }
    heads_.resize(heads);
    for (std::size_t h = 0; h < heads; ++h) heads_[h] = static_cast<std::uint16_t>(h);
    events_ = std::make_unique<ProcessorEvent[]>(g_.size());
    done_ = std::make_unique<ProcessorEvent[]>(procs_.size());
  }
  MappedNodeRunner(const MappedNodeRunner&) = delete;
  MappedNodeRunner& operator=(const MappedNodeRunner&) = delete;

  const OpGraph& graph() const noexcept { return g_; }
  const OpMapping& mapping() const noexcept { return m_; }

  static bool host_only(OpNodeKind k) { return k == OpNodeKind::kPooling || k == OpNodeKind::kClassifier; }

  // Starts a request over `tokens` rows whose layers are at most `attn_width` (heads x head
  // dimension) and `ffn_width` wide. @pre no request in flight.
  void begin(std::size_t tokens, std::size_t attn_width, std::size_t ffn_width) {
    require(!in_flight_, "mapped forward: a request is in flight (finish() it first)");
    tokens_ = tokens;
    attn_width_ = attn_width;
    ffn_width_ = ffn_width;
    qkv_.resize(tokens * 3 * attn_width);
    ctx_.resize(tokens * attn_width);
    ffn_.resize(tokens * ffn_width);
    ++request_;
    in_request_.assign(g_.size(), false);
    used_.assign(procs_.size(), false);
    synced_.assign(procs_.size() * procs_.size(), 0);
    next_ = 0;
    in_flight_ = true;
  }

  // Enqueues `nodes` (graph indices, ascending and after every node enqueued in this request; no
  // host-only node) on `in` (in.seq_offsets.back() rows, as begin() said) and returns.
  void enqueue(std::span<const std::size_t> nodes, const MappedNodeInputs& in) {
    require(in_flight_, "mapped forward: enqueue() outside a request (begin() first)");
    require(in.seq_offsets.empty() ? tokens_ == 0 : in.seq_offsets.back() == tokens_,
            "mapped forward: the request's rows changed between batches");
    if (tokens_ == 0) return;
    for (const std::size_t n : nodes) {
      require(n < g_.size() && n >= next_, "mapped forward: nodes must be ascending graph indices");
      next_ = n + 1;
      const OpNode& node = g_.nodes[n];
      require(!host_only(node.kind), "mapped forward: node " + node.name + " is the caller's");
      if (node.layer != OpNode::kNoLayer) {
        require(node.layer < in.views.size() && in.views[node.layer] != nullptr,
                concat("mapped forward: node ", node.name, " has no layer view"));
        const LayerView<LinearView>& v = *in.views[node.layer];
        require(v.attn_width() <= attn_width_ && v.ffn_width() <= ffn_width_,
                concat("mapped forward: layer ", node.layer, " is wider than the request began for"));
      }
    }
    // The batch's calls in node order, then handed over: each processor that waits inside its
    // queue gets its whole list at once (so that no processor runs ahead of a driver still
    // enqueueing and waits for a node not handed over yet), then the others' calls in node order.
    for (auto& l : calls_) l.clear();
    calls_.resize(procs_.size());
    order_.clear();
    for (const std::size_t n : nodes) {
      const std::size_t pi = m_.processor[n];
      in_request_[n] = true;
      used_[pi] = true;
      Collect p{this, pi};
      // Per other processor, one wait: for its latest producer of this node (its queue is in order).
      latest_.assign(procs_.size(), 0);
      for (const OpEdge& e : g_.nodes[n].inputs) {
        const std::size_t qi = m_.processor[e.from];
        if (qi != pi && in_request_[e.from]) latest_[qi] = std::max(latest_[qi], e.from + 1);
      }
      for (std::size_t qi = 0; qi < procs_.size(); ++qi) {
        std::size_t& seen = synced_[pi * procs_.size() + qi];
        if (latest_[qi] <= seen) continue;  // none there, or already past it
        p.enqueue(WaitCall{&events_[latest_[qi] - 1], request_, g_.nodes[n].name.c_str()});
        seen = latest_[qi];
      }
      enqueue_node(n, in, p);
      if (signal_[n]) p.enqueue(SignalCall{&events_[n], request_, g_.nodes[n].name.c_str()});
    }
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (procs_[i]->waits_in_queue() && !calls_[i].empty()) procs_[i]->enqueue_batch(calls_[i]);
    }
    std::vector<std::size_t> next(procs_.size(), 0);
    for (const std::size_t i : order_) {
      if (!procs_[i]->waits_in_queue()) procs_[i]->enqueue(calls_[i][next[i]++]);
    }
  }

  bool in_flight() const noexcept { return in_flight_; }

  // Sleeps until every queue of the request is done (no spinning: the processors may need every
  // core), ends the request, and throws its first failure. No request in flight: returns.
  void finish() {
    if (!in_flight_) return;
    in_flight_ = false;
    for (std::size_t i = 0; i < procs_.size(); ++i) {
      if (used_[i]) procs_[i]->enqueue(SignalCall{&done_[i], request_, "request"});
    }
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
        const bool follows =
            std::string_view(e.what()).find("an input from another processor failed") != std::string_view::npos;
        std::exception_ptr& slot = follows ? consequence : root;
        if (!slot) slot = std::current_exception();
      }
    }
    if (root) std::rethrow_exception(root);
    if (consequence) std::rethrow_exception(consequence);
  }

  // begin(), enqueue(), finish(): `nodes` as one request, sized by their layers' views.
  void run(std::span<const std::size_t> nodes, const MappedNodeInputs& in) {
    std::size_t da = 0, ff = 0;
    for (const std::size_t n : nodes) {
      const std::size_t l = n < g_.size() ? g_.nodes[n].layer : OpNode::kNoLayer;
      if (l == OpNode::kNoLayer || l >= in.views.size() || in.views[l] == nullptr) continue;
      da = std::max(da, in.views[l]->attn_width());
      ff = std::max(ff, in.views[l]->ffn_width());
    }
    begin(in.seq_offsets.empty() ? 0 : in.seq_offsets.back(), da, ff);
    try {
      enqueue(nodes, in);
    } catch (...) {
      try {
        finish();  // what was enqueued still runs on `in`: wait for it
      } catch (...) {
      }
      throw;
    }
    finish();
  }

 private:
  // Collects a node's calls for processor `pi` (enqueue_node's target during enqueue()).
  struct Collect {
    MappedNodeRunner* self;
    std::size_t pi;
    void enqueue(const OpCall& c) const {
      self->calls_[pi].push_back(c);
      self->order_.push_back(pi);
    }
  };

  void enqueue_node(std::size_t n, const MappedNodeInputs& in, const Collect& p) {
    const OpNode& node = g_.nodes[n];
    const std::size_t d = in.hidden, T = tokens_;
    float* x = in.x;
    const NumberFormat f = m_.format[n];
    if (node.kind == OpNodeKind::kEmbedding) {
      require(in.embed_gamma != nullptr && in.embed_beta != nullptr, "mapped forward: no embedding LayerNorm given");
      p.enqueue(LayerNormCall{x, 0, T, d, d, in.embed_gamma, in.embed_beta, in.layer_norm_eps, norm_format_of(f)});
      return;
    }
    const LayerView<LinearView>& v = *in.views[node.layer];
    // Q/K/V rows [T x 3da]: Q, then K, then V (the kv weight's rows are K's, then V's).
    const std::size_t da = v.attn_width(), ff = v.ffn_width();
    LinearCall call;
    call.M = T;
    switch (node.kind) {
      case OpNodeKind::kQkv: {
        call.op = "q";
        call.A = x;
        call.lda = d;
        call.w = v.q;
        call.n1 = da;
        call.C = qkv_.data();
        call.ldc = 3 * da;
        call.bias = v.q_bias;
        p.enqueue(call);
        call.op = "kv";
        call.w = v.kv;
        call.n1 = 2 * da;
        call.C = qkv_.data() + da;
        call.bias = v.kv_bias;
        p.enqueue(call);
        return;
      }
      case OpNodeKind::kAttentionHead: {
        require(node.slot <= v.heads,
                concat("mapped forward: node ", node.name, " is past the layer's ", v.heads, " heads"));
        AttentionCall a;
        a.qkv = qkv_.data();
        a.ld_qkv = 3 * da;
        a.seq_offsets = in.seq_offsets;
        a.heads = std::span<const std::uint16_t>(&heads_[node.slot - 1], 1);
        a.heads_total = v.heads;
        a.head_dim = v.head_dim;
        a.ctx = ctx_.data();
        a.ld_ctx = da;
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
        call.lda = attn ? da : ff;
        call.w = attn ? v.attn_out : v.ffn_out;
        call.n1 = d;
        call.C = x;
        call.ldc = d;
        call.epilogue = LinearEpilogue::kBiasResidual;
        call.bias = attn ? v.attn_out_bias : v.ffn_out_bias;
        call.residual = x;
        call.residual_ld = d;
        p.enqueue(call);
        return;
      }
      case OpNodeKind::kLayerNorm: {
        const bool first = g_.nodes[n - 1].kind == OpNodeKind::kAttnOut;  // ln1 follows attn_out
        p.enqueue(LayerNormCall{x, 0, T, d, d, first ? v.ln1_gamma : v.ln2_gamma, first ? v.ln1_beta : v.ln2_beta,
                                in.layer_norm_eps, norm_format_of(f)});
        return;
      }
      case OpNodeKind::kFfnIn: {
        // As encoder_layer: int8 with the erf-approximated GELU fused, integer with I-BERT's GELU
        // after the GEMM (its scale is the whole tensor's), fp32 / fp16 with the exact GELU fused.
        call.op = "ffn_in";
        call.A = x;
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

  OpGraph g_;
  OpMapping m_;
  std::vector<Processor*> procs_;
  std::vector<std::uint16_t> heads_;
  std::unique_ptr<ProcessorEvent[]> events_;                 // one per node: reached by its processor's queue
  std::unique_ptr<ProcessorEvent[]> done_;                   // one per processor: the end of a request
  std::vector<bool> signal_;                                 // node n has a consumer on another processor
  std::size_t tokens_ = 0, attn_width_ = 0, ffn_width_ = 0;  // the request's (begin())
  bool in_flight_ = false;
  std::size_t next_ = 0;                    // 1 + the last node enqueued in the request
  std::vector<bool> in_request_;            // node n was enqueued in the request
  std::vector<bool> used_;                  // processor i runs some node of the request
  std::vector<std::size_t> synced_;         // [p x q]: 1 + the last node of q that p waited for
  std::vector<std::size_t> latest_;         // per processor: 1 + a node's latest producer there
  std::vector<std::vector<OpCall>> calls_;  // per processor: the batch's calls
  std::vector<std::size_t> order_;          // the processor of each call, in node order
  AlignedBuffer<float> qkv_, ctx_, ffn_;
  std::uint32_t request_ = 0;
};

}  // namespace stile
