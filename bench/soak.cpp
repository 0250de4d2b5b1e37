// soak: the engine kept open for N requests, as an app keeps it for days: requests of mixed
// lengths, the latency target, preload budget and word-row cache budget changing every few
// requests, read faults injected (io/fault_injection.hpp). Reports requests served, failed (each
// with its cause, matched against the fault that was injected during it), deadline misses (with
// and without a late read), and the process's resident memory at the start, at request 1,000 and
// at the end. A request that ends with anything but a result or a stile::Error is "lost". And how
// far the planner's estimate is from what was measured, part by part, over the requests that met
// no fault: the layers' time (the plan's estimate against the end of the last layer's compute less
// the end of the embeddings), their compute, their reads (the profile's cost line for the requests
// and bytes read against the measured read spans) and the word rows (rows read x the profile's
// row read time against the embeddings' span).
//
//   soak --requests 10000 /work/data/minilm.stile          (profile, importance, heads beside it)
//   soak --inject "seed=3; eio@p=0.001; late@p=0.002,x=10-100" --storage emmc STORE
//   soak --sentences ../shared/data/sst2/dev.tsv --background-read-mbps 20 --reprofile STORE
//
// --sentences: the requests are a GLUE TSV's sentences, in order, cycled (default: random
// vocabulary tokens, 4..128 of them). --background-read-mbps R: a second reader of the same
// emulated flash (the engine's EmulatedDevice, io/storage_emulator.hpp) reads random 128 KiB
// blocks of the store at R MB/s on average for the whole run, as another app reading the board's
// flash would: the engine's reads queue behind its reads.
//
// Deadline misses are timings: on a shared machine they measure the machine as much as the engine.
// Exit status: 0 when no request was lost and every failure had an injected cause, 1 otherwise
// (or a runtime error), 2 usage error.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "support/rng.hpp"
#include "sidecar.hpp"
#include "stile/engine.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/core/aligned_buffer.hpp"
#include "stile/io/fault_injection.hpp"
#include "stile/io/storage_emulator.hpp"
#include "stile/io/json_file.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/importance.hpp"
#include "stile/plan/pipeline_estimate.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"

namespace fs = std::filesystem;

namespace {

// The resident set of this process, in bytes (VmRSS of /proc/self/status; 0 where there is none).
std::size_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return static_cast<std::size_t>(std::stoull(line.substr(6))) * 1024;
  }
  return 0;
}


// What an error says went wrong (the engine's messages: pipeline/layer_reader.hpp, word_rows.hpp,
// store/shard_store.hpp).
std::string cause_of(const std::string& what) {
  if (what.find("Input/output error") != std::string::npos) return "eio";
  if (what.find("ended early") != std::string::npos) return "short";
  if (what.find("checksum mismatch") != std::string::npos) return "corrupt";
  return "other";
}

// The q-quantile of sorted, non-empty `v` (the nearest rank below).
double sorted_quantile(const std::vector<double>& v, double q) {
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

// Reads random 128 KiB blocks of `path` through its own backend on `device` at `mb_per_s` on
// average (exponential gaps), until stopped: another reader of the same flash.
class BackgroundReader {
 public:
  BackgroundReader(const fs::path& path, const stile::StorageProfile& storage,
                   std::shared_ptr<stile::EmulatedDevice> device, double mb_per_s, std::uint64_t seed)
      : backend_(stile::emulate_storage(stile::open_read_backend(path), storage, std::move(device))),
        thread_([this, mb_per_s, seed] { loop(mb_per_s, seed); }) {}
  BackgroundReader(const BackgroundReader&) = delete;
  BackgroundReader& operator=(const BackgroundReader&) = delete;
  ~BackgroundReader() {
    stop_.store(true);
    thread_.join();
  }
  double megabytes() const { return static_cast<double>(bytes_.load()) / 1e6; }

 private:
  static constexpr std::size_t kBlock = 128 * 1024;
  void loop(double mb_per_s, std::uint64_t seed) {
    stile_test::Rng rng{seed};
    stile::AlignedBuffer<std::byte, 4096> buffer(kBlock);
    const std::uint64_t blocks = std::max<std::uint64_t>(1, backend_->file_size() / kBlock);
    const double mean_gap_s = static_cast<double>(kBlock) / (mb_per_s * 1e6);
    auto next = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      const double u = (static_cast<double>(rng.below(1u << 20)) + 0.5) / static_cast<double>(1u << 20);
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(-std::log(u) * mean_gap_s));
      std::this_thread::sleep_until(next);
      const stile::ReadRequest request{rng.below(blocks) * kBlock, std::span<std::byte>(buffer.data(), kBlock)};
      std::size_t got = 0;
      try {
        backend_->read(std::span(&request, 1), std::span(&got, 1));
      } catch (const std::exception&) {
        // the background's own failures are not what is measured (the engine's requests are)
      }
      bytes_ += kBlock;
    }
  }
  std::unique_ptr<stile::ReadBackend> backend_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> bytes_{0};
  std::thread thread_;  // last: starts after the members it reads
};

}  // namespace

