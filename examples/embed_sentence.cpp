#include <cstdio>
#include <vector>

#include <stile/model/sentence_encoder.hpp>

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: embed_sentence MODEL_DIR TEXT\n"), 2;
  // A sentence-transformers model directory: vocab.txt, config.json, model.safetensors, pooling.
  auto encoder = stile::SentenceEncoder::load(argv[1]);
  std::vector<float> e = encoder.embed(argv[2]);  // tokenize, encode, mean-pool, normalize
  std::printf("%zu values: %+.4f %+.4f %+.4f ...\n", e.size(), e[0], e[1], e[2]);
}
