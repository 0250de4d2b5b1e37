// importance: the importance profile of a shard store (plan/importance.hpp). Every shard at the
// lowest bitwidth, one shard at a time raised to 32 bits; each configuration classifies the
// calibration part of SST-2's train.tsv (never dev) with the gold head; shards are ranked by
// accuracy, ties broken by the mean log-probability of the true label. Writes
// STORE.importance.json, which train_heads --importance and the planners read.
//
//   train_heads minilm.stile --shapes gold     (first: the gold head, and the split it records)
//   importance minilm.stile
//
// The split (seed, head-training and calibration sizes) is the heads file's, so the calibration
// rows are never rows the gold head was trained on.
//
// --prefix-ranking: the ranking is each layer's stored order (a model trained so that shards 0..m-1
// are the best m, scripts/finetune_elastic.py, whose one-shard-at-a-time scores differ by noise).
//
// Exit status: 0 ok, 1 runtime error, 2 usage error.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cli.hpp"
#include "sidecar.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/vocab.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/plan/importance.hpp"
#include "stile/calibrate/importance.hpp"

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

int main(int argc, char** argv) {
  using stile_cli::Sidecar;
  std::filesystem::path sst2_dir = STILE_SST2_DIR;
  std::optional<std::filesystem::path> heads_path, out;
  bool prefix_ranking = false;
  std::string head_key = "gold";
  std::size_t threads = 0, limit = 0;
  stile::ImportanceOptions options;
  stile_cli::Parser cli("importance", "[options] STORE",
                        "Measures how much each shard of the shard store STORE matters on SST-2: the whole model with "
                        "every shard at the lowest stored bitwidth, then each shard alone raised to the highest, "
                        "classified by the gold head on the calibration part of train.tsv. Writes "
                        "STORE.importance.json.");
  cli.flag("--sst2", "DIR", "the SST-2 directory with train.tsv (default: <repo>/../shared/data/sst2)", sst2_dir);
  cli.flag("--heads", "FILE", "the heads file with the gold head and the split (default: STORE.heads.json)",
           heads_path);
  cli.flag("--head", "KEY", "the head to classify with", head_key);
  cli.flag("--out", "FILE", "where to write the profile (default: STORE.importance.json)", out);
  cli.flag("--limit", "K", "only the first K calibration sentences (a quick look; default: all)", limit).at_least(1);
  cli.toggle("--prefix-ranking",
             "rank each layer's shards in stored order (0 first): for a model trained so that shards 0..m-1 are the "
             "best m (scripts/finetune_elastic.py); the measured scores are still recorded",
             [&] { prefix_ranking = true; });
  cli.threads(threads);
  cli.flag("--batch", "B", "sentences per layer run", options.batch).at_least(1);
  cli.example("importance minilm.stile", "writes minilm.stile.importance.json from SST-2 train rows");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  const std::filesystem::path store_path = positional[0];
  if (!heads_path) heads_path = stile_cli::sidecar_path(store_path, Sidecar::heads);
  if (!out) out = stile_cli::sidecar_path(store_path, Sidecar::importance);

  try {
    const auto start = std::chrono::steady_clock::now();
    const stile::ShardStore store = stile::ShardStore::open(store_path);
    const stile::HeadsFile heads = stile::HeadsFile::load(*heads_path);
    const stile::LinearHead& head = heads.at(head_key, heads_path->string()).head;
    if (heads.store != store_path.filename().string()) {
      std::fprintf(stderr, "importance: note: %s was trained for store %s, this is %s\n", heads_path->c_str(),
                   heads.store.c_str(), store_path.filename().c_str());
    }

    const stile::LabeledSentences train_all = stile::read_glue_tsv(sst2_dir / "train.tsv");
    if (train_all.size() != heads.split.rows) {
      throw stile::Error(fmt::format("stile: {}: {} rows, but the heads in {} were trained on a split of {} rows",
                                     (sst2_dir / "train.tsv").string(), train_all.size(), heads_path->string(),
                                     heads.split.rows));
    }
    const stile::Sst2Parts parts = stile::split_sst2(train_all.size(), heads.split.split);
    std::vector<std::size_t> rows = parts.calibration;
    if (limit != 0 && limit < rows.size()) rows.resize(limit);
    const stile::LabeledSentences calibration = train_all.subset(rows);
    const stile::WordPieceTokenizer tokenizer(
        stile::Vocab::parse(store.read_vocab(), store.name()),
        stile::WordPieceOptions{.max_length = std::min<std::size_t>(256, store.config().max_position_embeddings)});
    std::vector<stile::Encoding> encodings;
    for (const std::string& s : calibration.sentences) encodings.push_back(tokenizer.encode(s));

    const std::size_t N = store.num_layers(), M = store.shards_per_layer();
    fmt::print(
        "store {} ({} layers x {} shards); head \"{}\" of {}; {} calibration sentences of train.tsv "
        "(seed {}, after the {} head-training rows)\n",
        store_path.string(), N, M, head_key, heads_path->string(), calibration.size(), heads.split.split.seed,
        heads.split.split.train);
    std::fflush(stdout);  // before the progress bar on stderr

    stile::ThreadPool pool(threads, /*cpu_bound_workers=*/true);
    options.pool = &pool;
    stile::ProgressBar bar(fmt::format("importance ({} configurations)", 2 + N * M));
    options.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    stile::ImportanceProfile p = stile::profile_importance(store, encodings, calibration.labels, head, options);
    p.split = heads.split;
    p.head = head_key;
    if (prefix_ranking) {
      // The file allows a ranking measured another way (plan/importance.hpp). The global order
      // keeps the measured order among shards of the same stored position, so it still agrees
      // with the (identity) ranking layer by layer.
      std::vector<std::size_t> measured_rank(N * M);
      for (std::size_t r = 0; r < p.order.size(); ++r) measured_rank[p.order[r].layer * M + p.order[r].shard] = r;
      std::stable_sort(p.order.begin(), p.order.end(), [&](const stile::LayerShard& a, const stile::LayerShard& b) {
        return a.shard != b.shard ? a.shard < b.shard
                                  : measured_rank[a.layer * M + a.shard] < measured_rank[b.layer * M + b.shard];
      });
      for (auto& layer : p.ranking) {
        for (std::size_t s = 0; s < layer.size(); ++s) layer[s] = s;
      }
    }
    p.save(*out);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    fmt::print("\nall shards at {:>2} bits: accuracy {:.4f}, mean log p(true) {:.4f}\n", p.base_bits, p.base.accuracy(),
               p.base.mean_log_prob);
    fmt::print("all shards at {:>2} bits: accuracy {:.4f}, mean log p(true) {:.4f}\n\n", p.raised_bits,
               p.full.accuracy(), p.full.mean_log_prob);
    fmt::print("accuracy with one shard raised to {} bits (rows: layers; columns: shards):\n      ", p.raised_bits);
    for (std::size_t s = 0; s < M; ++s) fmt::print(" {:>6}", s);
    fmt::print("\n");
    for (std::size_t l = 0; l < N; ++l) {
      fmt::print("L{:<4}", l);
      for (std::size_t s = 0; s < M; ++s) fmt::print(" {:>6.3f}", p.shards[l][s].accuracy());
      fmt::print("\n");
    }
    auto line = [&](std::size_t rank) {
      const stile::LayerShard ls = p.order[rank];
      const stile::HeadScore& s = p.shards[ls.layer][ls.shard];
      fmt::print("  #{:<3} layer {} shard {:>2}: accuracy {:.4f} ({:+d} sentences vs base), mean log p {:.5f}\n",
                 rank + 1, ls.layer, ls.shard, s.accuracy(),
                 static_cast<long>(s.correct) - static_cast<long>(p.base.correct), s.mean_log_prob);
    };
    const std::size_t shown = std::min<std::size_t>(5, p.order.size());
    fmt::print("\nmost important:\n");
    for (std::size_t r = 0; r < shown; ++r) line(r);
    fmt::print("least important:\n");
    for (std::size_t r = p.order.size() - shown; r < p.order.size(); ++r) line(r);
    fmt::print("\nper-layer ranking (most important first):\n");
    for (std::size_t l = 0; l < N; ++l) {
      fmt::print("  layer {}: {}\n", l, fmt::join(p.ranking[l], " "));
    }
    fmt::print("\nwrote {}; {:.1f} s\n", out->string(), seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "importance: %s\n", e.what());
    return 1;
  }
  return 0;
}
