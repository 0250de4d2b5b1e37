// profile: measures this device's costs for the planners (plan/device_profile.hpp): the time to
// read one shard version at each bitwidth through the chosen read backend (optionally slowed to a
// board's flash by the storage emulator), and the time to compute one layer from m shards at each
// bitwidth and token-length bucket. Writes them as JSON.
//
//   profile minilm.stile
//   profile minilm.stile --storage emmc --threads 4 --out odroid.profile.json
//   profile minilm.stile --mapping mapping.json --out minilm.mapping.profile.json
//       (T_comp as run --mapping computes: each layer's operators on the mapping's processors and
//        in its formats; run --mapping --target-ms plans right with this profile only)
//   profile minilm.stile --shard-gemm int8 --out minilm.int8.profile.json
//       (T_comp as run --shard-gemm int8 computes: each layer's shards decoded to int8 per request,
//        the decode included; run --shard-gemm int8 --target-ms plans right with this profile)
//
// Exit status: 0 ok, 1 runtime error (bad store, unreadable file, unwritable output), 2 usage error.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cli.hpp"
#include "sidecar.hpp"
#include "stile/calibrate/device_profiler.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/hetero/mapped_layer_compute.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/io/storage_emulator.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/mapping_file.hpp"
#include "stile/plan/pipeline_estimate.hpp"

