// search_mapping: which operator runs where, in what format. Reads an op latency profile
// (tools/profile_ops) and writes a mapping file (plan/mapping_file.hpp): a processor and a number
// format per node of the model's operator graph.
//
//   latency only (DNN-SMO's GA, plan/mapping_ga.hpp): processors as PROFILE_PROCESSOR=FORMAT
//     search_mapping --profile P --clusters cpu:0=fp32,cpu:1=int8 --out mapping.json
//   latency and accuracy (NSGA-II, plan/precision_search.hpp) with an accuracy model
//   (tools/fit_op_accuracy): the fastest point of the front whose predicted loss is <= --max-loss
//     search_mapping --profile P --accuracy A --max-loss 0.002 --out mapping.json [--front front.json]
//   --executable: one processor (--processor) and what ModelPrecision expresses, so that the CPU
//   engine runs the answer today (embed --mapping FILE); otherwise nodes may spread over
//   processors, which needs the processor runtime (hetero/) to execute.
//
// Exit status: 0 ok, 1 runtime error, 2 usage error.
#include <cstddef>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/plan/mapping_file.hpp"
#include "stile/plan/mapping_ga.hpp"
#include "stile/plan/precision_search.hpp"

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir(), profile_path, accuracy_path, out, front_path;
  std::size_t tokens = 128, generations = 0, population = 0, seed = 1;
  std::string clusters, processor;
  double max_loss = std::numeric_limits<double>::infinity();
  bool executable = false;
  stile_cli::Parser cli("search_mapping", "--profile FILE --out FILE [options]",
                        "Searches a processor and number format per operator of the model's graph for the least "
                        "predicted latency (GA), or along the latency / accuracy-loss front (NSGA-II), and writes "
                        "the mapping file.");
  cli.flag("--model", "DIR", "model directory (its config.json gives the shape)", model_dir);
  cli.flag("--profile", "FILE", "op latency profile (tools/profile_ops)", profile_path);
  cli.flag("--tokens", "N", "sequence length to map for", tokens).at_least(1);
  cli.flag("--clusters", "LIST", "GA: processors as PROFILE_PROCESSOR=FORMAT (default: every processor in fp32)",
           clusters);
  cli.flag("--accuracy", "FILE", "accuracy model (tools/fit_op_accuracy): search with NSGA-II", accuracy_path);
  cli.flag("--max-loss", "X", "NSGA-II: the fastest front point with predicted loss <= X (default: any)", max_loss)
      .at_least(0);
  cli.toggle("--executable", "NSGA-II: one processor, formats ModelPrecision expresses (runs on the CPU engine today)",
             executable);
  cli.flag("--processor", "NAME", "with --executable: the processor (default: the profile's first)", processor);
  cli.flag("--generations", "N", "generations (default: GA 2000, NSGA-II 300)", generations);
  cli.flag("--population", "N", "population (default: GA 50, NSGA-II 100)", population);
  cli.flag("--seed", "N", "random seed", seed);
  cli.flag("--front", "FILE", "NSGA-II: write the whole front as JSON", front_path);
  cli.flag("--out", "FILE", "where to write the mapping", out);
  cli.example("search_mapping --profile minilm.ops.json --accuracy minilm.accuracy.json --out mapping.json");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  if (profile_path.empty() || out.empty()) cli.fail("--profile and --out are required");
  if (accuracy_path.empty() && (executable || !front_path.empty())) cli.fail("--executable and --front need --accuracy");
  try {
    const stile::OpLatencyProfile prof = stile::OpLatencyProfile::load(profile_path);
    if (!prof.request_cost_note().empty()) fmt::print(stderr, "{}\n", prof.request_cost_note());
    const stile::EncoderConfig c = stile::read_encoder_config((model_dir / "config.json").string());
    const stile::OpGraph g = stile::bert_op_graph({.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads,
                                                   .ffn = c.intermediate, .tokens = tokens, .classes = prof.shape.classes});
    const stile::OpCostTable costs = stile::OpCostTable::from_profile(g, prof);
    stile::OpMappingFile file;
    file.shape = g.shape;
    file.processors = prof.processors;
    if (accuracy_path.empty()) {
      std::vector<stile::FormattedProcessor> procs;
      std::vector<std::string> items;
      if (clusters.empty()) {
        for (std::size_t q = 0; q < prof.processors.size(); ++q) procs.push_back({q, stile::NumberFormat::kF32});
      } else {
        items = stile_cli::parse_list(clusters, "--clusters", [](std::string_view v) { return std::string(v); });
      }
      for (const std::string& item : items) {
        const auto eq = item.find('=');
        stile::NumberFormat f{};
        if (eq == std::string::npos || !stile::parse_number_format(item.substr(eq + 1), f)) {
          cli.fail("--clusters wants PROCESSOR=FORMAT items, got '" + item + "'");
        }
        procs.push_back({prof.processor_index(item.substr(0, eq)), f});
      }
      const stile::MappingProblem problem = stile::mapping_problem(g, costs, procs);
      stile::GaOptions o;
      o.generations = generations ? generations : 2000;
      if (population) o.population = population;
      o.seed = seed;
      stile::ProgressBar bar("search_mapping (GA)");
      const stile::GaResult r =
          stile::dnn_smo_ga(problem, o, [&](std::size_t done, std::size_t total) { bar.update(done, total); });
      file.mapping = stile::mapping_of(g, procs, r.best);
      file.predicted = {{"latency_us", r.best_us}, {"search", "DNN-SMO GA"}, {"generations", o.generations},
                        {"clusters", clusters.empty() ? "every processor in fp32" : clusters}};
      fmt::print("best predicted latency {:.1f} us\n", r.best_us);
    } else {
      const stile::OpAccuracyModel acc = stile::OpAccuracyModel::load(accuracy_path);
      stile::OpGraphShape want = g.shape;
      want.tokens = 0;
      if (!(acc.shape == want)) throw stile::Error("stile: " + accuracy_path.string() + ": for another model shape");
      const std::uint8_t proc = static_cast<std::uint8_t>(processor.empty() ? 0 : prof.processor_index(processor));
      const stile::PrecisionProblem p = executable ? stile::executable_precision_problem(g, costs, acc, proc)
                                                   : stile::free_precision_problem(g, costs, acc);
      stile::Nsga2Options o;
      o.generations = generations ? generations : 300;
      if (population) o.population = population;
      o.seed = seed;
      stile::ProgressBar bar("search_mapping (NSGA-II)");
      const std::vector<stile::ParetoPoint> front =
          stile::nsga2_search(p, o, [&](std::size_t done, std::size_t total) { bar.update(done, total); });
      const stile::ParetoPoint* pick = nullptr;
      for (const auto& pt : front) {
        if (pt.objectives[1] <= max_loss) {
          pick = &pt;
          break;  // the front is by increasing latency
        }
      }
      if (pick == nullptr) throw stile::Error(fmt::format("no front point has predicted loss <= {}", max_loss));
      file.mapping = p.mapping(pick->genes);
      file.predicted = {{"latency_us", pick->objectives[0]}, {"accuracy_loss", pick->objectives[1]},
                        {"search", executable ? "NSGA-II, executable (one processor, ModelPrecision)" : "NSGA-II"},
                        {"generations", o.generations}, {"population", o.population}};
      fmt::print("front: {} points; picked {:.1f} us at predicted loss {:.5f}\n", front.size(), pick->objectives[0],
                 pick->objectives[1]);
      if (!front_path.empty()) {
        nlohmann::json fj = nlohmann::json::array();
        for (const auto& pt : front) {
          stile::OpMappingFile f = file;
          f.mapping = p.mapping(pt.genes);
          f.predicted = {{"latency_us", pt.objectives[0]}, {"accuracy_loss", pt.objectives[1]}};
          fj.push_back(f.to_json());
        }
        stile::write_file_atomically(front_path, fj.dump(1) + "\n");
      }
    }
    file.save(out);
    if (file.single_processor() != static_cast<std::size_t>(-1) &&
        stile::expressible_as_model_precision(g, file.mapping.format)) {
      const stile::ModelPrecision mp = stile::model_precision_of(file, c, out.string());
      fmt::print("as a ModelPrecision (embed --mapping {}): embedding LayerNorm {}\n", out.string(),
                 stile::to_string(mp.embedding_layer_norm));
      for (std::size_t l = 0; l < mp.layers.size(); ++l) {
        const stile::LayerPrecision& lp = mp.layers[l];
        fmt::print("  layer {}: qkv {} attn_out {} ffn_in {} ffn_out {} | LayerNorm {} GELU {} softmax {}\n", l,
                   stile::to_string(lp.linear[0]), stile::to_string(lp.linear[1]), stile::to_string(lp.linear[2]),
                   stile::to_string(lp.linear[3]), stile::to_string(lp.ops.layer_norm), stile::to_string(lp.ops.gelu),
                   stile::to_string(lp.ops.softmax));
      }
    } else {
      fmt::print(
          "the mapping spreads nodes over processors: embed --mapping {0} (the in-memory model) and run "
          "--mapping {0} (the shard-store engine) run it on the processor runtime (hetero/)\n",
          out.string());
    }
    fmt::print("wrote {}\n", out.string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "search_mapping: {}\n", e.what());
    return 1;
  }
  return 0;
}
