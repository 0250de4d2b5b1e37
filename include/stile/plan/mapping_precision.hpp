#pragma once
// A mapping's number formats (plan/schedule_emulator.hpp's OpMapping) as the CPU engine's
// ModelPrecision (ops/precision.hpp), which executes a per-layer, per-operator precision today.
//
// What ModelPrecision can express, and so what converts (anything else is a stile::Error naming
// the node): one softmax format per layer (all of a layer's attention heads in one format), one
// LayerNorm format per layer (ln1 and ln2 alike), the embedding's LayerNorm, and a format per
// linear node. Processors are not part of it: running nodes on different processors needs the
// processor runtime (hetero/), so only formats convert here.
//   node format -> ModelPrecision
//   qkv, attn_out, ffn_out: fp32 / fp16 / int8 -> that LinearFormat
//   ffn_in: fp32 -> fp32 + exact GELU, fp16 -> fp16 + exact GELU, int8 -> int8 + erf-approximated
//           GELU (fused), integer -> int8 + I-BERT's integer GELU
//   attention heads: fp32 / integer softmax; LayerNorms and embedding: fp32 / int8 / integer
#include <cstddef>
#include <string>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/ops/precision.hpp"
#include "stile/plan/op_graph.hpp"

namespace stile {

namespace mapping_precision_detail {
inline NormFormat norm(NumberFormat f) {
  return f == NumberFormat::kInt8 ? NormFormat::kInt8 : f == NumberFormat::kInteger ? NormFormat::kInteger
                                                                                     : NormFormat::kF32;
}
inline LinearFormat linear(NumberFormat f) {
  return f == NumberFormat::kF16 ? LinearFormat::kF16 : f == NumberFormat::kF32 ? LinearFormat::kF32
                                                                               : LinearFormat::kInt8;
}
}  // namespace mapping_precision_detail

// The LinearFormat of a linear node's format (int8 and integer: int8 weights), and the NormFormat
// of a LayerNorm's (the table at the top).
inline LinearFormat linear_format_of(NumberFormat f) { return mapping_precision_detail::linear(f); }
inline NormFormat norm_format_of(NumberFormat f) { return mapping_precision_detail::norm(f); }

// Whether ModelPrecision can express `formats` (the rule at the top); `why` gets the first reason
// it cannot.
inline bool expressible_as_model_precision(const OpGraph& g, const std::vector<NumberFormat>& formats,
                                           std::string* why = nullptr) {
  require(formats.size() == g.size(), "mapping precision: one format per node expected");
  for (std::size_t n = 0; n < g.size(); ++n) {
    const OpNode& node = g.nodes[n];
    if (!has_format(node.kind, formats[n])) {
      if (why) *why = node.name + " has no " + to_string(formats[n]) + " format";
      return false;
    }
  }
  for (const auto& layer : g.layer_nodes) {
    NumberFormat head{}, ln{};
    bool have_head = false, have_ln = false;
    for (const std::size_t n : layer) {
      const OpNode& node = g.nodes[n];
      if (node.kind == OpNodeKind::kAttentionHead) {
        if (have_head && formats[n] != head) {
          if (why) *why = node.name + ": the heads of one layer must share a format (one softmax per layer)";
          return false;
        }
        head = formats[n], have_head = true;
      } else if (node.kind == OpNodeKind::kLayerNorm) {
        if (have_ln && formats[n] != ln) {
          if (why) *why = node.name + ": both LayerNorms of a layer must share a format";
          return false;
        }
        ln = formats[n], have_ln = true;
      }
    }
  }
  return true;
}

// The ModelPrecision of `formats` (Error when not expressible_as_model_precision).
inline ModelPrecision to_model_precision(const OpGraph& g, const std::vector<NumberFormat>& formats) {
  using namespace mapping_precision_detail;
  std::string why;
  if (!expressible_as_model_precision(g, formats, &why)) throw Error("mapping precision: " + why);
  ModelPrecision p;
  p.layers.assign(g.layer_nodes.size(), LayerPrecision{});
  for (std::size_t n = 0; n < g.size(); ++n) {
    const OpNode& node = g.nodes[n];
    const NumberFormat f = formats[n];
    if (node.kind == OpNodeKind::kEmbedding) {
      p.embedding_layer_norm = norm(f);
      continue;
    }
    if (node.layer == OpNode::kNoLayer) continue;
    LayerPrecision& lp = p.layers[node.layer];
    switch (node.kind) {
      case OpNodeKind::kQkv: lp.linear[static_cast<std::size_t>(LinearOp::kQkv)] = linear(f); break;
      case OpNodeKind::kAttnOut: lp.linear[static_cast<std::size_t>(LinearOp::kAttnOut)] = linear(f); break;
      case OpNodeKind::kFfnOut: lp.linear[static_cast<std::size_t>(LinearOp::kFfnOut)] = linear(f); break;
      case OpNodeKind::kFfnIn:
        lp.linear[static_cast<std::size_t>(LinearOp::kFfnIn)] = linear(f);
        lp.ops.gelu = f == NumberFormat::kInt8      ? GeluFormat::kErfApprox
                      : f == NumberFormat::kInteger ? GeluFormat::kInteger
                                                    : GeluFormat::kExact;
        break;
      case OpNodeKind::kAttentionHead:
        lp.ops.softmax = f == NumberFormat::kInteger ? SoftmaxFormat::kInteger : SoftmaxFormat::kF32;
        break;
      case OpNodeKind::kLayerNorm: lp.ops.layer_norm = norm(f); break;
      default: break;
    }
  }
  return p;
}

// The node formats of a ModelPrecision (its inverse where ModelPrecision has the node's format:
// an fp16 or fp32 ffn_in with a non-exact GELU has no node format and is an Error).
inline std::vector<NumberFormat> formats_of_precision(const OpGraph& g, const ModelPrecision& p) {
  std::vector<NumberFormat> out(g.size(), NumberFormat::kF32);
  auto of_norm = [](NormFormat f) {
    return f == NormFormat::kInt8 ? NumberFormat::kInt8 : f == NormFormat::kInteger ? NumberFormat::kInteger
                                                                                   : NumberFormat::kF32;
  };
  auto of_linear = [](LinearFormat f) {
    return f == LinearFormat::kInt8 ? NumberFormat::kInt8 : f == LinearFormat::kF16 ? NumberFormat::kF16
                                                                                   : NumberFormat::kF32;
  };
  for (std::size_t n = 0; n < g.size(); ++n) {
    const OpNode& node = g.nodes[n];
    if (node.kind == OpNodeKind::kEmbedding) out[n] = of_norm(p.embedding_layer_norm);
    if (node.layer == OpNode::kNoLayer) continue;
    const LayerPrecision& lp = p.layer(node.layer);
    switch (node.kind) {
      case OpNodeKind::kQkv: out[n] = of_linear(lp.format(LinearOp::kQkv)); break;
      case OpNodeKind::kAttnOut: out[n] = of_linear(lp.format(LinearOp::kAttnOut)); break;
      case OpNodeKind::kFfnOut: out[n] = of_linear(lp.format(LinearOp::kFfnOut)); break;
      case OpNodeKind::kFfnIn: {
        const LinearFormat lf = lp.format(LinearOp::kFfnIn);
        const GeluFormat gf = lp.ops.gelu;
        if (lf == LinearFormat::kInt8 && gf == GeluFormat::kErfApprox) out[n] = NumberFormat::kInt8;
        else if (lf == LinearFormat::kInt8 && gf == GeluFormat::kInteger) out[n] = NumberFormat::kInteger;
        else if (lf != LinearFormat::kInt8 && gf == GeluFormat::kExact) out[n] = of_linear(lf);
        else throw Error(std::string("mapping precision: ") + node.name + ": " + to_string(lf) + " with " +
                         to_string(gf) + " GELU has no node format");
        break;
      }
      case OpNodeKind::kAttentionHead:
        out[n] = lp.ops.softmax == SoftmaxFormat::kInteger ? NumberFormat::kInteger : NumberFormat::kF32;
        break;
      case OpNodeKind::kLayerNorm: out[n] = of_norm(lp.ops.layer_norm); break;
      default: break;
    }
  }
  return out;
}

// A random format per node that ModelPrecision can express: each node kind's formats drawn
// uniformly, one draw for all heads of a layer and one for both of its LayerNorms. below(n) is a
// uniform draw from 0..n-1 (the caller's seeded generator).
template <class Below>
std::vector<NumberFormat> random_expressible_formats(const OpGraph& g, Below&& below) {
  std::vector<NumberFormat> out(g.size(), NumberFormat::kF32);
  std::size_t layer = OpNode::kNoLayer;
  NumberFormat head = NumberFormat::kF32, ln = NumberFormat::kF32;
  for (std::size_t n = 0; n < g.size(); ++n) {
    const OpNode& node = g.nodes[n];
    const std::vector<NumberFormat> fs = formats_of(node.kind);
    if (node.layer != layer) {
      layer = node.layer;
      head = formats_of(OpNodeKind::kAttentionHead)[below(formats_of(OpNodeKind::kAttentionHead).size())];
      ln = formats_of(OpNodeKind::kLayerNorm)[below(formats_of(OpNodeKind::kLayerNorm).size())];
    }
    out[n] = node.kind == OpNodeKind::kAttentionHead ? head
             : node.kind == OpNodeKind::kLayerNorm   ? ln
                                                      : fs[below(fs.size())];
  }
  return out;
}

}  // namespace stile
