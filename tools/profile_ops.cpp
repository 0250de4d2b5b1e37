// profile_ops: measures the op latency profile (plan/op_latency_profile.hpp) of a model's shape on
// this machine: each operator-graph node kind in each number format at each token count on each
// processor (a CPU core, the measuring thread pinned to it, one thread), and the transfer cost
// between each ordered pair of processors. The search tool (search_mapping) reads it.
//
//   profile_ops --out minilm.ops.json
//   profile_ops --model DIR --cpus 0,1 --tokens 16,32,64,128 --repeats 15 --out FILE
//
// Exit status: 0 ok, 1 runtime error (bad model config, a core that cannot be pinned), 2 usage error.
#include <cstddef>
#include <exception>
#include <filesystem>
#include <vector>

#include <fmt/core.h>

#include "cli.hpp"
#include "stile/calibrate/op_latency_profiler.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/io/bert_config.hpp"
#include "stile/io/model_cache.hpp"

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir();
  std::filesystem::path out;
  stile::OpProfileSettings s;
  stile_cli::Parser cli("profile_ops", "[options] --out FILE",
                        "Measures each operator-graph node's latency per number format, token count and processor "
                        "(a CPU core each), and transfers between processors; writes the op latency profile.");
  cli.flag("--model", "DIR", "model directory (its config.json gives the shape; default: the default model)",
           model_dir);
  cli.flag("--cpus", "LIST", "the cores, one processor each", s.cpus);
  cli.flag("--tokens", "LIST", "sequence lengths to measure, increasing", s.tokens).at_least(1);
  cli.flag("--repeats", "N", "timed runs per entry (the median is kept)", s.repeats).at_least(1);
  cli.flag("--out", "FILE", "where to write the profile", out);
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  if (out.empty()) cli.fail("--out is required");
  try {
    const stile::BertConfig c = stile::read_bert_config((model_dir / "config.json").string());
    stile::ProgressBar bar("profile_ops");
    stile::OpLatencyProfile p = stile::measure_op_latency_profile(c, s, &bar);
    p.machine["model"] = model_dir.filename().string();
    p.save(out);
    fmt::print("wrote {} ({} processors, {} token counts)\n", out.string(), p.processors.size(), p.tokens.size());
  } catch (const std::exception& e) {
    fmt::print(stderr, "profile_ops: {}\n", e.what());
    return 1;
  }
  return 0;
}
