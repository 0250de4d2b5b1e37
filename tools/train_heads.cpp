// train_heads: the SST-2 classification heads of a shard store, one per submodel shape
// (model/heads_file.hpp). Each head is a logistic regression (model/linear_head.hpp) on the
// mean-pooled, L2-normalized embeddings that its submodel (n layers x m shards, every shard at 32
// bits) gives the head-training part of train.tsv (calibrate/sst2.hpp: seed 20261123, 8000 rows),
// scored on the calibration part (the next 1000 rows): the planner compares shapes by that score.
// The gold head is the full model's. dev.tsv is only used to report the gold head's accuracy.
//
//   train_heads minilm.stile --shapes gold                                   1. the gold head
//   importance minilm.stile                                                  2. the importance profile
//   train_heads minilm.stile --shapes all --importance minilm.stile.importance.json   3. every shape
//
// Which shards a shape keeps: the m most important of each layer by --importance, else shards
// 0..m-1. One pass over the data per m gives every n x m shape: the hidden states are pooled after
// each layer. Heads already in the output file and not retrained are kept (the file's store and
// split must match).
//
// A fine-tuned checkpoint that carries its own classifier (scripts/finetune_elastic.py,
// model/checkpoint_classifier.hpp): --model-head MODEL_DIR puts that one head under every shape
// instead of fitting one per shape (no head-training rows are embedded; each head's
// "train_accuracy" is then its calibration accuracy, as nothing was fit here). --bits K runs the
// shards at K bits instead of the store's highest; --dev-csv FILE also reports every trained
// head's SST-2 dev accuracy (reporting only: nothing is chosen by it), one CSV row per shape.
//
// Exit status: 0 ok, 1 runtime error, 2 usage error.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli.hpp"
#include "sidecar.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/checkpoint_classifier.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/calibrate/layerwise.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/calibrate/train_head.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/vocab.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/plan/importance.hpp"

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The shapes asked for: "gold" and (n, m) pairs.
struct Shapes {
  bool gold = false;
  std::set<std::pair<std::size_t, std::size_t>> nm;
};

