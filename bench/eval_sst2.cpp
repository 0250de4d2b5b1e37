// The accuracy / latency / memory evaluation of the elastic engine on SST-2 dev: ours (the
// two-stage planner, with and without a preload buffer) against the standard ways of running a
// model, at several latency targets, on storage emulated at a board's flash speed.
//
//   eval_sst2 STORE [--targets 60,100,150] [--storage emmc] [--runs 30] [--preload-kb 1024,2048]
//             [--sst2 DIR] [--json out.json] [--sweep-target MS] [--ablation-target MS]
//             [--ablation-seeds 5] [--min-bits 4]
//             [--headroom 0.05] [--word-cache-kb 0] [--latency-only]
//
// Needs STORE.profile.json (tools/profile, with the same --storage), STORE.heads.json and
// STORE.importance.json (tools/train_heads, tools/importance); --latency-only needs neither
// (a store of random weights made for speed, BERT-base: shards kept in shard order). Methods:
//   ours-0, ours-P     the engine's planner holding 0 and P KiB between requests (one row per P
//                      given): a word-row cache of min(W, P) KiB (--word-cache-kb W), the rest
//                      preload buffer
//   Load&Exec          the submodel at 32 bits read whole, then run; load + compute fits T
//   StdPL-X            the layer pipeline, every shard at X bits, no preload, X in {2, 6, 32}
//   PreloadModel-X     the whole submodel in memory at X bits, compute only, X in {6, 32}
//   gold               the full model at 32 bits, in memory, no deadline
// Every method keeps --headroom of T free (the engine's default, 5%) and takes the time of the
// request's word-row reads off T.
// Accuracy depends only on the plan: it is computed in memory for all 872 dev sentences (each
// sentence planned for its length bucket and the word rows it reads; the head of the plan's n x m
// shape from the heads file; gold: the gold head). Ours compares shapes by the heads' calibration accuracies (train.tsv rows,
// never dev) when it must shrink. Latency is measured through the pipeline: --runs requests
// (the first dev sentences) on one engine per method and target, after one request that fills
// the preload buffer; every read is O_DIRECT, so no request finds shards in the page cache.
// Memory: weights held between requests (preload buffer and word-row cache), the working buffer's
// peak during a request, and what is resident for good (metadata, biases, LayerNorms, small
// embeddings) plus the word-embedding rows a request reads.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "sidecar.hpp"
#include "stile/io/json_file.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/engine.hpp"
#include "stile/pipeline/word_row_cache.hpp"
#include "stile/pipeline/word_rows.hpp"
#include "stile/pipeline/preload_buffer.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/pipeline/layer_reader.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/calibrate/plan_accuracy.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/plan/baselines.hpp"
#include "stile/plan/importance.hpp"
#include "stile/plan/pipeline_estimate.hpp"
#include "stile/plan/planner.hpp"

namespace fs = std::filesystem;

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::size_t shard_count(const stile::SubmodelPlan& p) {
  std::size_t n = 0;
  for (const auto& l : p.layers) n += l.size();
  return n;
}

// The bytes of one stored version (what the preload buffer holds of it).
std::size_t version_bytes(const stile::ShardStore& store, const stile::ShardKey& k) {
  return static_cast<std::size_t>(store.version_info(k.layer, k.shard, k.bits).size);
}

// Which versions the engine's preload buffer holds when a request starts.
using HeldVersions = std::function<bool(const stile::ShardKey&)>;

// A method: its plan for a request that reads `word_rows` word rows, at target T, with the preload
// buffer holding `held`, and how the engine runs it.
struct Method {
  std::string name;
  std::function<stile::SubmodelPlan(const stile::Encoding& request, std::size_t word_rows, double target_ms,
                                    const HeldVersions& held)>
      plan;
  std::size_t preload_bytes = 0;  // the engine's preload budget (whole plan: PreloadModel, gold)
  bool preload_whole_plan = false;
  stile::PipelineMode mode = stile::PipelineMode::pipelined;
  bool deadline = true;              // gold has none
  std::size_t word_cache_bytes = 0;  // the engine's word-row cache
};

