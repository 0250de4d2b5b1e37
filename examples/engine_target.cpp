#include <cstdio>
#include <string>

#include <stile/engine.hpp>
#include <stile/plan/device_profile.hpp>

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: engine_target STORE TEXT\n"), 2;
  // STORE from tools/convert, STORE.profile.json from tools/profile --storage emmc. The planner
  // picks the submodel and each shard's bitwidth so that the request ends within 60 ms while its
  // shards stream from (emulated) eMMC flash; 1 MiB of them is kept between requests.
  stile::Engine engine(argv[1], {.storage = "emmc", .target_ms = 60, .preload_bytes = 1 << 20},
                       stile::DeviceProfile::load(std::string(argv[1]) + ".profile.json"));
  stile::EngineResult r = engine.run(argv[2]);
  std::printf("%zu layers planned, %.1f ms (target %.0f ms)\n", r.plan.layers.size(), r.timeline.total_ms, r.target_ms);
}
