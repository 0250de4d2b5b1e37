#pragma once
// Fits what executing a mapping costs beyond its nodes: the op latency profile's request cost
// (plan/op_latency_profile.hpp, request_us: the mapped forward's driver handing a request over,
// the processors waking, the driver waking at the end, and whatever the nodes timed one by one
// leave out or over-count in a whole request) and the per-call part of the transfer between two
// processors (the hand-off: a SignalCall on the producer's queue, the consumer's WaitCall seeing
// it). Both are measured by executing mappings with the mapped forward (hetero/mapped_forward.hpp)
// on the processors themselves and comparing each run with the schedule emulator's prediction
// from the profile's node costs alone, at each sequence length the runs use:
//
//   * every node on one CPU processor q: residual = request;
//   * per pair (a, b) of processors, mappings over both: residual = request + h_ab x H, where H is
//     the number of hand-offs on the emulated critical path (the makespan's growth per microsecond
//     of hand-off). The mappings: every node on a but the LayerNorms of the first j layers, which
//     go to b (j = 1, 3, 6: 4 to 24 hand-offs, both directions), and, for a pair of CPU
//     processors, `spread` mappings with each node's processor and format drawn (the mappings a
//     search explores; 15-28 hand-offs for MiniLM).
//
// request at a length is the median residual of the first kind there, of either sign (the nodes
// over-predict short requests: docs/design-notes.md), and the same for any number of
// processors; h_ab at a length is the least-squares slope through it of the pair's runs there,
// clamped at 0. A free intercept per processor count was tried on recorded samples: at 32 tokens
// it came out at -160 to -1830 us for two processors, so a mapping with one node moved would be
// predicted hundreds of microseconds faster than one core, which the runs with one layer's
// LayerNorms moved do not show. The per-byte transfer cost is the profiler's (cache
// misses, calibrate/op_latency_profiler.hpp); the hand-off replaces its per-call part, which a
// pair of spinning threads measures far below what the runtime's queues take.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/hetero/mapped_forward.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/model/pooling.hpp"
#include "stile/plan/op_latency_profile.hpp"
#include "stile/plan/schedule_emulator.hpp"

