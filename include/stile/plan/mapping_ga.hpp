#pragma once
// DNN-SMO's genetic mapping (Kornelsen's thesis): which processor runs each node of an operator
// graph (plan/op_graph.hpp), for the least predicted latency (plan/schedule_emulator.hpp).
//
//   genome         one processor per node
//   fitness        1 / predicted latency (we minimize the latency, the same order)
//   population     50, steady state: each generation breeds one child from two parents chosen by
//                  binary tournament (single-point crossover, then the mutations below); the
//                  child replaces the worst member when it is better and not already present
//   initialization sequential nodes on their fastest processor, parallel-branch nodes random;
//                  half the population copies layer 0's genes to every identical layer (gene reuse);
//                  and one member per processor with every node on it (ours: the answer is then
//                  never predicted slower than one processor, which the rest can miss when
//                  hand-offs and the request cost outweigh what spreading gains, as at 32 tokens)
//   mutation       per gene, rate base_rate + parallel_rate * (parallelism - 1) / (max - 1): the
//                  more branches a node is parallel with, the likelier it moves
//   branch-level   with branch_rate, one branch group is re-split: either all of its branches on
//                  one random processor, or dealt round-robin over the processors in random order
//   gene reuse     with reuse_rate, one layer's genes are copied onto another identical layer
//                  (identical: same slots; every BERT layer is)
// The standard GA it is compared with (plain_ga below): generational, random initialization,
// binary tournament, single-point crossover, uniform mutation at 1/n per gene, one elite.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/schedule_emulator.hpp"

namespace stile {

using Genome = std::vector<std::uint8_t>;

// What a GA maps: the graph (its branch groups and layers), the processor count, each node's cost
// per processor (for the custom initialization) and the objective, predicted latency.
struct MappingProblem {
  const OpGraph* graph = nullptr;
  std::size_t processors = 0;
  std::vector<std::vector<double>> node_us;            // [node][processor]
  std::function<double(const Genome&)> latency_us;      // smaller is better
};

struct GaOptions {
  std::size_t population = 50;
  std::size_t generations = 1000;  // steady state: one child each; plain_ga: one population each
  double base_rate = -1;           // < 0: 1 / nodes
  double parallel_rate = 0.02;  // chosen on the MiniLM graph (docs/design-notes.md): 0.1 moved ~8 heads per child
  double branch_rate = 0.2;
  double reuse_rate = 0.2;
  std::uint64_t seed = 1;
};

struct GaResult {
  Genome best;
  double best_us = std::numeric_limits<double>::infinity();
  std::vector<double> best_per_generation;   // best latency after each generation (index 0: initial)
  std::vector<std::size_t> evaluations;      // evaluations made by the end of each generation

  // The end of a generation: keep the population's best if it beats the best so far.
  void record_generation(const std::vector<Genome>& pop, const std::vector<double>& fit, std::size_t evals) {
    const std::size_t b = static_cast<std::size_t>(std::min_element(fit.begin(), fit.end()) - fit.begin());
    if (fit[b] < best_us) best_us = fit[b], best = pop[b];
    best_per_generation.push_back(best_us);
    evaluations.push_back(evals);
  }
};

// The first generation whose best is within `tolerance` (0.01: 1%) of `target_us`; npos if none.
inline std::size_t generations_to_reach(const GaResult& r, double target_us, double tolerance = 0.01) {
  for (std::size_t g = 0; g < r.best_per_generation.size(); ++g) {
    if (r.best_per_generation[g] <= target_us * (1 + tolerance)) return g;
  }
  return static_cast<std::size_t>(-1);
}

namespace mapping_ga_detail {

inline void check(const MappingProblem& p, const GaOptions& o) {
  require(p.graph != nullptr && p.processors >= 1 && p.processors <= 255 && p.latency_us,
          "mapping GA: the problem needs a graph, 1..255 processors and an objective");
  require(p.node_us.size() == p.graph->size(), "mapping GA: node_us must have one row per node");
  require(o.population >= 2, "mapping GA: the population needs at least 2 members");
}

inline Genome crossover(const Genome& a, const Genome& b, std::mt19937_64& rng) {
  Genome c = a;
  if (a.size() < 2) return c;
  const std::size_t cut = 1 + static_cast<std::size_t>(rng() % (a.size() - 1));
  std::copy(b.begin() + static_cast<std::ptrdiff_t>(cut), b.end(), c.begin() + static_cast<std::ptrdiff_t>(cut));
  return c;
}

inline std::uint8_t other_processor(std::uint8_t current, std::size_t processors, std::mt19937_64& rng) {
  if (processors < 2) return current;
  const auto r = static_cast<std::uint8_t>(rng() % (processors - 1));
  return r >= current ? static_cast<std::uint8_t>(r + 1) : r;
}

inline double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1p-53; }

}  // namespace mapping_ga_detail

