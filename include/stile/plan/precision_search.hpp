#pragma once
// NSGA-II over (processor, number format) per node of an operator graph: the Pareto front of
// predicted latency (plan/schedule_emulator.hpp) against predicted accuracy loss (an additive
// per-node model, plan/op_accuracy_model.hpp, fitted by calibrate/op_accuracy.hpp on measured
// configurations).
//
// Encoding: integer genes, two per gene group: the processor (0..allowed processors - 1) and the
// format (an index into the group's formats, op_graph.hpp's formats_of). A gene group is a set of
// nodes that share both: every node alone for a free search; for a search whose answers the CPU
// engine executes today (ModelPrecision, plan/mapping_precision.hpp) the heads of a layer form
// one group, its two LayerNorms another, and one processor is allowed. This integer encoding is
// also what pagmo2's nsga2 takes (its integer part, nix); the algorithm here is the textbook one
// (Deb et al. 2002): fast non-dominated sort, crowding distance, binary tournament on (rank,
// crowding), single-point crossover, per-gene random-reset mutation, (mu + lambda) survival.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/plan/op_accuracy_model.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/schedule_emulator.hpp"

namespace stile {

struct PrecisionProblem {
  const OpGraph* graph = nullptr;
  const OpCostTable* costs = nullptr;
  const OpAccuracyModel* accuracy = nullptr;
  std::vector<std::size_t> group_of;                 // [node]: its gene group
  std::vector<std::vector<NumberFormat>> formats;    // [group]: the formats its nodes all have
  std::vector<std::uint8_t> processors;              // the processors allowed (cost-table indices)

  std::size_t groups() const noexcept { return formats.size(); }
  std::size_t genes() const noexcept { return 2 * formats.size(); }
  // Upper bound (inclusive) of each gene, lower bounds are 0: the integer box pagmo2 would take.
  std::vector<std::size_t> upper_bounds() const {
    std::vector<std::size_t> ub;
    for (const auto& f : formats) ub.push_back(processors.size() - 1), ub.push_back(f.size() - 1);
    return ub;
  }
  OpMapping mapping(const std::vector<std::size_t>& x) const {
    OpMapping m;
    m.processor.resize(graph->size());
    m.format.resize(graph->size());
    for (std::size_t i = 0; i < graph->size(); ++i) {
      const std::size_t gr = group_of[i];
      m.processor[i] = processors.at(x.at(2 * gr));
      m.format[i] = formats[gr].at(x.at(2 * gr + 1));
    }
    return m;
  }
  // {predicted latency (us), predicted accuracy loss}.
  std::array<double, 2> objectives(const std::vector<std::size_t>& x) const {
    const OpMapping m = mapping(x);
    return {predict_latency_us(*graph, *costs, m), accuracy->predict(m.format)};
  }
};

// Every node its own gene group, every processor of the cost table allowed.
inline PrecisionProblem free_precision_problem(const OpGraph& g, const OpCostTable& c, const OpAccuracyModel& a) {
  PrecisionProblem p{&g, &c, &a, {}, {}, {}};
  for (std::size_t i = 0; i < g.size(); ++i) {
    p.group_of.push_back(i);
    p.formats.push_back(formats_of(g.nodes[i].kind));
  }
  for (std::size_t q = 0; q < c.processors; ++q) p.processors.push_back(static_cast<std::uint8_t>(q));
  return p;
}

// The answers the CPU engine executes today: one processor, a layer's heads one group, its two
// LayerNorms one group (plan/mapping_precision.hpp's rule).
inline PrecisionProblem executable_precision_problem(const OpGraph& g, const OpCostTable& c, const OpAccuracyModel& a,
                                                     std::uint8_t processor) {
  PrecisionProblem p{&g, &c, &a, std::vector<std::size_t>(g.size()), {}, {processor}};
  require(processor < c.processors, "precision problem: processor out of range");
  std::vector<std::size_t> head_group(g.layer_nodes.size(), OpNode::kNoGroup), ln_group = head_group;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const OpNode& n = g.nodes[i];
    std::size_t* shared = nullptr;
    if (n.layer != OpNode::kNoLayer && n.kind == OpNodeKind::kAttentionHead) shared = &head_group[n.layer];
    if (n.layer != OpNode::kNoLayer && n.kind == OpNodeKind::kLayerNorm) shared = &ln_group[n.layer];
    if (shared != nullptr && *shared != OpNode::kNoGroup) {
      p.group_of[i] = *shared;
      continue;
    }
    p.group_of[i] = p.formats.size();
    p.formats.push_back(formats_of(n.kind));
    if (shared != nullptr) *shared = p.group_of[i];
  }
  return p;
}

