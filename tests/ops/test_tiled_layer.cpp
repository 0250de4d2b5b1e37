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
#include "support/packed_random_layer.hpp"
#include "stile/ops/tiled_layer.hpp"

namespace {

using RandomLayer = stile_test::PackedRandomLayer;

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
      const stile::LayerMemoryShape shape{tokens, 37, d, layer.config.intermediate, threads, layer.view.head_dim};
      const std::size_t analytic = stile::tiled_layer_peak_bytes(shape, tiles);
      CHECK(arena.peak_bytes() <= analytic);
      CHECK(double(arena.peak_bytes()) >= 0.9 * double(analytic));
      CHECK(arena.used_bytes() == 0);
    }
  }
}

TEST_CASE("tiled and untiled memory are linear in the sequence length, tiled a third of untiled", "[ops][tiled]") {
  // MiniLM's shape at 2 threads (a tile per thread at once), query tiles of 32, token tiles of 64.
  auto shape = [](std::size_t s) { return stile::LayerMemoryShape{s, s, 384, 1536, 2, 32}; };
  const stile::LayerTiles tiles{32, 64};
  const double tiled_256 = double(stile::tiled_layer_peak_bytes(shape(256), tiles));
  const double tiled_512 = double(stile::tiled_layer_peak_bytes(shape(512), tiles));
  const double untiled_256 = double(stile::untiled_layer_peak_bytes(shape(256)));
  const double untiled_512 = double(stile::untiled_layer_peak_bytes(shape(512)));
  CHECK(tiled_512 / tiled_256 < 2.1);
  CHECK(untiled_512 / untiled_256 < 2.1);  // the fused attention holds no [s x s] scores
  CHECK(untiled_512 / tiled_512 >= 3.0);
}

TEST_CASE("the tile chooser picks the largest tiles that fit the budget", "[ops][tiled]") {
  const stile::LayerMemoryShape m{512, 512, 384, 1536, 2, 32};
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
