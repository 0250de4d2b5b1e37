// bench_lp_partition: the LP partitioner's solve time (plan/lp_partition.hpp: LP, rounding, device
// dropping) on hand-made profiles of 2, 4 and 10 devices (BERT-large layer at 128 tokens), against
// Hepti's reported 11.9 ms at 10 devices; and an even split's predicted time beside the LP's.
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/plan/lp_partition.hpp"

using namespace stile;

int main(int argc, char** argv) {
  std::size_t tokens = 128;
  stile_cli::Parser cli("bench_lp_partition", "[options]", "Times the LP partitioner at 2, 4 and 10 devices.");
  cli.flag("--tokens", "N", "tokens of the layer", tokens).at_least(1);
  cli.example("bench_lp_partition");
  cli.parse(argc, argv);
  if (!lp_partition_available()) {
    std::printf("bench_lp_partition: built without COIN-OR CLP: nothing to measure\n");
    return 0;
  }
  const DistLayerShape L{.hidden = 1024, .heads = 16, .ffn = 4096, .tokens = tokens};
  std::printf("machine: %s (one thread)\n", bench::machine_description().c_str());
  std::printf("BERT-large layer, %zu tokens; devices taking 10, 15, 20, 25, 30 ps per FLOP, repeating (hand-made), 1 GB/s links, 50 us latency\n",
              tokens);
  std::printf("%8s %5s %14s %10s %12s %12s %s\n", "devices", "mode", "solve ms (med)", "LP solves", "T LP ms",
              "T even ms", "partition");
  for (const std::size_t n : {2, 4, 10}) {
    std::vector<DistDevice> devices;
    for (std::size_t r = 0; r < n; ++r) {
      devices.push_back({.seconds_per_flop = 1e-11 * (1 + 0.5 * static_cast<double>(r % 5)),
                         .free_bytes = 1e9,
                         .bytes_per_second = 1e9,
                         .latency_seconds = 50e-6});
    }
    for (const DistMode mode : {DistMode::kWs, DistMode::k1d}) {
      LayerPartitionPlan plan;
      const double sec = bench::median_seconds([&] { plan = solve_layer_partition(devices, L, mode, false); }, 9, 0.05);
      const Partition even = even_partition(mode, n, L.heads, L.ffn, L.hidden);
      std::printf("%8zu %5s %14.3f %10zu %12.3f %12.3f %s\n", n, mode_name(mode).data(), sec * 1e3, plan.lp_solves,
                  plan.predicted_seconds * 1e3, predicted_seconds(devices, L, even) * 1e3,
                  partition_text(plan.partition).c_str());
    }
  }
  return 0;
}
