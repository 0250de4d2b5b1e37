#pragma once
// The sentence-transformers modules of a model directory: modules.json's list, and the modules
// that turn the encoder's hidden states into the sentence embedding (Pooling, Dense, Normalize),
// read from their folders as sentence-transformers writes them and applied to one sequence.
//
//   modules.json   Transformer first (its "path": the encoder's directory, "" for the model
//                  directory), then Pooling, then any number of Dense, then at most one
//                  Normalize. Any other module (LayerNorm, WordWeights, a Router, ...) would change
//                  the embedding, so it is refused by name. Missing: a plain Hugging Face
//                  checkpoint, as sentence-transformers treats one: the encoder in the directory,
//                  pooling from 1_Pooling/ when there, no Dense, no Normalize.
//   Pooling        <dir>/config.json: "pooling_mode", a mode or a list of modes whose outputs are
//                  concatenated in that order, or the older pooling_mode_* flags (concatenated in
//                  sentence-transformers' fixed order: cls, max, mean, mean_sqrt_len_tokens,
//                  weightedmean, lasttoken); "include_prompt" (false: a prompt's tokens take no
//                  part); "embedding_dimension" (or "word_embedding_dimension"), checked against
//                  the encoder. Missing: mean pooling.
//   Dense          <dir>/config.json: in_features, out_features, bias, activation_function
//                  (torch.nn's Identity, Tanh, ReLU, GELU, Sigmoid or SiLU), use_residual;
//                  <dir>/model.safetensors: linear.weight [out x in], linear.bias, and
//                  residual.weight [out x in] for a residual when in != out. y = act(W x + b) (+ x,
//                  or + R x).
//   Normalize      x / max(||x||, 1e-12).
// Every file is validated; a bad one throws stile::Error naming it and the field.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/model/pooling.hpp"

namespace stile {

// A Pooling module: the modes whose outputs are concatenated, and whether a prompt is pooled.
struct SentencePooling {
  std::vector<Pooling> modes{Pooling::kMean};
  bool include_prompt = true;
};

// A Dense module: y = activation(weight x + bias), plus x (in == out) or residual x when use_residual.
struct DenseModule {
  enum class Activation { kIdentity, kTanh, kReLU, kGelu, kSigmoid, kSilu };
  std::size_t in = 0;
  std::size_t out = 0;
  std::vector<float> weight;    // [out x in], row-major
  std::vector<float> bias;      // [out], empty without bias
  std::vector<float> residual;  // [out x in]: the residual's projection when in != out, else empty
  bool use_residual = false;
  Activation activation = Activation::kTanh;

  // out floats from in floats (sums in double, rounded once).
  void apply(std::span<const float> x, std::span<float> y) const {
    require(x.size() == in && y.size() == out, "DenseModule::apply: sizes do not match");
    for (std::size_t o = 0; o < out; ++o) {
      double z = bias.empty() ? 0.0 : bias[o];
      for (std::size_t i = 0; i < in; ++i) z += double(weight[o * in + i]) * x[i];
      double r = 0.0;
      if (use_residual && residual.empty()) {
        r = x[o];
      } else if (use_residual) {
        for (std::size_t i = 0; i < in; ++i) r += double(residual[o * in + i]) * x[i];
      }
      y[o] = static_cast<float>(activate(z) + r);
    }
  }

 private:
  [[nodiscard]] double activate(double z) const {
    switch (activation) {
      case Activation::kIdentity: return z;
      case Activation::kTanh: return std::tanh(z);
      case Activation::kReLU: return z > 0.0 ? z : 0.0;
      case Activation::kGelu: return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));  // torch's exact GELU
      case Activation::kSigmoid: return 1.0 / (1.0 + std::exp(-z));
      case Activation::kSilu: return z / (1.0 + std::exp(-z));
    }
    return z;
  }
};

// What follows the encoder: pooling, Dense modules, Normalize.
struct SentenceModules {
  SentencePooling pooling;
  std::vector<DenseModule> dense;
  bool normalize = false;

  // The embedding's length for an encoder of `hidden` features.
  [[nodiscard]] std::size_t dim(std::size_t hidden) const noexcept {
    return dense.empty() ? pooling.modes.size() * hidden : dense.back().out;
  }

  // One sequence's embedding from its hidden states ([tokens x hidden]); the first prompt_tokens
  // tokens are a prompt (left out of the pooling when include_prompt is false).
  [[nodiscard]] std::vector<float> embed(std::span<const float> rows, std::size_t tokens, std::size_t hidden,
                                         std::size_t prompt_tokens = 0) const {
    std::vector<float> x(pooling.modes.size() * hidden);
    const std::size_t skip = pooling.include_prompt ? 0 : prompt_tokens;
    for (std::size_t m = 0; m < pooling.modes.size(); ++m) {
      pool_tokens(rows, tokens, hidden, pooling.modes[m], std::span<float>(x).subspan(m * hidden, hidden), skip);
    }
    for (const DenseModule& d : dense) {
      std::vector<float> y(d.out);
      d.apply(x, y);
      x = std::move(y);
    }
    if (normalize) l2_normalize(x);
    return x;
  }
};

