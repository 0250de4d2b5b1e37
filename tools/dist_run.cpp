// stile-dist-run: one sentence through a BERT model whose layers are split over MPI ranks (dist/),
// printing the partition (shares, mode, dropped devices), each rank's compute and communication
// time, and writing a Chrome trace per rank.
//
//   mpirun -np 2 stile-dist-run --mode auto MODEL_DIR "A man is eating food."
//   mpirun -np 2 stile-dist-run --mode 1d --trace-dir /tmp/tr MODEL_DIR "text"
//   mpirun -np 2 stile-dist-run --requests 6 --slow-rank 1 --slowdown 2 --slow-from 3 MODEL_DIR "text"
//     (emulated: rank 1's compute phases take twice as long from request 3; auto re-partitions)
//
// MODEL_DIR: a sentence-transformers BERT directory (config.json, model.safetensors, vocab.txt),
// read by every rank (each takes its part of every layer, fp32: dist/dist_model.hpp); or STORE, a
// shard store (.stile) that every rank opens with its own engine, the layers' shards split between
// the ranks (dist/dist_layer_compute.hpp: WS or 1D; no re-partitioning between requests there).
// --mode auto: the LP partitioner (plan/lp_partition.hpp, COIN-OR CLP) on measured profiles picks
// the mode (WS, then 1D, then 2D as memory requires) and the shares; ws / 1d: that mode with LP
// shares (even shares with --even or without CLP); 2d: even grid.
// Exit status: 0 ok, 1 runtime error (on every rank, with the rank's message), 2 usage error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "stile/dist/broadcast_partition.hpp"
#include "stile/dist/device_probe.hpp"
#include "stile/dist/dist_layer_compute.hpp"
#include "stile/dist/dist_model.hpp"
#include "stile/dist/mpi_communicator.hpp"
#include "stile/engine.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/plan/lp_partition.hpp"

using namespace stile;
namespace fs = std::filesystem;

