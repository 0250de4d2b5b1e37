#pragma once
// The two-stage planner of the elastic engine (STI's, with our departures as options): for a
// request of `tokens` tokens (planned per length bucket) that first reads `word_rows` word rows,
// which submodel to run (n layers x m shards, each layer's shards by importance), the bitwidth of
// each shard, and the versions the preload buffer should hold, so that the layers' compute plus
// the IO the pipeline cannot hide fit the target T. The method, and how it differs from the
// published one: docs/planner.md.
//
//   Planner planner(profile, ranking, {.target_ms = 60, .preload_budget_bytes = 1 << 20});
//   ElasticPlan p = planner.plan(tokens, word_rows, held);  // cached per (bucket, word rows)
//
// @pre  the profile's tables match its bitwidths; the ranking and importance order are
//       permutations of the profile's shards; T is not NaN; headroom in [0, 1); slots >= 1
//       (stile::Error naming the problem otherwise, at construction where possible).
// @post always a plan, never an exception for a target too tight: at worst 1 x 1 at the lowest
//       allowed bitwidth with meets_target = false. valid: every accumulated IO budget >= 0
//       (accumulated_io_budgets) and, with check_pipeline, estimate_pipeline() ends by T less
//       the headroom and the word rows' reads. T <= 0: the whole model at the highest bitwidth.
// Not thread-safe: the engine owns one Planner and calls it under its own lock.
#include <algorithm>
#include <cmath>
#include <compare>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/model/submodel.hpp"
#include "stile/plan/elastic_plan.hpp"
#include "stile/pipeline/preload_buffer.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/pipeline_estimate.hpp"

