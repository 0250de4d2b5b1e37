// The two-stage planner (plan/planner.hpp) and the baselines' plans (plan/baselines.hpp) on
// device profiles made by hand, where the right answer can be worked out on paper: STI's worked
// example, pass 1 and pass 2, a brute-force check of every bit assignment on a tiny model, our
// shrink when 2-bit shards cannot arrive in time, the per-bucket cache and its replans, and the
// degenerate inputs (each a defined plan or a clear error).
#include "stile/plan/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/plan/baselines.hpp"
#include "stile/plan/load_tracker.hpp"

using Catch::Contains;
using stile::DeviceProfile;
using stile::ElasticPlan;
using stile::PlannerOptions;
using stile::ShardChoice;
using stile::ShardKey;
using stile::ShardRanking;
using stile::SubmodelPlan;

namespace {

// A profile filled by hand: compute(bits, m) for every length bucket.
DeviceProfile make_profile(std::vector<unsigned> bits, std::vector<double> io_ms, std::size_t layers,
                           std::size_t shards, const std::function<double(unsigned, std::size_t)>& compute,
                           std::vector<std::size_t> lengths = {128}, std::vector<double> bytes = {}) {
  DeviceProfile p;
  p.bits = std::move(bits);
  p.io_ms = std::move(io_ms);
  if (bytes.empty()) {
    for (const unsigned b : p.bits) bytes.push_back(100.0 * b);
  }
  p.shard_bytes = std::move(bytes);
  p.lengths = std::move(lengths);
  p.num_layers = layers;
  p.shards_per_layer = shards;
  for (const unsigned b : p.bits) {
    auto& per_length = p.compute_ms.emplace_back();
    for (std::size_t i = 0; i < p.lengths.size(); ++i) {
      auto& per_m = per_length.emplace_back();
      for (std::size_t m = 1; m <= shards; ++m) per_m.push_back(compute(b, m));
    }
  }
  return p;
}

SubmodelPlan plan_of(std::vector<std::vector<ShardChoice>> layers) { return SubmodelPlan{std::move(layers)}; }

// AIB straight from its definition, O(n^2): an independent check of accumulated_io_budgets.
std::vector<double> aib_by_definition(const DeviceProfile& p, const SubmodelPlan& plan, std::size_t tokens,
                                      const std::set<ShardKey>& preloaded, double head_start) {
  const std::size_t n = plan.layers.size();
  std::vector<double> aib(n);
  for (std::size_t k = 0; k < n; ++k) {
    aib[k] = head_start;
    for (std::size_t l = 0; l < n; ++l) {
      for (const ShardChoice& c : plan.layers[l]) {
        if (preloaded.count({l, c.shard, c.bits}) != 0) aib[k] += p.io_ms_at(c.bits);
      }
    }
    for (std::size_t j = 0; j < k; ++j) {
      unsigned widest = 0;
      for (const ShardChoice& c : plan.layers[j]) widest = std::max(widest, c.bits);
      aib[k] += p.compute_ms_at(widest, tokens, plan.layers[j].size());
    }
    for (std::size_t j = 0; j <= k; ++j) {
      for (const ShardChoice& c : plan.layers[j]) aib[k] -= p.io_ms_at(c.bits);
    }
  }
  return aib;
}

double compute_sum(const DeviceProfile& p, const SubmodelPlan& plan, std::size_t tokens) {
  double t = 0;
  for (const auto& layer : plan.layers) {
    unsigned widest = 0;
    for (const ShardChoice& c : layer) widest = std::max(widest, c.bits);
    t += p.compute_ms_at(widest, tokens, layer.size());
  }
  return t;
}

// The planner's own validity rule, recomputed here: head start = the compute's slack, and the
// replayed pipeline (2 slots) ends by the target.
bool valid_with_slack(const DeviceProfile& p, const SubmodelPlan& plan, std::size_t tokens,
                      const std::set<ShardKey>& preloaded, double target_ms) {
  const double slack = std::max(0.0, target_ms - compute_sum(p, plan, tokens));
  return stile::budgets_valid(aib_by_definition(p, plan, tokens, preloaded, slack)) &&
         stile::estimate_pipeline(p, plan, tokens, 2, preloaded).total_ms <= target_ms + 1e-9;
}

std::set<ShardKey> keys(std::initializer_list<ShardKey> k) { return std::set<ShardKey>(k); }

}  // namespace

