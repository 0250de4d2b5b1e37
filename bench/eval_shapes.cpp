// SST-2 dev accuracy of uniform submodels of a shard store, each with the heads of
// tools/train_heads: what the planner's choices trade. Three tables:
//   - the whole model at every stored bitwidth below 32, with the gold head (what bits cost);
//   - n x 12-style full-width submodels and 6 x m-style full-depth ones at 4 bits, each with its
//     own head and with the gold head (what depth and width cost, and what a head of another
//     shape costs: the shard-by-shard shrink's uneven widths have no head of their own);
//   - small submodels at 32 bits (the floor of the family).
// Shards kept: the m most important of each layer by STORE.importance.json (as the heads).
//
//   eval_shapes STORE [--sst2 DIR] [--bits 4]
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cli.hpp"
#include "sidecar.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/calibrate/plan_accuracy.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/vocab.hpp"
#include "stile/model/sharded_bert.hpp"
#include "stile/plan/importance.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  using stile_cli::Sidecar;
  fs::path sst2_dir = fs::path(STILE_SHARED_DIR) / "data" / "sst2";
  unsigned bits = 4;
  stile_cli::Parser cli("eval_shapes", "[options] STORE",
                        "SST-2 dev accuracy of uniform submodels of the shard store STORE, each with the heads of "
                        "STORE.heads.json, shards kept by STORE.importance.json.");
  cli.flag("--sst2", "DIR", "the SST-2 directory with dev.tsv (default: <repo>/../shared/data/sst2)", sst2_dir);
  cli.bits("--bits", "B", "the bitwidth of the depth and width table", bits);
  cli.example("eval_shapes minilm.stile --bits 4");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  const fs::path store_path = positional[0];
  try {
    const stile::ShardStore store = stile::ShardStore::open(store_path);
    const fs::path heads_path = stile_cli::sidecar_path(store_path, Sidecar::heads);
    const stile::HeadsFile heads = stile::HeadsFile::load(heads_path);
    const stile::ShardImportance importance =
        stile::load_importance(stile_cli::sidecar_path(store_path, Sidecar::importance));
    const stile::ShardedBert bert = stile::ShardedBert::open(store_path);
    const stile::LabeledSentences dev = stile::read_glue_tsv(sst2_dir / "dev.tsv");
    const stile::WordPieceTokenizer tokenizer(stile::Vocab::parse(store.read_vocab(), store.name()),
                                              stile::WordPieceOptions{.max_length = 256});
    std::vector<stile::Encoding> sentences;
    for (const std::string& s : dev.sentences) sentences.push_back(tokenizer.encode(s));
    const std::size_t N = store.num_layers(), M = store.shards_per_layer();
    auto accuracy = [&](const stile::SubmodelPlan& plan, const std::string& key) {
      const stile::LinearHead& head = heads.at(key, heads_path.string()).head;
      return 100.0 * static_cast<double>(stile::plan_correct(bert, sentences, dev.labels, plan, head)) /
             static_cast<double>(sentences.size());
    };
    fmt::print("{}: SST-2 dev ({} sentences), shards kept by importance\n\n", store_path.string(), sentences.size());
    fmt::print("whole model, gold head\n| bits | dev acc % |\n|---|---|\n");
    for (const unsigned b : store.bits()) {
      fmt::print("| {} | {:.1f} |\n", b, accuracy(stile::SubmodelPlan::uniform(N, M, b), "gold"));
    }
    fmt::print("\n{} bits: each shape with its own head, and with the gold head\n", bits);
    fmt::print("| shape | own head % | gold head % | calibration (own head, 32 bits) % |\n|---|---|---|---|\n");
    auto row = [&](std::size_t n, std::size_t m) {
      const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(n, m, bits, importance.ranking);
      const std::string key = stile::shape_key(n, m);
      fmt::print("| {} | {:.1f} | {:.1f} | {:.1f} |\n", key, accuracy(plan, key), accuracy(plan, "gold"),
                 100 * heads.at(key, heads_path.string()).calibration_accuracy);
    };
    for (std::size_t n = 1; n < N; ++n) row(n, M);
    for (std::size_t m = M - 1; m >= 1; --m) {
      if (m > M / 2 || m % 2 == 0) row(N, m);
    }
    fmt::print("\nsmall submodels at 32 bits, own head\n| shape | dev acc % |\n|---|---|\n");
    for (const std::size_t m : {std::size_t{1}, std::size_t{2}}) {
      for (const std::size_t n : {std::size_t{1}, N / 2, N}) {
        const std::string key = stile::shape_key(n, m);
        fmt::print("| {} | {:.1f} |\n", key, accuracy(stile::SubmodelPlan::uniform(n, m, 32, importance.ranking), key));
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eval_shapes: %s\n", e.what());
    return 1;
  }
  return 0;
}
