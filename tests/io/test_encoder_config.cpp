// The BERT config reader: a real config's numbers come through, and every missing, malformed or
// unsupported field is refused with the file and the field named.
#include "stile/io/encoder_config.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "safetensors_test_util.hpp"
#include "support/error_of.hpp"

using Catch::Contains;
using stile_test::error_of;

namespace {

// bert-base-uncased's config.json, as Hugging Face ships it.
const std::string kBertBase = R"({
  "architectures": ["BertForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "gradient_checkpointing": false,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 512,
  "model_type": "bert",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "transformers_version": "4.6.0.dev0",
  "type_vocab_size": 2,
  "use_cache": true,
  "vocab_size": 30522
})";

// kBertBase with one "key": value replaced (or the key removed when replacement is empty).
std::string edited(const std::string& key, const std::string& replacement) {
  std::string text = kBertBase;
  const std::size_t start = text.find("\"" + key + "\"");
  REQUIRE(start != std::string::npos);
  const std::size_t end = text.find('\n', start);
  const bool has_comma = text[end - 1] == ',';
  if (replacement.empty()) {
    text.erase(start, end - start + 1);
    if (!has_comma) {  // removed the last entry: drop the comma before it
      const std::size_t comma = text.rfind(',', start);
      text.erase(comma, 1);
    }
  } else {
    text.replace(start, end - start - (has_comma ? 1 : 0), "\"" + key + "\": " + replacement);
  }
  return text;
}

}  // namespace

TEST_CASE("bert config: bert-base-uncased reads back", "[io][config]") {
  const stile::EncoderConfig c = stile::parse_encoder_config(kBertBase, "bert-base/config.json");
  CHECK(c.hidden == 768);
  CHECK(c.num_layers == 12);
  CHECK(c.num_heads == 12);
  CHECK(c.head_dim() == 64);
  CHECK(c.intermediate == 3072);
  CHECK(c.vocab_size == 30522);
  CHECK(c.max_position_embeddings == 512);
  CHECK(c.type_vocab_size == 2);
  CHECK(c.layer_norm_eps == 1e-12f);
  CHECK(c.hidden_act == "gelu");
}

TEST_CASE("bert config: position_embedding_type may be absent", "[io][config]") {
  CHECK(stile::parse_encoder_config(edited("position_embedding_type", ""), "cfg").hidden == 768);
}

TEST_CASE("bert config: read from a file", "[io][config]") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("stile_test_io_config_" + std::to_string(::getpid()) + ".json"))
          .string();
  {
    std::ofstream out(path);
    out << kBertBase;
  }
  const stile::EncoderConfig c = stile::read_encoder_config(path);
  std::filesystem::remove(path);
  CHECK(c.hidden == 768);
  CHECK_THAT(error_of([&] { (void)stile::read_encoder_config(path); }), Contains(path) && Contains("cannot open"));
}

TEST_CASE("bert config: bad configs are refused with the file and the field named", "[io][config]") {
  struct BadCase {
    const char* label;
    std::string text;
    std::vector<std::string> words;
  };
  const std::vector<BadCase> cases = {
      {"invalid-json", "{\"hidden_size\": 768,", {"not valid JSON"}},
      {"not-object", "[768]", {"not a JSON object"}},
      {"missing-hidden", edited("hidden_size", ""), {"missing key", "hidden_size"}},
      {"missing-layers", edited("num_hidden_layers", ""), {"missing key", "num_hidden_layers"}},
      {"missing-heads", edited("num_attention_heads", ""), {"missing key", "num_attention_heads"}},
      {"missing-intermediate", edited("intermediate_size", ""), {"missing key", "intermediate_size"}},
      {"missing-vocab", edited("vocab_size", ""), {"missing key", "vocab_size"}},
      {"missing-positions", edited("max_position_embeddings", ""), {"missing key", "max_position_embeddings"}},
      {"missing-types", edited("type_vocab_size", ""), {"missing key", "type_vocab_size"}},
      {"missing-eps", edited("layer_norm_eps", ""), {"missing key", "layer_norm_eps"}},
      {"missing-act", edited("hidden_act", ""), {"missing key", "hidden_act"}},
      {"zero-layers", edited("num_hidden_layers", "0"), {"num_hidden_layers", "positive"}},
      {"negative-hidden", edited("hidden_size", "-768"), {"hidden_size", "positive", "-768"}},
      {"fractional-hidden", edited("hidden_size", "768.5"), {"hidden_size", "integer"}},
      {"string-vocab", edited("vocab_size", "\"30522\""), {"vocab_size", "integer"}},
      {"absurd-vocab", edited("vocab_size", "100000000000"), {"vocab_size", "limit"}},
      {"heads-do-not-divide", edited("num_attention_heads", "10"), {"768", "not divisible", "10"}},
      {"relu", edited("hidden_act", "\"relu\""), {"hidden_act", "relu", "not supported"}},
      {"gelu-tanh", edited("hidden_act", "\"gelu_new\""), {"gelu_new", "not supported"}},
      {"act-not-string", edited("hidden_act", "1"), {"hidden_act", "string"}},
      {"zero-eps", edited("layer_norm_eps", "0"), {"layer_norm_eps", "positive"}},
      {"negative-eps", edited("layer_norm_eps", "-1e-12"), {"layer_norm_eps", "positive"}},
      {"huge-eps", edited("layer_norm_eps", "5"), {"layer_norm_eps", "below 1"}},
      {"string-eps", edited("layer_norm_eps", "\"1e-12\""), {"layer_norm_eps", "number"}},
      {"relative-positions",
       edited("position_embedding_type", "\"relative_key\""),
       {"position_embedding_type", "relative_key", "not supported"}},
  };
  for (const BadCase& c : cases) {
    SECTION(c.label) {
      const std::string name = std::string(c.label) + "/config.json";
      const std::string message = error_of([&] { (void)stile::parse_encoder_config(c.text, name); });
      INFO(c.text);
      CHECK_THAT(message, Contains(name));
      for (const std::string& word : c.words) CHECK_THAT(message, Contains(word));
    }
  }
}