struct Context {
  fs::path store_path;
  const stile::ShardStore* store;
  const stile::DeviceProfile* profile;
  const stile::HeadsFile* heads;
  fs::path heads_path;
  const stile::ShardImportance* importance;
  const stile::ShardedBert* bert;
  std::vector<stile::Encoding> dev;
  std::vector<std::size_t> labels;
  std::string storage;
  stile::LayerIoTime layer_io;  // the engine's reads: one request per contiguous run of versions
};

// The method's plans for `requests` sent in this order to one engine: its word-row cache and its
// preload buffer replayed as the engine fills them, so each request is planned for the rows it
// still reads and the versions the buffer holds (after a request the engine keeps the plan's
// first versions that fit its budget: Engine::run(tokens, plan)). Planning every request as if
// its own preload set were held overran T whenever consecutive requests differ in shape.
// `held_before` (optional): for each request, the versions the buffer holds when it starts.
std::vector<stile::SubmodelPlan> plans_in_order(const Context& c, const Method& m,
                                                std::span<const stile::Encoding> requests, double target_ms,
                                                std::vector<std::set<stile::ShardKey>>* held_before = nullptr) {
  const stile::ShardStore& store = *c.store;
  stile::WordRowCache cache(m.word_cache_bytes,
                            [&store](std::int32_t id) { return store.word_row_extent(std::size_t(id)).size; });
  std::set<stile::ShardKey> preloaded;
  const HeldVersions held = [&preloaded](const stile::ShardKey& k) { return preloaded.count(k) != 0; };
  std::vector<stile::SubmodelPlan> plans;
  for (const stile::Encoding& e : requests) {
    // The engine's reads are O_DIRECT (4096-byte blocks); rows near each other share one.
    const std::size_t reads = stile::plan_word_row_reads(store, 4096, cache.missing_ids(e.input_ids)).size();
    plans.push_back(m.plan(e, reads, target_ms, held));
    if (held_before != nullptr) held_before->push_back(preloaded);
    cache.record(e.input_ids);
    preloaded = stile::preload_set(plans.back(), m.preload_bytes,
                                   [&store](const stile::ShardKey& k) { return version_bytes(store, k); });
  }
  return plans;
}

