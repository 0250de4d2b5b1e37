#pragma once
// Reads a Hugging Face encoder's config.json into one description of the model stile runs (its
// family, dimensions, position offset, token types, embedding width, activation), and checks it:
// every dimension present and positive, heads dividing the hidden size, and only what the kernels
// implement (exact GELU, absolute position embeddings), so an unsupported model is a clear error
// at load time instead of wrong numbers later.
//
// Families (model_type; when absent, the class in "architectures"; when neither, BERT):
//   bert                             the reference layout.
//   distilbert                       its own keys (dim, n_layers, n_heads, hidden_dim, activation;
//                                    LayerNorm eps fixed at 1e-12), no token types.
//   roberta, xlm-roberta, camembert  BERT's layer; positions start at pad_token_id + 1 (the
//                                    reference's create_position_ids_from_input_ids).
//   electra                          BERT's layer; embeddings of width embedding_size, projected
//                                    to hidden_size after their LayerNorm when the two differ.
//   mpnet                            BERT's layer with a relative position bias on the attention
//                                    scores (relative_attention_num_buckets, one table shared by
//                                    every layer); positions as RoBERTa's with padding index 1; no
//                                    token types.
// Any other model_type (deberta, modernbert, albert, ...) is refused by name.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"

namespace stile {

// The layouts stile runs. RoBERTa stands for XLM-RoBERTa and CamemBERT too: the same layer, the
// same positions (EncoderConfig::model_type keeps the name config.json gave).
enum class EncoderFamily : std::uint8_t { kBert, kDistilBert, kRoberta, kElectra, kMpnet };

inline const char* to_string(EncoderFamily f) {
  switch (f) {
    case EncoderFamily::kBert: return "bert";
    case EncoderFamily::kDistilBert: return "distilbert";
    case EncoderFamily::kRoberta: return "roberta";
    case EncoderFamily::kElectra: return "electra";
    case EncoderFamily::kMpnet: return "mpnet";
  }
  return "?";
}

struct EncoderConfig {
  EncoderFamily family = EncoderFamily::kBert;
  std::string model_type = "bert";          // as config.json names it ("xlm-roberta", ...)
  std::size_t hidden = 0;                   // hidden_size (DistilBERT: dim)
  std::size_t num_layers = 0;               // num_hidden_layers (n_layers)
  std::size_t num_heads = 0;                // num_attention_heads (n_heads)
  std::size_t intermediate = 0;             // intermediate_size, the FFN width (hidden_dim)
  std::size_t vocab_size = 0;               // vocab_size
  std::size_t max_position_embeddings = 0;  // rows of the position table (max_positions() are usable)
  std::size_t position_offset = 0;          // row of a sequence's first token: 0, RoBERTa pad_token_id + 1
  std::size_t type_vocab_size = 0;          // number of token types (segments); 0: none (DistilBERT)
  std::size_t embedding_size = 0;           // width of the embeddings (ELECTRA); 0: hidden
  float layer_norm_eps = 1e-12f;            // layer_norm_eps
  std::string hidden_act = "gelu";          // hidden_act (DistilBERT: activation)
  // MPNet: rows of the relative position bias table (relative_attention_num_buckets); 0: none.
  std::size_t relative_attention_buckets = 0;

