#pragma once
// What a fine-tuned checkpoint directory says about its head: the task (config.json's
// "architectures": <Family>ForSequenceClassification, ...ForTokenClassification, ...ForMaskedLM),
// the head's layers (model/task_head.hpp), the class names (id2label; transformers' LABEL_i
// without), the score functions (model/class_scores.hpp), and for a sentence-transformers
// directory its modules.json (the encoder at the top; a SparseEncoder's SpladePooling settings)
// and config_sentence_transformers.json (a CrossEncoder's activation).
//
// Contract: load_checkpoint_head(dir, encoder) reads dir/config.json and the head's tensors of
// dir/model.safetensors (and nothing of the encoder's but, for a tied masked-LM decoder, the word
// table); every departure is a stile::Error naming the file and the field. A shard store's head
// sidecar (the end of this file) is read the same way.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/json_file.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/io/safetensors_writer.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/model/checkpoint_classifier.hpp"
#include "stile/model/class_scores.hpp"
#include "stile/model/sentence_modules.hpp"
#include "stile/model/task_head.hpp"

namespace stile {

// SPLADE's pooling over the masked-LM logits (sentence-transformers' SpladePooling): per token
// log(1 + ReLU(logit)) (log1p_relu: log1p once more), then the max or the sum over the tokens.
struct SpladeSettings {
  bool max = true;
  bool log1p_twice = false;
};

struct CheckpointHead {
  HeadTask task = HeadTask::kSequenceClassification;
  TaskHead head;
  std::vector<std::string> labels;  // classification: one per output, in id order; empty for a masked LM
  ScoreFunction classify_scores = ScoreFunction::kSoftmax;  // the text-classification pipeline's
  ScoreFunction pair_scores = ScoreFunction::kSigmoid;      // sentence-transformers' CrossEncoder's
  bool cross_encoder = false;  // saved by sentence-transformers' CrossEncoder: its scores are pair_scores
  SpladeSettings splade;       // a masked LM's SPLADE pooling

  // The function of the scores the model was made to give: a cross-encoder's, else the pipeline's.
  [[nodiscard]] ScoreFunction scores() const noexcept { return cross_encoder ? pair_scores : classify_scores; }
};

namespace checkpoint_head_detail {

namespace fs = std::filesystem;

inline constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

// The task a config.json's "architectures" names.
inline HeadTask read_task(const nlohmann::json& config, std::string_view file) {
  const auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) {
    fail_in_file(file,
                 "\"architectures\" must name the model class (<Family>ForSequenceClassification, "
                 "ForTokenClassification or ForMaskedLM) for stile to know its head");
  }
  const std::string name = (*it)[0].get<std::string>();
  if (name.ends_with("ForSequenceClassification")) return HeadTask::kSequenceClassification;
  if (name.ends_with("ForTokenClassification")) return HeadTask::kTokenClassification;
  if (name.ends_with("ForMaskedLM")) return HeadTask::kMaskedLm;
  fail_in_file(file, "\"architectures\": ", name.substr(0, 60),
               " has no head stile runs (ForSequenceClassification, ForTokenClassification, ForMaskedLM)");
}

// A sentence-transformers directory's modules.json (a CrossEncoder's or a SparseEncoder's): the
// encoder at the directory's top, then, for a SparseEncoder, SpladePooling and its settings.
inline SpladeSettings read_task_modules(const fs::path& dir, HeadTask task) {
  SpladeSettings splade;
  const fs::path path = dir / "modules.json";
  if (!fs::exists(path)) return splade;
  const std::string file = path.string();
  const nlohmann::json modules = read_json_file(path, kMaxConfigBytes, 16, "the modules list");
  if (!modules.is_array() || modules.empty()) fail_in_file(file, "must be a non-empty JSON array of modules");
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const nlohmann::json& m = modules[i];
    const auto type = m.is_object() ? m.find("type") : m.end();
    if (type == m.end() || !type->is_string()) fail_in_file(file, "module ", i, " has no string \"type\"");
    const std::string& t = type->get_ref<const std::string&>();
    const std::string_view name = std::string_view(t).substr(t.rfind('.') + 1);
    const fs::path where = sentence_module_dir(dir, m, path);
    if (i == 0) {
      if (name != "Transformer" && name != "MLMTransformer") {
        fail_in_file(file, "module 0 is ", t.substr(0, 80), ", not the Transformer");
      }
      if (where != dir) {
        fail_in_file(file, "the encoder must be the directory's own (module 0's path is \"", where.string(), "\")");
      }
    } else if (name == "SpladePooling" && task == HeadTask::kMaskedLm && i == 1) {
      const fs::path settings_path = where / "config.json";
      const std::string settings_file = settings_path.string();
      const nlohmann::json j = read_json_file(settings_path, kMaxConfigBytes, 16, "the SpladePooling config");
      const std::string pooling = json_optional_string(j, "pooling_strategy", "max", settings_file);
      const std::string activation = json_optional_string(j, "activation_function", "relu", settings_file);
      if (pooling != "max" && pooling != "sum") {
        fail_in_file(settings_file, "\"pooling_strategy\": \"", pooling.substr(0, 40), "\" is not max or sum");
      }
      if (activation != "relu" && activation != "log1p_relu") {
        fail_in_file(settings_file, "\"activation_function\": \"", activation.substr(0, 40),
                     "\" is not relu or log1p_relu");
      }
      splade.max = pooling == "max";
      splade.log1p_twice = activation == "log1p_relu";
    } else {
      fail_in_file(file, "module ", t.substr(0, 80), " is not supported after the encoder of a ", to_string(task),
                   " model (a SparseEncoder's SpladePooling is)");
    }
  }
  return splade;
}

