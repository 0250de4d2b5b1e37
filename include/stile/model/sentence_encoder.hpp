#pragma once
// The sentence-transformers pipeline over a model directory: text (after a prompt) -> token ids
// -> encoder -> pooling -> Dense modules -> (L2 normalize), giving what
// SentenceTransformer(dir).encode(text, prompt_name=...) gives.
//
//   SentenceEncoder encoder = SentenceEncoder::load(home / ".cache/stile/all-MiniLM-L6-v2");
//   std::vector<float> v = encoder.embed("A sentence.");                 // encoder.dim() floats
//   std::vector<std::vector<float>> vs = encoder.embed_batch(sentences);  // one encoder run
//   auto q = encoder.embed_batch(queries, nullptr, "query");             // a named prompt
//
// What load(dir) reads, the way sentence-transformers reads a saved model:
//   modules.json and the modules' folders    model/sentence_modules.hpp: where the encoder is,
//                              its Pooling, Dense and Normalize modules
//   config_sentence_transformers.json       "prompts" (name -> text put before each input, e5's
//                              "query: "), "default_prompt_name" (used when no name is given),
//                              "similarity_fn_name" (cosine, dot, euclidean, manhattan)
//   <encoder>/config.json, <encoder>/model.safetensors    BertModel::load (any family it runs)
//   <encoder>/tokenizer.json   the tokenizer (text/tokenizer.hpp), taken as it is; when there is
//                              none, <encoder>/vocab.txt, BERT's WordPiece vocabulary, with
//   <encoder>/tokenizer_config.json      the normalizer of a vocab.txt: do_lower_case, strip_accents,
//                              tokenize_chinese_chars; and model_max_length (below)
//   <encoder>/sentence_bert_config.json  max_seq_length: tokens per text including the special
//                              tokens (256 for all-MiniLM-L6-v2); do_lower_case: lower-case the text
//                              before the tokenizer (NOT the tokenizer's own lower-casing, which
//                              is tokenizer_config.json's; false for all-MiniLM-L6-v2, whose
//                              tokenizer lower-cases anyway; with a tokenizer.json it is refused:
//                              stile does not lower-case text outside the tokenizer);
//                              transformer_task: only "feature-extraction". Without a
//                              max_seq_length (newer sentence-transformers keep it in
//                              tokenizer_config.json's model_max_length): model_max_length, at most
//                              the model's positions (max_position_embeddings less RoBERTa's offset).
// Every file is validated; a bad one throws stile::Error naming it.
//
// A prompt is put before the text, and the pair is tokenized and truncated as one text; its length
// in tokens (the prompt tokenized alone, less a trailing special token) is what a Pooling module
// with include_prompt false leaves out, as the reference does.
//
// Batches are run without padding: the texts' tokens are concatenated and the encoder computes
// only real tokens (BertModel::encode), so a batch costs what its tokens cost.
//
// Thread safety: a const SentenceEncoder may be used from many threads at once; calls that share
// a ThreadPool (by default the default pool) take turns on it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
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
#include "stile/model/sentence_modules.hpp"

