#pragma once
// Which head classifies a request: one head for every plan (set_head), or a head per submodel
// shape from a heads file (set_heads; a request is classified by the head of its plan's shape, and
// has no label when its plan has uneven widths or a shape the file lacks). Per-shape heads take
// precedence when both are set. Not thread-safe: the engine calls it under its lock.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/model/submodel.hpp"

namespace stile {

struct Classification {
  std::vector<float> logits;         // [classes]
  std::optional<std::size_t> label;  // argmax of the logits
  std::string head;                  // the heads file's key of the head used ("" for set_head's)
};

class Classifier {
 public:
  bool empty() const noexcept { return !head_ && !heads_; }
  const HeadsFile* heads() const noexcept { return heads_ ? &*heads_ : nullptr; }

  // @pre head.check(hidden) passed.
  void set_head(LinearHead head) { head_ = std::move(head); }
  // @pre heads passed check_heads.
  void set_heads(HeadsFile heads) { heads_ = std::move(heads); }

  // Checks `heads` against a store of `layers` x `shards` with embeddings of `hidden`, whose
  // submodels keep the shards `ranking` ranks first (empty: shard order): each head's shape must
  // keep the same shards in every layer, or its head was trained on another submodel.
  static void check_heads(const HeadsFile& heads, std::size_t layers, std::size_t shards, std::size_t hidden,
                          const ShardRanking& ranking) {
    require(heads.num_layers == layers && heads.shards_per_layer == shards,
            concat("engine: the heads are for a ", heads.num_layers, " x ", heads.shards_per_layer,
                   " store, this one is ", layers, " x ", shards));
    for (const auto& [key, h] : heads.heads) {
      h.head.check(hidden);
      std::size_t n = 0, m = 0;
      if (!parse_shape_key(key, n, m) || m == shards) continue;  // whole layers: nothing was chosen
      for (std::size_t l = 0; l < n; ++l) {
        require(top_shards(h.ranking, l, m) == top_shards(ranking, l, m),
                concat("engine: head \"", key, "\" keeps other shards of layer ", l,
                       " than the engine's importance ranking (train the heads with the same importance file)"));
      }
    }
  }

  // The class of `embedding` by the head for `plan` (nothing when there is none).
  Classification classify(const SubmodelPlan& plan, std::span<const float> embedding) const {
    Classification out;
    const LinearHead* head = head_ ? &*head_ : nullptr;
    if (heads_) {
      const StoredHead* stored = heads_->find_for(plan, &out.head);
      head = stored ? &stored->head : nullptr;
    }
    if (head) {
      const std::vector<double> logits = head->logits(embedding);
      out.logits.assign(logits.begin(), logits.end());
      out.label = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    return out;
  }

  // The m shards a ranking keeps in layer l, sorted (empty ranking: 0..m-1).
  static std::vector<std::size_t> top_shards(const ShardRanking& ranking, std::size_t l, std::size_t m) {
    std::vector<std::size_t> top;
    for (std::size_t r = 0; r < m; ++r) top.push_back(ranking.empty() ? r : ranking[l][r]);
    std::sort(top.begin(), top.end());
    return top;
  }

 private:
  std::optional<LinearHead> head_;
  std::optional<HeadsFile> heads_;
};

}  // namespace stile