TEST_CASE("planner: STI's worked example (two layers, T = 2 s, three 2-bit shards preloaded)", "[plan][planner]") {
  // T_comp = 1 s per layer; a 2-bit shard's IO 0.2 s (4 bits 0.3 s, 32 bits 0.7 s). T = 2 s is
  // all compute, so there is no slack: the budgets are the preload's 0.6 s and layer 0's compute.
  const DeviceProfile p = make_profile({2, 4, 32}, {200, 300, 700}, 2, 4, [](unsigned, std::size_t) { return 1000.0; });
  const std::set<ShardKey> preloaded = keys({{0, 0, 2}, {0, 1, 2}, {0, 2, 2}});
  const std::vector<ShardChoice> layer0{{0, 2}, {1, 2}, {2, 2}};
  CHECK(stile::preload_head_start_ms(p, plan_of({layer0, {{0, 2}}}), preloaded) == Approx(600));  // AIB(0) = 0.6 s

  SECTION("layer 1 needs 1.1 s of IO: AIB(1) = 0.6 + 1 - 0.6 - 1.1 = -0.1 s, rejected") {
    const SubmodelPlan c = plan_of({layer0, {{0, 32}, {1, 2}, {2, 2}}});
    const std::vector<double> aib = stile::accumulated_io_budgets(p, c, 128, preloaded);
    REQUIRE(aib.size() == 2);
    CHECK(aib[0] == Approx(0).margin(1e-9));
    CHECK(aib[1] == Approx(-100));
    CHECK_FALSE(stile::budgets_valid(aib));
  }
  SECTION("layer 1 at 1.0 s of IO (one 32-bit and one 4-bit shard): AIB(1) = 0, valid") {
    const std::vector<double> aib =
        stile::accumulated_io_budgets(p, plan_of({layer0, {{0, 32}, {1, 4}}}), 128, preloaded);
    CHECK(aib[1] == Approx(0).margin(1e-9));
    CHECK(stile::budgets_valid(aib));
  }
  SECTION("layer 1 with three 4-bit shards (0.9 s): AIB(1) = 0.1 s, valid") {
    const std::vector<double> aib =
        stile::accumulated_io_budgets(p, plan_of({layer0, {{0, 4}, {1, 4}, {2, 4}}}), 128, preloaded);
    CHECK(aib[1] == Approx(100));
    CHECK(stile::budgets_valid(aib));
  }
  SECTION("a non-preloaded shard in layer 0 has no time to arrive: AIB(0) < 0") {
    const SubmodelPlan c = plan_of({{{0, 2}, {1, 2}, {2, 2}, {3, 2}}, {{0, 2}}});
    const std::vector<double> aib = stile::accumulated_io_budgets(p, c, 128, preloaded);
    CHECK(aib[0] == Approx(-200));
    CHECK_FALSE(stile::budgets_valid(aib));
  }
  SECTION("the definition, checked against an O(n^2) rewrite") {
    for (const SubmodelPlan& c : {plan_of({layer0, {{0, 32}, {1, 2}, {2, 2}}}), plan_of({layer0, {{3, 4}}}),
                                  plan_of({{{0, 32}, {1, 2}}, {{0, 2}, {1, 4}, {2, 32}, {3, 2}}})}) {
      const std::vector<double> got = stile::accumulated_io_budgets(p, c, 128, preloaded, 17);
      const std::vector<double> want = aib_by_definition(p, c, 128, preloaded, 17);
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]));
    }
  }
  SECTION("the planner: 2 x 4 by compute; layer 0's fourth shard cannot arrive, so it shrinks to 2 x 3") {
    PlannerOptions o;
    o.target_ms = 2000;
    o.preload_budget_bytes = 3 * 200;  // three 2-bit versions (200 bytes each)
    const ElasticPlan plan = stile::plan_elastic(p, 128, o);
    CHECK(plan.compute_layers == 2);
    CHECK(plan.compute_shards == 4);
    CHECK(plan.preload == preloaded);
    // Interleaved importance: (1, 3) goes first (layer 0 stays invalid), then (0, 3).
    CHECK(plan.dropped_shards == 2);
    CHECK(plan.dropped_layers == 0);
    CHECK(plan.submodel.layers[0] == layer0);
    CHECK(plan.submodel.layers[1] == std::vector<ShardChoice>{{0, 4}, {1, 4}, {2, 4}});  // 32 bits would need 2.1 s
    CHECK(plan.uniform_bits == 4);
    CHECK(plan.upgrades == 0);  // 4 -> 32 costs 0.4 s, only 0.1 s left
    CHECK(plan.aib_ms[1] == Approx(100));
    CHECK(plan.valid);
    CHECK(plan.meets_target);
    CHECK(plan.estimated_ms == Approx(2000));

    // The published planner keeps 2 x 4 at 2 bits and misses the target.
    o.shrink = false;
    o.count_slack = false;
    const ElasticPlan sti = stile::plan_elastic(p, 128, o);
    CHECK(sti.shards() == 8);
    CHECK_FALSE(sti.valid);
    CHECK_FALSE(sti.meets_target);
    CHECK(sti.estimated_ms > 2000);
    CHECK_THAT(sti.explain, Contains("misses the target"));
  }
}

TEST_CASE("planner: pass 1 and pass 2 on hand-made profiles", "[plan][planner]") {
  SECTION("preloaded layer 0, no slack: pass 1 gives layer 1 4 bits, pass 2 raises its most important shard") {
    // T_comp = 50 ms, T = 100 ms: 2 x 2, no slack. Budget 200 bytes = two 2-bit versions = layer 0.
    // AIB(1) = 50 ms for layer 1's two shards: 32 bits (60) no, 4 bits (40) yes, 10 left; pass 2
    // raises layer 1's most important shard (shard 1) to 32 bits (+10), then nothing is left.
    const DeviceProfile p = make_profile({2, 4, 32}, {10, 20, 30}, 2, 2, [](unsigned, std::size_t) { return 50.0; });
    PlannerOptions o;
    o.target_ms = 100;
    o.preload_budget_bytes = 2 * 200;  // make_profile: 100 bytes per bit, so 200 per 2-bit version
    const ElasticPlan plan = stile::plan_elastic(p, 128, o, {{0, 1}, {1, 0}});
    CHECK(plan.compute_layers == 2);
    CHECK(plan.compute_shards == 2);
    CHECK(plan.preload == keys({{0, 0, 2}, {0, 1, 2}}));
    CHECK(plan.uniform_bits == 4);
    CHECK(plan.upgrades == 1);
    CHECK(plan.submodel.layers[1] == std::vector<ShardChoice>{{1, 32}, {0, 4}});
    REQUIRE(plan.aib_ms.size() == 2);
    CHECK(plan.aib_ms[0] == Approx(0).margin(1e-9));
    CHECK(plan.aib_ms[1] == Approx(0).margin(1e-9));
    CHECK(plan.head_start_ms == Approx(0).margin(1e-9));
    CHECK(plan.meets_target);
    CHECK(plan.estimated_ms == Approx(100));
    CHECK(plan.dropped_shards + plan.dropped_layers == 0);
  }
  SECTION("no preload: the compute's slack is the head start") {
    // One layer of 3 shards, T_comp 10 ms, T = 80 ms: 70 ms of slack for the IO. Pass 1: 32 bits
    // (90) no, 4 bits (60) yes; pass 2: the most important shard (2) to 32 bits (+10), then none.
    const DeviceProfile p = make_profile({2, 4, 32}, {10, 20, 30}, 1, 3, [](unsigned, std::size_t) { return 10.0; });
    PlannerOptions o;
    o.target_ms = 80;
    const ElasticPlan plan = stile::plan_elastic(p, 128, o, {{2, 0, 1}});
    CHECK(plan.preload.empty());
    CHECK(plan.head_start_ms == Approx(70));
    CHECK(plan.uniform_bits == 4);
    CHECK(plan.submodel.layers[0] == std::vector<ShardChoice>{{2, 32}, {0, 4}, {1, 4}});
    CHECK(plan.aib_ms[0] == Approx(0).margin(1e-9));
    CHECK(plan.meets_target);
    CHECK(plan.estimated_ms == Approx(80));

    // STI starts from the preload alone: with none, nothing is valid, and it does not shrink.
    o.count_slack = false;
    o.shrink = false;
    const ElasticPlan sti = stile::plan_elastic(p, 128, o, {{2, 0, 1}});
    CHECK(sti.submodel.layers[0] == std::vector<ShardChoice>{{2, 2}, {0, 2}, {1, 2}});
    CHECK_FALSE(sti.meets_target);
  }
  SECTION("pass 2 follows the global importance order, not shard order") {
    // Two layers, no preload, T_comp 10, T = 60: slack 40. Uniform 4 bits: AIB(1) = 50 - 80 (no);
    // 2 bits: AIB(0) = 40 - 20 = 20, AIB(1) = 50 - 40 = 10 (yes). The order puts (1, 1) first: it
    // takes the 10 ms left (2 -> 4 bits: +10), and nothing can follow.
    const DeviceProfile p = make_profile({2, 4, 32}, {10, 20, 40}, 2, 2, [](unsigned, std::size_t) { return 10.0; });
    PlannerOptions o;
    o.target_ms = 60;
    o.importance = {{1, 1}, {0, 0}, {0, 1}, {1, 0}};
    const ElasticPlan plan = stile::plan_elastic(p, 128, o);
    CHECK(plan.uniform_bits == 2);
    CHECK(plan.upgrades == 1);
    CHECK(plan.submodel.layers[0] == std::vector<ShardChoice>{{0, 2}, {1, 2}});
    CHECK(plan.submodel.layers[1] == std::vector<ShardChoice>{{1, 4}, {0, 2}});  // ranking from the order
    CHECK(plan.aib_ms[1] == Approx(0).margin(1e-9));

    // An upgrade order of its own (the ablation's random orders): the same submodel, and the same
    // 10 ms go to the shard it names first, (0, 1).
    o.upgrade_order = {{0, 1}, {1, 1}, {0, 0}, {1, 0}};
    const ElasticPlan other = stile::plan_elastic(p, 128, o);
    CHECK(other.upgrades == 1);
    CHECK(other.submodel.layers[0] == std::vector<ShardChoice>{{0, 2}, {1, 4}});
    CHECK(other.submodel.layers[1] == std::vector<ShardChoice>{{1, 2}, {0, 2}});
  }
}

