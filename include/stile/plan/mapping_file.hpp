#pragma once
// The mapping file: a processor and a number format for every node of a model's operator graph
// (plan/op_graph.hpp), what tools/search_mapping writes and an engine reads to execute.
//
//   {
//     "format": "stile-op-mapping", "version": 1,
//     "shape": {"layers": 6, "hidden": 384, "heads": 12, "ffn": 1536, "classes": 2, "tokens": 128},
//     "processors": ["cpu:0", "cpu:1"],
//     "nodes": [{"name": "embedding", "processor": "cpu:1", "format": "int8"}, ...],
//     "predicted": { ... free-form: latency_us, accuracy_loss, how it was searched }
//   }
//
// "nodes" lists every node of the shape's graph once, in the graph's order, by name; each
// processor is one of "processors" and each format one the node has. Anything else is refused:
// "stile: <file>: op mapping: <problem>". The CPU engine executes today what is on one processor
// and expressible as a ModelPrecision (plan/mapping_precision.hpp: to_model_precision); several
// processors need the processor runtime (hetero/).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/fnv1a.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_accuracy_model.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/schedule_emulator.hpp"

namespace stile {

inline constexpr std::string_view kOpMappingFormatName = "stile-op-mapping";
inline constexpr std::uint64_t kOpMappingVersion = 1;

struct OpMappingFile {
  OpGraphShape shape;
  std::vector<std::string> processors;
  OpMapping mapping;  // processor: index into `processors`
  nlohmann::json predicted = nlohmann::json::object();

  // One processor used by every node, or npos.
  std::size_t single_processor() const {
    if (mapping.processor.empty()) return static_cast<std::size_t>(-1);
    for (const auto p : mapping.processor) {
      if (p != mapping.processor.front()) return static_cast<std::size_t>(-1);
    }
    return mapping.processor.front();
  }

  // What a device profile timed on this mapping records as its layer compute
  // (DeviceProfile::layer_compute): "mapping <hash> on <processors>", the hash (FNV-1a, 64 bits)
  // over the processors and every node's processor and format, so the same mapping in another
  // file, or with other "predicted" notes, has the same name and any change of a node another.
  std::string layer_compute_name() const {
    std::uint64_t h = kFnv1aOffset;
    const auto mix = [&](std::string_view bytes) {
      constexpr unsigned char kSeparator = 0xff;  // ("ab", "c") differs from ("a", "bc")
      h = fnv1a(fnv1a(h, bytes.data(), bytes.size()), &kSeparator, 1);
    };
    for (const std::string& p : processors) mix(p);
    for (std::size_t n = 0; n < mapping.processor.size(); ++n) {
      mix(processors.at(mapping.processor[n]));
      mix(to_string(mapping.format[n]));
    }
    std::string joined;
    for (const std::string& p : processors) joined += (joined.empty() ? "" : ",") + p;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return concat("mapping ", hex, " on ", joined);
  }

  nlohmann::json to_json() const {
    const OpGraph g = bert_op_graph(shape);
    require(mapping.processor.size() == g.size() && mapping.format.size() == g.size(),
            "op mapping: one processor and format per node expected");
    nlohmann::json nodes = nlohmann::json::array();
    for (std::size_t n = 0; n < g.size(); ++n) {
      nodes.push_back({{"name", g.nodes[n].name},
                       {"processor", processors.at(mapping.processor[n])},
                       {"format", to_string(mapping.format[n])}});
    }
    return {{"format", kOpMappingFormatName},
            {"version", kOpMappingVersion},
            {"shape",
             {{"layers", shape.layers}, {"hidden", shape.hidden}, {"heads", shape.heads}, {"ffn", shape.ffn},
              {"classes", shape.classes}, {"tokens", shape.tokens}}},
            {"processors", processors},
            {"nodes", nodes},
            {"predicted", predicted}};
  }