namespace stile {

// Every layer's rank-0 shard (in layer order), then every layer's rank-1 shard, ...
inline ImportanceOrder interleaved_importance(const ShardRanking& ranking) {
  std::size_t depth = 0;
  for (const auto& layer : ranking) depth = std::max(depth, layer.size());
  ImportanceOrder order;
  for (std::size_t r = 0; r < depth; ++r) {
    for (std::size_t l = 0; l < ranking.size(); ++l) {
      if (r < ranking[l].size()) order.push_back({l, ranking[l][r]});
    }
  }
  return order;
}

// A per-layer shard ranking and the global importance order (plan/importance.hpp's
// load_importance reads them from an importance profile).
struct ShardImportance {
  ShardRanking ranking;   // per layer, most important first
  ImportanceOrder order;  // all (layer, shard), most important first; per layer, the ranking
};

// The importance the planners use for profile p's layers and shards, from what was given (see
// the top of this file): a global order alone defines the ranking, and given with one must agree
// with it layer by layer; no ranking is shard order; no order is interleaved_importance. The
// result's ranking is complete (every layer a permutation of 0..M-1). A malformed ranking or
// order is a stile::Error "planner: ...".
inline ShardImportance checked_importance(const DeviceProfile& p, const ShardRanking& ranking,
                                          const ImportanceOrder& order) {
  const std::size_t N = p.num_layers, M = p.shards_per_layer;
  ShardImportance out;
  if (!order.empty()) {
    require(order.size() == N * M, concat("planner: the importance order has ", order.size(),
                                          " entries, the profile has ", N, " layers x ", M, " shards"));
    std::set<LayerShard> seen;
    ShardRanking derived(N);
    for (const LayerShard& ls : order) {
      require(ls.layer < N && ls.shard < M, concat("planner: the importance order names layer ", ls.layer, " shard ",
                                                   ls.shard, ", outside ", N, " x ", M));
      require(seen.insert(ls).second,
              concat("planner: the importance order names layer ", ls.layer, " shard ", ls.shard, " twice"));
      derived[ls.layer].push_back(ls.shard);
    }
    if (!ranking.empty()) {
      for (std::size_t l = 0; l < N && l < ranking.size(); ++l) {
        require(ranking[l] == derived[l], concat("planner: the importance order ranks layer ", l,
                                                 "'s shards differently from the shard ranking"));
      }
    }
    out.ranking = std::move(derived);
  } else if (ranking.empty()) {
    out.ranking.assign(N, {});
    for (auto& layer : out.ranking) {
      for (std::size_t s = 0; s < M; ++s) layer.push_back(s);
    }
  } else {
    out.ranking = ranking;
  }
  require(out.ranking.size() == N,
          concat("planner: the shard ranking covers ", out.ranking.size(), " layers, the profile has ", N));
  for (std::size_t l = 0; l < N; ++l) {
    std::vector<std::size_t> sorted = out.ranking[l];
    std::sort(sorted.begin(), sorted.end());
    bool permutation = sorted.size() == M;
    for (std::size_t s = 0; permutation && s < M; ++s) permutation = sorted[s] == s;
    require(permutation,
            concat("planner: the shard ranking of layer ", l, " is not an order of the shards 0..", M - 1));
  }
  out.order = order.empty() ? interleaved_importance(out.ranking) : order;
  return out;
}

// Budgets within this many ms of zero count as zero: sums of doubles must not lose a plan that
// fits exactly.
inline constexpr double kBudgetToleranceMs = 1e-9;

struct PlannerOptions {
  double target_ms = 0;                  // T; <= 0: no target (the whole model, highest bits)
  std::size_t preload_budget_bytes = 0;  // 0: no preload
  unsigned preload_bits = 0;             // bitwidth of preloaded shards; 0: min_bits (or the lowest)
  // Ours: no shard below this bitwidth (0: the lowest stored). Where the lowest bitwidths lose
  // more accuracy than fewer shards do (all-MiniLM-L6-v2 at 2 bits: docs/design-notes.md), the shrink
  // then trades shards for bits instead of streaming many 2-bit shards.
  unsigned min_bits = 0;
  ImportanceOrder importance;  // global order; empty: interleaved from the ranking
  bool count_slack = true;     // ours: compute's slack as AIB(0)'s head start
  bool shrink = true;          // ours: shrink the submodel when 2 bits cannot arrive in time
  bool check_pipeline = true;  // ours: the replayed pipeline must end by T too
  std::size_t slots = 2;       // working-buffer slots of the replay (the engine's)
  // The exact bytes of a store's version, for fitting the preload budget (the engine passes the
  // store's); empty: the profile's mean bytes of one version at that bitwidth, rounded up.
  std::function<std::size_t(const ShardKey&)> version_bytes;
  // Ours: the accuracy of each uniform n x m submodel (the calibration accuracy of its head,
  // HeadsFile::shape_accuracy; NaN: no head, not a candidate). Given, the shrink takes the most
  // accurate shape that fits instead of dropping shards one at a time (docs/planner.md).
  std::function<double(std::size_t layers, std::size_t shards)> shape_accuracy;
  // Pass 2's order; empty: the importance order. For ablations (random orders).
  ImportanceOrder upgrade_order;
  // A layer's IO time (pipeline_estimate.hpp's layer_io_model: the engine's, one latency per
  // contiguous read); empty: each version its T_io.
  LayerIoTime layer_io;
  // Time to read one word-embedding row, taken off T for every row the request reads before the
  // layers (the engine reads each distinct token's row from storage first: estimated_row_read_ms()).
  // 0: none.
  double row_read_ms = 0;
  // The share of T kept free (0..1): profiled times are medians, and a plan that fits T exactly
  // overruns it on the slower half of requests. The engine keeps 5% (EngineOptions).
  double headroom = 0;
  // Which versions of the preload set the buffer holds now; empty: all of them (the steady
  // state). A version not held is still planned at the preload bitwidth, so the request's read
  // fills the buffer, but its read is charged: a request made before the buffer is full (the
  // first one, or the first after the budget grew) is planned for what it will really read.
  std::function<bool(const ShardKey&)> preload_held;
};

// Stage 1's answer.
struct ComputePlan {
  std::size_t layers = 0, shards = 0;  // n x m
  double layer_ms = 0;                 // conservative T_comp of one layer of m shards
  bool meets_target = false;           // n * layer_ms <= T (false: 1 x 1 and even that is over)
};

namespace planner_detail {

inline std::string ms(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

inline void check_profile(const DeviceProfile& p) {
  require(!p.bits.empty() && !p.lengths.empty() && p.num_layers >= 1 && p.shards_per_layer >= 1,
          "planner: the device profile is empty (no bitwidths, lengths, layers or shards)");
  require(
      p.io_ms.size() == p.bits.size() && p.shard_bytes.size() == p.bits.size() && p.compute_ms.size() == p.bits.size(),
      "planner: device profile: io_ms, shard_bytes and compute_ms must have one entry per bitwidth");
  require(p.compute_after_read_ms.empty() || p.compute_after_read_ms.size() == p.bits.size(),
          "planner: device profile: compute_after_read_ms must have one entry per bitwidth (or none)");
}

// The bitwidth's index in the profile; the profile's own error ("no measurements at 3 bits (it
// has [2, 4, 32])") when it lacks it.
inline std::size_t bits_index(const DeviceProfile& p, unsigned bits) {
  (void)p.io_ms_at(bits);
  return static_cast<std::size_t>(std::find(p.bits.begin(), p.bits.end(), bits) - p.bits.begin());
}

inline std::size_t version_bytes(const DeviceProfile& p, unsigned bits) {
  return static_cast<std::size_t>(std::ceil(p.shard_bytes[bits_index(p, bits)]));
}

inline std::vector<double> layer_compute_ms(const DeviceProfile& p, const SubmodelPlan& plan, std::size_t tokens) {
  std::vector<double> out;
  for (std::size_t k = 0; k < plan.layers.size(); ++k) {
    require(!plan.layers[k].empty(), concat("planner: layer ", k, " of the plan has no shards"));
    unsigned widest = 0;
    for (const ShardChoice& c : plan.layers[k]) widest = std::max(widest, c.bits);
    out.push_back(p.compute_ms_at(widest, tokens, plan.layers[k].size()));
  }
  return out;
}

inline double sum(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return s;
}

}  // namespace planner_detail

// The IO time the preload saves this plan: per layer, reading all its versions less reading the
// ones not preloaded (a preloaded version the plan does not use saves it nothing).
inline double preload_head_start_ms(const DeviceProfile& profile, const SubmodelPlan& plan,
                                    const std::set<ShardKey>& preloaded, const LayerIoTime& layer_io = {}) {
  double t = 0;
  for (std::size_t k = 0; k < plan.layers.size(); ++k) {
    t += layer_io_ms(profile, layer_io, k, plan.layers[k]) -
         layer_io_ms(profile, layer_io, k, versions_to_read(plan.layers[k], k, preloaded));
  }
  return t;
}

// AIB(0..n-1) after every debit (docs/planner.md): AIB(0) = head_start_ms + the preload's IO time,
// AIB(k) = AIB(k-1) + T_comp(k-1), each chosen version of layer k debited from k on (with a
// layer IO model, the layer's IO time for all its versions).
inline std::vector<double> accumulated_io_budgets(const DeviceProfile& profile, const SubmodelPlan& plan,
                                                  std::size_t tokens, const std::set<ShardKey>& preloaded,
                                                  double head_start_ms = 0, const LayerIoTime& layer_io = {}) {
  const std::vector<double> compute = planner_detail::layer_compute_ms(profile, plan, tokens);
  std::vector<double> aib(plan.layers.size());
  double credit = head_start_ms + preload_head_start_ms(profile, plan, preloaded, layer_io), debit = 0;
  for (std::size_t k = 0; k < plan.layers.size(); ++k) {
    if (k > 0) credit += compute[k - 1];
    debit += layer_io_ms(profile, layer_io, k, plan.layers[k]);
    aib[k] = credit - debit;
  }
  return aib;
}

// Every budget >= 0 (within kBudgetToleranceMs).
inline bool budgets_valid(const std::vector<double>& aib) {
  return std::all_of(aib.begin(), aib.end(), [](double b) { return b >= -kBudgetToleranceMs; });
}

// The largest n x m (n <= N, m <= M) that `fits`: max n*m, ties to the larger n. {0, 0} when
// nothing fits. Every pair is tried, so `fits` need not be monotone (profiled medians are not
// always).
template <class Fits>
std::pair<std::size_t, std::size_t> largest_submodel(std::size_t N, std::size_t M, Fits&& fits) {
  std::pair<std::size_t, std::size_t> best{0, 0};
  for (std::size_t n = 1; n <= N; ++n) {
    for (std::size_t m = 1; m <= M; ++m) {
      const bool better = n * m > best.first * best.second || (n * m == best.first * best.second && n > best.first);
      if (better && fits(n, m)) best = {n, m};
    }
  }
  return best;
}

// T_comp of one layer of m shards before the bits are chosen: the slowest stored bitwidth's.
inline double conservative_layer_ms(const DeviceProfile& profile, std::size_t tokens, std::size_t m) {
  double t = 0;
  for (const unsigned b : profile.bits) t = std::max(t, profile.compute_ms_at(b, tokens, m));
  return t;
}

// Stage 1 (docs/planner.md). target_ms <= 0: the whole model.
inline ComputePlan plan_compute(const DeviceProfile& profile, std::size_t tokens, double target_ms) {
  planner_detail::check_profile(profile);
  require(!std::isnan(target_ms), "planner: the latency target is NaN");
  const std::size_t N = profile.num_layers, M = profile.shards_per_layer;
  if (target_ms <= 0) return {N, M, conservative_layer_ms(profile, tokens, M), true};
  const auto [n, m] = largest_submodel(N, M, [&](std::size_t nn, std::size_t mm) {
    return static_cast<double>(nn) * conservative_layer_ms(profile, tokens, mm) <= target_ms + kBudgetToleranceMs;
  });
  if (n == 0) return {1, 1, conservative_layer_ms(profile, tokens, 1), false};
  return {n, m, conservative_layer_ms(profile, tokens, m), true};
}

namespace planner_detail {

inline std::vector<ShardChoice>::iterator find_choice(std::vector<ShardChoice>& layer, std::size_t shard) {
  return std::find_if(layer.begin(), layer.end(), [shard](const ShardChoice& c) { return c.shard == shard; });
}

struct Context {
  const DeviceProfile& profile;
  std::size_t tokens;
  double target_ms;
  bool count_slack;
  bool check_pipeline;
  std::size_t slots;
  unsigned preload_bits;
  unsigned floor_bits;
  std::size_t budget_bytes;
  const std::function<std::size_t(const ShardKey&)>& exact_bytes;
  const LayerIoTime& layer_io;
  const std::function<bool(const ShardKey&)>& held;

