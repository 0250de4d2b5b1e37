#pragma once
// The device profile: what this machine's storage and CPU cost, measured once per device (at
// install time) so that the planners can choose submodels and bitwidths from numbers instead of
// guesses (ARCHITECTURE.md, "Data flow").
//
//   T_io(k)        ms to read one shard version at k bits
//   T_io,layer(k)  ms to read every shard version of a layer at k bits as the engine reads a layer
//                  (one request per contiguous run): the reads whose size the engine issues, so
//                  that the read cost line (plan/pipeline_estimate.hpp) gets the storage's
//                  bandwidth from large requests, not from single-shard reads that the per-request
//                  latency dominates
//   T_comp(l,m,k)  ms to compute one encoder layer from m shards at k bits on one sequence of l
//                  tokens, layer after layer (threads awake, weights in cache)
//   T_comp'(l,m,k) the same right after the layer's shards were read (the pipeline's common case on
//                  flash: compute waited for the read, its threads idle, the weights just written
//                  to memory by the device)
// measured by calibrate/device_profiler.hpp (how: there); this header is the file format and
// what the planners read from it.
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
//     "layer_io_ms": [...],                 optional, [bits index]: median ms to read a layer's
//                                           versions at those bits (absent in older profiles)
//     "layer_bytes": [...],                 with it: mean bytes of those reads
//     "layer_requests": [...],              with it: requests per such read (whole, >= 1)
//     "lengths": [16, 32, 64, 128, 256],    token-length buckets, strictly increasing, >= 1
//     "shards_per_layer": M,                >= 1
//     "num_layers": N,                      >= 1
//     "compute_ms": [[[...]]],              [bits index][length index][m - 1]: median ms of one
//                                           layer from shards 0..m-1
//     "compute_after_read_ms": [[[...]]]    optional, the same layout: T_comp' (absent in profiles
//                                           made before it was measured: T_comp is used for both)
//   }
//
// Every number is finite and >= 0; counts and bitwidths are whole numbers. Unknown top-level keys
// are refused (a misspelt key would otherwise be silently ignored); "machine" is only recorded.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/strict_json.hpp"

namespace stile {

inline constexpr std::string_view kDeviceProfileFormatName = "stile-device-profile";
inline constexpr std::uint64_t kDeviceProfileVersion = 1;

// DeviceProfile::layer_compute of a profile timed on the CPU engine's own layer, with its shards
// dequantized inside the fp32 GEMMs (the default) or decoded to int8 per request (run
// --shard-gemm int8, profile --shard-gemm int8).
inline constexpr std::string_view kCpuLayerCompute = "cpu";
inline constexpr std::string_view kCpuInt8LayerCompute = "cpu-int8";

struct DeviceProfile {
  nlohmann::json machine = nlohmann::json::object();  // what it was measured on (see the top)
  std::vector<unsigned> bits;                         // the store's bitwidths, increasing
  std::vector<double> io_ms;                          // [bits index]: median ms to read one shard version
  std::vector<double> shard_bytes;                    // [bits index]: mean bytes of one shard version
  // T_io,layer: [bits index] median ms, mean bytes and requests of reading a layer's versions;
  // all three empty when not measured (older profiles), else one entry per bitwidth each.
  std::vector<double> layer_io_ms, layer_bytes, layer_requests;
  std::vector<std::size_t> lengths;                   // token-length buckets, increasing
  std::size_t shards_per_layer = 0, num_layers = 0;
  std::vector<std::vector<std::vector<double>>> compute_ms;  // [bits index][length index][m - 1]
  // The same after the layer's read (T_comp'); empty: not measured (compute_ms serves for both).
  std::vector<std::vector<std::vector<double>>> compute_after_read_ms;

  // Which layer compute the T_comp tables timed (machine["layer_compute"], written by
  // calibrate/device_profiler.hpp): kCpuLayerCompute for the engine's own CPU layer (also a
  // profile from before the key), else the name the profiler was given, such as an operator
  // mapping's (tools/profile --mapping). Plans are right only for the compute the profile timed.
  std::string layer_compute() const {
    const auto it = machine.find("layer_compute");
    return it != machine.end() && it->is_string() ? it->get<std::string>() : std::string(kCpuLayerCompute);
  }

  // T_io at `bits`; a bitwidth the profile lacks is an Error.
  double io_ms_at(unsigned bits_wanted) const { return io_ms.at(bits_index(bits_wanted)); }
  // Mean bytes of one shard version at `bits`; a bitwidth the profile lacks is an Error.
  double shard_bytes_at(unsigned bits_wanted) const { return shard_bytes.at(bits_index(bits_wanted)); }