int main(int argc, char** argv) {
  stile::ProfileOptions options;
  std::optional<std::filesystem::path> out;
  stile::ReadBackendOptions backend_options;
  std::size_t threads = 0;
  std::filesystem::path mapping_path;
  stile_cli::Parser cli("profile", "[options] STORE",
                        "Measures how long this device takes to read one shard version of the shard store STORE at "
                        "each bitwidth, and to compute one layer from m shards at each bitwidth and sequence length, "
                        "and writes the device profile the planners read. Run it on an otherwise idle machine.");
  cli.flag("--out", "PATH", "where to write the profile (default: STORE.profile.json)", out);
  cli.storage(options.storage_name);
  cli.backend(backend_options);
  cli.threads(threads, "compute threads (default: one per core, or $STILE_NUM_THREADS)");
  cli.simd_target();
  cli.flag("--repeats", "R", "timed runs per measurement, after one warm-up", options.repeats).at_least(1);
  cli.flag("--lengths", "LIST", "token-length buckets (clamped to the model's max_position_embeddings)",
           options.lengths)
      .at_least(1);
  cli.flag("--mapping", "FILE",
           "time each layer as run --mapping runs this operator-to-processor mapping file (its processors, "
           "cores and formats; one request of every layer, divided by the layers) instead of the CPU engine's layer",
           mapping_path);
  bool int8_shards = false;
  cli.flag("--shard-gemm", "F",
           "fp32 (default): time the CPU engine's layer as it runs by default; int8: as run --shard-gemm int8 runs it "
           "(each layer's shards decoded to int8 per request, the decode included; one request of every layer, "
           "divided by the layers)",
           [&](std::string_view v) {
             if (v != "fp32" && v != "int8") cli.fail("--shard-gemm: '" + std::string(v) + "' is not fp32 or int8");
             int8_shards = v == "int8";
           });
  cli.example("profile minilm.stile --storage emmc", "writes minilm.stile.profile.json");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  if (!mapping_path.empty() && threads != 0) {
    cli.fail("--mapping names each processor's cores: it goes without --threads");
  }
  if (!mapping_path.empty() && int8_shards) cli.fail("--mapping sets each node's format: it goes without --shard-gemm");
  const std::filesystem::path store_path = positional[0];
  if (!out) out = stile_cli::sidecar_path(store_path, stile_cli::Sidecar::profile);

  try {
    const stile::StorageProfile storage = stile::storage_profile(options.storage_name);
    const stile::ShardStore store = stile::ShardStore::open(store_path);
    std::string note;
    std::unique_ptr<stile::ReadBackend> backend =
        stile::emulate_storage(stile::open_read_backend(store_path, backend_options, &note), storage);
    if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
    std::unique_ptr<stile::ThreadPool> own_pool;
    if (threads != 0) {
      own_pool = std::make_unique<stile::ThreadPool>(threads);
      options.pool = own_pool.get();
    }

    // A mapping: its processors (kept alive through the measurement) behind a mapped layer.
    stile::ProcessorSet processors;
    std::unique_ptr<stile::MappedLayerCompute> mapped;
    if (!mapping_path.empty()) {
      const stile::OpMappingFile mapping = stile::OpMappingFile::load(mapping_path);
      const stile::EncoderConfig& config = store.config();
      stile::check_mapping_shape(mapping, config, mapping_path.string());
      processors = stile::open_mapping_processors(mapping.processors, stile::op_graph_of(config), mapping.mapping,
                                                  mapping_path.string());
      mapped = std::make_unique<stile::MappedLayerCompute>(config, mapping.mapping, processors.pointers());
      options.compute = mapped.get();
      options.compute_name = mapping.layer_compute_name();
    }
    // int8 shards: the engine's CPU layer (untiled, as the profiler's own) decoding to int8.
    stile::EncoderWorkspace workspace;
    stile::Arena arena;
    std::unique_ptr<stile::CpuLayerCompute> int8_layer;
    if (int8_shards) {
      int8_layer = std::make_unique<stile::CpuLayerCompute>(
          options.pool != nullptr ? *options.pool : stile::default_thread_pool(), stile::LayerTiles{}, workspace, arena,
          stile::OpFormats{}, stile::LinearFormat::kInt8);
      options.compute = int8_layer.get();
      options.compute_name = std::string(stile::kCpuInt8LayerCompute);
    }

    stile::ProgressBar bar("profiling");
    const stile::DeviceProfile p = stile::measure_device_profile(store, *backend, options, &bar);
    p.save(*out);

    const nlohmann::json& m = p.machine;
    fmt::print("{}: {} layers x {} shards, {} threads, {}, {}\n", store_path.string(), p.num_layers, p.shards_per_layer,
               m.value("threads", 0), m.value("simd_target", std::string("?")), m.value("cpu", std::string("?")));
    fmt::print("reads: {}\n", backend->describe());
    fmt::print("layers: {}\n",
               mapped ? mapping_path.string() + ": " + p.layer_compute() +
                            " (T_comp: one request of every layer on layer 0's shards, divided by the layers)"
               : int8_layer ? std::string("the CPU engine's layer, shards decoded to int8 per request (T_comp: one "
                                          "request of every layer on layer 0's shards, divided by the layers)")
                            : std::string("the CPU engine's layer"));

    fmt::print("\nT_io: one shard version\n{:>5} {:>12} {:>10} {:>10}\n", "bits", "bytes", "ms", "MB/s");
    for (std::size_t b = 0; b < p.bits.size(); ++b) {
      const double mbps = p.io_ms[b] > 0 ? p.shard_bytes[b] / (p.io_ms[b] * 1e-3) / 1e6 : 0.0;
      fmt::print("{:>5} {:>12.0f} {:>10.3f} {:>10.1f}\n", p.bits[b], p.shard_bytes[b], p.io_ms[b], mbps);
    }
    fmt::print("\nT_io,layer: a layer's {} versions as the engine reads them\n{:>5} {:>12} {:>9} {:>10} {:>10}\n",
               p.shards_per_layer, "bits", "bytes", "requests", "ms", "MB/s");
    for (std::size_t b = 0; b < p.layer_io_ms.size(); ++b) {
      const double mbps = p.layer_io_ms[b] > 0 ? p.layer_bytes[b] / (p.layer_io_ms[b] * 1e-3) / 1e6 : 0.0;
      fmt::print("{:>5} {:>12.0f} {:>9.0f} {:>10.3f} {:>10.1f}\n", p.bits[b], p.layer_bytes[b], p.layer_requests[b],
                 p.layer_io_ms[b], mbps);
    }
    const stile::ReadCostLine line = stile::read_cost_line(p);
    fmt::print("read cost line (the planner's): {:.3f} ms per request + {:.1f} MB/s\n", line.latency_ms,
               line.ms_per_byte > 0 ? 1e-3 / line.ms_per_byte : 0.0);

    // m = 1, M/2 and M: the ends and the middle of the planner's range.
    const std::size_t M = p.shards_per_layer;
    std::vector<std::size_t> ms = {1, std::max<std::size_t>(1, M / 2), M};
    ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
    const auto print_table = [&](const char* title, const auto& table) {
      fmt::print("\n{}: one layer, ms (median of {})\n{:>5} {:>4}", title, options.repeats, "bits", "m");
      for (const std::size_t l : p.lengths) fmt::print(" {:>9}", fmt::format("l={}", l));
      fmt::print("\n");
      for (std::size_t b = 0; b < p.bits.size(); ++b) {
        for (const std::size_t m_shards : ms) {
          fmt::print("{:>5} {:>4}", p.bits[b], m_shards);
          for (std::size_t i = 0; i < p.lengths.size(); ++i) fmt::print(" {:>9.3f}", table[b][i][m_shards - 1]);
          fmt::print("\n");
        }
      }
    };
    print_table("T_comp, layer after layer", p.compute_ms);
    print_table("T_comp', right after the layer's read", p.compute_after_read_ms);
    fmt::print("\nwrote {}\n", out->string());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "profile: %s\n", e.what());
    return 1;
  }
  return 0;
}
