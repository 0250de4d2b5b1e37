#pragma once
// A fine-tuned checkpoint with its own head, run for the task it was trained for: one call gives
// the task's answer, as the reference pipelines give it.
//
//   TaskModel m = TaskModel::load(dir);                          // config.json names the head
//   TextClassification c = m.classify("A gripping film.");       // labels(), scores, logits
//   std::vector<double> s = m.score_pairs(query, passages);      // a cross-encoder's scores
//   std::vector<Entity> e = m.entities(text, Aggregation::kSimple);
//   SparseVector v = m.sparse(text);                             // SPLADE
//
// The task, the head, its labels and score functions: model/checkpoint_head.hpp (classify: the
// text-classification pipeline's function; score_pairs: sentence-transformers' CrossEncoder
// activation). Entities: model/token_entities.hpp.
//
// Long inputs: a text longer than max_length() tokens is truncated (classification, reranking,
// SPLADE: the references truncate too; a pair loses tokens from the longer text first). Token
// classification can instead cover the whole text in windows of max_length() tokens that repeat
// the last `stride` tokens of the window before; each window is tagged on its own and the
// entities of overlapping windows resolved (transformers' pipeline with stride).
//
// What continues a word (the first, max and average aggregations), as the reference decides it:
// with a tokenizer whose model has a continuing_subword_prefix (WordPiece's "##"), a token whose
// string differs in length (code points) from the text it covers; otherwise a token that starts
// after the text's start with neither it nor the character before it a space. The unknown token
// always starts a word.
//
// Thread safety: a const TaskModel may be used from many threads at once.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/json_file.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/checkpoint_head.hpp"
#include "stile/model/token_entities.hpp"
#include "stile/text/tokenizer.hpp"

