#pragma once
// A random encoder layer of any shape held in fp32 and converted to each linear format, as the
// hetero tests and bench_hetero use it (weights ~ U(-scale, scale), LayerNorm gamma near 1).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "stile/io/encoder_config.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/linear.hpp"
#include "support/rng.hpp"

namespace stile_test {

struct RandomLayer {
  stile::EncoderConfig config;
  // fp32 weights, row-major [N x K]: q [d x d], kv [2d x d], attn_out [d x d], ffn_in [ff x d], ffn_out [d x ff].
  std::array<std::vector<float>, 5> w;
  std::vector<float> qkv_bias, attn_out_bias, ffn_in_bias, ffn_out_bias, ln1_gamma, ln1_beta, ln2_gamma, ln2_beta;

  static constexpr std::array<const char*, 5> kNames{"q", "kv", "attn_out", "ffn_in", "ffn_out"};

  std::size_t rows(std::size_t i) const {
    const std::size_t d = config.hidden, ff = config.intermediate;
    return std::array<std::size_t, 5>{d, 2 * d, d, ff, d}[i];
  }
  std::size_t cols(std::size_t i) const { return i == 4 ? config.intermediate : config.hidden; }

  RandomLayer(std::size_t d, std::size_t heads, std::size_t ff, std::uint64_t seed) {
    config.hidden = d;
    config.num_heads = heads;
    config.intermediate = ff;
    config.num_layers = 1;
    config.layer_norm_eps = 1e-12f;
    Rng rng{seed};
    for (std::size_t i = 0; i < 5; ++i) {
      w[i].resize(rows(i) * cols(i));
      const float s = 1.0f / std::sqrt(static_cast<float>(cols(i)));
      for (float& x : w[i]) x = rng.unit() * s * 1.7f;
    }
    const auto fill = [&](std::vector<float>& v, std::size_t n, float base, float s) {
      v.resize(n);
      for (float& x : v) x = base + rng.unit() * s;
    };
    fill(qkv_bias, 3 * d, 0.0f, 0.1f);
    fill(attn_out_bias, d, 0.0f, 0.1f);
    fill(ffn_in_bias, ff, 0.0f, 0.1f);
    fill(ffn_out_bias, d, 0.0f, 0.1f);
    fill(ln1_gamma, d, 1.0f, 0.1f);
    fill(ln1_beta, d, 0.0f, 0.1f);
    fill(ln2_gamma, d, 1.0f, 0.1f);
    fill(ln2_beta, d, 0.0f, 0.1f);
  }
};

// The layer's weights in one format, and the view the layer operators read.
struct FormattedLayer {
  std::array<stile::LinearWeights, 5> w;
  stile::LayerView<stile::LinearView> view;

  FormattedLayer(const RandomLayer& l, stile::LinearFormat format, const stile::OpFormats& ops = {}) {
    for (std::size_t i = 0; i < 5; ++i) {
      w[i] = stile::LinearWeights::make(stile::DenseF32(l.w[i].data(), l.rows(i), l.cols(i)), format,
                                        stile::Int8Scheme::kSymmetricPerChannel, RandomLayer::kNames[i]);
    }
    const std::size_t d = l.config.hidden;
    view.q = w[0].view();
    view.kv = w[1].view();
    view.attn_out = w[2].view();
    view.ffn_in = w[3].view();
    view.ffn_out = w[4].view();
    view.q_bias = l.qkv_bias.data();
    view.kv_bias = l.qkv_bias.data() + d;
    view.attn_out_bias = l.attn_out_bias.data();
    view.ln1_gamma = l.ln1_gamma.data();
    view.ln1_beta = l.ln1_beta.data();
    view.ffn_in_bias = l.ffn_in_bias.data();
    view.ffn_out_bias = l.ffn_out_bias.data();
    view.ln2_gamma = l.ln2_gamma.data();
    view.ln2_beta = l.ln2_beta.data();
    view.heads = l.config.num_heads;
    view.head_dim = d / l.config.num_heads;
    view.attn_scale = 1.0f / std::sqrt(static_cast<float>(view.head_dim));
    view.ops = ops;
  }
  FormattedLayer(const FormattedLayer&) = delete;  // the view points into w
};

}  // namespace stile_test