  // The versions of `preload` whose reads are saved: those the buffer holds.
  std::set<ShardKey> held_of(const std::set<ShardKey>& preload) const {
    if (!held) return preload;
    std::set<ShardKey> out;
    for (const ShardKey& k : preload) {
      if (held(k)) out.insert(k);
    }
    return out;
  }

  double head_start(const SubmodelPlan& plan) const {
    if (!count_slack || target_ms <= 0) return 0;
    return std::max(0.0, target_ms - sum(layer_compute_ms(profile, plan, tokens)));
  }
  std::vector<double> budgets(const SubmodelPlan& plan, const std::set<ShardKey>& preload) const {
    return accumulated_io_budgets(profile, plan, tokens, held_of(preload), head_start(plan), layer_io);
  }
  PipelineEstimate pipeline(const SubmodelPlan& plan, const std::set<ShardKey>& preload) const {
    return estimate_pipeline(profile, plan, tokens, slots, held_of(preload), layer_io);
  }
  double estimate(const SubmodelPlan& plan, const std::set<ShardKey>& preload) const {
    return pipeline(plan, preload).total_ms;
  }
  bool valid(const SubmodelPlan& plan, const std::set<ShardKey>& preload) const {
    if (!budgets_valid(budgets(plan, preload))) return false;
    return !check_pipeline || target_ms <= 0 || estimate(plan, preload) <= target_ms + kBudgetToleranceMs;
  }
  std::set<ShardKey> preload_of(const SubmodelPlan& plan, unsigned bits) const {
    SubmodelPlan at = plan;
    for (auto& layer : at.layers) {
      for (ShardChoice& c : layer) c.bits = bits;
    }
    const std::size_t mean = version_bytes(profile, bits);
    return preload_set(at, budget_bytes, [&](const ShardKey& k) { return exact_bytes ? exact_bytes(k) : mean; });
  }
  bool preloaded(const std::set<ShardKey>& preload, std::size_t layer, std::size_t shard) const {
    return preload.count({layer, shard, preload_bits}) != 0;
  }
  // Preloaded shards at preload_bits, every other at `bits`.
  void assign(SubmodelPlan& plan, const std::set<ShardKey>& preload, unsigned bits) const {
    for (std::size_t k = 0; k < plan.layers.size(); ++k) {
      for (ShardChoice& c : plan.layers[k]) c.bits = preloaded(preload, k, c.shard) ? preload_bits : bits;
    }
  }
  // Pass 1: the highest uniform bitwidth that keeps the plan valid; 0 (plan at the lowest) if none.
  unsigned pass1(SubmodelPlan& plan, const std::set<ShardKey>& preload) const {
    for (auto it = profile.bits.rbegin(); it != profile.bits.rend() && *it >= floor_bits; ++it) {
      assign(plan, preload, *it);
      if (valid(plan, preload)) return *it;
    }
    assign(plan, preload, floor_bits);
    return 0;
  }
  // Pass 2: one sweep in importance order; returns the number of shards raised.
  std::size_t pass2(SubmodelPlan& plan, const std::set<ShardKey>& preload, const ImportanceOrder& order) const {
    std::size_t raised = 0;
    for (const LayerShard& ls : order) {
      if (ls.layer >= plan.layers.size() || preloaded(preload, ls.layer, ls.shard)) continue;
      auto& layer = plan.layers[ls.layer];
      const auto c = find_choice(layer, ls.shard);
      if (c == layer.end()) continue;
      const unsigned was = c->bits;
      for (auto it = profile.bits.rbegin(); it != profile.bits.rend() && *it > was; ++it) {
        c->bits = *it;
        if (valid(plan, preload)) break;
        c->bits = was;
      }
      if (c->bits != was) ++raised;
    }
    return raised;
  }
};

// Drops the least important shard the plan has, or its last layer when that shard is its
// layer's only one.
inline void drop_least_important(SubmodelPlan& plan, const ImportanceOrder& order, ElasticPlan& out) {
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (it->layer >= plan.layers.size()) continue;
    auto& layer = plan.layers[it->layer];
    const auto c = find_choice(layer, it->shard);
    if (c == layer.end()) continue;
    if (layer.size() == 1) {
      plan.layers.pop_back();
      ++out.dropped_layers;
    } else {
      layer.erase(c);
      ++out.dropped_shards;
    }
    return;
  }
}

// The uniform shapes whose compute fits T and that have an accuracy, most accurate first (ties:
// more shards, then deeper).
inline std::vector<std::pair<std::size_t, std::size_t>> shapes_by_accuracy(
    const DeviceProfile& profile, std::size_t tokens, double target_ms,
    const std::function<double(std::size_t, std::size_t)>& accuracy) {
  struct Shape {
    double accuracy;
    std::size_t n, m;
  };
  std::vector<Shape> shapes;
  for (std::size_t n = 1; n <= profile.num_layers; ++n) {
    for (std::size_t m = 1; m <= profile.shards_per_layer; ++m) {
      const double a = accuracy(n, m);
      if (std::isnan(a)) continue;
      if (static_cast<double>(n) * conservative_layer_ms(profile, tokens, m) > target_ms + kBudgetToleranceMs) continue;
      shapes.push_back({a, n, m});
    }
  }
  std::stable_sort(shapes.begin(), shapes.end(), [](const Shape& a, const Shape& b) {
    if (a.accuracy != b.accuracy) return a.accuracy > b.accuracy;
    if (a.n * a.m != b.n * b.m) return a.n * a.m > b.n * b.m;
    return a.n > b.n;
  });
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const Shape& s : shapes) out.emplace_back(s.n, s.m);
  return out;
}

}  // namespace planner_detail

