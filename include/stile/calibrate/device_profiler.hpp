#pragma once
// Measuring the device profile (plan/device_profile.hpp: the file format and what the planners
// read): what this machine's storage and CPU cost, once per device (at install time), through
// the engine's own read backend and storage emulator.
//
//   T_io(k)        ms to read one shard version at k bits through the engine's read backend (and
//                  the storage emulator, when one wraps it): the median over every shard version
//                  of every layer, one read call per version.
//   T_io,layer(k)  ms to read all of a layer's versions at k bits as the engine reads a layer
//                  (pipeline/layer_reader.hpp: one request per contiguous run, into one buffer),
//                  to the end of the read (the checksums after it are not timed): the median over
//                  the layers, with the mean bytes and requests. The engine's reads are this size;
//                  single shards alone would give the line of read costs (plan/pipeline_estimate.hpp)
//                  a bandwidth that small requests, dominated by their latency, barely constrain.
//   T_comp(l,m,k)  ms to compute one encoder layer from m shards at k bits on one sequence of l
//                  tokens (decode included: the GEMMs decode the shards' bytes as they go); the
//                  median of R runs after one warm-up, on layer 0's shards 0..m-1, back to back.
//                  With ProfileOptions::compute (a layer compute other than the CPU engine's, such
//                  as an operator mapping's: hetero/mapped_layer_compute.hpp), a run is one request
//                  of every layer index on those shards, as the engine issues it (run() per layer,
//                  then finish()), divided by the layer count: a compute that overlaps layers or
//                  gives each layer its own formats is costed as the engine will run it.
//   T_comp'(l,m,k) the same, each run right after reading those shards through the backend into
//                  one buffer, as the pipeline computes a layer that waited for its read: the
//                  kernel threads idle through the read (on a VM or a board, an idle core's
//                  wake-up and clock ramp are paid on the next layer's first GEMMs) and the weights
//                  fresh in memory, not in cache. The pipeline runs at this speed whenever compute
//                  waits for IO (how much slower than T_comp: docs/design-notes.md).
//
// Medians rather than means: a shared machine's hiccups (another build, a page fault) land in a
// few runs and should not move the number the planner trusts.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/pipeline/layer_reader.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/store/shard_view.hpp"

namespace stile {

struct ProfileOptions {
  std::vector<std::size_t> lengths{16, 32, 64, 128, 256};  // clamped to max_position_embeddings
  std::size_t repeats = 5;                                 // timed runs per (bits, length, m), after one warm-up run
  ThreadPool* pool = nullptr;                              // null: the default pool
  std::string storage_name = "none";                       // the storage profile the backend emulates, for the record
  // The layer compute to time (null: the CPU engine's layer on `pool`), and what to record it as
  // in the profile's machine["layer_compute"] (DeviceProfile::layer_compute: the engine's
  // "cpu" when null). It must take every layer index of the store.
  LayerCompute* compute = nullptr;
  std::string compute_name;
};

namespace device_profiler_detail {

// "stile: <store>: device profile: <problem>".
template <class... Parts>
[[noreturn]] void fail(std::string_view file, const Parts&... parts) {
  fail_in_file(file, "device profile: ", parts...);
}

inline double median(std::vector<double> v) {
  require(!v.empty(), "device profile: the median of no samples");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// "model name" from /proc/cpuinfo (x86; most Arm kernels have none, then "unknown").
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("model name")) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string("unknown") : line.substr(start);
  }
  return "unknown";
}

inline std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

inline std::string compiler() {
#if defined(__clang__)
  return __VERSION__;  // "Debian Clang 14.0.6" names itself
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown";
#endif
}

// Hidden states that look like a layer's input (LayerNorm'd rows: mean 0, variance 1), from a
// fixed seed so every run and every machine computes on the same numbers.
inline std::vector<float> random_hidden(std::size_t tokens, std::size_t d, std::uint64_t seed) {
  std::uint64_t state = seed;
  auto unit = [&] {  // splitmix64 -> [0, 1)
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1p-53;
  };
  std::vector<float> x(tokens * d);
  for (std::size_t t = 0; t < tokens; ++t) {
    float* row = x.data() + t * d;
    double sum = 0, sq = 0;
    for (std::size_t i = 0; i < d; ++i) {
      // Sum of 4 uniforms: bell-shaped, no tails to speak of.
      const double v = unit() + unit() + unit() + unit() - 2.0;
      row[i] = static_cast<float>(v);
      sum += v;
    }
    const double mean = sum / static_cast<double>(d);
    for (std::size_t i = 0; i < d; ++i) sq += (row[i] - mean) * (row[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + 1e-12);
    for (std::size_t i = 0; i < d; ++i) row[i] = static_cast<float>((row[i] - mean) * inv);
  }
  return x;
}

}  // namespace device_profiler_detail