struct ParetoPoint {
  std::vector<std::size_t> genes;
  std::array<double, 2> objectives{};  // latency us, accuracy loss
};

inline bool dominates(const std::array<double, 2>& a, const std::array<double, 2>& b) {
  return a[0] <= b[0] && a[1] <= b[1] && (a[0] < b[0] || a[1] < b[1]);
}

// The non-dominated points of `points`, one per distinct objective pair, by increasing latency.
inline std::vector<ParetoPoint> pareto_front(std::vector<ParetoPoint> points) {
  std::sort(points.begin(), points.end(), [](const ParetoPoint& a, const ParetoPoint& b) {
    return a.objectives[0] != b.objectives[0] ? a.objectives[0] < b.objectives[0] : a.objectives[1] < b.objectives[1];
  });
  std::vector<ParetoPoint> front;
  double best_loss = std::numeric_limits<double>::infinity();
  for (ParetoPoint& p : points) {
    if (p.objectives[1] < best_loss) {
      best_loss = p.objectives[1];
      front.push_back(std::move(p));
    }
  }
  return front;
}

struct Nsga2Options {
  std::size_t population = 100;  // even
  std::size_t generations = 300;
  double crossover_rate = 0.9;
  double mutation_rate = -1;  // per gene; < 0: 1 / genes
  std::uint64_t seed = 1;
};

namespace precision_search_detail {

// Fronts of `objs` (indices), best first.
inline std::vector<std::vector<std::size_t>> nondominated_sort(const std::vector<std::array<double, 2>>& objs) {
  const std::size_t n = objs.size();
  std::vector<std::vector<std::size_t>> dominated(n);
  std::vector<std::size_t> count(n, 0);
  std::vector<std::vector<std::size_t>> fronts(1);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      if (dominates(objs[i], objs[j])) dominated[i].push_back(j);
      else if (dominates(objs[j], objs[i])) ++count[i];
    }
    if (count[i] == 0) fronts[0].push_back(i);
  }
  for (std::size_t f = 0; !fronts[f].empty(); ++f) {
    std::vector<std::size_t> next;
    for (const std::size_t i : fronts[f]) {
      for (const std::size_t j : dominated[i]) {
        if (--count[j] == 0) next.push_back(j);
      }
    }
    fronts.push_back(std::move(next));
  }
  fronts.pop_back();
  return fronts;
}

inline void crowding(const std::vector<std::array<double, 2>>& objs, const std::vector<std::size_t>& front,
                     std::vector<double>& dist) {
  for (const std::size_t i : front) dist[i] = 0;
  for (std::size_t m = 0; m < 2; ++m) {
    std::vector<std::size_t> s = front;
    std::sort(s.begin(), s.end(), [&](std::size_t a, std::size_t b) { return objs[a][m] < objs[b][m]; });
    const double span = objs[s.back()][m] - objs[s.front()][m];
    dist[s.front()] = dist[s.back()] = std::numeric_limits<double>::infinity();
    if (span <= 0) continue;
    for (std::size_t k = 1; k + 1 < s.size(); ++k) dist[s[k]] += (objs[s[k + 1]][m] - objs[s[k - 1]][m]) / span;
  }
}

}  // namespace precision_search_detail