namespace stile {

// One text's (or pair's) classification: logits and scores per label, in label order.
struct TextClassification {
  std::vector<float> logits;
  std::vector<double> scores;
  // The label of the highest score.
  [[nodiscard]] std::size_t top() const noexcept {
    return static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
  }
};

// A sparse vector over the vocabulary: ids ascending, each weight > 0.
struct SparseVector {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};

struct TaskModelConfig {
  CheckpointHead head;           // the task, the head, its labels and score functions
  std::size_t max_length = 512;  // tokens per sequence, special tokens included
};

namespace task_model_detail {

namespace fs = std::filesystem;

inline constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

// The most tokens a sequence may have: sentence_bert_config.json's max_seq_length, else
// tokenizer_config.json's model_max_length at most the model's positions (a huge value there means
// "no limit"), else the positions.
inline std::size_t read_max_length(const fs::path& dir, const EncoderConfig& c) {
  std::size_t max = c.max_positions();
  const fs::path file = dir / "tokenizer_config.json";
  if (fs::exists(file)) {
    const nlohmann::json j = read_json_file(file, kMaxConfigBytes, 16, "the tokenizer config");
    if (const auto it = j.find("model_max_length");
        it != j.end() && it->is_number_unsigned() && it->get<std::uint64_t>() >= 2) {
      max = static_cast<std::size_t>(std::min<std::uint64_t>(it->get<std::uint64_t>(), max));
    }
  }
  // A sentence-transformers directory's own length wins (as its Transformer module reads it).
  const fs::path st = dir / "sentence_bert_config.json";
  if (fs::exists(st)) {
    const nlohmann::json j = read_json_file(st, kMaxConfigBytes, 16, "the sentence-transformers module config");
    if (const auto it = j.find("max_seq_length"); it != j.end() && !it->is_null()) {
      if (!it->is_number_unsigned() || it->get<std::uint64_t>() < 2 || it->get<std::uint64_t>() > c.max_positions()) {
        fail_in_file(st.string(), "\"max_seq_length\" must be a whole number from 2 to the model's ", c.max_positions(),
                     " positions, got ", it->dump());
      }
      max = it->get<std::size_t>();
    }
  }
  return max;
}

// Code points of UTF-8 bytes: the bytes that start one (a stray continuation byte counts as none).
inline std::size_t code_points(std::string_view s) {
  std::size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace task_model_detail

// A window's tokens as the aggregation reads them (model/token_entities.hpp): special and padding
// tokens left out, each token's softmax over its `labels` logits (logits: [tokens x labels]), and
// whether it continues a word (the top of this file says how). `text` is the text `e` was
// tokenized from (its offsets are bytes of it); `tokenizer` the one that did.
inline std::vector<ScoredToken> scored_tokens(std::string_view text, const Encoding& e, std::span<const float> logits,
                                              std::size_t labels, const Tokenizer& tokenizer) {
  using task_model_detail::code_points;
  require(
      e.offsets.size() == e.size() && e.special_tokens_mask.size() == e.size() && logits.size() >= e.size() * labels,
      "scored_tokens: an encoding with offsets (a tokenizer.json's) and a row of logits per token");
  const bool word_aware = !tokenizer.continuing_subword_prefix().empty();
  const std::optional<std::int32_t> unk = tokenizer.unk_id();
  std::vector<ScoredToken> tokens;
  for (std::size_t i = 0; i < e.size(); ++i) {
    if ((!e.attention_mask.empty() && e.attention_mask[i] == 0) || e.special_tokens_mask[i] != 0) continue;
    ScoredToken t;
    t.index = i;
    t.scores = class_scores(ScoreFunction::kSoftmax, logits.subspan(i * labels, labels));
    t.begin = std::min<std::size_t>(e.offsets[i].begin, text.size());
    t.end = std::min<std::size_t>(std::max(e.offsets[i].end, e.offsets[i].begin), text.size());
    if (unk && e.input_ids[i] == *unk) {
      t.subword = false;
    } else if (word_aware) {
      const std::optional<std::string_view> token = tokenizer.id_to_token(e.input_ids[i]);
      t.subword = code_points(token.value_or("")) != code_points(text.substr(t.begin, t.end - t.begin));
    } else {
      t.subword = t.begin > 0 && text[t.begin - 1] != ' ' && (t.begin >= text.size() || text[t.begin] != ' ');
    }
    tokens.push_back(std::move(t));
  }
  return tokens;
}

class TaskModel {
 public:
  TaskModel(BertModel model, Tokenizer tokenizer, TaskModelConfig config)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)), config_(std::move(config)) {
    require(tokenizer_.vocab_size() <= model_.config().vocab_size,
            "TaskModel: the tokenizer's ids reach beyond the model's embedding table");
    require(config_.max_length >= 2 && config_.max_length <= model_.config().max_positions(),
            "TaskModel: max_length must be in [2, the model's positions]");
    require(config_.head.head.layers.front().in == model_.config().hidden,
            "TaskModel: the head reads another hidden size");
    require(config_.head.task != HeadTask::kSequenceClassification ||
                config_.head.labels.size() == config_.head.head.outputs(),
            "TaskModel: one label per output of the head");
    tokenizer_.set_truncation(Truncation{.max_length = config_.max_length});
  }

  // Reads a model directory: config.json, model.safetensors, tokenizer.json (or vocab.txt),
  // tokenizer_config.json (model_max_length); a sentence-transformers directory's modules.json.
  // Every file is validated; a bad one throws stile::Error naming it and the field.
  [[nodiscard]] static TaskModel load(const std::filesystem::path& dir, const ModelPrecision& precision = {}) {
    using namespace task_model_detail;
    const EncoderConfig encoder = read_encoder_config((dir / "config.json").string());
    TaskModelConfig config;
    config.head = load_checkpoint_head(dir, encoder);
    config.max_length = read_max_length(dir, encoder);
    Tokenizer tokenizer = Tokenizer::from_model_dir(dir);
    if (tokenizer.vocab_size() > encoder.vocab_size) {
      fail_in_file(dir.string(), "the tokenizer's ids reach ", tokenizer.vocab_size() - 1,
                   ", beyond the model's vocab_size ", encoder.vocab_size);
    }
    BertModel model = BertModel::load(dir, precision);
    return TaskModel(std::move(model), std::move(tokenizer), std::move(config));
  }

  // ---- sequence classification and cross-encoders ----