  std::size_t head_dim() const noexcept { return num_heads == 0 ? 0 : hidden / num_heads; }
  // The width of the embedding sum and its LayerNorm; projected to `hidden` when it differs.
  std::size_t embedding_dim() const noexcept { return embedding_size == 0 ? hidden : embedding_size; }
  // The longest sequence the position table covers (tokens, specials included).
  std::size_t max_positions() const noexcept {
    return max_position_embeddings > position_offset ? max_position_embeddings - position_offset : 0;
  }
  // RoBERTa's padding index (position_offset - 1): a token with this id takes this position row.
  bool has_padding_position() const noexcept { return position_offset > 0; }
  std::size_t padding_idx() const noexcept { return position_offset - 1; }
  // What the family's layer adds to BERT's (a position term inside attention), or "" when its layer
  // is BERT's: the paths that run BERT's layer only (the multi-device layer, the mapped forward)
  // refuse a family naming this.
  const char* layer_difference() const noexcept {
    return family == EncoderFamily::kMpnet ? "a relative position bias in attention" : "";
  }
};

namespace encoder_config_detail {

// Far above any BERT-family model (the largest vocabularies are ~250k), low enough that the
// products the engine forms from these numbers (vocab x hidden, layers x hidden x intermediate)
// cannot overflow 64 bits.
inline constexpr std::uint64_t kMaxDimension = std::uint64_t{1} << 24;

inline constexpr const char* kSupportedTypes = "bert, distilbert, roberta, xlm-roberta, camembert, electra, mpnet";

// MPNet buckets relative positions into 32 buckets whatever its config says (the reference's
// MPNetEncoder.compute_position_bias passes num_buckets=32): the table needs 32 rows at least.
inline constexpr std::size_t kMpnetBuckets = 32;

template <class... Parts>
[[noreturn]] void fail(std::string_view file, const Parts&... parts) {
  fail_in_file(file, parts...);
}

inline std::size_t read_dimension(const nlohmann::json& root, const char* key, const std::string& file) {
  const auto it = root.find(key);
  if (it == root.end()) fail(file, "missing key \"", key, "\"");
  if (!it->is_number_integer()) fail(file, "\"", key, "\" must be an integer, got ", it->dump());
  if (it->is_number_unsigned()) {
    const auto value = it->get<std::uint64_t>();
    if (value == 0) fail(file, "\"", key, "\" must be positive, got 0");
    if (value > kMaxDimension) fail(file, "\"", key, "\" is ", value, ", larger than the limit ", kMaxDimension);
    return static_cast<std::size_t>(value);
  }
  fail(file, "\"", key, "\" must be positive, got ", it->dump());
}

// The family of a model_type, or false for one stile does not run.
inline bool family_of_type(std::string_view type, EncoderFamily& family) {
  const bool roberta = type == "roberta" || type == "xlm-roberta" || type == "camembert";
  if (type != "bert" && type != "distilbert" && type != "electra" && type != "mpnet" && !roberta) return false;
  family = roberta               ? EncoderFamily::kRoberta
           : type == "distilbert" ? EncoderFamily::kDistilBert
           : type == "electra"    ? EncoderFamily::kElectra
           : type == "mpnet"      ? EncoderFamily::kMpnet
                                  : EncoderFamily::kBert;
  return true;
}

// The model_type a class in "architectures" belongs to ("ElectraForPreTraining": "electra"), or ""
// for any other class. A class is its family's name followed by "Model" or "For...", so the
// relatives with other layers ("RobertaPreLayerNormModel", "BertGenerationEncoder") are not taken.
inline std::string type_of_architecture(std::string_view arch) {
  static constexpr std::pair<const char*, const char*> kBases[] = {
      {"Bert", "bert"},          {"DistilBert", "distilbert"}, {"Roberta", "roberta"},
      {"XLMRoberta", "xlm-roberta"}, {"Camembert", "camembert"},   {"Electra", "electra"},
      {"MPNet", "mpnet"}};
  for (const auto& [base, type] : kBases) {
    const std::string_view b = base;
    if (!arch.starts_with(b)) continue;
    const std::string_view rest = arch.substr(b.size());
    if (rest == "Model" || rest.starts_with("For")) return type;
  }
  return "";
}

// model_type (required to be a supported one when present), else the first class of
// "architectures", else "bert" (configs written before model_type existed, and stile's own).
inline std::string read_model_type(const nlohmann::json& root, const std::string& file, EncoderFamily& family) {
  if (const auto type = root.find("model_type"); type != root.end()) {
    if (!type->is_string()) fail(file, "\"model_type\" must be a string, got ", type->dump());
    const std::string name = type->get<std::string>();
    if (!family_of_type(name, family)) {
      fail(file, "model_type \"", name, "\" is not supported (supported: ", kSupportedTypes, ")");
    }
    return name;
  }
  if (const auto archs = root.find("architectures"); archs != root.end() && !archs->is_null()) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      fail(file, "\"architectures\" must be a non-empty array of class names, got ", archs->dump());
    }
    const std::string arch = (*archs)[0].get<std::string>();
    const std::string name = type_of_architecture(arch);
    if (name.empty() || !family_of_type(name, family)) {
      fail(file, "architectures \"", arch, "\" (no model_type) is not a supported encoder (supported: ",
           kSupportedTypes, ")");
    }
    return name;
  }
  family = EncoderFamily::kBert;
  return "bert";
}

inline float read_layer_norm_eps(const nlohmann::json& root, const std::string& file) {
  const auto eps = root.find("layer_norm_eps");
  if (eps == root.end()) fail(file, "missing key \"layer_norm_eps\"");
  if (!eps->is_number()) fail(file, "\"layer_norm_eps\" must be a number, got ", eps->dump());
  const double eps_value = eps->get<double>();
  // Positive and small: LayerNorm divides by sqrt(variance + eps).
  if (!std::isfinite(eps_value) || eps_value <= 0.0 || eps_value >= 1.0 || static_cast<float>(eps_value) == 0.0f) {
    fail(file, "\"layer_norm_eps\" must be a positive float below 1, got ", eps->dump());
  }
  return static_cast<float>(eps_value);
}

inline std::string read_activation(const nlohmann::json& root, const char* key, const std::string& file) {
  const auto act = root.find(key);
  if (act == root.end()) fail(file, "missing key \"", key, "\"");
  if (!act->is_string()) fail(file, "\"", key, "\" must be a string, got ", act->dump());
  std::string name = act->get<std::string>();
  // HF's "gelu" is the exact erf form; "gelu_new"/"gelu_pytorch_tanh" are the tanh approximation
  // and "relu" another function: each would need its own kernel.
  if (name != "gelu") fail(file, key, " \"", name, "\" is not supported (only \"gelu\")");
  return name;
}

