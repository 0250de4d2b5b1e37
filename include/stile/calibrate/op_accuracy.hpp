#pragma once
// Fits the additive accuracy model of the precision search (plan/op_accuracy_model.hpp) on
// measured configurations: for each unit of nodes that the CPU engine sets together (the
// embedding; per layer its qkv, its heads (one softmax), attn_out, its two LayerNorms, ffn_in,
// ffn_out) and each format it has besides fp32, the model runs with that unit alone in that format
// and the rest fp32; the measured loss (1 - mean cosine of the sentence embeddings to fp32's on
// calibration rows) is the unit's, shared equally by its nodes. The loss of a configuration is
// then predicted as the sum over its nodes, which validate_op_accuracy_model checks on held-out
// random configurations.
//
// The rows must be calibration rows of SST-2's train.tsv (calibrate/sst2.hpp's split_sst2), never
// dev: dev is only for reporting.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_accuracy_model.hpp"
#include "stile/plan/op_graph.hpp"

namespace stile {

struct AccuracyUnit {
  std::string name;
  OpNodeKind kind{};
  std::vector<std::size_t> nodes;
};

inline std::vector<AccuracyUnit> accuracy_units(const OpGraph& g) {
  std::vector<AccuracyUnit> units;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const OpNode& n = g.nodes[i];
    if (formats_of(n.kind).size() < 2) continue;
    const bool shared = n.kind == OpNodeKind::kAttentionHead || n.kind == OpNodeKind::kLayerNorm;
    if (shared && !units.empty() && units.back().kind == n.kind) {
      units.back().nodes.push_back(i);
      continue;
    }
    if (shared && n.kind == OpNodeKind::kLayerNorm) {
      // ln2 joins its layer's ln1 unit.
      auto it = std::find_if(units.begin(), units.end(), [&](const AccuracyUnit& u) {
        return u.kind == OpNodeKind::kLayerNorm && g.nodes[u.nodes.front()].layer == n.layer;
      });
      if (it != units.end()) {
        it->nodes.push_back(i);
        continue;
      }
    }
    std::string name = n.layer == OpNode::kNoLayer ? n.name
                       : n.kind == OpNodeKind::kAttentionHead
                           ? "layer" + std::to_string(n.layer) + ".heads"
                       : n.kind == OpNodeKind::kLayerNorm ? "layer" + std::to_string(n.layer) + ".layer_norms"
                                                          : n.name;
    units.push_back({std::move(name), n.kind, {i}});
  }
  return units;
}

// 1 - mean cosine of each row of `emb` to the same row of `ref`.
inline double embedding_loss(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& emb) {
  require(ref.size() == emb.size() && !ref.empty(), "embedding loss: the two sets differ in size");
  double s = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) s += cosine_similarity(ref[i], emb[i]);
  return 1.0 - s / double(ref.size());
}

// The measured loss of a format choice: the default model at those formats against fp32 on
// `sentences` (calibration rows), embedded in batches of 32 on `pool`.
class EmbeddingLossMeter {
 public:
  EmbeddingLossMeter(std::filesystem::path model_dir, const OpGraph& g, std::vector<std::string> sentences,
                     ThreadPool& pool)
      : dir_(std::move(model_dir)), g_(g), sentences_(std::move(sentences)), pool_(pool) {
    ref_ = embed(SentenceEncoder::load(dir_));
  }
  double operator()(const std::vector<NumberFormat>& formats) const {
    return embedding_loss(ref_, embed(SentenceEncoder::load(dir_, to_model_precision(g_, formats))));
  }

 private:
  std::vector<std::vector<float>> embed(const SentenceEncoder& e) const {
    std::vector<std::vector<float>> out;
    for (std::size_t b = 0; b < sentences_.size(); b += 32) {
      const std::size_t n = std::min<std::size_t>(32, sentences_.size() - b);
      for (auto& v : e.embed_batch(std::span<const std::string>(sentences_).subspan(b, n), &pool_)) {
        out.push_back(std::move(v));
      }
    }
    return out;
  }
  std::filesystem::path dir_;
  const OpGraph& g_;
  std::vector<std::string> sentences_;
  ThreadPool& pool_;
  std::vector<std::vector<float>> ref_;
};

// The model fitted one unit and format at a time (see the top); measure(formats) returns the
// measured loss. Progress counts the configurations.
inline OpAccuracyModel fit_op_accuracy_model(const OpGraph& g,
                                             const std::function<double(const std::vector<NumberFormat>&)>& measure,
                                             ProgressBar* progress = nullptr) {
  OpAccuracyModel m;
  m.shape = g.shape;
  m.shape.tokens = 0;
  m.loss.assign(g.size(), std::array<double, kNumberFormats>{});
  const std::vector<AccuracyUnit> units = accuracy_units(g);
  std::size_t total = 0, done = 0;
  for (const auto& u : units) total += formats_of(u.kind).size() - 1;
  for (const AccuracyUnit& u : units) {
    for (const NumberFormat f : formats_of(u.kind)) {
      if (f == NumberFormat::kF32) continue;
      std::vector<NumberFormat> formats(g.size(), NumberFormat::kF32);
      for (const std::size_t n : u.nodes) formats[n] = f;
      // A format cannot help (the fp32 model is the reference): a negative measurement is noise.
      const double loss = std::max(0.0, measure(formats));
      for (const std::size_t n : u.nodes) m.loss[n][static_cast<std::size_t>(f)] = loss / double(u.nodes.size());
      if (progress) progress->update(++done, total);
    }
  }
  return m;
}

}  // namespace stile
