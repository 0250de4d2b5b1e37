// The mapping searches against brute force on graphs small enough to enumerate: DNN-SMO's GA
// (plan/mapping_ga.hpp) finds the optimum processor mapping; NSGA-II (plan/precision_search.hpp)
// returns a non-dominated front holding the exact front's extreme points. Costs are seeded random
// (heterogeneous processors, transfers that matter), so the optimum is not a uniform mapping.
#include <cstddef>
#include <set>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/plan/mapping_ga.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/precision_search.hpp"
#include "support/rng.hpp"

using stile::NumberFormat;

namespace {

// Random costs: each node 1..100 us per processor (independently, so processors differ per node),
// formats cheaper than fp32 by a random factor, transfers 2 us + 0.001 us per byte.
stile::OpCostTable random_costs(const stile::OpGraph& g, std::size_t procs, std::uint64_t seed) {
  stile_test::Rng rng{seed};
  stile::OpCostTable t = stile::OpCostTable::constant(g.size(), procs, stile::OpCostTable::kMissing);
  for (std::size_t n = 0; n < g.size(); ++n) {
    for (std::size_t p = 0; p < procs; ++p) {
      const double fp32 = 1 + 99 * (rng() + 1) / 2;
      for (const NumberFormat f : stile::formats_of(g.nodes[n].kind)) {
        t.node_us[n][p][static_cast<std::size_t>(f)] = f == NumberFormat::kF32 ? fp32 : fp32 * (0.2 + 0.4 * (rng() + 1));
      }
    }
  }
  for (std::size_t a = 0; a < procs; ++a) {
    for (std::size_t b = 0; b < procs; ++b) t.transfer[a][b] = {2.0, 0.001};
  }
  return t;
}

stile::OpAccuracyModel random_accuracy(const stile::OpGraph& g, std::uint64_t seed) {
  stile_test::Rng rng{seed};
  stile::OpAccuracyModel a;
  a.loss.resize(g.size());
  for (std::size_t n = 0; n < g.size(); ++n) {
    a.loss[n].fill(0);
    for (const NumberFormat f : stile::formats_of(g.nodes[n].kind)) {
      if (f != NumberFormat::kF32) a.loss[n][static_cast<std::size_t>(f)] = 0.001 * (rng() + 1.5);
    }
  }
  return a;
}

}  // namespace

TEST_CASE("mapping GA: DNN-SMO's GA finds the brute-force optimum on small graphs") {
  struct Case {
    stile::OpGraphShape shape;
    std::size_t procs;
  };
  // 1 layer of 4 heads (13 nodes, 2^13 mappings), 2 layers of 2 heads (19 nodes, 2^19), and
  // 3 processors on 1 layer of 2 heads (11 nodes, 3^11).
  const std::vector<Case> cases{{{.layers = 1, .hidden = 8, .heads = 4, .ffn = 16, .tokens = 4}, 2},
                                {{.layers = 2, .hidden = 8, .heads = 2, .ffn = 16, .tokens = 4}, 2},
                                {{.layers = 1, .hidden = 8, .heads = 2, .ffn = 16, .tokens = 4}, 3}};
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const stile::OpGraph g = stile::bert_op_graph(cases[c].shape);
    const stile::OpCostTable costs = random_costs(g, cases[c].procs, 100 + c);
    std::vector<stile::FormattedProcessor> procs;
    for (std::size_t q = 0; q < cases[c].procs; ++q) procs.push_back({q, NumberFormat::kF32});
    const stile::MappingProblem problem = stile::mapping_problem(g, costs, procs);
    const stile::GaResult exact = stile::brute_force_mapping(problem);
    // The optimum is not trivial: better than every uniform mapping.
    for (std::size_t q = 0; q < cases[c].procs; ++q) {
      CHECK(exact.best_us < problem.latency_us(stile::Genome(g.size(), static_cast<std::uint8_t>(q))));
    }
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      INFO("case " << c << " seed " << seed);
      stile::GaOptions o;
      o.generations = 3000;
      o.seed = seed;
      const stile::GaResult r = stile::dnn_smo_ga(problem, o);
      CHECK(r.best_us == Approx(exact.best_us).epsilon(1e-12));
      CHECK(problem.latency_us(r.best) == r.best_us);
      // The trace never gets worse.
      for (std::size_t k = 1; k < r.best_per_generation.size(); ++k) {
        CHECK(r.best_per_generation[k] <= r.best_per_generation[k - 1]);
      }
      CHECK(stile::generations_to_reach(r, exact.best_us, 0) < r.best_per_generation.size());
    }
  }
}

