// Clustered low-rank word embeddings (quant/lowrank_factorize.hpp) on the default model, over
// SST-2 dev: for each byte budget, the table's parameters and stored bytes against the dense fp32
// table, the cosine of each sentence embedding to the dense model's (mean and min), and SST-2 dev
// accuracy with the full model's head from a heads file (tools/train_heads: fit on train.tsv rows,
// never dev). Token frequencies (the clusters' order and the rank search's weights) are counted on
// train.tsv; dev.tsv is only read to report. The table used is the one the store would give back
// (quant::LowRankWordTable::reconstruct: U rows coded, then times V), put in place of the
// checkpoint's table in the fp32 model: the layers are exact, so only the embeddings differ.
//
//   eval_embeddings --heads STORE.heads.json [--budgets 0.5,0.25,0.125,0.0625] [--codec int8]
//                   [--clusters 512,4096,12288] [--weight-powers 1,0.5,0.25,0] [--calibration 500]
//                   [--out FILE.json]
// Each budget's table is what calibrate/lowrank_search.hpp picks: the weight power p whose table
// gives the best mean cosine on --calibration train.tsv rows (the seeded split's calibration
// part); --calibration 0 reports every p on dev instead (for inspection, not for choosing).
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
#include "stile/calibrate/lowrank_search.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/calibrate/token_counts.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/quant/lowrank_factorize.hpp"

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

