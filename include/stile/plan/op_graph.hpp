#pragma once
// The operator graph of a BERT encoder on one sequence of `tokens` tokens: what the mapping search
// (plan/mapping_ga.hpp, plan/precision_search.hpp) places on processors and gives a number format.
//
//   embedding -> per layer: qkv -> head 0 .. head h-1 (parallel branches) -> attn_out (+ residual)
//                -> ln1 -> ffn_in (+ GELU) -> ffn_out (+ residual) -> ln2
//             -> pooling -> head (classifier)
//
// Nodes are in topological order (every predecessor has a smaller index). Each node records its
// FLOPs and the fp32 activation bytes it reads and writes; each edge the bytes the consumer reads
// from that producer (what a transfer between processors moves). The counting convention (the
// tests check it against hand counts):
//   a multiply-add is 2 FLOPs; a bias, residual or scale is 1 FLOP per element;
//   GELU kGeluFlops, LayerNorm kLayerNormFlops per element; softmax kSoftmaxFlops per score;
//   the embedding's word + position + type sum is 2 FLOPs per element, then a LayerNorm;
//   mean pooling 1 FLOP per element read and one division per output; the classifier a linear.
// Activations are fp32 (4 bytes) between nodes whatever the node's number format: the formats
// quantize inside an operator (ops/linear.hpp), so what crosses an edge is float rows.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/error.hpp"

namespace stile {

enum class OpNodeKind : std::uint8_t {
  kEmbedding,
  kQkv,
  kAttentionHead,
  kAttnOut,
  kLayerNorm,
  kFfnIn,
  kFfnOut,
  kPooling,
  kClassifier,
  kCount
};
inline constexpr std::size_t kOpNodeKinds = static_cast<std::size_t>(OpNodeKind::kCount);

// A node's number format. What each means per node kind (ops/precision.hpp's formats):
//   fp32     everything fp32 (exact GELU);
//   fp16     fp16 weights, fp32 accumulate (linear nodes only);
//   int8     int8 linear layer (erf-approximated GELU fused for ffn_in), int8 LayerNorm;
//   integer  I-BERT's integer-only operator: integer GELU after an int8 ffn_in, integer softmax
//            (attention heads), integer LayerNorm (also the embedding's).
enum class NumberFormat : std::uint8_t { kF32, kF16, kInt8, kInteger, kCount };
inline constexpr std::size_t kNumberFormats = static_cast<std::size_t>(NumberFormat::kCount);

inline const char* to_string(OpNodeKind k) {
  constexpr const char* names[kOpNodeKinds] = {"embedding", "qkv",    "attention_head", "attn_out", "layer_norm",
                                               "ffn_in",    "ffn_out", "pooling",       "classifier"};
  return names[static_cast<std::size_t>(k)];
}
inline const char* to_string(NumberFormat f) {
  constexpr const char* names[kNumberFormats] = {"fp32", "fp16", "int8", "integer"};
  return names[static_cast<std::size_t>(f)];
}
// The kind or format named `name`; false when there is none.
inline bool parse_op_node_kind(std::string_view name, OpNodeKind& out) {
  for (std::size_t k = 0; k < kOpNodeKinds; ++k) {
    if (name == to_string(static_cast<OpNodeKind>(k))) return out = static_cast<OpNodeKind>(k), true;
  }
  return false;
}
inline bool parse_number_format(std::string_view name, NumberFormat& out) {
  for (std::size_t f = 0; f < kNumberFormats; ++f) {
    if (name == to_string(static_cast<NumberFormat>(f))) return out = static_cast<NumberFormat>(f), true;
  }
  return false;
}

// Whether a node kind is a linear layer (a GEMM over weights: its format is its weights').
inline bool is_linear(OpNodeKind k) {
  return k == OpNodeKind::kQkv || k == OpNodeKind::kAttnOut || k == OpNodeKind::kFfnIn || k == OpNodeKind::kFfnOut;
}

// The formats a node kind can run in (first: fp32, the reference).
inline std::vector<NumberFormat> formats_of(OpNodeKind k) {
  using F = NumberFormat;
  switch (k) {
    case OpNodeKind::kQkv:
    case OpNodeKind::kAttnOut:
    case OpNodeKind::kFfnOut: return {F::kF32, F::kF16, F::kInt8};
    case OpNodeKind::kFfnIn: return {F::kF32, F::kF16, F::kInt8, F::kInteger};
    case OpNodeKind::kAttentionHead: return {F::kF32, F::kInteger};
    case OpNodeKind::kEmbedding:
    case OpNodeKind::kLayerNorm: return {F::kF32, F::kInt8, F::kInteger};
    default: return {F::kF32};
  }
}
inline bool has_format(OpNodeKind k, NumberFormat f) {
  for (NumberFormat g : formats_of(k)) {
    if (g == f) return true;
  }
  return false;
}

inline constexpr double kGeluFlops = 8;       // erf or tanh approximation, per element
inline constexpr double kLayerNormFlops = 8;  // mean 1, variance 3, normalize 2, affine 2, per element
inline constexpr double kSoftmaxFlops = 5;    // max, subtract, exp, sum, divide, per score

struct OpEdge {
  std::size_t from = 0;    // producer's node index
  std::size_t bytes = 0;   // bytes the consumer reads from it
};

struct OpNode {
  OpNodeKind kind = OpNodeKind::kEmbedding;
  std::string name;                     // "embedding", "layer2.head5", "layer0.ln1", ...
  std::size_t layer = kNoLayer;         // encoder layer, kNoLayer outside them
  std::size_t slot = 0;                 // position within its layer: identical layers have the same slots
  double flops = 0;
  std::size_t bytes_in = 0, bytes_out = 0;  // fp32 activations read (all inputs) and written
  std::size_t weight_params = 0;            // weights and biases it reads (parameters)
  std::vector<OpEdge> inputs;               // predecessors, smaller indices
  std::size_t branch_group = kNoGroup;      // nodes of one group are parallel branches
  std::size_t parallelism = 1;              // the size of its branch group (1: sequential)