// A classifier's labels (id2label, checked against num_labels and the head's outputs) and score
// functions from its config.json and, when sentence-transformers saved it, its
// config_sentence_transformers.json (`st`; nullptr when none).
inline void read_classifier_config(CheckpointHead& out, const nlohmann::json& config, const std::string& config_file,
                                   const nlohmann::json* st, std::string_view st_file) {
  const std::size_t outputs = out.head.outputs();
  out.labels = classifier_labels(config, outputs, config_file, "LABEL_");
  if (const auto n = config.find("num_labels");
      n != config.end() && !n->is_null() && !(n->is_number_unsigned() && n->get<std::size_t>() == outputs)) {
    fail_in_file(config_file, "\"num_labels\" is ", n->dump(), ", the classifier has ", outputs, " outputs");
  }
  out.classify_scores = pipeline_score_function(config, outputs, config_file);
  out.pair_scores = cross_encoder_score_function(config, config_file, st, st_file, outputs);
  if (st == nullptr || !st->is_object()) return;
  if (st->contains("default_prompt_name") && !(*st)["default_prompt_name"].is_null()) {
    fail_in_file(st_file, "\"default_prompt_name\": prompts are not implemented for a ", to_string(out.task), " model");
  }
  out.cross_encoder = json_optional_string(*st, "model_type", "", st_file) == "CrossEncoder";
}

}  // namespace checkpoint_head_detail

// The head of the checkpoint directory `dir` whose encoder `encoder` describes.
inline CheckpointHead load_checkpoint_head(const std::filesystem::path& dir, const EncoderConfig& encoder) {
  using namespace checkpoint_head_detail;
  const fs::path config_path = dir / "config.json";
  const std::string config_file = config_path.string();
  const nlohmann::json json = read_json_file(config_path, kMaxConfigBytes, 16, "the model config");
  CheckpointHead out;
  out.task = read_task(json, config_file);
  out.splade = read_task_modules(dir, out.task);
  {
    const SafetensorsFile file = SafetensorsFile::open((dir / "model.safetensors").string());
    out.head = read_task_head(out.task, file, encoder, json, config_file);
  }
  if (out.task == HeadTask::kMaskedLm) return out;
  const fs::path st_path = dir / "config_sentence_transformers.json";
  std::optional<nlohmann::json> st;
  if (fs::exists(st_path)) st = read_json_file(st_path, kMaxConfigBytes, 16, "the sentence-transformers config");
  read_classifier_config(out, json, config_file, st ? &*st : nullptr, st_path.string());
  return out;
}