namespace {

struct Options {
  std::string mode = "auto";
  bool even = false;
  fs::path trace_dir;
  std::size_t requests = 1;
  std::size_t slow_rank = SIZE_MAX;
  double slowdown = 1;
  std::size_t slow_from = 1;
  double mem_mb = 0;  // emulated free memory per rank (0: MemAvailable)
  std::size_t threads = 1;
  bool check = false;
};

// The partition for this request: solved on rank 0 and broadcast.
Partition plan(Communicator& world, const Options& o, const std::vector<DistDevice>& devices, const DistLayerShape& L,
               std::vector<std::string>& notes) {
  Partition p;
  std::string error;
  if (world.rank() == 0) {
    try {
      const bool automatic = o.mode == "auto";
      const DistMode mode = automatic ? DistMode::kWs : parse_mode(o.mode);
      if (mode == DistMode::k2d || o.even || (!automatic && !lp_partition_available())) {
        p = even_partition(mode, devices.size(), L.heads, L.ffn, L.hidden);
        if (!o.even && mode != DistMode::k2d) notes.push_back("built without COIN-OR CLP: even shares");
      } else {
        const LayerPartitionPlan lp = solve_layer_partition(devices, L, mode, automatic);
        p = lp.partition;
        notes = lp.notes;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Rank 0's failure (a layer that fits nowhere) reaches every rank as the same error.
  std::uint64_t failed = error.empty() ? 0 : error.size();
  world.broadcast(&failed, sizeof failed, 0);
  if (failed) {
    error.resize(failed);
    world.broadcast(error.data(), failed, 0);
    throw Error(error);
  }
  broadcast_partition(world, p);
  return p;
}

// The partition of the active ranks only (a dropped rank has nothing).
Partition compact(const Partition& p, std::vector<int>& active) {
  Partition c = p;
  active.clear();
  if (p.mode == DistMode::k2d) {
    for (std::size_t r = 0; r < p.ranks(); ++r) active.push_back(static_cast<int>(r));
    return c;
  }
  c.heads.clear(), c.neurons.clear();
  for (std::size_t r = 0; r < p.heads.size(); ++r) {
    if (p.heads[r] == 0 && p.neurons[r] == 0) continue;
    active.push_back(static_cast<int>(r));
    c.heads.push_back(p.heads[r]);
    c.neurons.push_back(p.neurons[r]);
  }
  return c;
}

// STORE is a shard store: every rank opens its own engine on it (the whole model at the highest
// stored bitwidth, as the engine runs without a device profile) with a DistLayerCompute set, so each
// layer's shards are split between the ranks (WS or 1D; 2D splits below a shard and is refused).
int run_store(Communicator& world, const Options& o, const fs::path& store_path, const std::string& text) {
  const int me = world.rank();
  const auto n = static_cast<std::size_t>(world.size());
  Engine engine(store_path);
  const ShardStore store = ShardStore::open(store_path);
  const ShardStoreManifest& m = store.manifest();
  const Encoding e = engine.tokenizer().encode(text);
  const DistLayerShape shape{.hidden = m.config.hidden, .heads = m.shards_per_layer, .ffn = m.shards_per_layer,
                             .tokens = e.input_ids.size()};
  ThreadPool pool(o.threads);
  // Shares in whole shards: the LP over shards as its unit (a shard's heads and neurons together).
  std::vector<DistDevice> devices = probe_devices(
      world, {.hidden = m.config.hidden, .heads = m.config.num_heads, .ffn = m.config.intermediate, .tokens = shape.tokens},
      pool, {.slowdown = static_cast<std::size_t>(me) == o.slow_rank ? o.slowdown : 1, .free_bytes = o.mem_mb * 1e6});
  for (DistDevice& dev : devices) dev.free_bytes /= static_cast<double>(m.config.num_layers);
  std::vector<std::string> notes;
  Partition p = plan(world, o, devices,
                     {.hidden = m.config.hidden, .heads = m.config.num_heads, .ffn = m.config.intermediate,
                      .tokens = shape.tokens},
                     notes);
  if (p.mode == DistMode::k2d) throw Error("stile: stile-dist-run: 2D splits a layer below a shard: not for a store (use ws or 1d)");
  std::vector<double> weights(p.heads.begin(), p.heads.end());
  DistTrace trace;
  if (static_cast<std::size_t>(me) == o.slow_rank) trace.set_slowdown(o.slowdown);
  auto compute = std::make_unique<DistLayerCompute>(world, p.mode, weights, pool);
  compute->set_trace(&trace);
  engine.set_layer_compute(std::move(compute));
  if (me == 0) {
    std::printf("stile-dist-run: %zu ranks over %s; store %s (%zu layers, %zu shards a layer, bits %u); %zu tokens\n", n,
                world.transport().c_str(), store_path.c_str(), m.config.num_layers, m.shards_per_layer, m.bits.back(),
                shape.tokens);
    std::printf("%s: shards split in proportion to %s", mode_name(p.mode).data(), partition_text(p).c_str());
    for (const std::string& note : notes) std::printf("\n  note: %s", note.c_str());
    std::printf("\n");
  }
  EngineResult result;
  for (std::size_t req = 1; req <= o.requests; ++req) {
    world.barrier();
    trace.clear();
    result = engine.run(e);
    float figures[3] = {static_cast<float>(result.timeline.compute_ms()), static_cast<float>(trace.total_ms(false)),
                        static_cast<float>(trace.total_ms(true))};
    std::vector<float> all(3 * n);
    world.all_gather(figures, std::vector<std::size_t>(n, 3), all.data());
    if (me == 0) {
      std::printf("request %zu:\n", req);
      for (std::size_t r = 0; r < n; ++r) {
        std::printf("  rank %zu: layers %.2f ms: compute %.2f ms, communication %.2f ms%s\n", r, all[3 * r],
                    all[3 * r + 1], all[3 * r + 2], r == o.slow_rank && o.slowdown > 1 ? " [emulated slowdown]" : "");
      }
    }
    if (!o.trace_dir.empty()) {
      fs::create_directories(o.trace_dir);
      trace.write((o.trace_dir / ("rank" + std::to_string(me) + ".json")).string(), me);
    }
  }
  bool mismatch = false;
  if (me == 0) {
    std::printf("embedding: [%.5f, %.5f, %.5f, %.5f, ...]\n", static_cast<double>(result.embedding[0]),
                static_cast<double>(result.embedding[1]), static_cast<double>(result.embedding[2]),
                static_cast<double>(result.embedding[3]));
    if (o.check) {
      const EngineResult want = Engine(store_path).run(e);
      float diff = 0;
      for (std::size_t i = 0; i < want.embedding.size(); ++i) {
        diff = std::max(diff, std::fabs(want.embedding[i] - result.embedding[i]));
      }
      std::printf("max abs diff against the single-device engine: %.3g (%s)\n", static_cast<double>(diff),
                  diff <= 1e-5f ? "ok" : "MISMATCH");
      mismatch = diff > 1e-5f;
    }
  }
  return mismatch ? 1 : 0;
}

int run(Communicator& world, const Options& o, const fs::path& model_dir, const std::string& text) {
  const int me = world.rank();
  const auto n = static_cast<std::size_t>(world.size());
  const SentenceEncoder encoder = SentenceEncoder::load(model_dir);
  const BertWeights& weights = encoder.model().weights();
  const EncoderConfig& c = weights.config;
  const Encoding e = encoder.tokenizer().encode(text);
  const std::vector<std::size_t> offsets{0, e.input_ids.size()};
  const DistLayerShape shape{.hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate, .tokens = offsets.back()};
  ThreadPool pool(o.threads);
  DistTrace trace;
  const bool slow_here = static_cast<std::size_t>(me) == o.slow_rank && o.slowdown > 1;

  // Profiles: measured on every rank (the emulated slowdown of the slow rank counts from its
  // --slow-from request on, so the first plan does not know it).
  const ProbeOptions probe{.slowdown = slow_here && o.slow_from <= 1 ? o.slowdown : 1, .free_bytes = o.mem_mb * 1e6};
  std::vector<DistDevice> devices = probe_devices(world, shape, pool, probe);
  // The partitioner plans one layer: each device's memory for weights, shared by all layers.
  for (DistDevice& dev : devices) dev.free_bytes /= static_cast<double>(c.num_layers);
  if (me == 0) {
    std::printf("stile-dist-run: %zu ranks over %s; model %s (%zu layers, hidden %zu, %zu heads, FFN %zu); %zu tokens\n",
                n, world.transport().c_str(), model_dir.c_str(), c.num_layers, c.hidden, c.num_heads, c.intermediate,
                shape.tokens);
    for (std::size_t r = 0; r < n; ++r) {
      std::printf("  device %zu: %.2f GFLOP/s, %.1f MB free a layer%s; link %.1f us, %.2f GB/s\n", r,
                  1e-9 / devices[r].seconds_per_flop, devices[r].free_bytes / 1e6,
                  r == o.slow_rank && o.slowdown > 1 ? " (emulated slowdown)" : "", devices[r].latency_seconds * 1e6,
                  devices[r].bytes_per_second / 1e9);
    }
  }
  std::vector<std::string> notes;
  Partition p = plan(world, o, devices, shape, notes);
  std::vector<float> out;
  std::vector<int> active;
  Partition local;
  bool in = false, stale = true;
  std::unique_ptr<Communicator> group;
  std::unique_ptr<DistModel> model;
  for (std::size_t req = 1; req <= o.requests; ++req) {
    if (slow_here && req == o.slow_from) trace.set_slowdown(o.slowdown);
    if (stale) {  // (re)built only when the partition changed: each rank takes its part of every layer
      model.reset();
      local = compact(p, active);
      in = std::find(active.begin(), active.end(), me) != active.end();
      group = world.split(in ? 0 : 1);
      if (in) {
        model = std::make_unique<DistModel>(weights, local, *group);
        model->set_trace(&trace);
      }
      stale = false;
    }
    world.barrier();
    if (me == 0) {
      std::printf("request %zu: %s", req, partition_text(p).c_str());
      for (const std::string& note : notes) std::printf("\n  note: %s", note.c_str());
      std::printf("\n");
    }
    float figures[4] = {0, 0, 0, 0};  // wall, compute, comm ms; seconds per FLOP (x1e12)
    if (in) {
      trace.clear();
      model->embed(e, out);
      const auto t0 = std::chrono::steady_clock::now();
      model->run_layers(out.data(), offsets, pool);
      figures[0] = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
      figures[1] = static_cast<float>(trace.total_ms(false));
      figures[2] = static_cast<float>(trace.total_ms(true));
      const std::size_t k = static_cast<std::size_t>(std::find(active.begin(), active.end(), me) - active.begin());
      const double flops = local.mode == DistMode::k2d
                               ? 0
                               : share_flops(shape, local.mode, local.heads[k], local.neurons[k]) *
                                     static_cast<double>(c.num_layers);
      figures[3] = flops > 0 ? static_cast<float>(figures[1] * 1e-3 / flops * 1e12) : 0;
      if (!o.trace_dir.empty()) {
        fs::create_directories(o.trace_dir);
        trace.write((o.trace_dir / ("rank" + std::to_string(me) + ".json")).string(), me);
      }
    }
    std::vector<float> all(4 * n);
    world.all_gather(figures, std::vector<std::size_t>(n, 4), all.data());
    if (me == 0) {
      for (std::size_t r = 0; r < n; ++r) {
        if (all[4 * r] == 0) {
          std::printf("  rank %zu: dropped (no share)\n", r);
          continue;
        }
        std::printf("  rank %zu: layers %.2f ms: compute %.2f ms, communication %.2f ms (%s)%s\n", r, all[4 * r],
                    all[4 * r + 1], all[4 * r + 2], mode_name(p.mode).data(),
                    r == o.slow_rank && o.slowdown > 1 && req >= o.slow_from ? " [emulated slowdown]" : "");
      }
    }
    // Re-partition: the measured speeds replace the profile's where they differ by > 25%; the next
    // request then uses new shares (every rank takes rank 0's).
    if (o.mode != "2d" && p.mode != DistMode::k2d && req < o.requests) {
      std::vector<double> measured(n);
      for (std::size_t r = 0; r < n; ++r) measured[r] = static_cast<double>(all[4 * r + 3]) * 1e-12;
      if (update_speeds(devices, measured)) {
        notes.clear();
        const Partition before = p;
        p = plan(world, o, devices, shape, notes);
        stale = p.mode != before.mode || p.heads != before.heads || p.neurons != before.neurons;
        if (me == 0) {
          std::printf("  measured speeds differ from the profile: %s\n", stale ? "re-partitioned" : "same shares");
        }
      }
    }
  }
  // The sentence embedding (mean pooling, normalized) as rank 0 holds it, and the check against
  // the single-device model.
  bool mismatch = false;
  if (me == 0) {
    std::vector<float> pooled(c.hidden, 0.0f);
    for (std::size_t t = 0; t < shape.tokens; ++t) {
      for (std::size_t i = 0; i < c.hidden; ++i) pooled[i] += out[t * c.hidden + i] / static_cast<float>(shape.tokens);
    }
    std::printf("hidden state of %zu tokens; mean-pooled: [%.5f, %.5f, %.5f, %.5f, ...]\n", shape.tokens,
                static_cast<double>(pooled[0]), static_cast<double>(pooled[1]), static_cast<double>(pooled[2]),
                static_cast<double>(pooled[3]));
    if (o.check) {
      std::vector<float> want;
      encoder.model().encode(std::span(&e, 1), want, &pool);
      float diff = 0;
      for (std::size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::fabs(want[i] - out[i]));
      std::printf("max abs diff against the single-device model: %.3g (%s)\n", static_cast<double>(diff),
                  diff <= 1e-5f ? "ok" : "MISMATCH");
      mismatch = diff > 1e-5f;
    }
    if (!o.trace_dir.empty()) std::printf("traces: %s/rank<r>.json\n", o.trace_dir.c_str());
  }
  return mismatch ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  stile_cli::Parser cli("stile-dist-run", "[options] MODEL_DIR|STORE TEXT  (under mpirun)",
                        "Runs TEXT through the model with its layers split over the MPI ranks.");
  cli.flag("--mode", "MODE", "auto (LP: mode and shares), ws, 1d or 2d", o.mode).one_of({"auto", "ws", "1d", "2d"});
  cli.toggle("--even", "even shares instead of the LP's", o.even);
  cli.flag("--trace-dir", "DIR", "write a Chrome trace per rank (DIR/rank<r>.json)", o.trace_dir);
  cli.flag("--requests", "N", "run the text N times (re-partitioning between them)", o.requests).at_least(1);
  cli.flag("--slow-rank", "R", "emulate a slower device on rank R", o.slow_rank).shown_default("no rank is slowed");
  cli.flag("--slowdown", "F", "its compute takes F times as long (emulated, by spinning)", o.slowdown).at_least(1);
  cli.flag("--slow-from", "K", "from request K on", o.slow_from).at_least(1);
  cli.flag("--mem-mb", "MB", "emulate MB of free memory for weights (all layers) on every rank", o.mem_mb).at_least(0);
  cli.flag("--threads", "N", "threads per rank", o.threads).at_least(1);
  cli.toggle("--check", "compare with the single-device model on rank 0 (exit 1 if it differs by > 1e-5)", o.check);
  cli.example("mpirun -np 2 stile-dist-run ~/.cache/stile/all-MiniLM-L6-v2 \"a charming film\"");
  cli.example(
      "mpirun -np 2 stile-dist-run --requests 6 --slow-rank 1 --slowdown 2 --slow-from 3 "
      "~/.cache/stile/all-MiniLM-L6-v2 \"a charming film\"",
      "rank 1 slows down, shares are re-planned");
  const std::vector<std::string> args = cli.parse(argc, argv);
  if (args.size() != 2) cli.fail("give MODEL_DIR (or STORE) and TEXT");
  if (!mpi_available()) {
    std::fprintf(stderr, "stile-dist-run: built without MPI\n");
    return 1;
  }
  MpiSession mpi(&argc, &argv);
  Communicator& world = mpi.world();
  try {
    if (fs::is_regular_file(args[0])) return run_store(world, o, args[0], args[1]);
    return run(world, o, args[0], args[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stile-dist-run: rank %d: error: %s\n", world.rank(), e.what());
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the others failing alike report too
    world.abort(e.what());
  }
  return 1;
}