TEST_CASE("planner: brute force on 2 layers x 2 shards x {2, 4, 32}", "[plan][planner]") {
  // Random profiles (fixed seed); every bit assignment of the compute-planned submodel's
  // non-preloaded shards is enumerated. When any is valid, the planner must not shrink, and its
  // plan must be valid with no shard that can be raised alone and stay valid; when none is, it
  // must shrink (or miss the target at 1 x 1). Half the profiles have compute independent of the
  // bits, where the lowest uniform bitwidth is the cheapest assignment there is.
  std::uint64_t state = 42;
  auto uniform = [&](double lo, double hi) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * static_cast<double>(state >> 11) * 0x1p-53;
  };
  const std::vector<unsigned> bits{2, 4, 32};
  int shrunk = 0, upgraded = 0, uniform_misses = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const double io2 = uniform(1, 20), io4 = io2 + uniform(0, 20), io32 = io4 + uniform(0, 40);
    const bool flat_compute = trial % 2 == 0;  // compute independent of the bits
    std::vector<double> table;
    for (int i = 0; i < 6; ++i) table.push_back(uniform(5, 30));
    const DeviceProfile p = make_profile(bits, {io2, io4, io32}, 2, 2, [&](unsigned b, std::size_t m) {
      const std::size_t bi = flat_compute ? 0 : (b == 2 ? 0 : b == 4 ? 1 : 2);
      return table[bi * 2 + (m - 1)];
    });
    PlannerOptions o;
    o.target_ms = uniform(20, 150);
    o.preload_budget_bytes = static_cast<std::size_t>(uniform(0, 4)) * 200;  // 0..3 versions at 2 bits
    const ShardRanking ranking = trial % 3 == 0 ? ShardRanking{{1, 0}, {0, 1}} : ShardRanking{};
    const ElasticPlan plan = stile::plan_elastic(p, 128, o, ranking);
    INFO("trial " << trial << ": " << plan.explain);

    // The compute-planned submodel and its preload set, rebuilt here.
    SubmodelPlan base = SubmodelPlan::uniform(plan.compute_layers, plan.compute_shards, 2,
                                              ranking.empty() ? ShardRanking{{0, 1}, {0, 1}} : ranking);
    const std::set<ShardKey> preload =
        stile::preload_set(base, o.preload_budget_bytes, [](const ShardKey&) { return std::size_t{200}; });
    std::vector<ShardChoice*> free;
    for (std::size_t k = 0; k < base.layers.size(); ++k) {
      for (ShardChoice& c : base.layers[k]) {
        if (preload.count({k, c.shard, 2}) == 0) free.push_back(&c);
      }
    }
    std::set<std::vector<unsigned>> valid;
    std::size_t combos = 1;
    for (std::size_t i = 0; i < free.size(); ++i) combos *= 3;
    for (std::size_t code = 0; code < combos; ++code) {
      std::vector<unsigned> assignment;
      for (std::size_t i = 0, c = code; i < free.size(); ++i, c /= 3) {
        free[i]->bits = bits[c % 3];
        assignment.push_back(free[i]->bits);
      }
      if (valid_with_slack(p, base, 128, preload, o.target_ms)) valid.insert(assignment);
    }

    // The planner's own report agrees with the definition.
    CHECK(plan.valid == valid_with_slack(p, plan.submodel, 128, plan.preload, o.target_ms));
    // Pass 1 tries uniform bitwidths only: with compute that depends on the bits, a mixed
    // assignment may fit where no uniform one does, and then the planner shrinks (a known limit).
    const bool shrank = plan.dropped_shards + plan.dropped_layers > 0;
    if (!valid.empty() && !flat_compute && shrank) {
      ++uniform_misses;
    } else if (!valid.empty()) {
      REQUIRE_FALSE(shrank);
      REQUIRE(plan.valid);
      std::vector<unsigned> got;
      for (std::size_t k = 0; k < plan.submodel.layers.size(); ++k) {
        for (const ShardChoice& c : plan.submodel.layers[k]) {
          if (plan.preload.count({k, c.shard, c.bits}) == 0) got.push_back(c.bits);
        }
      }
      REQUIRE(valid.count(got) == 1);
      for (std::size_t i = 0; i < got.size(); ++i) {
        for (const unsigned b : bits) {
          if (b <= got[i]) continue;
          std::vector<unsigned> raised = got;
          raised[i] = b;
          CHECK(valid.count(raised) == 0);
        }
      }
      if (plan.upgrades > 0) ++upgraded;
    } else if (flat_compute) {
      // No assignment fits: the planner shrank, or it is at 1 x 1 and says it misses the target.
      CHECK((plan.dropped_shards + plan.dropped_layers > 0 || plan.shards() == 1));
      if (plan.valid) ++shrunk;
    }
    if (plan.valid) CHECK(plan.meets_target == (plan.compute_ms <= o.target_ms + 1e-9));
  }
  // The trials cover both pass 2 and the shrink.
  INFO("upgraded " << upgraded << ", shrunk " << shrunk << ", uniform misses " << uniform_misses);
  CHECK(upgraded > 10);
  CHECK(shrunk > 10);
  CHECK(uniform_misses < 10);
}