// Plans one request length (docs/planner.md). `ranking`: per layer, shards from most to least
// important (empty: shard order, or the one options.importance implies). `word_rows`: the
// word-embedding rows the request reads before the layers (its distinct tokens); unknown: one per
// token of the length bucket, the most any request of the bucket reads.
inline ElasticPlan plan_elastic(const DeviceProfile& profile, std::size_t tokens, const PlannerOptions& options,
                                const ShardRanking& ranking = {}, std::optional<std::size_t> word_rows = {}) {
  namespace d = planner_detail;
  d::check_profile(profile);
  require(!std::isnan(options.target_ms), "planner: the latency target is NaN");
  require(options.slots >= 1, "planner: the pipeline needs at least one working-buffer slot");
  require(options.headroom >= 0 && options.headroom < 1, "planner: the headroom must be in [0, 1)");
  const ShardImportance imp = checked_importance(profile, ranking, options.importance);
  const unsigned lowest = options.min_bits == 0 ? profile.bits.front() : options.min_bits,
                 highest = profile.bits.back();
  (void)d::bits_index(profile, lowest);  // a clear error when the profile lacks min_bits
  const unsigned preload_bits = options.preload_bits == 0 ? lowest : options.preload_bits;
  (void)d::bits_index(profile, preload_bits);  // a clear error when the profile lacks it

  ElasticPlan out;
  out.length_bucket = profile.length_bucket(tokens);
  out.word_rows = word_rows.value_or(out.length_bucket);
  // What the layers may take: T less its headroom and the word-row reads before them (a target
  // that leaves nothing is still a target: the smallest plan, meets_target false).
  const double T = options.target_ms <= 0
                       ? options.target_ms
                       : std::max(1e-6, options.target_ms * (1 - options.headroom) -
                                            static_cast<double>(out.word_rows) * options.row_read_ms);
  const bool has_target = T > 0;
  // With no target, preloaded shards are at the highest bitwidth like the rest (nothing to trade).
  const d::Context ctx{profile,
                       tokens,
                       T,
                       options.count_slack,
                       options.check_pipeline,
                       options.slots,
                       has_target ? preload_bits : highest,
                       lowest,
                       options.preload_budget_bytes,
                       options.version_bytes,
                       options.layer_io,
                       options.preload_held};
  out.preload_bits = ctx.preload_bits;

  const ComputePlan cp = plan_compute(profile, tokens, T);
  out.compute_layers = cp.layers;
  out.compute_shards = cp.shards;
  SubmodelPlan plan = SubmodelPlan::uniform(cp.layers, cp.shards, highest, imp.ranking);
  std::set<ShardKey> preload;
  std::string how;
  if (!has_target) {
    preload = ctx.preload_of(plan, highest);
    out.uniform_bits = highest;
    how = "no target: the whole model at " + std::to_string(highest) + " bits";
  } else {
    preload = ctx.preload_of(plan, preload_bits);
    out.uniform_bits = ctx.pass1(plan, preload);
    if (out.uniform_bits == 0 && options.shrink && options.shape_accuracy) {
      for (const auto& [n, m] : d::shapes_by_accuracy(profile, tokens, T, options.shape_accuracy)) {
        SubmodelPlan candidate = SubmodelPlan::uniform(n, m, highest, imp.ranking);
        std::set<ShardKey> candidate_preload = ctx.preload_of(candidate, preload_bits);
        const unsigned bits = ctx.pass1(candidate, candidate_preload);
        if (bits == 0) continue;
        out.uniform_bits = bits;
        out.dropped_layers = cp.layers > n ? cp.layers - n : 0;
        out.dropped_shards = cp.shards > m ? n * (cp.shards - m) : 0;
        plan = std::move(candidate);
        preload = std::move(candidate_preload);
        break;
      }
    }
    while (out.uniform_bits == 0 && options.shrink && (plan.layers.size() > 1 || plan.layers[0].size() > 1)) {
      d::drop_least_important(plan, imp.order, out);
      preload = ctx.preload_of(plan, preload_bits);
      out.uniform_bits = ctx.pass1(plan, preload);
    }
    if (out.uniform_bits != 0) {
      out.upgrades = ctx.pass2(plan, preload, options.upgrade_order.empty() ? imp.order : options.upgrade_order);
      how = concat("pass 1: ", out.uniform_bits, " bits; pass 2: ", out.upgrades, " shards raised");
    } else {
      out.uniform_bits = lowest;
      how = concat("even ", lowest, "-bit shards cannot arrive in time: the pipeline will stall");
    }
  }
  out.submodel = std::move(plan);
  out.preload = std::move(preload);
  out.head_start_ms = ctx.head_start(out.submodel);
  out.aib_ms = ctx.budgets(out.submodel, out.preload);
  out.valid = ctx.valid(out.submodel, out.preload);
  out.compute_ms = d::sum(d::layer_compute_ms(profile, out.submodel, tokens));
  out.meets_target = !has_target || (out.valid && out.compute_ms <= T + kBudgetToleranceMs);
  const PipelineEstimate estimate = ctx.pipeline(out.submodel, out.preload);
  out.estimated_ms = estimate.total_ms;
  out.estimated_compute_ms = estimate.compute_ms;

  std::string text =
      concat("bucket ", out.length_bucket, ": compute plan ", out.compute_layers, "x", out.compute_shards);
  if (has_target) {
    text += concat(cp.meets_target ? "" : " (over the target even at 1x1)", ", target ", d::ms(T),
                   " ms for the layers (", out.word_rows, " word rows read first)");
  }
  if (out.dropped_shards + out.dropped_layers > 0) {
    text += concat("; shrunk to ", out.layers(), " layers, ", out.shards(), " shards (IO-bound: ", out.dropped_shards,
                   " shards and ", out.dropped_layers, " layers dropped)");
  }
  text += concat("; preload ", out.preload.size(), " versions at ", out.preload_bits, " bits");
  if (options.preload_held) text += concat(" (", ctx.held_of(out.preload).size(), " held now)");
  text += concat("; ", how, "; compute ", d::ms(out.compute_ms), " ms, estimated ", d::ms(out.estimated_ms), " ms");
  if (!out.meets_target) text += "; misses the target";
  out.explain = std::move(text);
  return out;
}

