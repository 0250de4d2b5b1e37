#pragma once
// The operator latency profile: what each node of the operator graph (plan/op_graph.hpp) costs on
// each processor in each number format, and what moving activations between processors costs,
// measured once per board and model shape (calibrate/op_latency_profiler.hpp; tools/profile_ops)
// so that the schedule emulator (plan/schedule_emulator.hpp) predicts a mapping's latency.
//
// The JSON file (save/load; load refuses anything else with "stile: <file>: op latency profile:
// <problem>"):
//
//   {
//     "format": "stile-op-latency-profile",   exactly this
//     "version": 4,                            (1, 2, 3: older request costs, still read; see below)
//     "machine": { ... },                      free-form: what it was measured on
//     "settings": { ... },                     free-form: how (repeats, threads per processor, ...)
//     "shape": {"layers": 6, "hidden": 384, "heads": 12, "ffn": 1536, "classes": 2},
//     "tokens": [16, 32, 64, 128],             sequence lengths measured, strictly increasing, >= 1
//     "processors": ["cpu:0", "cpu:1"],        names, distinct, non-empty
//     "latency_us": [                          one entry per (processor, kind, format), no repeats
//       {"processor": "cpu:0", "kind": "qkv", "format": "int8", "us": [..one per tokens..]}, ...],
//     "transfer": [                            one entry per ordered pair of distinct processors
//       {"from": "cpu:0", "to": "cpu:1", "call_us": [14.0, 31.0], "byte_us": 0.0001}, ...],
//                                              call_us: one per request_tokens entry, or one number
//     "request_tokens": [32, 128],             the lengths the request cost was fitted at (as "tokens")
//     "request_us": [[-120.0, 1360.0], [-120.0, 1360.0]]  the mapped forward's cost per request beyond
//   }                                          its nodes, by processors used, one per request_tokens entry
//
// kind and format are op_graph.hpp's names; a format the kind does not have is refused. A node's
// latency at a token count between two measured ones is interpolated linearly, outside them
// extrapolated along the nearest segment (never below 0). Transfer of b bytes from p to q costs
// call_us + b * byte_us; on one processor, 0; call_us (the hand-off between the two processors'
// queues) is interpolated over request_tokens when it is a list. request_us[k - 1] is what
// executing a mapping that uses k processors costs per request beyond its nodes and transfers (the
// driver's hand-over, the processors' wake-ups, the driver's own wake-up; fitted on executed
// mappings by calibrate/request_cost_profiler.hpp), one row per processor count 1..processors,
// interpolated over request_tokens as a node's latency over tokens, never below min(0, the row's
// lowest value). It may be negative: it is the correction of the node costs' sum for a whole
// request, and the nodes, timed one by one, over-predict short requests (docs/design-notes.md).
// Older files are read and written back as they were, and the tools print request_cost_note():
// version 1 has no request cost (request_measured false, every cost 0); version 2 has one per
// processor count, "request_us": [12.0, 180.0], the same at every length (request_tokens empty);
// version 3 has request costs >= 0 and one hand-off cost ("call_us" a number) at every length.
// Versions 2 and 3 over-predict short requests spread over several processors.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/plan/op_graph.hpp"

namespace stile {

inline constexpr std::string_view kOpLatencyProfileFormatName = "stile-op-latency-profile";
inline constexpr std::uint64_t kOpLatencyProfileVersion = 4;

// The value at `t` tokens of `us`, measured at `tokens` (strictly increasing, one value each):
// linear between two measured lengths, extrapolated along the nearest segment outside them, never
// below `lowest`. A single value holds at every length.
inline double interpolate_tokens(const std::vector<std::size_t>& tokens, const std::vector<double>& us, std::size_t t,
                                 double lowest = 0.0) {
  if (us.size() == 1) return us[0];
  // The segment [i, i + 1] holding t, or the nearest one.
  const auto it = std::upper_bound(tokens.begin(), tokens.end(), t);
  std::size_t i = it == tokens.begin() ? 0 : static_cast<std::size_t>(it - tokens.begin()) - 1;
  i = std::min(i, tokens.size() - 2);
  const double x0 = double(tokens[i]), x1 = double(tokens[i + 1]);
  return std::max(lowest, us[i] + (us[i + 1] - us[i]) * (double(t) - x0) / (x1 - x0));
}

struct TransferCost {
  double call_us = 0, byte_us = 0;
  double us(std::size_t bytes) const noexcept { return call_us + double(bytes) * byte_us; }
};

struct OpLatencyProfile {
  nlohmann::json machine = nlohmann::json::object();
  nlohmann::json settings = nlohmann::json::object();
  OpGraphShape shape;  // tokens unused (0): the profile covers `tokens`
  std::vector<std::size_t> tokens;
  std::vector<std::string> processors;
  // [processor][kind][format]: microseconds per tokens entry; empty when not measured.
  std::vector<std::array<std::array<std::vector<double>, kNumberFormats>, kOpNodeKinds>> latency;
  std::vector<std::vector<TransferCost>> transfer;  // [from][to]; the diagonal is unused
  // [from][to]: the hand-off per request_tokens entry, in place of transfer's call_us; empty: none.
  std::vector<std::vector<std::vector<double>>> handoff_us;
  // [processors used - 1][request_tokens entry]; one zero each unless request_measured.
  std::vector<std::vector<double>> request_us;
  std::vector<std::size_t> request_tokens;  // empty: one request cost at every length (version 2, or none)
  bool request_measured = false;            // false: read from a version 1 file, or not fitted yet