// progress(generation, generations), when set, is called every 1% of the generations.
inline GaResult dnn_smo_ga(const MappingProblem& p, const GaOptions& o,
                           const std::function<void(std::size_t, std::size_t)>& progress = {}) {
  using namespace mapping_ga_detail;
  check(p, o);
  const OpGraph& g = *p.graph;
  const std::size_t n = g.size();
  std::mt19937_64 rng(o.seed);
  std::size_t max_par = 1;
  for (const OpNode& node : g.nodes) max_par = std::max(max_par, node.parallelism);
  const double base = o.base_rate < 0 ? 1.0 / double(n) : o.base_rate;
  std::vector<double> rate(n);
  for (std::size_t i = 0; i < n; ++i) {
    rate[i] = base + (max_par > 1 ? o.parallel_rate * double(g.nodes[i].parallelism - 1) / double(max_par - 1) : 0.0);
  }
  std::vector<std::vector<std::size_t>> groups(g.groups);
  for (std::size_t i = 0; i < n; ++i) {
    if (g.nodes[i].branch_group != OpNode::kNoGroup) groups[g.nodes[i].branch_group].push_back(i);
  }
  auto copy_layer = [&](Genome& x, std::size_t from, std::size_t to) {
    for (std::size_t s = 0; s < g.layer_nodes[from].size(); ++s) x[g.layer_nodes[to][s]] = x[g.layer_nodes[from][s]];
  };

  GaResult r;
  std::vector<Genome> pop;
  std::vector<double> fit;
  std::size_t evals = 0;
  auto evaluate = [&](const Genome& x) {
    ++evals;
    return p.latency_us(x);
  };
  for (std::size_t k = 0; k < o.population; ++k) {
    Genome x(n, static_cast<std::uint8_t>(k % p.processors));  // k < processors: every node on processor k
    for (std::size_t i = 0; k >= p.processors && i < n; ++i) {
      if (g.nodes[i].parallelism > 1) {
        x[i] = static_cast<std::uint8_t>(rng() % p.processors);
      } else {
        const auto& c = p.node_us[i];
        x[i] = static_cast<std::uint8_t>(std::min_element(c.begin(), c.end()) - c.begin());
      }
    }
    if (k % 2 == 1) {
      for (std::size_t l = 1; l < g.layer_nodes.size(); ++l) copy_layer(x, 0, l);
    }
    fit.push_back(evaluate(x));
    pop.push_back(std::move(x));
  }
  r.record_generation(pop, fit, evals);
  auto tournament = [&]() -> const Genome& {
    const std::size_t a = rng() % pop.size(), b = rng() % pop.size();
    return fit[a] <= fit[b] ? pop[a] : pop[b];
  };
  for (std::size_t gen = 0; gen < o.generations; ++gen) {
    Genome child = crossover(tournament(), tournament(), rng);
    for (std::size_t i = 0; i < n; ++i) {
      if (uniform01(rng) < rate[i]) child[i] = other_processor(child[i], p.processors, rng);
    }
    if (!groups.empty() && uniform01(rng) < o.branch_rate) {
      std::vector<std::size_t> br = groups[rng() % groups.size()];
      if (rng() % 2 == 0) {
        const auto q = static_cast<std::uint8_t>(rng() % p.processors);
        for (const std::size_t i : br) child[i] = q;
      } else {
        for (std::size_t i = br.size(); i > 1; --i) std::swap(br[i - 1], br[rng() % i]);
        const std::size_t offset = rng() % p.processors;
        for (std::size_t j = 0; j < br.size(); ++j) child[br[j]] = static_cast<std::uint8_t>((j + offset) % p.processors);
      }
    }
    if (g.layer_nodes.size() >= 2 && uniform01(rng) < o.reuse_rate) {
      const std::size_t from = rng() % g.layer_nodes.size();
      std::size_t to = rng() % (g.layer_nodes.size() - 1);
      if (to >= from) ++to;
      copy_layer(child, from, to);
    }
    const double f = evaluate(child);
    const std::size_t worst = static_cast<std::size_t>(std::max_element(fit.begin(), fit.end()) - fit.begin());
    if (f < fit[worst] && std::find(pop.begin(), pop.end(), child) == pop.end()) {
      pop[worst] = std::move(child);
      fit[worst] = f;
    }
    r.record_generation(pop, fit, evals);
    if (progress && ((gen + 1) * 100 / o.generations != gen * 100 / o.generations)) progress(gen + 1, o.generations);
  }
  return r;
}