// Plans per length bucket and number of word rows read, and keeps them until the target or the
// preload budget changes (at most one plan per (bucket, rows) pair: rows <= the bucket's length).
class Planner {
 public:
  explicit Planner(DeviceProfile profile, ShardRanking ranking = {}, PlannerOptions options = {})
      : profile_(std::move(profile)), ranking_(std::move(ranking)), options_(std::move(options)) {
    // Everything plan() would refuse, refused now: a bad configuration fails at start, not on
    // the first request.
    planner_detail::check_profile(profile_);
    require(!std::isnan(options_.target_ms), "planner: the latency target is NaN");
    require(options_.headroom >= 0 && options_.headroom < 1, "planner: the headroom must be in [0, 1)");
    (void)checked_importance(profile_, ranking_, options_.importance);
    if (options_.preload_bits != 0) (void)planner_detail::bits_index(profile_, options_.preload_bits);
  }

  // The plan for a request of `tokens` tokens that reads `word_rows` word-embedding rows before
  // the layers (unknown: the bucket's length): the cached one for its bucket and rows, if any.
  // `held` (given: which versions the preload buffer holds now): when the cached plan's preload set
  // is not all held, a plan for what is (not cached: the buffer fills from this request's reads;
  // PlannerOptions::preload_held).
  ElasticPlan plan(std::size_t tokens, std::optional<std::size_t> word_rows = {},
                   const std::function<bool(const ShardKey&)>& held = {}) {
    const std::size_t bucket = profile_.length_bucket(tokens);
    const std::pair key{bucket, word_rows.value_or(bucket)};
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      it = cache_.emplace(key, plan_elastic(profile_, bucket, options_, ranking_, key.second)).first;
      ++plans_made_;
    }
    if (!held || std::all_of(it->second.preload.begin(), it->second.preload.end(), held)) return it->second;
    PlannerOptions options = options_;
    options.preload_held = held;
    return plan_elastic(profile_, bucket, options, ranking_, key.second);
  }

  void set_target_ms(double target_ms) {
    require(!std::isnan(target_ms), "planner: the latency target is NaN");
    if (target_ms == options_.target_ms) return;
    options_.target_ms = target_ms;
    cache_.clear();
  }
  void set_preload_budget(std::size_t bytes) {
    if (bytes == options_.preload_budget_bytes) return;
    options_.preload_budget_bytes = bytes;
    cache_.clear();
  }

  void set_shape_accuracy(std::function<double(std::size_t, std::size_t)> accuracy) {
    options_.shape_accuracy = std::move(accuracy);
    cache_.clear();
  }

  double target_ms() const noexcept { return options_.target_ms; }
  std::size_t preload_budget() const noexcept { return options_.preload_budget_bytes; }
  const PlannerOptions& options() const noexcept { return options_; }
  const DeviceProfile& profile() const noexcept { return profile_; }
  std::size_t plans_made() const noexcept { return plans_made_; }  // cache misses so far
  std::size_t cached_plans() const noexcept { return cache_.size(); }

 private:
  DeviceProfile profile_;
  ShardRanking ranking_;
  PlannerOptions options_;
  std::map<std::pair<std::size_t, std::size_t>, ElasticPlan> cache_;  // by length bucket and word rows
  std::size_t plans_made_ = 0;
};

}  // namespace stile