  // An empty profile over these processors and token counts (latency and transfer to be filled).
  static OpLatencyProfile empty(OpGraphShape shape, std::vector<std::size_t> tokens, std::vector<std::string> procs) {
    OpLatencyProfile p;
    p.shape = shape;
    p.shape.tokens = 0;
    p.tokens = std::move(tokens);
    p.processors = std::move(procs);
    p.latency.resize(p.processors.size());
    p.transfer.assign(p.processors.size(), std::vector<TransferCost>(p.processors.size()));
    p.handoff_us.assign(p.processors.size(), std::vector<std::vector<double>>(p.processors.size()));
    p.request_us.assign(p.processors.size(), {0.0});
    return p;
  }

  // Appends a processor with no latency entries, free transfers to and from it, no request cost.
  std::size_t add_processor(std::string name) {
    processors.push_back(std::move(name));
    latency.resize(processors.size());
    for (auto& row : transfer) row.resize(processors.size());
    transfer.resize(processors.size(), std::vector<TransferCost>(processors.size()));
    for (auto& row : handoff_us) row.resize(processors.size());
    handoff_us.resize(processors.size(), std::vector<std::vector<double>>(processors.size()));
    request_us.push_back(request_us.empty() ? std::vector<double>{0.0} : request_us.back());
    return processors.size() - 1;
  }

  bool has(std::size_t proc, OpNodeKind k, NumberFormat f) const {
    return proc < latency.size() && !latency[proc][idx(k)][idx(f)].empty();
  }
  std::vector<double>& entry(std::size_t proc, OpNodeKind k, NumberFormat f) {
    return latency.at(proc)[idx(k)][idx(f)];
  }

  // Microseconds of one node of kind k in format f on processor proc for `t` tokens.
  double latency_us(std::size_t proc, OpNodeKind k, NumberFormat f, std::size_t t) const {
    if (!has(proc, k, f)) {
      throw Error(concat("stile: op latency profile: no latency of ", to_string(k), " in ", to_string(f), " on ",
                         proc < processors.size() ? processors[proc] : std::string("processor ?")));
    }
    return interpolate_tokens(tokens, latency[proc][idx(k)][idx(f)], t);
  }
  // Microseconds a request of `t` tokens costs beyond its nodes on `used` (>= 1) processors; 0
  // without a request cost. More processors than rows: the last row.
  double request_cost_us(std::size_t used, std::size_t t) const {
    if (!request_measured) return 0.0;
    const std::vector<double>& row = request_us.at(std::min(used, request_us.size()) - 1);
    return interpolate_tokens(request_tokens, row, t, std::min(0.0, *std::min_element(row.begin(), row.end())));
  }
  // The transfer cost from `from` to `to` for a request of `t` tokens (its hand-off at that length).
  TransferCost transfer_at(std::size_t from, std::size_t to, std::size_t t) const {
    TransferCost c = transfer.at(from).at(to);
    if (!handoff_us.at(from).at(to).empty()) c.call_us = interpolate_tokens(request_tokens, handoff_us[from][to], t);
    return c;
  }
  double transfer_us(std::size_t from, std::size_t to, std::size_t bytes, std::size_t t) const {
    return from == to ? 0.0 : transfer_at(from, to, t).us(bytes);
  }
  // What a tool says about a profile without a request cost and a hand-off per token count (version
  // 1, 2 or 3), or "".
  std::string request_cost_note() const {
    if (!request_measured) {
      return "note: the op latency profile has no request cost (version 1): predictions leave out the executor's "
             "per-request cost; measure it again with profile_ops";
    }
    if (request_tokens.empty()) {
      return "note: the op latency profile has one request cost for every sequence length (version 2), fitted "
             "mostly on long requests: predictions of short ones are too high; measure it again with profile_ops "
             "for one per token count";
    }
    if (version() == 3) {
      return "note: the op latency profile has one hand-off cost between processors for every sequence length "
             "(version 3): predictions of short requests spread over processors are too high; measure it again "
             "with profile_ops for one per token count";
    }
    return {};
  }
  // The processor named `name`; Error when the profile has none.
  std::size_t processor_index(std::string_view name) const {
    for (std::size_t p = 0; p < processors.size(); ++p) {
      if (processors[p] == name) return p;
    }
    throw Error(concat("stile: op latency profile: no processor \"", name, "\""));
  }