  // One text, or a pair (text, text_pair), classified; scores by config().head.classify_scores.
  [[nodiscard]] TextClassification classify(std::string_view text,
                                            std::optional<std::string_view> text_pair = std::nullopt,
                                            ThreadPool* pool = nullptr) const {
    require_task(HeadTask::kSequenceClassification, "classify");
    const Encoding e = text_pair ? tokenizer_.encode_pair(text, *text_pair) : tokenizer_.encode(text);
    return std::move(classify_encoded(std::span(&e, 1), config_.head.classify_scores, pool)[0]);
  }

  // Many texts in one encoder run (no padding computed).
  [[nodiscard]] std::vector<TextClassification> classify_batch(std::span<const std::string> texts,
                                                               ThreadPool* pool = nullptr) const {
    require_task(HeadTask::kSequenceClassification, "classify");
    std::vector<Encoding> batch;
    batch.reserve(texts.size());
    for (const std::string& t : texts) batch.push_back(tokenizer_.encode(t));
    return classify_encoded(batch, config_.head.classify_scores, pool);
  }

  // The relevance of each passage to the query: the (query, passage) pair's first output through
  // config().head.pair_scores, in passage order (sentence-transformers' CrossEncoder.predict).
  [[nodiscard]] std::vector<double> score_pairs(std::string_view query, std::span<const std::string> passages,
                                                ThreadPool* pool = nullptr) const {
    require_task(HeadTask::kSequenceClassification, "score pairs");
    if (config_.head.head.outputs() != 1) {
      throw Error(concat("stile: TaskModel: reranking needs a cross-encoder (one output); this classifier has ",
                         config_.head.head.outputs(), " labels"));
    }
    std::vector<Encoding> batch;
    batch.reserve(passages.size());
    for (const std::string& p : passages) batch.push_back(tokenizer_.encode_pair(query, p));
    std::vector<double> scores;
    for (const TextClassification& c : classify_encoded(batch, config_.head.pair_scores, pool))
      scores.push_back(c.scores[0]);
    return scores;
  }

