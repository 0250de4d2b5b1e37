#pragma once
// From a classifier's logits to the scores users read, the way the references choose the function:
//   transformers' text-classification pipeline (pipelines/text_classification.py postprocess):
//     problem_type "regression"                                   -> the logits as they are
//     problem_type "multi_label_classification", or 1 label       -> sigmoid of each
//     problem_type "single_label_classification", or 2+ labels    -> softmax
//   sentence-transformers' CrossEncoder (cross_encoder/model.py): the activation it saved
//     ("torch.nn.modules.activation.Sigmoid", say); without one, Sigmoid for 1 label, else Identity.
// Any other problem_type or activation is refused by name.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"

namespace stile {

enum class ScoreFunction : std::uint8_t { kNone, kSigmoid, kSoftmax, kTanh };

inline const char* to_string(ScoreFunction f) {
  switch (f) {
    case ScoreFunction::kNone: return "none";
    case ScoreFunction::kSigmoid: return "sigmoid";
    case ScoreFunction::kSoftmax: return "softmax";
    case ScoreFunction::kTanh: return "tanh";
  }
  return "?";
}

// The scores of one row of logits (sums in double).
inline std::vector<double> class_scores(ScoreFunction f, std::span<const float> logits) {
  std::vector<double> s(logits.begin(), logits.end());
  switch (f) {
    case ScoreFunction::kNone: break;
    case ScoreFunction::kSigmoid:
      for (double& v : s) v = 1.0 / (1.0 + std::exp(-v));
      break;
    case ScoreFunction::kTanh:
      for (double& v : s) v = std::tanh(v);
      break;
    case ScoreFunction::kSoftmax: {
      if (s.empty()) break;
      const double top = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& v : s) sum += (v = std::exp(v - top));
      for (double& v : s) v /= sum;
      break;
    }
  }
  return s;
}

// The text-classification pipeline's function for a config.json (`file` names it) of `labels` labels.
inline ScoreFunction pipeline_score_function(const nlohmann::json& config, std::size_t labels, std::string_view file) {
  const auto it = config.find("problem_type");
  if (it != config.end() && !it->is_null()) {
    if (!it->is_string()) fail_in_file(file, "\"problem_type\" must be a string");
    const std::string& p = it->get_ref<const std::string&>();
    if (p == "regression") return ScoreFunction::kNone;
    if (p == "multi_label_classification") return ScoreFunction::kSigmoid;
    if (p != "single_label_classification") {
      fail_in_file(file, "\"problem_type\": \"", p.substr(0, 40),
                   "\" is not regression, single_label_classification or multi_label_classification");
    }
    return labels == 1 ? ScoreFunction::kSigmoid : ScoreFunction::kSoftmax;
  }
  return labels == 1 ? ScoreFunction::kSigmoid : ScoreFunction::kSoftmax;
}

// The CrossEncoder's activation: config_sentence_transformers.json's "activation_fn" (`st_config`,
// read from `st_file`; nullptr when the directory has none), else config.json's
// "sentence_transformers"."activation_fn" or older "sbert_ce_default_activation_function"; with
// none, Sigmoid for 1 label, else Identity.
inline ScoreFunction cross_encoder_score_function(const nlohmann::json& config, std::string_view config_file,
                                                  const nlohmann::json* st_config, std::string_view st_file,
                                                  std::size_t labels) {
  std::string path;
  std::string_view file, key;
  const auto take = [&](const nlohmann::json& object, std::string_view name, std::string_view in, std::string_view k) {
    const auto it = object.find(name);
    if (!path.empty() || it == object.end() || it->is_null()) return;
    if (!it->is_string()) fail_in_file(in, "\"", k, "\" must be a string");
    path = it->get<std::string>(), file = in, key = k;
  };
  if (st_config != nullptr && st_config->is_object()) take(*st_config, "activation_fn", st_file, "activation_fn");
  if (const auto st = config.find("sentence_transformers"); st != config.end() && st->is_object()) {
    take(*st, "activation_fn", config_file, "sentence_transformers.activation_fn");
  }
  take(config, "sbert_ce_default_activation_function", config_file, "sbert_ce_default_activation_function");
  if (path.empty()) return labels == 1 ? ScoreFunction::kSigmoid : ScoreFunction::kNone;
  const std::string_view name = std::string_view(path).substr(path.rfind('.') + 1);
  const bool torch = path.starts_with("torch.");
  if (torch && name == "Sigmoid") return ScoreFunction::kSigmoid;
  if (torch && name == "Identity") return ScoreFunction::kNone;
  if (torch && name == "Tanh") return ScoreFunction::kTanh;
  fail_in_file(file, "\"", key, "\": \"", path.substr(0, 80),
               "\" is not implemented (torch.nn Sigmoid, Identity or Tanh)");
}

}  // namespace stile