// RoBERTa's padding index: pad_token_id, 1 when absent (RobertaConfig's default).
inline std::size_t read_pad_token_id(const nlohmann::json& root, const std::string& file) {
  const auto pad = root.find("pad_token_id");
  if (pad == root.end()) return 1;
  if (!pad->is_number_unsigned()) {
    fail(file, "\"pad_token_id\" must be a non-negative integer (RoBERTa's positions start after it), got ",
         pad->dump());
  }
  const auto value = pad->get<std::uint64_t>();
  if (value >= kMaxDimension) fail(file, "\"pad_token_id\" is ", value, ", larger than the limit ", kMaxDimension);
  return static_cast<std::size_t>(value);
}

}  // namespace encoder_config_detail

// Parses config.json text; display_name names the file in error messages.
inline EncoderConfig parse_encoder_config(std::string_view json_text, const std::string& display_name) {
  using namespace encoder_config_detail;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::exception& e) {
    fail(display_name, "is not valid JSON: ", e.what());
  }
  if (!root.is_object()) fail(display_name, "is not a JSON object");

  EncoderConfig config;
  config.model_type = read_model_type(root, display_name, config.family);
  if (config.family == EncoderFamily::kDistilBert) {
    config.hidden = read_dimension(root, "dim", display_name);
    config.num_layers = read_dimension(root, "n_layers", display_name);
    config.num_heads = read_dimension(root, "n_heads", display_name);
    config.intermediate = read_dimension(root, "hidden_dim", display_name);
    config.vocab_size = read_dimension(root, "vocab_size", display_name);
    config.max_position_embeddings = read_dimension(root, "max_position_embeddings", display_name);
    config.type_vocab_size = 0;  // DistilBERT has no token-type embeddings
    if (config.hidden % config.num_heads != 0) {
      fail(display_name, "dim ", config.hidden, " is not divisible by n_heads ", config.num_heads);
    }
    config.layer_norm_eps = 1e-12f;  // fixed in DistilBERT's modules
    config.hidden_act = read_activation(root, "activation", display_name);
    return config;
  }

  config.hidden = read_dimension(root, "hidden_size", display_name);
  config.num_layers = read_dimension(root, "num_hidden_layers", display_name);
  config.num_heads = read_dimension(root, "num_attention_heads", display_name);
  config.intermediate = read_dimension(root, "intermediate_size", display_name);
  config.vocab_size = read_dimension(root, "vocab_size", display_name);
  config.max_position_embeddings = read_dimension(root, "max_position_embeddings", display_name);
  if (config.family == EncoderFamily::kMpnet) {
    // No token types; positions after padding index 1, fixed in MPNetEmbeddings whatever
    // pad_token_id says; the relative position bias table.
    config.type_vocab_size = 0;
    config.position_offset = 2;
    config.relative_attention_buckets = read_dimension(root, "relative_attention_num_buckets", display_name);
    if (config.relative_attention_buckets < kMpnetBuckets) {
      fail(display_name, "relative_attention_num_buckets ", config.relative_attention_buckets,
           " is below the 32 buckets MPNet's relative positions fall in (MPNetEncoder.compute_position_bias)");
    }
    if (config.max_position_embeddings < config.position_offset + 1) {
      fail(display_name, "max_position_embeddings ", config.max_position_embeddings,
           " leaves no position for a token (mpnet positions start at padding index 1 + 1 = 2)");
    }
  } else {
    config.type_vocab_size = read_dimension(root, "type_vocab_size", display_name);
  }
  if (config.family == EncoderFamily::kElectra) {
    config.embedding_size = read_dimension(root, "embedding_size", display_name);
  }

  if (config.hidden % config.num_heads != 0) {
    fail(display_name, "hidden_size ", config.hidden, " is not divisible by num_attention_heads ", config.num_heads);
  }
  config.layer_norm_eps = read_layer_norm_eps(root, display_name);
  config.hidden_act = read_activation(root, "hidden_act", display_name);

  // Optional in HF configs (absent means "absolute"); relative position schemes change attention.
  const auto position = root.find("position_embedding_type");
  if (position != root.end() && !(position->is_string() && *position == "absolute")) {
    fail(display_name, "position_embedding_type ", position->dump(), " is not supported (only \"absolute\")");
  }

  if (config.family == EncoderFamily::kRoberta) {
    // Positions are padding_idx + 1 + t (create_position_ids_from_input_ids): the table needs a
    // row past the offset for one token at least.
    config.position_offset = read_pad_token_id(root, display_name) + 1;
    if (config.max_position_embeddings < config.position_offset + 1) {
      fail(display_name, "max_position_embeddings ", config.max_position_embeddings, " leaves no position for a token (",
           config.model_type, " positions start at pad_token_id + 1 = ", config.position_offset, ")");
    }
  }
  return config;
}

// Reads and validates a Hugging Face config.json.
inline EncoderConfig read_encoder_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) encoder_config_detail::fail(path, "cannot open the model config");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) encoder_config_detail::fail(path, "cannot read the model config");
  return parse_encoder_config(text, path);
}

}  // namespace stile