// Where the module a modules.json entry (`module`, read from `modules_json`) lives: its "path"
// relative to the model directory `dir` (none or "": `dir` itself), which must stay inside it.
inline std::filesystem::path sentence_module_dir(const std::filesystem::path& dir, const nlohmann::json& module,
                                                 const std::filesystem::path& modules_json) {
  const auto path = module.find("path");
  if (path == module.end() || path->is_null()) return dir;
  if (!path->is_string()) fail_in_file(modules_json.string(), "a module's \"path\" must be a string, got ", path->dump());
  const std::filesystem::path relative = path->get<std::string>();
  const std::filesystem::path normal = relative.lexically_normal();
  if (relative.is_absolute() || (!normal.empty() && *normal.begin() == "..")) {
    fail_in_file(modules_json.string(), "module path ", path->dump(), " is not inside the model directory");
  }
  return relative.empty() ? dir : dir / relative;
}

namespace sentence_modules_detail {

namespace fs = std::filesystem;

inline constexpr const char* kModulesFile = "modules.json";
inline constexpr const char* kModuleConfigFile = "config.json";  // inside a module's folder
inline constexpr const char* kModuleWeightsFile = "model.safetensors";
inline constexpr const char* kDefaultPoolingDir = "1_Pooling";

template <class... Parts>
[[noreturn]] void fail(const fs::path& file, const Parts&... parts) {
  fail_in_file(file.string(), parts...);
}

// The parsed JSON in file, or nothing when the file does not exist.
inline std::optional<nlohmann::json> read_optional_json(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(file, "cannot read");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(file, "is not valid JSON: ", e.what());
  }
}

// The JSON object in file, or nothing when the file does not exist.
inline std::optional<nlohmann::json> read_optional_json_object(const fs::path& file) {
  std::optional<nlohmann::json> root = read_optional_json(file);
  if (root && !root->is_object()) fail(file, "is not a JSON object");
  return root;
}

// The value of an optional boolean key, or fallback when absent (or null: Hugging Face writes
// null for "not set").
inline bool read_bool(const nlohmann::json& object, const char* key, bool fallback, const fs::path& file) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(file, "\"", key, "\" must be true or false, got ", it->dump());
  return it->get<bool>();
}

inline std::size_t read_size(const nlohmann::json& object, const char* key, const fs::path& file) {
  const auto it = object.find(key);
  if (it == object.end()) fail(file, "missing \"", key, "\"");
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() == 0 || it->get<std::uint64_t>() > (1u << 20)) {
    fail(file, "\"", key, "\" must be a positive integer (at most 2^20), got ", it->dump());
  }
  return static_cast<std::size_t>(it->get<std::uint64_t>());
}

// The pooling modes by sentence-transformers' names; the older flags in the order the reference
// concatenates them.
inline constexpr std::pair<std::string_view, Pooling> kPoolingNames[] = {
    {"cls", Pooling::kCls},
    {"max", Pooling::kMax},
    {"mean", Pooling::kMean},
    {"mean_sqrt_len_tokens", Pooling::kMeanSqrtLen},
    {"weightedmean", Pooling::kWeightedMean},
    {"lasttoken", Pooling::kLastToken}};
inline constexpr std::pair<std::string_view, Pooling> kPoolingFlags[] = {
    {"pooling_mode_cls_token", Pooling::kCls},
    {"pooling_mode_max_tokens", Pooling::kMax},
    {"pooling_mode_mean_tokens", Pooling::kMean},
    {"pooling_mode_mean_sqrt_len_tokens", Pooling::kMeanSqrtLen},
    {"pooling_mode_weightedmean_tokens", Pooling::kWeightedMean},
    {"pooling_mode_lasttoken", Pooling::kLastToken}};

inline Pooling pooling_mode(const nlohmann::json& name, const fs::path& file) {
  if (name.is_string()) {
    for (const auto& [text, mode] : kPoolingNames) {
      if (name.get_ref<const std::string&>() == text) return mode;
    }
  }
  fail(file, "pooling_mode ", name.dump(),
       " is not one of \"cls\", \"max\", \"mean\", \"mean_sqrt_len_tokens\", \"weightedmean\", \"lasttoken\"");
}

