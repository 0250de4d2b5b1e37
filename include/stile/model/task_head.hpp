#pragma once
// The head a fine-tuned checkpoint carries on top of its encoder, read from its own tensors the way
// transformers builds it (modeling_<family>.py), as one description: which hidden states it reads
// (the first token, the mean of the tokens, or every token), then a few linear layers, each with an
// activation and optionally a LayerNorm after it; the last layer's outputs are the logits.
//
//   task                      family        layers (tensor names; "p." the base model's prefix)
//   sequence classification   bert          p.pooler.dense + tanh, classifier
//                             distilbert    pre_classifier + ReLU, classifier
//                             roberta,      classifier.dense + tanh, classifier.out_proj
//                             mpnet
//                             electra       classifier.dense + GELU, classifier.out_proj
//                             deberta-v2    pooler.dense + pooler_hidden_act, classifier
//                             modernbert    head.dense + classifier_activation + head.norm, classifier;
//                                           the first token or the mean (classifier_pooling)
//   token classification      every family  classifier on each token (ModernBERT: its head first)
//   masked LM (SPLADE)        bert          cls.predictions.transform.{dense, LayerNorm} + hidden_act,
//                                           then the decoder (the word embeddings when tied) + bias
//                             distilbert    vocab_transform + activation, vocab_layer_norm, then
//                                           vocab_projector (tied: the word embeddings)
// Every read tensor's shape is checked against the config; a head the family does not have here
// (an ELECTRA masked LM, say) is refused by name, never guessed.
//
// Thread safety: a const TaskHead may be used from many threads at once.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/checkpoint_names.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/model/pooling.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/linear.hpp"

namespace stile {

enum class HeadTask : std::uint8_t { kSequenceClassification, kTokenClassification, kMaskedLm };

inline const char* to_string(HeadTask t) {
  switch (t) {
    case HeadTask::kSequenceClassification: return "sequence classification";
    case HeadTask::kTokenClassification: return "token classification";
    case HeadTask::kMaskedLm: return "masked LM";
  }
  return "?";
}

// transformers' ACT2FN names a head may use.
enum class HeadActivation : std::uint8_t { kIdentity, kTanh, kRelu, kGelu, kGeluTanh, kSilu, kSigmoid };

// The activation ACT2FN[name] builds; any other name is refused naming `file` and `key`.
inline HeadActivation head_activation(std::string_view name, std::string_view file, std::string_view key) {
  if (name == "gelu") return HeadActivation::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return HeadActivation::kGeluTanh;
  if (name == "relu") return HeadActivation::kRelu;
  if (name == "tanh") return HeadActivation::kTanh;
  if (name == "silu" || name == "swish") return HeadActivation::kSilu;
  if (name == "sigmoid") return HeadActivation::kSigmoid;
  if (name == "linear") return HeadActivation::kIdentity;
  fail_in_file(file, "\"", key, "\": activation \"", name.substr(0, 40),
               "\" is not implemented (gelu, gelu_new, gelu_pytorch_tanh, relu, tanh, silu, swish, sigmoid, linear)");
}

inline void activate_inplace(HeadActivation a, float* x, std::size_t n) {
  if (a == HeadActivation::kGelu) return gelu_inplace(x, n);  // torch's exact (erf) GELU
  for (std::size_t i = 0; i < n; ++i) {
    const double z = x[i];
    switch (a) {
      case HeadActivation::kIdentity:
      case HeadActivation::kGelu: break;
      case HeadActivation::kTanh: x[i] = static_cast<float>(std::tanh(z)); break;
      case HeadActivation::kRelu: x[i] = z > 0.0 ? x[i] : 0.0f; break;
      case HeadActivation::kGeluTanh: {
        const double k = std::sqrt(2.0 / 3.141592653589793);
        x[i] = static_cast<float>(0.5 * z * (1.0 + std::tanh(k * (z + 0.044715 * z * z * z))));
        break;
      }
      case HeadActivation::kSilu: x[i] = static_cast<float>(z / (1.0 + std::exp(-z))); break;
      case HeadActivation::kSigmoid: x[i] = static_cast<float>(1.0 / (1.0 + std::exp(-z))); break;
    }
  }
}

// One linear layer of a head: y = act(W x + b), then LayerNorm when it has one.
struct HeadLayer {
  std::size_t in = 0, out = 0;
  LinearWeights weight;     // [out x in], fp32
  std::vector<float> bias;  // [out]; zeros when the layer has none
  HeadActivation activation = HeadActivation::kIdentity;
  std::vector<float> norm_gamma, norm_beta;  // [out] each; empty: no LayerNorm
  float norm_eps = 0.0f;
};

struct TaskHead {
  HeadTask task = HeadTask::kSequenceClassification;
  // The rows the layers read: one pooled row (the first token: Pooling::kCls; ModernBERT's mean:
  // Pooling::kMean), or nullopt: every token.
  std::optional<Pooling> pooling = Pooling::kCls;
  std::vector<HeadLayer> layers;  // the last one's outputs are the logits

