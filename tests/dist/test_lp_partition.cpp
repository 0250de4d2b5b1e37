// The LP partitioner (plan/lp_partition.hpp) on hand-made device profiles: its whole-head /
// whole-neuron shares against a brute-force optimum of the same latency model over every
// partition; device dropping; the mode switch WS -> 1D -> 2D as memory shrinks; a layer that
// fits nowhere; re-partitioning after a measured slowdown.
#include <functional>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/plan/lp_partition.hpp"

using namespace stile;

// A test of the LP is skipped, saying so, in a build without COIN-OR CLP.
#define REQUIRE_CLP()                                       \
  if (!lp_partition_available()) {                          \
    WARN("skipped: built without COIN-OR CLP (STILE_CLP)"); \
    return;                                                 \
  }

namespace {

const DistLayerShape kSmall{.hidden = 64, .heads = 8, .ffn = 16, .tokens = 32};

DistDevice device(double slowness, double free_bytes = 1e12) {
  return {.seconds_per_flop = 1e-9 * slowness, .free_bytes = free_bytes, .bytes_per_second = 1e9, .latency_seconds = 2e-6};
}

// Every way to split `total` units over n devices.
void compositions(std::size_t total, std::size_t n, std::vector<std::size_t>& cur,
                  const std::function<void(const std::vector<std::size_t>&)>& fn) {
  if (cur.size() + 1 == n) {
    cur.push_back(total);
    fn(cur);
    cur.pop_back();
    return;
  }
  for (std::size_t k = 0; k <= total; ++k) {
    cur.push_back(k);
    compositions(total - k, n, cur, fn);
    cur.pop_back();
  }
}

struct Best {
  double t = 1e300;
  std::vector<Partition> argmin;
};

Best brute_force(const std::vector<DistDevice>& devices, const DistLayerShape& L, DistMode mode) {
  Best best;
  std::vector<std::size_t> a, f;
  compositions(L.heads, devices.size(), a, [&](const std::vector<std::size_t>& heads) {
    compositions(L.ffn, devices.size(), f, [&](const std::vector<std::size_t>& neurons) {
      const Partition p{mode, heads, neurons, {}};
      if (mode == DistMode::kWs) {
        for (std::size_t r = 0; r < devices.size(); ++r) {
          if ((heads[r] > 0 || neurons[r] > 0) && devices[r].free_bytes < L.layer_weight_bytes()) return;
        }
      } else if (!partition_fits(devices, L, p)) {
        return;
      }
      const double t = predicted_seconds(devices, L, p);
      if (t < best.t * (1 - 1e-12)) {
        best.t = t;
        best.argmin = {p};
      } else if (t <= best.t * (1 + 1e-12)) {
        best.argmin.push_back(p);
      }
    });
  });
  return best;
}

bool contains(const std::vector<Partition>& ps, const Partition& p) {
  for (const Partition& q : ps) {
    if (q.heads == p.heads && q.neurons == p.neurons) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("LP shares equal a brute-force optimum over whole-head partitions") {
  REQUIRE_CLP();
  const std::vector<std::vector<DistDevice>> cases = {
      {device(1), device(1)},
      {device(1), device(3)},
      {device(1), device(2), device(1.5)},
      {device(1), device(4), device(2), device(1.2)},
  };
  for (const auto& devices : cases) {
    for (const DistMode mode : {DistMode::kWs, DistMode::k1d}) {
      const LayerPartitionPlan plan = solve_layer_partition(devices, kSmall, mode, false);
      const Best best = brute_force(devices, kSmall, mode);
      INFO(devices.size() << " devices, " << partition_text(plan.partition) << ": T " << plan.predicted_seconds
                          << " vs brute force " << best.t);
      CHECK(plan.predicted_seconds == Approx(best.t).epsilon(1e-9));
      CHECK(contains(best.argmin, plan.partition));
    }
  }
}

TEST_CASE("LP shares follow speed: a device twice as slow gets about a third") {
  REQUIRE_CLP();
  const LayerPartitionPlan plan =
      solve_layer_partition({device(1), device(2)}, {.hidden = 1024, .heads = 16, .ffn = 4096, .tokens = 128},
                            DistMode::k1d, false);
  CHECK(plan.partition.heads == std::vector<std::size_t>{11, 5});
  CHECK(plan.partition.neurons[1] >= 1300);
  CHECK(plan.partition.neurons[1] <= 1430);
}

TEST_CASE("a device with no share is dropped and the LP re-solved without it") {
  REQUIRE_CLP();
  // Device 2 is 1000 times slower: the LP leaves it (nearly) nothing; re-solved without it, its
  // link's latency no longer counts.
  std::vector<DistDevice> devices{device(1), device(1), device(1000)};
  devices[2].latency_seconds = 1e-3;
  for (const DistMode mode : {DistMode::kWs, DistMode::k1d}) {
    const LayerPartitionPlan plan = solve_layer_partition(devices, kSmall, mode, false);
    INFO(partition_text(plan.partition));
    CHECK(plan.dropped == std::vector<std::size_t>{2});
    CHECK(plan.lp_solves >= 2);
    CHECK(plan.partition.heads[2] == 0);
    CHECK(plan.partition.neurons[2] == 0);
    CHECK(plan.predicted_seconds == Approx(brute_force(devices, kSmall, mode).t).epsilon(1e-9));
  }
}

TEST_CASE("the mode switches WS -> 1D -> 2D as the devices' memory shrinks") {
  REQUIRE_CLP();
  const DistLayerShape L{.hidden = 64, .heads = 2, .ffn = 16, .tokens = 32};
  const double layer = L.layer_weight_bytes();  // 73,728 bytes
  SECTION("every device holds the layer: WS") {
    const auto plan = solve_layer_partition({device(1, layer), device(1, layer)}, L, DistMode::kWs, true);
    CHECK(plan.partition.mode == DistMode::kWs);
  }
  SECTION("one device cannot: 1D, each holding its part") {
    const auto plan = solve_layer_partition({device(1, layer), device(1, layer * 0.6)}, L, DistMode::kWs, true);
    CHECK(plan.partition.mode == DistMode::k1d);
    CHECK(plan.notes.at(0).find("ws: device 1 cannot hold the whole layer") != std::string::npos);
    CHECK(partition_fits({device(1, layer), device(1, layer * 0.6)}, L, plan.partition));
  }
  SECTION("no device holds one whole head: 2D grid blocks") {
    const std::vector<DistDevice> devices(4, device(1, layer / 4 + 1000));
    const auto plan = solve_layer_partition(devices, L, DistMode::kWs, true);
    CHECK(plan.partition.mode == DistMode::k2d);
    CHECK(plan.partition.grid_rows() == 2);
    CHECK(plan.partition.grid_cols() == 2);
    CHECK(partition_fits(devices, L, plan.partition));
  }
  SECTION("nothing fits: a clear error") {
    const std::vector<DistDevice> devices(4, device(1, layer / 8));
    CHECK_THROWS_WITH(solve_layer_partition(devices, L, DistMode::kWs, true),
                      Catch::Contains("partition cannot fit: the layer's weights are 0.1 MB, the 4 devices have"));
  }
}

TEST_CASE("a measured slowdown re-partitions the next request; noise does not") {
  REQUIRE_CLP();
  const DistLayerShape L{.hidden = 1024, .heads = 16, .ffn = 4096, .tokens = 128};
  std::vector<DistDevice> devices{device(1), device(1)};
  const auto before = solve_layer_partition(devices, L, DistMode::k1d, false);
  CHECK(before.partition.heads == std::vector<std::size_t>{8, 8});
  CHECK_FALSE(update_speeds(devices, {1.1e-9, 0.9e-9}));  // within 25%: kept
  CHECK(devices[0].seconds_per_flop == 1e-9);
  CHECK(update_speeds(devices, {1.1e-9, 2.2e-9}));  // device 1 now half as fast: both take their measurement
  CHECK(devices[0].seconds_per_flop == 1.1e-9);
  CHECK(devices[1].seconds_per_flop == 2.2e-9);
  const auto after = solve_layer_partition(devices, L, DistMode::k1d, false);
  CHECK(after.partition.heads == std::vector<std::size_t>{11, 5});
}

TEST_CASE("without COIN-OR CLP the partitioner says so; 2D needs no LP") {
  const std::vector<DistDevice> devices(4, device(1));
  CHECK(solve_layer_partition(devices, kSmall, DistMode::k2d, false).partition.grid_cols() == 2);
  if (lp_partition_available()) {
    CHECK(solve_layer_partition(devices, kSmall, DistMode::k1d, false).partition.heads.size() == 4);
  } else {
    CHECK_THROWS_WITH(solve_layer_partition(devices, kSmall, DistMode::k1d, false),
                      Catch::Contains("built without COIN-OR CLP"));
  }
}
