#pragma once
// The additive accuracy model of the precision search (plan/precision_search.hpp): a mapping's
// predicted accuracy loss is the sum over nodes of loss[node][format] (fp32: 0). Fitted on
// measured configurations by calibrate/op_accuracy.hpp (one unit of nodes in one format at a
// time, the rest fp32; the loss is 1 - mean cosine of the sentence embeddings to fp32's on the
// calibration rows of SST-2's train.tsv, never dev), and stored in a small file:
//
//   {
//     "format": "stile-op-accuracy-model", "version": 1,
//     "shape": {"layers": 6, "hidden": 384, "heads": 12, "ffn": 1536, "classes": 2},
//     "metric": "...", "calibration": { ... free-form: rows, split seed, model },
//     "loss": [{"node": "layer0.qkv", "format": "int8", "loss": 1.2e-5}, ...]
//   }
//
// "loss" holds exactly one entry per node of the shape's graph and format it has other than
// fp32 (finite, >= 0); anything else is refused: "stile: <file>: op accuracy model: <problem>".
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/plan/op_graph.hpp"

namespace stile {

inline constexpr std::string_view kOpAccuracyModelFormatName = "stile-op-accuracy-model";
inline constexpr std::uint64_t kOpAccuracyModelVersion = 1;

struct OpAccuracyModel {
  OpGraphShape shape;  // tokens unused (0): the loss of a format does not depend on them here
  std::vector<std::array<double, kNumberFormats>> loss;  // [node][format]
  std::string metric;
  nlohmann::json calibration = nlohmann::json::object();

  double predict(const std::vector<NumberFormat>& formats) const {
    require(formats.size() == loss.size(), "accuracy model: one format per node expected");
    double s = 0;
    for (std::size_t i = 0; i < formats.size(); ++i) s += loss[i][static_cast<std::size_t>(formats[i])];
    return s;
  }

  nlohmann::json to_json() const {
    const OpGraph g = bert_op_graph(with_tokens(shape));
    nlohmann::json entries = nlohmann::json::array();
    for (std::size_t n = 0; n < g.size(); ++n) {
      for (const NumberFormat f : formats_of(g.nodes[n].kind)) {
        if (f == NumberFormat::kF32) continue;
        entries.push_back(
            {{"node", g.nodes[n].name}, {"format", to_string(f)}, {"loss", loss[n][static_cast<std::size_t>(f)]}});
      }
    }
    return {{"format", kOpAccuracyModelFormatName},
            {"version", kOpAccuracyModelVersion},
            {"shape",
             {{"layers", shape.layers}, {"hidden", shape.hidden}, {"heads", shape.heads}, {"ffn", shape.ffn},
              {"classes", shape.classes}}},
            {"metric", metric},
            {"calibration", calibration},
            {"loss", entries}};
  }

  static OpAccuracyModel from_json(const nlohmann::json& j, const std::string& file);
  void save(const std::filesystem::path& path) const { write_file_atomically(path, to_json().dump(1) + "\n"); }
  static OpAccuracyModel load(const std::filesystem::path& path);

