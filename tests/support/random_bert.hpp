#pragma once
// A BERT checkpoint of random weights (config.json, vocab.txt, model.safetensors) of any shape: the
// tests' tiny models and bench/make_random_bert's BERT-base and -large. The weights mean nothing.
// Needs only nlohmann_json (no Catch2, no stile), so that bench/ can include it too.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stile_test {

struct RandomBertShape {
  std::size_t hidden, layers, heads, intermediate, vocab, max_pos, types = 2;
};

// Each tensor is offset + scale * noise(), element by element, tensor by tensor in checkpoint
// order; the scale by kind of tensor (the offset is 1 for LayerNorm weights, else 0).
struct RandomBertScales {
  float word_embeddings;  // embeddings.word_embeddings
  float embeddings;       // position and token-type embeddings
  float matrices;         // the layers' weight matrices
  float biases;           // the layers' dense biases
  float layer_norm;       // LayerNorm weights (around 1) and biases
};

// config.json of a BERT of this shape.
inline nlohmann::json random_bert_config(const RandomBertShape& shape) {
  return {{"architectures", {"BertModel"}},
          {"hidden_act", "gelu"},
          {"hidden_size", shape.hidden},
          {"num_hidden_layers", shape.layers},
          {"num_attention_heads", shape.heads},
          {"intermediate_size", shape.intermediate},
          {"vocab_size", shape.vocab},
          {"max_position_embeddings", shape.max_pos},
          {"type_vocab_size", shape.types},
          {"layer_norm_eps", 1e-12},
          {"model_type", "bert"}};
}

// Called after each file is written (config.json, vocab.txt, model.safetensors, in this order), with
// whether it was, completely.
using RandomBertCheck = std::function<void(const std::filesystem::path& file, bool written)>;

// Writes the checkpoint into dir (created if need be); returns its number of parameters.
// vocab_text: vocab.txt's contents, one token a line, shape.vocab of them; empty: "tok0" ..
// "tok<vocab - 1>".
inline std::size_t write_random_bert(const std::filesystem::path& dir, const RandomBertShape& shape,
                                     const RandomBertScales& scales, const std::function<float()>& noise,
                                     const RandomBertCheck& check, std::string vocab_text = {}) {
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& file, const std::string& text) {
    std::ofstream out(dir / file, std::ios::binary | std::ios::trunc);
    out << text;
    check(dir / file, out.good());
  };
  write("config.json", random_bert_config(shape).dump(2));
  if (vocab_text.empty()) {
    for (std::size_t i = 0; i < shape.vocab; ++i) vocab_text += "tok" + std::to_string(i) + "\n";
  }
  write("vocab.txt", vocab_text);

  nlohmann::json header = nlohmann::json::object();
  std::vector<float> data;
  const auto add = [&](const std::string& name, std::vector<std::size_t> dims, float scale, float offset) {
    std::size_t n = 1;
    for (const std::size_t x : dims) n *= x;
    const std::size_t begin = data.size() * sizeof(float);
    for (std::size_t i = 0; i < n; ++i) data.push_back(offset + scale * noise());
    header[name] = {{"dtype", "F32"}, {"shape", dims}, {"data_offsets", {begin, data.size() * sizeof(float)}}};
  };
  const std::size_t d = shape.hidden, ff = shape.intermediate;
  add("embeddings.word_embeddings.weight", {shape.vocab, d}, scales.word_embeddings, 0.0f);
  add("embeddings.position_embeddings.weight", {shape.max_pos, d}, scales.embeddings, 0.0f);
  add("embeddings.token_type_embeddings.weight", {shape.types, d}, scales.embeddings, 0.0f);
  add("embeddings.LayerNorm.weight", {d}, scales.layer_norm, 1.0f);
  add("embeddings.LayerNorm.bias", {d}, scales.layer_norm, 0.0f);
  for (std::size_t l = 0; l < shape.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      add(p + "attention.self." + qkv + ".weight", {d, d}, scales.matrices, 0.0f);
      add(p + "attention.self." + qkv + ".bias", {d}, scales.biases, 0.0f);
    }
    add(p + "attention.output.dense.weight", {d, d}, scales.matrices, 0.0f);
    add(p + "attention.output.dense.bias", {d}, scales.biases, 0.0f);
    add(p + "attention.output.LayerNorm.weight", {d}, scales.layer_norm, 1.0f);
    add(p + "attention.output.LayerNorm.bias", {d}, scales.layer_norm, 0.0f);
    add(p + "intermediate.dense.weight", {ff, d}, scales.matrices, 0.0f);
    add(p + "intermediate.dense.bias", {ff}, scales.biases, 0.0f);
    add(p + "output.dense.weight", {d, ff}, scales.matrices, 0.0f);
    add(p + "output.dense.bias", {d}, scales.biases, 0.0f);
    add(p + "output.LayerNorm.weight", {d}, scales.layer_norm, 1.0f);
    add(p + "output.LayerNorm.bias", {d}, scales.layer_norm, 0.0f);
  }
  // safetensors: the header's length (8 bytes, little-endian), the header padded with spaces to a
  // multiple of 8, the data.
  std::string head = header.dump();
  while (head.size() % 8 != 0) head += ' ';
  std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  const std::uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << head;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  check(dir / "model.safetensors", out.good());
  return data.size();
}

}  // namespace stile_test
