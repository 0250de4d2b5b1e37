#pragma once
// A BERT encoder run from a shard store (store/shard_store.hpp): any submodel, given as the shards
// and bitwidth of each shard of each of its layers, computed layer by layer from the quantized
// bytes. Resident: the embedding tables other than the word embeddings, each layer's resident
// block, and the store's metadata; a request reads the word-embedding rows of its own tokens and
// the shard versions of one layer at a time (this is the load-then-compute path; the pipelined
// engine overlaps the reads with compute).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/arena.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/model/store_encoder.hpp"
#include "stile/store/shard_view.hpp"
#include "stile/model/submodel.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/ops/layer_compute.hpp"

namespace stile {

// Throws stile::Error unless `plan` is a submodel of `store`: at most its layers, each layer with
// at least one shard, every shard existing, chosen once, at a bitwidth the store has.
inline void check_submodel_plan(const ShardStore& store, const SubmodelPlan& plan) {
  const std::size_t layers = store.num_layers(), shards = store.shards_per_layer();
  require(plan.layers.size() <= layers,
          "submodel plan: " + std::to_string(plan.layers.size()) + " layers, the model has " + std::to_string(layers));
  for (std::size_t l = 0; l < plan.layers.size(); ++l) {
    const auto& layer = plan.layers[l];
    const std::string where = "submodel plan: layer " + std::to_string(l);
    require(!layer.empty(), where + " has no shards");
    std::vector<bool> seen(shards, false);
    for (const ShardChoice& s : layer) {
      require(s.shard < shards, where + ": shard " + std::to_string(s.shard) + " does not exist (" +
                                    std::to_string(shards) + " shards per layer)");
      require(!seen[s.shard], where + ": shard " + std::to_string(s.shard) + " is chosen twice");
      seen[s.shard] = true;
      require(store.has_bits(s.bits), where + ": shard " + std::to_string(s.shard) + " at " + std::to_string(s.bits) +
                                          " bits is not in the store");
    }
  }
}

// How to run a request: threads, and the layer operators' tiles (untiled by default).
struct EncodeOptions {
  ThreadPool* pool = nullptr;                // null: the default pool
  LayerTiles tiles{};                        // {0, 0}: the untiled layer; else the tiled one (ops/tiled_layer.hpp)
  Arena* arena = nullptr;                    // the tiled layer's working memory (null: one per call)
  OpFormats ops{};                           // LayerNorm, GELU, softmax formats
  LinearFormat linear = LinearFormat::kF32;  // the linear layers' (ops/sharded_layer.hpp)
};

class ShardedBert {
 public:
  static ShardedBert open(const std::filesystem::path& store_path) { return ShardedBert(ShardStore::open(store_path)); }

  explicit ShardedBert(ShardStore store) : store_(std::move(store)), residents_(store_) {}

  const EncoderConfig& config() const noexcept { return store_.config(); }
  const ShardStore& store() const noexcept { return store_; }
  std::size_t shards_per_layer() const noexcept { return store_.shards_per_layer(); }

  // Runs the submodel `plan` on every sequence of `batch` (see BertModel::encode: the hidden
  // states of the real tokens of all sequences, concatenated; returns the real lengths).
  std::vector<std::size_t> encode(std::span<const Encoding> batch, std::vector<float>& hidden, const SubmodelPlan& plan,
                                  const EncodeOptions& options = {}) const {
    ThreadPool& threads = options.pool != nullptr ? *options.pool : default_thread_pool();
    const EncoderConfig& c = config();
    check_submodel_plan(store_, plan);
    const TokenBatch packed = pack_tokens(batch, c);
    embed_from_store(store_, residents_, batch, packed, hidden);
    if (packed.tokens() == 0) return packed.lengths;
    EncoderWorkspace ws;
    Arena own_arena;
    CpuLayerCompute compute(threads, options.tiles, ws, options.arena != nullptr ? *options.arena : own_arena,
                            options.ops, options.linear);
    for (std::size_t l = 0; l < plan.layers.size(); ++l) {
      // The layer's shard versions are read, used and released: one layer's shards in memory.
      std::vector<ShardBuffer> buffers;
      std::vector<ShardView> views;
      for (const ShardChoice& choice : plan.layers[l]) {
        buffers.push_back(store_.read_shard(l, choice.shard, choice.bits));
        views.push_back(buffers.back().view());
      }
      compute.run(c, l, store_.shard_shape(), views, residents_.layer(l), hidden.data(), packed.offsets);
    }
    return packed.lengths;
  }

 private:
  ShardStore store_;
  StoreResidents residents_;
};

}  // namespace stile
