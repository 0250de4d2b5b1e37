#pragma once
// A linear classifier over a pooled sentence embedding (logits = W e + b), for inference, and its
// JSON form. Training one (multinomial logistic regression, L-BFGS) and scoring it on labelled
// embeddings is offline work: calibrate/train_head.hpp.
//
// JSON of one head: {"labels": [...], "weight": [[row of class 0], ...], "bias": [...]}; every
// number finite. The file that holds heads (many, keyed by submodel shape) is model/heads_file.hpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/strict_json.hpp"

namespace stile {

// A linear classifier over the pooled embedding: logits = W e + b.
struct LinearHead {
  std::vector<std::string> labels;  // one per class
  std::vector<float> weight;        // [classes x hidden], row-major
  std::vector<float> bias;          // [classes]

  std::size_t classes() const noexcept { return labels.size(); }
  std::size_t hidden() const noexcept { return labels.empty() ? 0 : weight.size() / labels.size(); }

  // Throws stile::Error unless the sizes agree (and with the model's hidden size when nonzero).
  void check(std::size_t model_hidden = 0) const {
    require(!labels.empty(), "linear head: no classes");
    require(weight.size() % labels.size() == 0 && !weight.empty() && bias.size() == labels.size(),
            "linear head: weight must be [classes x hidden] and bias [classes] (" + std::to_string(labels.size()) +
                " classes, " + std::to_string(weight.size()) + " weights, " + std::to_string(bias.size()) + " biases)");
    require(model_hidden == 0 || hidden() == model_hidden, "linear head: hidden size " + std::to_string(hidden()) +
                                                               ", the model's is " + std::to_string(model_hidden));
  }

  // W e + b, accumulated in double.
  std::vector<double> logits(std::span<const float> embedding) const {
    const std::size_t d = hidden();
    require(embedding.size() == d && d != 0, "linear head: the embedding has " + std::to_string(embedding.size()) +
                                                 " values, the head's hidden size is " + std::to_string(d));
    std::vector<double> z(classes());
    for (std::size_t c = 0; c < z.size(); ++c) {
      double sum = bias[c];
      const float* w = weight.data() + c * d;
      for (std::size_t i = 0; i < d; ++i) sum += double(w[i]) * double(embedding[i]);
      z[c] = sum;
    }
    return z;
  }

  // The argmax of the logits (the first on a tie).
  std::size_t predict(std::span<const float> embedding) const {
    const std::vector<double> z = logits(embedding);
    return static_cast<std::size_t>(std::max_element(z.begin(), z.end()) - z.begin());
  }

  // log softmax(logits)[label]: the log-probability the head gives `label`.
  double log_probability(std::span<const float> embedding, std::size_t label) const {
    require(label < classes(), "linear head: label " + std::to_string(label) + " is outside the head's classes");
    const std::vector<double> z = logits(embedding);
    const double top = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (const double v : z) sum += std::exp(v - top);
    return z[label] - top - std::log(sum);
  }
};

// Accuracy and mean log-probability of the true label over n embeddings: what
// calibrate/train_head.hpp's score_head measures, and what an importance profile records
// (plan/importance.hpp).
struct HeadScore {
  std::size_t correct = 0, total = 0;
  double mean_log_prob = 0;
  double accuracy() const noexcept { return total == 0 ? 0.0 : double(correct) / double(total); }
};

// --- JSON ----------------------------------------------------------------------------------------

inline nlohmann::json head_to_json(const LinearHead& head) {
  head.check();
  const std::size_t d = head.hidden();
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t c = 0; c < head.classes(); ++c) {
    rows.push_back(std::vector<float>(head.weight.begin() + static_cast<std::ptrdiff_t>(c * d),
                                      head.weight.begin() + static_cast<std::ptrdiff_t>((c + 1) * d)));
  }
  return nlohmann::json{{"labels", head.labels}, {"weight", std::move(rows)}, {"bias", head.bias}};
}

// Validates a head's JSON; errors are "stile: <file>: <where>: <problem>" (where: e.g. "head \"gold\"").
inline LinearHead head_from_json(const nlohmann::json& j, std::string_view file, std::string_view where) {
  auto fail = [&](auto... parts) { fail_in_file(file, where, ": ", parts...); };
  if (!j.is_object()) fail("must be a JSON object, got ", json_excerpt(j));
  for (const auto& [key, value] : j.items()) {
    if (key != "labels" && key != "weight" && key != "bias") fail("unknown key \"", key, "\"");
  }
  for (const char* key : {"labels", "weight", "bias"}) {
    if (!j.contains(key)) fail("missing \"", std::string_view(key), "\"");
  }
  auto finite = [&](const nlohmann::json& v, std::string_view what) {
    if (!v.is_number()) fail(what, " must be a finite number, got ", json_excerpt(v));
    const double x = v.get<double>();
    // A float is what the head holds: a value beyond its range would become infinity.
    if (!std::isfinite(x) || std::abs(x) > double(std::numeric_limits<float>::max())) {
      fail(what, " must be a finite float, got ", json_excerpt(v));
    }
    return static_cast<float>(x);
  };
  LinearHead head;
  const nlohmann::json& labels = j.at("labels");
  if (!labels.is_array() || labels.size() < 2) fail("\"labels\" must be an array of at least 2 names");
  for (const auto& l : labels) {
    if (!l.is_string()) fail("\"labels\" must hold strings, got ", json_excerpt(l));
    head.labels.push_back(l.get<std::string>());
  }
  const std::size_t C = head.labels.size();
  const nlohmann::json& weight = j.at("weight");
  if (!weight.is_array() || weight.size() != C) fail("\"weight\" must be an array of ", C, " rows (one per label)");
  std::size_t d = 0;
  for (std::size_t c = 0; c < C; ++c) {
    const nlohmann::json& row = weight[c];
    if (!row.is_array() || row.empty()) fail("\"weight\"[", c, "] must be a non-empty array of numbers");
    if (c == 0) d = row.size();
    if (row.size() != d) fail("\"weight\"[", c, "] has ", row.size(), " values, row 0 has ", d);
    for (std::size_t i = 0; i < d; ++i) head.weight.push_back(finite(row[i], concat("\"weight\"[", c, "][", i, "]")));
  }
  const nlohmann::json& bias = j.at("bias");
  if (!bias.is_array() || bias.size() != C) fail("\"bias\" must be an array of ", C, " numbers (one per label)");
  for (std::size_t c = 0; c < C; ++c) head.bias.push_back(finite(bias[c], concat("\"bias\"[", c, "]")));
  return head;
}

}  // namespace stile
