// The schedule emulator's prediction (plan/schedule_emulator.hpp on an op latency profile from
// tools/profile_ops) against measured execution, for what executes today: the whole model on one
// processor (one thread pinned to one core) with a random per-layer, per-operator precision
// mapping, converted to a ModelPrecision (plan/mapping_precision.hpp) and run by BertModel.
// Measured: encode() + mean pooling + the classifier's dot products, the graph's nodes. Reports
// each mapping's predicted and measured latency and the median absolute relative error.
// With --processors cpu:0,opencl:0, an OpenCL device too: each node's format is drawn from those
// its processor was profiled in, the device's linear nodes share one.
// With --processors cpu:0,cpu:1: mappings that spread the nodes over those processors (each node's
// processor and format drawn uniformly), executed by the mapped forward (hetero/mapped_forward.hpp)
// on CPU clusters of one pinned core each; the first two rows are the fp32 and int8 presets on the
// first processor, run the same way.
//
//   eval_op_latency --profile minilm.ops.json [--mappings 24] [--tokens 32,128] [--cpu 0] [--out FILE]
//   eval_op_latency --profile minilm.ops.json --processors cpu:0,cpu:1 [--mappings 24] [--tokens 32,128]
// With --engine STORE as well: each spread mapping also runs on the shard-store engine over STORE's
// 32-bit shards, nothing read by a timed request (bench/mapped_engine.hpp), against the same
// prediction.
//   eval_op_latency --profile minilm.ops.json --processors cpu:0,cpu:1 --engine minilm.stile
// --compare-profile FILE also predicts each mapping with another profile (profile_ops
// --out-before-fit: the same nodes without the request cost fit) and reports its error beside.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mapped_engine.hpp"
#include "pinned_latency.hpp"
#include "stile/calibrate/op_latency_profiler.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/schedule_emulator.hpp"

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir(), profile_path, out_path, compare_path, engine_store;
  std::size_t mappings = 24, repeats = 15, seed = 19;
  std::vector<std::size_t> tokens{32, 128};
  unsigned cpu = 0;
  std::vector<std::string> processors;
  stile_cli::Parser cli("eval_op_latency", "--profile FILE [options]",
                        "Predicted (schedule emulator on the op latency profile) vs measured latency of random "
                        "single-processor precision mappings of the default model.");
  cli.flag("--model", "DIR", "model directory", model_dir);
  cli.flag("--profile", "FILE", "op latency profile (tools/profile_ops)", profile_path);
  cli.flag("--mappings", "N", "random precision mappings per token count", mappings).at_least(1);
  cli.flag("--tokens", "LIST", "sequence lengths", tokens).at_least(1);
  cli.flag("--repeats", "N", "timed runs per mapping (median)", repeats).at_least(1);
  cli.flag("--cpu", "N", "the core that runs the model (the profile's processor cpu:N)", cpu);
  cli.flag("--seed", "N", "seed of the random mappings", seed);
  cli.flag("--processors", "LIST", "spread random mappings over these profile processors (cpu:N), executed by the "
           "mapped forward",
           std::function<void(std::string_view)>([&](std::string_view v) {
             processors = stile_cli::parse_list(v, "--processors", [](std::string_view i) { return std::string(i); });
           }));
  cli.flag("--compare-profile", "FILE", "also predict with this profile (before the request cost fit) and report its "
           "error", compare_path);
  cli.flag("--engine", "STORE",
           "with --processors: also run each mapping on the shard-store engine over STORE's 32-bit shards (preloaded)",
           engine_store);
  cli.flag("--out", "FILE", "write the results as JSON", out_path);
  cli.example("eval_op_latency --profile minilm.ops.json --mappings 24 --tokens 32,128");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  if (profile_path.empty()) cli.fail("--profile is required");
  if (!engine_store.empty() && processors.empty()) cli.fail("--engine goes with --processors");
  try {
    const stile::OpLatencyProfile prof = stile::OpLatencyProfile::load(profile_path);
    if (!prof.request_cost_note().empty()) fmt::print("{}\n", prof.request_cost_note());
    const bool compare = !compare_path.empty();
    const stile::OpLatencyProfile other = compare ? stile::OpLatencyProfile::load(compare_path) : prof;
    std::vector<double> all_other_errors;
    const std::size_t proc = prof.processor_index("cpu:" + std::to_string(cpu));
    std::mt19937_64 rng(seed);
    auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> all_errors;
    const stile::EncoderConfig c = stile::read_encoder_config((model_dir / "config.json").string());
    const stile::OpGraph g1 = stile::op_graph_of(c);
    if (!processors.empty()) {
      // Spread mappings, each loaded once and measured at every token count.
      std::vector<std::uint8_t> index;  // mapping processor i -> the profile's
      for (const std::string& p : processors) index.push_back(static_cast<std::uint8_t>(prof.processor_index(p)));
      const bool any_device =
          std::any_of(processors.begin(), processors.end(), [](const std::string& p) { return p.starts_with("opencl:"); });
      const stile::ProcessorSet procs =
          any_device ? stile::ProcessorSet{}
                     : stile::open_mapping_processors(processors, g1, stile::OpMapping::uniform(g1.size(), 0),
                                                      "--processors");
      std::vector<std::vector<double>> errors(tokens.size()), other_errors(tokens.size()), engine_errors(tokens.size());
      for (std::size_t i = 0; i < mappings + 2; ++i) {
        std::string label;
        stile::OpMapping m = stile::OpMapping::uniform(g1.size(), 0);
        if (i == 0) m.format = stile::formats_of_precision(g1, stile::precision_preset("fp32")), label = "fp32";
        else if (i == 1) m.format = stile::formats_of_precision(g1, stile::precision_preset("int8")), label = "int8";
        else {
          label = fmt::format("random {}", i - 1);
          // An OpenCL device takes one linear format per mapping: drawn from those its profile has.
          std::vector<stile::NumberFormat> device_linear(processors.size(), stile::NumberFormat::kF32);
          for (std::size_t q = 0; q < processors.size(); ++q) {
            if (!processors[q].starts_with("opencl:")) continue;
            std::vector<stile::NumberFormat> fs;
            for (const auto f : stile::formats_of(stile::OpNodeKind::kQkv)) {
              if (prof.has(index[q], stile::OpNodeKind::kQkv, f)) fs.push_back(f);
            }
            if (!fs.empty()) device_linear[q] = fs[below(fs.size())];
          }
          for (std::size_t n = 0; n < g1.size(); ++n) {
            const stile::OpNodeKind kind = g1.nodes[n].kind;
            std::vector<stile::NumberFormat> fs = stile::formats_of(kind);
            const bool linear = stile::is_linear(kind);
            if (any_device) {
              // Draw the processor first, then a format it was profiled in.
              m.processor[n] = static_cast<std::uint8_t>(below(processors.size()));
              const std::size_t q = m.processor[n];
              std::erase_if(fs, [&](stile::NumberFormat f) { return !prof.has(index[q], kind, f); });
              m.format[n] = processors[q].starts_with("opencl:") && linear ? device_linear[q] : fs[below(fs.size())];
              continue;
            }
            m.format[n] = fs[below(fs.size())];
            m.processor[n] = static_cast<std::uint8_t>(below(processors.size()));
          }
        }
        // A mapping with an OpenCL device opens its processors for it (the device's linear format).
        const stile::ProcessorSet own =
            any_device ? stile::open_mapping_processors(processors, g1, m, "--processors") : stile::ProcessorSet{};
        stile::MappedForward f(stile::BertWeights::load(model_dir, stile::mapped_weights_precision(g1, m.format)), m,
                               any_device ? own.pointers() : procs.pointers());
        const std::unique_ptr<stile::Engine> engine =
            engine_store.empty()
                ? nullptr
                : stile::bench::open_mapped_engine(engine_store, c, m, any_device ? own.pointers() : procs.pointers());
        for (std::size_t ti = 0; ti < tokens.size(); ++ti) {
          const std::size_t t = tokens[ti];
          const stile::OpGraph g = stile::bert_op_graph(
              {.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate, .tokens = t});
          const double measured = stile::bench::mapped_forward_us(f, t, repeats);
          const double engine_us = engine ? stile::bench::mapped_engine_us(*engine, t, repeats) : 0.0;
          stile::OpMapping pm = m;
          for (auto& q : pm.processor) q = index[q];
          const double predicted = stile::predict_latency_us(g, stile::OpCostTable::from_profile(g, prof), pm);
          const double err = (predicted - measured) / measured;
          if (i >= 2) errors[ti].push_back(std::abs(err)), all_errors.push_back(std::abs(err));
          const double predicted_other = stile::predict_latency_us(g, stile::OpCostTable::from_profile(g, other), pm);
          const double other_err = (predicted_other - measured) / measured;
          if (i >= 2) other_errors[ti].push_back(std::abs(other_err)), all_other_errors.push_back(std::abs(other_err));
          const double engine_err = engine ? (predicted - engine_us) / engine_us : 0.0;
          if (engine && i >= 2) engine_errors[ti].push_back(std::abs(engine_err));
          std::size_t on[2] = {0, 0};
          for (const auto q : m.processor) ++on[q == 0 ? 0 : 1];
          fmt::print(
              "tokens {:>4}  {:>10}  ({:>3} nodes on {}, {:>3} elsewhere)  predicted {:>9.1f} us  measured "
              "{:>9.1f} us  error {:+6.1f}%{}{}\n",
              t, label, on[0], processors[0], on[1], predicted, measured, 100 * err,
              compare ? fmt::format("  (compared profile: {:9.1f} us, {:+6.1f}%)", predicted_other, 100 * other_err)
                      : std::string(),
              engine ? fmt::format("  engine {:>9.1f} us, error {:+6.1f}%", engine_us, 100 * engine_err)
                     : std::string());
          rows.push_back({{"tokens", t}, {"mapping", label}, {"predicted_us", predicted}, {"measured_us", measured},
                          {"processors", processors}});
          if (compare) rows.back()["compared_predicted_us"] = predicted_other;
          if (engine) rows.back()["engine_us"] = engine_us;
        }
      }
      for (std::size_t ti = 0; ti < tokens.size(); ++ti) {
        std::sort(errors[ti].begin(), errors[ti].end());
        fmt::print("tokens {}: median |error| over {} spread mappings {:.1f}%, max {:.1f}%\n", tokens[ti],
                   errors[ti].size(), 100 * errors[ti][errors[ti].size() / 2], 100 * errors[ti].back());
        if (!engine_store.empty()) {
          std::sort(engine_errors[ti].begin(), engine_errors[ti].end());
          fmt::print("tokens {}: engine: median |error| over {} spread mappings {:.1f}%, max {:.1f}%\n", tokens[ti],
                     engine_errors[ti].size(), 100 * engine_errors[ti][engine_errors[ti].size() / 2],
                     100 * engine_errors[ti].back());
        }
        if (compare) {
          std::sort(other_errors[ti].begin(), other_errors[ti].end());
          fmt::print("tokens {}: compared profile: median |error| {:.1f}%, max {:.1f}%\n", tokens[ti],
                     100 * other_errors[ti][other_errors[ti].size() / 2], 100 * other_errors[ti].back());
        }
      }
    }
    for (const std::size_t t : processors.empty() ? tokens : std::vector<std::size_t>{}) {
      std::vector<double> errors;
      for (std::size_t i = 0; i < mappings + 2; ++i) {
        std::string label;
        const stile::OpGraph g = stile::bert_op_graph(
            {.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate, .tokens = t});
        std::vector<stile::NumberFormat> formats;
        if (i == 0) formats = stile::formats_of_precision(g, stile::precision_preset("fp32")), label = "fp32";
        else if (i == 1) formats = stile::formats_of_precision(g, stile::precision_preset("int8")), label = "int8";
        else formats = stile::random_expressible_formats(g, below), label = fmt::format("random {}", i - 1);
        const stile::BertModel model(stile::BertWeights::load(model_dir, stile::to_model_precision(g, formats)));
        const double measured = stile::bench::pinned_forward_us(model, t, cpu, repeats);
        stile::OpCostTable costs = stile::OpCostTable::from_profile(g, prof);
        costs.request_us.clear();  // the CPU engine on this thread: no driver, no request cost
        stile::OpMapping m = stile::OpMapping::uniform(g.size(), static_cast<std::uint8_t>(proc));
        m.format = formats;
        const double predicted = stile::predict_latency_us(g, costs, m);
        const double err = (predicted - measured) / measured;
        if (i >= 2) errors.push_back(std::abs(err)), all_errors.push_back(std::abs(err));
        fmt::print("tokens {:>4}  {:>10}  predicted {:>9.1f} us  measured {:>9.1f} us  error {:+6.1f}%\n", t, label,
                   predicted, measured, 100 * err);
        rows.push_back({{"tokens", t}, {"mapping", label}, {"predicted_us", predicted}, {"measured_us", measured}});
      }
      std::sort(errors.begin(), errors.end());
      fmt::print("tokens {}: median |error| over {} random mappings {:.1f}%, max {:.1f}%\n", t, errors.size(),
                 100 * errors[errors.size() / 2], 100 * errors.back());
    }
    std::sort(all_errors.begin(), all_errors.end());
    const double med = all_errors[all_errors.size() / 2];
    fmt::print("all: median |error| over {} random mappings {:.1f}% (target <= 10%)\n", all_errors.size(), 100 * med);
    if (compare && !all_other_errors.empty()) {
      std::sort(all_other_errors.begin(), all_other_errors.end());
      fmt::print("all, compared profile {}: median |error| {:.1f}%\n", compare_path.string(),
                 100 * all_other_errors[all_other_errors.size() / 2]);
    }
    if (!out_path.empty()) {
      stile::write_file_atomically(out_path, nlohmann::json{{"rows", rows}, {"median_abs_error", med}}.dump(1) + "\n");
    }
  } catch (const std::exception& ex) {
    fmt::print(stderr, "eval_op_latency: {}\n", ex.what());
    return 1;
  }
  return 0;
}
