#pragma once
// The sentence-transformers pipeline over a model directory: text -> token ids -> BERT encoder
// -> pooling -> (L2 normalize), giving what SentenceTransformer(dir).encode(text) gives.
//
//   SentenceEncoder encoder = SentenceEncoder::load(home / ".cache/stile/all-MiniLM-L6-v2");
//   std::vector<float> v = encoder.embed("A sentence.");                 // encoder.dim() floats
//   std::vector<std::vector<float>> vs = encoder.embed_batch(sentences);  // one encoder run
//
// What load(dir) reads, the way sentence-transformers reads a saved model:
//   modules.json               the module list. Supported: Transformer (its "path" is the BERT
//                              directory, "" for dir itself), Pooling, Normalize. Any other module
//                              (Dense, LayerNorm, ...) would change the embedding, so it is an
//                              error rather than silently skipped. Missing: a plain Hugging Face
//                              checkpoint, as sentence-transformers treats one: BERT in dir, pooling
//                              read from 1_Pooling/ if there, no Normalize.
//   <bert>/config.json, <bert>/model.safetensors    BertModel::load
//   <bert>/tokenizer.json      the tokenizer (text/tokenizer.hpp), taken as it is; when there is
//                              none, <bert>/vocab.txt, BERT's WordPiece vocabulary, with
//   <bert>/tokenizer_config.json      the normalizer of a vocab.txt: do_lower_case, strip_accents,
//                              tokenize_chinese_chars. Missing: uncased BERT (lower-case, strip
//                              accents, split CJK).
//   <bert>/sentence_bert_config.json  max_seq_length: tokens per text including [CLS] and [SEP]
//                              (256 for all-MiniLM-L6-v2); do_lower_case: lower-case the text
//                              before the tokenizer (NOT the tokenizer's own lower-casing, which
//                              is tokenizer_config.json's; false for all-MiniLM-L6-v2, whose
//                              tokenizer lower-cases anyway; with a tokenizer.json it is refused:
//                              stile does not lower-case text outside the tokenizer). Missing:
//                              the model's positions (max_position_embeddings less RoBERTa's
//                              offset), no extra lower-casing.
//   <pooling>/config.json      pooling_mode_mean_tokens or pooling_mode_cls_token, exactly one
//                              (newer files may say "pooling_mode": "mean" | "cls"). Other modes
//                              (max, mean_sqrt_len, weightedmean, lasttoken, or several at once)
//                              are an error. Missing: mean pooling.
// Every file is validated; a bad one throws stile::Error naming it.
//
// Batches are run without padding: the texts' tokens are concatenated and the encoder computes
// only real tokens (BertModel::encode), so a batch costs what its tokens cost.
//
// Thread safety: a const SentenceEncoder may be used from many threads at once; calls that share
// a ThreadPool (by default the default pool) take turns on it.
#include <cstddef>
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
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/core/file_error.hpp"
#include "stile/text/tokenizer.hpp"
#include "stile/model/bert_model.hpp"

namespace stile {

// The pipeline's settings beyond the BERT model and the vocabulary.
struct SentenceEncoderConfig {
  std::size_t max_seq_length = 512;  // tokens per text, [CLS] and [SEP] included
  Pooling pooling = Pooling::kMean;
  bool normalize = false;  // a Normalize module: embeddings have unit L2 norm
};

namespace sentence_encoder_detail {

namespace fs = std::filesystem;

// The files of a model directory that are not the BERT model's own.
inline constexpr const char* kModulesFile = "modules.json";
inline constexpr const char* kSentenceBertConfigFile = "sentence_bert_config.json";
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";
inline constexpr const char* kVocabFile = "vocab.txt";
inline constexpr const char* kTokenizerFile = "tokenizer.json";
inline constexpr const char* kPoolingConfigFile = "config.json";  // inside the Pooling module's directory
inline constexpr const char* kDefaultPoolingDir = "1_Pooling";

template <class... Parts>
[[noreturn]] void fail(const fs::path& file, const Parts&... parts) {
  fail_in_file(file.string(), parts...);
}

// The parsed JSON object in file, or nothing when the file does not exist.
inline std::optional<nlohmann::json> read_optional_json_object(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(file, "cannot read");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(file, "is not valid JSON: ", e.what());
  }
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

// A module path from modules.json, relative to the model directory and staying inside it.
inline fs::path module_dir(const fs::path& dir, const nlohmann::json& module, const fs::path& file) {
  const auto path = module.find("path");
  if (path == module.end() || path->is_null()) return dir;
  if (!path->is_string()) fail(file, "a module's \"path\" must be a string, got ", path->dump());
  const fs::path relative = path->get<std::string>();
  const fs::path normal = relative.lexically_normal();
  if (relative.is_absolute() || (!normal.empty() && *normal.begin() == "..")) {
    fail(file, "module path ", path->dump(), " is not inside the model directory");
  }
  return relative.empty() ? dir : dir / relative;
}

// Where the BERT model and the Pooling config are, and whether embeddings are normalized.
struct ModuleLayout {
  fs::path bert_dir;
  fs::path pooling_dir;
  bool normalize = false;
};

inline ModuleLayout read_modules(const fs::path& dir) {
  const fs::path file = dir / kModulesFile;
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) return {dir, dir / kDefaultPoolingDir, false};  // a plain Hugging Face checkpoint
  if (!root->is_array()) fail(file, "must be a JSON array of modules");