int main(int argc, char** argv) {
  std::filesystem::path model_dir = stile::default_model_dir();
  std::filesystem::path sst2_dir = STILE_SST2_DIR;
  std::filesystem::path heads_path, out_path;
  std::vector<double> budgets{0.5, 0.25, 0.125, 0.0625};
  std::vector<std::size_t> clusters{512, 4096, 12288};
  std::string codec = "int8";
  std::vector<double> powers{1.0, 0.5, 0.25, 0.0};
  std::size_t calibration = 500;
  std::size_t threads = 0, limit = 0;
  stile_cli::Parser cli("eval_embeddings", "[options]",
                        "Clustered low-rank word embeddings on the default model: parameters, bytes, sentence-"
                        "embedding cosine to the dense model and SST-2 dev accuracy per byte budget.");
  cli.flag("--model", "DIR", "model directory (default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2)",
           model_dir);
  cli.flag("--sst2", "DIR", "the SST-2 directory with train.tsv and dev.tsv", sst2_dir);
  cli.flag("--heads", "FILE", "heads file (tools/train_heads) with the full model's head; without it, no accuracy",
           heads_path);
  cli.flag("--budgets", "LIST", "stored bytes as fractions of the dense fp32 table", budgets);
  cli.flag("--clusters", "LIST", "cluster boundaries in frequency order (cluster 0 stays full)", clusters);
  cli.flag("--codec", "C", "U rows: int8 or f32", codec).one_of({"int8", "f32"});
  cli.flag("--weight-powers", "LIST", "token weights (count + 1)^p tried by the search (docs/format.md)", powers);
  cli.flag("--calibration", "N",
           "pick p by sentence cosine on the first N calibration rows of train.tsv's seeded split (0: no search, "
           "one table per p, each reported on dev)",
           calibration);
  cli.flag("--limit", "N", "only the first N dev sentences (0: all)", limit);
  cli.threads(threads);
  cli.flag("--out", "FILE", "write the results as JSON", out_path);
  cli.example("eval_embeddings --heads minilm.stile.heads.json --budgets 0.5,0.25");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");

  try {
    const stile::LabeledSentences dev = stile::bench::read_dev(sst2_dir, limit);
    stile::ThreadPool pool(threads);
    const stile::SentenceEncoder reference = stile::SentenceEncoder::load(model_dir);
    const std::vector<std::vector<float>> ref = stile::bench::embed_all(reference, dev.sentences, pool, "dense reference");
    const stile::EncoderConfig& c = reference.model().config();
    const std::size_t rows = c.vocab_size, d = c.hidden;
    const std::span<const float> dense = reference.model().weights().word_embeddings;

    const stile::LinearHead* head = nullptr;
    std::optional<stile::HeadsFile> heads;
    std::string head_key;
    if (!heads_path.empty()) {
      heads = stile::HeadsFile::load(heads_path);
      head_key = std::to_string(heads->num_layers) + "x" + std::to_string(heads->shards_per_layer);
      head = &heads->at(head_key, heads_path.string()).head;
      head->check(reference.dim());
    }
    std::size_t ref_correct = 0;
    for (std::size_t i = 0; head != nullptr && i < ref.size(); ++i) ref_correct += head->predict(ref[i]) == dev.labels[i];

    // The calibration sentences: train.tsv rows of the seeded split's calibration part (never
    // dev), kept out of the token counts, which are taken on the other train.tsv rows.
    const stile::LowRankCorpus corpus =
        stile::split_lowrank_corpus(stile::read_glue_tsv(sst2_dir / "train.tsv"), calibration);
    const std::vector<std::string>& calib = corpus.calibration;
    const std::vector<double> counts = stile::token_counts(reference.tokenizer(), rows, corpus.counted);
    const double dense_bytes = 4.0 * double(rows) * double(d);
    fmt::print("\nSST-2 dev, {} sentences; token counts on train.tsv (less the calibration rows); {}; head: {}; U rows {}; clusters {}\n",
               dev.size(),
               calibration ? fmt::format("weight power p of {} picked on {} calibration rows of train.tsv",
                                         fmt::join(powers, ","), calib.size())
                           : std::string("every p run"), head ? fmt::format("\"{}\" of {}", head_key, heads_path.string()) : std::string("none"),
               codec, fmt::join(clusters, ","));
    fmt::print("{:>10} | {:>10} {:>9} {:>6} | {:>22} | {:>11} {:>10} | {:>8} {:>8}\n", "budget^p", "params", "MB",
               "ratio", "ranks", "cosine mean", "cosine min", "accuracy", "vs dense");
    fmt::print("{:>10} | {:>10} {:>9.2f} {:>6.2f} | {:>22} | {:>11.6f} {:>10.6f} | {:>8} {:>8}\n", "dense",
               rows * d, dense_bytes / 1e6, 1.0, "-", 1.0, 1.0,
               head ? fmt::format("{:.2f}%", 100.0 * double(ref_correct) / double(ref.size())) : std::string("-"),
               "-");
    nlohmann::json out = {{"sentences", dev.size()},
                          {"head", head_key},
                          {"codec", codec},
                          {"clusters", clusters},
                          {"dense", {{"params", rows * d}, {"bytes", dense_bytes}, {"correct", ref_correct}}},
                          {"results", nlohmann::json::array()}};
    struct Run {
      double budget, power;
    };
    std::vector<Run> runs;
    for (const double budget : budgets) {
      if (calibration != 0) {
        runs.push_back({budget, -1.0});
      } else {
        for (const double p : powers) runs.push_back({budget, p});
      }
    }
    for (const Run& run : runs) {
      const double budget = run.budget;
      stile::quant::LowRankOptions lr;
      lr.budget = budget;
      lr.cluster_ends = clusters;
      lr.codec = *stile::quant::parse_word_row_codec(codec);
      const auto start = std::chrono::steady_clock::now();
      double power = run.power, calib_cosine = 0;
      stile::quant::LowRankWordTable table;
      if (run.power < 0) {
        stile::LowRankSearchResult found =
            stile::search_lowrank_table(reference, model_dir, counts, calib, lr, powers, &pool);
        table = std::move(found.table);
        power = found.weight_power;
        calib_cosine = found.calibration_cosine;
      } else {
        lr.weight_power = power;
        table = stile::quant::factorize_word_table(dense, rows, d, counts, lr);
      }
      const double factor_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::vector<float> rec = table.reconstruct();
      stile::BertWeights w = stile::BertWeights::load(model_dir);
      w.word_embeddings = rec;
      const stile::SentenceEncoder encoder(stile::BertModel(std::move(w)), reference.tokenizer(), reference.config());
      const std::vector<std::vector<float>> emb =
          stile::bench::embed_all(encoder, dev.sentences, pool, fmt::format("budget {}", budget));
      double mean = 0, least = std::numeric_limits<double>::infinity();
      std::size_t correct = 0;
      for (std::size_t i = 0; i < emb.size(); ++i) {
        const double cs = stile::cosine_similarity(emb[i], ref[i]);
        mean += cs / double(emb.size());
        least = std::min(least, cs);
        if (head != nullptr) correct += head->predict(emb[i]) == dev.labels[i];
      }
      std::vector<std::size_t> ranks;
      for (std::size_t i = 1; i < table.clusters.size(); ++i) ranks.push_back(table.clusters[i].rank);
      const double bytes = double(table.bytes());
      const double acc = double(correct) / double(emb.size()), ref_acc = double(ref_correct) / double(emb.size());
      fmt::print("{:>10} | {:>10} {:>9.2f} {:>6.2f} | {:>22} | {:>11.6f} {:>10.6f} | {:>8} {:>8}\n",
                 fmt::format("{}^{}", budget, power), table.params(), bytes / 1e6, dense_bytes / bytes,
                 fmt::format("{}", fmt::join(ranks, ",")), mean, least,
                 head ? fmt::format("{:.2f}%", 100 * acc) : std::string("-"),
                 head ? fmt::format("{:+.2f}", 100 * (acc - ref_acc)) : std::string("-"));
      out["results"].push_back({{"budget", budget},
                                {"weight_power", power},
                                {"calibration_cosine", calib_cosine},
                                {"params", table.params()},
                                {"bytes", table.bytes()},
                                {"bytes_ratio", dense_bytes / bytes},
                                {"params_ratio", double(rows * d) / double(table.params())},
                                {"ranks", ranks},
                                {"cosine_mean", mean},
                                {"cosine_min", least},
                                {"correct", correct},
                                {"search_seconds", factor_s}});
    }
    if (!out_path.empty()) std::ofstream(out_path) << out.dump(1) << "\n";
  } catch (const std::exception& e) {
    fmt::print(stderr, "eval_embeddings: {}\n", e.what());
    return 1;
  }
  return 0;
}
