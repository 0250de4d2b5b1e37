// make_random_bert: a BERT checkpoint of a given shape with random weights (config.json, vocab.txt,
// model.safetensors), for measuring speed and memory at shapes larger than the default model
// (BERT-base, BERT-large). The weights are made on the spot and mean nothing: never report
// accuracy from them. The vocabulary is copied from a real model (tokenization must work).
//
//   make_random_bert OUT_DIR --vocab ~/.cache/stile/all-MiniLM-L6-v2/vocab.txt [--base | --large]
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "support/random_bert.hpp"  // tests/support: the tests' tiny checkpoints are written by it too
#include "support/rng.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  fs::path vocab_path;
  std::size_t d = 768, layers = 12, heads = 12, ff = 3072;
  stile_cli::Parser cli("make_random_bert", "[options] OUT_DIR --vocab VOCAB_TXT",
                        "Writes a BERT checkpoint of random weights (config.json, vocab.txt, model.safetensors) into "
                        "OUT_DIR, for speed and memory only: the weights mean nothing. BERT-base by default.");
  cli.flag("--vocab", "FILE", "the vocabulary to copy (a real model's vocab.txt: tokenization must work)", vocab_path);
  cli.toggle("--base", "BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072",
             [&] { d = 768, layers = 12, heads = 12, ff = 3072; });
  cli.toggle("--large", "BERT-large: 24 layers, hidden 1024, 16 heads, FFN 4096",
             [&] { d = 1024, layers = 24, heads = 16, ff = 4096; });
  cli.example("make_random_bert /tmp/bb --vocab ~/.cache/stile/all-MiniLM-L6-v2/vocab.txt --base",
              "a BERT-base-shaped model");
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
  // Unit-variance noise: splitmix64, the sum of 4 uniforms in [-0.5, 0.5), times sqrt(3).
  stile_test::Rng rng{20261123};
  const auto normal = [&] {
    double sum = 0;
    for (int k = 0; k < 4; ++k) sum += rng() * 0.5;
    return static_cast<float>(sum * std::sqrt(3.0));
  };
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.02f, .embeddings = 0.02f, .matrices = 0.02f, .biases = 0.02f, .layer_norm = 0.0f};
  fs::path failed;
  const std::size_t parameters = stile_test::write_random_bert(
      out_dir, {.hidden = d, .layers = layers, .heads = heads, .intermediate = ff, .vocab = vocab, .max_pos = 512},
      scales, normal,
      [&](const fs::path& file, bool written) {
        if (!written && failed.empty()) failed = file;
      },
      vocab_text);
  if (!failed.empty()) {
    std::fprintf(stderr, "make_random_bert: cannot write %s\n", failed.c_str());
    return 1;
  }
  std::printf("make_random_bert: %s: %zu layers, hidden %zu, %zu heads, FFN %zu, %zu parameters (random)\n",
              out_dir.c_str(), layers, d, heads, ff, parameters);
  return 0;
}
