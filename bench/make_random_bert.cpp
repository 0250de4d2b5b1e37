// make_random_bert: a BERT checkpoint of a given shape with random weights (config.json, vocab.txt,
// model.safetensors), for measuring speed and memory at shapes larger than the default model
// (BERT-base, BERT-large). The weights are made on the spot and mean nothing: never report
// accuracy from them. The vocabulary is copied from a real model (tokenization must work).
//
//   make_random_bert OUT_DIR --vocab ~/.cache/stile/all-MiniLM-L6-v2/vocab.txt [--base | --large]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  fs::path vocab_path;
  std::size_t d = 768, layers = 12, heads = 12, ff = 3072;
  stile_cli::Parser cli("make_random_bert", "[options] OUT_DIR --vocab VOCAB_TXT",
                        "Writes a BERT checkpoint of random weights (config.json, vocab.txt, model.safetensors) into "
                        "OUT_DIR, for speed and memory only: the weights mean nothing. BERT-base by default.");
  cli.flag("--vocab", "FILE", "the vocabulary to copy (a real model's vocab.txt: tokenization must work)", vocab_path);
  cli.toggle("--base", "BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072", [&] { d = 768, layers = 12, heads = 12, ff = 3072; });
  cli.toggle("--large", "BERT-large: 24 layers, hidden 1024, 16 heads, FFN 4096",
             [&] { d = 1024, layers = 24, heads = 16, ff = 4096; });
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1 || vocab_path.empty()) cli.fail("give OUT_DIR and --vocab");
  const fs::path out_dir = positional[0];
  std::ifstream vin(vocab_path);
  if (!vin) {
    std::fprintf(stderr, "make_random_bert: cannot read %s\n", vocab_path.c_str());
    return 1;
  }
  std::size_t vocab = 0;
  std::string vocab_text, line;
  while (std::getline(vin, line)) {
    vocab_text += line + "\n";
    ++vocab;
  }
  fs::create_directories(out_dir);
  std::ofstream(out_dir / "vocab.txt") << vocab_text;
  const std::size_t max_pos = 512, types = 2;
  std::ofstream(out_dir / "config.json") << nlohmann::json{{"architectures", {"BertModel"}},
                                                           {"hidden_act", "gelu"},
                                                           {"hidden_size", d},
                                                           {"num_hidden_layers", layers},
                                                           {"num_attention_heads", heads},
                                                           {"intermediate_size", ff},
                                                           {"vocab_size", vocab},
                                                           {"max_position_embeddings", max_pos},
                                                           {"type_vocab_size", types},
                                                           {"layer_norm_eps", 1e-12},
                                                           {"model_type", "bert"}}
                                                .dump(2);
  std::uint64_t state = 20261123;
  auto normal = [&] {  // splitmix64, sum of 4 uniforms: close enough to a Gaussian for weights
    double s = 0;
    for (int k = 0; k < 4; ++k) {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s += double((z ^ (z >> 31)) >> 11) * 0x1p-53 - 0.5;
    }
    return static_cast<float>(s * std::sqrt(3.0));  // unit variance
  };
  nlohmann::json header = nlohmann::json::object();
  std::vector<float> data;
  auto add = [&](const std::string& name, std::vector<std::size_t> shape, float std_dev, float offset) {
    std::size_t n = 1;
    for (const std::size_t x : shape) n *= x;
    const std::size_t begin = data.size() * sizeof(float);
    for (std::size_t i = 0; i < n; ++i) data.push_back(offset + std_dev * normal());
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size() * sizeof(float)}}};
  };
  add("embeddings.word_embeddings.weight", {vocab, d}, 0.02f, 0.0f);
  add("embeddings.position_embeddings.weight", {max_pos, d}, 0.02f, 0.0f);
  add("embeddings.token_type_embeddings.weight", {types, d}, 0.02f, 0.0f);
  add("embeddings.LayerNorm.weight", {d}, 0.0f, 1.0f);
  add("embeddings.LayerNorm.bias", {d}, 0.0f, 0.0f);
  for (std::size_t l = 0; l < layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      add(p + "attention.self." + qkv + ".weight", {d, d}, 0.02f, 0.0f);
      add(p + "attention.self." + qkv + ".bias", {d}, 0.02f, 0.0f);
    }
    add(p + "attention.output.dense.weight", {d, d}, 0.02f, 0.0f);
    add(p + "attention.output.dense.bias", {d}, 0.02f, 0.0f);
    add(p + "attention.output.LayerNorm.weight", {d}, 0.0f, 1.0f);
    add(p + "attention.output.LayerNorm.bias", {d}, 0.0f, 0.0f);
    add(p + "intermediate.dense.weight", {ff, d}, 0.02f, 0.0f);
    add(p + "intermediate.dense.bias", {ff}, 0.02f, 0.0f);
    add(p + "output.dense.weight", {d, ff}, 0.02f, 0.0f);
    add(p + "output.dense.bias", {d}, 0.02f, 0.0f);
    add(p + "output.LayerNorm.weight", {d}, 0.0f, 1.0f);
    add(p + "output.LayerNorm.bias", {d}, 0.0f, 0.0f);
  }
  std::string head = header.dump();
  while (head.size() % 8 != 0) head += ' ';
  std::ofstream out(out_dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  const std::uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << head;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!out) {
    std::fprintf(stderr, "make_random_bert: cannot write %s\n", (out_dir / "model.safetensors").c_str());
    return 1;
  }
  std::printf("make_random_bert: %s: %zu layers, hidden %zu, %zu heads, FFN %zu, %zu parameters (random)\n",
              out_dir.c_str(), layers, d, heads, ff, data.size());
  return 0;
}
