// The tiled encoder layer (ops/tiled_layer.hpp) against the untiled one (ops/encoder_layer.hpp) on
// random weights, for tiles from 1 token to the whole sequence, over packed batches of several
// sequences; the arena's measured peak against tiled_layer_peak_bytes(); the tile chooser.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "stile/core/arena.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/tiled_layer.hpp"

namespace {

// A random BERT layer (hidden 64, 4 heads of 16, FFN 160) with weights packed for the GEMM.
struct RandomLayer {
  stile::BertConfig config;
  std::vector<stile::PackedWeights> packed;
  std::vector<std::vector<float>> vectors;
  stile::LayerView<stile::PackedF32> view;

  explicit RandomLayer(unsigned seed) {
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

}  // namespace

TEST_CASE("the tiled layer computes the untiled layer for every tile size", "[ops][tiled]") {
  const RandomLayer layer(11);
  const std::size_t d = layer.config.hidden;
  const std::vector<std::size_t> offsets = {0, 23, 24, 61};  // sequences of 23, 1 and 37 tokens
  const std::size_t tokens = offsets.back();
  std::vector<float> x(tokens * d);
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& v : x) v = g(rng);

  for (const std::size_t threads : {1, 2}) {
    stile::ThreadPool pool(threads);
    std::vector<float> want = x;
    stile::EncoderWorkspace ws;
    stile::encoder_layer(layer.view, layer.config, want.data(), offsets, ws, pool);
    for (const stile::LayerTiles tiles : {stile::LayerTiles{1, 1}, {3, 5}, {16, 16}, {8, 61}, {37, 64}, {1000, 1000}}) {
      std::vector<float> got = x;
      stile::Arena arena;
      stile::tiled_encoder_layer(layer.view, layer.config, got.data(), offsets, tiles, arena, pool);
      double worst = 0;
      for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
      INFO("threads " << threads << " tiles " << tiles.query << " x " << tiles.tokens << ": max diff " << worst);
      CHECK(worst <= 1e-5);
      // The arena's measured peak is the analytic one: never above, and not far below.
      const stile::LayerMemoryShape shape{tokens, 37, d, layer.config.intermediate, threads};
      const std::size_t analytic = stile::tiled_layer_peak_bytes(shape, tiles);
      CHECK(arena.peak_bytes() <= analytic);
      CHECK(double(arena.peak_bytes()) >= 0.9 * double(analytic));
      CHECK(arena.used_bytes() == 0);
    }
  }
}

TEST_CASE("tiled memory is linear in the sequence length, untiled quadratic", "[ops][tiled]") {
  // MiniLM's shape at 2 threads (a tile per thread at once), query tiles of 32, token tiles of 64.
  auto shape = [](std::size_t s) { return stile::LayerMemoryShape{s, s, 384, 1536, 2}; };
  const stile::LayerTiles tiles{32, 64};
  const double tiled_256 = double(stile::tiled_layer_peak_bytes(shape(256), tiles));
  const double tiled_512 = double(stile::tiled_layer_peak_bytes(shape(512), tiles));
  CHECK(tiled_512 / tiled_256 < 2.1);
  CHECK(double(stile::untiled_layer_peak_bytes(shape(512))) / tiled_512 >= 4.0);
}

TEST_CASE("the tile chooser picks the largest tiles that fit the budget", "[ops][tiled]") {
  const stile::LayerMemoryShape m{512, 512, 384, 1536, 2};
  const std::size_t floor_bytes = stile::tiled_layer_peak_bytes(m, {1, 1});
  for (const std::size_t budget : {floor_bytes, std::size_t{2} << 20, std::size_t{4} << 20, std::size_t{64} << 20}) {
    const stile::LayerTiles t = stile::choose_layer_tiles(budget, m);
    INFO("budget " << budget << " -> " << t.query << " x " << t.tokens);
    CHECK(stile::tiled_layer_peak_bytes(m, t) <= budget);
    // Doubling either tile (while it is still below the sequence) breaks the budget.
    if (t.query < 1024) CHECK(stile::tiled_layer_peak_bytes(m, {2 * t.query, t.tokens}) > budget);
    if (t.tokens < 1024) CHECK(stile::tiled_layer_peak_bytes(m, {t.query, 2 * t.tokens}) > budget);
  }
  CHECK_THROWS_WITH(stile::choose_layer_tiles(floor_bytes - 1, m), Catch::Contains("below the layer's minimum"));
}

TEST_CASE("the arena counts its peak and refuses what it was not sized for", "[ops][arena]") {
  stile::Arena arena(1000);
  {
    stile::ArenaScope a(arena);
    auto x = a.take<float>(10);  // 40 bytes -> one 64-byte line
    CHECK(reinterpret_cast<std::uintptr_t>(x.data()) % 64 == 0);
    {
      stile::ArenaScope b(arena);
      b.take<double>(100);  // 800 bytes -> 832
      CHECK(arena.used_bytes() == 896);
    }
    CHECK(arena.used_bytes() == 64);
    CHECK_THROWS_WITH(a.take<char>(1000), Catch::Contains("does not fit"));
    CHECK_THROWS_WITH(arena.reserve(4096), Catch::Contains("cannot grow"));
  }
  CHECK(arena.peak_bytes() == 896);
  CHECK(arena.used_bytes() == 0);
}
