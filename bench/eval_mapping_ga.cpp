// DNN-SMO's genetic mapping (plan/mapping_ga.hpp) against standard GAs on the same fitness (the
// schedule emulator's predicted latency on an op latency profile): our plain generational GA and,
// when built with pagmo2 (libpagmo-dev, optional), pagmo's `sga`. The graph: the default model's
// operator graph at --tokens; the processors: CPU cores each running one number format
// (--clusters, default cpu:0 in fp32 and cpu:1 in int8: "two CPU clusters in different formats").
// Reports, per algorithm and seed, the best predicted latency and the generations (and fitness
// evaluations) to come within 1% of the best found by any run; the best mapping vs the best
// single processor, predicted and, with --execute N, measured (the median of N runs of the mapped
// forward, hetero/mapped_forward.hpp, on CPU clusters of one pinned core each, and each single
// processor's mapping run the same way; with --engine STORE, on the shard-store engine too:
// bench/mapped_engine.hpp); and writes the convergence as SVG.
//
//   eval_mapping_ga --profile minilm.ops.json [--tokens 128] [--seeds 5] [--execute 15] [--engine STORE]
//                   [--svg FILE] [--out FILE]
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mapped_engine.hpp"
#include "pinned_latency.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/hetero/processor_trace.hpp"
#include "svg_plot.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/plan/mapping_ga.hpp"

#if defined(STILE_HAVE_PAGMO)
#include <pagmo/algorithm.hpp>
#include <pagmo/algorithms/sga.hpp>
#include <pagmo/population.hpp>
#include <pagmo/problem.hpp>