TEST_CASE("planner: fast compute, slow flash: ours shrinks until the plan is valid", "[plan][planner]") {
  // 4 x 4, T_comp 1 ms per layer whatever m, T = 20 ms, no preload: 16 ms of slack. 2-bit IO is
  // 4 ms, so AIB(k) = (20 - n) + k - 4 * (shards in layers 0..k): the whole model (AIB(0) = 0,
  // AIB(3) = 19 - 64) is far out. Dropping shards by importance (the rank-3 shards from the last
  // layer up, then rank 2, rank 1) reaches 4 x 1: AIB = 12, 9, 6, 3, valid. Any 4-bit shard costs
  // 4 more than AIB(3) has left, so pass 2 raises none.
  const DeviceProfile p = make_profile({2, 4, 32}, {4, 8, 16}, 4, 4, [](unsigned, std::size_t) { return 1.0; });
  PlannerOptions o;
  o.target_ms = 20;
  const ElasticPlan plan = stile::plan_elastic(p, 128, o);
  CHECK(plan.compute_layers == 4);
  CHECK(plan.compute_shards == 4);
  CHECK(plan.dropped_shards == 12);
  CHECK(plan.dropped_layers == 0);
  REQUIRE(plan.layers() == 4);
  for (const auto& layer : plan.submodel.layers) CHECK(layer == std::vector<ShardChoice>{{0, 2}});
  REQUIRE(plan.aib_ms.size() == 4);
  CHECK(plan.aib_ms[0] == Approx(12));
  CHECK(plan.aib_ms[1] == Approx(9));
  CHECK(plan.aib_ms[2] == Approx(6));
  CHECK(plan.aib_ms[3] == Approx(3));
  CHECK(plan.valid);
  CHECK(plan.meets_target);
  CHECK(plan.estimated_ms == Approx(17));  // the replayed pipeline agrees: under 20 ms
  CHECK_THAT(plan.explain, Contains("shrunk to 4 layers, 4 shards"));

  SECTION("slower still: down to one layer") {
    // 2-bit IO 10 ms: two layers of one shard need 20 ms of IO by 19 ms (AIB(1) = 18 + 1 - 20).
    const DeviceProfile slow = make_profile({2, 4, 32}, {10, 20, 40}, 4, 4, [](unsigned, std::size_t) { return 1.0; });
    const ElasticPlan one = stile::plan_elastic(slow, 128, o);
    CHECK(one.dropped_shards == 12);
    CHECK(one.dropped_layers == 3);
    REQUIRE(one.layers() == 1);
    CHECK(one.submodel.layers[0] == std::vector<ShardChoice>{{0, 2}});
    CHECK(one.aib_ms[0] == Approx(9));
    CHECK(one.meets_target);
  }
  SECTION("too slow even for 1 x 1: a defined plan that says it misses") {
    const DeviceProfile hopeless =
        make_profile({2, 4, 32}, {50, 60, 70}, 4, 4, [](unsigned, std::size_t) { return 1.0; });
    const ElasticPlan none = stile::plan_elastic(hopeless, 128, o);
    CHECK(none.shards() == 1);
    CHECK(none.submodel.layers[0] == std::vector<ShardChoice>{{0, 2}});
    CHECK_FALSE(none.valid);
    CHECK_FALSE(none.meets_target);
    CHECK_THAT(none.explain, Contains("cannot arrive in time"));
  }
  SECTION("with the heads' accuracies: the most accurate uniform shape that is valid") {
    // Uniform n x m at 2 bits: AIB(k) = (20 - n) + k - 4 m (k + 1). Valid: 1 x 4 (AIB(0) = 3),
    // 2 x 2 (10, 3), n x 1; not 4 x 4 or 4 x 2 (AIB(3) = 19 - 32), nor 2 x 3 (AIB(1) = 19 - 24).
    std::map<std::pair<std::size_t, std::size_t>, double> table{{{4, 4}, 0.9},  {{4, 2}, 0.85}, {{1, 4}, 0.8},
                                                                {{2, 2}, 0.78}, {{4, 1}, 0.7},  {{2, 3}, 0.88}};
    o.shape_accuracy = [&](std::size_t n, std::size_t m) {
      const auto it = table.find({n, m});
      return it == table.end() ? std::nan("") : it->second;
    };
    const ElasticPlan best = stile::plan_elastic(p, 128, o);
    CHECK(best.submodel == SubmodelPlan::uniform(1, 4, 2));  // not 4 x 1, which dropping shards gives
    CHECK(best.dropped_layers == 3);
    CHECK(best.dropped_shards == 0);
    CHECK(best.valid);
    CHECK(best.meets_target);
    CHECK(best.aib_ms[0] == Approx(3));
    CHECK(best.upgrades == 0);  // a 4-bit shard would cost 4 ms more than the 3 left
    CHECK_THAT(best.explain, Contains("shrunk to 1 layers, 4 shards"));

    table.erase({1, 4});  // no head for 1 x 4: not a candidate
    const ElasticPlan next = stile::plan_elastic(p, 128, o);
    CHECK(next.submodel == SubmodelPlan::uniform(2, 2, 2));
    CHECK(next.dropped_layers == 2);
    CHECK(next.dropped_shards == 4);
    CHECK(next.meets_target);

    table = {{{4, 4}, 0.9}};  // no valid shape has a head: drop shards as without heads
    CHECK(stile::plan_elastic(p, 128, o).submodel == plan.submodel);
  }
  SECTION("the published planner stalls at 4 x 4 x 2 bits") {
    o.shrink = false;
    o.count_slack = false;
    const ElasticPlan sti = stile::plan_elastic(p, 128, o);
    CHECK(sti.shards() == 16);
    CHECK(sti.uniform_bits == 2);
    CHECK_FALSE(sti.meets_target);
    CHECK(sti.estimated_ms > 20);
  }
}

