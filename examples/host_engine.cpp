// host_engine: what a host writes to run stile's elastic engine: open a shard store (made by
// tools/convert), run one request, use its sentence embedding.
//
//   host_engine minilm.stile "a charming and moving film"
#include <cstddef>
#include <cstdio>
#include <exception>

#include "stile/engine.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: host_engine STORE TEXT\n");
    return 2;
  }
  try {
    // Defaults: real storage read through io_uring with O_DIRECT, no preload buffer, and no
    // device profile, so no latency target: every shard at the highest stored bitwidth. With
    // DeviceProfile::load(STORE.profile.json) and set_target_ms, the planner picks the submodel.
    stile::Engine engine(argv[1]);
    const stile::EngineResult result = engine.run(argv[2]);
    std::printf("embedding (%zu values):", result.embedding.size());
    for (std::size_t i = 0; i < 8 && i < result.embedding.size(); ++i) std::printf(" %+.4f", result.embedding[i]);
    std::printf(" ...\n%.2f ms, %zu shards read\n", result.timeline.total_ms, result.timeline.shards_read());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_engine: %s\n", e.what());
    return 1;
  }
  return 0;
}
