// bench_word_rows: the first stage of a request, the word-embedding rows, of two stores of the
// same model side by side in one run: usually the dense store and one with a clustered low-rank
// table (convert --embeddings lowrank). For each store, the first N SST-2 dev sentences go through
// the engine's word-row stage (pipeline/word_rows.hpp: the same backend, storage emulator, cache
// and read merging as the engine) one after another (the dense store also with a read per row,
// as stile read it before issue 21); reported per request: rows read, read
// requests, bytes read and wall time of the stage (reads + checks + rebuilding the rows), mean and
// median, with and without a word-row cache. The emulator's delay is real sleep, so the time is
// what a board with that flash would see for the reads (the CPU part is this machine's).
//
//   bench_word_rows DENSE.stile LOWRANK.stile [--storage emmc] [--sentences 200]
//                   [--cache-kb 0,128] [--json out.json]
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/io/storage_emulator.hpp"
#include "stile/pipeline/timeline.hpp"
#include "stile/pipeline/word_rows.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

namespace {

struct Stage {
  double rows = 0, requests = 0, bytes = 0, ms = 0;
  std::vector<double> times;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string storage = "emmc";
  std::size_t sentences = 200;
  std::vector<std::size_t> cache_kb{0, 128};
  std::filesystem::path sst2_dir = STILE_SST2_DIR, json_path;
  stile_cli::Parser cli("bench_word_rows", "DENSE.stile LOWRANK.stile [options]",
                        "Word-row reads per request (rows, requests, bytes, time) of two stores side by side, on "
                        "emulated flash.");
  cli.storage(storage);
  cli.flag("--sentences", "N", "the first N SST-2 dev sentences", sentences).at_least(1);
  cli.flag("--cache-kb", "LIST", "word-row cache budgets to run (KiB)", cache_kb);
  cli.flag("--sst2", "DIR", "the SST-2 directory with dev.tsv", sst2_dir);
  cli.flag("--json", "FILE", "write the results as JSON", json_path);
  cli.example("bench_word_rows minilm.stile minilm_lr.stile --storage emmc --cache-kb 0,128");
  const std::vector<std::string> stores = cli.parse(argc, argv);
  if (stores.size() != 2) cli.fail("give two stores: the dense one, then the low-rank one");

  try {
    stile::LabeledSentences dev = stile::read_glue_tsv(sst2_dir / "dev.tsv");
    dev.sentences.resize(std::min(sentences, dev.size()));
    nlohmann::json out = {{"storage", storage}, {"sentences", dev.sentences.size()}, {"runs", nlohmann::json::array()}};
    fmt::print("storage {} (emulated: {}); {} SST-2 dev sentences, one after another\n", storage,
               stile::storage_profile(storage).name, dev.sentences.size());
    fmt::print("{:>8} {:>22} | {:>12} {:>6} {:>9} {:>10} {:>10} | {:>9} {:>9} {:>9} {:>10}\n", "cache KiB", "store",
               "table MB", "rows", "requests", "KB read", "resident", "mean ms", "median ms", "vs 1st",
               "1st bytes x");
    struct Config {
      std::string label, path;
      bool merge;
    };
    const std::vector<Config> configs = {
        {"dense, a read per row", stores[0], false}, {"dense", stores[0], true}, {"low-rank", stores[1], true}};
    for (const std::size_t kb : cache_kb) {
      std::vector<Stage> stages;
      for (const Config& config : configs) {
        const std::string& path = config.path;
        const stile::ShardStore store = stile::ShardStore::open(path);
        const stile::WordPieceTokenizer tokenizer(stile::Vocab::parse(store.read_vocab(), store.name()),
                                                  stile::WordPieceOptions{.max_length = 256});
        std::string note;
        std::unique_ptr<stile::ReadBackend> backend =
            stile::emulate_storage(stile::open_read_backend(path, {}, &note), stile::storage_profile(storage));
        stile::WordRowReader reader(store, *backend, kb * 1024, config.merge);
        stile::WordRowReader::Buffer scratch;
        std::vector<float> hidden;
        Stage st;
        for (const std::string& s : dev.sentences) {
          const stile::Encoding e = tokenizer.encode(s);
          hidden.resize(e.size() * store.config().hidden);
          stile::Timeline t;
          const auto start = std::chrono::steady_clock::now();
          reader.read(e.input_ids, hidden.data(), scratch, t);
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
          st.rows += double(t.word_rows_read);
          st.requests += double(t.word_row_requests);
          st.bytes += double(t.embed_bytes_read);
          st.ms += ms;
          st.times.push_back(ms);
        }
        const double n = double(dev.sentences.size());
        const Stage& dense = stages.empty() ? st : stages.front();
        fmt::print("{:>8} {:>22} | {:>12.2f} {:>6.1f} {:>9.1f} {:>10.1f} {:>10.3f} | {:>9.3f} {:>9.3f} {:>9.2f} {:>10.2f}\n",
                   kb, config.label, double(store.word_table_bytes()) / 1e6, st.rows / n,
                   st.requests / n, st.bytes / n / 1e3, double(store.resident_bytes()) / 1e6, st.ms / n,
                   median(st.times), st.ms / dense.ms, dense.bytes / std::max(1.0, st.bytes));
        out["runs"].push_back({{"cache_kb", kb},
                               {"config", config.label},
                               {"store", path},
                               {"backend", backend->describe()},
                               {"table_bytes", store.word_table_bytes()},
                               {"resident_bytes", store.resident_bytes()},
                               {"rows_per_request", st.rows / n},
                               {"requests_per_request", st.requests / n},
                               {"bytes_per_request", st.bytes / n},
                               {"mean_ms", st.ms / n},
                               {"median_ms", median(st.times)}});
        if (stages.empty()) fmt::print("{:>33}   backend: {}\n", "", backend->describe());
        stages.push_back(std::move(st));
      }
    }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_word_rows: {}\n", e.what());
    return 1;
  }
  return 0;
}