  [[nodiscard]] std::size_t outputs() const noexcept { return layers.empty() ? 0 : layers.back().out; }
  [[nodiscard]] std::size_t rows(std::size_t tokens) const noexcept { return pooling ? 1 : tokens; }

  // The logits of one sequence from its last hidden states [tokens x hidden]: out receives
  // rows(tokens) x outputs() floats.
  void apply(const float* hidden, std::size_t tokens, std::size_t hidden_size, std::vector<float>& out,
             ThreadPool* pool = nullptr) const {
    require(!layers.empty() && tokens > 0 && hidden_size == layers.front().in,
            "TaskHead::apply: a sequence of at least one token of the head's hidden size");
    const std::size_t n = rows(tokens);
    std::vector<float> x;
    if (pooling) {
      x.resize(hidden_size);
      pool_tokens(std::span<const float>(hidden, tokens * hidden_size), tokens, hidden_size, *pooling, x);
    } else {
      x.assign(hidden, hidden + tokens * hidden_size);
    }
    for (const HeadLayer& layer : layers) {
      std::vector<float> y(n * layer.out);
      linear(n, x.data(), layer.in, layer.weight.view(), y.data(), layer.out, epilogue::Bias{.bias = layer.bias.data()},
             pool);
      activate_inplace(layer.activation, y.data(), y.size());
      if (!layer.norm_gamma.empty()) {
        layer_norm_rows(y.data(), n, layer.out, layer.out, layer.norm_gamma.data(), layer.norm_beta.data(),
                        layer.norm_eps);
      }
      x = std::move(y);
    }
    out = std::move(x);
  }
};

namespace task_head_detail {

// The tensor `name` as fp32, every value finite, of shape `shape` (a 0 in it: any size there, set
// to the stored one).
inline std::vector<float> read_tensor(const SafetensorsFile& file, const std::string& name,
                                      std::vector<std::size_t>& shape) {
  const TensorInfo* t = file.find(name);
  if (t == nullptr) fail_in_file(file.path(), "the head's tensor ", name, " is missing");
  bool fits = t->shape.size() == shape.size();
  for (std::size_t i = 0; fits && i < shape.size(); ++i) {
    fits = t->shape[i] >= 1 && (shape[i] == 0 || static_cast<std::size_t>(t->shape[i]) == shape[i]);
  }
  if (!fits) {
    std::string want;
    for (const std::size_t n : shape) want += (want.empty() ? "" : ", ") + (n == 0 ? "outputs" : std::to_string(n));
    fail_in_file(file.path(), name, " must be [", want, "]");
  }
  for (std::size_t i = 0; i < shape.size(); ++i) shape[i] = static_cast<std::size_t>(t->shape[i]);
  std::vector<float> v = file.to_f32(*t);
  for (const float x : v) {
    if (!std::isfinite(x)) fail_in_file(file.path(), name, " has a non-finite value");
  }
  return v;
}

inline std::vector<float> read_vector(const SafetensorsFile& file, const std::string& name, std::size_t size) {
  std::vector<std::size_t> shape{size};
  return read_tensor(file, name, shape);
}

// A layer from `<name>.weight` ([out x in]; out 0: as stored) and `<name>.bias` (when `bias`).
// `weight_name` replaces `<name>.weight` (a decoder tied to the word embeddings).
inline HeadLayer read_layer(const SafetensorsFile& file, const std::string& name, std::size_t in, std::size_t out,
                            bool bias, HeadActivation activation, std::string weight_name = {},
                            std::string bias_name = {}) {
  HeadLayer layer;
  if (weight_name.empty()) weight_name = name + ".weight";
  if (bias_name.empty()) bias_name = name + ".bias";
  std::vector<std::size_t> shape{out, in};
  const std::vector<float> w = read_tensor(file, weight_name, shape);
  out = shape[0];
  layer.in = in, layer.out = out;
  layer.weight = LinearWeights::make(DenseF32(w.data(), out, in), LinearFormat::kF32, {}, weight_name);
  layer.bias = bias ? read_vector(file, bias_name, out) : std::vector<float>(out, 0.0f);
  layer.activation = activation;
  return layer;
}

inline void add_norm(const SafetensorsFile& file, HeadLayer& layer, const std::string& name, bool bias, float eps) {
  layer.norm_gamma = read_vector(file, name + ".weight", layer.out);
  layer.norm_beta = bias ? read_vector(file, name + ".bias", layer.out) : std::vector<float>(layer.out, 0.0f);
  layer.norm_eps = eps;
}

// ModernBERT's prediction head (head.dense, classifier_activation, head.norm), shared by its tasks.
inline HeadLayer modernbert_head(const SafetensorsFile& file, const EncoderConfig& c, const nlohmann::json& config,
                                 std::string_view config_file) {
  const HeadActivation act = head_activation(json_optional_string(config, "classifier_activation", "gelu", config_file),
                                             config_file, "classifier_activation");
  HeadLayer head = read_layer(file, "head.dense", c.hidden, c.hidden,
                              json_optional_bool(config, "classifier_bias", false, config_file), act);
  add_norm(file, head, "head.norm", c.norm_bias, c.layer_norm_eps);
  return head;
}

}  // namespace task_head_detail

// The head of `task` in the checkpoint `file` of an encoder described by `c` (its config.json parsed
// as `config`, read from `config_file`). The classifier's outputs are as stored (the caller checks
// them against num_labels and id2label).
inline TaskHead read_task_head(HeadTask task, const SafetensorsFile& file, const EncoderConfig& c,
                               const nlohmann::json& config, std::string_view config_file) {
  using namespace task_head_detail;
  TaskHead head;
  head.task = task;
  const std::size_t d = c.hidden;
  const EncoderFamily f = c.family;
  const auto classifier = [&](const std::string& name) {
    head.layers.push_back(read_layer(file, name, d, 0, true, HeadActivation::kIdentity));
  };
  if (task == HeadTask::kTokenClassification) {
    head.pooling = std::nullopt;
    if (f == EncoderFamily::kModernBert) head.layers.push_back(modernbert_head(file, c, config, config_file));
    classifier("classifier");
    return head;
  }
  if (task == HeadTask::kSequenceClassification) {
    switch (f) {
      case EncoderFamily::kBert: {
        // The pooler is the base model's (bert.pooler); a file of the head's tensors alone (a shard
        // store's head sidecar) has no word table to find the prefix by.
        std::string pooler = CheckpointNames::of(c, file).prefix + "pooler.dense";
        if (file.find(pooler + ".weight") == nullptr && file.find("bert.pooler.dense.weight") != nullptr) {
          pooler = "bert.pooler.dense";
        }
        head.layers.push_back(read_layer(file, pooler, d, d, true, HeadActivation::kTanh));
        classifier("classifier");
        break;
      }
      case EncoderFamily::kDistilBert:
        head.layers.push_back(read_layer(file, "pre_classifier", d, d, true, HeadActivation::kRelu));
        classifier("classifier");
        break;
      case EncoderFamily::kRoberta:
      case EncoderFamily::kMpnet:
      case EncoderFamily::kElectra:
        // ELECTRA's head takes GELU where BERT's takes tanh (modeling_electra.py says the authors did).
        head.layers.push_back(read_layer(file, "classifier.dense", d, d, true,
                                         f == EncoderFamily::kElectra ? HeadActivation::kGelu : HeadActivation::kTanh));
        classifier("classifier.out_proj");
        break;
      case EncoderFamily::kDebertaV2: {
        if (const auto it = config.find("pooler_hidden_size");
            it != config.end() && !(it->is_number_unsigned() && it->get<std::size_t>() == d)) {
          fail_in_file(config_file, "\"pooler_hidden_size\" must equal the hidden size ", d,
                       " (the context pooler reads the first token's hidden state)");
        }
        head.layers.push_back(
            read_layer(file, "pooler.dense", d, d, true,
                       head_activation(json_optional_string(config, "pooler_hidden_act", "gelu", config_file),
                                       config_file, "pooler_hidden_act")));
        classifier("classifier");
        break;
      }
      case EncoderFamily::kModernBert: {
        const std::string pooling = json_optional_string(config, "classifier_pooling", "cls", config_file);
        if (pooling != "cls" && pooling != "mean") {
          fail_in_file(config_file, "\"classifier_pooling\": \"", pooling.substr(0, 40), "\" is not cls or mean");
        }
        head.pooling = pooling == "cls" ? Pooling::kCls : Pooling::kMean;
        head.layers.push_back(modernbert_head(file, c, config, config_file));
        classifier("classifier");
        break;
      }
    }
    return head;
  }
  // The masked-LM head: a transform, then the decoder over the vocabulary.
  head.pooling = std::nullopt;
  const std::string word = CheckpointNames::of(c, file).word;
  const auto decoder = [&](const std::string& weight, const std::string& bias_name) {
    head.layers.push_back(read_layer(file, "", d, c.vocab_size, true, HeadActivation::kIdentity,
                                     file.find(weight) != nullptr ? weight : word, bias_name));
  };
  const HeadActivation act =
      head_activation(c.hidden_act, config_file, f == EncoderFamily::kDistilBert ? "activation" : "hidden_act");
  if (f == EncoderFamily::kBert) {
    HeadLayer transform = read_layer(file, "cls.predictions.transform.dense", d, d, true, act);
    add_norm(file, transform, "cls.predictions.transform.LayerNorm", true, c.layer_norm_eps);
    head.layers.push_back(std::move(transform));
    decoder("cls.predictions.decoder.weight",
            file.find("cls.predictions.bias") != nullptr ? "cls.predictions.bias" : "cls.predictions.decoder.bias");
  } else if (f == EncoderFamily::kDistilBert) {
    HeadLayer transform = read_layer(file, "vocab_transform", d, d, true, act);
    add_norm(file, transform, "vocab_layer_norm", true, 1e-12f);
    head.layers.push_back(std::move(transform));
    decoder("vocab_projector.weight", "vocab_projector.bias");
  } else {
    fail_in_file(file.path(), "a masked-LM head for the ", to_string(f),
                 " family is not implemented (bert and distilbert are)");
  }
  return head;
}

}  // namespace stile
