// A fine-tuned sequence classifier end to end: its SST-2 dev accuracy in the elastic engine (the
// store convert made from the checkpoint, its head from STORE.head.safetensors) at each latency
// target on emulated storage, beside the same checkpoint in memory (TaskModel, fp32, no deadline);
// and what the head costs a request: the pooling-and-head span of the timeline against the
// request's whole time, at 16 tokens and over dev; and the submodels the planner ran.
//
//   eval_checkpoint_head STORE --checkpoint DIR [--targets 30,40,60] [--storage emmc]
//                        [--preload-kb 1024] [--min-bits 4] [--json out.json]
//
// Needs STORE.profile.json (tools/profile, same --storage) and STORE.head.safetensors (convert of
// a <Family>ForSequenceClassification checkpoint); STORE.importance.json when it exists (shards
// kept in importance order; without it, in shard order). Every dev sentence runs through the real
// engine at every target (reads through the emulated device, one request at a time); the dev
// sentences are tokenized by the store's vocabulary as the engine's requests are.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "sidecar.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/engine.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/model/checkpoint_head.hpp"
#include "stile/model/task_model.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/importance.hpp"

namespace fs = std::filesystem;
using stile_cli::Sidecar;

namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> targets{30, 40, 60};
  std::string storage = "emmc";
  fs::path checkpoint, json_path;
  fs::path sst2_dir = STILE_SST2_DIR;
  double preload_kb = 1024;
  unsigned min_bits = 4;
  std::size_t limit = 0;
  stile_cli::Parser cli("eval_checkpoint_head", "STORE --checkpoint DIR [options]",
                        "SST-2 dev accuracy of a fine-tuned sequence classifier in the elastic engine at each latency "
                        "target (its own head from STORE.head.safetensors), beside the checkpoint in memory, and the "
                        "head's share of a request's time.");
  cli.flag("--checkpoint", "DIR", "the checkpoint the store was converted from (the in-memory reference)", checkpoint);
  cli.flag("--targets", "LIST", "latency targets, ms", targets).at_least(1);
  cli.storage(storage);
  cli.flag("--preload-kb", "P", "the preload buffer held between requests, KiB", preload_kb).at_least(0);
  cli.flag("--min-bits", "B", "the planner's bitwidth floor", min_bits);
  cli.flag("--sst2", "DIR", "the SST-2 directory with dev.tsv", sst2_dir);
  cli.flag("--limit", "N", "only the first N dev sentences (0: all)", limit);
  cli.flag("--json", "FILE", "write the results as JSON", json_path);
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  if (checkpoint.empty()) cli.fail("--checkpoint DIR is required");
  const fs::path store = positional[0];
  try {
    stile::LabeledSentences dev = stile::read_glue_tsv(sst2_dir / "dev.tsv");
    if (limit != 0 && limit < dev.sentences.size()) {
      dev.sentences.resize(limit);
      dev.labels.resize(limit);
    }
    const std::size_t n = dev.sentences.size();
    nlohmann::ordered_json out = {
        {"store", store.string()},          {"checkpoint", checkpoint.string()},          {"storage", storage},
        {"cpu", stile::bench::cpu_model()}, {"simd_target", stile::active_target_name()}, {"sentences", n}};

    // The checkpoint in memory: the reference accuracy.
    const stile::TaskModel model = stile::TaskModel::load(checkpoint);
    std::size_t memory_correct = 0;
    {
      stile::ProgressBar bar("in memory");
      for (std::size_t i = 0; i < n; ++i) {
        memory_correct += model.classify(dev.sentences[i]).top() == dev.labels[i];
        bar.update(i + 1, n);
      }
    }
    const double memory_accuracy = 100.0 * static_cast<double>(memory_correct) / static_cast<double>(n);
    fmt::print("in memory (fp32, no deadline): {:.2f}% of {} dev sentences\n", memory_accuracy, n);
    out["in_memory_accuracy"] = memory_accuracy;

    stile::EngineOptions options;
    options.storage = storage;
    options.preload_bytes = static_cast<std::size_t>(preload_kb * 1024);
    options.min_bits = min_bits;
    if (const auto importance = stile_cli::existing_sidecar(store, Sidecar::importance)) {
      stile::ShardImportance imp = stile::load_importance(*importance);
      options.ranking = std::move(imp.ranking);
      options.importance = std::move(imp.order);
    }
    const stile::DeviceProfile profile = stile::DeviceProfile::load(stile_cli::sidecar_path(store, Sidecar::profile));
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    fmt::print("{:>9} {:>9} {:>10} {:>9} {:>9} {:>14} {:>12}\n", "target ms", "accuracy", "vs memory", "median ms",
               "p95 ms", "within target", "head share");
    for (const double target : targets) {
      options.target_ms = target;
      stile::Engine engine(store, options, profile);
      engine.set_task_head(stile::load_head_sidecar(stile::head_path_for(store), engine.config()));
      (void)engine.run(dev.sentences[0]);  // fills the preload buffer
      std::size_t correct = 0, within = 0;
      std::vector<double> total, head_share, head_share16, head_ms;
      std::map<std::string, std::size_t> shapes;  // "n x m": requests that ran n layers of at most m shards
      stile::ProgressBar bar(fmt::format("engine at {} ms", target));
      for (std::size_t i = 0; i < n; ++i) {
        const stile::EngineResult r = engine.run(dev.sentences[i]);
        correct += r.label && *r.label == dev.labels[i];
        within += !r.deadline_missed;
        const stile::Timeline& t = r.timeline;
        total.push_back(t.total_ms);
        const double share = (t.head_end_ms - t.head_start_ms) / t.total_ms;
        head_share.push_back(share);
        head_ms.push_back(t.head_end_ms - t.head_start_ms);
        if (r.tokens <= 16) head_share16.push_back(share);
        std::size_t widest = 0;
        for (const auto& layer : r.plan.layers) widest = std::max(widest, layer.size());
        ++shapes[fmt::format("{}x{}", r.plan.layers.size(), widest)];
        bar.update(i + 1, n);
      }
      const double accuracy = 100.0 * static_cast<double>(correct) / static_cast<double>(n);
      fmt::print("{:>9.0f} {:>8.2f}% {:>+9.2f} {:>9.2f} {:>9.2f} {:>13.1f}% {:>11.3f}%\n", target, accuracy,
                 accuracy - memory_accuracy, quantile(total, 0.5), quantile(total, 0.95),
                 100.0 * static_cast<double>(within) / static_cast<double>(n), 100.0 * quantile(head_share, 0.5));
      rows.push_back({{"target_ms", target},
                      {"accuracy", accuracy},
                      {"median_ms", quantile(total, 0.5)},
                      {"p95_ms", quantile(total, 0.95)},
                      {"within_target", static_cast<double>(within) / static_cast<double>(n)},
                      {"head_share_median", quantile(head_share, 0.5)},
                      {"head_share_max", quantile(head_share, 1.0)},
                      {"head_share_median_16_tokens", quantile(head_share16, 0.5)},
                      {"head_share_p99_16_tokens", quantile(head_share16, 0.99)},
                      {"head_ms_median", quantile(head_ms, 0.5)},
                      {"requests_16_tokens", head_share16.size()},
                      {"shapes", shapes}});
      std::string shape_text;
      for (const auto& [shape, count] : shapes) shape_text += fmt::format(" {}: {}", shape, count);
      fmt::print("          plans (layers x widest shards: requests):{}\n", shape_text);
    }
    out["engine"] = std::move(rows);
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  } catch (const std::exception& e) {
    fmt::print(stderr, "eval_checkpoint_head: {}\n", e.what());
    return 1;
  }
  return 0;
}
