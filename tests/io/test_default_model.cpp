// The readers on the real default model (all-MiniLM-L6-v2, fetched by scripts/fetch-model into
// STILE_MODEL_DIR). Without the model these tests warn and skip: they never pass silently.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/io/encoder_config.hpp"
#include "stile/io/safetensors.hpp"

namespace {

// The model directory, or "" after a warning saying why the test is skipped.
std::string model_dir_or_warn() {
  const char* env = std::getenv("STILE_MODEL_DIR");
  const std::string dir = env != nullptr && *env != '\0' ? env : STILE_MODEL_DIR;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors") ||
      !std::filesystem::exists(std::filesystem::path(dir) / "config.json")) {
    WARN("SKIPPED: the default model is not in " << dir << " (run scripts/fetch-model)");
    return {};
  }
  return dir;
}

}  // namespace

TEST_CASE("default model: config.json has MiniLM-L6-H384's dimensions", "[io][model]") {
  const std::string dir = model_dir_or_warn();
  if (dir.empty()) return;
  const stile::EncoderConfig config = stile::read_encoder_config(dir + "/config.json");
  CHECK(config.num_layers == 6);
  CHECK(config.hidden == 384);
  CHECK(config.num_heads == 12);
  CHECK(config.head_dim() == 32);
  CHECK(config.intermediate == 1536);
  CHECK(config.vocab_size == 30522);
  CHECK(config.max_position_embeddings == 512);
  CHECK(config.type_vocab_size == 2);
  CHECK(config.layer_norm_eps == 1e-12f);
  CHECK(config.hidden_act == "gelu");
}

TEST_CASE("default model: model.safetensors holds every BERT weight with the config's shapes", "[io][model]") {
  const std::string dir = model_dir_or_warn();
  if (dir.empty()) return;
  const stile::EncoderConfig config = stile::read_encoder_config(dir + "/config.json");
  const stile::SafetensorsFile file = stile::SafetensorsFile::open(dir + "/model.safetensors");
  CHECK(file.metadata().at("format") == "pt");

  const auto H = static_cast<std::int64_t>(config.hidden);
  const auto I = static_cast<std::int64_t>(config.intermediate);
  using Shape = std::vector<std::int64_t>;
  std::vector<std::pair<std::string, Shape>> expected = {
      {"embeddings.word_embeddings.weight", {static_cast<std::int64_t>(config.vocab_size), H}},
      {"embeddings.position_embeddings.weight", {static_cast<std::int64_t>(config.max_position_embeddings), H}},
      {"embeddings.token_type_embeddings.weight", {static_cast<std::int64_t>(config.type_vocab_size), H}},
      {"embeddings.LayerNorm.weight", {H}},
      {"embeddings.LayerNorm.bias", {H}},
      {"pooler.dense.weight", {H, H}},
      {"pooler.dense.bias", {H}},
  };
  for (std::size_t layer = 0; layer < config.num_layers; ++layer) {
    const std::string p = "encoder.layer." + std::to_string(layer) + ".";
    for (const char* proj : {"query", "key", "value"}) {
      expected.push_back({p + "attention.self." + proj + ".weight", {H, H}});
      expected.push_back({p + "attention.self." + proj + ".bias", {H}});
    }
    expected.push_back({p + "attention.output.dense.weight", {H, H}});
    expected.push_back({p + "attention.output.dense.bias", {H}});
    expected.push_back({p + "attention.output.LayerNorm.weight", {H}});
    expected.push_back({p + "attention.output.LayerNorm.bias", {H}});
    expected.push_back({p + "intermediate.dense.weight", {I, H}});  // PyTorch Linear: [out, in]
    expected.push_back({p + "intermediate.dense.bias", {I}});
    expected.push_back({p + "output.dense.weight", {H, I}});
    expected.push_back({p + "output.dense.bias", {H}});
    expected.push_back({p + "output.LayerNorm.weight", {H}});
    expected.push_back({p + "output.LayerNorm.bias", {H}});
  }
  for (const auto& [name, shape] : expected) {
    INFO(name);
    const stile::TensorInfo* t = file.find(name);
    REQUIRE(t != nullptr);
    CHECK(t->dtype == stile::DType::F32);
    CHECK(t->shape == shape);
  }
  // The weights above plus one non-weight buffer, the I64 position ids 0..511.
  CHECK(file.tensors().size() == expected.size() + 1);
  const stile::TensorInfo& ids = file.tensor("embeddings.position_ids");
  CHECK(ids.dtype == stile::DType::I64);
  CHECK(ids.shape == std::vector<std::int64_t>{1, 512});
  const std::span<const std::byte> id_bytes = file.bytes(ids);
  REQUIRE(id_bytes.size() == 512 * 8);
  bool ids_count_up = true;
  for (std::int64_t i = 0; i < 512; ++i) {
    std::int64_t v;
    std::memcpy(&v, id_bytes.data() + 8 * i, 8);
    ids_count_up = ids_count_up && v == i;
  }
  CHECK(ids_count_up);

  // Values read once with Python's struct module from the same file (exact floats, in hex).
  const std::span<const float> words = file.f32_span("embeddings.word_embeddings.weight");
  REQUIRE(words.size() == 30522u * 384u);
  CHECK(words[101 * 384 + 0] == -0x1.20ad1cp-6f);
  CHECK(words[30521 * 384 + 383] == 0x1.2b80f2p-8f);
  CHECK(file.to_f32("embeddings.LayerNorm.weight")[0] == 0x1.32a6bcp-1f);
  CHECK(file.to_f32("encoder.layer.5.output.dense.bias")[383] == 0x1.fd5728p-8f);
}
