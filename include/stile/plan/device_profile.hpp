#pragma once
// The device profile: what this machine's storage and CPU cost, measured once per device (at
// install time) so that the planners can choose submodels and bitwidths from numbers instead of
// guesses (ARCHITECTURE.md, "Data flow").
//
//   T_io(k)        ms to read one shard version at k bits through the engine's read backend (and
//                  the storage emulator, when one wraps it): the median over every shard version
//                  of every layer, one read call per version as the engine issues them.
//   T_comp(l,m,k)  ms to compute one encoder layer from m shards at k bits on one sequence of l
//                  tokens (decode included: the GEMMs decode the shards' bytes as they go); the
//                  median of R runs after one warm-up, on layer 0's shards 0..m-1.
//
// Medians rather than means: a shared machine's hiccups (another build, a page fault) land in a
// few runs and should not move the number the planner trusts.
//
// The JSON file (save/load; load refuses anything else with "stile: <file>: <problem>"):
//
//   {
//     "format": "stile-device-profile",     exactly this
//     "version": 1,                         the version this code reads and writes
//     "machine": { ... },                   free-form: what it was measured on (cpu, cores,
//                                           threads, simd_target, compiler, read_backend,
//                                           storage, emulated, page_cache_bypassed, store,
//                                           store_bytes, date (UTC, ISO 8601), repeats)
//     "bits": [2, 3, 4, 5, 6, 32],          the store's bitwidths, strictly increasing
//     "io_ms": [...],                       [bits index]: median ms to read one shard version
//     "shard_bytes": [...],                 [bits index]: mean bytes of one shard version
//     "lengths": [16, 32, 64, 128, 256],    token-length buckets, strictly increasing, >= 1
//     "shards_per_layer": M,                >= 1
//     "num_layers": N,                      >= 1
//     "compute_ms": [[[...]]]               [bits index][length index][m - 1]: median ms of one
//                                           layer from shards 0..m-1
//   }
//
// Every number is finite and >= 0; counts and bitwidths are whole numbers. Unknown top-level keys
// are refused (a misspelt key would otherwise be silently ignored); "machine" is only recorded.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/store/shard_view.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/sharded_layer.hpp"

namespace stile {

inline constexpr std::string_view kDeviceProfileFormatName = "stile-device-profile";
inline constexpr std::uint64_t kDeviceProfileVersion = 1;

struct DeviceProfile {
  nlohmann::json machine = nlohmann::json::object();  // what it was measured on (see the top)
  std::vector<unsigned> bits;                         // the store's bitwidths, increasing
  std::vector<double> io_ms;                          // [bits index]: median ms to read one shard version
  std::vector<double> shard_bytes;                    // [bits index]: mean bytes of one shard version
  std::vector<std::size_t> lengths;                   // token-length buckets, increasing
  std::size_t shards_per_layer = 0, num_layers = 0;
  std::vector<std::vector<std::vector<double>>> compute_ms;  // [bits index][length index][m - 1]

  // T_io at `bits`; a bitwidth the profile lacks is an Error.
  double io_ms_at(unsigned bits_wanted) const { return io_ms.at(bits_index(bits_wanted)); }

  // The smallest bucket >= tokens (the largest when tokens exceeds them all; tokens 0 -> the
  // first): a longer sequence never costs less than its bucket says, except past the largest.
  std::size_t length_bucket(std::size_t tokens) const { return lengths[length_index(tokens)]; }

  // T_comp of one layer from m shards at `bits` on `tokens` tokens, at length_bucket(tokens).
  double compute_ms_at(unsigned bits_wanted, std::size_t tokens, std::size_t m) const {
    const std::size_t b = bits_index(bits_wanted);
    if (m < 1 || m > shards_per_layer) {
      throw Error(concat("stile: device profile: m = ", m, " shards is outside 1..", shards_per_layer,
                                    " (the profile's shards per layer)"));
    }
    const std::size_t i = length_index(tokens);
    require(b < compute_ms.size() && i < compute_ms[b].size() && m - 1 < compute_ms[b][i].size(),
            "device profile: compute_ms does not match bits, lengths and shards_per_layer");
    return compute_ms[b][i][m - 1];
  }