  ModuleLayout layout;
  bool has_transformer = false;
  bool has_pooling = false;
  for (std::size_t i = 0; i < root->size(); ++i) {
    const nlohmann::json& module = (*root)[i];
    if (!module.is_object()) fail(file, "module ", i, " is not a JSON object");
    const auto type_it = module.find("type");
    if (type_it == module.end() || !type_it->is_string()) fail(file, "module ", i, " has no string \"type\"");
    const std::string type = type_it->get<std::string>();
    // "sentence_transformers.models.Pooling"; the class name is what matters.
    const std::string_view name = std::string_view(type).substr(type.rfind('.') + 1);
    if (!type.starts_with("sentence_transformers.")) {
      fail(file, "module type \"", type, "\" is not a sentence_transformers module");
    }
    // The pipeline runs in this order; a module out of it would mean a different computation.
    if (name == "Transformer") {
      if (i != 0) fail(file, "the Transformer module must come first");
      layout.bert_dir = module_dir(dir, module, file);
      has_transformer = true;
    } else if (name == "Pooling") {
      if (!has_transformer || has_pooling) fail(file, "the Pooling module must come once, right after the Transformer");
      layout.pooling_dir = module_dir(dir, module, file);
      has_pooling = true;
    } else if (name == "Normalize") {
      if (!has_pooling || layout.normalize) fail(file, "the Normalize module must come once, after Pooling");
      layout.normalize = true;
    } else {
      fail(file, "module \"", type, "\" is not supported (only Transformer, Pooling, Normalize)");
    }
  }
  if (!has_transformer) fail(file, "has no sentence_transformers.models.Transformer module");
  if (!has_pooling) fail(file, "has no sentence_transformers.models.Pooling module");
  return layout;
}

inline Pooling read_pooling(const fs::path& pooling_dir, std::size_t hidden) {
  const fs::path file = pooling_dir / kPoolingConfigFile;
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) return Pooling::kMean;  // sentence-transformers' default for a plain checkpoint
  if (!root->is_object()) fail(file, "is not a JSON object");

  if (const auto dim = root->find("word_embedding_dimension"); dim != root->end()) {
    if (!dim->is_number_unsigned() || dim->get<std::size_t>() != hidden) {
      fail(file, "word_embedding_dimension ", dim->dump(), " is not the model's hidden size ", hidden);
    }
  }
  // Newer sentence-transformers accept one "pooling_mode" string, which overrides the flags.
  if (const auto mode = root->find("pooling_mode"); mode != root->end() && !mode->is_null()) {
    if (*mode == "mean") return Pooling::kMean;
    if (*mode == "cls") return Pooling::kCls;
    fail(file, "pooling_mode ", mode->dump(), " is not supported (only \"mean\" or \"cls\")");
  }
  // The boolean flags: sentence-transformers concatenates the outputs of every mode set, so
  // exactly one of the two implemented ones must be set.
  std::vector<std::string> set_modes;
  for (const auto& [key, value] : root->items()) {
    if (!key.starts_with("pooling_mode_")) continue;
    if (!value.is_boolean()) fail(file, "\"", key, "\" must be true or false, got ", value.dump());
    if (value.get<bool>()) set_modes.push_back(key);
  }
  if (set_modes.size() != 1) {
    std::string modes;
    for (const std::string& m : set_modes) modes += (modes.empty() ? "" : ", ") + m;
    fail(file, "exactly one pooling mode must be true (pooling_mode_mean_tokens or pooling_mode_cls_token); ",
         set_modes.empty() ? std::string("none is") : modes + " are");
  }
  if (set_modes[0] == "pooling_mode_mean_tokens") return Pooling::kMean;
  if (set_modes[0] == "pooling_mode_cls_token") return Pooling::kCls;
  fail(file, set_modes[0], " is not supported (only pooling_mode_mean_tokens or pooling_mode_cls_token)");
}

