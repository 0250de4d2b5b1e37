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
//   modernbert                       pre-LayerNorm layers (layer 0 without its attention norm; a
//                                    final norm), LayerNorms and linear layers with or without
//                                    biases (norm_bias, attention_bias, mlp_bias), a gated FFN
//                                    (GEGLU), no position table: rotary positions on Q and K
//                                    (global and local rope thetas) and a sliding window on the
//                                    local layers (layer_types, or every layer but each
//                                    global_attn_every_n_layers-th; local_attention the whole
//                                    window, half each side).
//   deberta-v2                       BERT's layer with disentangled attention: content-to-position
//                                    and position-to-content score terms (pos_att_type) from the
//                                    LayerNorm'd relative embeddings through the layer's own key and
//                                    query projections (share_att_key), relative positions in
//                                    log buckets (position_buckets, max_relative_positions);
//                                    absolute positions only if position_biased_input.
// Any other model_type (deberta, albert, ...) is refused by name.
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"

namespace stile {

// The layouts stile runs. RoBERTa stands for XLM-RoBERTa and CamemBERT too: the same layer, the
// same positions (EncoderConfig::model_type keeps the name config.json gave).
enum class EncoderFamily : std::uint8_t { kBert, kDistilBert, kRoberta, kElectra, kMpnet, kModernBert, kDebertaV2 };

inline const char* to_string(EncoderFamily f) {
  switch (f) {
    case EncoderFamily::kBert: return "bert";
    case EncoderFamily::kDistilBert: return "distilbert";
    case EncoderFamily::kRoberta: return "roberta";
    case EncoderFamily::kElectra: return "electra";
    case EncoderFamily::kMpnet: return "mpnet";
    case EncoderFamily::kModernBert: return "modernbert";
    case EncoderFamily::kDebertaV2: return "deberta-v2";
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

  // The layer's shape (BERT's by default; ModernBERT's otherwise).
  bool pre_norm = false;            // LayerNorm before attention and FFN (and a final norm), not after
  bool norm_bias = true;            // LayerNorms with a bias (ModernBERT: norm_bias)
  bool attention_bias = true;       // Q, K, V and output biases (attention_bias)
  bool mlp_bias = true;             // the FFN's biases (mlp_bias)
  bool gated_ffn = false;           // GEGLU: the first FFN GEMM makes 2 x intermediate, GELU(first half) x second
  bool position_table = true;       // learned absolute positions in the embeddings (ModernBERT: rotary)
  float rope_theta_global = 0.0f;   // rotary base of the global layers; 0: no rotary positions
  float rope_theta_local = 0.0f;    // and of the local ones
  std::size_t local_attention = 0;  // the local layers' whole window: |key - query| <= local_attention / 2
  std::vector<bool> local_layers;   // per layer: sliding-window attention (empty: none)

  // DeBERTa-v2/v3's disentangled attention: the score terms it adds (c2p: content to position, p2c:
  // position to content), the relative embeddings' rows (2 x relative_span), their LayerNorm, the
  // log buckets (position_buckets > 0: relative positions beyond position_buckets / 2 bucketed up
  // to max_relative_positions).
  bool c2p = false, p2c = false;
  std::size_t relative_span = 0;  // position_buckets if set, else max_relative_positions; 0: none
  std::size_t position_buckets = 0;
  std::size_t max_relative_positions = 0;
  bool norm_relative_embeddings = false;  // norm_rel_ebd "layer_norm"

  bool rotary() const noexcept { return rope_theta_global > 0.0f; }
  bool disentangled() const noexcept { return relative_span > 0; }
  // DeBERTa's attention scale, 1/sqrt(head_dim x (1 + the score terms)); else 1/sqrt(head_dim).
  std::size_t score_terms() const noexcept { return 1 + (c2p ? 1 : 0) + (p2c ? 1 : 0); }
  bool local_layer(std::size_t l) const noexcept { return l < local_layers.size() && local_layers[l]; }

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
    if (family == EncoderFamily::kMpnet) return "a relative position bias in attention";
    if (family == EncoderFamily::kModernBert) {
      return "pre-LayerNorm, rotary positions, a sliding window and a gated FFN (GEGLU)";
    }
    if (family == EncoderFamily::kDebertaV2) return "disentangled attention (relative position score terms)";
    return "";
  }
};

namespace encoder_config_detail {

// Far above any BERT-family model (the largest vocabularies are ~250k), low enough that the
// products the engine forms from these numbers (vocab x hidden, layers x hidden x intermediate)
// cannot overflow 64 bits.
inline constexpr std::uint64_t kMaxDimension = std::uint64_t{1} << 24;

inline constexpr const char* kSupportedTypes =
    "bert, distilbert, roberta, xlm-roberta, camembert, electra, mpnet, modernbert, deberta-v2";

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
  if (type != "bert" && type != "distilbert" && type != "electra" && type != "mpnet" && type != "modernbert" &&
      type != "deberta-v2" && !roberta) {
    return false;
  }
  family = roberta               ? EncoderFamily::kRoberta
           : type == "distilbert" ? EncoderFamily::kDistilBert
           : type == "electra"    ? EncoderFamily::kElectra
           : type == "mpnet"      ? EncoderFamily::kMpnet
           : type == "modernbert" ? EncoderFamily::kModernBert
           : type == "deberta-v2" ? EncoderFamily::kDebertaV2
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
      {"MPNet", "mpnet"},        {"ModernBert", "modernbert"}, {"DebertaV2", "deberta-v2"}};
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

// A bool key, `otherwise` when absent (the reference's default).
inline bool read_flag(const nlohmann::json& root, const char* key, bool otherwise, const std::string& file) {
  const auto it = root.find(key);
  if (it == root.end()) return otherwise;
  if (!it->is_boolean()) fail(file, "\"", key, "\" must be true or false, got ", it->dump());
  return it->get<bool>();
}

// A positive finite number, `otherwise` when absent; `where` names it in errors.
inline double read_positive(const nlohmann::json& root, const char* key, double otherwise, const std::string& file,
                            std::string_view where = {}) {
  const auto it = root.find(key);
  if (it == root.end()) return otherwise;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0.0 ||
      static_cast<float>(it->get<double>()) == 0.0f || !std::isfinite(static_cast<float>(it->get<double>()))) {
    fail(file, where, "\"", key, "\" must be a positive number, got ", it->dump());
  }
  return it->get<double>();
}