// (Checked against the store, so after it is opened: a usage error then still exits with 2.)
Shapes parse_shapes(const stile_cli::Parser& cli, std::string_view list, std::size_t layers, std::size_t shards) {
  Shapes out;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    std::size_t n = 0, m = 0;
    if (item == "gold") {
      out.gold = true;
    } else if (item == "all") {
      out.gold = true;
      for (std::size_t a = 1; a <= layers; ++a) {
        for (std::size_t b = 1; b <= shards; ++b) out.nm.insert({a, b});
      }
    } else if (stile::parse_shape_key(item, n, m)) {
      if (n < 1 || n > layers || m < 1 || m > shards) {
        cli.fail(fmt::format("--shapes: {} is outside the store's {} layers x {} shards", item, layers, shards));
      }
      out.nm.insert({n, m});
    } else {
      cli.fail(fmt::format("--shapes: '{}' is not gold, all or NxM", item));
    }
  }
  if (!out.gold && out.nm.empty()) cli.fail("--shapes names no shape");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path sst2_dir = STILE_SST2_DIR;
  std::string shapes_text = "all";
  std::optional<std::filesystem::path> importance_path, out, model_head_dir, dev_csv;
  unsigned run_bits = 0;  // 0: the store's highest
  std::size_t threads = 0, batch = 64;
  stile::Sst2Split split;
  stile::LogisticRegressionOptions lr;
  stile_cli::Parser cli("train_heads", "[options] STORE",
                        "Trains the SST-2 classification heads of the shard store STORE (logistic regression on "
                        "pooled embeddings), one per submodel shape, on the head-training part of train.tsv, and "
                        "writes them to STORE.heads.json. Prints each head's training accuracy and the gold head's "
                        "dev accuracy.");
  cli.flag("--sst2", "DIR", "the SST-2 directory with train.tsv and dev.tsv (default: <repo>/../shared/data/sst2)",
           sst2_dir);
  cli.flag("--shapes", "LIST",
           "comma-separated: gold (the full model), NxM (N layers x M shards per layer), or all (gold and every NxM)",
           shapes_text);
  cli.flag("--importance", "FILE",
           "an importance profile (tools/importance): each layer keeps its M most important shards (default: shards "
           "0..M-1)",
           importance_path);
  cli.flag("--out", "FILE", "the heads file (default: STORE.heads.json); heads in it that are not retrained are kept",
           out);
  cli.flag("--model-head", "MODEL_DIR",
           "use the classifier of this fine-tuned checkpoint (classifier.weight/bias) for every shape instead of "
           "fitting heads",
           model_head_dir);
  cli.flag("--bits", "K", "run every shard at K bits (default: the store's highest)", run_bits);
  cli.flag("--dev-csv", "FILE", "also write each head's SST-2 dev accuracy (reporting only) to this CSV", dev_csv);
  cli.threads(threads);
  cli.flag("--batch", "B", "sentences per layer run", batch).at_least(1);
  cli.flag("--seed", "S", "the split's seed", split.seed);
  cli.flag("--train", "N", "head-training rows", split.train).at_least(1);
  cli.flag("--calibration", "N",
           "calibration rows after them: each head's calibration accuracy, and the importance profile's rows",
           split.calibration);
  cli.flag("--l2", "X", "L2 penalty of the logistic regression", lr.l2).at_least(0);
  cli.example("train_heads minilm.stile --shapes gold", "the full model's head");
  cli.example("train_heads minilm.stile --shapes all --importance minilm.stile.importance.json",
              "a head per n x m shape");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  const std::filesystem::path store_path = positional[0];
  if (!out) out = stile_cli::sidecar_path(store_path, stile_cli::Sidecar::heads);

  try {
    const auto t_start = std::chrono::steady_clock::now();
    const stile::ShardStore store = stile::ShardStore::open(store_path);
    const std::size_t N = store.num_layers(), M = store.shards_per_layer(), d = store.config().hidden;
    unsigned top_bits = store.bits().back();
    if (run_bits != 0) {
      const auto& b = store.bits();
      if (std::find(b.begin(), b.end(), run_bits) == b.end()) {
        cli.fail(fmt::format("--bits {}: the store has no shards at that bitwidth", run_bits));
      }
      top_bits = run_bits;
    }
    std::optional<stile::LinearHead> model_head;
    if (model_head_dir) {
      model_head = stile::load_checkpoint_classifier(*model_head_dir);
      if (!model_head) {
        throw stile::Error(fmt::format("stile: {}: has no classifier (classifier.weight, classifier.bias)",
                                       (*model_head_dir / "model.safetensors").string()));
      }
      model_head->check(d);
    }
    const Shapes shapes = parse_shapes(cli, shapes_text, N, M);

    stile::ShardRanking ranking;  // empty: shards 0..m-1
    if (importance_path) {
      ranking = stile::load_importance(*importance_path).ranking;
      stile::check_full_ranking(ranking, N, M, importance_path->string() + " (for this store)");
    }

    const stile::LabeledSentences train_all = stile::read_glue_tsv(sst2_dir / "train.tsv");
    const stile::LabeledSentences dev = stile::read_glue_tsv(sst2_dir / "dev.tsv");
    const stile::Sst2Parts parts = stile::split_sst2(train_all.size(), split);
    // With --model-head nothing is fit: the head-training rows are not embedded.
    const stile::LabeledSentences train =
        model_head ? stile::LabeledSentences{} : train_all.subset(parts.train);
    const stile::LabeledSentences calibration = train_all.subset(parts.calibration);
    const stile::RecordedSplit recorded{split, train_all.size()};

    stile::HeadsFile file;
    if (std::filesystem::exists(*out)) {
      file = stile::HeadsFile::load(*out);
      const std::string name = store_path.filename().string();
      if (file.store != name || file.num_layers != N || file.shards_per_layer != M || !(file.split == recorded)) {
        throw stile::Error(fmt::format(
            "stile: {}: its heads are for store {} ({} x {}), split seed {} train {} calibration {} of {} rows; this "
            "run is for {} ({} x {}), seed {} train {} calibration {} of {} rows. Remove it or give another --out",
            out->string(), file.store, file.num_layers, file.shards_per_layer, file.split.split.seed,
            file.split.split.train, file.split.split.calibration, file.split.rows, name, N, M, split.seed, split.train,
            split.calibration, train_all.size()));
      }
    }
    file.store = store_path.filename().string();
    file.num_layers = N;
    file.shards_per_layer = M;
    file.split = recorded;

    const stile::WordPieceTokenizer tokenizer(
        stile::Vocab::parse(store.read_vocab(), store.name()),
        stile::WordPieceOptions{.max_length = std::min<std::size_t>(256, store.config().max_position_embeddings)});
    auto tokenize = [&](const stile::LabeledSentences& s) {
      std::vector<stile::Encoding> e;
      e.reserve(s.size());
      for (const std::string& text : s.sentences) e.push_back(tokenizer.encode(text));
      return e;
    };
    // The training rows, then the calibration rows: every head is scored on the latter (not fit
    // to them), which is what the planner compares submodel shapes by.
    std::vector<stile::Encoding> train_enc = tokenize(train);
    for (stile::Encoding& e : tokenize(calibration)) train_enc.push_back(std::move(e));
    if (dev_csv) {  // dev rows last, for reporting only
      for (stile::Encoding& e : tokenize(dev)) train_enc.push_back(std::move(e));
    }
    fmt::print(
        "store {} ({} layers x {} shards; heads on its {}-bit shards); SST-2 train.tsv {} rows, head "
        "training {} (seed {}), calibration {}, dev {}; shards per layer: {}\n",
        store_path.string(), N, M, top_bits, train_all.size(), train.size(), split.seed, calibration.size(), dev.size(),
        importance_path ? "the most important by " + importance_path->string() : std::string("0..m-1"));
    std::fflush(stdout);  // before the progress bars on stderr

    stile::ThreadPool pool(threads, /*cpu_bound_workers=*/true);
    stile::LayerwiseBert bert(store);

    // The m values to run and, per m, the layer counts to pool after. The shards of a layer are
    // taken in ascending id order: only the set matters, and then the M-shard submodel is the gold
    // one bit for bit.
    std::map<std::size_t, std::set<std::size_t>> passes;
    for (const auto& [n, m] : shapes.nm) passes[m].insert(n);
    if (shapes.gold) passes[M].insert(N);
    auto layer_shards = [&](std::size_t layer, std::size_t m) {
      std::vector<stile::ShardChoice> chosen;
      for (std::size_t r = 0; r < m; ++r) chosen.push_back({ranking.empty() ? r : ranking[layer][r], top_bits});
      std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.shard < b.shard; });
      return chosen;
    };

    const auto t_embed = std::chrono::steady_clock::now();
    std::map<std::pair<std::size_t, std::size_t>, std::vector<float>> features;  // (n, m) -> [rows x d]
    for (const auto& [m, layer_counts] : passes) {
      const std::size_t deepest = *layer_counts.rbegin();
      stile::ProgressBar bar(fmt::format("embed m={:>2}, n=1..{}", m, deepest));
      for (const std::size_t n : layer_counts) features[{n, m}].reserve(train_enc.size() * d);
      for (std::size_t begin = 0; begin < train_enc.size(); begin += batch) {
        const std::size_t end = std::min(train_enc.size(), begin + batch);
        stile::HiddenBatch x = bert.embed(std::span<const stile::Encoding>(train_enc).subspan(begin, end - begin));
        for (std::size_t l = 0; l < deepest; ++l) {
          bert.run_layer(l, layer_shards(l, m), x, pool);
          if (layer_counts.count(l + 1) != 0) {
            const std::vector<float> e = stile::mean_pooled_normalized(x, d);
            std::vector<float>& f = features[{l + 1, m}];
            f.insert(f.end(), e.begin(), e.end());
          }
        }
        bar.update(end, train_enc.size());
      }
      bert.drop_shards();
    }
    const double embed_seconds = seconds_since(t_embed);

    const auto t_train = std::chrono::steady_clock::now();
    lr.pool = &pool;
    struct Trained {
      std::string key;
      stile::LogisticRegressionReport report;
    };
    std::vector<Trained> trained;
    struct DevRow {
      std::size_t n, m;
      double accuracy;
    };
    std::map<std::string, DevRow> dev_accuracy;
    auto train_one = [&](const std::string& key, std::size_t n, std::size_t m, const stile::ShardRanking& assumed) {
      stile::LogisticRegressionReport report;
      stile::StoredHead h;
      const std::span<const float> f = features.at({n, m});
      const std::span<const float> cal_f = f.subspan(train.size() * d, calibration.size() * d);
      if (model_head) {
        h.head = *model_head;
        report.converged = true;
      } else {
        h.head = stile::train_logistic_regression(f.first(train.size() * d), d, train.labels,
                                                  stile::sst2_label_names(), lr, &report);
      }
      h.calibration_accuracy = calibration.size() == 0 ? 0.0 : stile::score_head(h.head, cal_f, calibration.labels).accuracy();
      h.train_accuracy = model_head ? h.calibration_accuracy : report.train_accuracy;
      report.train_accuracy = h.train_accuracy;
      if (dev_csv) {
        dev_accuracy[key] = {n, m, stile::score_head(h.head, f.subspan((train.size() + calibration.size()) * d),
                                                     dev.labels).accuracy()};
      }
      h.ranking = assumed;
      file.heads[key] = std::move(h);
      trained.push_back({key, report});
    };
    const std::size_t head_count = shapes.nm.size() + (shapes.gold ? 1 : 0);
    stile::ProgressBar train_bar("train heads");
    if (shapes.gold) {
      train_one("gold", N, M, {});
      train_bar.update(trained.size(), head_count);
    }
    for (const auto& [n, m] : shapes.nm) {
      train_one(stile::shape_key(n, m), n, m, ranking);
      train_bar.update(trained.size(), head_count);
    }
    const double train_seconds = seconds_since(t_train);
    file.save(*out);
    if (dev_csv) {
      std::string csv = "shape,layers,shards,bits,calibration_accuracy,dev_accuracy\n";
      for (const auto& [key, row] : dev_accuracy) {
        csv += fmt::format("{},{},{},{},{:.6f},{:.6f}\n", key, row.n, row.m, top_bits,
                           file.heads.at(key).calibration_accuracy, row.accuracy);
      }
      stile::write_file_atomically(*dev_csv, csv);
      fmt::print("wrote {} (dev accuracy of {} heads at {} bits; reporting only)\n", dev_csv->string(),
                 dev_accuracy.size(), top_bits);
    }

    fmt::print("\n{:>6} {:>10} {:>10} {:>11} {:>6} {:>10}\n", "head", "train acc", "calib acc", "loss", "iters",
               "converged");
    for (const Trained& t : trained) {
      fmt::print("{:>6} {:>10.4f} {:>10.4f} {:>11.6f} {:>6} {:>10}\n", t.key, t.report.train_accuracy,
                 file.heads.at(t.key).calibration_accuracy, t.report.loss, t.report.iterations,
                 t.report.converged ? "yes" : "no");
    }

    double dev_seconds = 0;
    if (file.heads.count("gold") != 0) {
      const auto t_dev = std::chrono::steady_clock::now();
      const std::vector<stile::Encoding> dev_enc = tokenize(dev);
      std::vector<float> dev_features;
      std::vector<stile::ShardChoice> all;
      for (std::size_t s = 0; s < M; ++s) all.push_back({s, top_bits});
      for (std::size_t begin = 0; begin < dev_enc.size(); begin += batch) {
        const std::size_t end = std::min(dev_enc.size(), begin + batch);
        stile::HiddenBatch x = bert.embed(std::span<const stile::Encoding>(dev_enc).subspan(begin, end - begin));
        for (std::size_t l = 0; l < N; ++l) bert.run_layer(l, all, x, pool);
        const std::vector<float> e = stile::mean_pooled_normalized(x, d);
        dev_features.insert(dev_features.end(), e.begin(), e.end());
      }
      const stile::HeadScore s = stile::score_head(file.heads.at("gold").head, dev_features, dev.labels);
      dev_seconds = seconds_since(t_dev);
      fmt::print("\ngold head on SST-2 dev (reporting only): accuracy {:.4f} ({}/{}), mean log p(true) {:.4f}\n",
                 s.accuracy(), s.correct, s.total, s.mean_log_prob);
    }
    fmt::print("\nwrote {} ({} heads)\ntime: embedding {:.1f} s, training {:.1f} s, dev {:.1f} s, total {:.1f} s\n",
               out->string(), file.heads.size(), embed_seconds, train_seconds, dev_seconds, seconds_since(t_start));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_heads: %s\n", e.what());
    return 1;
  }
  return 0;
}