int main(int argc, char** argv) {
  using stile_cli::Sidecar;
  std::size_t requests = 10000, every = 25, seed = 1;
  std::vector<double> targets{40, 60, 100};
  std::vector<double> preload_kbs{0, 1024, 2048};
  std::vector<double> word_cache_kbs{0, 64, 128};
  // Per read; a request makes ~20-150 reads (word rows, layer runs): ~1% of requests meet each kind.
  std::string inject = "seed=1; eio@p=0.0001; short@p=0.0001; corrupt@p=0.0001; late@p=0.0002,x=10-100";
  std::string json_path;
  fs::path sentences_path;
  double background_mbps = 0;
  stile::EngineOptions options;
  options.storage = "emmc";
  options.min_bits = 4;
  stile_cli::Parser cli("soak", "[options] STORE",
                        "Runs the elastic engine on STORE for N requests of mixed lengths while the target, the "
                        "preload budget and the word-row cache budget change and read faults are injected; reports "
                        "requests served, failed (by cause), deadline misses and resident memory. Needs "
                        "STORE.profile.json (STORE.importance.json and STORE.heads.json are used when present).");
  cli.flag("--requests", "N", "requests to run", requests).at_least(1);
  cli.flag("--every", "K", "change one setting every K requests", every).at_least(1);
  cli.flag("--targets", "LIST", "latency targets to cycle through, ms", targets).at_least(1);
  cli.flag("--preload-kb", "LIST", "preload budgets to cycle through, KiB", preload_kbs).at_least(0);
  cli.flag("--word-cache-kb", "LIST", "word-row cache budgets to cycle through, KiB", word_cache_kbs).at_least(0);
  cli.flag("--inject", "SCRIPT", "the fault script (io/fault_injection.hpp; \"\" for none)", inject);
  cli.flag("--seed", "S", "the request stream's seed (lengths, tokens, settings)", seed);
  cli.flag("--min-bits", "B", "the planner's bitwidth floor", options.min_bits);
  cli.storage(options.storage);
  cli.backend(options.backend);
  cli.threads(options.threads);
  cli.toggle("--reprofile", "online re-profiling: re-plan as measured times drift from the profile",
             options.reprofile);
  cli.flag("--json", "FILE", "write the report as JSON", json_path);
  cli.flag("--sentences", "TSV", "requests: this GLUE TSV's sentences in order, cycled (default: random tokens)",
           sentences_path);
  cli.flag("--background-read-mbps", "R", "a second reader of the same emulated flash, R MB/s (default: none)",
           background_mbps)
      .at_least(0);
  cli.example("soak minilm.stile --requests 10000 --storage emmc");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  const fs::path store = positional[0];
  std::shared_ptr<stile::FaultInjector> faults;
  try {
    if (!inject.empty()) faults = std::make_shared<stile::FaultInjector>(stile::parse_fault_script(inject));
  } catch (const stile::Error& e) {
    cli.fail(std::string("--inject: ") + e.what());
  }
  options.faults = faults;
  options.target_ms = targets.front();
  options.preload_bytes = static_cast<std::size_t>(preload_kbs.front() * 1024);
  options.word_cache_bytes = static_cast<std::size_t>(word_cache_kbs.front() * 1024);

  try {
    const fs::path profile_path = stile_cli::sidecar_path(store, Sidecar::profile);
    stile::DeviceProfile profile = stile::DeviceProfile::load(profile_path);
    if (const auto importance = stile_cli::existing_sidecar(store, Sidecar::importance)) {
      stile::ShardImportance loaded = stile::load_importance(*importance);
      options.ranking = std::move(loaded.ranking);
      options.importance = std::move(loaded.order);
    }
    std::optional<stile::HeadsFile> heads;
    if (const auto path = stile_cli::existing_sidecar(store, Sidecar::heads)) heads = stile::HeadsFile::load(*path);

    std::vector<std::string> sentences;
    if (!sentences_path.empty()) sentences = stile::read_glue_tsv(sentences_path).sentences;
    const std::size_t rss_start = rss_bytes();
    std::optional<BackgroundReader> background;
    if (background_mbps > 0) {
      if (options.storage == "none") cli.fail("--background-read-mbps needs an emulated --storage");
      options.storage_device = std::make_shared<stile::EmulatedDevice>();
      background.emplace(store, stile::storage_profile(options.storage), options.storage_device, background_mbps,
                         seed + 1);
    }
    stile::Engine engine(store, options, std::move(profile));
    if (heads) engine.set_heads(*heads);
    const std::size_t rss_open = rss_bytes();
    const std::size_t vocab = engine.tokenizer().vocab().size();
    const stile::Encoding empty = engine.tokenizer().encode("");  // [CLS] [SEP]
    const std::size_t max_len = std::min<std::size_t>(128, engine.config().max_position_embeddings);
    fmt::print("soak     {} requests on {} ({}), faults \"{}\"{}{}\n", requests, store.string(),
               engine.backend_description(), inject,
               sentences.empty() ? std::string() : fmt::format(", sentences of {}", sentences_path.string()),
               background ? fmt::format(", a background reader at {} MB/s on the same flash", background_mbps)
                          : std::string());

    stile_test::Rng rng{seed};
    std::size_t served = 0, failed = 0, lost = 0, missed = 0, missed_late = 0, unexplained = 0, undetected = 0;
    std::size_t rss_1000 = 0;
    std::map<std::string, std::size_t> causes;
    std::vector<std::string> examples;  // the first failure of each cause
    double latency_sum = 0;
    std::vector<double> latencies;  // of the served requests
    // measured / estimated, per part, for the served requests that met no fault
    std::map<std::string, std::vector<double>> ratios;
    const stile::DeviceProfile& base = *engine.profile();
    const stile::ReadCostLine line = stile::read_cost_line(base);
    const std::size_t a = engine.read_alignment();
    const double row_ms = stile::estimated_row_read_ms(
        base, static_cast<double>(a > 1 ? a : engine.config().hidden * sizeof(float)));
    const auto add_ratio = [&](const char* part, double measured, double estimated) {
      if (measured > 0 && estimated > 0) ratios[part].push_back(measured / estimated);
    };
    for (std::size_t i = 0; i < requests; ++i) {
      if (i > 0 && i % every == 0) {
        switch ((i / every) % 3) {
          case 0: engine.set_target_ms(targets[rng.below(targets.size())]); break;
          case 1: engine.set_preload_budget(static_cast<std::size_t>(preload_kbs[rng.below(preload_kbs.size())] * 1024)); break;
          case 2:
            engine.set_word_cache_budget(static_cast<std::size_t>(word_cache_kbs[rng.below(word_cache_kbs.size())] * 1024));
            break;
        }
      }
      stile::Encoding e;
      if (!sentences.empty()) {
        e = engine.tokenizer().encode(sentences[i % sentences.size()]);
      } else {
        // A request of 4..max_len tokens: [CLS], ids from the whole vocabulary past the specials
        // (the first 1000 ids of a BERT vocabulary are unused and special tokens), [SEP].
        const std::size_t len = 4 + rng.below(max_len - 3);
        e.input_ids.push_back(empty.input_ids.front());
        for (std::size_t t = 2; t < len; ++t) {
          e.input_ids.push_back(
              static_cast<std::int32_t>(vocab > 2000 ? 1000 + rng.below(vocab - 1000) : rng.below(vocab)));
        }
        e.input_ids.push_back(empty.input_ids.back());
        e.token_type_ids.assign(e.input_ids.size(), 0);
        e.attention_mask.assign(e.input_ids.size(), 1);
      }

      const std::size_t faults_before = faults ? faults->log().size() : 0;
      const auto new_faults = [&] {
        std::map<stile::FaultKind, std::size_t> kinds;
        if (!faults) return kinds;
        const std::vector<stile::InjectedFault> log = faults->log();
        for (std::size_t f = faults_before; f < log.size(); ++f) ++kinds[log[f].kind];
        return kinds;
      };
      try {
        const stile::EngineResult r = engine.run(e);
        ++served;
        latency_sum += r.timeline.total_ms;
        latencies.push_back(r.timeline.total_ms);
        const auto kinds = new_faults();
        if (kinds.count(stile::FaultKind::eio) + kinds.count(stile::FaultKind::short_read) +
                kinds.count(stile::FaultKind::corrupt) !=
            0) {
          ++undetected;  // a fault that should have failed the request did not
        }
        if (kinds.empty() && !r.timeline.layers.empty()) {
          const stile::Timeline& t = r.timeline;
          add_ratio("layers", t.layers.back().compute_end_ms - t.embed_end_ms, r.estimated_ms);
          add_ratio("compute", t.compute_ms(), r.estimated_compute_ms / r.compute_scale);
          double read_ms = 0, read_estimate = 0;
          for (const stile::LayerTimes& l : t.layers) {
            if (l.reads == 0) continue;
            read_ms += l.read_end_ms - l.io_start_ms;
            read_estimate += static_cast<double>(l.reads) * line.latency_ms +
                             static_cast<double>(l.bytes_read) * line.ms_per_byte;
          }
          add_ratio("reads", read_ms, read_estimate);
          add_ratio("word rows", t.embed_end_ms - t.embed_start_ms, static_cast<double>(t.word_row_requests) * row_ms);
        }
        if (r.deadline_missed) {
          ++missed;
          if (kinds.count(stile::FaultKind::late) != 0) ++missed_late;
        }
      } catch (const stile::Error& err) {
        ++failed;
        const std::string cause = cause_of(err.what());
        if (causes[cause]++ == 0) examples.push_back(err.what());
        const auto kinds = new_faults();
        const bool explained = (cause == "eio" && kinds.count(stile::FaultKind::eio)) ||
                               (cause == "short" && kinds.count(stile::FaultKind::short_read)) ||
                               (cause == "corrupt" && kinds.count(stile::FaultKind::corrupt));
        if (!explained) ++unexplained;
      } catch (const std::exception& err) {
        ++lost;
        if (lost <= 3) fmt::print(stderr, "soak: request {} lost: {}\n", i, err.what());
      }
      if (i + 1 == 1000) rss_1000 = rss_bytes();
      if ((i + 1) % 1000 == 0) {
        fmt::print("  {:>6} requests: {} served, {} failed, {} deadline misses, RSS {:.1f} MB\n", i + 1, served, failed,
                   missed, static_cast<double>(rss_bytes()) / 1e6);
        std::fflush(stdout);
      }
    }
    const std::size_t rss_end = rss_bytes();
    const double background_mb = background ? background->megabytes() : 0.0;
    background.reset();
    std::sort(latencies.begin(), latencies.end());
    const auto latency_at = [&](double q) { return latencies.empty() ? 0.0 : sorted_quantile(latencies, q); };
    const std::size_t injected = faults ? faults->log().size() : 0;
    std::map<std::string, std::size_t> injected_by_kind;
    if (faults) {
      for (const stile::InjectedFault& f : faults->log()) ++injected_by_kind[std::string(stile::to_string(f.kind))];
    }
    fmt::print("\nrequests {} served, {} failed, {} lost\n", served, failed, lost);
    for (const auto& [cause, n] : causes) fmt::print("  failed: {} x {}\n", n, cause);
    for (const std::string& ex : examples) fmt::print("  e.g. {}\n", ex);
    fmt::print("faults   {} injected ({}); failures without a matching fault {}; faults that failed nothing {}\n",
               injected, [&] {
                 std::string s;
                 for (const auto& [k, n] : injected_by_kind) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, k);
                 return s;
               }(),
               unexplained, undetected);
    fmt::print("deadline {} of {} served requests missed their target ({} of them met a late read); mean latency "
               "{:.1f} ms\n",
               missed, served, missed_late, served ? latency_sum / static_cast<double>(served) : 0.0);
    fmt::print("         within target {:.1f}%; latency median {:.1f} ms, p95 {:.1f} ms, p99 {:.1f} ms\n",
               served ? 100.0 * static_cast<double>(served - missed) / static_cast<double>(served) : 0.0,
               latency_at(0.5), latency_at(0.95), latency_at(0.99));
    if (background_mbps > 0) fmt::print("background reader: {:.1f} MB read on the same flash\n", background_mb);
    nlohmann::json errors = nlohmann::json::object();
    for (auto& [part, v] : ratios) {
      std::sort(v.begin(), v.end());
      const auto at = [&](double q) { return sorted_quantile(v, q); };
      fmt::print("estimate {:<9} measured / estimated: median {:.3f}, p10 {:.3f}, p90 {:.3f} ({} requests)\n", part,
                 at(0.5), at(0.1), at(0.9), v.size());
      errors[part] = {{"median", at(0.5)}, {"p10", at(0.1)}, {"p90", at(0.9)}, {"requests", v.size()}};
    }
    fmt::print("memory   RSS at start {:.1f} MB, engine open {:.1f} MB, at the end {:.1f} MB", static_cast<double>(rss_start) / 1e6,
               static_cast<double>(rss_open) / 1e6, static_cast<double>(rss_end) / 1e6);
    if (rss_1000 != 0) {  // runs of 1000 requests or more: the growth after the allocator has warmed up
      fmt::print(", at request 1000 {:.1f} MB (growth from request 1000: {:+.2f} MB)", static_cast<double>(rss_1000) / 1e6,
                 (static_cast<double>(rss_end) - static_cast<double>(rss_1000)) / 1e6);
    }
    fmt::print("\n");
    if (!json_path.empty()) {
      nlohmann::json j = {{"requests", requests},     {"served", served},         {"failed", failed},
                          {"lost", lost},             {"causes", causes},         {"injected", injected_by_kind},
                          {"unexplained", unexplained}, {"undetected", undetected}, {"deadline_missed", missed},
                          {"deadline_missed_late", missed_late},
                          {"mean_latency_ms", served ? latency_sum / static_cast<double>(served) : 0.0},
                          {"median_latency_ms", latency_at(0.5)}, {"p95_latency_ms", latency_at(0.95)},
                          {"background_read_mbps", background_mbps}, {"background_read_mb", background_mb},
                          {"rss_start", rss_start},   {"rss_open", rss_open},     {"rss_1000", rss_1000},
                          {"rss_end", rss_end},       {"inject", inject},         {"storage", options.storage},
                          {"backend", engine.backend_description()}, {"reprofile", options.reprofile},
                          {"estimate_error", errors}};
      stile::write_file_atomically(json_path, j.dump(1) + "\n");
    }
    return lost == 0 && unexplained == 0 && undetected == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak: %s\n", e.what());
    return 1;
  }
}