  static OpMappingFile from_json(const nlohmann::json& j, const std::string& file) {
    constexpr std::string_view d = "op mapping";
    if (!j.is_object()) json_fail(file, d, "must be a JSON object, got ", json_excerpt(j));
    json_only_keys(j, {"format", "version", "shape", "processors", "nodes", "predicted"}, d, file);
    json_check_format(j, kOpMappingFormatName, "an op mapping", kOpMappingVersion, "", d, file);
    OpMappingFile m;
    m.shape = op_accuracy_model_detail::read_shape(j, d, file, true);
    const nlohmann::json& pj = json_array_member(j, "processors", d, file);
    if (pj.empty() || pj.size() > 255) json_fail(file, d, "\"processors\" must list 1..255 processors");
    for (std::size_t i = 0; i < pj.size(); ++i) {
      if (!pj[i].is_string() || pj[i].get<std::string>().empty()) {
        json_fail(file, d, "\"processors\"[", i, "] must be a non-empty string, got ", json_excerpt(pj[i]));
      }
      for (const std::string& seen : m.processors) {
        if (seen == pj[i].get<std::string>()) json_fail(file, d, "processor ", json_excerpt(pj[i]), " is listed twice");
      }
      m.processors.push_back(pj[i].get<std::string>());
    }
    m.predicted = json_object_member(j, "predicted", d, file);
    const OpGraph g = bert_op_graph(m.shape);
    const nlohmann::json& nodes = json_array_member(j, "nodes", d, file);
    if (nodes.size() != g.size()) {
      json_fail(file, d, "\"nodes\" has ", nodes.size(), " entries, the shape's graph ", g.size(), " nodes");
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const std::string where = concat("op mapping: \"nodes\"[", i, "]");
      const nlohmann::json& e = nodes[i];
      if (!e.is_object()) json_fail(file, where, "must be a JSON object, got ", json_excerpt(e));
      json_only_keys(e, {"name", "processor", "format"}, where, file);
      if (json_string_member(e, "name", where, file) != g.nodes[i].name) {
        json_fail(file, where, "is ", json_excerpt(e.at("name")), ", expected \"", g.nodes[i].name, "\" (graph order)");
      }
      const std::string& proc = json_string_member(e, "processor", where, file);
      std::size_t q = m.processors.size();
      for (std::size_t k = 0; k < m.processors.size() && q == m.processors.size(); ++k) {
        if (m.processors[k] == proc) q = k;
      }
      if (q == m.processors.size()) json_fail(file, where, "\"processor\" names no listed processor: ", json_excerpt(e.at("processor")));
      NumberFormat f{};
      if (!parse_number_format(json_string_member(e, "format", where, file), f)) {
        json_fail(file, where, "unknown number format ", json_excerpt(e.at("format")));
      }
      if (!has_format(g.nodes[i].kind, f)) json_fail(file, where, g.nodes[i].name, " has no ", to_string(f), " format");
      m.mapping.processor.push_back(static_cast<std::uint8_t>(q));
      m.mapping.format.push_back(f);
    }
    return m;
  }

  void save(const std::filesystem::path& path) const { write_file_atomically(path, to_json().dump(1) + "\n"); }
  static OpMappingFile load(const std::filesystem::path& path) {
    return from_json(read_json_file(path, std::uintmax_t{64} << 20, 16, "the op mapping"), path.string());
  }
};

// Mapping file `m` (read from `file`) is for a model of config `c`; otherwise "stile: <file>: ...".
inline void check_mapping_shape(const OpMappingFile& m, const EncoderConfig& c, const std::string& file) {
  if (m.shape.layers != c.num_layers || m.shape.hidden != c.hidden || m.shape.heads != c.num_heads ||
      m.shape.ffn != c.intermediate) {
    throw Error(concat("stile: ", file, ": the mapping is for ", m.shape.layers, " layers, hidden ", m.shape.hidden,
                       ", ", m.shape.heads, " heads, ffn ", m.shape.ffn, "; the model has ", c.num_layers,
                       " layers, hidden ", c.hidden, ", ", c.num_heads, " heads, ffn ", c.intermediate));
  }
}

// The ModelPrecision the CPU engine runs for mapping file `m` (read from `file`) on a model of
// config `c`: the mapping must be for c's shape, on one processor, and expressible
// (plan/mapping_precision.hpp); otherwise "stile: <file>: <why>".
inline ModelPrecision model_precision_of(const OpMappingFile& m, const EncoderConfig& c, const std::string& file) {
  check_mapping_shape(m, c, file);
  if (m.single_processor() == static_cast<std::size_t>(-1)) {
    throw Error(concat("stile: ", file, ": the mapping spreads nodes over several processors; running it needs the "
                       "processor runtime (hetero/mapped_forward.hpp, embed --mapping), the CPU engine runs single-processor mappings"));
  }
  const OpGraph g = bert_op_graph(m.shape);
  std::string why;
  if (!expressible_as_model_precision(g, m.mapping.format, &why)) {
    throw Error(concat("stile: ", file, ": not a ModelPrecision: ", why));
  }
  return to_model_precision(g, m.mapping.format);
}

}  // namespace stile
