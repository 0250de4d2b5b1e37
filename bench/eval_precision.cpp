// Accuracy of each number-format preset (ops/precision.hpp) on the default model, over SST-2 dev:
// the cosine of each sentence embedding to the fp32 model's (mean and min), and SST-2 dev accuracy
// with the full model's linear head from a heads file (tools/train_heads; the head of shape
// "<layers>x<shards>", trained on fp32 features of train.tsv rows, never on dev). dev.tsv is only
// read to report: nothing is fit to it.
//
//   eval_precision --heads STORE.heads.json [--precision fp32,fp16,int8,ibert] [--target AVX2 --no-dot]
//                  [--out FILE.json]
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "embed_texts.hpp"
#include "stile/io/json_file.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/ops/precision.hpp"

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

namespace {

struct PresetResult {
  std::string precision;
  double cosine_mean = 0, cosine_min = 0;
  std::size_t correct = 0, total = 0;
  double seconds = 0;
};
}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir();
  std::filesystem::path sst2_dir = STILE_SST2_DIR;
  std::filesystem::path heads_path, out_path;
  std::vector<std::string> precisions{"fp32", "fp16", "int8", "ibert"};
  std::size_t threads = 0, limit = 0;
  stile_cli::Parser cli("eval_precision", "[options]",
                        "Embedding fidelity (cosine to fp32) and SST-2 dev accuracy of each number-format preset on "
                        "the default model.");
  cli.flag("--model", "DIR", "model directory (default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2)",
           model_dir);
  cli.flag("--sst2", "DIR", "the SST-2 directory with dev.tsv (default: <repo>/../shared/data/sst2)", sst2_dir);
  cli.flag("--heads", "FILE", "heads file (tools/train_heads) with the full model's head; without it, no accuracy",
           heads_path);
  cli.flag("--precision", "LIST", "presets to evaluate besides fp32 (default: fp32,fp16,int8,ibert)",
           [&](std::string_view v) {
             precisions = stile_cli::parse_list(v, "--precision", [](std::string_view p) {
               stile::precision_preset(p);
               return std::string(p);
             });
           });
  cli.flag("--limit", "N", "only the first N dev sentences (0: all)", limit);
  cli.threads(threads);
  cli.simd_target();
  cli.no_int8_dot();
  cli.flag("--out", "FILE", "write the results as JSON", out_path);
  cli.example("eval_precision --heads minilm.stile.heads.json --precision fp32,int8");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");

  try {
    const stile::LabeledSentences dev = stile::bench::read_dev(sst2_dir, limit);
    stile::ThreadPool pool(threads);
    const stile::SentenceEncoder reference = stile::SentenceEncoder::load(model_dir);
    const std::vector<std::vector<float>> ref = stile::bench::embed_all(reference, dev.sentences, pool, "fp32 reference");
    const stile::LinearHead* head = nullptr;
    std::optional<stile::HeadsFile> heads;
    std::string head_key;
    if (!heads_path.empty()) {
      heads = stile::HeadsFile::load(heads_path);
      head_key = std::to_string(heads->num_layers) + "x" + std::to_string(heads->shards_per_layer);
      head = &heads->at(head_key, heads_path.string()).head;
      head->check(reference.dim());
    }

    std::vector<PresetResult> results;
    for (const std::string& p : precisions) {
      PresetResult r;
      r.precision = p;
      const auto start = std::chrono::steady_clock::now();
      const stile::SentenceEncoder encoder = stile::SentenceEncoder::load(model_dir, stile::precision_preset(p));
      const std::vector<std::vector<float>> emb =
          p == "fp32" ? ref : stile::bench::embed_all(encoder, dev.sentences, pool, "precision " + p);
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      r.cosine_min = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < emb.size(); ++i) {
        const double c = stile::cosine_similarity(emb[i], ref[i]);
        r.cosine_mean += c / double(emb.size());
        r.cosine_min = std::min(r.cosine_min, c);
        if (head != nullptr) r.correct += head->predict(emb[i]) == dev.labels[i];
      }
      r.total = emb.size();
      results.push_back(r);
    }

    fmt::print("\nSST-2 dev, {} sentences; head: {}\n", dev.size(),
               head ? fmt::format("\"{}\" of {}", head_key, heads_path.string()) : std::string("none"));
    fmt::print("{:>10} | {:>11} {:>10} | {:>8} {:>12}\n", "precision", "cosine mean", "cosine min", "accuracy",
               "vs fp32 (pt)");
    nlohmann::json out = {{"sentences", dev.size()}, {"head", head_key}, {"results", nlohmann::json::array()}};
    const auto fp32 = std::find_if(results.begin(), results.end(), [](const auto& r) { return r.precision == "fp32"; });
    for (const PresetResult& r : results) {
      const double acc = r.total ? double(r.correct) / double(r.total) : 0;
      const std::string delta = head && fp32 != results.end()
                                    ? fmt::format("{:+.2f}", 100 * (acc - double(fp32->correct) / double(fp32->total)))
                                    : "-";
      fmt::print("{:>10} | {:>11.6f} {:>10.6f} | {:>8} {:>12}\n", r.precision, r.cosine_mean, r.cosine_min,
                 head ? fmt::format("{:.2f}%", 100 * acc) : "-", delta);
      out["results"].push_back({{"precision", r.precision},
                                {"cosine_mean", r.cosine_mean},
                                {"cosine_min", r.cosine_min},
                                {"correct", r.correct},
                                {"total", r.total},
                                {"seconds", r.seconds}});
    }
    if (!out_path.empty()) stile::write_file_atomically(out_path, out.dump(1) + "\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "eval_precision: {}\n", e.what());
    return 1;
  }
  return 0;
}
