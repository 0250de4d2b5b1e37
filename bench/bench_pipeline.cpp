// The layer pipeline against load-then-execute on the same plan and engine: per-layer stall and
// end-to-end latency of cold requests (empty preload buffer, O_DIRECT reads: no page cache), with
// storage emulated at a board's flash speed and without emulation; and the cost of the coroutine
// machinery itself (a pipeline of no-op IO and compute jobs, per layer).
//
//   bench_pipeline STORE [--tokens 128] [--bits 2,4] [--storage emmc] [--runs 5] [--trace out.json] [--json out.json]
//
// Default plan: the whole model (every layer, every shard) at each of --bits. Every figure is the
// median over --runs requests; the modes alternate run by run so a slow spell hits both.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/io/json_file.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/engine.hpp"
#include "stile/pipeline/executor.hpp"
#include "stile/pipeline/layer_pipeline.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/pipeline/layer_reader.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/io/encoder_config.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct ModeFigures {
  std::vector<double> total, stall, compute;
  std::vector<std::vector<double>> layer_stall;
};

// Microseconds per layer of a pipeline whose jobs do nothing, and of the same calls in a plain loop.
std::pair<double, double> coroutine_overhead_us(std::size_t layers, std::size_t runs) {
  stile::Executor io("io"), compute("compute");
  stile::LayerPipeline pipeline(io, compute);
  volatile std::size_t sink = 0;
  stile::LayerJobs jobs;
  jobs.load = [&](std::size_t k, std::size_t, stile::LayerTimes&) { sink = sink + k; };
  jobs.compute = [&](std::size_t k, std::size_t) { sink = sink + k; };
  std::vector<stile::LayerTimes> times;
  const auto one = [&] {
    pipeline.run(layers, 2, stile::PipelineMode::pipelined, jobs, std::chrono::steady_clock::now(), times);
  };
  for (std::size_t i = 0; i < runs / 10; ++i) one();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < runs; ++i) one();
  const double piped = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  stile::LayerTimes t;
  const auto t1 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < runs; ++i) {
    for (std::size_t k = 0; k < layers; ++k) {
      jobs.load(k, 0, t);
      jobs.compute(k, 0);
    }
  }
  const double plain = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count();
  return {piped / static_cast<double>(runs * layers), plain / static_cast<double>(runs * layers)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_path, trace_path, json_path, storage = "emmc";
  std::size_t tokens = 128, runs = 5;
  std::vector<unsigned> bits_list{2, 4};
  stile_cli::Parser cli("bench_pipeline", "[options] STORE",
                        "The layer pipeline against load-then-execute on the same plan (the whole model at each of "
                        "--bits): cold requests, storage emulated and not; then the coroutine machinery's own cost.");
  cli.flag("--tokens", "N", "tokens per request", tokens);
  cli.bits("--bits", "LIST", "the plans' bitwidths", bits_list);
  cli.storage(storage);
  cli.flag("--runs", "R", "requests per figure (the median)", runs);
  cli.flag("--trace", "FILE", "write the last pipelined run's timeline as Chrome trace JSON", trace_path);
  cli.flag("--json", "FILE", "write the figures as JSON", json_path);
  cli.example("bench_pipeline minilm.stile --bits 2,4,32 --runs 7");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  store_path = positional[0];
  try {
    nlohmann::json report = {{"machine", stile::bench::machine_description()}, {"tokens", tokens}, {"runs", runs}};
    fmt::print("machine: {}\nstile target: {}; MiniLM-shaped store {}; {} tokens; median of {} cold requests each\n",
               stile::bench::machine_description(), stile::active_target_name(), store_path, tokens, runs);
    for (const std::string& storage_name : {storage, std::string("none")}) {
      for (const unsigned bits : bits_list) {
        ModeFigures fig[2];
        std::string described;
        stile::EngineResult traced;
        for (std::size_t r = 0; r < runs; ++r) {
          for (const stile::PipelineMode mode :
               {stile::PipelineMode::pipelined, stile::PipelineMode::load_then_execute}) {
            stile::EngineOptions options;
            options.storage = storage_name;
            options.mode = mode;
            stile::Engine engine(store_path, options);  // fresh: nothing preloaded, nothing kept
            described = engine.backend_description();
            std::string text;
            while (engine.tokenizer().encode(text).size() < tokens) text += "a charming and often affecting journey . ";
            const stile::Encoding e = engine.tokenizer().encode(text, tokens);
            const stile::SubmodelPlan plan =
                stile::SubmodelPlan::uniform(engine.store().num_layers(), engine.store().shards_per_layer(), bits);
            const stile::EngineResult res = engine.run(e, plan);
            ModeFigures& f = fig[mode == stile::PipelineMode::pipelined ? 0 : 1];
            f.total.push_back(res.timeline.total_ms);
            f.stall.push_back(res.timeline.stall_ms());
            f.compute.push_back(res.timeline.compute_ms());
            f.layer_stall.resize(res.timeline.layers.size());
            for (std::size_t l = 0; l < res.timeline.layers.size(); ++l)
              f.layer_stall[l].push_back(res.timeline.layers[l].stall_ms);
            if (mode == stile::PipelineMode::pipelined && r + 1 == runs) traced = res;
          }
        }
        fmt::print("\n{} bits, {}\n", bits, described);
        fmt::print("  {:<18} {:>10} {:>10} {:>10}   stall per layer (ms)\n", "mode", "total ms", "stall ms",
                   "compute ms");
        nlohmann::json modes = nlohmann::json::object();
        for (int m = 0; m < 2; ++m) {
          std::string per_layer;
          std::vector<double> layer_medians;
          for (const auto& s : fig[m].layer_stall) {
            layer_medians.push_back(median(s));
            per_layer += fmt::format("{:6.2f} ", layer_medians.back());
          }
          const char* name = m == 0 ? "pipelined" : "load-then-execute";
          fmt::print("  {:<18} {:10.2f} {:10.2f} {:10.2f}   {}\n", name, median(fig[m].total), median(fig[m].stall),
                     median(fig[m].compute), per_layer);
          modes[name] = {{"total_ms", median(fig[m].total)},
                         {"stall_ms", median(fig[m].stall)},
                         {"compute_ms", median(fig[m].compute)},
                         {"layer_stall_ms", layer_medians}};
        }
        fmt::print("  pipelined / load-then-execute latency: {:.3f}\n", median(fig[0].total) / median(fig[1].total));
        report["results"].push_back({{"storage", described}, {"bits", bits}, {"modes", modes}});
        if (!trace_path.empty() && storage_name == storage && bits == bits_list.back()) {
          stile::write_file_atomically(trace_path, stile::to_chrome_trace(traced.timeline).dump(1) + "\n");
          fmt::print("  trace of the last pipelined run: {}\n", trace_path);
        }
      }
    }
    const auto [piped_us, plain_us] = coroutine_overhead_us(6, 20000);
    fmt::print(
        "\ncoroutine machinery: a 6-layer pipeline of no-op IO and compute jobs costs {:.2f} us per layer "
        "(the same calls in a plain loop: {:.3f} us)\n",
        piped_us, plain_us);
    report["coroutine_us_per_layer"] = piped_us;
    report["plain_loop_us_per_layer"] = plain_us;
    if (!json_path.empty()) stile::write_file_atomically(json_path, report.dump(1) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