  nlohmann::json to_json() const {
    return nlohmann::json{{"format", kDeviceProfileFormatName},
                          {"version", kDeviceProfileVersion},
                          {"machine", machine},
                          {"bits", bits},
                          {"io_ms", io_ms},
                          {"shard_bytes", shard_bytes},
                          {"lengths", lengths},
                          {"shards_per_layer", shards_per_layer},
                          {"num_layers", num_layers},
                          {"compute_ms", compute_ms}};
  }

  // Validates everything; errors are "stile: <where>: device profile: <problem>".
  static DeviceProfile from_json(const nlohmann::json& j, const std::string& where);

  // Writes the JSON to a temporary file beside `path` and renames it into place, so `path` is
  // either the complete new profile or untouched.
  void save(const std::filesystem::path& path) const;

  // Reads and validates a profile written by save().
  static DeviceProfile load(const std::filesystem::path& path);

 private:
  std::size_t bits_index(unsigned wanted) const {
    const auto it = std::find(bits.begin(), bits.end(), wanted);
    if (it == bits.end()) {
      std::string have;
      for (const unsigned b : bits) have += concat(have.empty() ? "" : ", ", b);
      throw Error(concat("stile: device profile: no measurements at ", wanted, " bits (it has [", have,
                                    "])"));
    }
    return static_cast<std::size_t>(it - bits.begin());
  }
  std::size_t length_index(std::size_t tokens) const {
    require(!lengths.empty(), "device profile: no length buckets (an empty profile)");
    const auto it = std::lower_bound(lengths.begin(), lengths.end(), tokens);
    return it == lengths.end() ? lengths.size() - 1 : static_cast<std::size_t>(it - lengths.begin());
  }
};

struct ProfileOptions {
  std::vector<std::size_t> lengths{16, 32, 64, 128, 256};  // clamped to max_position_embeddings
  std::size_t repeats = 5;            // timed runs per (bits, length, m), after one warm-up run
  ThreadPool* pool = nullptr;         // null: the default pool
  std::string storage_name = "none";  // the storage profile the backend emulates, for the record
};

namespace device_profile_detail {

// A profile is a few KB; anything near this is not one.
inline constexpr std::uintmax_t kMaxProfileBytes = std::uintmax_t{16} << 20;
// The layout nests 4 levels (compute_ms inside the root); machine may add a little.
inline constexpr int kMaxJsonDepth = 16;

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

// The file's text: the keys in the order of the layout above (nlohmann would sort them), one
// line per array of numbers rather than one line per number, so a person can read the table.
inline std::string profile_text(const nlohmann::json& j) {
  std::string machine = j.at("machine").dump(2);
  for (std::size_t at = machine.find('\n'); at != std::string::npos; at = machine.find('\n', at + 3)) {
    machine.replace(at, 1, "\n  ");
  }
  std::string text = "{\n";
  for (const char* key : {"format", "version"}) text += concat("  \"", key, "\": ", j.at(key).dump(), ",\n");
  text += concat("  \"machine\": ", machine, ",\n");
  for (const char* key : {"bits", "io_ms", "shard_bytes", "lengths", "shards_per_layer", "num_layers"}) {
    text += concat("  \"", key, "\": ", j.at(key).dump(), ",\n");
  }
  text += "  \"compute_ms\": [";
  const nlohmann::json& compute = j.at("compute_ms");
  for (std::size_t b = 0; b < compute.size(); ++b) {
    text += b == 0 ? "\n    [" : ",\n    [";
    for (std::size_t i = 0; i < compute[b].size(); ++i) {
      text += concat(i == 0 ? "\n      " : ",\n      ", compute[b][i].dump());
    }
    text += "\n    ]";
  }
  text += "\n  ]\n}\n";
  return text;
}

}  // namespace device_profile_detail

inline DeviceProfile DeviceProfile::from_json(const nlohmann::json& j, const std::string& file) {
  // Every error: "stile: <file>: device profile: <problem>" (io/json_fields.hpp).
  constexpr std::string_view d = "device profile";
  if (!j.is_object()) json_fail(file, d, "must be a JSON object, got ", json_excerpt(j));
  json_only_keys(j,
                 {"format", "version", "machine", "bits", "io_ms", "shard_bytes", "lengths", "shards_per_layer",
                  "num_layers", "compute_ms"},
                 d, file);
  const nlohmann::json& format = json_member(j, "format", d, file);
  if (!format.is_string() || format.get<std::string>() != kDeviceProfileFormatName) {
    json_fail(file, d, "\"format\" is ", json_excerpt(format), ", expected \"", kDeviceProfileFormatName,
              "\" (not a device profile)");
  }
  const std::uint64_t version = json_whole(json_member(j, "version", d, file), "\"version\"", d, file);
  if (version != kDeviceProfileVersion) {
    json_fail(file, d, "version ", version, " is not supported (this reader supports version ",
              kDeviceProfileVersion, ")");
  }
  DeviceProfile p;
  p.machine = json_object_member(j, "machine", d, file);
  for (const std::uint64_t b : json_increasing(json_member(j, "bits", d, file), "\"bits\"", 1, 32, d, file)) {
    p.bits.push_back(static_cast<unsigned>(b));
  }
  for (const std::uint64_t l :
       json_increasing(json_member(j, "lengths", d, file), "\"lengths\"", 1, std::uint64_t{1} << 32, d, file)) {
    p.lengths.push_back(static_cast<std::size_t>(l));
  }
  const std::uint64_t shards =
      json_whole(json_member(j, "shards_per_layer", d, file), "\"shards_per_layer\"", d, file);
  const std::uint64_t layers = json_whole(json_member(j, "num_layers", d, file), "\"num_layers\"", d, file);
  // Bounds far above any real model, so that a damaged count cannot ask for gigabytes below.
  if (shards < 1 || shards > 4096) json_fail(file, d, "\"shards_per_layer\" = ", shards, " is outside 1..4096");
  if (layers < 1 || layers > 4096) json_fail(file, d, "\"num_layers\" = ", layers, " is outside 1..4096");
  p.shards_per_layer = static_cast<std::size_t>(shards);
  p.num_layers = static_cast<std::size_t>(layers);
  const std::size_t nb = p.bits.size(), nl = p.lengths.size();
  p.io_ms = json_nonnegatives(json_member(j, "io_ms", d, file), nb, "\"io_ms\"", "one per bitwidth", d, file);
  p.shard_bytes =
      json_nonnegatives(json_member(j, "shard_bytes", d, file), nb, "\"shard_bytes\"", "one per bitwidth", d, file);
  const nlohmann::json& compute =
      json_array_of(json_member(j, "compute_ms", d, file), nb, "\"compute_ms\"", "one per bitwidth", d, file);
  for (std::size_t b = 0; b < nb; ++b) {
    const std::string at_b = concat("\"compute_ms\"[", b, "]");
    json_array_of(compute[b], nl, at_b, "one per length bucket", d, file);
    std::vector<std::vector<double>>& per_length = p.compute_ms.emplace_back();
    for (std::size_t i = 0; i < nl; ++i) {
      per_length.push_back(json_nonnegatives(compute[b][i], p.shards_per_layer, concat(at_b, "[", i, "]"),
                                             "one per m = 1..shards_per_layer", d, file));
    }
  }
  return p;
}

inline void DeviceProfile::save(const std::filesystem::path& path) const {
  std::string text;
  try {
    text = device_profile_detail::profile_text(to_json());
  } catch (const nlohmann::json::exception& e) {
    fail_in_file(path.string(), "cannot write the device profile: ", e.what());
  }
  write_file_atomically(path, text);
}

inline DeviceProfile DeviceProfile::load(const std::filesystem::path& path) {
  return from_json(read_json_file(path, device_profile_detail::kMaxProfileBytes,
                                             device_profile_detail::kMaxJsonDepth, "the device profile"),
                   path.string());
}

// Measures the profile of `store` on this machine. `backend` reads the store's file (wrapped in
// the storage emulator when one is wanted); `progress` (may be null) is updated after each step.
// The machine should be otherwise idle: the numbers are what the planner will believe.
inline DeviceProfile measure_device_profile(const ShardStore& store, ReadBackend& backend,
                                            const ProfileOptions& options, ProgressBar* progress) {
  namespace d = device_profile_detail;
  using Clock = std::chrono::steady_clock;
  const std::string& name = store.name();
  const BertConfig& c = store.config();
  ThreadPool& pool = options.pool != nullptr ? *options.pool : default_thread_pool();
  require(options.repeats >= 1, "measure_device_profile: repeats must be at least 1");
  require(!options.lengths.empty(), "measure_device_profile: no length buckets given");
  if (backend.file_size() != store.file_size()) {
    fail_in_file(name, "device profile: ", "the read backend's file is ", backend.file_size(), " bytes, the store is ", store.file_size(),
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
  const std::size_t total_steps = p.bits.size() * (N * M + p.lengths.size() * M);
  std::size_t steps = 0;
  auto step = [&] {
    if (progress != nullptr) progress->update(++steps, total_steps);
  };

  // T_io: every version at k bits, one read call each (as the engine reads a shard), into one
  // 4096-aligned buffer; sizes rounded up to the backend's alignment (O_DIRECT). The store pads
  // every section to 4096, so the rounded read stays inside the file.
  const std::size_t align = std::max<std::size_t>(backend.alignment(), 1);
  if (kShardStoreAlign % align != 0) {
    fail_in_file(name, "device profile: ", "the read backend needs ", align, "-byte alignment; shard versions are aligned to ",
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
          fail_in_file(name, "device profile: ", "reading ", shard_version_name(l, s, bits), ": ", e.what());
        }
        ms.push_back(d::ms_since(start));
        if (got < info.size) {
          fail_in_file(name, "device profile: ", "reading ", shard_version_name(l, s, bits), ": got only ", got, " of ", info.size,
                  " bytes (the file ended early)");
        }
        bytes += static_cast<double>(info.size);
        step();
      }
    }
    p.io_ms.push_back(d::median(std::move(ms)));
    p.shard_bytes.push_back(bytes / static_cast<double>(N * M));
  }

  // T_comp: layer 0's shards, read once per bitwidth, then for each length and m the median of
  // `repeats` runs of the untiled layer (after a warm-up run that also sizes the workspace). The
  // input is restored before every run (the layer works in place) outside the timed region.
  const LayerResident r = store.read_resident(0);  // resident_view(r) points into it
  const LayerResidentView resident = resident_view(r);
  EncoderWorkspace ws;
  std::vector<std::vector<float>> inputs;
  for (const std::size_t l : p.lengths) inputs.push_back(d::random_hidden(l, c.hidden, 0x5717e + l));
  std::vector<float> hidden;
  for (const unsigned bits : p.bits) {
    std::vector<ShardBuffer> shards;
    std::vector<ShardView> views;
    for (std::size_t s = 0; s < M; ++s) {
      shards.push_back(store.read_shard(0, s, bits));
      views.push_back(shards.back().view());
    }
    std::vector<std::vector<double>>& per_length = p.compute_ms.emplace_back();
    for (std::size_t i = 0; i < p.lengths.size(); ++i) {
      const std::size_t offsets[2] = {0, p.lengths[i]};
      std::vector<double>& per_m = per_length.emplace_back();
      for (std::size_t m = 1; m <= M; ++m) {
        const ShardedLayer layer(store.shard_shape(), std::span<const ShardView>(views).first(m), resident);
        std::vector<double> ms;
        for (std::size_t run = 0; run <= options.repeats; ++run) {
          hidden = inputs[i];
          const Clock::time_point start = Clock::now();
          layer.run(c, hidden.data(), offsets, ws, pool);
          if (run > 0) ms.push_back(d::ms_since(start));
        }
        per_m.push_back(d::median(std::move(ms)));
        step();
      }
    }
  }

  std::uintmax_t store_bytes = store.file_size();
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
                             {"repeats", options.repeats}};
  return p;
}

}  // namespace stile