// ModernBERT's keys (ModernBertConfig's defaults where absent, as the reference takes them).
inline void read_modernbert(const nlohmann::json& root, const std::string& file, EncoderConfig& c) {
  c.type_vocab_size = 0;
  c.position_table = false;
  c.pre_norm = true;
  c.gated_ffn = true;
  c.norm_bias = read_flag(root, "norm_bias", false, file);
  c.attention_bias = read_flag(root, "attention_bias", false, file);
  c.mlp_bias = read_flag(root, "mlp_bias", false, file);
  const double eps = read_positive(root, "norm_eps", 1e-5, file);
  if (eps >= 1.0) fail(file, "\"norm_eps\" must be a positive float below 1, got ", root.at("norm_eps").dump());
  c.layer_norm_eps = static_cast<float>(eps);
  c.hidden_act = root.contains("hidden_activation") ? read_activation(root, "hidden_activation", file) : "gelu";

  // Which layers are local: layer_types when given, else every layer but each
  // global_attn_every_n_layers-th (ModernBertConfig.__post_init__).
  c.local_layers.assign(c.num_layers, false);
  if (const auto types = root.find("layer_types"); types != root.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != c.num_layers) {
      fail(file, "\"layer_types\" must be an array of num_hidden_layers (", c.num_layers, ") layer types, got ",
           types->dump());
    }
    for (std::size_t l = 0; l < c.num_layers; ++l) {
      const nlohmann::json& t = (*types)[l];
      if (t != "full_attention" && t != "sliding_attention") {
        fail(file, "layer_types[", l, "] ", t.dump(), " is not supported (\"full_attention\" or \"sliding_attention\")");
      }
      c.local_layers[l] = t == "sliding_attention";
    }
  } else {
    std::size_t every = 3;
    if (root.contains("global_attn_every_n_layers")) every = read_dimension(root, "global_attn_every_n_layers", file);
    for (std::size_t l = 0; l < c.num_layers; ++l) c.local_layers[l] = l % every != 0;
  }
  c.local_attention = root.contains("local_attention") ? read_dimension(root, "local_attention", file) : 128;
  // A window wider than the positions is no window at all (the reference would attend globally on
  // its local layers): a description that contradicts itself, refused.
  if (c.local_attention > c.max_position_embeddings) {
    fail(file, "local_attention ", c.local_attention, " is larger than max_position_embeddings ",
         c.max_position_embeddings, " (a local layer's window must be narrower than the positions)");
  }

  // Rotary bases: rope_parameters per layer type (the current form), else global_rope_theta and
  // local_rope_theta (the form on the Hub); only the default rotary embedding (no scaling).
  if (const auto scaling = root.find("rope_scaling"); scaling != root.end() && !scaling->is_null()) {
    fail(file, "rope_scaling ", scaling->dump(), " is not supported (only the default rotary embedding)");
  }
  double global = 160000.0, local = 10000.0;
  if (const auto rope = root.find("rope_parameters"); rope != root.end() && !rope->is_null()) {
    if (!rope->is_object()) fail(file, "\"rope_parameters\" must be an object, got ", rope->dump());
    for (const auto& [type, params] : rope->items()) {
      if (type != "full_attention" && type != "sliding_attention") {
        fail(file, "rope_parameters: layer type \"", type, "\" is not supported");
      }
      const std::string where = concat("rope_parameters.", type, ": ");
      if (!params.is_object()) fail(file, where, "must be an object, got ", params.dump());
      for (const auto& [key, value] : params.items()) {
        if (key == "rope_theta") continue;
        if (key == "rope_type" && value == "default") continue;
        fail(file, where, "\"", key, "\" ", value.dump(), " is not supported (only rope_type \"default\" and rope_theta)");
      }
      (type == "full_attention" ? global : local) =
          read_positive(params, "rope_theta", type == "full_attention" ? global : local, file, where);
    }
  } else {
    global = read_positive(root, "global_rope_theta", global, file);
    local = read_positive(root, "local_rope_theta", local, file);
  }
  c.rope_theta_global = static_cast<float>(global);
  c.rope_theta_local = static_cast<float>(local);
  if (c.head_dim() % 2 != 0) fail(file, "head dimension ", c.head_dim(), " is odd (rotary positions rotate pairs)");
}