// The tokenizer's normalizer, from tokenizer_config.json (Hugging Face passes these to the fast
// tokenizer, overriding tokenizer.json's normalizer).
inline BertNormalizerOptions read_normalizer(const fs::path& bert_dir) {
  const fs::path file = bert_dir / kTokenizerConfigFile;
  BertNormalizerOptions options;  // uncased BERT
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) return options;
  if (!root->is_object()) fail(file, "is not a JSON object");
  if (const auto cls = root->find("tokenizer_class"); cls != root->end() && !cls->is_null()) {
    // Other classes (RoBERTa's BPE, MPNet's specials, ...) tokenize differently.
    const bool wordpiece = *cls == "BertTokenizer" || *cls == "BertTokenizerFast" || *cls == "DistilBertTokenizer" ||
                           *cls == "DistilBertTokenizerFast";
    if (!wordpiece) fail(file, "tokenizer_class ", cls->dump(), " is not supported (only BERT's WordPiece)");
  }
  options.lowercase = read_bool(*root, "do_lower_case", options.lowercase, file);
  if (const auto strip = root->find("strip_accents"); strip != root->end() && !strip->is_null()) {
    options.strip_accents = read_bool(*root, "strip_accents", false, file);
  }
  options.handle_chinese_chars = read_bool(*root, "tokenize_chinese_chars", options.handle_chinese_chars, file);
  return options;
}

struct SentenceBertSettings {
  std::size_t max_seq_length;
  bool lowercase_text;
};

inline SentenceBertSettings read_sentence_bert_config(const fs::path& bert_dir, const EncoderConfig& config) {
  const fs::path file = bert_dir / kSentenceBertConfigFile;
  SentenceBertSettings settings{config.max_positions(), false};
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) return settings;
  if (!root->is_object()) fail(file, "is not a JSON object");
  if (const auto max = root->find("max_seq_length"); max != root->end() && !max->is_null()) {
    if (!max->is_number_unsigned()) fail(file, "\"max_seq_length\" must be a positive integer, got ", max->dump());
    const auto value = max->get<std::uint64_t>();
    if (value < 2) fail(file, "max_seq_length ", value, " leaves no room for [CLS] and [SEP] (>= 2)");
    // Position embeddings end there: a longer sequence has no position to take.
    if (value > config.max_positions()) {
      if (config.position_offset == 0) {
        fail(file, "max_seq_length ", value, " is larger than the model's max_position_embeddings ",
             config.max_position_embeddings);
      }
      fail(file, "max_seq_length ", value, " is larger than the model's ", config.max_positions(),
           " positions (max_position_embeddings ", config.max_position_embeddings, " less the offset ",
           config.position_offset, ")");
    }
    settings.max_seq_length = static_cast<std::size_t>(value);
  }
  settings.lowercase_text = read_bool(*root, "do_lower_case", false, file);
  return settings;
}

// The model directory's tokenizer: tokenizer.json when there is one, else vocab.txt with the
// normalizer of tokenizer_config.json.
inline Tokenizer load_tokenizer(const fs::path& bert_dir, const SentenceBertSettings& settings) {
  if (fs::exists(bert_dir / kTokenizerFile)) {
    if (settings.lowercase_text) {
      fail(bert_dir / kSentenceBertConfigFile,
           "do_lower_case true with a tokenizer.json is not supported (stile lower-cases only inside a vocab.txt "
           "tokenizer's normalizer)");
    }
    return Tokenizer::from_file(bert_dir / kTokenizerFile);
  }
  BertNormalizerOptions normalizer = read_normalizer(bert_dir);
  if (settings.lowercase_text && !normalizer.lowercase) {
    // sentence-transformers lower-cases the text before a cased tokenizer; lower-casing in the
    // normalizer does the same, as long as accents are kept as the tokenizer would keep them.
    // (One difference: a special token written in the text, "[SEP]", still matches here, where
    // the reference would see "[sep]".)
    normalizer.strip_accents = normalizer.strip_accents.value_or(false);
    normalizer.lowercase = true;
  }
  return Tokenizer::from_vocab(Vocab::load(bert_dir / kVocabFile), normalizer);
}

}  // namespace sentence_encoder_detail