namespace {
// The same fitness for pagmo: integer genes in [0, processors - 1] (pagmo's integer part, nix).
stile::Genome genome_of(const pagmo::vector_double& x) {
  stile::Genome g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) g[i] = static_cast<std::uint8_t>(x[i] + 0.5);
  return g;
}
struct PagmoMapping {
  const stile::MappingProblem* p = nullptr;
  pagmo::vector_double fitness(const pagmo::vector_double& x) const { return {p->latency_us(genome_of(x))}; }
  std::pair<pagmo::vector_double, pagmo::vector_double> get_bounds() const {
    return {pagmo::vector_double(p->graph->size(), 0.0),
            pagmo::vector_double(p->graph->size(), double(p->processors - 1))};
  }
  pagmo::vector_double::size_type get_nix() const { return p->graph->size(); }
};
}  // namespace
#endif

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir(), profile_path, out_path, svg_path;
  std::size_t tokens = 128, seeds = 5, generations = 1000, baseline_generations = 400, execute = 0;
  std::string clusters = "cpu:0=fp32,cpu:1=int8";
  stile::GaOptions smo;
  stile_cli::Parser cli("eval_mapping_ga", "--profile FILE [options]",
                        "DNN-SMO's GA vs standard GAs on the predicted latency of the default model's operator graph.");
  cli.flag("--model", "DIR", "model directory (its config.json gives the shape)", model_dir);
  cli.flag("--profile", "FILE", "op latency profile (tools/profile_ops)", profile_path);
  cli.flag("--tokens", "N", "sequence length", tokens).at_least(1);
  cli.flag("--clusters", "LIST", "processors as PROFILE_PROCESSOR=FORMAT, comma-separated", clusters);
  cli.flag("--seeds", "N", "runs per algorithm", seeds).at_least(1);
  cli.flag("--generations", "N", "DNN-SMO generations (one child each)", generations).at_least(1);
  cli.flag("--baseline-generations", "N", "standard GA generations (50 children each)", baseline_generations)
      .at_least(1);
  cli.flag("--parallel-rate", "X", "DNN-SMO: extra mutation rate of the most parallel nodes", smo.parallel_rate)
      .range(0, 1);
  cli.flag("--branch-rate", "X", "DNN-SMO: rate of branch-level mutation", smo.branch_rate).range(0, 1);
  cli.flag("--reuse-rate", "X", "DNN-SMO: rate of copying one layer's genes onto another", smo.reuse_rate).range(0, 1);
  cli.flag("--execute", "N", "execute the best mapping and the single processors' (median of N runs; 0: no)", execute);
  std::filesystem::path trace_path, engine_store;
  cli.flag("--engine", "STORE",
           "with --execute: run the mappings on the shard-store engine over STORE's 32-bit shards too",
           engine_store);
  cli.flag("--trace", "FILE", "with --execute: write one run of the best mapping as Chrome trace JSON", trace_path);
  cli.flag("--svg", "FILE", "write the convergence plot", svg_path);
  cli.flag("--out", "FILE", "write the results as JSON", out_path);
  cli.example("eval_mapping_ga --profile minilm.ops.json --tokens 128 --seeds 5");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  if (profile_path.empty()) cli.fail("--profile is required");
  if (!engine_store.empty() && execute == 0) cli.fail("--engine goes with --execute");
  try {
    const stile::OpLatencyProfile prof = stile::OpLatencyProfile::load(profile_path);
    if (!prof.request_cost_note().empty()) fmt::print(stderr, "{}\n", prof.request_cost_note());
    const stile::EncoderConfig c = stile::read_encoder_config((model_dir / "config.json").string());
    const stile::OpGraph g = stile::bert_op_graph(
        {.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate, .tokens = tokens});
    const stile::OpCostTable costs = stile::OpCostTable::from_profile(g, prof);
    std::vector<stile::FormattedProcessor> procs;
    std::vector<std::string> names;
    for (const std::string& item : stile_cli::parse_list(clusters, "--clusters", [](std::string_view v) {
           return std::string(v);
         })) {
      const auto eq = item.find('=');
      stile::NumberFormat f{};
      if (eq == std::string::npos || !stile::parse_number_format(item.substr(eq + 1), f)) {
        cli.fail("--clusters wants PROCESSOR=FORMAT items, got '" + item + "'");
      }
      procs.push_back({prof.processor_index(item.substr(0, eq)), f});
      names.push_back(item);
    }
    const stile::MappingProblem problem = stile::mapping_problem(g, costs, procs);

    struct Run {
      std::string algorithm;
      std::uint64_t seed;
      stile::GaResult r;
      std::size_t children_per_generation;
    };
    std::vector<Run> runs;
    for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
      stile::GaOptions o = smo;
      o.seed = seed;
      o.generations = generations;
      runs.push_back({"DNN-SMO GA", seed, stile::dnn_smo_ga(problem, o), 1});
      o.generations = baseline_generations;
      runs.push_back({"plain GA", seed, stile::plain_ga(problem, o), 49});
#if defined(STILE_HAVE_PAGMO)
      {
        pagmo::problem pp{PagmoMapping{&problem}};
        pagmo::population pop{pp, 50, static_cast<unsigned>(seed)};
        // Single-point crossover, uniform (random-reset) mutation at 1/n, binary tournament, as
        // the plain GA; one generation per evolve() call so the best is recorded each generation.
        pagmo::algorithm algo{pagmo::sga(1, 0.9, 1.0, 1.0 / double(g.size()), 1.0, 2u, "single", "uniform",
                                         "tournament", static_cast<unsigned>(seed))};
        stile::GaResult r;
        auto note = [&] {
          if (pop.champion_f()[0] < r.best_us) {  // the genome too: the best run's mapping is executed
            r.best_us = pop.champion_f()[0];
            r.best = genome_of(pop.champion_x());
          }
          r.best_per_generation.push_back(r.best_us);
          r.evaluations.push_back(static_cast<std::size_t>(pop.get_problem().get_fevals()));
        };
        note();
        for (std::size_t gen = 0; gen < baseline_generations; ++gen) {
          pop = algo.evolve(pop);
          note();
        }
        runs.push_back({"pagmo sga", seed, r, 50});
      }
#endif
    }
    double best = std::numeric_limits<double>::infinity();
    for (const Run& run : runs) best = std::min(best, run.r.best_us);
    double single = std::numeric_limits<double>::infinity();
    std::size_t single_q = 0;
    for (std::size_t q = 0; q < procs.size(); ++q) {
      const double us = problem.latency_us(stile::Genome(g.size(), static_cast<std::uint8_t>(q)));
      fmt::print("all nodes on {}: {:.1f} us (predicted)\n", names[q], us);
      if (us < single) single = us, single_q = q;
    }
    fmt::print("\ngraph: {} nodes at {} tokens; best found {:.1f} us; best single processor {} {:.1f} us "
               "(predicted gain {:.1f}%)\n",
               g.size(), tokens, best, names[single_q], single, 100 * (1 - best / single));
    fmt::print("{:>12} {:>5} {:>11} {:>14} {:>14}\n", "algorithm", "seed", "best us", "gens to 1%", "evals to 1%");
    nlohmann::json out = {{"tokens", tokens}, {"clusters", names}, {"best_us", best}, {"best_single_us", single},
                          {"runs", nlohmann::json::array()}};
    std::map<std::string, std::vector<std::size_t>> gens_to;
    for (const Run& run : runs) {
      const std::size_t k = stile::generations_to_reach(run.r, best, 0.01);
      const bool reached = k != static_cast<std::size_t>(-1);
      fmt::print("{:>12} {:>5} {:>11.1f} {:>14} {:>14}\n", run.algorithm, run.seed, run.r.best_us,
                 reached ? std::to_string(k) : "not reached", reached ? std::to_string(run.r.evaluations[k]) : "-");
      gens_to[run.algorithm].push_back(reached ? k : run.r.best_per_generation.size());
      out["runs"].push_back({{"algorithm", run.algorithm},
                             {"seed", run.seed},
                             {"best_us", run.r.best_us},
                             {"generations_to_1pct", reached ? nlohmann::json(k) : nlohmann::json(nullptr)},
                             {"evaluations_to_1pct", reached ? nlohmann::json(run.r.evaluations[k]) : nlohmann::json(nullptr)}});
    }
    for (auto& [name, v] : gens_to) {
      std::sort(v.begin(), v.end());
      fmt::print("{}: median generations to within 1%: {}\n", name, v[v.size() / 2]);
    }
    const stile::GaResult& best_run =
        std::min_element(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.r.best_us < b.r.best_us; })->r;
    std::vector<std::size_t> count(procs.size(), 0);
    for (const auto q : best_run.best) ++count[q];
    for (std::size_t q = 0; q < procs.size(); ++q) fmt::print("best mapping: {} nodes on {}\n", count[q], names[q]);
    if (execute > 0) {
      // Executed on the profile's processors by name: the best mapping, then each single processor.
      const stile::OpGraph g1 = stile::op_graph_of(c);
      std::vector<stile::OpMapping> ms{stile::mapping_of(g, procs, best_run.best)};
      std::vector<std::string> labels{"best mapping"};
      for (std::size_t q = 0; q < procs.size(); ++q) {
        ms.push_back(stile::mapping_of(g, procs, stile::Genome(g.size(), static_cast<std::uint8_t>(q))));
        labels.push_back("all on " + names[q]);
      }
      const stile::ProcessorSet open =
          stile::open_mapping_processors(prof.processors, g1, stile::OpMapping::uniform(g1.size(), 0), "the profile");
      nlohmann::json executed = nlohmann::json::array();
      double best_single_measured = std::numeric_limits<double>::infinity(), best_measured = 0;
      double best_single_engine = std::numeric_limits<double>::infinity(), best_engine = 0;
      for (std::size_t k = 0; k < ms.size(); ++k) {
        stile::MappedForward f(stile::BertWeights::load(model_dir, stile::mapped_weights_precision(g1, ms[k].format)),
                               ms[k], open.pointers());
        const double measured = stile::bench::mapped_forward_us(f, tokens, execute);
        if (k == 0 && !trace_path.empty()) {
          stile::ProcessorTrace trace;
          for (stile::Processor* p : open.pointers()) p->set_trace(&trace);
          stile::bench::mapped_forward_us(f, tokens, 1);
          for (stile::Processor* p : open.pointers()) p->set_trace(nullptr);
          std::map<std::string, double> busy;
          for (const stile::ProcessorSpan& sp : trace.spans()) busy[sp.processor + " " + sp.op] += sp.end_ms - sp.start_ms;
          for (const auto& [what, spent] : busy) fmt::print("trace: {:>24} {:9.3f} ms\n", what, spent);
          stile::write_file_atomically(trace_path, trace.chrome_trace().dump() + "\n");
        }
        const double predicted = stile::predict_latency_us(g, costs, ms[k]);
        fmt::print("executed {:>22}: predicted {:>9.1f} us, measured {:>9.1f} us ({:+.1f}%)\n", labels[k], predicted,
                   measured, 100 * (predicted / measured - 1));
        if (k == 0) best_measured = measured;
        else best_single_measured = std::min(best_single_measured, measured);
        executed.push_back({{"mapping", labels[k]}, {"predicted_us", predicted}, {"measured_us", measured}});
        if (!engine_store.empty()) {
          const std::unique_ptr<stile::Engine> engine =
              stile::bench::open_mapped_engine(engine_store, c, ms[k], open.pointers());
          const double on_engine = stile::bench::mapped_engine_us(*engine, tokens, execute);
          fmt::print("  on the engine {:>15}: measured {:>9.1f} us ({:+.1f}% predicted)\n", labels[k], on_engine,
                     100 * (predicted / on_engine - 1));
          if (k == 0) {
            best_engine = on_engine;
          } else {
            best_single_engine = std::min(best_single_engine, on_engine);
          }
          executed.back()["engine_us"] = on_engine;
        }
      }
      fmt::print("measured: best mapping {:.1f} us vs best single processor {:.1f} us: {:.1f}% faster (thesis: 15%)\n",
                 best_measured, best_single_measured, 100 * (1 - best_measured / best_single_measured));
      if (!engine_store.empty()) {
        fmt::print("on the engine: best mapping {:.1f} us vs best single processor {:.1f} us: {:.1f}% faster\n",
                   best_engine, best_single_engine, 100 * (1 - best_engine / best_single_engine));
      }
      out["executed"] = executed;
    }
    if (!svg_path.empty()) {
      std::vector<stile::bench::PlotSeries> series;
      const std::map<std::string, std::string> colors{
          {"DNN-SMO GA", "#d62728"}, {"plain GA", "#1f77b4"}, {"pagmo sga", "#2ca02c"}};
      for (const Run& run : runs) {
        if (run.seed != 1) continue;
        stile::bench::PlotSeries s{run.algorithm + " (seed 1)", colors.at(run.algorithm), {}, {}, false};
        for (std::size_t k = 0; k < run.r.best_per_generation.size(); ++k) {
          s.x.push_back(double(std::max<std::size_t>(1, run.r.evaluations[k])));
          s.y.push_back(run.r.best_per_generation[k] / 1000.0);
        }
        series.push_back(std::move(s));
      }
      stile::write_file_atomically(
          svg_path, stile::bench::svg_plot(fmt::format("Mapping GA convergence: MiniLM, {} tokens, {}", tokens, clusters),
                                           "fitness evaluations", "best predicted latency (ms)", series, true));
    }
    if (!out_path.empty()) stile::write_file_atomically(out_path, out.dump(1) + "\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "eval_mapping_ga: {}\n", e.what());
    return 1;
  }
  return 0;
}