// An integer key that may be absent or non-positive (DeBERTa's -1: "none"): `otherwise` then.
inline std::int64_t read_optional_int(const nlohmann::json& root, const char* key, std::int64_t otherwise,
                                      const std::string& file) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return otherwise;
  if (!it->is_number_integer()) fail(file, "\"", key, "\" must be an integer, got ", it->dump());
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > kMaxDimension) {
    fail(file, "\"", key, "\" is ", it->dump(), ", larger than the limit ", kMaxDimension);
  }
  return it->get<std::int64_t>();
}

// DeBERTa-v2/v3's keys (DebertaV2Config's defaults where absent, as the reference reads them).
inline void read_deberta_v2(const nlohmann::json& root, const std::string& file, EncoderConfig& c) {
  c.type_vocab_size = root.contains("type_vocab_size") && root.at("type_vocab_size") != 0
                          ? read_dimension(root, "type_vocab_size", file)
                          : 0;
  c.layer_norm_eps = root.contains("layer_norm_eps") ? read_layer_norm_eps(root, file) : 1e-7f;
  c.hidden_act = root.contains("hidden_act") ? read_activation(root, "hidden_act", file) : "gelu";
  c.position_table = read_flag(root, "position_biased_input", true, file);
  if (!read_flag(root, "relative_attention", false, file)) {
    fail(file, "relative_attention is false or absent: a DeBERTa without its relative embeddings is not "
               "supported (its attention is the disentangled one)");
  }
  // pos_att_type: a list, or the older "p2c|c2p" string.
  if (const auto types = root.find("pos_att_type"); types != root.end() && !types->is_null()) {
    std::vector<std::string> names;
    if (types->is_string()) {
      std::string all = types->get<std::string>(), part;
      for (char ch : all + "|") {
        if (ch != '|') {
          if (ch != ' ') part += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          continue;
        }
        names.push_back(part), part.clear();
      }
    } else if (types->is_array()) {
      for (const nlohmann::json& t : *types) {
        if (!t.is_string()) fail(file, "\"pos_att_type\" must hold strings, got ", types->dump());
        names.push_back(t.get<std::string>());
      }
    } else {
      fail(file, "\"pos_att_type\" must be a list or a string, got ", types->dump());
    }
    for (const std::string& n : names) {
      if (n == "c2p") c.c2p = true;
      else if (n == "p2c") c.p2c = true;
      else fail(file, "pos_att_type \"", n, "\" is not supported (only \"c2p\" and \"p2c\")");
    }
  }
  if (!read_flag(root, "share_att_key", false, file) && (c.c2p || c.p2c)) {
    fail(file, "share_att_key false (or absent) is not supported: the relative terms through separate pos_key_proj "
               "/ pos_query_proj (DeBERTa-v2/v3 checkpoints share the attention's keys)");
  }
  const std::int64_t buckets = read_optional_int(root, "position_buckets", -1, file);
  std::int64_t max_relative = read_optional_int(root, "max_relative_positions", -1, file);
  if (max_relative < 1) max_relative = static_cast<std::int64_t>(c.max_position_embeddings);
  c.max_relative_positions = static_cast<std::size_t>(max_relative);
  c.position_buckets = buckets > 0 ? static_cast<std::size_t>(buckets) : 0;
  c.relative_span = c.position_buckets > 0 ? c.position_buckets : c.max_relative_positions;
  if (c.position_buckets > 0 && (c.position_buckets < 4 || c.max_relative_positions <= c.position_buckets / 2 + 1)) {
    fail(file, "position_buckets ", c.position_buckets, " with max_relative_positions ", c.max_relative_positions,
         " gives no log buckets (the buckets need max_relative_positions - 1 > position_buckets / 2 >= 2)");
  }
  if (const auto norm = root.find("norm_rel_ebd"); norm != root.end() && !norm->is_null()) {
    if (*norm == "layer_norm") {
      c.norm_relative_embeddings = true;
    } else if (*norm != "none") {
      fail(file, "norm_rel_ebd ", norm->dump(), " is not supported (\"layer_norm\" or \"none\")");
    }
  }
  if (read_optional_int(root, "conv_kernel_size", 0, file) > 0) {
    fail(file, "conv_kernel_size > 0 is not supported (DeBERTa-v2's convolution after the first layer)");
  }
  if (root.contains("embedding_size") && read_dimension(root, "embedding_size", file) != c.hidden) {
    fail(file, "embedding_size different from hidden_size is not supported (DeBERTa's embed_proj)");
  }
  if (root.contains("attention_head_size") && read_dimension(root, "attention_head_size", file) != c.head_dim()) {
    fail(file, "attention_head_size different from hidden_size / num_attention_heads is not supported");
  }
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
  if (config.family == EncoderFamily::kModernBert) {
    if (config.hidden % config.num_heads != 0) {
      fail(display_name, "hidden_size ", config.hidden, " is not divisible by num_attention_heads ", config.num_heads);
    }
    read_modernbert(root, display_name, config);
    return config;
  }
  if (config.family == EncoderFamily::kDebertaV2) {
    if (config.hidden % config.num_heads != 0) {
      fail(display_name, "hidden_size ", config.hidden, " is not divisible by num_attention_heads ", config.num_heads);
    }
    read_deberta_v2(root, display_name, config);
    return config;
  }
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
