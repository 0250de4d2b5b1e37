// run: the elastic engine from the command line. Opens a shard store (tools/convert) with a
// device profile (tools/profile), runs each text as a request, cold (first request on an empty
// preload buffer) and then warm (the preload buffer filled by the cold run), and prints the
// embedding, the class (with the heads of tools/train_heads), the plan and a timeline summary.
//
//   run minilm.stile "a charming and moving film"
//   run --storage emmc --target-ms 40 --preload-kb 1024 --trace trace.json minilm.stile "text"
//
// Exit status: 0 ok, 1 runtime error (bad store, failed read), 2 usage error.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "stile/engine.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/plan/importance.hpp"

namespace {

constexpr const char* kUsage = R"(usage: run [options] STORE TEXT...

Runs every TEXT through the elastic engine on the shard store STORE, cold then warm, and prints
the sentence embedding's first values and norm, its SST-2 class (when there are heads), the plan (layers x shards, bitwidths) and where
the time went (embeddings, IO, stall, compute).

options:
  --profile FILE      the device profile (default: STORE.profile.json when it exists)
  --importance FILE   the shard importance (default: STORE.importance.json when it exists;
                      without one, shards are kept and upgraded in shard order)
  --heads FILE        SST-2 heads per submodel shape (default: STORE.heads.json when it exists):
                      each request is classified by its plan's head, and the planner, when it
                      must shrink the submodel, picks the shape whose head scores best
  --min-bits B        the planner's bitwidth floor (default: the lowest stored)
  --target-ms T       latency target for the planner (default: none: the highest bitwidth)
  --preload-kb K      the preload buffer's budget in KiB (default 0)
  --word-cache-kb K   the word-row cache's budget in KiB: rows kept between requests (default 0)
  --storage NAME      emulate a board's flash: emmc, sd, nvme, none (default none)
  --backend NAME      auto, io_uring, pread (default auto: io_uring with O_DIRECT)
  --threads N         compute threads (default: one per core)
  --bits B            run the whole model with every shard at B bits (instead of the planner)
  --layers N          with --bits: the first N layers (default all)
  --shards M          with --bits: the first M shards of each layer (default all)
  --load-then-execute read every layer before computing (the baseline), not pipelined
  --trace FILE        write the last request's timeline as Chrome trace JSON
  --verbose           print every layer of the timeline
  --help              print this help
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "run: %s\n\n%s", message.c_str(), kUsage);
  std::exit(2);
}

double parse_number(std::string_view text, const char* what) {
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(std::string(text), &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != text.size() || text.empty() || !(value >= 0)) {
    usage_error(fmt::format("{} must be a non-negative number, got '{}'", what, text));
  }
  return value;
}

std::size_t parse_count(std::string_view text, const char* what) {
  const double v = parse_number(text, what);
  if (v != static_cast<double>(static_cast<std::size_t>(v))) usage_error(fmt::format("{} must be a whole number", what));
  return static_cast<std::size_t>(v);
}

std::string plan_summary(const stile::SubmodelPlan& plan) {
  std::size_t widest = 0;
  std::map<unsigned, std::size_t> by_bits;
  for (const auto& layer : plan.layers) {
    widest = std::max(widest, layer.size());
    for (const stile::ShardChoice& c : layer) ++by_bits[c.bits];
  }
  std::string bits;
  for (const auto& [b, count] : by_bits) bits += fmt::format("{}{} at {} bits", bits.empty() ? "" : ", ", count, b);
  return fmt::format("{} layers x up to {} shards ({})", plan.layers.size(), widest, bits);
}