// ---- a shard store's head sidecar ----
// A store converted from a sequence or token classifier keeps its head beside it, in
// STORE.head.safetensors: the head's tensors as the checkpoint names them, and in the file's
// metadata the checkpoint's config.json ("config") and a CrossEncoder's
// config_sentence_transformers.json (its activation). The engine reads it once and keeps it
// resident: a head is small (MiniLM's pooler and classifier: 0.6 MB in fp32) and runs after the
// last layer, where no compute is left for a read to hide behind.

inline std::filesystem::path head_path_for(const std::filesystem::path& store) {
  std::filesystem::path p = store;
  p += ".head.safetensors";
  return p;
}

// Writes the sidecar of the checkpoint `dir` for `store` when its config.json names a sequence or
// token classifier (returns whether it did): every tensor outside the base model, and its pooler.
inline bool save_head_sidecar(const std::filesystem::path& dir, const std::filesystem::path& store) {
  using namespace checkpoint_head_detail;
  const fs::path config_path = dir / "config.json";
  const nlohmann::json json = read_json_file(config_path, kMaxConfigBytes, 16, "the model config");
  const auto arch = json.find("architectures");
  if (arch == json.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string()) return false;
  const std::string& model_class = (*arch)[0].get_ref<const std::string&>();
  if (!model_class.ends_with("ForSequenceClassification") && !model_class.ends_with("ForTokenClassification")) {
    return false;
  }
  const EncoderConfig encoder = read_encoder_config(config_path.string());
  const SafetensorsFile file = SafetensorsFile::open((dir / "model.safetensors").string());
  const std::string prefix = CheckpointNames::of(encoder, file).prefix;
  if (prefix.empty()) fail_in_file(file.path(), "a classifier's encoder tensors have no base-model prefix");
  (void)read_task_head(read_task(json, config_path.string()), file, encoder, json, config_path.string());  // it reads
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& t : file.tensors()) {
    if (t.name.starts_with(prefix) && !t.name.starts_with(prefix + "pooler.")) continue;
    const std::span<const std::byte> bytes = file.bytes(t);
    tensors.push_back({t.name, t.dtype, t.shape, {bytes.begin(), bytes.end()}});
  }
  std::map<std::string, std::string> metadata{{"config", json.dump()}};
  if (const fs::path st = dir / "config_sentence_transformers.json"; fs::exists(st)) {
    metadata.emplace("config_sentence_transformers",
                     read_json_file(st, kMaxConfigBytes, 16, "the sentence-transformers config").dump());
  }
  const std::vector<std::byte> bytes = safetensors_bytes(std::move(tensors), metadata);
  write_file_atomically(head_path_for(store),
                        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  return true;
}

// The head a sidecar holds, for a store whose encoder `encoder` describes.
inline CheckpointHead load_head_sidecar(const std::filesystem::path& path, const EncoderConfig& encoder) {
  const std::string name = path.string();
  const SafetensorsFile file = SafetensorsFile::open(name);
  const auto config_text = file.metadata().find("config");
  if (config_text == file.metadata().end()) fail_in_file(name, "has no \"config\" in its metadata");
  const nlohmann::json json = parse_strict_json(config_text->second, 16, name, "the head's config");
  CheckpointHead out;
  out.task = checkpoint_head_detail::read_task(json, name);
  if (out.task == HeadTask::kMaskedLm) fail_in_file(name, "holds a ", to_string(out.task), " head");
  out.head = read_task_head(out.task, file, encoder, json, name);
  std::optional<nlohmann::json> st;
  if (const auto text = file.metadata().find("config_sentence_transformers"); text != file.metadata().end()) {
    st = parse_strict_json(text->second, 16, name, "the head's sentence-transformers config");
  }
  checkpoint_head_detail::read_classifier_config(out, json, name, st ? &*st : nullptr, name);
  return out;
}

}  // namespace stile