  static OpGraphShape with_tokens(OpGraphShape s) {
    s.tokens = 1;
    return s;
  }
};

namespace op_accuracy_model_detail {
inline constexpr std::uintmax_t kMaxBytes = std::uintmax_t{64} << 20;
inline constexpr int kMaxJsonDepth = 16;
// Graphs past these are not BERTs this reader will build a graph for (a damaged count must not
// make it allocate gigabytes).
inline constexpr std::uint64_t kMaxLayers = 1024, kMaxHeads = 1024, kMaxWidth = std::uint64_t{1} << 20;

inline OpGraphShape read_shape(const nlohmann::json& j, std::string_view where, const std::string& file, bool tokens) {
  const nlohmann::json& sj = json_object_member(j, "shape", where, file);
  if (tokens) json_only_keys(sj, {"layers", "hidden", "heads", "ffn", "classes", "tokens"}, where, file);
  else json_only_keys(sj, {"layers", "hidden", "heads", "ffn", "classes"}, where, file);
  auto dim = [&](const char* key, std::uint64_t hi) {
    const std::uint64_t v = json_whole(json_member(sj, key, where, file), concat("\"shape\".\"", key, "\""), where, file);
    if (v < 1 || v > hi) json_fail(file, where, "\"shape\".\"", key, "\" = ", v, " is outside 1..", hi);
    return static_cast<std::size_t>(v);
  };
  OpGraphShape s;
  s.layers = dim("layers", kMaxLayers);
  s.hidden = dim("hidden", kMaxWidth);
  s.heads = dim("heads", kMaxHeads);
  s.ffn = dim("ffn", kMaxWidth);
  s.classes = dim("classes", kMaxWidth);
  if (tokens) s.tokens = dim("tokens", kMaxWidth);
  if (s.hidden % s.heads != 0) json_fail(file, where, "\"shape\": hidden is not a multiple of heads");
  return s;
}
}  // namespace op_accuracy_model_detail

inline OpAccuracyModel OpAccuracyModel::from_json(const nlohmann::json& j, const std::string& file) {
  using namespace op_accuracy_model_detail;
  constexpr std::string_view d = "op accuracy model";
  if (!j.is_object()) json_fail(file, d, "must be a JSON object, got ", json_excerpt(j));
  json_only_keys(j, {"format", "version", "shape", "metric", "calibration", "loss"}, d, file);
  json_check_format(j, kOpAccuracyModelFormatName, "an op accuracy model", kOpAccuracyModelVersion, "", d, file);
  OpAccuracyModel m;
  m.shape = read_shape(j, d, file, false);
  m.metric = json_string_member(j, "metric", d, file);
  m.calibration = json_object_member(j, "calibration", d, file);
  const OpGraph g = bert_op_graph(with_tokens(m.shape));
  m.loss.assign(g.size(), std::array<double, kNumberFormats>{});
  std::vector<std::array<bool, kNumberFormats>> seen(g.size(), std::array<bool, kNumberFormats>{});
  const nlohmann::json& entries = json_array_member(j, "loss", d, file);
  std::size_t expected = 0;
  for (const OpNode& n : g.nodes) expected += formats_of(n.kind).size() - 1;
  if (entries.size() != expected) {
    json_fail(file, d, "\"loss\" has ", entries.size(), " entries, expected ", expected,
              " (one per node and format other than fp32)");
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string where = concat("op accuracy model: \"loss\"[", i, "]");
    const nlohmann::json& e = entries[i];
    if (!e.is_object()) json_fail(file, where, "must be a JSON object, got ", json_excerpt(e));
    json_only_keys(e, {"node", "format", "loss"}, where, file);
    const std::string& name = json_string_member(e, "node", where, file);
    std::size_t node = g.size();
    for (std::size_t k = 0; k < g.size() && node == g.size(); ++k) {
      if (g.nodes[k].name == name) node = k;
    }
    if (node == g.size()) json_fail(file, where, "no node ", json_excerpt(e.at("node")), " in the shape's graph");
    NumberFormat f{};
    if (!parse_number_format(json_string_member(e, "format", where, file), f)) {
      json_fail(file, where, "unknown number format ", json_excerpt(e.at("format")));
    }
    if (f == NumberFormat::kF32 || !has_format(g.nodes[node].kind, f)) {
      json_fail(file, where, name, " has no ", to_string(f), " format with a loss (fp32's is 0)");
    }
    bool& s = seen[node][static_cast<std::size_t>(f)];
    if (s) json_fail(file, where, "a second entry for ", name, " in ", to_string(f));
    s = true;
    m.loss[node][static_cast<std::size_t>(f)] = json_nonnegative(json_member(e, "loss", where, file), "\"loss\"", where, file);
  }
  return m;
}

inline OpAccuracyModel OpAccuracyModel::load(const std::filesystem::path& path) {
  using namespace op_accuracy_model_detail;
  return from_json(read_json_file(path, kMaxBytes, kMaxJsonDepth, "the op accuracy model"), path.string());
}

}  // namespace stile