void print_result(const char* label, const stile::EngineResult& r, const stile::HeadsFile* heads, bool verbose) {
  const stile::Timeline& t = r.timeline;
  std::string head;
  for (std::size_t i = 0; i < 4 && i < r.embedding.size(); ++i) head += fmt::format("{:+.4f} ", r.embedding[i]);
  double norm = 0;
  for (const float x : r.embedding) norm += static_cast<double>(x) * x;
  fmt::print("  {:<5} {:7.2f} ms  embeddings {:5.2f} ({} rows read, {} cached)  IO {:6.2f}  stall {:6.2f}  compute {:6.2f} ms"
             "  read {:5.2f} MB ({} shards)  held {:.2f} MB  working {:.2f} MB\n",
             label, t.total_ms, t.embed_end_ms - t.embed_start_ms, t.word_rows_read, t.word_rows_cached, t.io_ms(),
             t.stall_ms(), t.compute_ms(), static_cast<double>(t.bytes_read() + t.embed_bytes_read) / 1e6,
             t.shards_read(), static_cast<double>(r.preload_held_bytes + r.word_cache_held_bytes) / 1e6,
             static_cast<double>(r.working_buffer_bytes) / 1e6);
  fmt::print("        embedding [{}...] norm {:.4f}", head, std::sqrt(norm));
  if (r.label) {
    fmt::print("  class {} (head {})", heads->at(r.head).head.labels.at(*r.label), r.head);
  } else if (heads) {
    fmt::print("  no head for this plan's shape");
  }
  fmt::print("\n");
  if (!verbose) return;
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    const stile::LayerTimes& x = t.layers[l];
    fmt::print("        layer {}: IO {:7.2f}-{:7.2f} ({} read, {} preloaded, {} reads)  compute {:7.2f}-{:7.2f}  stall {:6.2f}\n",
               l, x.io_start_ms, x.io_end_ms, x.shards_read, x.shards_preloaded, x.reads, x.compute_start_ms,
               x.compute_end_ms, x.stall_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  stile::EngineOptions options;
  std::optional<std::filesystem::path> profile_path, importance_path, heads_path;
  std::optional<unsigned> bits;
  std::optional<std::size_t> layers, shards;
  std::string trace;
  bool verbose = false;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) usage_error(fmt::format("{} needs a value", arg));
      return argv[++i];
    };
    if (arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--profile") {
      profile_path = std::filesystem::path(value());
    } else if (arg == "--importance") {
      importance_path = std::filesystem::path(value());
    } else if (arg == "--heads") {
      heads_path = std::filesystem::path(value());
    } else if (arg == "--min-bits") {
      options.min_bits = static_cast<unsigned>(parse_count(value(), "--min-bits"));
    } else if (arg == "--target-ms") {
      options.target_ms = parse_number(value(), "--target-ms");
    } else if (arg == "--preload-kb") {
      options.preload_bytes = parse_count(value(), "--preload-kb") * 1024;
    } else if (arg == "--word-cache-kb") {
      options.word_cache_bytes = parse_count(value(), "--word-cache-kb") * 1024;
    } else if (arg == "--storage") {
      options.storage = value();
    } else if (arg == "--backend") {
      try {
        options.backend.kind = stile::parse_read_backend_kind(value());
      } catch (const std::exception& e) {
        usage_error(e.what());
      }
    } else if (arg == "--threads") {
      options.threads = parse_count(value(), "--threads");
    } else if (arg == "--bits") {
      bits = static_cast<unsigned>(parse_count(value(), "--bits"));
    } else if (arg == "--layers") {
      layers = parse_count(value(), "--layers");
    } else if (arg == "--shards") {
      shards = parse_count(value(), "--shards");
    } else if (arg == "--load-then-execute") {
      options.mode = stile::PipelineMode::load_then_execute;
    } else if (arg == "--trace") {
      trace = value();
    } else if (arg == "--verbose") {
      verbose = true;
    } else if (arg.starts_with("--")) {
      usage_error(fmt::format("unknown option {}", arg));
    } else {
      positional.emplace_back(arg);
    }
  }
  if (positional.size() < 2) usage_error("a store and at least one text are needed");
  if ((layers || shards) && !bits) usage_error("--layers and --shards go with --bits");

  try {
    const std::filesystem::path store = positional[0];
    if (!profile_path && std::filesystem::exists(store.string() + ".profile.json")) {
      profile_path = store.string() + ".profile.json";
    }
    if (!importance_path && std::filesystem::exists(stile::importance_path_for(store))) {
      importance_path = stile::importance_path_for(store);
    }
    if (importance_path) {
      stile::ShardImportance importance = stile::load_importance(*importance_path);
      options.ranking = std::move(importance.ranking);
      options.importance = std::move(importance.order);
    }
    if (!heads_path && std::filesystem::exists(stile::heads_path_for(store))) heads_path = stile::heads_path_for(store);
    std::optional<stile::HeadsFile> heads;
    if (heads_path) heads = stile::HeadsFile::load(*heads_path);
    std::optional<stile::DeviceProfile> profile;
    if (profile_path) profile = stile::DeviceProfile::load(*profile_path);
    auto open_engine = [&] {
      auto e = std::make_unique<stile::Engine>(store, options, profile);
      if (heads) e->set_heads(*heads);
      return e;
    };
    auto engine_ptr = open_engine();
    stile::Engine& engine = *engine_ptr;
    fmt::print("store    {} ({:.1f} MB, {} layers x {} shards, bits {})\n", store.string(),
               static_cast<double>(engine.store().file_size()) / 1e6, engine.store().num_layers(),
               engine.store().shards_per_layer(), fmt::join(engine.store().bits(), ","));
    fmt::print("storage  {}{}\n", engine.backend_description(),
               engine.backend_description().find("emulat") != std::string::npos ? " (delays emulated; real bytes read)" : "");
    if (!engine.backend_note().empty()) fmt::print("note     {}\n", engine.backend_note());
    fmt::print("profile  {}\n", profile_path ? profile_path->string() : std::string("none (no latency target possible)"));
    fmt::print("shards   {}\n", importance_path ? "by importance, " + importance_path->string() : std::string("in shard order"));
    fmt::print("heads    {}\n", heads_path ? fmt::format("{} ({} shapes)", heads_path->string(), heads->heads.size())
                                            : std::string("none (no class)"));
    fmt::print("target   {}   preload budget {:.2f} MB   word-row cache {:.2f} MB   mode {}\n",
               options.target_ms > 0 ? fmt::format("{:.1f} ms", options.target_ms) : std::string("none"),
               static_cast<double>(options.preload_bytes) / 1e6, static_cast<double>(options.word_cache_bytes) / 1e6,
               stile::to_string(options.mode));

    std::optional<stile::SubmodelPlan> fixed;
    if (bits) {
      fixed = stile::SubmodelPlan::uniform(layers.value_or(engine.store().num_layers()),
                                           shards.value_or(engine.store().shards_per_layer()), *bits);
    }
    // Cold: a fresh engine (empty preload buffer; O_DIRECT reads skip the page cache). Warm: the
    // same engine's next request, its preload buffer filled by the cold one.
    stile::EngineResult last;
    for (std::size_t i = 1; i < positional.size(); ++i) {
      if (i > 1) engine_ptr = open_engine();
      stile::Engine& fresh = *engine_ptr;
      const stile::Encoding tokens = fresh.tokenizer().encode(positional[i]);
      fmt::print("\n\"{}\" ({} tokens)\n", positional[i], tokens.size());
      std::string previous_note;
      for (const char* label : {"cold", "warm"}) {
        last = fixed ? fresh.run(tokens, *fixed) : fresh.run(tokens);
        // The warm request may get another plan: its word rows may be cached (fewer reads first).
        if (label == std::string_view("cold") || last.plan_note != previous_note) {
          fmt::print("  plan  {}{}\n", plan_summary(last.plan), label == std::string_view("cold") ? "" : " (warm)");
          if (!last.plan_note.empty()) fmt::print("        {}\n", last.plan_note);
        }
        previous_note = last.plan_note;
        print_result(label, last, heads ? &*heads : nullptr, verbose);
      }
    }
    if (!trace.empty()) {
      std::ofstream out(trace);
      out << stile::to_chrome_trace(last.timeline).dump(1) << "\n";
      if (!out) throw stile::Error("run: cannot write the trace to " + trace);
      fmt::print("\ntrace of the last request written to {} (open in chrome://tracing or Perfetto)\n", trace);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "run: %s\n", e.what());
    return 1;
  }
  return 0;
}