  // Passage indices by descending score (ties keep passage order: CrossEncoder.rank's stable sort).
  [[nodiscard]] static std::vector<std::size_t> rank(std::span<const double> scores) {
    std::vector<std::size_t> order(scores.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
    return order;
  }

  // ---- token classification ----

  // The entities of a text. stride: nullopt truncates the text to max_length() tokens; a value
  // covers all of it in windows overlapping by that many tokens (less than max_length() minus the
  // special tokens). Offsets are bytes of `text`.
  [[nodiscard]] std::vector<Entity> entities(std::string_view text, Aggregation aggregation,
                                             std::optional<std::size_t> stride = std::nullopt,
                                             ThreadPool* pool = nullptr) const {
    require_task(HeadTask::kTokenClassification, "tag tokens");
    if (stride && aggregation == Aggregation::kNone) {
      throw Error("stile: TaskModel: windows (a stride) need an aggregation other than none, as the reference's");
    }
    std::vector<Encoding> windows =
        stride ? encode_windows(tokenizer_, text, config_.max_length, *stride) : std::vector{tokenizer_.encode(text)};
    if (!windows.empty() && windows[0].offsets.size() != windows[0].size()) {
      throw Error(
          "stile: TaskModel: token classification needs the tokens' offsets, which a vocab.txt tokenizer "
          "does not give: use the model's tokenizer.json");
    }
    std::vector<float> hidden;
    const std::vector<std::size_t> lengths = model_.encode(windows, hidden, pool);
    std::vector<Entity> all;
    std::size_t row = 0;
    std::vector<float> logits;
    for (std::size_t w = 0; w < windows.size(); ++w) {
      config_.head.head.apply(hidden.data() + row * hidden_size(), lengths[w], hidden_size(), logits, pool);
      row += lengths[w];
      const std::vector<ScoredToken> tokens = scored_tokens(text, windows[w], logits, labels().size(), tokenizer_);
      std::vector<Entity> found = window_entities(tokens, config_.head.labels, aggregation);
      all.insert(all.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
    }
    return windows.size() > 1 ? merge_window_entities(std::move(all)) : all;
  }

  // Each token's logits ([tokens x labels]) for one text, truncated to max_length().
  [[nodiscard]] std::vector<float> token_logits(std::string_view text, ThreadPool* pool = nullptr) const {
    require_task(HeadTask::kTokenClassification, "tag tokens");
    const Encoding e = tokenizer_.encode(text);
    std::vector<float> hidden, logits;
    const std::vector<std::size_t> lengths = model_.encode(std::span(&e, 1), hidden, pool);
    config_.head.head.apply(hidden.data(), lengths[0], hidden_size(), logits, pool);
    return logits;
  }

  // ---- SPLADE ----

  [[nodiscard]] SparseVector sparse(std::string_view text, ThreadPool* pool = nullptr) const {
    require_task(HeadTask::kMaskedLm, "make a sparse vector");
    const Encoding e = tokenizer_.encode(text);
    std::vector<float> hidden, logits;
    const std::vector<std::size_t> lengths = model_.encode(std::span(&e, 1), hidden, pool);
    config_.head.head.apply(hidden.data(), lengths[0], hidden_size(), logits, pool);
    const std::size_t vocab = config_.head.head.outputs();
    std::vector<float> pooled(vocab, 0.0f);
    for (std::size_t t = 0; t < lengths[0]; ++t) {
      const float* row = logits.data() + t * vocab;
      for (std::size_t v = 0; v < vocab; ++v) {
        float x = std::log1p(std::max(row[v], 0.0f));
        if (config_.head.splade.log1p_twice) x = std::log1p(x);
        pooled[v] = config_.head.splade.max ? std::max(pooled[v], x) : pooled[v] + x;
      }
    }
    SparseVector out;
    for (std::size_t v = 0; v < vocab; ++v) {
      if (pooled[v] > 0.0f) {
        out.ids.push_back(static_cast<std::int32_t>(v));
        out.weights.push_back(pooled[v]);
      }
    }
    return out;
  }

  // Already tokenized texts or pairs (tokenizer().encode or encode_pair; unpadded), classified in
  // one encoder run, scores by `scores` (config().head.classify_scores or pair_scores): for callers
  // that tokenize ahead and batch across requests (stile-serve).
  [[nodiscard]] std::vector<TextClassification> classify_encoded(std::span<const Encoding> batch, ScoreFunction scores,
                                                                 ThreadPool* pool) const {
    require_task(HeadTask::kSequenceClassification, "classify");
    std::vector<TextClassification> out;
    if (batch.empty()) return out;
    std::vector<float> hidden;
    const std::vector<std::size_t> lengths = model_.encode(batch, hidden, pool);
    std::size_t row = 0;
    for (const std::size_t len : lengths) {
      TextClassification c;
      config_.head.head.apply(hidden.data() + row * hidden_size(), len, hidden_size(), c.logits, pool);
      c.scores = class_scores(scores, c.logits);
      out.push_back(std::move(c));
      row += len;
    }
    return out;
  }

  [[nodiscard]] const TaskModelConfig& config() const noexcept { return config_; }
  [[nodiscard]] HeadTask task() const noexcept { return config_.head.task; }
  [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return config_.head.labels; }
  [[nodiscard]] std::size_t max_length() const noexcept { return config_.max_length; }
  [[nodiscard]] const BertModel& model() const noexcept { return model_; }
  [[nodiscard]] const Tokenizer& tokenizer() const noexcept { return tokenizer_; }
  [[nodiscard]] const TaskHead& head() const noexcept { return config_.head.head; }

 private:
  [[nodiscard]] std::size_t hidden_size() const noexcept { return model_.config().hidden; }

  void require_task(HeadTask task, std::string_view what) const {
    if (config_.head.task != task) {
      throw Error(concat("stile: TaskModel: cannot ", what, ": the model's head is ", to_string(config_.head.task),
                         ", not ", to_string(task)));
    }
  }

  BertModel model_;
  Tokenizer tokenizer_;
  TaskModelConfig config_;
};

}  // namespace stile