TEST_CASE("planner: a layer IO model where versions read together pay one latency", "[plan][planner]") {
  // T_io = 1 ms + 0.01 ms per byte (200, 400, 3200 bytes at 2, 4, 32 bits): the line through the
  // profile gives latency 1 ms. One layer of 4 shards, T_comp 1 ms, T = 20 ms: 19 ms of slack.
  const DeviceProfile p =
      make_profile({2, 4, 32}, {3, 5, 33}, 1, 4, [](unsigned, std::size_t) { return 1.0; }, {128}, {200, 400, 3200});
  const stile::ReadCostLine line = stile::read_cost_line(p);
  CHECK(line.latency_ms == Approx(1));
  CHECK(line.ms_per_byte == Approx(0.01));
  CHECK(stile::estimated_row_read_ms(p, 4096) == Approx(41.96));

  // One request per bitwidth (a store whose versions of one bitwidth are contiguous).
  const stile::LayerIoTime merged = stile::layer_io_model(p, [](std::size_t, std::span<const ShardChoice> v) {
    std::set<unsigned> bits;
    for (const ShardChoice& c : v) bits.insert(c.bits);
    return bits.size();
  });
  const std::vector<ShardChoice> four_at_4{{0, 4}, {1, 4}, {2, 4}, {3, 4}};
  CHECK(merged(0, four_at_4) == Approx(1 + 4 * 4));
  CHECK(stile::layer_io_ms(p, {}, 0, four_at_4) == Approx(4 * 5));  // no model: one request each

  PlannerOptions o;
  o.target_ms = 20;
  // Per version: 4 bits for all is 20 ms > 19; pass 1 gives 2 bits (12 ms), pass 2 raises three
  // shards to 4 bits (18 ms).
  const ElasticPlan separate = stile::plan_elastic(p, 128, o);
  CHECK(separate.uniform_bits == 2);
  CHECK(separate.upgrades == 3);
  // Read together: 4 bits for all is 17 ms; a 32-bit shard would add a request and 32 ms.
  o.layer_io = merged;
  const ElasticPlan together = stile::plan_elastic(p, 128, o);
  CHECK(together.submodel == SubmodelPlan::uniform(1, 4, 4));
  CHECK(together.upgrades == 0);
  CHECK(together.aib_ms[0] == Approx(2));
  CHECK(together.estimated_ms == Approx(18));
  CHECK(stile::estimate_pipeline(p, together.submodel, 128, 2, {}, merged).io_ms == Approx(17));
  // The preload's credit is what it saves: reading shard 0 and 1 no more leaves one request of two.
  const std::set<ShardKey> preloaded{{0, 0, 4}, {0, 1, 4}};
  CHECK(stile::preload_head_start_ms(p, together.submodel, preloaded, merged) == Approx(17 - 9));
  CHECK(stile::accumulated_io_budgets(p, together.submodel, 128, preloaded, 0, merged)[0] == Approx(-9));
}

TEST_CASE("planner: layer reads in the profile give the read cost line its bandwidth", "[plan][planner]") {
  // Storage at 1 ms per request + 0.01 ms per byte. Single versions of 200, 400, 3200 bytes at 2,
  // 4, 32 bits; layers of 4 versions read in 2, 1 and 4 requests.
  DeviceProfile p =
      make_profile({2, 4, 32}, {3, 5, 33}, 1, 4, [](unsigned, std::size_t) { return 1.0; }, {128}, {200, 400, 3200});
  p.layer_bytes = {800, 1600, 12800};
  p.layer_requests = {2, 1, 4};
  p.layer_io_ms = {2 + 8, 1 + 16, 4 + 128};
  stile::ReadCostLine line = stile::read_cost_line(p);
  CHECK(line.latency_ms == Approx(1));
  CHECK(line.ms_per_byte == Approx(0.01));

  // Single reads scattered as on fast storage, where latency dominates them (here the larger
  // shards read faster than the smaller): alone they give a line 1.4x too fast per byte and a
  // latency above the true one. The layer reads pull the bandwidth to theirs.
  DeviceProfile fast = p;
  fast.io_ms = {5, 4.5, 25};  // true: 3, 5, 33
  fast.layer_io_ms.clear();
  fast.layer_bytes.clear();
  fast.layer_requests.clear();
  const stile::ReadCostLine singles = stile::read_cost_line(fast);
  CHECK(singles.ms_per_byte < 0.0075);
  fast.layer_bytes = p.layer_bytes;
  fast.layer_requests = p.layer_requests;
  fast.layer_io_ms = p.layer_io_ms;
  line = stile::read_cost_line(fast);
  CHECK(line.ms_per_byte == Approx(0.01).epsilon(0.05));
  CHECK(line.latency_ms <= 4.5);  // never above the cheapest single read

  // The layer IO model charges a version its bytes on the line (not its single read less the
  // latency, which for 4 bits would be 4.5 - latency).
  const stile::LayerIoTime per_bitwidth = stile::layer_io_model(fast, [](std::size_t, std::span<const ShardChoice> v) {
    std::set<unsigned> bits;
    for (const ShardChoice& c : v) bits.insert(c.bits);
    return bits.size();
  });
  const std::vector<ShardChoice> two_bitwidths{{0, 4}, {1, 4}, {2, 32}};
  CHECK(per_bitwidth(0, two_bitwidths) == Approx(2 * line.latency_ms + (400 + 400 + 3200) * line.ms_per_byte));

  // One bitwidth, every version its own request: bytes per request never change, so no latency
  // can be told apart; the line goes through the origin (as without layer reads).
  const DeviceProfile one = make_profile({4}, {5}, 1, 4, [](unsigned, std::size_t) { return 1.0; }, {128}, {400});
  CHECK(stile::read_cost_line(one).latency_ms == 0);
  CHECK(stile::read_cost_line(one).ms_per_byte == Approx(5.0 / 400));
  DeviceProfile one_each = one;
  one_each.layer_bytes = {1600};
  one_each.layer_requests = {4};
  one_each.layer_io_ms = {20};
  CHECK(stile::read_cost_line(one_each).latency_ms == 0);
  CHECK(stile::read_cost_line(one_each).ms_per_byte == Approx(5.0 / 400));
  one_each.layer_requests = {1};  // read as one request: 1 ms + 0.01 ms per byte again
  one_each.layer_io_ms = {17};
  CHECK(stile::read_cost_line(one_each).latency_ms == Approx(1));
  CHECK(stile::read_cost_line(one_each).ms_per_byte == Approx(0.01));

  // The load tracker's scaling scales the layer reads with the single ones.
  const DeviceProfile slower = stile::LoadTracker::scaled(p, {2, 1});
  CHECK(stile::read_cost_line(slower).latency_ms == Approx(2));
  CHECK(stile::read_cost_line(slower).ms_per_byte == Approx(0.02));
}