inline SentencePooling read_pooling(const fs::path& pooling_dir, std::size_t hidden) {
  const fs::path file = pooling_dir / kModuleConfigFile;
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  SentencePooling pooling;
  if (!root) return pooling;  // sentence-transformers' default for a plain checkpoint
  for (const char* key : {"embedding_dimension", "word_embedding_dimension"}) {
    if (const auto dim = root->find(key); dim != root->end()) {
      if (!dim->is_number_unsigned() || dim->get<std::uint64_t>() != hidden) {
        fail(file, key, " ", dim->dump(), " is not the encoder's hidden size ", hidden);
      }
    }
  }
  pooling.include_prompt = read_bool(*root, "include_prompt", true, file);
  // "pooling_mode", when given, decides (the reference drops the flags then).
  if (const auto mode = root->find("pooling_mode"); mode != root->end() && !mode->is_null()) {
    pooling.modes.clear();
    if (mode->is_array()) {
      if (mode->empty()) fail(file, "pooling_mode is an empty list");
      for (const nlohmann::json& m : *mode) pooling.modes.push_back(pooling_mode(m, file));
    } else {
      pooling.modes.push_back(pooling_mode(*mode, file));
    }
    return pooling;
  }
  std::vector<Pooling> flagged;
  for (const auto& [key, mode] : kPoolingFlags) {
    if (read_bool(*root, key.data(), false, file)) flagged.push_back(mode);
  }
  for (const auto& item : root->items()) {
    const std::string& key = item.key();  // not a structured binding: clang 14 cannot capture one
    const bool known = std::any_of(std::begin(kPoolingFlags), std::end(kPoolingFlags),
                                   [&](const auto& flag) { return flag.first == key; });
    if (key.starts_with("pooling_mode_") && !known) fail(file, "\"", key, "\" is not a pooling mode stile knows");
  }
  if (!flagged.empty()) pooling.modes = std::move(flagged);  // none set: mean, as the reference
  return pooling;
}

// A module reads and writes the pooled embedding; one that works on another feature (the token
// embeddings of a multi-vector model) is refused.
inline void check_feature_names(const nlohmann::json& config, const fs::path& file) {
  for (const char* key : {"module_input_name", "module_output_name"}) {
    if (const auto name = config.find(key); name != config.end() && !name->is_null() && *name != "sentence_embedding") {
      fail(file, key, " ", name->dump(), " is not supported (only \"sentence_embedding\")");
    }
  }
}

inline DenseModule::Activation dense_activation(const nlohmann::json& name, const fs::path& file) {
  using A = DenseModule::Activation;
  // sentence-transformers writes the class's full name (torch.nn.modules.activation.Tanh); the
  // short torch.nn.Tanh form reads the same.
  static constexpr std::pair<std::string_view, A> kClasses[] = {
      {"Identity", A::kIdentity}, {"Tanh", A::kTanh},       {"ReLU", A::kReLU},
      {"GELU", A::kGelu},         {"Sigmoid", A::kSigmoid}, {"SiLU", A::kSilu}};
  if (name.is_string()) {
    const std::string& full = name.get_ref<const std::string&>();
    const std::string_view cls = std::string_view(full).substr(full.rfind('.') + 1);
    if (full.starts_with("torch.nn.")) {
      for (const auto& [text, activation] : kClasses) {
        if (cls == text) return activation;
      }
    }
  }
  fail(file, "activation_function ", name.dump(),
       " is not supported (torch.nn's Identity, Tanh, ReLU, GELU, Sigmoid or SiLU)");
}

// A [rows x cols] (or [rows] when cols is 0) float tensor of a module's weights file.
inline std::vector<float> read_dense_tensor(const SafetensorsFile& file, const std::string& name, std::size_t rows,
                                            std::size_t cols) {
  const TensorInfo* t = file.find(name);
  if (t == nullptr) fail(file.path(), "has no tensor \"", name, "\"");
  const std::vector<std::int64_t> want = cols == 0 ? std::vector<std::int64_t>{std::int64_t(rows)}
                                                   : std::vector<std::int64_t>{std::int64_t(rows), std::int64_t(cols)};
  if (t->shape != want) {
    std::string shape;
    for (const std::int64_t d : t->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    fail(file.path(), "tensor \"", name, "\" has shape [", shape, "], expected [", rows,
         cols == 0 ? "" : concat(", ", cols), "]");
  }
  return file.to_f32(*t);
}

inline DenseModule read_dense(const fs::path& dense_dir, std::size_t in_features) {
  const fs::path file = dense_dir / kModuleConfigFile;
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) fail(file, "is missing (a Dense module's settings)");
  DenseModule dense;
  dense.in = read_size(*root, "in_features", file);
  dense.out = read_size(*root, "out_features", file);
  if (dense.in != in_features) fail(file, "in_features ", dense.in, " is not the previous module's output size ", in_features);
  const bool bias = read_bool(*root, "bias", true, file);
  dense.use_residual = read_bool(*root, "use_residual", false, file);
  if (const auto act = root->find("activation_function"); act != root->end() && !act->is_null()) {
    dense.activation = dense_activation(*act, file);
  }
  check_feature_names(*root, file);
  const fs::path weights = dense_dir / kModuleWeightsFile;
  std::error_code ec;
  if (!fs::exists(weights, ec)) {
    if (fs::exists(dense_dir / "pytorch_model.bin", ec)) {
      fail(dense_dir / "pytorch_model.bin", "is not read (a pickle); save the module with safe_serialization");
    }
    fail(weights, "is missing (the Dense module's weights)");
  }
  const SafetensorsFile tensors = SafetensorsFile::open(weights.string());
  dense.weight = read_dense_tensor(tensors, "linear.weight", dense.out, dense.in);
  if (bias) dense.bias = read_dense_tensor(tensors, "linear.bias", dense.out, 0);
  if (dense.use_residual && dense.in != dense.out) {
    dense.residual = read_dense_tensor(tensors, "residual.weight", dense.out, dense.in);
  }
  return dense;
}