// NSGA-II (see the top). Calls progress(generation, generations) after each generation when set.
inline std::vector<ParetoPoint> nsga2_search(const PrecisionProblem& p, const Nsga2Options& o,
                                             const std::function<void(std::size_t, std::size_t)>& progress = {}) {
  using namespace precision_search_detail;
  require(p.graph != nullptr && p.costs != nullptr && p.accuracy != nullptr && !p.processors.empty() &&
              p.groups() >= 1 && o.population >= 4,
          "NSGA-II: the problem needs a graph, costs, an accuracy model, processors, and a population >= 4");
  const std::vector<std::size_t> ub = p.upper_bounds();
  const std::size_t genes = ub.size();
  const double mut = o.mutation_rate < 0 ? 1.0 / double(genes) : o.mutation_rate;
  const std::size_t pop_size = o.population + (o.population % 2);
  std::mt19937_64 rng(o.seed);
  auto u01 = [&] { return double(rng() >> 11) * 0x1p-53; };
  std::vector<std::vector<std::size_t>> pop(pop_size, std::vector<std::size_t>(genes));
  for (auto& x : pop) {
    for (std::size_t k = 0; k < genes; ++k) x[k] = rng() % (ub[k] + 1);
  }
  std::vector<std::array<double, 2>> objs;
  for (const auto& x : pop) objs.push_back(p.objectives(x));
  std::vector<std::size_t> rank(pop_size, 0);
  std::vector<double> dist(pop_size, 0);
  auto rank_all = [&](const std::vector<std::array<double, 2>>& ob, std::vector<std::size_t>& rk, std::vector<double>& ds) {
    const auto fronts = nondominated_sort(ob);
    for (std::size_t f = 0; f < fronts.size(); ++f) {
      for (const std::size_t i : fronts[f]) rk[i] = f;
      crowding(ob, fronts[f], ds);
    }
    return fronts;
  };
  rank_all(objs, rank, dist);
  for (std::size_t gen = 0; gen < o.generations; ++gen) {
    auto pick = [&]() -> const std::vector<std::size_t>& {
      const std::size_t a = rng() % pop_size, b = rng() % pop_size;
      if (rank[a] != rank[b]) return rank[a] < rank[b] ? pop[a] : pop[b];
      return dist[a] >= dist[b] ? pop[a] : pop[b];
    };
    std::vector<std::vector<std::size_t>> all = pop;
    std::vector<std::array<double, 2>> all_objs = objs;
    while (all.size() < 2 * pop_size) {
      std::vector<std::size_t> a = pick(), b = pick();
      if (genes >= 2 && u01() < o.crossover_rate) {
        const std::size_t cut = 1 + rng() % (genes - 1);
        for (std::size_t k = cut; k < genes; ++k) std::swap(a[k], b[k]);
      }
      for (auto* c : {&a, &b}) {
        for (std::size_t k = 0; k < genes; ++k) {
          if (ub[k] > 0 && u01() < mut) (*c)[k] = rng() % (ub[k] + 1);
        }
        all_objs.push_back(p.objectives(*c));
        all.push_back(std::move(*c));
      }
    }
    std::vector<std::size_t> all_rank(all.size(), 0);
    std::vector<double> all_dist(all.size(), 0);
    const auto fronts = rank_all(all_objs, all_rank, all_dist);
    std::vector<std::size_t> keep;
    for (const auto& f : fronts) {
      if (keep.size() + f.size() <= pop_size) {
        keep.insert(keep.end(), f.begin(), f.end());
        continue;
      }
      std::vector<std::size_t> s = f;
      std::sort(s.begin(), s.end(), [&](std::size_t a, std::size_t b) { return all_dist[a] > all_dist[b]; });
      keep.insert(keep.end(), s.begin(), s.begin() + static_cast<std::ptrdiff_t>(pop_size - keep.size()));
      break;
    }
    std::vector<std::vector<std::size_t>> next;
    std::vector<std::array<double, 2>> next_objs;
    for (const std::size_t i : keep) next.push_back(all[i]), next_objs.push_back(all_objs[i]);
    pop = std::move(next);
    objs = std::move(next_objs);
    rank_all(objs, rank, dist);
    if (progress) progress(gen + 1, o.generations);
  }
  std::vector<ParetoPoint> points;
  for (std::size_t i = 0; i < pop.size(); ++i) points.push_back({pop[i], objs[i]});
  return pareto_front(std::move(points));
}

// Every genome (the problem must be small: at most 2^22 of them): the exact front.
inline std::vector<ParetoPoint> brute_force_front(const PrecisionProblem& p) {
  const std::vector<std::size_t> ub = p.upper_bounds();
  double total = 1;
  for (const std::size_t u : ub) total *= double(u + 1);
  require(total <= double(1 << 22), "brute-force front: too many genomes to enumerate");
  std::vector<ParetoPoint> all;
  std::vector<std::size_t> x(ub.size(), 0);
  for (;;) {
    all.push_back({x, p.objectives(x)});
    std::size_t k = 0;
    while (k < x.size() && x[k] == ub[k]) x[k++] = 0;
    if (k == x.size()) break;
    ++x[k];
  }
  return pareto_front(std::move(all));
}

}  // namespace stile
