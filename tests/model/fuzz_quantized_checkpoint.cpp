// libFuzzer target for the reader of quantized checkpoints (model/bert_weights.hpp,
// model/stored_linear.hpp): the input is written as model.safetensors next to a fixed tiny
// config.json, and BertWeights::load reads it in int8 and in fp16. Any input must either load or be
// refused with a stile::Error; anything else (a crash, a sanitizer report, a hang, another exception
// type escaping) is a bug.
// Seeds: tests/model/fuzz_seeds_qckpt/ (written by test_quantized_checkpoint "[make-fuzz-seeds]"):
// an fp32 checkpoint of this config and its fp16, int8 per-channel and int8 per-tensor conversions.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "stile/model/bert_weights.hpp"
#include "stile/ops/precision.hpp"

namespace {

namespace fs = std::filesystem;

constexpr const char* kConfig =
    R"({"architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": 8, "num_hidden_layers": 1, )"
    R"("num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10, "max_position_embeddings": 8, )"
    R"("type_vocab_size": 2, "layer_norm_eps": 1e-12, "model_type": "bert"})";

// The model directory of this process, made once (removed at exit).
const fs::path& model_dir() {
  static const struct Dir {
    fs::path path = fs::temp_directory_path() / ("stile_fuzz_qckpt_" + std::to_string(::getpid()));
    Dir() {
      fs::create_directories(path);
      std::ofstream(path / "config.json") << kConfig;
    }
    ~Dir() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } dir;
  return dir.path;
}

void load(const stile::ModelPrecision& precision) {
  try {
    const stile::BertWeights w = stile::BertWeights::load(model_dir(), precision);
    // A loaded model is whole: every layer, every GEMM weight of the config's shape.
    if (w.layers.size() != 1 || w.layers[0].kv.view().rows() != 16 || w.layers[0].ffn1.view().rows() != 16 ||
        w.word_embeddings.size() != 80) {
      __builtin_trap();
    }
  } catch (const stile::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(model_dir() / "model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out.good()) __builtin_trap();
  }
  static const stile::ModelPrecision int8 = stile::precision_preset("int8");
  static const stile::ModelPrecision fp16 = stile::precision_preset("fp16");
  load(int8);
  load(fp16);
  return 0;
}