// Measures the profile of `store` on this machine. `backend` reads the store's file (wrapped in
// the storage emulator when one is wanted); `progress` (may be null) is updated after each step.
// The machine should be otherwise idle: the numbers are what the planner will believe.
inline DeviceProfile measure_device_profile(const ShardStore& store, ReadBackend& backend,
                                            const ProfileOptions& options, ProgressBar* progress) {
  namespace d = device_profiler_detail;
  using Clock = std::chrono::steady_clock;
  const std::string& name = store.name();
  const EncoderConfig& c = store.config();
  ThreadPool& pool = options.pool != nullptr ? *options.pool : default_thread_pool();
  require(options.repeats >= 1, "measure_device_profile: repeats must be at least 1");
  require(!options.lengths.empty(), "measure_device_profile: no length buckets given");
  require(options.compute == nullptr || !options.compute_name.empty(),
          "measure_device_profile: a layer compute needs a name to record");
  if (backend.file_size() != store.file_size()) {
    d::fail(name, "the read backend's file is ", backend.file_size(), " bytes, the store is ", store.file_size(),
            " (the backend must read the store's own file)");
  }

  DeviceProfile p;
  p.bits = store.bits();
  p.shards_per_layer = store.shards_per_layer();
  p.num_layers = store.num_layers();
  // A bucket longer than the position table cannot occur: it becomes the longest sequence.
  for (const std::size_t l : options.lengths) {
    require(l >= 1, "measure_device_profile: a length bucket of 0 tokens");
    p.lengths.push_back(std::min(l, c.max_position_embeddings));
  }
  std::sort(p.lengths.begin(), p.lengths.end());
  p.lengths.erase(std::unique(p.lengths.begin(), p.lengths.end()), p.lengths.end());

  const std::size_t M = p.shards_per_layer, N = p.num_layers;
  const std::size_t total_steps = p.bits.size() * (N * M + N + 2 * p.lengths.size() * M);
  std::size_t steps = 0;
  auto step = [&] {
    if (progress != nullptr) progress->update(++steps, total_steps);
  };

  // T_io: every version at k bits, one read call each (as the engine reads a shard), into one
  // 4096-aligned buffer; sizes rounded up to the backend's alignment (O_DIRECT). The store pads
  // every section to 4096, so the rounded read stays inside the file.
  const std::size_t align = std::max<std::size_t>(backend.alignment(), 1);
  if (kShardStoreAlign % align != 0) {
    d::fail(name, "the read backend needs ", align, "-byte alignment; shard versions are aligned to ",
            kShardStoreAlign);
  }
  auto round_up = [&](std::uint64_t v) { return (v + align - 1) / align * align; };
  AlignedBuffer<std::byte, kShardStoreAlign> buffer(static_cast<std::size_t>(round_up(store.max_version_bytes())));
  for (const unsigned bits : p.bits) {
    std::vector<double> ms;
    double bytes = 0;
    for (std::size_t l = 0; l < N; ++l) {
      for (std::size_t s = 0; s < M; ++s) {
        const ShardVersionInfo& info = store.version_info(l, s, bits);
        const ReadRequest request{info.offset,
                                  std::span<std::byte>(buffer.data(), static_cast<std::size_t>(round_up(info.size)))};
        std::size_t got = 0;
        const Clock::time_point start = Clock::now();
        try {
          backend.read(std::span(&request, 1), std::span(&got, 1));
        } catch (const std::system_error& e) {
          d::fail(name, "reading ", shard_version_name(l, s, bits), ": ", e.what());
        }
        ms.push_back(d::ms_since(start));
        if (got < info.size) {
          d::fail(name, "reading ", shard_version_name(l, s, bits), ": got only ", got, " of ", info.size,
                  " bytes (the file ended early)");
        }
        bytes += static_cast<double>(info.size);
        step();
      }
    }
    p.io_ms.push_back(d::median(std::move(ms)));
    p.shard_bytes.push_back(bytes / static_cast<double>(N * M));
  }

  // T_io,layer: every layer's M versions at k bits, through the engine's layer reader, into one
  // buffer written before the first read (as the engine's working buffer, already in memory: a
  // fresh one would add its page faults to the read).
  const LayerReader reader(store, backend);
  for (const unsigned bits : p.bits) {
    std::vector<std::vector<ShardChoice>> layers(N);
    std::size_t most = 0;
    for (std::size_t l = 0; l < N; ++l) {
      for (std::size_t s = 0; s < M; ++s) layers[l].push_back({s, bits});
      most = std::max(most, reader.buffer_bytes(l, layers[l]));
    }
    AlignedBuffer<std::byte, kShardStoreAlign> layer_buffer(most);
    std::fill(layer_buffer.span().begin(), layer_buffer.span().end(), std::byte{0});
    std::vector<double> ms;
    double bytes = 0, requests = 0;
    for (std::size_t l = 0; l < N; ++l) {
      const std::vector<ShardChoice>& versions = layers[l];
      LayerTimes times;
      const Clock::time_point start = Clock::now();
      reader.read(l, versions, layer_buffer.span(), times, start);  // throws an Error naming the store
      ms.push_back(times.read_end_ms);
      for (const ShardChoice& v : versions) bytes += static_cast<double>(store.version_info(l, v.shard, bits).size);
      requests += static_cast<double>(times.reads);
      step();
    }
    p.layer_io_ms.push_back(d::median(std::move(ms)));
    p.layer_bytes.push_back(bytes / static_cast<double>(N));
    p.layer_requests.push_back(std::round(requests / static_cast<double>(N)));
  }

  // T_comp and T_comp': for each length and m the median of `repeats` runs of the untiled layer
  // on layer 0's shards 0..m-1 (after a warm-up run that also sizes the workspace, or converts
  // what options.compute keeps between requests). The input is restored before every run (the
  // layer works in place) and the run's views made, outside the timed region.
  const LayerResident r = store.read_resident(0);  // resident_view(r) points into it
  const LayerResidentView resident = resident_view(r);
  EncoderWorkspace ws;
  std::vector<std::vector<float>> inputs;
  for (const std::size_t l : p.lengths) inputs.push_back(d::random_hidden(l, c.hidden, 0x5717e + l));
  std::vector<float> hidden;
  // One request of options.compute: every layer index on the same shards, then finish() (also
  // when a layer throws: the compute may still hold calls on x).
  const auto run_request = [&](std::span<const ShardView> views, float* x, std::span<const std::size_t> offsets) {
    try {
      for (std::size_t layer = 0; layer < N; ++layer) {
        options.compute->run(c, layer, store.shard_shape(), views, resident, x, offsets);
      }
    } catch (...) {
      try {
        options.compute->finish();
      } catch (...) {  // the first failure is the one to report
      }
      throw;
    }
    options.compute->finish();
  };
  // One bitwidth's table [length index][m - 1]; views_of_run(m) gives each run's m shards.
  const auto time_table = [&](const auto& views_of_run) {
    std::vector<std::vector<double>> per_length;
    for (std::size_t i = 0; i < p.lengths.size(); ++i) {
      const std::size_t offsets[2] = {0, p.lengths[i]};
      std::vector<double>& per_m = per_length.emplace_back();
      for (std::size_t m = 1; m <= M; ++m) {
        std::vector<double> ms;
        for (std::size_t run = 0; run <= options.repeats; ++run) {
          const std::vector<ShardView> views = views_of_run(m);
          std::optional<ShardedLayer> layer;
          if (options.compute == nullptr) layer.emplace(store.shard_shape(), views, resident);
          hidden = inputs[i];
          const Clock::time_point start = Clock::now();
          if (layer) {
            layer->run(c, hidden.data(), offsets, ws, pool);
          } else {
            run_request(views, hidden.data(), offsets);
          }
          if (run > 0) ms.push_back(d::ms_since(start) / (layer ? 1.0 : static_cast<double>(N)));
        }
        per_m.push_back(d::median(std::move(ms)));
        step();
      }
    }
    return per_length;
  };

  // T_comp: the shards read once per bitwidth, every run on the same (warm) bytes.
  for (const unsigned bits : p.bits) {
    std::vector<ShardBuffer> shards;
    std::vector<ShardView> views;
    for (std::size_t s = 0; s < M; ++s) {
      shards.push_back(store.read_shard(0, s, bits));
      views.push_back(shards.back().view());
    }
    p.compute_ms.push_back(time_table([&](std::size_t m) {
      return std::vector<ShardView>(views.begin(), views.begin() + static_cast<std::ptrdiff_t>(m));
    }));
  }

  // T_comp': every run reads its versions first, through the backend (one request per contiguous
  // run of versions, checksums checked; a failed read throws an Error naming the store), then
  // computes on the views into the read buffer.
  for (const unsigned bits : p.bits) {
    std::vector<ShardChoice> versions;
    for (std::size_t s = 0; s < M; ++s) versions.push_back({s, bits});
    AlignedBuffer<std::byte, kShardStoreAlign> read_buffer(reader.buffer_bytes(0, versions));
    p.compute_after_read_ms.push_back(time_table([&](std::size_t m) {
      LayerTimes ignored;
      std::vector<ShardView> views;
      for (const ReadVersion& v :
           reader.read(0, std::span<const ShardChoice>(versions).first(m), read_buffer.span(), ignored, Clock::now())) {
        views.push_back(v.view);
      }
      return views;
    }));
  }

  std::uintmax_t store_bytes = store.file_size();
  const std::string layer_compute = options.compute == nullptr ? std::string(kCpuLayerCompute) : options.compute_name;
  p.machine = nlohmann::json{{"cpu", d::cpu_model()},
                             {"cores", std::thread::hardware_concurrency()},
                             {"threads", pool.num_threads()},
                             {"simd_target", active_target_name()},
                             {"compiler", d::compiler()},
                             {"read_backend", backend.describe()},
                             {"storage", options.storage_name},
                             {"emulated", backend.emulated()},
                             {"page_cache_bypassed", backend.bypasses_page_cache()},
                             {"store", std::filesystem::path(name).filename().string()},
                             {"store_bytes", store_bytes},
                             {"date", d::utc_now_iso8601()},
                             {"repeats", options.repeats},
                             {"layer_compute", layer_compute}};
  return p;
}

}  // namespace stile