  static constexpr std::size_t kNoLayer = static_cast<std::size_t>(-1);
  static constexpr std::size_t kNoGroup = static_cast<std::size_t>(-1);
};

// The shape a graph is built for (and a latency profile measured for).
struct OpGraphShape {
  std::size_t layers = 0, hidden = 0, heads = 0, ffn = 0, tokens = 0, classes = 2;
  bool operator==(const OpGraphShape&) const = default;
};

struct OpGraph {
  OpGraphShape shape;
  std::vector<OpNode> nodes;
  std::size_t groups = 0;                            // branch groups
  std::vector<std::vector<std::size_t>> layer_nodes;  // [layer]: its nodes in slot order

  std::size_t size() const noexcept { return nodes.size(); }
  double total_flops() const {
    double f = 0;
    for (const OpNode& n : nodes) f += n.flops;
    return f;
  }
  // Checks what the emulator and the searches rely on: inputs point backwards, branch groups and
  // layer lists are consistent. Hand-made graphs (tests) go through it too.
  void check() const {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      for (const OpEdge& e : nodes[i].inputs) {
        require(e.from < i, "op graph: node " + nodes[i].name + " reads a node that is not before it");
      }
      require(nodes[i].branch_group == OpNode::kNoGroup || nodes[i].branch_group < groups,
              "op graph: node " + nodes[i].name + " has a branch group out of range");
    }
    for (const auto& l : layer_nodes) {
      require(l.size() == layer_nodes.front().size(), "op graph: layers of different node counts");
      for (std::size_t s = 0; s < l.size(); ++s) {
        require(l[s] < nodes.size() && nodes[l[s]].slot == s, "op graph: layer node list out of order");
      }
    }
  }
};

namespace op_graph_detail {
inline std::size_t add(OpGraph& g, OpNode n) {
  g.nodes.push_back(std::move(n));
  return g.nodes.size() - 1;
}
}  // namespace op_graph_detail

