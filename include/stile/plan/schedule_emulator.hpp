#pragma once
// Predicts the end-to-end latency of a mapping (a processor and a number format per node of an
// operator graph, plan/op_graph.hpp) by list-scheduling the graph on the profile's costs
// (plan/op_latency_profile.hpp).
//
// The schedule: nodes are taken in index (topological) order; each starts when its processor is
// free and every input has arrived, an input from another processor arriving `transfer` after its
// producer finished (call + bytes x per-byte cost of that pair). A processor runs one node at a
// time, so parallel branches (attention heads) run concurrently exactly when they sit on
// different processors. Transfers are delays on the edge: they occupy neither processor (on CPU
// clusters the cost is the consumer's cache misses and the hand-off's wake-up, both measured as a
// delay by calibrate/op_latency_profiler.hpp). The prediction is the schedule's makespan plus the
// request cost of the number of processors the mapping uses (the executor's driver: handing the
// request over, waking the processors and itself; the profile's request_us at the graph's length,
// which may be negative: a correction of the nodes' sum), never below 0. Transfer costs are the
// profile's at the graph's length.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/op_latency_profile.hpp"

namespace stile {

// A processor (index into the profile's processors) and a number format for every node.
struct OpMapping {
  std::vector<std::uint8_t> processor;
  std::vector<NumberFormat> format;

  static OpMapping uniform(std::size_t nodes, std::uint8_t proc, NumberFormat f = NumberFormat::kF32) {
    return {std::vector<std::uint8_t>(nodes, proc), std::vector<NumberFormat>(nodes, f)};
  }
};

// The costs the emulator reads, looked up once from a profile (or filled by hand in tests):
// node_us[node][processor][format] (infinity where the format or processor lacks it) and the
// transfer cost of each ordered processor pair.
struct OpCostTable {
  std::size_t processors = 0;
  std::vector<std::vector<std::array<double, kNumberFormats>>> node_us;
  std::vector<std::vector<TransferCost>> transfer;
  std::vector<double> request_us;  // [processors used - 1]; empty: no request cost

  static constexpr double kMissing = std::numeric_limits<double>::infinity();

  static OpCostTable from_profile(const OpGraph& g, const OpLatencyProfile& p) {
    OpGraphShape want = g.shape;
    want.tokens = 0;
    require(want == p.shape, "schedule emulator: the profile was measured for another model shape");
    OpCostTable t;
    t.processors = p.processors.size();
    t.transfer.assign(t.processors, std::vector<TransferCost>(t.processors));
    for (std::size_t a = 0; a < t.processors; ++a) {
      for (std::size_t b = 0; b < t.processors; ++b) t.transfer[a][b] = p.transfer_at(a, b, g.shape.tokens);
    }
    if (p.request_measured) {  // at the graph's length
      for (std::size_t k = 1; k <= t.processors; ++k) t.request_us.push_back(p.request_cost_us(k, g.shape.tokens));
    }
    t.node_us.resize(g.size());
    for (std::size_t n = 0; n < g.size(); ++n) {
      t.node_us[n].resize(t.processors);
      for (std::size_t q = 0; q < t.processors; ++q) {
        for (std::size_t f = 0; f < kNumberFormats; ++f) {
          const auto fmt = static_cast<NumberFormat>(f);
          t.node_us[n][q][f] = has_format(g.nodes[n].kind, fmt) && p.has(q, g.nodes[n].kind, fmt)
                                   ? p.latency_us(q, g.nodes[n].kind, fmt, g.shape.tokens)
                                   : kMissing;
        }
      }
    }
    return t;
  }
  // A table of `nodes` x `procs` with every cost `us` in every format and free transfers.
  static OpCostTable constant(std::size_t nodes, std::size_t procs, double us) {
    OpCostTable t;
    t.processors = procs;
    std::array<double, kNumberFormats> all;
    all.fill(us);
    t.node_us.assign(nodes, std::vector<std::array<double, kNumberFormats>>(procs, all));
    t.transfer.assign(procs, std::vector<TransferCost>(procs));
    return t;
  }
  double cost(std::size_t node, std::size_t proc, NumberFormat f) const {
    return node_us[node][proc][static_cast<std::size_t>(f)];
  }
  double transfer_us(std::size_t from, std::size_t to, std::size_t bytes) const {
    return from == to ? 0.0 : transfer[from][to].us(bytes);
  }
  // The request cost of a mapping that uses `used` processors (0 without a request cost).
  double request_cost_us(std::size_t used) const {
    return used == 0 || request_us.empty() ? 0.0 : request_us.at(std::min(used, request_us.size()) - 1);
  }
};

struct OpSchedule {
  std::vector<double> start_us, finish_us;
  double makespan_us = 0;  // the last node's finish plus request_us
  double request_us = 0;   // the request cost (the processors used)
  std::vector<double> busy_us;  // [processor]: time it computes
};

// The list schedule of `m` (see the top). A mapping of the wrong size, a processor out of range or
// a format a node lacks (an infinite cost) is a stile::Error naming the node.
inline OpSchedule emulate_schedule(const OpGraph& g, const OpCostTable& costs, const OpMapping& m) {
  require(m.processor.size() == g.size() && m.format.size() == g.size(),
          "schedule emulator: the mapping has " + std::to_string(m.processor.size()) + " processors and " +
              std::to_string(m.format.size()) + " formats for a graph of " + std::to_string(g.size()) + " nodes");
  require(costs.node_us.size() == g.size(), "schedule emulator: the cost table is for another graph");
  OpSchedule s;
  s.start_us.resize(g.size());
  s.finish_us.resize(g.size());
  s.busy_us.assign(costs.processors, 0.0);
  std::vector<double> free_at(costs.processors, 0.0);
  std::vector<bool> used(costs.processors, false);
  for (std::size_t n = 0; n < g.size(); ++n) {
    const std::size_t p = m.processor[n];
    if (p >= costs.processors) {
      throw Error("schedule emulator: node " + g.nodes[n].name + " is mapped to processor " + std::to_string(p) +
                  " of " + std::to_string(costs.processors));
    }
    const double c = costs.cost(n, p, m.format[n]);
    if (!(c < OpCostTable::kMissing)) {
      throw Error(std::string("schedule emulator: node ") + g.nodes[n].name + " has no cost in " +
                  to_string(m.format[n]) + " on processor " + std::to_string(p));
    }
    double ready = free_at[p];
    for (const OpEdge& e : g.nodes[n].inputs) {
      ready = std::max(ready, s.finish_us[e.from] + costs.transfer_us(m.processor[e.from], p, e.bytes));
    }
    s.start_us[n] = ready;
    s.finish_us[n] = ready + c;
    free_at[p] = s.finish_us[n];
    s.busy_us[p] += c;
    used[p] = true;
    s.makespan_us = std::max(s.makespan_us, s.finish_us[n]);
  }
  s.request_us = costs.request_cost_us(static_cast<std::size_t>(std::count(used.begin(), used.end(), true)));
  s.makespan_us = std::max(0.0, s.makespan_us + s.request_us);  // a request cost may be negative (a correction)
  return s;
}

inline double predict_latency_us(const OpGraph& g, const OpCostTable& costs, const OpMapping& m) {
  return emulate_schedule(g, costs, m).makespan_us;
}

}  // namespace stile
