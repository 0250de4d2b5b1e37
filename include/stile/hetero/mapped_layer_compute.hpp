#pragma once
// An operator-to-processor mapping (plan/mapping_file.hpp) behind the engine's layer-compute
// interface (ops/layer_compute.hpp): each encoder layer the engine hands over (its shard views:
// any m of M shards, each at its own bitwidth) is converted once into the formats the mapping
// gives that layer's linear nodes (hetero/converted_shard_layers.hpp, kept for the next
// requests), and the layer's nodes run on their processors in their formats
// (hetero/mapped_nodes.hpp): the shard-store engine executes a mapping file.
//
//   * A partial layer (m of M shards) runs the mapping's first m head nodes (head node h takes the
//     layer's h-th chosen shard) and its FFN nodes over the m/M of the FFN it has.
//   * The embedding node is not a layer: the engine runs the embedding LayerNorm on its own thread
//     in EngineOptions::embedding_layer_norm (run --mapping sets it to the node's format). Pooling
//     and the classifier are the engine's, after the layers.
//   * A request is one request of the runner: run() enqueues its layer's nodes and returns, so the
//     engine converts the next layer while the processors run this one, and a node waits only for
//     its producers, across layers too; finish() (the engine's, after the last layer) waits for
//     them. A failing call fails the request (naming the processor and the call), and the next
//     request runs.
//   * Memory: the converted layers kept (each linear layer in its node's format), and the layer's
//     Q/K/V, context and FFN rows.
#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/hetero/converted_shard_layers.hpp"
#include "stile/hetero/mapped_nodes.hpp"
#include "stile/ops/layer_compute.hpp"

namespace stile {

class MappedLayerCompute final : public LayerCompute {
 public:
  // The mapping of config c's operator graph over `processors` (kept by the caller, alive while
  // this is); cache_layers: converted layers kept. Throws stile::Error as MappedNodeRunner does.
  MappedLayerCompute(const EncoderConfig& c, OpMapping mapping, std::vector<Processor*> processors,
                     std::size_t cache_layers = 64)
      : runner_(op_graph_of(c), std::move(mapping), std::move(processors)),
        precision_(mapped_weights_precision(runner_.graph(), runner_.mapping().format)),
        layers_(std::max<std::size_t>(cache_layers, c.num_layers)),  // a request's layers stay converted
        views_(c.num_layers, nullptr) {}

  // Bytes of the converted layers kept (ConvertedShardLayers::bytes).
  std::size_t converted_bytes() const noexcept { return layers_.bytes(); }

  void run(const EncoderConfig& config, std::size_t layer, const ShardShape& shape, std::span<const ShardView> shards,
           const LayerResidentView& resident, float* x, std::span<const std::size_t> seq_offsets) override {
    const OpGraph& g = runner_.graph();
    require(layer < g.layer_nodes.size(),
            concat("mapped layer: layer ", layer, " is past the mapping's ", g.layer_nodes.size(), " layers"));
    require(!shards.empty(), "mapped layer: no shards chosen");
    // A layer not after the last one enqueued starts a request (a caller that skipped finish():
    // the previous request is waited for first).
    if (runner_.in_flight() && layer <= last_layer_) runner_.finish();
    const LayerView<LinearView>& v = layers_.get(config, shape, shards, resident, precision_.layer(layer));
    if (!runner_.in_flight()) {
      runner_.begin(seq_offsets.empty() ? 0 : seq_offsets.back(), config.hidden, config.intermediate);
    }
    last_layer_ = layer;
    nodes_.clear();
    for (const std::size_t n : g.layer_nodes[layer]) {
      const OpNode& node = g.nodes[n];
      if (node.kind == OpNodeKind::kAttentionHead && node.slot > v.heads) continue;  // a head not chosen
      nodes_.push_back(n);
    }
    views_[layer] = &v;  // read by enqueue() only (the calls copy the weights' views)
    struct Forget {
      std::vector<const LayerView<LinearView>*>& views;
      std::size_t layer;
      ~Forget() { views[layer] = nullptr; }
    } forget{views_, layer};
    runner_.enqueue(nodes_, {.x = x,
                             .seq_offsets = seq_offsets,
                             .hidden = config.hidden,
                             .views = views_,
                             .layer_norm_eps = config.layer_norm_eps});
  }

  void finish() override { runner_.finish(); }
  double conversion_ms() const override { return layers_.conversion_ms(); }

 private:
  MappedNodeRunner runner_;
  ModelPrecision precision_;  // each layer's linear formats (mapped_weights_precision)
  ConvertedShardLayers layers_;
  std::vector<const LayerView<LinearView>*> views_;  // [layer]: set during its run only
  std::vector<std::size_t> nodes_;
  std::size_t last_layer_ = 0;  // of the request in flight
};

}  // namespace stile
