// NSGA-II's front over (processor, precision) per operator (plan/precision_search.hpp) on the
// default model, with predicted latency (schedule emulator on an op latency profile) and predicted
// accuracy loss (the additive model of tools/fit_op_accuracy, fitted on SST-2 train calibration
// rows). Two fronts: the free one (nodes over every processor of the profile: predicted only,
// executing it needs the processor runtime) and the executable one (one processor, what
// ModelPrecision expresses). --points points of the executable front, and the fp32 and int8
// presets, are then executed: measured latency (one thread pinned to --cpu, --tokens tokens) and
// SST-2 dev accuracy with the full model's head from the heads file, and the embeddings' cosine
// to fp32 on dev. dev is only read to report. --free-points points of the free front (both
// processors) are executed by the mapped forward (hetero/mapped_forward.hpp) on CPU clusters of one
// pinned core each, named as the profile's processors: measured latency, and dev accuracy of the
// embeddings the mapped forward computes; the two presets are also timed that way on --cpu (their
// outputs are the same bits as BertModel's, tests/hetero/test_mapped_forward.cpp). Writes the
// fronts as SVG.
//
//   eval_precision_front --profile P --accuracy A --heads STORE.heads.json [--svg FILE] [--out FILE]
#include <algorithm>
#include <array>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "stile/hetero/processor_set.hpp"
#include "embed_texts.hpp"
#include "pinned_latency.hpp"
#include "svg_plot.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/precision_search.hpp"

#if defined(STILE_HAVE_PAGMO)
#include <pagmo/algorithm.hpp>
#include <pagmo/algorithms/nsga2.hpp>
#include <pagmo/population.hpp>
#include <pagmo/problem.hpp>

namespace {
// The same problem for pagmo: the integer genes of PrecisionProblem (processor index and format
// index per gene group) as pagmo's integer part (nix = every dimension), two objectives. pagmo's
// nsga2 refuses a dimension whose bounds are equal, so genes with one value (the processor, when
// one is allowed) are left out and held at 0.
struct PagmoPrecision {
  const stile::PrecisionProblem* p = nullptr;
  std::vector<std::size_t> free;  // indices of the genes with more than one value
  explicit PagmoPrecision(const stile::PrecisionProblem* problem = nullptr) : p(problem) {
    if (p == nullptr) return;
    const auto ub = p->upper_bounds();
    for (std::size_t i = 0; i < ub.size(); ++i) {
      if (ub[i] > 0) free.push_back(i);
    }
  }
  std::vector<std::size_t> genes(const pagmo::vector_double& x) const {
    std::vector<std::size_t> g(p->genes(), 0);
    for (std::size_t i = 0; i < free.size(); ++i) g[free[i]] = static_cast<std::size_t>(x[i] + 0.5);
    return g;
  }
  pagmo::vector_double fitness(const pagmo::vector_double& x) const {
    const auto o = p->objectives(genes(x));
    return {o[0], o[1]};
  }
  std::pair<pagmo::vector_double, pagmo::vector_double> get_bounds() const {
    pagmo::vector_double lo, hi;
    const auto ub = p->upper_bounds();
    for (const std::size_t i : free) lo.push_back(0), hi.push_back(double(ub[i]));
    return {lo, hi};
  }
  pagmo::vector_double::size_type get_nobj() const { return 2; }
  pagmo::vector_double::size_type get_nix() const { return free.size(); }
};
}  // namespace
#endif

