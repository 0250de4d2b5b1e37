#pragma once
// A mapping executed on the shard-store engine for a latency measurement: the engine over a
// store's 32-bit shards (the checkpoint's fp32 weights, converted into the mapping's formats by
// hetero/mapped_layer_compute.hpp), every shard held in the preload buffer and every word row in
// the word-row cache after a first request, so that a timed request reads nothing: its wall time
// is the embeddings, the layers and the pooling, as the op latency profile's graph counts them.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <vector>

#include "stile/calibrate/request_cost_profiler.hpp"
#include "stile/engine.hpp"
#include "stile/hetero/mapped_layer_compute.hpp"
#include "stile/store/shard_store.hpp"

namespace stile::bench {

inline std::unique_ptr<Engine> open_mapped_engine(const std::filesystem::path& store, const EncoderConfig& c,
                                                  const OpMapping& m, std::vector<Processor*> procs) {
  EngineOptions options;
  options.threads = 1;  // the engine's own pool runs nothing of a mapped layer
  options.preload_bytes = ShardStore::open(store).file_size();
  options.word_cache_bytes = c.vocab_size * c.hidden * sizeof(float);
  options.embedding_layer_norm = mapped_embedding_norm(op_graph_of(c), m.format);
  auto engine = std::make_unique<Engine>(store, options);
  engine->set_layer_compute(std::make_unique<MappedLayerCompute>(c, m, std::move(procs)));
  return engine;
}

// The median wall time of `repeats` requests of `tokens` tokens over every layer and shard at
// 32 bits, after 3 untimed ones (the first converts and preloads).
inline double mapped_engine_us(Engine& engine, std::size_t tokens, std::size_t repeats) {
  const EncoderConfig& c = engine.store().config();
  const SubmodelPlan plan = SubmodelPlan::uniform(c.num_layers, engine.store().shards_per_layer(), 32);
  const Encoding e = synthetic_encoding(tokens, c.vocab_size);
  std::vector<double> us;
  for (std::size_t r = 0; r < repeats + 3; ++r) {
    const auto a = std::chrono::steady_clock::now();
    engine.run(e, plan);
    if (r >= 3) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace stile::bench