  nlohmann::json to_json() const {
    nlohmann::json lat = nlohmann::json::array(), xfer = nlohmann::json::array();
    for (std::size_t p = 0; p < latency.size(); ++p) {
      for (std::size_t k = 0; k < kOpNodeKinds; ++k) {
        for (std::size_t f = 0; f < kNumberFormats; ++f) {
          if (latency[p][k][f].empty()) continue;
          lat.push_back({{"processor", processors[p]},
                         {"kind", to_string(static_cast<OpNodeKind>(k))},
                         {"format", to_string(static_cast<NumberFormat>(f))},
                         {"us", latency[p][k][f]}});
        }
      }
    }
    for (std::size_t a = 0; a < processors.size(); ++a) {
      for (std::size_t b = 0; b < processors.size(); ++b) {
        if (a == b) continue;
        xfer.push_back({{"from", processors[a]},
                        {"to", processors[b]},
                        {"call_us", handoff_us[a][b].empty() ? nlohmann::json(transfer[a][b].call_us)
                                                             : nlohmann::json(handoff_us[a][b])},
                        {"byte_us", transfer[a][b].byte_us}});
      }
    }
    nlohmann::json j = {{"format", kOpLatencyProfileFormatName},
            {"version", version()},
            {"machine", machine},
            {"settings", settings},
            {"shape",
             {{"layers", shape.layers},
              {"hidden", shape.hidden},
              {"heads", shape.heads},
              {"ffn", shape.ffn},
              {"classes", shape.classes}}},
            {"tokens", tokens},
            {"processors", processors},
            {"latency_us", lat},
            {"transfer", xfer}};
    if (version() == 2) {
      j["request_us"] = nlohmann::json::array();
      for (const std::vector<double>& row : request_us) j["request_us"].push_back(row.at(0));
    } else if (version() >= 3) {
      j["request_tokens"] = request_tokens;
      j["request_us"] = request_us;
    }
    return j;
  }
  // The file version this profile is written as: the oldest that holds its request and hand-off costs.
  std::uint64_t version() const {
    if (!request_measured) return 1;
    if (request_tokens.empty()) return 2;
    bool v4 = false;
    for (const auto& row : request_us) v4 = v4 || std::any_of(row.begin(), row.end(), [](double x) { return x < 0; });
    for (const auto& row : handoff_us)
      v4 = v4 || std::any_of(row.begin(), row.end(), [](const auto& h) { return !h.empty(); });
    return v4 ? 4 : 3;
  }

  static OpLatencyProfile from_json(const nlohmann::json& j, const std::string& file);
  void save(const std::filesystem::path& path) const { write_file_atomically(path, to_json().dump(1) + "\n"); }
  static OpLatencyProfile load(const std::filesystem::path& path);

