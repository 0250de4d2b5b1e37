#pragma once
// A shard-store BERT run one layer at a time on hidden states the caller keeps, for evaluation
// tools that run many submodels over one corpus:
//  - the importance profile starts each configuration at the layer whose shard changed, from the
//    base configuration's hidden states below it (identical, so not recomputed);
//  - head training pools after every layer of one pass, so one pass over m shards per layer
//    gives the embeddings of every n x m shape.
// The shard versions it uses are read once and kept (all 72 shards of MiniLM at 32 bits are
// ~40 MB), unlike ShardedBert, which reads a layer's shards per request. The arithmetic is
// ShardedBert::encode's (same embedding, same ShardedLayer, untiled), so the results are the same.
//
// Not thread-safe (the shard cache and the workspace are shared); the layers use the given pool.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/model/submodel.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/model/store_encoder.hpp"

namespace stile {

// The hidden states of a batch of sequences between two layers: the real tokens of all
// sequences, packed ([offsets.back() x hidden]).
struct HiddenBatch {
  std::vector<std::size_t> offsets{0};  // sequences + 1 token offsets
  std::vector<float> hidden;

  std::size_t sequences() const noexcept { return offsets.size() - 1; }
  std::size_t tokens() const noexcept { return offsets.back(); }
};

class LayerwiseBert {
 public:
  // Keeps a reference to `store`, which must outlive this.
  explicit LayerwiseBert(const ShardStore& store) : store_(store), residents_(store) {}

  const EncoderConfig& config() const noexcept { return store_.config(); }
  const ShardStore& store() const noexcept { return store_; }

  // The embedding layer's output for `batch` (word + position + type, LayerNorm).
  HiddenBatch embed(std::span<const Encoding> batch) const {
    const EncoderConfig& c = config();
    const TokenBatch packed = pack_tokens(batch, c, /*empty_is_error=*/true, "layerwise");
    HiddenBatch x;
    x.offsets = packed.offsets;
    embed_from_store(store_, residents_, batch, packed, x.hidden);
    return x;
  }

  // Runs layer `layer` from `shards` (each shard once, at a stored bitwidth) on x, in place.
  void run_layer(std::size_t layer, std::span<const ShardChoice> shards, HiddenBatch& x, ThreadPool& pool) {
    require(layer < store_.num_layers(), "layerwise: layer " + std::to_string(layer) + " does not exist");
    require(!shards.empty(), "layerwise: layer " + std::to_string(layer) + " has no shards");
    std::vector<ShardView> views;
    std::vector<bool> seen(store_.shards_per_layer(), false);
    for (const ShardChoice& s : shards) {
      require(s.shard < seen.size() && !seen[s.shard], "layerwise: layer " + std::to_string(layer) + ": shard " +
                                                           std::to_string(s.shard) + " missing or chosen twice");
      seen[s.shard] = true;
      views.push_back(shard(layer, s.shard, s.bits).view());
    }
    if (x.tokens() == 0) return;
    CpuLayerCompute(pool, workspace_)
        .run(config(), layer, store_.shard_shape(), views, residents_.layer(layer), x.hidden.data(), x.offsets);
  }

  // Runs layers first..first+plan.size()-1, layer first + i from plan[i].
  void run_layers(std::size_t first, std::span<const std::vector<ShardChoice>> plan, HiddenBatch& x, ThreadPool& pool) {
    for (std::size_t i = 0; i < plan.size(); ++i) run_layer(first + i, plan[i], x, pool);
  }

  // The shard version, read on first use and kept.
  const ShardBuffer& shard(std::size_t layer, std::size_t shard_id, unsigned bits) {
    const auto key = std::make_tuple(layer, shard_id, bits);
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, store_.read_shard(layer, shard_id, bits)).first;
    return it->second;
  }
  void drop_shards() { cache_.clear(); }

 private:
  const ShardStore& store_;
  StoreResidents residents_;
  std::map<std::tuple<std::size_t, std::size_t, unsigned>, ShardBuffer> cache_;
  EncoderWorkspace workspace_;
};

// The sentence embeddings of x ([sequences x hidden]): mean pooling, then L2 normalization (the
// all-MiniLM-L6-v2 pipeline, as the engine's defaults).
inline std::vector<float> mean_pooled_normalized(const HiddenBatch& x, std::size_t hidden) {
  std::vector<float> out(x.sequences() * hidden);
  for (std::size_t i = 0; i < x.sequences(); ++i) {
    const std::size_t len = x.offsets[i + 1] - x.offsets[i];
    const std::span<float> e(out.data() + i * hidden, hidden);
    pool_tokens(std::span<const float>(x.hidden).subspan(x.offsets[i] * hidden, len * hidden), len, hidden,
                Pooling::kMean, e);
    l2_normalize(e);
  }
  return out;
}

}  // namespace stile