TEST_CASE("mapping GA: DNN-SMO's answer is never predicted slower than one processor") {
  // Spreading cannot pay: a transfer costs more than the whole graph on one processor. Processor
  // 1 is the faster but for the embedding, which the custom initialization therefore always puts
  // on processor 0 (its fastest), and pays a transfer.
  const stile::OpGraph g = stile::bert_op_graph({.layers = 1, .hidden = 8, .heads = 4, .ffn = 16, .tokens = 4});
  stile::OpCostTable costs = stile::OpCostTable::constant(g.size(), 2, 2.0);
  for (auto& node : costs.node_us) node[1].fill(1.0);
  REQUIRE(g.nodes[0].kind == stile::OpNodeKind::kEmbedding);
  costs.node_us[0][0].fill(0.5);
  costs.transfer[0][1].call_us = costs.transfer[1][0].call_us = 1000;
  const stile::MappingProblem problem =
      stile::mapping_problem(g, costs, {{0, NumberFormat::kF32}, {1, NumberFormat::kF32}});
  stile::GaOptions o;
  o.generations = 0;
  const stile::GaResult r = stile::dnn_smo_ga(problem, o);
  CHECK(r.best == stile::Genome(g.size(), 1));
  CHECK(r.best_us == problem.latency_us(stile::Genome(g.size(), 1)));
}

TEST_CASE("mapping GA: the standard GA's result is a valid mapping no better than the optimum") {
  const stile::OpGraph g = stile::bert_op_graph({.layers = 1, .hidden = 8, .heads = 4, .ffn = 16, .tokens = 4});
  const stile::OpCostTable costs = random_costs(g, 2, 7);
  const stile::MappingProblem problem =
      stile::mapping_problem(g, costs, {{0, NumberFormat::kF32}, {1, NumberFormat::kF32}});
  const stile::GaResult exact = stile::brute_force_mapping(problem);
  stile::GaOptions o;
  o.generations = 100;
  const stile::GaResult r = stile::plain_ga(problem, o);
  CHECK(r.best_us >= exact.best_us);
  CHECK(problem.latency_us(r.best) == r.best_us);
  CHECK(r.evaluations.back() == 50 + 100 * 49);
}

TEST_CASE("NSGA-II: fronts are non-dominated and hold the exact front's extreme points") {
  struct Case {
    stile::OpGraphShape shape;
    std::size_t procs;
    bool executable;
  };
  // Small enough to enumerate: a free format per node on one processor (1 layer of 2 heads:
  // 11,664 genomes); the executable grouping (a layer's heads and LayerNorms tied) over two
  // processors (1 layer: 995,328) and on one processor over 2 layers (1,259,712).
  const std::vector<Case> cases{{{.layers = 1, .hidden = 8, .heads = 2, .ffn = 16, .tokens = 4}, 1, false},
                                {{.layers = 1, .hidden = 8, .heads = 2, .ffn = 16, .tokens = 4}, 2, true},
                                {{.layers = 2, .hidden = 8, .heads = 2, .ffn = 16, .tokens = 4}, 1, true}};
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const stile::OpGraph g = stile::bert_op_graph(cases[c].shape);
    const stile::OpCostTable costs = random_costs(g, cases[c].procs, 200 + c);
    const stile::OpAccuracyModel acc = random_accuracy(g, 300 + c);
    stile::PrecisionProblem p = cases[c].executable ? stile::executable_precision_problem(g, costs, acc, 0)
                                                    : stile::free_precision_problem(g, costs, acc);
    p.processors.clear();
    for (std::size_t q = 0; q < cases[c].procs; ++q) p.processors.push_back(static_cast<std::uint8_t>(q));
    const std::vector<stile::ParetoPoint> exact = stile::brute_force_front(p);
    REQUIRE(exact.size() >= 3);
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      INFO("case " << c << " seed " << seed);
      stile::Nsga2Options o;
      o.population = 60;
      o.generations = 250;
      o.seed = seed;
      const std::vector<stile::ParetoPoint> front = stile::nsga2_search(p, o);
      REQUIRE(!front.empty());
      for (const auto& a : front) {
        CHECK(p.objectives(a.genes) == a.objectives);
        for (const auto& b : front) CHECK_FALSE(stile::dominates(a.objectives, b.objectives));
        // No exact-front point dominates... only points of the exact front may: none is below it.
        for (const auto& e : exact) CHECK_FALSE(stile::dominates(a.objectives, e.objectives));
        if (cases[c].executable && cases[c].procs == 1) {
          CHECK(stile::expressible_as_model_precision(g, p.mapping(a.genes).format));
        }
      }
      // The extreme points: the fastest mapping, and the most accurate one (least latency among them).
      auto has = [&](const stile::ParetoPoint& e) {
        for (const auto& a : front) {
          if (a.objectives[0] == Approx(e.objectives[0]).epsilon(1e-12) &&
              a.objectives[1] == Approx(e.objectives[1]).margin(1e-15)) {
            return true;
          }
        }
        return false;
      };
      CHECK(has(exact.front()));
      CHECK(has(exact.back()));
    }
  }
}

TEST_CASE("NSGA-II: the Pareto filter keeps exactly the non-dominated points") {
  std::vector<stile::ParetoPoint> pts;
  for (const auto& o : std::vector<std::array<double, 2>>{{1, 5}, {2, 3}, {2, 4}, {3, 3}, {4, 1}, {5, 1}, {1, 6}}) {
    pts.push_back({{}, o});
  }
  const std::vector<stile::ParetoPoint> f = stile::pareto_front(pts);
  REQUIRE(f.size() == 3);
  CHECK(f[0].objectives == std::array<double, 2>{1, 5});
  CHECK(f[1].objectives == std::array<double, 2>{2, 3});
  CHECK(f[2].objectives == std::array<double, 2>{4, 1});
}