TEST_CASE("planner: the working-buffer slots: IO cannot run ahead of them", "[plan][planner]") {
  // 3 x 2, T_comp 10 ms, T = 30 ms: no slack. Budget 4 versions: layers 0 and 1 preloaded.
  // Layer 2's two 2-bit shards (20 ms) fit AIB(2) = 20 exactly, but with 2 slots their IO waits
  // for layer 0's compute (10 ms): it ends at 30, compute at 40. The replay check rejects that
  // and the shrink drops layer 2's second shard (IO 10..20, compute 20..30).
  const DeviceProfile p = make_profile({2, 4, 32}, {10, 20, 40}, 3, 2, [](unsigned, std::size_t) { return 10.0; });
  PlannerOptions o;
  o.target_ms = 30;
  o.preload_budget_bytes = 4 * 200;
  const ElasticPlan plan = stile::plan_elastic(p, 128, o);
  CHECK(plan.preload.size() == 4);
  CHECK(plan.dropped_shards == 1);
  CHECK(plan.submodel.layers[2] == std::vector<ShardChoice>{{0, 2}});
  CHECK(plan.aib_ms[2] == Approx(10));
  CHECK(plan.estimated_ms == Approx(30));
  CHECK(plan.meets_target);

  o.check_pipeline = false;  // the AIB model alone keeps 3 x 2 and overruns in the replay
  const ElasticPlan aib_only = stile::plan_elastic(p, 128, o);
  CHECK(aib_only.shards() == 6);
  CHECK(aib_only.aib_ms[2] == Approx(0).margin(1e-9));
  CHECK(aib_only.estimated_ms == Approx(40));

  o.check_pipeline = true;  // with 3 slots layer 2's IO starts at once: 3 x 2 fits
  o.slots = 3;
  const ElasticPlan three = stile::plan_elastic(p, 128, o);
  CHECK(three.shards() == 6);
  CHECK(three.estimated_ms == Approx(30));
  CHECK(three.meets_target);
}

TEST_CASE("planner: a layer on versions read ahead is costed at T_comp, every other layer at T_comp'",
          "[plan][planner]") {
  // 3 x 1, IO 10 ms per shard, T_comp 4 ms, T_comp' 6 ms, 2 slots. With layer 1 preloaded:
  // layer 0 reads 0..10 and computes after its read, 10..16; layer 1 needs no read and follows
  // at once, but on held weights out of cache: 16..22 (T_comp'); layer 2's read waits for layer
  // 0's slot (16..26) and its compute for the read: 26..32 (T_comp').
  DeviceProfile p = make_profile({4}, {10}, 3, 1, [](unsigned, std::size_t) { return 4.0; });
  p.compute_after_read_ms = {{{6.0}}};
  const SubmodelPlan plan = plan_of({{{0, 4}}, {{0, 4}}, {{0, 4}}});
  const std::set<ShardKey> layer1{{1, 0, 4}};
  const stile::PipelineEstimate e = stile::estimate_pipeline(p, plan, 128, 2, layer1);
  CHECK(e.total_ms == Approx(32));
  CHECK(e.compute_ms == Approx(6 + 6 + 6));
  CHECK(e.stall_ms == Approx(10 + 4));  // layer 0 waits 10 ms, layer 2 4 ms

  // Nothing preloaded: every layer waits for its read (reads at 10, 20, 30): 16, 26, 36.
  const stile::PipelineEstimate cold = stile::estimate_pipeline(p, plan, 128, 2);
  CHECK(cold.total_ms == Approx(36));
  CHECK(cold.compute_ms == Approx(18));
  // Everything preloaded: back to back, each at T_comp' (the first layer's threads idled through
  // the word rows; held weights are out of cache).
  const stile::PipelineEstimate held =
      stile::estimate_pipeline(p, plan, 128, 2, {{0, 0, 4}, {1, 0, 4}, {2, 0, 4}});
  CHECK(held.total_ms == Approx(18));
  CHECK(held.compute_ms == Approx(18));
  // Fast reads (2 ms): layer 0 reads 0..2 and computes 2..8 (T_comp'); layers 1 and 2 are read
  // (2..4, 8..10) before the compute ahead of them ends, so follow at T_comp: 8..12, 12..16.
  DeviceProfile fast = p;
  fast.io_ms = {2.0};
  const stile::PipelineEstimate ahead = stile::estimate_pipeline(fast, plan, 128, 2);
  CHECK(ahead.total_ms == Approx(16));
  CHECK(ahead.compute_ms == Approx(6 + 4 + 4));
  CHECK(ahead.stall_ms == Approx(2));

  // A profile without T_comp' costs every layer at T_comp, as before it was measured.
  p.compute_after_read_ms.clear();
  CHECK(stile::estimate_pipeline(p, plan, 128, 2).total_ms == Approx(34));

  // The planner's plan reports the estimate's compute part.
  p.compute_after_read_ms = {{{6.0}}};
  PlannerOptions o;
  o.target_ms = 100;
  const ElasticPlan planned = stile::plan_elastic(p, 128, o);
  CHECK(planned.estimated_ms == Approx(36));
  CHECK(planned.estimated_compute_ms == Approx(18));
  CHECK(planned.compute_ms == Approx(12));  // the compute plan's sum of T_comp
}

TEST_CASE("planner: plans are cached per length bucket; a new target or budget replans and evicts", "[plan][planner]") {
  // 2 x 4, T_comp 10 ms, IO 5/10/20 ms, 2-bit versions of 200 bytes; budget 800: layer 0 whole.
  const DeviceProfile p =
      make_profile({2, 4, 32}, {5, 10, 20}, 2, 4, [](unsigned, std::size_t) { return 10.0; }, {16, 128});
  PlannerOptions o;
  o.target_ms = 50;
  o.preload_budget_bytes = 800;
  stile::Planner planner(p, {}, o);
  const ElasticPlan first = planner.plan(100);
  CHECK(planner.plans_made() == 1);
  CHECK(first.length_bucket == 128);
  CHECK(first.preload == keys({{0, 0, 2}, {0, 1, 2}, {0, 2, 2}, {0, 3, 2}}));
  CHECK(planner.plan(128).explain == first.explain);
  CHECK(planner.plans_made() == 1);  // same bucket: cached
  CHECK(planner.plan(10).length_bucket == 16);
  CHECK(planner.plans_made() == 2);
  planner.set_target_ms(50);  // unchanged: the cache stays
  CHECK(planner.cached_plans() == 2);

  // The engine's preload buffer holds the first plan's set; a smaller budget replans, and the
  // versions the new plan drops are evicted.
  stile::PreloadBuffer buffer(800);
  const std::vector<std::byte> bytes(200);
  for (const ShardKey& k : first.preload) {
    REQUIRE(buffer.insert(k, bytes, [](std::span<const std::byte>) { return stile::ShardView{}; }));
  }
  planner.set_preload_budget(400);
  CHECK(planner.cached_plans() == 0);
  const ElasticPlan second = planner.plan(100);
  CHECK(planner.plans_made() == 3);
  CHECK(second.preload == keys({{0, 0, 2}, {0, 1, 2}}));
  buffer.retain_only(second.preload);
  CHECK(buffer.size() == 2);
  CHECK(buffer.held_bytes() == 400);

  planner.set_target_ms(30);
  CHECK(planner.cached_plans() == 0);
  const ElasticPlan third = planner.plan(100);
  CHECK(planner.plans_made() == 4);
  CHECK(third.compute_layers == 2);
  CHECK_THAT(third.explain, Contains("target 30.0 ms"));
}