// Normalize's config.json (written by newer sentence-transformers) may only say what it already does.
inline void check_normalize(const fs::path& normalize_dir) {
  const fs::path file = normalize_dir / kModuleConfigFile;
  if (const std::optional<nlohmann::json> root = read_optional_json_object(file)) check_feature_names(*root, file);
}

}  // namespace sentence_modules_detail

// A model directory's modules: where the encoder is, and what follows it.
struct SentenceLayout {
  std::filesystem::path encoder_dir;
  std::filesystem::path pooling_dir;
  std::vector<std::filesystem::path> dense_dirs;
  bool normalize = false;
};

// Reads modules.json (see the top of this file); the modules' own files are read by
// read_sentence_modules once the encoder's hidden size is known.
inline SentenceLayout read_sentence_layout(const std::filesystem::path& dir) {
  using namespace sentence_modules_detail;
  const fs::path file = dir / kModulesFile;
  const std::optional<nlohmann::json> root = read_optional_json(file);
  if (!root) return {dir, dir / kDefaultPoolingDir, {}, false};  // a plain Hugging Face checkpoint
  if (!root->is_array()) fail(file, "must be a JSON array of modules");

  SentenceLayout layout;
  bool has_transformer = false;
  bool has_pooling = false;
  for (std::size_t i = 0; i < root->size(); ++i) {
    const nlohmann::json& module = (*root)[i];
    if (!module.is_object()) fail(file, "module ", i, " is not a JSON object");
    const auto type_it = module.find("type");
    if (type_it == module.end() || !type_it->is_string()) fail(file, "module ", i, " has no string \"type\"");
    const std::string type = type_it->get<std::string>();
    // "sentence_transformers.models.Pooling", "sentence_transformers.base.modules.dense.Dense":
    // the class name is what matters.
    const std::string_view name = std::string_view(type).substr(type.rfind('.') + 1);
    if (!type.starts_with("sentence_transformers.")) {
      fail(file, "module type \"", type, "\" is not a sentence_transformers module");
    }
    // The pipeline runs in this order; a module out of it would mean a different computation.
    if (name == "Transformer") {
      if (i != 0) fail(file, "the Transformer module must come first");
      layout.encoder_dir = sentence_module_dir(dir, module, file);
      has_transformer = true;
    } else if (name == "Pooling") {
      if (!has_transformer || has_pooling) fail(file, "the Pooling module must come once, right after the Transformer");
      layout.pooling_dir = sentence_module_dir(dir, module, file);
      has_pooling = true;
    } else if (name == "Dense") {
      if (!has_pooling || layout.normalize) fail(file, "a Dense module must come after Pooling and before Normalize");
      layout.dense_dirs.push_back(sentence_module_dir(dir, module, file));
    } else if (name == "Normalize") {
      if (!has_pooling || layout.normalize) fail(file, "the Normalize module must come once, after Pooling");
      check_normalize(sentence_module_dir(dir, module, file));
      layout.normalize = true;
    } else {
      fail(file, "module \"", type, "\" is not supported (only Transformer, Pooling, Dense, Normalize)");
    }
  }
  if (!has_transformer) fail(file, "has no sentence_transformers Transformer module");
  if (!has_pooling) fail(file, "has no sentence_transformers Pooling module");
  return layout;
}

// The modules after an encoder of `hidden` features, from their folders.
inline SentenceModules read_sentence_modules(const SentenceLayout& layout, std::size_t hidden) {
  using namespace sentence_modules_detail;
  SentenceModules modules;
  modules.pooling = read_pooling(layout.pooling_dir, hidden);
  std::size_t width = modules.pooling.modes.size() * hidden;
  for (const fs::path& dir : layout.dense_dirs) {
    modules.dense.push_back(read_dense(dir, width));
    width = modules.dense.back().out;
  }
  modules.normalize = layout.normalize;
  return modules;
}

}  // namespace stile