// The area dominated by a front (latency, loss) up to the reference point `ref`, both axes
// normalized by ref: larger is better.
inline double hypervolume(const std::vector<std::array<double, 2>>& front, std::array<double, 2> ref) {
  std::vector<std::array<double, 2>> f = front;
  std::sort(f.begin(), f.end());
  double area = 0, last_loss = ref[1];
  for (const auto& pt : f) {
    if (pt[0] >= ref[0] || pt[1] >= last_loss) continue;
    area += (ref[0] - pt[0]) / ref[0] * (last_loss - pt[1]) / ref[1];
    last_loss = pt[1];
  }
  return area;
}

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir(), sst2_dir = STILE_SST2_DIR;
  std::filesystem::path profile_path, accuracy_path, heads_path, svg_path, out_path;
  std::size_t tokens = 128, points = 5, free_points = 5, repeats = 15, limit = 0, threads = 0, generations = 300, seed = 1;
  unsigned cpu = 0;
  stile_cli::Parser cli("eval_precision_front", "--profile P --accuracy A --heads H [options]",
                        "NSGA-II fronts of predicted latency vs predicted accuracy loss; executes points of the "
                        "single-processor front and the fp32 / int8 presets (latency, SST-2 dev accuracy).");
  cli.flag("--model", "DIR", "model directory", model_dir);
  cli.flag("--sst2", "DIR", "the SST-2 directory with dev.tsv", sst2_dir);
  cli.flag("--profile", "FILE", "op latency profile (tools/profile_ops)", profile_path);
  cli.flag("--accuracy", "FILE", "op accuracy model (tools/fit_op_accuracy)", accuracy_path);
  cli.flag("--heads", "FILE", "heads file with the full model's head (tools/train_heads)", heads_path);
  cli.flag("--tokens", "N", "sequence length the latency is mapped and measured at", tokens).at_least(1);
  cli.flag("--points", "N", "front points to execute", points).at_least(1);
  cli.flag("--free-points", "N", "free-front points to execute on the mapped forward (0: none)", free_points);
  cli.flag("--repeats", "N", "timed runs per point (median)", repeats).at_least(1);
  cli.flag("--cpu", "N", "the core the executable front and the measurements use", cpu);
  cli.flag("--generations", "N", "NSGA-II generations", generations).at_least(1);
  cli.flag("--seed", "N", "NSGA-II seed", seed);
  cli.flag("--limit", "N", "only the first N dev sentences (0: all)", limit);
  cli.threads(threads);
  cli.flag("--svg", "FILE", "write the fronts as SVG", svg_path);
  cli.flag("--out", "FILE", "write the results as JSON", out_path);
  cli.example(
      "eval_precision_front --profile minilm.ops.json --accuracy minilm.accuracy.json --heads minilm.stile.heads.json");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  if (profile_path.empty() || accuracy_path.empty() || heads_path.empty()) {
    cli.fail("--profile, --accuracy and --heads are required");
  }
  try {
    const stile::OpLatencyProfile prof = stile::OpLatencyProfile::load(profile_path);
    if (!prof.request_cost_note().empty()) fmt::print(stderr, "{}\n", prof.request_cost_note());
    const stile::OpAccuracyModel acc = stile::OpAccuracyModel::load(accuracy_path);
    const stile::EncoderConfig c = stile::read_encoder_config((model_dir / "config.json").string());
    const stile::OpGraph g = stile::bert_op_graph(
        {.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate, .tokens = tokens});
    const stile::OpCostTable costs = stile::OpCostTable::from_profile(g, prof);
    const auto proc = static_cast<std::uint8_t>(prof.processor_index("cpu:" + std::to_string(cpu)));
    stile::Nsga2Options o;
    o.generations = generations;
    o.seed = seed;
    const stile::PrecisionProblem free_p = stile::free_precision_problem(g, costs, acc);
    const stile::PrecisionProblem exec_p = stile::executable_precision_problem(g, costs, acc, proc);
    const std::vector<stile::ParetoPoint> free_front = stile::nsga2_search(free_p, o);
    const std::vector<stile::ParetoPoint> exec_front = stile::nsga2_search(exec_p, o);
    {
      // The same search by pagmo2's nsga2 (when built with it), compared by hypervolume and by how
      // many points of each front the other dominates.
      std::vector<std::array<double, 2>> ours;
      for (const auto& pt : exec_front) ours.push_back(pt.objectives);
      std::array<double, 2> ref{0, 0};
      for (const auto& pt : ours) ref = {std::max(ref[0], pt[0]), std::max(ref[1], pt[1])};
#if defined(STILE_HAVE_PAGMO)
      pagmo::problem pp{PagmoPrecision(&exec_p)};
      pagmo::population pop{pp, 100, static_cast<unsigned>(seed)};
      pagmo::algorithm algo{pagmo::nsga2(static_cast<unsigned>(generations), 0.95, 10., 1.0 / double(PagmoPrecision(&exec_p).free.size()),
                                         50., static_cast<unsigned>(seed))};
      pop = algo.evolve(pop);
      std::vector<stile::ParetoPoint> pts;
      for (std::size_t i = 0; i < pop.size(); ++i) pts.push_back({{}, {pop.get_f()[i][0], pop.get_f()[i][1]}});
      std::vector<std::array<double, 2>> theirs;
      for (const auto& pt : stile::pareto_front(pts)) theirs.push_back(pt.objectives);
      for (const auto& pt : theirs) ref = {std::max(ref[0], pt[0]), std::max(ref[1], pt[1])};
      ref = {ref[0] * 1.01, ref[1] * 1.01};
      std::size_t ours_dominated = 0, theirs_dominated = 0;
      for (const auto& a : ours) {
        for (const auto& b : theirs) {
          if (stile::dominates(b, a)) {
            ++ours_dominated;
            break;
          }
        }
      }
      for (const auto& b : theirs) {
        for (const auto& a : ours) {
          if (stile::dominates(a, b)) {
            ++theirs_dominated;
            break;
          }
        }
      }
      fmt::print("executable front, {} generations x 100: ours {} points, hypervolume {:.4f}, {} dominated by "
                 "pagmo's; pagmo nsga2 {} points, hypervolume {:.4f}, {} dominated by ours\n",
                 generations, ours.size(), hypervolume(ours, ref), ours_dominated, theirs.size(),
                 hypervolume(theirs, ref), theirs_dominated);
#else
      fmt::print("pagmo2 not built in: no comparison with pagmo's nsga2 (executable front hypervolume {:.4f})\n",
                 hypervolume(ours, {ref[0] * 1.01, ref[1] * 1.01}));
#endif
    }
    fmt::print("fronts: free {} points ({:.1f}..{:.1f} us), executable on cpu:{} {} points ({:.1f}..{:.1f} us)\n",
               free_front.size(), free_front.front().objectives[0], free_front.back().objectives[0], cpu,
               exec_front.size(), exec_front.front().objectives[0], exec_front.back().objectives[0]);

    // What to execute: the presets, then `points` front points evenly spread by index.
    struct Config {
      std::string name;
      std::vector<stile::NumberFormat> formats;
      double predicted_us = 0, predicted_loss = 0;
      double measured_us = 0, dev_loss = 0, accuracy = 0;
      std::optional<stile::OpMapping> mapped;  // executed by the mapped forward
      std::size_t same_as = 0;                 // mapped presets: the row whose accuracy they share
    };
    std::vector<Config> configs;
    for (const char* preset : {"fp32", "int8"}) {
      Config k{preset, stile::formats_of_precision(g, stile::precision_preset(preset)), 0, 0, 0, 0, 0, {}, 0};
      stile::OpMapping m = stile::OpMapping::uniform(g.size(), proc);
      m.format = k.formats;
      k.predicted_us = stile::predict_latency_us(g, costs, m);
      k.predicted_loss = acc.predict(k.formats);
      configs.push_back(k);
    }
    const std::size_t n = std::min(points, exec_front.size());
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = n == 1 ? 0 : k * (exec_front.size() - 1) / (n - 1);
      const stile::ParetoPoint& pt = exec_front[i];
      configs.push_back({fmt::format("front {}", i), exec_p.mapping(pt.genes).format, pt.objectives[0], pt.objectives[1],
                         0, 0, 0, {}, 0});
    }

    for (std::size_t k = 0; k < 2; ++k) {
      stile::OpMapping m = stile::OpMapping::uniform(g.size(), proc);
      m.format = configs[k].formats;
      Config mk = configs[k];
      mk.name += " mapped";
      mk.mapped = m;
      mk.same_as = k;
      configs.push_back(mk);
    }
    const std::size_t nf = std::min(free_points, free_front.size());
    for (std::size_t k = 0; k < nf; ++k) {
      const std::size_t i = nf == 1 ? 0 : k * (free_front.size() - 1) / (nf - 1);
      const stile::ParetoPoint& pt = free_front[i];
      const stile::OpMapping m = free_p.mapping(pt.genes);
      configs.push_back({fmt::format("free {}", i), m.format, pt.objectives[0], pt.objectives[1], 0, 0, 0, m, 0});
    }
    const stile::OpGraph g1 = stile::op_graph_of(c);
    const stile::ProcessorSet open =
        stile::open_mapping_processors(prof.processors, g1, stile::OpMapping::uniform(g1.size(), 0), "the profile");
    const stile::SentenceEncoder tokenizer_of = stile::SentenceEncoder::load(model_dir);
    // The dev embeddings through a mapped forward: tokenized, encoded 32 at a time, pooled and
    // normalized as the sentence encoder does.
    const auto embed_mapped = [&](stile::MappedForward& f, const std::vector<std::string>& texts) {
      std::vector<std::vector<float>> out;
      std::vector<float> hidden;
      for (std::size_t begin = 0; begin < texts.size(); begin += 32) {
        std::vector<stile::Encoding> batch;
        for (std::size_t i = begin; i < std::min(texts.size(), begin + 32); ++i) {
          batch.push_back(tokenizer_of.tokenizer().encode(texts[i]));
        }
        const std::vector<std::size_t> lengths = f.encode(batch, hidden);
        for (std::vector<float>& e : tokenizer_of.embed_hidden(hidden, lengths)) out.push_back(std::move(e));
      }
      return out;
    };
    const stile::LabeledSentences dev = stile::bench::read_dev(sst2_dir, limit);
    const stile::HeadsFile heads = stile::HeadsFile::load(heads_path);
    const std::string key = std::to_string(heads.num_layers) + "x" + std::to_string(heads.shards_per_layer);
    const stile::LinearHead& head = heads.at(key, heads_path.string()).head;
    stile::ThreadPool pool(threads);
    std::vector<std::vector<float>> ref;
    for (Config& k : configs) {
      std::vector<std::vector<float>> emb;
      if (k.mapped) {
        stile::MappedForward f(stile::BertWeights::load(model_dir, stile::mapped_weights_precision(g1, k.formats)),
                               *k.mapped, open.pointers());
        k.measured_us = stile::bench::mapped_forward_us(f, tokens, repeats);
        if (k.name.ends_with(" mapped")) {
          k.accuracy = configs[k.same_as].accuracy, k.dev_loss = configs[k.same_as].dev_loss;
          continue;
        }
        emb = embed_mapped(f, dev.sentences);
      } else {
        const stile::ModelPrecision mp = stile::to_model_precision(g, k.formats);
        const stile::SentenceEncoder enc = stile::SentenceEncoder::load(model_dir, mp);
        k.measured_us = stile::bench::pinned_forward_us(enc.model(), tokens, cpu, repeats);
        emb = stile::bench::embed_all(enc, dev.sentences, pool, k.name);
      }
      if (ref.empty()) ref = emb;  // fp32 comes first
      std::size_t correct = 0;
      double cos = 0;
      for (std::size_t i = 0; i < emb.size(); ++i) {
        correct += head.predict(emb[i]) == dev.labels[i];
        cos += stile::cosine_similarity(emb[i], ref[i]);
      }
      k.accuracy = double(correct) / double(emb.size());
      k.dev_loss = 1 - cos / double(emb.size());
    }
    const Config& f32 = configs[0];
    const Config& i8 = configs[1];
    fmt::print("\nMiniLM, {} tokens, one thread on cpu:{}; SST-2 dev {} sentences, head \"{}\"\n", tokens, cpu,
               dev.size(), key);
    fmt::print("{:>10} | {:>10} {:>10} {:>7} | {:>10} {:>8} {:>8} | {:>9} {:>10} {:>9}\n", "config", "pred us",
               "meas us", "err", "pred loss", "dev loss", "dev acc", "vs fp32", "vs int8", "acc-fp32");
    nlohmann::json rows = nlohmann::json::array();
    for (const Config& k : configs) {
      fmt::print("{:>10} | {:>10.1f} {:>10.1f} {:>+6.1f}% | {:>10.5f} {:>8.5f} {:>7.2f}% | {:>+8.1f}% {:>+9.1f}% {:>+8.2f}\n",
                 k.name, k.predicted_us, k.measured_us, 100 * (k.predicted_us / k.measured_us - 1), k.predicted_loss,
                 k.dev_loss, 100 * k.accuracy, 100 * (k.measured_us / f32.measured_us - 1),
                 100 * (k.measured_us / i8.measured_us - 1), 100 * (k.accuracy - f32.accuracy));
      rows.push_back({{"config", k.name}, {"predicted_us", k.predicted_us}, {"measured_us", k.measured_us},
                      {"predicted_loss", k.predicted_loss}, {"dev_loss", k.dev_loss}, {"dev_accuracy", k.accuracy}});
    }
    if (!svg_path.empty()) {
      std::vector<stile::bench::PlotSeries> s;
      stile::bench::PlotSeries a{"front, 2 cores (predicted)", "#1f77b4", {}, {}, true};
      for (const auto& p : free_front) a.x.push_back(p.objectives[0] / 1000), a.y.push_back(p.objectives[1]);
      stile::bench::PlotSeries b{fmt::format("front, cpu:{} (predicted)", cpu), "#ff7f0e", {}, {}, true};
      for (const auto& p : exec_front) b.x.push_back(p.objectives[0] / 1000), b.y.push_back(p.objectives[1]);
      stile::bench::PlotSeries m{"executed (measured)", "#d62728", {}, {}, true};
      for (std::size_t k = 2; k < configs.size(); ++k) {
        m.x.push_back(configs[k].measured_us / 1000), m.y.push_back(configs[k].dev_loss);
      }
      stile::bench::PlotSeries fm{"executed on 2 cores (measured)", "#2ca02c", {}, {}, true};
      m.x.clear(), m.y.clear();
      for (std::size_t k = 2; k < configs.size(); ++k) {
        if (configs[k].name.ends_with(" mapped")) continue;
        auto& series = configs[k].mapped ? fm : m;
        series.x.push_back(configs[k].measured_us / 1000), series.y.push_back(configs[k].dev_loss);
      }
      m.name = fmt::format("executed on cpu:{} (measured)", cpu);
      stile::bench::PlotSeries pr{"fp32, int8 (measured)", "#000000", {}, {}, true};
      for (std::size_t k = 0; k < 2; ++k) pr.x.push_back(configs[k].measured_us / 1000), pr.y.push_back(configs[k].dev_loss);
      s = {a, b, m, fm, pr};
      stile::write_file_atomically(
          svg_path, stile::bench::svg_plot(fmt::format("NSGA-II fronts: MiniLM, {} tokens", tokens),
                                           "latency (ms)", "accuracy loss (1 - cosine to fp32)", s));
    }
    if (!out_path.empty()) {
      stile::write_file_atomically(out_path, nlohmann::json{{"tokens", tokens}, {"rows", rows}}.dump(1) + "\n");
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "eval_precision_front: {}\n", e.what());
    return 1;
  }
  return 0;
}
