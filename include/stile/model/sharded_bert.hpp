#pragma once
// A BERT encoder run from a shard store (io/shard_store.hpp): any submodel, given as the shards
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
#include "stile/store/shard_view.hpp"
#include "stile/model/submodel.hpp"
#include "stile/ops/sharded_layer.hpp"

namespace stile {

// Throws stile::Error unless `plan` is a submodel of `store`: at most its layers, each layer with
// at least one shard, every shard existing, chosen once, at a bitwidth the store has.
inline void check_submodel_plan(const ShardStore& store, const SubmodelPlan& plan) {
  const std::size_t layers = store.num_layers(), shards = store.shards_per_layer();
  require(plan.layers.size() <= layers, "submodel plan: " + std::to_string(plan.layers.size()) +
                                            " layers, the model has " + std::to_string(layers));
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
      require(store.has_bits(s.bits), where + ": shard " + std::to_string(s.shard) + " at " +
                                          std::to_string(s.bits) + " bits is not in the store");
    }
  }
}

// How to run a request: threads, and the layer operators' tiles (untiled by default).
struct EncodeOptions {
  ThreadPool* pool = nullptr;  // null: the default pool
  LayerTiles tiles{};          // {0, 0}: the untiled layer; else the tiled one (ops/tiled_layer.hpp)
  Arena* arena = nullptr;      // the tiled layer's working memory (null: one per call)
};

class ShardedBert {
 public:
  static ShardedBert open(const std::filesystem::path& store_path) { return ShardedBert(ShardStore::open(store_path)); }

  explicit ShardedBert(ShardStore store) : store_(std::move(store)), embeddings_(store_.read_embeddings()) {
    for (std::size_t l = 0; l < config().num_layers; ++l) residents_.push_back(store_.read_resident(l));
  }

  const BertConfig& config() const noexcept { return store_.config(); }
  const ShardStore& store() const noexcept { return store_; }
  std::size_t shards_per_layer() const noexcept { return store_.shards_per_layer(); }

  // Runs the submodel `plan` on every sequence of `batch` (see BertModel::encode: the hidden
  // states of the real tokens of all sequences, concatenated; returns the real lengths).
  std::vector<std::size_t> encode(std::span<const Encoding> batch, std::vector<float>& hidden, const SubmodelPlan& plan,
                                  const EncodeOptions& options = {}) const {
    ThreadPool& threads = options.pool != nullptr ? *options.pool : default_thread_pool();
    const BertConfig& c = config();
    const std::size_t d = c.hidden;
    check_submodel_plan(store_, plan);
    std::vector<std::size_t> lengths, offsets{0};
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::size_t len = checked_sequence_length(batch[i], i, c.max_position_embeddings);
      check_token_ids(batch[i], len, c);
      lengths.push_back(len);
      offsets.push_back(offsets.back() + len);
      ids.insert(ids.end(), batch[i].input_ids.begin(), batch[i].input_ids.begin() + static_cast<std::ptrdiff_t>(len));
    }
    const std::size_t tokens = offsets.back();
    hidden.assign(tokens * d, 0.0f);
    if (tokens == 0) return lengths;
    store_.read_word_rows(ids, hidden.data());
    for (std::size_t i = 0; i < batch.size(); ++i) {
      add_position_and_type(batch[i], lengths[i], c, embeddings_.position.data(), embeddings_.token_type.data(),
                            hidden.data() + offsets[i] * d);
    }
    layer_norm_rows(hidden.data(), tokens, d, d, embeddings_.ln_gamma.data(), embeddings_.ln_beta.data(),
                    c.layer_norm_eps);
    EncoderWorkspace ws;
    Arena own_arena;
    Arena& arena = options.arena != nullptr ? *options.arena : own_arena;
    const ShardShape shape = store_.shard_shape();
    for (std::size_t l = 0; l < plan.layers.size(); ++l) {
      // The layer's shard versions are read, used and released: one layer's shards in memory.
      std::vector<ShardBuffer> buffers;
      std::vector<ShardView> views;
      for (const ShardChoice& choice : plan.layers[l]) {
        buffers.push_back(store_.read_shard(l, choice.shard, choice.bits));
        views.push_back(buffers.back().view());
      }
      const ShardedLayer layer(shape, views, resident_view(residents_[l]));
      if (options.tiles.query == 0) {
        layer.run(c, hidden.data(), offsets, ws, threads);
      } else {
        layer.run(c, hidden.data(), offsets, options.tiles, arena, threads);
      }
    }
    return lengths;
  }

 private:
  ShardStore store_;
  EmbeddingResident embeddings_;
  std::vector<LayerResident> residents_;
};

}  // namespace stile