// Accuracy of `method` at T on all of dev (in dev order): sentences grouped by plan, each group
// run in memory.
double accuracy(const Context& c, const Method& m, double target_ms, std::size_t& layers_out, std::size_t& shards_out) {
  std::map<std::vector<std::vector<stile::ShardChoice>>, std::vector<std::size_t>> groups;
  const std::vector<stile::SubmodelPlan> plans = plans_in_order(c, m, c.dev, target_ms);
  for (std::size_t i = 0; i < c.dev.size(); ++i) groups[plans[i].layers].push_back(i);
  std::size_t correct = 0, most = 0;
  for (const auto& [layers, rows] : groups) {
    const stile::SubmodelPlan plan{layers};
    if (rows.size() > most) {  // report the shape most sentences ran
      most = rows.size();
      layers_out = plan.layers.size();
      shards_out = shard_count(plan);
    }
    const stile::StoredHead* stored =
        m.name == "gold" ? &c.heads->at("gold", c.heads_path.string()) : c.heads->find_for(plan);
    stile::require(stored != nullptr, c.heads_path.string() + ": no head for a " + std::to_string(plan.layers.size()) +
                                          "-layer plan of " + std::to_string(shard_count(plan)) + " shards of " +
                                          m.name + " (uneven widths, or train_heads --shapes all not run)");
    std::vector<stile::Encoding> sentences;
    std::vector<std::size_t> labels;
    for (const std::size_t r : rows) {
      sentences.push_back(c.dev[r]);
      labels.push_back(c.labels[r]);
    }
    correct += stile::plan_correct(*c.bert, sentences, labels, plan, stored->head);
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(c.dev.size());
}

struct Latency {
  double median = 0, p95 = 0, within = 0;           // within: fraction of runs <= T
  // The layers' measured compute / the planner's estimate of it (the profile's T_comp and T_comp'
  // on the plan, with the buffer's versions as replayed): median and 90% quantile over the runs;
  // NaN for the methods that preload whole plans (the replay does not model their buffer).
  double compute_ratio = NAN, compute_ratio_p90 = NAN;
  std::size_t held = 0, working = 0, resident = 0;  // bytes
};

Latency latency(const Context& c, const Method& m, double target_ms, std::size_t runs) {
  stile::EngineOptions options;
  options.storage = c.storage;
  options.mode = m.mode;
  options.ranking = c.importance->ranking;
  options.word_cache_bytes = m.word_cache_bytes;
  // The first request fills the buffers; then the first `runs` dev sentences.
  std::vector<stile::Encoding> requests{c.dev[0]};
  requests.insert(requests.end(), c.dev.begin(), c.dev.begin() + static_cast<std::ptrdiff_t>(runs));
  std::vector<std::set<stile::ShardKey>> held_before;
  const std::vector<stile::SubmodelPlan> plans = plans_in_order(c, m, requests, target_ms, &held_before);
  options.preload_bytes = m.preload_bytes;
  if (m.preload_whole_plan) {
    std::size_t bytes = 0;  // the largest plan of the runs, whole
    for (const auto& p : plans) {
      std::size_t b = 0;
      for (std::size_t l = 0; l < p.layers.size(); ++l) {
        for (const auto& ch : p.layers[l]) b += version_bytes(*c.store, {l, ch.shard, ch.bits});
      }
      bytes = std::max(bytes, b);
    }
    options.preload_bytes = bytes;
  }
  stile::Engine engine(c.store_path, options);
  Latency out;
  std::vector<double> ms, compute_ratios;
  std::size_t word_rows = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const stile::EngineResult r = engine.run(requests[i], plans[i]);
    if (i == 0) continue;  // filled the buffers
    ms.push_back(r.timeline.total_ms);
    if (!m.preload_whole_plan) {
      const double estimated =
          stile::estimate_pipeline(*c.profile, plans[i], requests[i].size(),
                                   stile::pipeline_slots(options, plans[i].layers.size()), held_before[i], c.layer_io)
              .compute_ms;
      if (estimated > 0) compute_ratios.push_back(r.timeline.compute_ms() / estimated);
    }
    out.working = std::max(out.working, r.working_buffer_bytes);
    out.held = std::max(out.held, r.preload_held_bytes + r.word_cache_held_bytes);
    word_rows = std::max(word_rows, r.timeline.embed_bytes_read);
  }
  out.median = percentile(ms, 0.5);
  out.p95 = percentile(ms, 0.95);
  if (!compute_ratios.empty()) {
    out.compute_ratio = percentile(compute_ratios, 0.5);
    out.compute_ratio_p90 = percentile(compute_ratios, 0.9);
  }
  out.within = static_cast<double>(std::count_if(ms.begin(), ms.end(), [&](double x) { return x <= target_ms; })) /
               static_cast<double>(ms.size());
  out.resident = engine.resident_bytes() + word_rows;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using stile_cli::Sidecar;
  fs::path store_path;
  fs::path sst2_dir = fs::path(STILE_SHARED_DIR) / "data" / "sst2";
  std::vector<double> targets{60, 100, 150};
  std::string storage = "emmc", json_path;
  std::size_t runs = 30, ablation_seeds = 5;
  std::vector<double> preload_kbs{1024};
  double sweep_target = 0, ablation_target = 0;
  bool latency_only = false;
  unsigned min_bits = 4;
  double headroom = stile::EngineOptions{}.target_headroom;
  double word_cache_kb = 0;
  stile_cli::Parser cli("eval_sst2", "[options] STORE",
                        "SST-2 dev accuracy, latency and memory of the elastic engine's planner against the baselines "
                        "at each latency target, on emulated storage. Needs STORE.profile.json, STORE.heads.json and "
                        "STORE.importance.json (--latency-only: only the profile).");
  cli.flag("--targets", "LIST", "latency targets, ms", targets).at_least(0);
  cli.storage(storage);
  cli.flag("--runs", "R", "requests timed per method and target", runs).at_least(1);
  cli.flag("--preload-kb", "LIST", "memory held between requests by ours-P, KiB (one row per P)", preload_kbs)
      .at_least(0);
  cli.flag("--sst2", "DIR", "the SST-2 directory with dev.tsv (default: <repo>/../shared/data/sst2)", sst2_dir);
  cli.flag("--json", "FILE", "write the results as JSON", json_path);
  cli.flag("--sweep-target", "MS", "also: accuracy vs memory held, ours at this target (default: none)", sweep_target);
  cli.flag("--ablation-target", "MS",
           "also: importance vs random upgrade order at this target (default: the sweep target)", ablation_target);
  cli.flag("--ablation-seeds", "N", "random orders in the ablation", ablation_seeds);
  cli.toggle("--latency-only", "no accuracy (a store of random weights: no heads, no importance)", latency_only);
  cli.flag("--min-bits", "B", "the planner's bitwidth floor", min_bits);
  cli.flag("--headroom", "F", "share of the target every method keeps free", headroom);
  cli.flag("--word-cache-kb", "W", "the word-row cache of ours-P is min(W, P) KiB (0: no cache)", word_cache_kb)
      .at_least(0);
  cli.example(
      "eval_sst2 minilm.stile --targets 40,60,100 --runs 30 --min-bits 4 --preload-kb 1024,2048 --word-cache-kb 128");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  store_path = positional[0];
  const bool with_accuracy = !latency_only;
  const auto word_cache_bytes = static_cast<std::size_t>(word_cache_kb * 1024);
  try {
    const stile::ShardStore store = stile::ShardStore::open(store_path);
    const fs::path profile_path = stile_cli::sidecar_path(store_path, Sidecar::profile);
    const stile::DeviceProfile profile = stile::DeviceProfile::load(profile_path);
    const fs::path heads_path = stile_cli::sidecar_path(store_path, Sidecar::heads);
    const stile::HeadsFile heads = with_accuracy ? stile::HeadsFile::load(heads_path) : stile::HeadsFile{};
    const stile::ShardImportance importance =
        with_accuracy ? stile::load_importance(stile_cli::sidecar_path(store_path, Sidecar::importance))
                      : stile::ShardImportance{};
    const stile::ShardedBert bert = stile::ShardedBert::open(store_path);
    const stile::LabeledSentences dev_rows = stile::read_glue_tsv(sst2_dir / "dev.tsv");
    const stile::WordPieceTokenizer tokenizer(stile::Vocab::parse(store.read_vocab(), store.name()),
                                              stile::WordPieceOptions{.max_length = 256});
    Context c{store_path, &store, &profile, &heads, heads_path, &importance, &bert, {}, dev_rows.labels, storage, {}};
    for (const std::string& s : dev_rows.sentences) c.dev.push_back(tokenizer.encode(s));
    stile::require(runs <= c.dev.size(), "eval_sst2: --runs is larger than dev");

    // Every method gets the same budget for its layers: T less the headroom and the word-row reads
    // before them (one 4 KiB block per distinct token of the request, estimated from the profile).
    // The planner takes these off T itself; the baselines are given what is left.
    const double row_ms = stile::estimated_row_read_ms(profile, 4096);
    const auto layers_ms = [&](std::size_t rows, double t) {
      return std::max(1e-6, t * (1 - headroom) - static_cast<double>(rows) * row_ms);
    };
    // Every plan is costed with the engine's reads: versions next to each other in the file in one
    // O_DIRECT request (one latency per contiguous run).
    const stile::LayerIoTime layer_io =
        stile::layer_io_model(profile, [&](std::size_t l, std::span<const stile::ShardChoice> v) {
          return stile::contiguous_reads(store, l, v, stile::read_backend_detail::kDirectAlignment);
        });
    c.layer_io = layer_io;
    const auto exact = [&](const stile::ShardKey& k) { return version_bytes(store, k); };
    const auto shape_accuracy = heads.shape_accuracy();
    const auto ours = [&](std::size_t budget, stile::ImportanceOrder upgrade_order = {}) {
      return [&, budget, upgrade_order](const stile::Encoding& e, std::size_t rows, double t, const HeldVersions& held) {
        stile::PlannerOptions o;
        o.preload_held = held;
        o.target_ms = t;
        o.preload_budget_bytes = budget;
        o.version_bytes = exact;
        o.importance = importance.order;
        o.upgrade_order = upgrade_order;
        if (with_accuracy) o.shape_accuracy = shape_accuracy;
        o.slots = 2;
        o.row_read_ms = row_ms;
        o.min_bits = min_bits;
        o.layer_io = layer_io;
        o.headroom = headroom;
        return stile::plan_elastic(profile, e.size(), o, importance.ranking, rows).submodel;
      };
    };
    const stile::ShardRanking& ranking = importance.ranking;
    std::vector<Method> methods;
    // ours-P holds at most P KiB between requests: a word-row cache of min(W, P) KiB, the rest
    // preload buffer.
    const auto ours_holding = [&](std::string name, std::size_t bytes) {
      Method m{std::move(name), nullptr, 0, false};
      m.word_cache_bytes = std::min(word_cache_bytes, bytes);
      m.preload_bytes = bytes - m.word_cache_bytes;
      m.plan = ours(m.preload_bytes);
      return m;
    };
    methods.push_back(ours_holding("ours-0", 0));
    for (const double kb : preload_kbs) {
      const auto bytes = static_cast<std::size_t>(kb * 1024);
      methods.push_back(ours_holding(fmt::format("ours-{:.0f}K", kb), bytes));
    }
    methods.push_back(
        {"Load&Exec",
         [&](const stile::Encoding& e, std::size_t rows, double t, const HeldVersions&) {
           return stile::plan_load_and_exec(profile, e.size(), layers_ms(rows, t), ranking, layer_io).submodel;
         },
         0, false, stile::PipelineMode::load_then_execute});
    for (const unsigned x : {2u, 6u, 32u}) {
      methods.push_back(
          {fmt::format("StdPL-{}", x),
           [&, x](const stile::Encoding& e, std::size_t rows, double t, const HeldVersions&) {
             return stile::plan_std_pipeline(profile, e.size(), layers_ms(rows, t), x, ranking, layer_io).submodel;
           },
           0, false});
    }
    for (const unsigned x : {6u, 32u}) {
      methods.push_back({fmt::format("PreloadModel-{}", x),
                         [&, x](const stile::Encoding& e, std::size_t rows, double t, const HeldVersions&) {
                           return stile::plan_preload_model(profile, e.size(), layers_ms(rows, t), x, ranking).submodel;
                         },
                         0, true});
    }
    Method gold{"gold",
                [&](const stile::Encoding&, std::size_t, double, const HeldVersions&) {
                  return stile::SubmodelPlan::uniform(store.num_layers(), store.shards_per_layer(), 32);
                },
                0, true};
    gold.deadline = false;

    fmt::print(
        "machine: {}; stile target {}\nstore {} ({}), storage {} (emulated: the real bytes read, delays "
        "added), profile {} (made {}); word-row read estimate {:.2f} ms per distinct token\nSST-2 dev: {} sentences; "
        "latency: {} requests per method and target "
        "(median, p95, share <= T)\n\n",
        stile::bench::machine_description(), stile::active_target_name(), store_path.string(),
        stile::bench::cpu_model(), storage, profile_path.string(), profile.machine.value("date", "?"), row_ms,
        c.dev.size(), runs);
    nlohmann::json report = {{"machine", stile::bench::machine_description()}, {"storage", storage}, {"runs", runs}};
    stile::ProgressBar bar("eval_sst2");
    const std::size_t steps = targets.size() * methods.size() + 1;
    std::size_t done = 0;
    std::size_t gl = 0, gs = 0;
    const double gold_accuracy = with_accuracy ? accuracy(c, gold, 0, gl, gs) : NAN;
    if (!with_accuracy) {
      gl = store.num_layers();
      gs = store.num_layers() * store.shards_per_layer();
    }
    const Latency gold_latency = latency(c, gold, 1e9, runs);
    bar.update(++done, steps);
    std::vector<std::string> lines;
    for (const double t : targets) {
      for (const Method& m : methods) {
        std::size_t layers = 0, shards = 0;
        const double acc = with_accuracy ? accuracy(c, m, t, layers, shards) : NAN;
        if (!with_accuracy) {  // the shape of the first request's plan
          const stile::SubmodelPlan p = plans_in_order(c, m, std::span(c.dev).first(1), t)[0];
          layers = p.layers.size();
          shards = shard_count(p);
        }
        const Latency lat = latency(c, m, t, runs);
        bar.update(++done, steps);
        lines.push_back(fmt::format(
            "| {:>5.0f} | {:<15} | {:>5} | {}x{:<3} | {:7.2f} | {:7.2f} | {:7.2f} | {:7.1f} | {:7.1f} | {:4.0f}% | {:>5} |", t,
            m.name, std::isnan(acc) ? std::string("-") : fmt::format("{:.1f}", acc), layers,
            fmt::format("{:.1f}", static_cast<double>(shards) / static_cast<double>(std::max<std::size_t>(layers, 1))),
            lat.held / 1e6, lat.working / 1e6, lat.resident / 1e6, lat.median, lat.p95, 100 * lat.within,
            std::isnan(lat.compute_ratio) ? std::string("-") : fmt::format("{:.2f}", lat.compute_ratio)));
        report["results"].push_back({{"target_ms", t},
                                     {"method", m.name},
                                     {"accuracy", acc},
                                     {"layers", layers},
                                     {"shards", shards},
                                     {"held_bytes", lat.held},
                                     {"working_bytes", lat.working},
                                     {"resident_bytes", lat.resident},
                                     {"median_ms", lat.median},
                                     {"p95_ms", lat.p95},
                                     {"within_target", lat.within},
                                     {"compute_vs_estimate_median", lat.compute_ratio},
                                     {"compute_vs_estimate_p90", lat.compute_ratio_p90}});
      }
    }
    fmt::print(
        "| T ms  | method          | acc % | n x m    | held MB | working MB | resident MB | median ms | p95 ms | <= T "
        "| compute / est |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& l : lines) fmt::print("{}\n", l);
    fmt::print(
        "|     - | gold            | {:>5} | {}x{}     | {:7.2f} | {:7.2f} | {:7.2f} | {:7.1f} | {:7.1f} |    - |     - |\n",
        std::isnan(gold_accuracy) ? std::string("-") : fmt::format("{:.1f}", gold_accuracy), gl,
        gs / std::max<std::size_t>(gl, 1), gold_latency.held / 1e6, gold_latency.working / 1e6,
        gold_latency.resident / 1e6, gold_latency.median, gold_latency.p95);
    report["gold"] = {{"accuracy", gold_accuracy},
                      {"held_bytes", gold_latency.held},
                      {"working_bytes", gold_latency.working},
                      {"resident_bytes", gold_latency.resident},
                      {"median_ms", gold_latency.median},
                      {"p95_ms", gold_latency.p95}};

    if (sweep_target > 0 && with_accuracy) {  // accuracy vs memory held, at one target
      fmt::print("\naccuracy vs memory held between requests (preload + word-row cache), ours at T = {:.0f} ms\n",
                 sweep_target);
      for (const std::size_t kb : {0u, 128u, 256u, 512u, 1024u, 2048u, 4096u}) {
        const Method m = ours_holding("ours", kb * 1024);
        std::size_t layers = 0, shards = 0;
        const double acc = accuracy(c, m, sweep_target, layers, shards);
        fmt::print("  {:5} KiB: {:5.1f} %  ({} layers, {} shards)\n", kb, acc, layers, shards);
        report["preload_sweep"].push_back({{"preload_kb", kb}, {"accuracy", acc}, {"target_ms", sweep_target}});
      }
    }
    if (ablation_target <= 0) ablation_target = sweep_target;
    if (ablation_seeds > 0 && ablation_target > 0 && with_accuracy) {  // the same IO budget, importance vs random order
      fmt::print("\nablation at T = {:.0f} ms, no preload: pass 2's upgrades in importance order vs random order\n",
                 ablation_target);
      std::size_t layers = 0, shards = 0;
      const double by_importance = accuracy(c, {"ours", ours(0), 0, false}, ablation_target, layers, shards);
      fmt::print("  importance order: {:5.1f} %  ({} layers, {} shards: the same submodel for every order)\n",
                 by_importance, layers, shards);
      report["ablation"]["importance"] = by_importance;
      report["ablation"]["target_ms"] = ablation_target;
      for (std::size_t seed = 1; seed <= ablation_seeds; ++seed) {
        stile::ImportanceOrder order = importance.order;
        std::mt19937_64 rng(seed);
        for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
        const double acc = accuracy(c, {"random", ours(0, order), 0, false}, ablation_target, layers, shards);
        fmt::print("  random order, seed {}: {:5.1f} %\n", seed, acc);
        report["ablation"]["random"].push_back(acc);
      }
    }
    if (!json_path.empty()) stile::write_file_atomically(json_path, report.dump(1) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eval_sst2: %s\n", e.what());
    return 1;
  }
  return 0;
}
