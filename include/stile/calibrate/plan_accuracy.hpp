#pragma once
// How many labelled sentences one submodel plan classifies correctly: the plan run in memory
// (ShardedBert, the engine's arithmetic), mean-pooled and L2-normalized like all-MiniLM-L6-v2's
// embeddings, then a LinearHead. The accuracy of a plan depends on nothing else, so the
// evaluation tools compute it here and measure latency through the engine separately.
#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/model/sharded_bert.hpp"
#include "stile/model/submodel.hpp"

namespace stile {

// Correct predictions of `head` on `sentences` (labels[i] is sentence i's), `batch` at a time.
inline std::size_t plan_correct(const ShardedBert& bert, std::span<const Encoding> sentences,
                                std::span<const std::size_t> labels, const SubmodelPlan& plan, const LinearHead& head,
                                std::size_t batch = 32) {
  require(sentences.size() == labels.size(), "plan_correct: one label per sentence is needed");
  require(batch > 0, "plan_correct: the batch must hold at least one sentence");
  const std::size_t d = bert.config().hidden;
  std::size_t correct = 0;
  std::vector<float> hidden, e(d);
  for (std::size_t b = 0; b < sentences.size(); b += batch) {
    const std::span<const Encoding> part = sentences.subspan(b, std::min(batch, sentences.size() - b));
    const std::vector<std::size_t> lengths = bert.encode(part, hidden, plan);
    std::size_t at = 0;
    for (std::size_t j = 0; j < part.size(); ++j) {
      pool_tokens(std::span<const float>(hidden).subspan(at * d, lengths[j] * d), lengths[j], d, Pooling::kMean, e);
      l2_normalize(e);
      at += lengths[j];
      correct += head.predict(e) == labels[b + j];
    }
  }
  return correct;
}

}  // namespace stile
