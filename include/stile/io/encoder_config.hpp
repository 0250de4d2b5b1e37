#pragma once
// Reads a Hugging Face BERT config.json into the runtime model dimensions stile needs, and checks
// them: every dimension present and positive, heads dividing the hidden size, and only what the
// engine implements (GELU activation, absolute position embeddings), so an unsupported model is a
// clear error at load time instead of wrong numbers later.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"

namespace stile {

struct EncoderConfig {
  std::size_t hidden = 0;                   // hidden_size
  std::size_t num_layers = 0;               // num_hidden_layers
  std::size_t num_heads = 0;                // num_attention_heads
  std::size_t intermediate = 0;             // intermediate_size (FFN width)
  std::size_t vocab_size = 0;               // vocab_size
  std::size_t max_position_embeddings = 0;  // longest sequence the position table covers
  std::size_t type_vocab_size = 0;          // number of token types (segments)
  float layer_norm_eps = 1e-12f;            // layer_norm_eps
  std::string hidden_act = "gelu";          // hidden_act

  std::size_t head_dim() const noexcept { return num_heads == 0 ? 0 : hidden / num_heads; }
};

namespace encoder_config_detail {

// Far above any BERT-family model (the largest vocabularies are ~250k), low enough that the
// products the engine forms from these numbers (vocab x hidden, layers x hidden x intermediate)
// cannot overflow 64 bits.
inline constexpr std::uint64_t kMaxDimension = std::uint64_t{1} << 24;

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
  config.hidden = read_dimension(root, "hidden_size", display_name);
  config.num_layers = read_dimension(root, "num_hidden_layers", display_name);
  config.num_heads = read_dimension(root, "num_attention_heads", display_name);
  config.intermediate = read_dimension(root, "intermediate_size", display_name);
  config.vocab_size = read_dimension(root, "vocab_size", display_name);
  config.max_position_embeddings = read_dimension(root, "max_position_embeddings", display_name);
  config.type_vocab_size = read_dimension(root, "type_vocab_size", display_name);

  if (config.hidden % config.num_heads != 0) {
    fail(display_name, "hidden_size ", config.hidden, " is not divisible by num_attention_heads ", config.num_heads);
  }

  const auto eps = root.find("layer_norm_eps");
  if (eps == root.end()) fail(display_name, "missing key \"layer_norm_eps\"");
  if (!eps->is_number()) fail(display_name, "\"layer_norm_eps\" must be a number, got ", eps->dump());
  const double eps_value = eps->get<double>();
  // Positive and small: LayerNorm divides by sqrt(variance + eps).
  if (!std::isfinite(eps_value) || eps_value <= 0.0 || eps_value >= 1.0 || static_cast<float>(eps_value) == 0.0f) {
    fail(display_name, "\"layer_norm_eps\" must be a positive float below 1, got ", eps->dump());
  }
  config.layer_norm_eps = static_cast<float>(eps_value);

  const auto act = root.find("hidden_act");
  if (act == root.end()) fail(display_name, "missing key \"hidden_act\"");
  if (!act->is_string()) fail(display_name, "\"hidden_act\" must be a string, got ", act->dump());
  config.hidden_act = act->get<std::string>();
  // HF's "gelu" is the exact erf form; "gelu_new"/"gelu_pytorch_tanh" are the tanh approximation
  // and would need their own kernel.
  if (config.hidden_act != "gelu") {
    fail(display_name, "hidden_act \"", config.hidden_act, "\" is not supported (only \"gelu\")");
  }

  // Optional in HF configs (absent means "absolute"); relative position schemes change attention.
  const auto position = root.find("position_embedding_type");
  if (position != root.end() && !(position->is_string() && *position == "absolute")) {
    fail(display_name, "position_embedding_type ", position->dump(), " is not supported (only \"absolute\")");
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