TEST_CASE("planner: a request before the preload buffer is full is planned for what it holds", "[plan][planner]") {
  // 2 x 4, T_comp 10 ms, IO 5/10/20 ms at 2/4/32 bits, 2-bit versions of 200 bytes; budget 800:
  // layer 0 whole at 2 bits; T = 50, head start 50 - 20 = 30.
  const DeviceProfile p = make_profile({2, 4, 32}, {5, 10, 20}, 2, 4, [](unsigned, std::size_t) { return 10.0; });
  PlannerOptions o;
  o.target_ms = 50;
  o.preload_budget_bytes = 800;
  stile::Planner planner(p, {}, o);
  const auto layer0 = keys({{0, 0, 2}, {0, 1, 2}, {0, 2, 2}, {0, 3, 2}});

  // Full buffer: layer 1 at 4 bits (AIB(1) = 30 + 10 - 40 = 0; the replay ends at 50 ms).
  const ElasticPlan full = planner.plan(100);
  CHECK(full.preload == layer0);
  CHECK(full.uniform_bits == 4);
  CHECK(full.estimated_ms == Approx(50));

  // Empty buffer: layer 0's 2-bit versions are read too (20 ms): at 4 bits AIB(1) = 10 + 10 - 40
  // < 0; at 2 bits AIB = 10, 0 and the replay ends at 50 ms. The preload set is unchanged and
  // still at 2 bits, so the request's reads fill the buffer. Not cached.
  const ElasticPlan cold = planner.plan(100, std::nullopt, [](const ShardKey&) { return false; });
  CHECK(cold.preload == layer0);
  for (const ShardChoice& c : cold.submodel.layers[0]) CHECK(c.bits == 2);
  CHECK(cold.uniform_bits == 2);
  CHECK(cold.valid);
  CHECK(cold.estimated_ms == Approx(50));
  CHECK_THAT(cold.explain, Contains("(0 held now)"));
  CHECK(planner.plans_made() == 1);

  // Costed as if full, the same submodel would read 20 ms more than planned: 70 ms.
  CHECK(stile::estimate_pipeline(p, full.submodel, 128, 2).total_ms == Approx(70));

  // Half held: two of layer 0's versions are read (10 ms): at 4 bits AIB(1) = 20 + 10 - 40 < 0.
  const ElasticPlan half = planner.plan(100, std::nullopt, [](const ShardKey& k) { return k.shard < 2; });
  CHECK(half.uniform_bits == 2);
  CHECK_THAT(half.explain, Contains("(2 held now)"));
}

TEST_CASE("planner: the word rows a request reads come off T; plans are cached per bucket and rows",
          "[plan][planner]") {
  // 2 x 2, T_comp 10 ms, IO 5/10/20 ms per shard at 2/4/32 bits, 1 ms per word row, T = 60 ms.
  const DeviceProfile p =
      make_profile({2, 4, 32}, {5, 10, 20}, 2, 2, [](unsigned, std::size_t) { return 10.0; }, {16, 128});
  PlannerOptions o;
  o.target_ms = 60;
  o.row_read_ms = 1;
  stile::Planner planner(p, {}, o);

  // Unknown rows: the bucket's 16, so 44 ms for the layers; head start 44 - 20 = 24. At 4 bits
  // AIB(1) = (24 - 20) + 10 - 20 = -6; at 2 bits both budgets are 14: pass 1 gives 2 bits.
  const ElasticPlan bucket = planner.plan(12);
  CHECK(bucket.word_rows == 16);
  CHECK(bucket.uniform_bits == 2);
  CHECK_THAT(bucket.explain, Contains("target 44.0 ms for the layers (16 word rows read first)"));
  CHECK(planner.plan(12, 16).explain == bucket.explain);
  CHECK(planner.plans_made() == 1);  // the same bucket and rows: cached

  // No rows: 60 ms for the layers; head start 40; at 32 bits AIB(1) = 0 + 10 - 40 = -30, at 4
  // bits AIB = 20, 10: pass 1 gives 4 bits. Pass 2 raises layer 0's shard 0 to 32 bits (AIB 10,
  // 0; the replay ends at exactly 60 ms), and nothing after it fits.
  const ElasticPlan none = planner.plan(12, 0);
  CHECK(none.word_rows == 0);
  CHECK(none.uniform_bits == 4);
  CHECK(none.upgrades == 1);
  CHECK(none.submodel.layers[0][0].bits == 32);
  CHECK(none.estimated_ms == Approx(60));
  CHECK_THAT(none.explain, Contains("target 60.0 ms for the layers (0 word rows read first)"));
  CHECK(planner.plans_made() == 2);
  CHECK(planner.cached_plans() == 2);
}

