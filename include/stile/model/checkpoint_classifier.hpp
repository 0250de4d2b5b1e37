#pragma once
// The classification head a fine-tuned checkpoint carries (scripts/finetune_elastic.py): a linear
// layer on the model's own sentence embedding (mean pooling, then L2 normalization, as the
// sentence-transformers modules say), stored beside the BERT tensors in model.safetensors as
//   classifier.weight   [classes, hidden]   F32, F16 or BF16
//   classifier.bias     [classes]
// and its class names in config.json's "id2label" ({"0": "negative", "1": "positive"}; absent:
// "0", "1", ...). tools/train_heads --model-head puts it into a store's heads sidecar
// (model/heads_file.hpp) for every submodel shape, so the class comes from the model itself.
//
// Contract: read_checkpoint_classifier returns nullopt when the checkpoint has neither tensor (a
// plain encoder); any other departure (one tensor without the other, wrong ranks or sizes, a
// non-finite value, id2label that does not name every class once) is a stile::Error
// "stile: <file>: <problem>".
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/io/json_file.hpp"
#include "stile/model/linear_head.hpp"

namespace stile {

inline constexpr const char* kClassifierWeight = "classifier.weight";
inline constexpr const char* kClassifierBias = "classifier.bias";

// The class names from a parsed config.json object (`file` names it in errors), for `classes`
// classes: id2label's values in id order, or, when the key is absent, `unnamed` followed by the
// class id ("0", "1", ...; transformers names them "LABEL_0", "LABEL_1", ...).
inline std::vector<std::string> classifier_labels(const nlohmann::json& config, std::size_t classes,
                                                  const std::string& file, std::string_view unnamed = "") {
  std::vector<std::string> labels(classes);
  const auto it = config.is_object() ? config.find("id2label") : config.end();
  if (it == config.end() || it->is_null()) {
    for (std::size_t c = 0; c < classes; ++c) labels[c] = std::string(unnamed) + std::to_string(c);
    return labels;
  }
  if (!it->is_object() || it->size() != classes) {
    fail_in_file(file, "\"id2label\" must be an object naming each of the classifier's ", classes, " classes");
  }
  std::vector<bool> seen(classes, false);
  for (const auto& [key, value] : it->items()) {
    std::size_t id = 0;
    bool digits = !key.empty() && key.size() <= 6;
    for (const char ch : key) {
      if (ch < '0' || ch > '9') digits = false;
    }
    if (digits) id = std::stoul(key);
    if (!digits || id >= classes || seen[id]) {
      fail_in_file(file, "\"id2label\": key \"", key.substr(0, 20), "\" is not a new class id 0..", classes - 1);
    }
    if (!value.is_string() || value.get<std::string>().empty()) {
      fail_in_file(file, "\"id2label\": class ", id, " needs a non-empty name");
    }
    seen[id] = true;
    labels[id] = value.get<std::string>();
  }
  return labels;
}

// The head in an open safetensors file, for a model of hidden size `hidden` (0: any); nullopt
// when neither classifier tensor is there. `labels` names the classes (empty: "0", "1", ...).
inline std::optional<LinearHead> read_checkpoint_classifier(const SafetensorsFile& file, std::size_t hidden,
                                                            std::vector<std::string> labels = {}) {
  const TensorInfo* w = file.find(kClassifierWeight);
  const TensorInfo* b = file.find(kClassifierBias);
  if (w == nullptr && b == nullptr) return std::nullopt;
  const std::string& path = file.path();
  if (w == nullptr || b == nullptr) {
    fail_in_file(path, "has ", w == nullptr ? kClassifierBias : kClassifierWeight, " but not ",
                 w == nullptr ? kClassifierWeight : kClassifierBias);
  }
  if (w->shape.size() != 2 || w->shape[0] < 1 || w->shape[1] < 1) {
    fail_in_file(path, kClassifierWeight, " must be [classes, hidden], got rank ", w->shape.size());
  }
  const auto classes = static_cast<std::size_t>(w->shape[0]);
  const auto width = static_cast<std::size_t>(w->shape[1]);
  if (hidden != 0 && width != hidden) {
    fail_in_file(path, kClassifierWeight, " reads ", width, " values, the model's hidden size is ", hidden);
  }
  if (b->shape.size() != 1 || static_cast<std::size_t>(b->shape[0]) != classes) {
    fail_in_file(path, kClassifierBias, " must be [", classes, "] (one per row of ", kClassifierWeight, ")");
  }
  if (classes > 100000) fail_in_file(path, kClassifierWeight, " has ", classes, " classes (at most 100000)");
  LinearHead head;
  head.weight = file.to_f32(*w);
  head.bias = file.to_f32(*b);
  for (const float v : head.weight) {
    if (!std::isfinite(v)) fail_in_file(path, kClassifierWeight, " has a non-finite value");
  }
  for (const float v : head.bias) {
    if (!std::isfinite(v)) fail_in_file(path, kClassifierBias, " has a non-finite value");
  }
  if (labels.empty()) {
    for (std::size_t c = 0; c < classes; ++c) labels.push_back(std::to_string(c));
  }
  if (labels.size() != classes) {
    fail_in_file(path, "the classifier has ", classes, " classes, ", labels.size(), " class names were given");
  }
  head.labels = std::move(labels);
  head.check(width);
  return head;
}

// The head of the checkpoint directory `dir` (model.safetensors, config.json), or nullopt.
inline std::optional<LinearHead> load_checkpoint_classifier(const std::filesystem::path& dir) {
  const std::filesystem::path weights = dir / "model.safetensors", config_path = dir / "config.json";
  const SafetensorsFile file = SafetensorsFile::open(weights.string());
  const TensorInfo* w = file.find(kClassifierWeight);
  if (w == nullptr && file.find(kClassifierBias) == nullptr) return std::nullopt;
  const nlohmann::json config = read_json_file(config_path, 1 << 20, 16, "the model config");
  std::size_t hidden = 0;
  if (const auto h = config.find("hidden_size"); h != config.end() && h->is_number_unsigned()) {
    hidden = h->get<std::size_t>();
  }
  std::vector<std::string> labels;
  if (w != nullptr && w->shape.size() == 2 && w->shape[0] >= 1 && w->shape[0] <= 100000) {
    labels = classifier_labels(config, static_cast<std::size_t>(w->shape[0]), config_path.string());
  }
  return read_checkpoint_classifier(file, hidden, std::move(labels));
}

}  // namespace stile
