#pragma once
// A random BERT layer (hidden 64, 4 heads of 16, FFN 160) with fp32 weights packed for the GEMM:
// the layer the tiled and the budget-bound layer tests compare against the untiled one.
#include <cstddef>
#include <random>
#include <vector>

#include "stile/io/encoder_config.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/ops/layer_view.hpp"

namespace stile_test {

struct PackedRandomLayer {
  stile::EncoderConfig config;
  std::vector<stile::PackedWeights> packed;
  std::vector<std::vector<float>> vectors;
  stile::LayerView<stile::PackedF32> view;

  explicit PackedRandomLayer(unsigned seed) {
    config.hidden = 64;
    config.num_heads = 4;
    config.intermediate = 160;
    config.layer_norm_eps = 1e-12f;
    const std::size_t d = config.hidden, ff = config.intermediate;
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 0.15f);
    auto matrix = [&](std::size_t rows, std::size_t cols) {
      std::vector<float> w(rows * cols);
      for (float& x : w) x = g(rng);
      packed.push_back(stile::pack_weights(stile::DenseF32(w.data(), rows, cols)));
      return packed.back().view;
    };
    auto vec = [&](std::size_t n, float base) {
      std::vector<float> v(n);
      for (float& x : v) x = base + g(rng);
      vectors.push_back(std::move(v));
      return vectors.back().data();
    };
    packed.reserve(5);
    vectors.reserve(9);
    view.q = matrix(d, d);
    view.kv = matrix(2 * d, d);
    view.attn_out = matrix(d, d);
    view.ffn_in = matrix(ff, d);
    view.ffn_out = matrix(d, ff);
    view.q_bias = vec(d, 0.0f);
    view.kv_bias = vec(2 * d, 0.0f);
    view.attn_out_bias = vec(d, 0.0f);
    view.ln1_gamma = vec(d, 1.0f);
    view.ln1_beta = vec(d, 0.0f);
    view.ffn_in_bias = vec(ff, 0.0f);
    view.ffn_out_bias = vec(d, 0.0f);
    view.ln2_gamma = vec(d, 1.0f);
    view.ln2_beta = vec(d, 0.0f);
    view.heads = 4;
    view.head_dim = 16;
    view.attn_scale = 0.25f;
  }
};

}  // namespace stile_test