TEST_CASE("planner: degenerate inputs give a defined plan or a clear error", "[plan][planner]") {
  const DeviceProfile p = make_profile({2, 4, 32}, {10, 20, 30}, 3, 2,
                                       [](unsigned, std::size_t m) { return 40.0 + 10.0 * static_cast<double>(m); });
  PlannerOptions o;

  SECTION("T below one layer's compute: 1 x 1, flagged") {
    o.target_ms = 30;  // one layer of one shard takes 50
    const stile::ComputePlan cp = stile::plan_compute(p, 128, 30);
    CHECK(cp.layers == 1);
    CHECK(cp.shards == 1);
    CHECK_FALSE(cp.meets_target);
    const ElasticPlan plan = stile::plan_elastic(p, 128, o);
    CHECK(plan.shards() == 1);
    CHECK_FALSE(plan.meets_target);
    CHECK_THAT(plan.explain, Contains("over the target even at 1x1"));
  }
  SECTION("compute planning: max n*m, ties to the deeper submodel") {
    // n * (40 + 10 m) <= T. T = 110: 2 x 1 (2 * 50 = 100) beats 1 x 2 (60): same n*m, deeper
    // (2 x 2 needs 120).
    const stile::ComputePlan cp = stile::plan_compute(p, 128, 110);
    CHECK(cp.layers == 2);
    CHECK(cp.shards == 1);
    CHECK(cp.layer_ms == Approx(50));
    // T = 170: 3 x 1 (150) and 2 x 2 (120) give 3 and 4 shards: 2 x 2 (3 x 2 needs 180).
    const stile::ComputePlan cp2 = stile::plan_compute(p, 128, 170);
    CHECK(cp2.layers == 2);
    CHECK(cp2.shards == 2);
  }
  SECTION("zero preload budget: no preload, still a valid plan (the slack pays for layer 0)") {
    o.target_ms = 400;
    o.preload_budget_bytes = 0;
    const ElasticPlan plan = stile::plan_elastic(p, 128, o);
    CHECK(plan.preload.empty());
    CHECK(plan.valid);
    CHECK(plan.meets_target);
  }
  SECTION("no target (T <= 0): the whole model at the highest bitwidth, preload included") {
    o.target_ms = 0;
    o.preload_budget_bytes = 3200;  // one 32-bit version
    const ElasticPlan plan = stile::plan_elastic(p, 128, o);
    CHECK(plan.layers() == 3);
    CHECK(plan.shards() == 6);
    for (const auto& layer : plan.submodel.layers) {
      for (const ShardChoice& c : layer) CHECK(c.bits == 32);
    }
    CHECK(plan.preload == keys({{0, 0, 32}}));
    CHECK(plan.preload_bits == 32);
    CHECK(plan.meets_target);
    CHECK_THAT(plan.explain, Contains("no target"));
  }
  SECTION("a preload bitwidth the profile lacks") {
    o.target_ms = 100;
    o.preload_bits = 3;
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o), Contains("no measurements at 3 bits (it has [2, 4, 32])"));
    CHECK_THROWS_AS(stile::Planner(p, {}, o), stile::Error);
  }
  SECTION("a profile whose tables do not match its bitwidths") {
    DeviceProfile bad = p;
    bad.io_ms.pop_back();
    o.target_ms = 100;
    CHECK_THROWS_WITH(stile::plan_elastic(bad, 128, o), Contains("one entry per bitwidth"));
    DeviceProfile empty;
    CHECK_THROWS_WITH(stile::plan_elastic(empty, 128, o), Contains("the device profile is empty"));
  }
  SECTION("headroom: a share of T kept free; outside [0, 1) refused") {
    // T = 170 gives 2 x 2 (120 ms of compute, above); with 30% kept free, 119 ms: 2 x 1.
    o.target_ms = 170;
    o.headroom = 0.3;
    const ElasticPlan plan = stile::plan_elastic(p, 128, o);
    CHECK(plan.compute_layers == 2);
    CHECK(plan.compute_shards == 1);
    CHECK_THAT(plan.explain, Contains("target 119.0 ms"));
    o.headroom = 1;
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o), Contains("headroom must be in [0, 1)"));
    CHECK_THROWS_WITH(stile::Planner(p, {}, o), Contains("headroom must be in [0, 1)"));
    o.headroom = -0.1;
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o), Contains("headroom must be in [0, 1)"));
  }
  SECTION("a NaN target") {
    o.target_ms = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o), Contains("target is NaN"));
    stile::Planner planner(p);
    CHECK_THROWS_WITH(planner.set_target_ms(o.target_ms), Contains("target is NaN"));
  }
  SECTION("malformed rankings and importance orders") {
    o.target_ms = 100;
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o, {{0, 1}}), Contains("covers 1 layers, the profile has 3"));
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o, {{0, 1}, {1, 1}, {0, 1}}),
                      Contains("ranking of layer 1 is not an order of the shards 0..1"));
    o.importance = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 0}};
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o), Contains("names layer 2 shard 0 twice"));
    o.importance = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}};
    CHECK_THROWS_WITH(stile::plan_elastic(p, 128, o, {{0, 1}, {1, 0}, {0, 1}}),
                      Contains("ranks layer 1's shards differently"));
  }
}

TEST_CASE("baselines: Load&Exec, StdPL-X and PreloadModel-X on a hand-made profile", "[plan][baselines]") {
  // 4 x 4; IO per shard 2 / 4 / 16 ms at 2 / 4 / 32 bits; T_comp(m) = m ms at every bitwidth.
  const DeviceProfile p =
      make_profile({2, 4, 32}, {2, 4, 16}, 4, 4, [](unsigned, std::size_t m) { return static_cast<double>(m); });
  SECTION("T = 20 ms") {
    // Load&Exec: 16 n m + n m = 17 n m <= 20: 1 x 1 (17 ms).
    const stile::BaselinePlan le = stile::plan_load_and_exec(p, 128, 20);
    CHECK(le.name == "Load&Exec");
    CHECK(le.submodel.layers == SubmodelPlan::uniform(1, 1, 32).layers);
    CHECK(le.estimated_ms == Approx(17));
    CHECK(le.meets_target);
    // StdPL-2: IO-bound, 2 m n + m: 4 x 2 (18) and 2 x 4 (20) tie at 8 shards: the deeper one.
    const stile::BaselinePlan pl = stile::plan_std_pipeline(p, 128, 20, 2);
    CHECK(pl.name == "StdPL-2");
    CHECK(pl.submodel.layers == SubmodelPlan::uniform(4, 2, 2).layers);
    CHECK(pl.estimated_ms == Approx(18));
    // StdPL-32: 16 m n + m: 1 x 1.
    CHECK(stile::plan_std_pipeline(p, 128, 20, 32).submodel.layers == SubmodelPlan::uniform(1, 1, 32).layers);
    // PreloadModel-4: n m <= 20: the whole model (16).
    const stile::BaselinePlan pm = stile::plan_preload_model(p, 128, 20, 4);
    CHECK(pm.name == "PreloadModel-4");
    CHECK(pm.submodel.layers == SubmodelPlan::uniform(4, 4, 4).layers);
    CHECK(pm.estimated_ms == Approx(16));
  }
  SECTION("the ranking picks the shards") {
    const ShardRanking ranking{{3, 2, 1, 0}, {3, 2, 1, 0}, {0, 1, 2, 3}, {1, 0, 2, 3}};
    const stile::BaselinePlan pl = stile::plan_std_pipeline(p, 128, 20, 2, ranking);
    CHECK(pl.submodel.layers[0] == std::vector<ShardChoice>{{3, 2}, {2, 2}});
    CHECK(pl.submodel.layers[3] == std::vector<ShardChoice>{{1, 2}, {0, 2}});
  }
  SECTION("nothing fits: 1 x 1, flagged; no target: the whole model") {
    const stile::BaselinePlan le = stile::plan_load_and_exec(p, 128, 5);
    CHECK(le.submodel.layers.size() == 1);
    CHECK_FALSE(le.meets_target);
    const stile::BaselinePlan all = stile::plan_std_pipeline(p, 128, 0, 4);
    CHECK(all.submodel.layers == SubmodelPlan::uniform(4, 4, 4).layers);
    CHECK(all.meets_target);
  }
  SECTION("a bitwidth the profile lacks") {
    CHECK_THROWS_WITH(stile::plan_std_pipeline(p, 128, 20, 3), Contains("no measurements at 3 bits"));
    CHECK_THROWS_WITH(stile::plan_preload_model(p, 128, 20, 6), Contains("no measurements at 6 bits"));
  }
}