class SentenceEncoder {
 public:
  SentenceEncoder(BertModel model, Tokenizer tokenizer, SentenceEncoderConfig config)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), config_(config) {
    require(tokenizer_.vocab_size() <= model_.config().vocab_size,
            "SentenceEncoder: the vocabulary has more tokens than the model's embedding table");
    require(config_.max_seq_length >= 2 && config_.max_seq_length <= model_.config().max_positions(),
            "SentenceEncoder: max_seq_length must be in [2, the model's positions]");
  }

  // Reads a sentence-transformers model directory (see the top of this file); the encoder runs in
  // `precision` (ops/precision.hpp).
  [[nodiscard]] static SentenceEncoder load(const std::filesystem::path& dir, const ModelPrecision& precision = {}) {
    using namespace sentence_encoder_detail;
    const ModuleLayout layout = read_modules(dir);
    // The small files first, so a bad one is reported before the weights are read.
    EncoderConfig config = read_encoder_config((layout.bert_dir / "config.json").string());
    const Pooling pooling = read_pooling(layout.pooling_dir, config.hidden);
    const SentenceBertSettings settings = read_sentence_bert_config(layout.bert_dir, config);
    Tokenizer tokenizer = load_tokenizer(layout.bert_dir, settings);
    tokenizer.set_truncation(Truncation{.max_length = settings.max_seq_length});
    if (tokenizer.vocab_size() > config.vocab_size) {
      fail(layout.bert_dir, "the tokenizer has ", tokenizer.vocab_size(), " tokens, more than the model's vocab_size ",
           config.vocab_size);
    }
    BertModel model = BertModel::load(layout.bert_dir, precision);
    return SentenceEncoder(std::move(model), std::move(tokenizer),
                           SentenceEncoderConfig{settings.max_seq_length, pooling, layout.normalize});
  }

  // The embedding of one text: dim() floats.
  [[nodiscard]] std::vector<float> embed(std::string_view text, ThreadPool* pool = nullptr) const {
    const Encoding encoding = tokenizer_.encode(text);
    return std::move(embed_encoded(std::span(&encoding, 1), pool)[0]);
  }

  // The embeddings of many texts, in order, from one encoder run over all their tokens.
  [[nodiscard]] std::vector<std::vector<float>> embed_batch(std::span<const std::string> texts,
                                                            ThreadPool* pool = nullptr) const {
    std::vector<Encoding> batch;
    batch.reserve(texts.size());
    for (const std::string& text : texts) batch.push_back(tokenizer_.encode(text));
    return embed_encoded(batch, pool);
  }

  // The embeddings of already tokenized texts (tokenizer().encode, padded or not): for callers
  // that tokenize ahead or time the stages apart.
  [[nodiscard]] std::vector<std::vector<float>> embed_encoded(std::span<const Encoding> batch,
                                                              ThreadPool* pool = nullptr) const {
    std::vector<std::vector<float>> embeddings(batch.size(), std::vector<float>(dim()));
    if (batch.empty()) return embeddings;
    std::vector<float> hidden;
    const std::vector<std::size_t> lengths = model_.encode(batch, hidden, pool);
    std::size_t first_row = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::span<const float> rows = std::span<const float>(hidden).subspan(first_row * dim(), lengths[i] * dim());
      pool_tokens(rows, lengths[i], dim(), config_.pooling, embeddings[i]);
      if (config_.normalize) l2_normalize(embeddings[i]);
      first_row += lengths[i];
    }
    return embeddings;
  }

  [[nodiscard]] const BertModel& model() const noexcept { return model_; }
  [[nodiscard]] const Tokenizer& tokenizer() const noexcept { return tokenizer_; }
  [[nodiscard]] const SentenceEncoderConfig& config() const noexcept { return config_; }
  // Length of an embedding: the model's hidden size.
  [[nodiscard]] std::size_t dim() const noexcept { return model_.config().hidden; }

 private:
  BertModel model_;
  Tokenizer tokenizer_;
  SentenceEncoderConfig config_;
};

}  // namespace stile