namespace stile {

// The named prompts of config_sentence_transformers.json.
struct SentencePrompts {
  std::map<std::string, std::string, std::less<>> texts;  // name -> the text put before each input
  std::optional<std::string> default_name;               // used when a call names none
};

// The pipeline's settings beyond the encoder and the tokenizer.
struct SentenceEncoderConfig {
  std::size_t max_seq_length = 512;  // tokens per text, special tokens included
  SentenceModules modules;           // pooling, Dense, Normalize
  SentencePrompts prompts;
  std::string similarity = "cosine";  // similarity_fn_name: cosine, dot, euclidean or manhattan
};

namespace sentence_encoder_detail {

namespace fs = std::filesystem;
using sentence_modules_detail::fail;
using sentence_modules_detail::read_bool;
using sentence_modules_detail::read_optional_json_object;

// The files of a model directory that are not the encoder's own or a module's.
inline constexpr const char* kSentenceBertConfigFile = "sentence_bert_config.json";
inline constexpr const char* kSentenceTransformersConfigFile = "config_sentence_transformers.json";
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";
inline constexpr const char* kVocabFile = "vocab.txt";
inline constexpr const char* kTokenizerFile = "tokenizer.json";

// config_sentence_transformers.json's prompts and similarity into config.
inline void read_prompts(const fs::path& dir, SentenceEncoderConfig& config) {
  const fs::path file = dir / kSentenceTransformersConfigFile;
  SentencePrompts& prompts = config.prompts;
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) return;
  if (const auto texts = root->find("prompts"); texts != root->end() && !texts->is_null()) {
    if (!texts->is_object()) fail(file, "\"prompts\" must be a JSON object of name: text, got ", texts->dump());
    for (const auto& [name, text] : texts->items()) {
      if (!text.is_string()) fail(file, "prompt \"", name, "\" must be a string, got ", text.dump());
      prompts.texts.emplace(name, text.get<std::string>());
    }
  }
  if (const auto name = root->find("default_prompt_name"); name != root->end() && !name->is_null()) {
    if (!name->is_string() || !prompts.texts.contains(name->get<std::string>())) {
      fail(file, "default_prompt_name ", name->dump(), " is not one of the \"prompts\"");
    }
    prompts.default_name = name->get<std::string>();
  }
  if (const auto fn = root->find("similarity_fn_name"); fn != root->end() && !fn->is_null()) {
    if (*fn != "cosine" && *fn != "dot" && *fn != "euclidean" && *fn != "manhattan") {
      fail(file, "similarity_fn_name ", fn->dump(), " is not one of cosine, dot, euclidean, manhattan");
    }
    config.similarity = fn->get<std::string>();
  }
}

// The tokenizer's normalizer, from tokenizer_config.json (Hugging Face passes these to the fast
// tokenizer, overriding tokenizer.json's normalizer).
inline BertNormalizerOptions read_normalizer(const fs::path& bert_dir) {
  const fs::path file = bert_dir / kTokenizerConfigFile;
  BertNormalizerOptions options;  // uncased BERT
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) return options;
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
  // Newer sentence-transformers keep the length in the tokenizer's model_max_length (capped at the
  // positions; a huge float there means "no limit").
  if (const auto tokenizer_config = read_optional_json_object(bert_dir / kTokenizerConfigFile)) {
    if (const auto max = tokenizer_config->find("model_max_length");
        max != tokenizer_config->end() && max->is_number_unsigned() && max->get<std::uint64_t>() >= 2) {
      settings.max_seq_length = static_cast<std::size_t>(
          std::min<std::uint64_t>(max->get<std::uint64_t>(), config.max_positions()));
    }
  }
  const std::optional<nlohmann::json> root = read_optional_json_object(file);
  if (!root) return settings;
  if (const auto task = root->find("transformer_task"); task != root->end() && !task->is_null()) {
    if (*task != "feature-extraction") {
      fail(file, "transformer_task ", task->dump(), " is not supported (only \"feature-extraction\")");
    }
  }
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
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), config_(std::move(config)) {
    require(tokenizer_.vocab_size() <= model_.config().vocab_size,
            "SentenceEncoder: the tokenizer's ids reach beyond the model's embedding table");
    require(config_.max_seq_length >= 2 && config_.max_seq_length <= model_.config().max_positions(),
            "SentenceEncoder: max_seq_length must be in [2, the model's positions]");
    // A prompt's length in tokens, as the reference measures it: tokenized alone, less a trailing
    // special token (the separator the post-processor adds). An empty prompt is no prompt.
    for (const auto& [name, text] : config_.prompts.texts) {
      std::size_t tokens = 0;
      if (!text.empty()) {
        const Encoding e = tokenizer_.encode(text);
        tokens = e.size() - (e.size() > 0 && e.special_tokens_mask.back() != 0 ? 1 : 0);
      }
      prompt_tokens_.emplace(name, tokens);
    }
  }

  // Reads a sentence-transformers model directory (see the top of this file); the encoder runs in
  // `precision` (ops/precision.hpp).
  [[nodiscard]] static SentenceEncoder load(const std::filesystem::path& dir, const ModelPrecision& precision = {}) {
    using namespace sentence_encoder_detail;
    const SentenceLayout layout = read_sentence_layout(dir);
    // The small files first, so a bad one is reported before the weights are read.
    const EncoderConfig config = read_encoder_config((layout.encoder_dir / "config.json").string());
    SentenceEncoderConfig pipeline;
    pipeline.modules = read_sentence_modules(layout, config.hidden);
    read_prompts(dir, pipeline);
    const SentenceBertSettings settings = read_sentence_bert_config(layout.encoder_dir, config);
    pipeline.max_seq_length = settings.max_seq_length;
    Tokenizer tokenizer = load_tokenizer(layout.encoder_dir, settings);
    tokenizer.set_truncation(Truncation{.max_length = settings.max_seq_length});
    if (tokenizer.vocab_size() > config.vocab_size) {
      fail(layout.encoder_dir, "the tokenizer's ids reach ", tokenizer.vocab_size() - 1,
           ", beyond the model's vocab_size ", config.vocab_size);
    }
    BertModel model = BertModel::load(layout.encoder_dir, precision);
    return SentenceEncoder(std::move(model), std::move(tokenizer), std::move(pipeline));
  }

  // The embedding of one text: dim() floats. prompt_name: one of config().prompts, put before the
  // text (nullopt: the default prompt, if the model names one).
  [[nodiscard]] std::vector<float> embed(std::string_view text, ThreadPool* pool = nullptr,
                                         std::optional<std::string_view> prompt_name = std::nullopt) const {
    const Encoding encoding = encode(text, prompt_name);
    return std::move(embed_encoded(std::span(&encoding, 1), pool, prompt_tokens(prompt_name))[0]);
  }

  // The embeddings of many texts, in order, from one encoder run over all their tokens.
  [[nodiscard]] std::vector<std::vector<float>> embed_batch(
      std::span<const std::string> texts, ThreadPool* pool = nullptr,
      std::optional<std::string_view> prompt_name = std::nullopt) const {
    const std::string_view prompt = prompt_text(prompt_name);
    std::vector<Encoding> batch;
    batch.reserve(texts.size());
    for (const std::string& text : texts) batch.push_back(encode_after(prompt, text));
    return embed_encoded(batch, pool, prompt_tokens(prompt_name));
  }

  // The embedding of a text longer than config().max_seq_length tokens, from all of it (embed
  // truncates): the text (after the prompt) in windows of max_seq_length tokens, each repeating
  // the last `stride` tokens of the window before (stride < max_seq_length less the special
  // tokens), each window embedded as embed does (a prompt left out by the pooling is left out of
  // the first window, the only one it is in), then the mean of the windows' embeddings weighted
  // by their token counts, L2-normalized again when the pipeline normalizes. sentence-transformers
  // has no such mode: a text that fits in one window gives exactly embed's embedding.
  [[nodiscard]] std::vector<float> embed_long(std::string_view text, std::size_t stride, ThreadPool* pool = nullptr,
                                              std::optional<std::string_view> prompt_name = std::nullopt) const {
    std::string joined(prompt_text(prompt_name));
    joined.append(text);
    const std::vector<Encoding> windows = encode_windows(tokenizer_, joined, config_.max_seq_length, stride);
    // The prompt is in the first window only.
    std::vector<std::vector<float>> embeddings = embed_encoded(std::span(windows).first(1), pool, prompt_tokens(prompt_name));
    if (windows.size() == 1) return std::move(embeddings[0]);
    for (std::vector<float>& e : embed_encoded(std::span(windows).subspan(1), pool, 0)) embeddings.push_back(std::move(e));
    std::vector<double> weights;
    for (const Encoding& e : windows) weights.push_back(static_cast<double>(e.size()));
    std::vector<double> sum(embeddings[0].size(), 0.0);
    double total = 0.0;
    for (std::size_t w = 0; w < embeddings.size(); ++w) {
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += weights[w] * embeddings[w][i];
      total += weights[w];
    }
    std::vector<float> out(sum.size());
    for (std::size_t i = 0; i < sum.size(); ++i) out[i] = static_cast<float>(sum[i] / total);
    if (config_.modules.normalize) l2_normalize(out);
    return out;
  }

  // A text's tokens as embed takes them: the prompt and the text tokenized as one, truncated to
  // config().max_seq_length.
  [[nodiscard]] Encoding encode(std::string_view text, std::optional<std::string_view> prompt_name = std::nullopt) const {
    return encode_after(prompt_text(prompt_name), text);
  }

  // The text a prompt puts before each input ("" for none); an unknown name is an error that lists
  // the model's prompts.
  [[nodiscard]] std::string_view prompt_text(std::optional<std::string_view> prompt_name) const {
    const std::optional<std::string_view> name = resolve(prompt_name);
    return name ? std::string_view(config_.prompts.texts.find(*name)->second) : std::string_view();
  }
  // The tokens a prompt takes at the start of an encoding (0 for none).
  [[nodiscard]] std::size_t prompt_tokens(std::optional<std::string_view> prompt_name) const {
    const std::optional<std::string_view> name = resolve(prompt_name);
    return name ? prompt_tokens_.find(*name)->second : 0;
  }

  // The embeddings of already tokenized texts (encode, or tokenizer().encode; padded or not): for
  // callers that tokenize ahead or time the stages apart. prompt_tokens: each encoding's first
  // tokens that are a prompt (prompt_tokens(name)).
  [[nodiscard]] std::vector<std::vector<float>> embed_encoded(std::span<const Encoding> batch,
                                                              ThreadPool* pool = nullptr,
                                                              std::size_t prompt_tokens = 0) const {
    if (batch.empty()) return {};
    std::vector<float> hidden;
    const std::vector<std::size_t> lengths = model_.encode(batch, hidden, pool);
    return embed_hidden(hidden, lengths, prompt_tokens);
  }

  // The modules after the encoder (pooling, Dense, Normalize) over hidden states computed
  // elsewhere (a mapped forward): lengths[i] rows of hidden() floats per sequence, back to back.
  [[nodiscard]] std::vector<std::vector<float>> embed_hidden(std::span<const float> hidden,
                                                             std::span<const std::size_t> lengths,
                                                             std::size_t prompt_tokens = 0) const {
    std::vector<std::vector<float>> embeddings;
    embeddings.reserve(lengths.size());
    const std::size_t width = this->hidden();
    std::size_t first_row = 0;
    for (const std::size_t length : lengths) {
      require((first_row + length) * width <= hidden.size(), "SentenceEncoder::embed_hidden: too few hidden states");
      embeddings.push_back(
          config_.modules.embed(hidden.subspan(first_row * width, length * width), length, width, prompt_tokens));
      first_row += length;
    }
    return embeddings;
  }

  [[nodiscard]] const BertModel& model() const noexcept { return model_; }
  [[nodiscard]] const Tokenizer& tokenizer() const noexcept { return tokenizer_; }
  [[nodiscard]] const SentenceEncoderConfig& config() const noexcept { return config_; }
  // Length of an embedding: the last module's output (pooling's modes x hidden(), or the last Dense's).
  [[nodiscard]] std::size_t dim() const noexcept { return config_.modules.dim(hidden()); }
  // The encoder's hidden size.
  [[nodiscard]] std::size_t hidden() const noexcept { return model_.config().hidden; }

 private:
  // prompt + text, tokenized as one text.
  [[nodiscard]] Encoding encode_after(std::string_view prompt, std::string_view text) const {
    if (prompt.empty()) return tokenizer_.encode(text);
    std::string joined;
    joined.reserve(prompt.size() + text.size());
    joined.append(prompt).append(text);
    return tokenizer_.encode(joined);
  }

  // The prompt a call uses: the name given, else the default one; nullopt for none.
  [[nodiscard]] std::optional<std::string_view> resolve(std::optional<std::string_view> prompt_name) const {
    if (!prompt_name) {
      if (!config_.prompts.default_name) return std::nullopt;
      return std::string_view(*config_.prompts.default_name);
    }
    if (!config_.prompts.texts.contains(*prompt_name)) {
      std::string names;
      for (const auto& [name, text] : config_.prompts.texts) names += (names.empty() ? "" : ", ") + name;
      throw Error(concat("stile: SentenceEncoder: no prompt named \"", *prompt_name, "\" (the model's prompts: ",
                         names.empty() ? std::string("none") : names, ")"));
    }
    return prompt_name;
  }

  BertModel model_;
  Tokenizer tokenizer_;
  SentenceEncoderConfig config_;
  std::map<std::string, std::size_t, std::less<>> prompt_tokens_;  // per prompt name
};

}  // namespace stile