// The graph of a BERT of `s.layers` layers on one sequence of `s.tokens` tokens. Every dimension
// must be >= 1 and hidden a multiple of heads (stile::Error otherwise).
inline OpGraph bert_op_graph(const OpGraphShape& s) {
  require(s.layers >= 1 && s.hidden >= 1 && s.heads >= 1 && s.ffn >= 1 && s.tokens >= 1 && s.classes >= 1,
          "op graph: every dimension must be >= 1");
  require(s.hidden % s.heads == 0, "op graph: hidden must be a multiple of heads");
  using op_graph_detail::add;
  constexpr std::size_t f4 = sizeof(float);
  const double t = double(s.tokens), d = double(s.hidden);
  const std::size_t hd = s.hidden / s.heads;
  const std::size_t row = s.tokens * s.hidden * f4;  // one [tokens x hidden] activation
  OpGraph g;
  g.shape = s;

  OpNode emb;
  emb.kind = OpNodeKind::kEmbedding;
  emb.name = "embedding";
  emb.flops = t * d * (2 + kLayerNormFlops);
  emb.bytes_in = s.tokens * 3 * s.hidden * f4;  // word, position and type rows gathered
  emb.bytes_out = row;
  emb.weight_params = 2 * s.hidden;  // the LayerNorm's (the tables are read, counted in bytes_in)
  std::size_t prev = add(g, emb);

  // A linear node: [tokens x in] -> [tokens x out], bias, and a residual of [tokens x out] when set.
  auto linear = [&](OpNodeKind kind, std::string name, std::size_t layer, std::size_t slot, std::size_t in,
                    std::size_t out, std::vector<OpEdge> inputs, bool residual, bool gelu) {
    OpNode n;
    n.kind = kind;
    n.name = std::move(name);
    n.layer = layer;
    n.slot = slot;
    n.flops = t * double(out) * (2 * double(in) + 1 + (residual ? 1 : 0) + (gelu ? kGeluFlops : 0));
    for (const OpEdge& e : inputs) n.bytes_in += e.bytes;
    n.bytes_out = s.tokens * out * f4;
    n.weight_params = in * out + out;
    n.inputs = std::move(inputs);
    return add(g, std::move(n));
  };
  auto layer_norm = [&](std::string name, std::size_t layer, std::size_t slot, std::size_t from) {
    OpNode n;
    n.kind = OpNodeKind::kLayerNorm;
    n.name = std::move(name);
    n.layer = layer;
    n.slot = slot;
    n.flops = t * d * kLayerNormFlops;
    n.bytes_in = row;
    n.bytes_out = row;
    n.weight_params = 2 * s.hidden;
    n.inputs = {{from, row}};
    return add(g, std::move(n));
  };

  for (std::size_t l = 0; l < s.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    std::vector<std::size_t>& ids = g.layer_nodes.emplace_back();
    std::size_t slot = 0;
    const std::size_t block_in = prev;
    ids.push_back(linear(OpNodeKind::kQkv, p + "qkv", l, slot++, s.hidden, 3 * s.hidden, {{block_in, row}}, false,
                         false));
    const std::size_t qkv = ids.back();
    const std::size_t group = g.groups++;
    std::vector<OpEdge> heads_out;
    for (std::size_t h = 0; h < s.heads; ++h) {
      OpNode n;
      n.kind = OpNodeKind::kAttentionHead;
      n.name = p + "head" + std::to_string(h);
      n.layer = l;
      n.slot = slot++;
      // Q K^T (2 t t hd), scale (t t), softmax (kSoftmaxFlops t t), P V (2 t t hd).
      n.flops = t * t * (4 * double(hd) + 1 + kSoftmaxFlops);
      n.bytes_in = s.tokens * 3 * hd * f4;  // its Q, K and V columns
      n.bytes_out = s.tokens * hd * f4;
      n.inputs = {{qkv, n.bytes_in}};
      n.branch_group = group;
      n.parallelism = s.heads;
      ids.push_back(add(g, n));
      heads_out.push_back({ids.back(), s.tokens * hd * f4});
    }
    heads_out.push_back({block_in, row});  // the residual
    ids.push_back(linear(OpNodeKind::kAttnOut, p + "attn_out", l, slot++, s.hidden, s.hidden, heads_out, true, false));
    ids.push_back(layer_norm(p + "ln1", l, slot++, ids.back()));
    const std::size_t ln1 = ids.back();
    ids.push_back(linear(OpNodeKind::kFfnIn, p + "ffn_in", l, slot++, s.hidden, s.ffn, {{ln1, row}}, false, true));
    const std::size_t ffn_in = ids.back();
    ids.push_back(linear(OpNodeKind::kFfnOut, p + "ffn_out", l, slot++, s.ffn, s.hidden,
                         {{ffn_in, s.tokens * s.ffn * f4}, {ln1, row}}, true, false));
    ids.push_back(layer_norm(p + "ln2", l, slot++, ids.back()));
    prev = ids.back();
  }

  OpNode pool;
  pool.kind = OpNodeKind::kPooling;
  pool.name = "pooling";
  pool.flops = t * d + d;
  pool.bytes_in = row;
  pool.bytes_out = s.hidden * f4;
  pool.inputs = {{prev, row}};
  prev = add(g, pool);
  OpNode head;
  head.kind = OpNodeKind::kClassifier;
  head.name = "classifier";
  head.flops = double(s.classes) * (2 * d + 1);
  head.bytes_in = s.hidden * f4;
  head.bytes_out = s.classes * f4;
  head.weight_params = s.classes * s.hidden + s.classes;
  head.inputs = {{prev, s.hidden * f4}};
  add(g, head);
  g.check();
  return g;
}

}  // namespace stile
