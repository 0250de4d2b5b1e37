#pragma once
// Where a layer's compute is issued. The engine, ShardedBert and the layer-wise evaluator run
// every encoder layer through this one interface, so that a layer split between processors (CPU
// and GPU, each on a slice of the output channels) or across devices can take the place of the
// CPU implementation without touching the request stages around it.
#include <cstddef>
#include <span>

#include "stile/core/arena.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/precision.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/store/shard_layout.hpp"
#include "stile/store/shard_view.hpp"

namespace stile {

class LayerCompute {
 public:
  virtual ~LayerCompute() = default;
  // Runs encoder layer `layer` (its index in the model: per-layer choices such as an operator
  // mapping's key on it) in place on x ([seq_offsets.back() x config.hidden]: the packed rows of
  // all sequences; seq_offsets: sequences + 1 row offsets), with the GEMM weights of the m shard
  // versions `shards` (each a head and 1/M of the FFN, shape `shape`) and the layer's resident
  // parameters. @pre shards is not empty; the views and the resident parameters outlive the call.
  // Throws stile::Error on failure; x is then undefined.
  // The layer may still be running when run() returns (a compute that queues layers on other
  // processors): x is complete once finish() returns, and until then the caller leaves x and
  // seq_offsets untouched and calls run() for the request's next layers only.
  virtual void run(const EncoderConfig& config, std::size_t layer, const ShardShape& shape,
                   std::span<const ShardView> shards, const LayerResidentView& resident, float* x,
                   std::span<const std::size_t> seq_offsets) = 0;
  // Waits for every layer run() started; throws the first failure among them. Called after a
  // request's last layer, and before the request's buffers go, whether it failed or not.
  virtual void finish() {}
  // Milliseconds run() has spent, since this was made, converting weights into formats that it
  // keeps for later requests (a mapped or split layer's shard versions converted into its
  // processors' formats: paid once per version, not per request). The engine records each
  // layer's share (LayerTimes::convert_ms) and keeps it out of the compute it compares with the
  // device profile, which times the converted layer.
  virtual double conversion_ms() const { return 0; }
};

// The layer on the CPU thread pool, untiled (tiles {0, 0}: the workspace holds the layer's
// activations) or tiled (the arena holds the tiles: ops/tiled_layer.hpp), with LayerNorm, GELU
// and softmax in the formats `ops` names, and the linear layers in `linear` (kF32: dequantized
// inside the fp32 GEMM; kInt8: decoded to int8, ops/sharded_layer.hpp). Holds references only; the
// caller owns the pool, the workspace and the arena (the engine's working buffer).
class CpuLayerCompute final : public LayerCompute {
 public:
  CpuLayerCompute(ThreadPool& pool, LayerTiles tiles, EncoderWorkspace& workspace, Arena& arena,
                  const OpFormats& ops = {}, LinearFormat linear = LinearFormat::kF32)
      : pool_(pool), tiles_(tiles), workspace_(workspace), arena_(&arena), ops_(ops), linear_(linear) {}
  // The untiled layer only (it needs no arena).
  CpuLayerCompute(ThreadPool& pool, EncoderWorkspace& workspace) : pool_(pool), workspace_(workspace) {}

  void run(const EncoderConfig& config, std::size_t /*layer*/, const ShardShape& shape, std::span<const ShardView> shards,
           const LayerResidentView& resident, float* x, std::span<const std::size_t> seq_offsets) override {
    const ShardedLayer layer(shape, shards, resident, ops_, linear_, &pool_, &int8_buffers_);
    if (tiles_.query == 0) {
      layer.run(config, x, seq_offsets, workspace_, pool_);
    } else {
      layer.run(config, x, seq_offsets, tiles_, *arena_, pool_);
    }
  }

 private:
  ThreadPool& pool_;
  LayerTiles tiles_{};  // {0, 0}: untiled
  EncoderWorkspace& workspace_;
  Arena* arena_ = nullptr;  // set when tiled
  OpFormats ops_{};
  LinearFormat linear_ = LinearFormat::kF32;
  // kInt8: the last layer's int8 weights, whose buffers the next layer decodes into (held between
  // requests: the largest layer's int8 bytes, 1.8 MB for MiniLM, in place of fresh pages per layer).
  ShardedLayer::Int8Buffers int8_buffers_;
};

}  // namespace stile