  // The smallest bucket >= tokens (the largest when tokens exceeds them all; tokens 0 -> the
  // first): a longer sequence never costs less than its bucket says, except past the largest.
  std::size_t length_bucket(std::size_t tokens) const { return lengths[length_index(tokens)]; }

  // T_comp of one layer from m shards at `bits` on `tokens` tokens, at length_bucket(tokens).
  double compute_ms_at(unsigned bits_wanted, std::size_t tokens, std::size_t m) const {
    return table_at(compute_ms, bits_wanted, tokens, m);
  }
  // T_comp' (after the layer's read), or T_comp where the profile has none.
  double compute_after_read_ms_at(unsigned bits_wanted, std::size_t tokens, std::size_t m) const {
    return table_at(compute_after_read_ms.empty() ? compute_ms : compute_after_read_ms, bits_wanted, tokens, m);
  }

  nlohmann::json to_json() const {
    nlohmann::json j{{"format", kDeviceProfileFormatName},
                     {"version", kDeviceProfileVersion},
                     {"machine", machine},
                     {"bits", bits},
                     {"io_ms", io_ms},
                     {"shard_bytes", shard_bytes},
                     {"lengths", lengths},
                     {"shards_per_layer", shards_per_layer},
                     {"num_layers", num_layers},
                     {"compute_ms", compute_ms}};
    if (!layer_io_ms.empty()) {
      j["layer_io_ms"] = layer_io_ms;
      j["layer_bytes"] = layer_bytes;
      j["layer_requests"] = layer_requests;
    }
    if (!compute_after_read_ms.empty()) j["compute_after_read_ms"] = compute_after_read_ms;
    return j;
  }

  // Validates everything; errors are "stile: <where>: device profile: <problem>".
  static DeviceProfile from_json(const nlohmann::json& j, const std::string& where);

  // Writes the JSON to a temporary file beside `path` and renames it into place, so `path` is
  // either the complete new profile or untouched.
  void save(const std::filesystem::path& path) const;

  // Reads and validates a profile written by save().
  static DeviceProfile load(const std::filesystem::path& path);

 private:
  using Table = std::vector<std::vector<std::vector<double>>>;
  double table_at(const Table& table, unsigned bits_wanted, std::size_t tokens, std::size_t m) const {
    const std::size_t b = bits_index(bits_wanted);
    if (m < 1 || m > shards_per_layer) {
      throw Error(concat("stile: device profile: m = ", m, " shards is outside 1..", shards_per_layer,
                         " (the profile's shards per layer)"));
    }
    const std::size_t i = length_index(tokens);
    require(b < table.size() && i < table[b].size() && m - 1 < table[b][i].size(),
            "device profile: compute_ms does not match bits, lengths and shards_per_layer");
    return table[b][i][m - 1];
  }
  std::size_t bits_index(unsigned wanted) const {
    const auto it = std::find(bits.begin(), bits.end(), wanted);
    if (it == bits.end()) {
      std::string have;
      for (const unsigned b : bits) have += concat(have.empty() ? "" : ", ", b);
      throw Error(concat("stile: device profile: no measurements at ", wanted, " bits (it has [", have, "])"));
    }
    return static_cast<std::size_t>(it - bits.begin());
  }
  std::size_t length_index(std::size_t tokens) const {
    require(!lengths.empty(), "device profile: no length buckets (an empty profile)");
    const auto it = std::lower_bound(lengths.begin(), lengths.end(), tokens);
    return it == lengths.end() ? lengths.size() - 1 : static_cast<std::size_t>(it - lengths.begin());
  }
};

namespace device_profile_detail {

// A profile is a few KB; anything near this is not one.
inline constexpr std::uintmax_t kMaxProfileBytes = std::uintmax_t{16} << 20;
// The layout nests 4 levels (compute_ms inside the root); machine may add a little.
inline constexpr int kMaxJsonDepth = 16;

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
  for (const char* key : {"bits", "io_ms", "shard_bytes", "layer_io_ms", "layer_bytes", "layer_requests", "lengths",
                          "shards_per_layer", "num_layers"}) {
    if (j.contains(key)) text += concat("  \"", key, "\": ", j.at(key).dump(), ",\n");
  }
  const auto table = [&](const char* key) {
    std::string t = concat("  \"", key, "\": [");
    const nlohmann::json& compute = j.at(key);
    for (std::size_t b = 0; b < compute.size(); ++b) {
      t += b == 0 ? "\n    [" : ",\n    [";
      for (std::size_t i = 0; i < compute[b].size(); ++i) {
        t += concat(i == 0 ? "\n      " : ",\n      ", compute[b][i].dump());
      }
      t += "\n    ]";
    }
    return t + "\n  ]";
  };
  text += table("compute_ms");
  if (j.contains("compute_after_read_ms")) text += ",\n" + table("compute_after_read_ms");
  text += "\n}\n";
  return text;
}

}  // namespace device_profile_detail

