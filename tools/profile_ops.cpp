// profile_ops: measures the op latency profile (plan/op_latency_profile.hpp) of a model's shape on
// this machine: each operator-graph node kind in each number format at each token count on each
// processor (a CPU core, the measuring thread pinned to it, one thread), and the transfer cost
// between each ordered pair of processors; then it executes a few mappings with the mapped forward on
// those processors (the model's own weights) to fit the per-request cost and the per-call hand-off
// between processors, per sequence length (calibrate/request_cost_profiler.hpp). The search tool
// (search_mapping) reads it.
//
//   profile_ops --out minilm.ops.json
//   profile_ops --model DIR --cpus 0,1 --tokens 16,32,64,128 --repeats 15 --fit-tokens 32,128 --out FILE
//   profile_ops --opencl 0 --out FILE     also the OpenCL device opencl:0 (calibrate/traced_op_profiler.hpp:
//                                         its linear nodes in fp32 and int8, the rest in fp32)
//
// Exit status: 0 ok, 1 runtime error (bad model config, a core that cannot be pinned), 2 usage error.
#include <cstddef>
#include <exception>
#include <filesystem>
#include <vector>

#include <fmt/core.h>

#include "cli.hpp"
#include "stile/calibrate/op_latency_profiler.hpp"
#include "stile/calibrate/request_cost_profiler.hpp"
#include "stile/calibrate/traced_op_profiler.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/model_cache.hpp"

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir();
  std::filesystem::path out, before_fit;
  stile::OpProfileSettings s;
  stile::RequestCostSettings fit;
  std::vector<std::size_t> opencl;
  stile_cli::Parser cli("profile_ops", "[options] --out FILE",
                        "Measures each operator-graph node's latency per number format, token count and processor "
                        "(a CPU core each), and transfers between processors; writes the op latency profile.");
  cli.flag("--model", "DIR", "model directory (its config.json gives the shape; default: the default model)",
           model_dir);
  cli.flag("--cpus", "LIST", "the cores, one processor each", s.cpus);
  cli.flag("--tokens", "LIST", "sequence lengths to measure, increasing", s.tokens).at_least(1);
  cli.flag("--repeats", "N", "timed runs per entry (the median is kept)", s.repeats).at_least(1);
  cli.flag("--opencl", "LIST", "also profile these OpenCL devices (opencl:N) through the mapped forward's trace",
           opencl);
  cli.flag("--fit-tokens", "LIST", "sequence lengths of the request cost fit's executed mappings (a request cost each)",
           fit.tokens)
      .at_least(1);
  cli.flag("--fit-repeats", "N", "timed runs per executed mapping of the fit (the median is kept)", fit.repeats)
      .at_least(1);
  cli.flag("--fit-moved-layers", "LIST",
           "the fit's mappings that move the LayerNorms of the first N layers to the "
           "other core, one per N",
           fit.moved_layers);
  cli.flag("--fit-spread", "N", "also execute N mappings per pair of cores with each node's core and format drawn",
           fit.spread);
  cli.flag("--fit-seed", "N", "seed of those draws", fit.seed);
  cli.flag("--out", "FILE", "where to write the profile", out);
  cli.flag("--out-before-fit", "FILE", "also write the profile before the request cost fit (version 1: no request "
           "cost, the per-call transfer cost of two spinning threads), to compare predictions with",
           before_fit);
  cli.example("profile_ops --out minilm.ops.json", "cores 0 and 1, 16..128 tokens");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  if (out.empty()) cli.fail("--out is required");
  try {
    const stile::EncoderConfig c = stile::read_encoder_config((model_dir / "config.json").string());
    stile::ProgressBar bar("profile_ops");
    stile::OpLatencyProfile p = stile::measure_op_latency_profile(c, s, &bar);
    p.machine["model"] = model_dir.filename().string();
    for (const std::size_t index : opencl) {
      const std::size_t q = p.add_processor("opencl:" + std::to_string(index));
      stile::ProgressBar bar_cl("profile_ops " + p.processors[q]);
      stile::measure_traced_op_latency(p, q, 0, model_dir, {stile::NumberFormat::kF32, stile::NumberFormat::kInt8},
                                       s.repeats, &bar_cl);
    }
    if (!before_fit.empty()) p.save(before_fit);
    stile::ProgressBar fit_bar("request cost fit");
    stile::fit_request_costs(p, model_dir, fit, &fit_bar);
    for (const std::size_t t : p.request_tokens) {
      fmt::print("request cost at {} tokens: {:.1f} us", t, p.request_cost_us(1, t));
      for (std::size_t a = 0; a < p.processors.size(); ++a) {
        for (std::size_t b = a + 1; b < p.processors.size(); ++b) {
          fmt::print("; hand-off {} <-> {}: {:.2f} us per call", p.processors[a], p.processors[b],
                     p.transfer_at(a, b, t).call_us);
        }
      }
      fmt::print("\n");
    }
    p.save(out);
    fmt::print("wrote {} ({} processors, {} token counts)\n", out.string(), p.processors.size(), p.tokens.size());
  } catch (const std::exception& e) {
    fmt::print(stderr, "profile_ops: {}\n", e.what());
    return 1;
  }
  return 0;
}