// The standard GA (see the top): `generations` generations of `population` children each.
inline GaResult plain_ga(const MappingProblem& p, const GaOptions& o) {
  using namespace mapping_ga_detail;
  check(p, o);
  const std::size_t n = p.graph->size();
  std::mt19937_64 rng(o.seed);
  GaResult r;
  std::vector<Genome> pop(o.population, Genome(n));
  std::vector<double> fit;
  std::size_t evals = 0;
  for (Genome& x : pop) {
    for (auto& gene : x) gene = static_cast<std::uint8_t>(rng() % p.processors);
    fit.push_back(p.latency_us(x));
    ++evals;
  }
  r.record_generation(pop, fit, evals);
  for (std::size_t gen = 0; gen < o.generations; ++gen) {
    auto tournament = [&]() -> const Genome& {
      const std::size_t a = rng() % pop.size(), b = rng() % pop.size();
      return fit[a] <= fit[b] ? pop[a] : pop[b];
    };
    std::vector<Genome> next{r.best};  // one elite
    std::vector<double> next_fit{r.best_us};
    while (next.size() < o.population) {
      Genome child = crossover(tournament(), tournament(), rng);
      for (auto& gene : child) {
        if (uniform01(rng) < 1.0 / double(n)) gene = other_processor(gene, p.processors, rng);
      }
      next_fit.push_back(p.latency_us(child));
      ++evals;
      next.push_back(std::move(child));
    }
    pop = std::move(next);
    fit = std::move(next_fit);
    r.record_generation(pop, fit, evals);
  }
  return r;
}

// Every genome of a problem small enough to enumerate (processors^nodes <= 2^22): the optimum.
inline GaResult brute_force_mapping(const MappingProblem& p) {
  const std::size_t n = p.graph->size();
  double total = 1;
  for (std::size_t i = 0; i < n; ++i) total *= double(p.processors);
  require(total <= double(1 << 22), "brute-force mapping: too many genomes to enumerate");
  GaResult r;
  Genome x(n, 0);
  for (;;) {
    const double f = p.latency_us(x);
    if (f < r.best_us) r.best_us = f, r.best = x;
    std::size_t i = 0;
    while (i < n && ++x[i] == p.processors) x[i++] = 0;
    if (i == n) break;
  }
  return r;
}

// Processors as the GA sees them: a profile processor running one number format (two CPU
// clusters in different formats, say). A node runs in its processor's format when it has it,
// else in fp32.
struct FormattedProcessor {
  std::size_t processor = 0;  // index into the cost table's processors
  NumberFormat format = NumberFormat::kF32;
};

inline OpMapping mapping_of(const OpGraph& g, const std::vector<FormattedProcessor>& procs, const Genome& x) {
  OpMapping m;
  m.processor.resize(g.size());
  m.format.resize(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const FormattedProcessor& q = procs.at(x[i]);
    m.processor[i] = static_cast<std::uint8_t>(q.processor);
    m.format[i] = has_format(g.nodes[i].kind, q.format) ? q.format : NumberFormat::kF32;
  }
  return m;
}

// The GA's problem over `procs` on a cost table; g and costs must outlive it.
inline MappingProblem mapping_problem(const OpGraph& g, const OpCostTable& costs, std::vector<FormattedProcessor> procs) {
  require(!procs.empty(), "mapping problem: no processors");
  MappingProblem p;
  p.graph = &g;
  p.processors = procs.size();
  p.node_us.assign(g.size(), std::vector<double>(procs.size()));
  for (std::size_t i = 0; i < g.size(); ++i) {
    for (std::size_t q = 0; q < procs.size(); ++q) {
      const NumberFormat f = has_format(g.nodes[i].kind, procs[q].format) ? procs[q].format : NumberFormat::kF32;
      p.node_us[i][q] = costs.cost(i, procs[q].processor, f);
    }
  }
  p.latency_us = [&g, &costs, procs = std::move(procs)](const Genome& x) {
    return predict_latency_us(g, costs, mapping_of(g, procs, x));
  };
  return p;
}

}  // namespace stile
