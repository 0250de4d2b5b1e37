// libFuzzer target for the task-head readers (model/task_head.hpp, model/class_scores.hpp, the
// labels of model/checkpoint_classifier.hpp): the input's first byte picks one of the head goldens'
// checkpoints (data/heads), the rest is read as its config.json. Any input must give a head whose
// sizes agree with the encoder and its labels, or a stile::Error. Seeds: fuzz_seeds_task_head.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stile/io/encoder_config.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/model/checkpoint_classifier.hpp"
#include "stile/model/class_scores.hpp"
#include "stile/model/task_head.hpp"

namespace {

constexpr std::array<const char*, 5> kModels = {"bert_seqcls", "modernbert_mean", "deberta-v2_seqcls", "bert_ner",
                                                "distilbert_splade"};

const stile::SafetensorsFile& checkpoint(std::size_t i) {
  static const std::array<stile::SafetensorsFile, kModels.size()> files = [] {
    const std::filesystem::path heads = std::filesystem::path(STILE_TEST_DATA_DIR) / "heads";
    return std::array<stile::SafetensorsFile, kModels.size()>{
        stile::SafetensorsFile::open((heads / kModels[0] / "model.safetensors").string()),
        stile::SafetensorsFile::open((heads / kModels[1] / "model.safetensors").string()),
        stile::SafetensorsFile::open((heads / kModels[2] / "model.safetensors").string()),
        stile::SafetensorsFile::open((heads / kModels[3] / "model.safetensors").string()),
        stile::SafetensorsFile::open((heads / kModels[4] / "model.safetensors").string())};
  }();
  return files[i];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const stile::SafetensorsFile& file = checkpoint(data[0] % kModels.size());
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const stile::EncoderConfig c = stile::parse_encoder_config(text, "config.json");
    const nlohmann::json config = nlohmann::json::parse(text);
    for (const stile::HeadTask task : {stile::HeadTask::kSequenceClassification, stile::HeadTask::kTokenClassification,
                                       stile::HeadTask::kMaskedLm}) {
      try {
        const stile::TaskHead head = stile::read_task_head(task, file, c, config, "config.json");
        if (head.layers.empty() || head.layers.front().in != c.hidden) __builtin_trap();
        for (std::size_t l = 1; l < head.layers.size(); ++l) {
          if (head.layers[l].in != head.layers[l - 1].out) __builtin_trap();
        }
        if (task == stile::HeadTask::kMaskedLm) continue;
        const auto labels = stile::classifier_labels(config, head.outputs(), "config.json", "LABEL_");
        if (labels.size() != head.outputs()) __builtin_trap();
        (void)stile::pipeline_score_function(config, labels.size(), "config.json");
        (void)stile::cross_encoder_score_function(config, "config.json", nullptr, "", labels.size());
      } catch (const stile::Error&) {
        // A head the checkpoint does not have, or a malformed field: the expected refusal.
      }
    }
  } catch (const stile::Error&) {
  } catch (const nlohmann::json::exception&) {
    // parse_encoder_config refuses text that is not JSON first; this catches only a config it
    // takes that nlohmann then reads differently (none is known).
  }
  return 0;
}