inline DeviceProfile DeviceProfile::from_json(const nlohmann::json& j, const std::string& file) {
  // Every error: "stile: <file>: device profile: <problem>" (io/json_fields.hpp).
  constexpr std::string_view d = "device profile";
  if (!j.is_object()) json_fail(file, d, "must be a JSON object, got ", json_excerpt(j));
  json_only_keys(j,
                 {"format", "version", "machine", "bits", "io_ms", "shard_bytes", "layer_io_ms", "layer_bytes",
                  "layer_requests", "lengths", "shards_per_layer", "num_layers", "compute_ms", "compute_after_read_ms"},
                 d, file);
  json_check_format(j, kDeviceProfileFormatName, "a device profile", kDeviceProfileVersion, "", d, file);
  DeviceProfile p;
  p.machine = json_object_member(j, "machine", d, file);
  for (const std::uint64_t b : json_increasing(json_member(j, "bits", d, file), "\"bits\"", 1, 32, d, file)) {
    p.bits.push_back(static_cast<unsigned>(b));
  }
  for (const std::uint64_t l :
       json_increasing(json_member(j, "lengths", d, file), "\"lengths\"", 1, std::uint64_t{1} << 32, d, file)) {
    p.lengths.push_back(static_cast<std::size_t>(l));
  }
  const std::uint64_t shards = json_whole(json_member(j, "shards_per_layer", d, file), "\"shards_per_layer\"", d, file);
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
  const bool has_layer_io = j.contains("layer_io_ms"), has_bytes = j.contains("layer_bytes"),
             has_requests = j.contains("layer_requests");
  if (has_layer_io != has_bytes || has_layer_io != has_requests) {
    json_fail(file, d, "\"layer_io_ms\", \"layer_bytes\" and \"layer_requests\" come together (some are missing)");
  }
  if (has_layer_io) {
    p.layer_io_ms = json_nonnegatives(j.at("layer_io_ms"), nb, "\"layer_io_ms\"", "one per bitwidth", d, file);
    p.layer_bytes = json_nonnegatives(j.at("layer_bytes"), nb, "\"layer_bytes\"", "one per bitwidth", d, file);
    p.layer_requests = json_nonnegatives(j.at("layer_requests"), nb, "\"layer_requests\"", "one per bitwidth", d, file);
    for (std::size_t b = 0; b < nb; ++b) {
      const double r = p.layer_requests[b];
      if (r < 1 || r > 1e9 || r != std::floor(r)) {
        json_fail(file, d, "\"layer_requests\"[", b, "] = ", json_excerpt(j.at("layer_requests")[b]),
                  " is not a whole number of requests >= 1");
      }
    }
  }
  const auto read_table = [&](const char* key, std::vector<std::vector<std::vector<double>>>& out) {
    const std::string name = concat("\"", key, "\"");
    const nlohmann::json& compute = json_array_of(json_member(j, key, d, file), nb, name, "one per bitwidth", d, file);
    for (std::size_t b = 0; b < nb; ++b) {
      const std::string at_b = concat(name, "[", b, "]");
      json_array_of(compute[b], nl, at_b, "one per length bucket", d, file);
      std::vector<std::vector<double>>& per_length = out.emplace_back();
      for (std::size_t i = 0; i < nl; ++i) {
        per_length.push_back(json_nonnegatives(compute[b][i], p.shards_per_layer, concat(at_b, "[", i, "]"),
                                               "one per m = 1..shards_per_layer", d, file));
      }
    }
  };
  read_table("compute_ms", p.compute_ms);
  if (j.contains("compute_after_read_ms")) read_table("compute_after_read_ms", p.compute_after_read_ms);
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
  return from_json(read_json_file(path, device_profile_detail::kMaxProfileBytes, device_profile_detail::kMaxJsonDepth,
                                  "the device profile"),
                   path.string());
}

}  // namespace stile