 private:
  template <class E>
  static std::size_t idx(E e) noexcept {
    return static_cast<std::size_t>(e);
  }
};

namespace op_latency_profile_detail {
inline constexpr std::uintmax_t kMaxProfileBytes = std::uintmax_t{16} << 20;
inline constexpr int kMaxJsonDepth = 16;
inline constexpr std::uint64_t kMaxDimension = std::uint64_t{1} << 24;
inline constexpr std::size_t kMaxProcessors = 64;
}  // namespace op_latency_profile_detail

inline OpLatencyProfile OpLatencyProfile::from_json(const nlohmann::json& j, const std::string& file) {
  using namespace op_latency_profile_detail;
  constexpr std::string_view d = "op latency profile";
  if (!j.is_object()) json_fail(file, d, "must be a JSON object, got ", json_excerpt(j));
  // Versions 1 (no request cost), 2 (one per processor count, at every length) and 3 (request costs
  // >= 0, one hand-off at every length) are still read.
  std::uint64_t version = kOpLatencyProfileVersion;
  for (const int older : {1, 2, 3}) {
    if (j.contains("version") && j["version"] == older) version = older;
  }
  json_only_keys(j, {"format", "version", "machine", "settings", "shape", "tokens", "processors", "latency_us",
                     "transfer", "request_us", "request_tokens"},
                 d, file);
  json_check_format(j, kOpLatencyProfileFormatName, "an op latency profile", version,
                    version == kOpLatencyProfileVersion ? ", 3, 2 or 1" : "", d, file);
  if (version < 2 && j.contains("request_us")) json_fail(file, d, "version 1 has no \"request_us\"");
  if (version < 3 && j.contains("request_tokens")) {
    json_fail(file, d, "version ", version, " has no \"request_tokens\" (version 3 has)");
  }
  std::vector<std::size_t> request_tokens;
  if (version >= 3) {
    for (const std::uint64_t t :
         json_increasing(json_member(j, "request_tokens", d, file), "\"request_tokens\"", 1, kMaxDimension, d, file)) {
      request_tokens.push_back(static_cast<std::size_t>(t));
    }
  }
  OpGraphShape shape;
  const nlohmann::json& sj = json_object_member(j, "shape", d, file);
  json_only_keys(sj, {"layers", "hidden", "heads", "ffn", "classes"}, d, file);
  auto dim = [&](const char* key) {
    const std::uint64_t v = json_whole(json_member(sj, key, d, file), concat("\"shape\".\"", key, "\""), d, file);
    if (v < 1 || v > kMaxDimension) json_fail(file, d, "\"shape\".\"", key, "\" = ", v, " is outside 1..", kMaxDimension);
    return static_cast<std::size_t>(v);
  };
  shape.layers = dim("layers");
  shape.hidden = dim("hidden");
  shape.heads = dim("heads");
  shape.ffn = dim("ffn");
  shape.classes = dim("classes");
  if (shape.hidden % shape.heads != 0) json_fail(file, d, "\"shape\": hidden is not a multiple of heads");
  std::vector<std::size_t> tokens;
  for (const std::uint64_t t : json_increasing(json_member(j, "tokens", d, file), "\"tokens\"", 1, kMaxDimension, d, file)) {
    tokens.push_back(static_cast<std::size_t>(t));
  }
  const nlohmann::json& pj = json_array_member(j, "processors", d, file);
  if (pj.empty() || pj.size() > kMaxProcessors) {
    json_fail(file, d, "\"processors\" must list 1..", kMaxProcessors, " processors, got ", pj.size());
  }
  std::vector<std::string> procs;
  for (std::size_t i = 0; i < pj.size(); ++i) {
    if (!pj[i].is_string() || pj[i].get<std::string>().empty()) {
      json_fail(file, d, "\"processors\"[", i, "] must be a non-empty string, got ", json_excerpt(pj[i]));
    }
    const std::string name = pj[i].get<std::string>();
    if (std::find(procs.begin(), procs.end(), name) != procs.end()) {
      json_fail(file, d, "processor \"", json_excerpt(pj[i]), "\" is listed twice");
    }
    procs.push_back(name);
  }
  OpLatencyProfile p = empty(shape, std::move(tokens), std::move(procs));
  p.machine = json_object_member(j, "machine", d, file);
  p.settings = json_object_member(j, "settings", d, file);
  auto proc_of = [&](const nlohmann::json& e, const char* key, const std::string& where) {
    const std::string& name = json_string_member(e, key, where, file);
    for (std::size_t i = 0; i < p.processors.size(); ++i) {
      if (p.processors[i] == name) return i;
    }
    json_fail(file, where, "\"", key, "\" names no listed processor: ", json_excerpt(e.at(key)));
  };
  const nlohmann::json& lat = json_array_member(j, "latency_us", d, file);
  for (std::size_t i = 0; i < lat.size(); ++i) {
    const std::string where = concat("op latency profile: \"latency_us\"[", i, "]");
    if (!lat[i].is_object()) json_fail(file, where, "must be a JSON object, got ", json_excerpt(lat[i]));
    json_only_keys(lat[i], {"processor", "kind", "format", "us"}, where, file);
    const std::size_t proc = proc_of(lat[i], "processor", where);
    OpNodeKind kind{};
    NumberFormat fmt{};
    if (!parse_op_node_kind(json_string_member(lat[i], "kind", where, file), kind)) {
      json_fail(file, where, "unknown node kind ", json_excerpt(lat[i].at("kind")));
    }
    if (!parse_number_format(json_string_member(lat[i], "format", where, file), fmt)) {
      json_fail(file, where, "unknown number format ", json_excerpt(lat[i].at("format")));
    }
    if (!has_format(kind, fmt)) json_fail(file, where, to_string(kind), " has no ", to_string(fmt), " format");
    std::vector<double>& slot = p.entry(proc, kind, fmt);
    if (!slot.empty()) json_fail(file, where, "a second entry for the same processor, kind and format");
    slot = json_nonnegatives(json_member(lat[i], "us", where, file), p.tokens.size(), "\"us\"", "one per tokens entry",
                             where, file);
  }
  const nlohmann::json& xf = json_array_member(j, "transfer", d, file);
  std::vector<std::vector<bool>> seen(p.processors.size(), std::vector<bool>(p.processors.size(), false));
  for (std::size_t i = 0; i < xf.size(); ++i) {
    const std::string where = concat("op latency profile: \"transfer\"[", i, "]");
    if (!xf[i].is_object()) json_fail(file, where, "must be a JSON object, got ", json_excerpt(xf[i]));
    json_only_keys(xf[i], {"from", "to", "call_us", "byte_us"}, where, file);
    const std::size_t a = proc_of(xf[i], "from", where), b = proc_of(xf[i], "to", where);
    if (a == b) json_fail(file, where, "a transfer from a processor to itself");
    if (seen[a][b]) json_fail(file, where, "a second entry for the same pair of processors");
    seen[a][b] = true;
    const nlohmann::json& call = json_member(xf[i], "call_us", where, file);
    if (version >= 4 && call.is_array()) {
      p.handoff_us[a][b] =
          json_nonnegatives(call, request_tokens.size(), "\"call_us\"", "one per request_tokens entry", where, file);
    } else {
      p.transfer[a][b].call_us = json_nonnegative(call, "\"call_us\"", where, file);
    }
    p.transfer[a][b].byte_us = json_nonnegative(json_member(xf[i], "byte_us", where, file), "\"byte_us\"", where, file);
  }
  for (std::size_t a = 0; a < p.processors.size(); ++a) {
    for (std::size_t b = 0; b < p.processors.size(); ++b) {
      if (a != b && !seen[a][b]) {
        json_fail(file, d, "no transfer cost from \"", p.processors[a], "\" to \"", p.processors[b], "\"");
      }
    }
  }
  if (version == 2) {
    const std::vector<double> us = json_nonnegatives(json_member(j, "request_us", d, file), p.processors.size(),
                                                     "\"request_us\"", "one per processor count 1..processors", d, file);
    for (std::size_t k = 0; k < us.size(); ++k) p.request_us[k] = {us[k]};
    p.request_measured = true;
  } else if (version >= 3) {
    p.request_tokens = std::move(request_tokens);
    const nlohmann::json& rows = json_array_of(json_member(j, "request_us", d, file), p.processors.size(),
                                               "\"request_us\"", "one row per processor count 1..processors", d, file);
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const std::string what = concat("\"request_us\"[", k, "]");  // of either sign from version 4
      p.request_us[k] =
          version >= 4
              ? json_finites(rows[k], p.request_tokens.size(), what, "one per request_tokens entry", d, file)
              : json_nonnegatives(rows[k], p.request_tokens.size(), what, "one per request_tokens entry", d, file);
    }
    p.request_measured = true;
  }
  return p;
}

inline OpLatencyProfile OpLatencyProfile::load(const std::filesystem::path& path) {
  using namespace op_latency_profile_detail;
  const nlohmann::json j = read_json_file(path, kMaxProfileBytes, kMaxJsonDepth, "the op latency profile");
  return from_json(j, path.string());
}

}  // namespace stile