namespace stile {

// A request of `tokens` tokens spread over the vocabulary (what the latency figures time); a
// vocabulary smaller than 21000 (tests' tiny models) wraps the ids.
inline Encoding synthetic_encoding(std::size_t tokens, std::size_t vocab = 30522) {
  Encoding e;
  for (std::size_t k = 0; k < tokens; ++k) {
    e.input_ids.push_back(static_cast<std::int32_t>((1000 + (k * 7919) % 20000) % std::max<std::size_t>(1, vocab)));
    e.token_type_ids.push_back(0);
    e.attention_mask.push_back(1);
  }
  return e;
}

// The median latency (microseconds, `repeats` runs after 3 warm-up runs) of a mapped forward over
// its processors as the op graph counts it: the driving thread (this one, unpinned) enqueues the
// request and sleeps until the processors are done, then pools and runs a 2-class head's dot
// products itself (the graph's pooling and classifier nodes). The runs follow one another: rounds
// that alternated mappings (one warm-up and three runs each) measured the int8 preset 40% slower
// on machine E (docs/design-notes.md).
inline double mapped_forward_us(MappedForward& f, std::size_t tokens, std::size_t repeats) {
  const std::size_t d = f.config().hidden;
  const std::vector<Encoding> batch{synthetic_encoding(tokens, f.config().vocab_size)};
  std::vector<double> us;
  std::vector<float> hidden, pooled(d);
  const std::vector<float> head(2 * d, 0.01f);
  for (std::size_t r = 0; r < repeats + 3; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f.encode(batch, hidden);
    pool_tokens(hidden, tokens, d, Pooling::kMean, pooled);
    volatile float logit = 0;
    for (std::size_t k = 0; k < 2; ++k) {
      float acc = 0;
      for (std::size_t j = 0; j < d; ++j) acc += head[k * d + j] * pooled[j];
      logit = logit + acc;
    }
    if (r >= 3) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// The mapping the fit executes: every node on `base` in the formats `formats`, but the LayerNorms
// of layers [0, moved_layers) on `other`.
inline OpMapping layer_norms_moved(const OpGraph& g, const std::vector<NumberFormat>& formats, std::uint8_t base,
                                   std::uint8_t other, std::size_t moved_layers) {
  OpMapping m = OpMapping::uniform(g.size(), base);
  m.format = formats;
  for (std::size_t n = 0; n < g.size(); ++n) {
    const OpNode& node = g.nodes[n];
    if (node.kind == OpNodeKind::kLayerNorm && node.layer != OpNode::kNoLayer && node.layer < moved_layers) {
      m.processor[n] = other;
    }
  }
  return m;
}

// Hand-offs on the emulated critical path of `m` between processors a and b (either direction):
// the makespan's growth when that pair's hand-off costs 1 us (no request cost counted).
inline double critical_handoffs(const OpGraph& g, OpCostTable costs, const OpMapping& m, std::size_t a, std::size_t b) {
  costs.request_us.clear();
  costs.transfer[a][b].call_us = costs.transfer[b][a].call_us = 0;
  const double without = predict_latency_us(g, costs, m);
  costs.transfer[a][b].call_us = costs.transfer[b][a].call_us = 1;
  return predict_latency_us(g, costs, m) - without;
}

struct RequestCostSample {
  std::string mapping;
  std::size_t tokens = 0, processors_used = 0, pair = 0;
  double measured_us = 0, nodes_us = 0;  // nodes_us: the emulator without request and hand-off costs
  double handoffs = 0;                   // on the critical path
};

struct RequestCostFit {
  std::vector<std::size_t> tokens;              // the samples' lengths, increasing
  std::vector<double> request_us;               // per tokens entry, any number of processors
  std::vector<std::vector<double>> handoff_us;  // [pair][tokens entry]; empty: the pair has no runs
};

// The fit of the top from samples (processors_used 1, or 2 with `pair` < pairs and its critical
// hand-offs); Error when a length has no single-processor sample, or a pair's runs miss a length.
inline RequestCostFit fit_request_model(const std::vector<RequestCostSample>& samples, std::size_t pairs) {
  RequestCostFit fit;
  require(!samples.empty(), "request cost fit: no run on one processor");
  for (const RequestCostSample& x : samples) fit.tokens.push_back(x.tokens);
  std::sort(fit.tokens.begin(), fit.tokens.end());
  fit.tokens.erase(std::unique(fit.tokens.begin(), fit.tokens.end()), fit.tokens.end());
  const auto residual = [](const RequestCostSample& x) { return x.measured_us - x.nodes_us; };
  for (const std::size_t t : fit.tokens) {
    std::vector<double> single;
    for (const RequestCostSample& x : samples) {
      if (x.processors_used == 1 && x.tokens == t) single.push_back(residual(x));
    }
    require(!single.empty(), concat("request cost fit: no run on one processor at ", t, " tokens"));
    std::sort(single.begin(), single.end());  // the median; of an even count, the middle two's mean
    const std::size_t n = single.size();
    fit.request_us.push_back(n % 2 == 1 ? single[n / 2] : (single[n / 2 - 1] + single[n / 2]) / 2);
  }
  fit.handoff_us.assign(pairs, {});
  for (std::size_t pi = 0; pi < pairs; ++pi) {
    std::vector<double> h;
    std::size_t missing = fit.tokens.size();  // a length without this pair's runs, if any
    for (std::size_t l = 0; l < fit.tokens.size(); ++l) {
      double sxy = 0, sxx = 0;  // every two-processor run has hand-offs: sxx > 0 when there are runs
      for (const RequestCostSample& x : samples) {
        if (x.processors_used != 2 || x.pair != pi || x.tokens != fit.tokens[l]) continue;
        sxy += x.handoffs * (residual(x) - fit.request_us[l]), sxx += x.handoffs * x.handoffs;
      }
      if (sxx > 0) h.push_back(std::max(0.0, sxy / sxx));
      else missing = l;
    }
    if (h.empty()) continue;  // no runs on this pair
    require(h.size() == fit.tokens.size(),
            concat("request cost fit: processor pair ", pi, " has no runs at ", fit.tokens[missing], " tokens"));
    fit.handoff_us[pi] = std::move(h);
  }
  return fit;
}

struct RequestCostSettings {
  std::vector<std::size_t> tokens{32, 128};
  std::size_t repeats = 15;
  std::vector<std::size_t> moved_layers{1, 3, 6};
  std::string formats = "int8";  // the precision preset the mappings run in, LayerNorms in fp32
  std::size_t spread = 12;       // per pair of CPU processors: mappings with each node's processor and format drawn
  std::uint64_t seed = 7;        // of those draws (eval_op_latency's mappings use another seed)
};

// Fits prof.request_us and the per-call transfer cost of each processor pair (see the top) on the
// processors of `prof`, executing the model whose weights are in `model_dir` (its shape must be the
// profile's). Sets prof.request_measured; records the samples in prof.settings["request_fit"].
inline std::vector<RequestCostSample> fit_request_costs(OpLatencyProfile& prof, const std::filesystem::path& model_dir,
                                                        const RequestCostSettings& s, ProgressBar* progress = nullptr) {
  const std::size_t P = prof.processors.size();
  require(P <= 255, "request cost fit: too many processors");
  const EncoderConfig c = read_encoder_config((model_dir / "config.json").string());
  const OpGraph g1 = op_graph_of(c, prof.shape.classes);
  // The preset's formats, with the LayerNorms in fp32 (a format every processor runs).
  std::vector<NumberFormat> formats = formats_of_precision(g1, precision_preset(s.formats));
  for (std::size_t n = 0; n < g1.size(); ++n) {
    const OpNodeKind k = g1.nodes[n].kind;
    if (k == OpNodeKind::kLayerNorm || k == OpNodeKind::kEmbedding) formats[n] = NumberFormat::kF32;
  }
  // The mappings: one per processor, then per pair (a, b) with a < b, LayerNorms moved a -> b and b -> a.
  struct Run {
    std::string label;
    OpMapping m;
    std::size_t used, pair;  // pair: index into `pairs` (k = 2)
  };
  std::vector<std::pair<std::size_t, std::size_t>> pairs;
  std::vector<Run> runs;
  // Only CPU clusters run a whole request or are a pair's base (an OpenCL device is too slow for
  // that to pay: it takes the moved LayerNorms).
  const auto cpu = [&](std::size_t q) { return prof.processors[q].starts_with("cpu:"); };
  for (std::size_t q = 0; q < P; ++q) {
    if (!cpu(q)) continue;
    runs.push_back({"all on " + prof.processors[q], OpMapping::uniform(g1.size(), std::uint8_t(q)), 1, 0});
    runs.back().m.format = formats;
  }
  for (std::size_t a = 0; a < P; ++a) {
    for (std::size_t b = a + 1; b < P; ++b) {
      pairs.emplace_back(a, b);
      for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
        if (!cpu(from)) continue;
        for (const std::size_t j : s.moved_layers) {
          runs.push_back({concat("LayerNorms of ", j, " layers ", prof.processors[from], " -> ", prof.processors[to]),
                          layer_norms_moved(g1, formats, std::uint8_t(from), std::uint8_t(to), j), 2,
                          pairs.size() - 1});
        }
      }
      if (!cpu(a) || !cpu(b)) continue;
      std::mt19937_64 rng(s.seed);
      for (std::size_t i = 0; i < s.spread; ++i) {
        OpMapping m = OpMapping::uniform(g1.size(), std::uint8_t(a));
        for (std::size_t n = 0; n < g1.size(); ++n) {
          const std::vector<NumberFormat> fs = formats_of(g1.nodes[n].kind);
          m.format[n] = fs[rng() % fs.size()];
          m.processor[n] = std::uint8_t(rng() % 2 == 0 ? a : b);
        }
        runs.push_back(
            {concat("spread ", i + 1, " over ", prof.processors[a], ", ", prof.processors[b]), m, 2, pairs.size() - 1});
      }
    }
  }
  std::vector<RequestCostSample> samples;
  std::size_t step = 0;
  for (const Run& r : runs) {
    const ProcessorSet procs = open_mapping_processors(prof.processors, g1, r.m, "the op latency profile");
    MappedForward f(BertWeights::load(model_dir, mapped_weights_precision(g1, r.m.format)), r.m, procs.pointers());
    for (const std::size_t t : s.tokens) {
      OpGraphShape shape = prof.shape;
      shape.tokens = t;
      const OpGraph g = bert_op_graph(shape);
      OpCostTable costs = OpCostTable::from_profile(g, prof);
      costs.request_us.clear();
      for (auto& row : costs.transfer) {
        for (TransferCost& tc : row) tc.call_us = 0;
      }
      RequestCostSample x{r.label, t, r.used, r.pair, mapped_forward_us(f, t, s.repeats), predict_latency_us(g, costs, r.m),
                          0.0};
      if (r.used == 2) x.handoffs = critical_handoffs(g, costs, r.m, pairs[r.pair].first, pairs[r.pair].second);
      samples.push_back(x);
      if (progress) progress->update(++step, runs.size() * s.tokens.size());
    }
  }
  const RequestCostFit fit = fit_request_model(samples, pairs.size());
  for (std::size_t pi = 0; pi < pairs.size(); ++pi) {
    const auto [a, b] = pairs[pi];
    prof.handoff_us[a][b] = prof.handoff_us[b][a] = fit.handoff_us[pi];
  }
  prof.request_tokens = fit.tokens;
  prof.request_us.assign(P, fit.request_us);
  prof.request_measured = true;
  nlohmann::json rows = nlohmann::json::array();
  for (const RequestCostSample& x : samples) {
    rows.push_back({{"mapping", x.mapping},
                    {"tokens", x.tokens},
                    {"measured_us", x.measured_us},
                    {"nodes_us", x.nodes_us},
                    {"critical_handoffs", x.handoffs}});
  }
  prof.settings["request_fit"] = {{"executor", "mapped forward (hetero/mapped_forward.hpp), driver unpinned"},
                                  {"formats", s.formats + " preset, LayerNorms in fp32"},
                                  {"tokens", s.tokens},
                                  {"repeats", s.repeats},
                                  {"statistic", "median"},
                                  {"samples", rows}};
  return samples;
}

}  // namespace stile
