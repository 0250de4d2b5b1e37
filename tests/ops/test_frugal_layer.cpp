// The budget-bound encoder (ops/frugal_layer.hpp) against the fp32 untiled encoder
// (ops/encoder_layer.hpp) on a tiny random BERT of two layers, on odd lengths, packed batches and
// tile sizes from one token to the whole sequence; its arena's measured peak against
// frugal_encoder_peak_bytes(); the int8 row codec; the chooser; bad calls.
//
// Tolerance: x, K and V are int8 with a scale per row, so each holds an error of up to
// max|row| / 254 per element (about 0.4% of the row's largest value), added again at every layer.
// Over two layers of this model the output rows stay within cosine 0.999 of fp32 and within 0.1
// (absolute; LayerNorm outputs of unit scale) element by element.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/for_each_target.hpp"
#include "support/error_of.hpp"
#include "support/row_cosine.hpp"
#include "stile/core/arena.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "support/packed_random_layer.hpp"
#include "stile/ops/frugal_layer.hpp"

namespace {

using RandomLayer = stile_test::PackedRandomLayer;

std::vector<float> gaussian(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

struct Run {
  std::vector<float> out;
  std::size_t peak = 0;
};

Run run_frugal(const std::vector<stile::LayerView<stile::PackedF32>>& layers, const stile::EncoderConfig& c,
               const std::vector<float>& in, const std::vector<std::size_t>& offsets, stile::FrugalTiles tiles,
               stile::ThreadPool& pool) {
  const std::size_t d = c.hidden;
  Run r;
  r.out.assign(in.size(), 0.0f);
  stile::Arena arena;
  stile::frugal_encoder<stile::PackedF32>(
      layers, c, offsets, tiles, [&](std::size_t t, std::span<float> row) { std::copy_n(&in[t * d], d, row.data()); },
      [&](std::size_t t, std::span<const float> row) { std::copy(row.begin(), row.end(), &r.out[t * d]); }, arena,
      pool);
  r.peak = arena.peak_bytes();
  CHECK(arena.used_bytes() == 0);
  return r;
}

// The frugal encoder against the fp32 encoder on the same weights, over several tile sizes.
void check_frugal_against_fp32() {
  const RandomLayer l0(1), l1(2);
  const stile::EncoderConfig& c = l0.config;
  const std::vector<stile::LayerView<stile::PackedF32>> layers = {l0.view, l1.view};
  const std::size_t d = c.hidden;
  stile::ThreadPool pool(2);
  for (const std::vector<std::size_t>& offsets : {std::vector<std::size_t>{0, 37}, std::vector<std::size_t>{0, 13, 14, 45}}) {
    const std::size_t tokens = offsets.back();
    const std::vector<float> in = gaussian(tokens * d, 7);
    std::vector<float> want = in;
    stile::EncoderWorkspace ws;
    for (const auto& l : layers) stile::encoder_layer(l, c, want.data(), offsets, ws, pool);
    std::size_t longest = 0;
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i) longest = std::max(longest, offsets[i + 1] - offsets[i]);
    const stile::FrugalShape shape{tokens, longest, d, 4, 16, c.intermediate, pool.num_threads(), true};
    for (const stile::FrugalTiles tiles : {stile::FrugalTiles{1, 1}, stile::FrugalTiles{3, 5}, stile::FrugalTiles{8, 32},
                                           stile::FrugalTiles{64, 7}, stile::FrugalTiles{512, 512}}) {
      INFO("tokens " << tokens << ", tiles " << tiles.query << " x " << tiles.keys);
      const Run got = run_frugal(layers, c, in, offsets, tiles, pool);
      float worst = 0.0f;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(want[i] - got.out[i]));
      CHECK(worst < 0.1f);
      CHECK(stile_test::min_row_cosine(want, got.out, d) > 0.999);
      CHECK(got.peak == stile::frugal_encoder_peak_bytes(shape, tiles));
    }
  }
}

}  // namespace

TEST_CASE("the frugal encoder computes the fp32 encoder within int8 tolerance, peak exact", "[ops][frugal]") {
  // On every target: FrugalGemmTiles has a shape per register width.
  stile_test::for_each_target([] { check_frugal_against_fp32(); });
}

TEST_CASE("the frugal encoder's output moves with the input (not a constant)", "[ops][frugal]") {
  const RandomLayer l0(1);
  const std::vector<stile::LayerView<stile::PackedF32>> layers = {l0.view};
  stile::ThreadPool pool(1);
  const std::vector<std::size_t> offsets = {0, 9};
  const Run a = run_frugal(layers, l0.config, gaussian(9 * 64, 1), offsets, {4, 4}, pool);
  const Run b = run_frugal(layers, l0.config, gaussian(9 * 64, 2), offsets, {4, 4}, pool);
  CHECK(stile_test::min_row_cosine(a.out, b.out, 64) < 0.9);
}

TEST_CASE("int8 rows: round to nearest of max/127, zero rows, non-finite rows", "[ops][frugal]") {
  const std::vector<float> x = {0.5f, -1.27f, 0.0f, 0.0049f, 1.0f};
  std::vector<std::int8_t> q(x.size());
  float s = 0.0f;
  stile::quantize_row_int8(x.data(), x.size(), q.data(), &s);
  CHECK(s == Approx(0.01f));
  CHECK(std::vector<int>(q.begin(), q.end()) == std::vector<int>{50, -127, 0, 0, 100});
  std::vector<float> back(x.size());
  stile::dequantize_row_int8(q.data(), q.size(), s, back.data());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(back[i] - x[i]) <= s / 2 + 1e-6f);
  const std::vector<float> zeros(4, 0.0f);
  stile::quantize_row_int8(zeros.data(), 4, q.data(), &s);
  CHECK(s == 1.0f);
  CHECK(q[0] == 0);
  const std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THAT(stile_test::error_of([&] { stile::quantize_row_int8(bad.data(), 2, q.data(), &s); }),
             Catch::Contains("non-finite activation"));
}

TEST_CASE("the frugal chooser picks the largest tiles within the whole budget", "[ops][frugal]") {
  // BERT-tiny at 512 tokens, one thread, dictionary weights (the GEMMs pack).
  const stile::FrugalShape m{512, 512, 128, 2, 64, 512, 1, false};
  const std::size_t floor_bytes = stile::frugal_working_bytes(m, {1, 1});
  for (const std::size_t budget : {floor_bytes, std::size_t{256 * 1024}, std::size_t{1} << 20}) {
    const stile::FrugalTiles t = stile::choose_frugal_tiles(budget, m);
    CHECK(stile::frugal_working_bytes(m, t) <= budget);
    if (t.query < 512) {
      for (const std::size_t tk : stile::kFrugalTileSizes) CHECK(stile::frugal_working_bytes(m, {2 * t.query, tk}) > budget);
    }
    if (t.keys < 512) CHECK(stile::frugal_working_bytes(m, {t.query, 2 * t.keys}) > budget);
  }
  // x and K/V in int8 are the floor: 64 + 128 KiB plus their scales.
  CHECK(floor_bytes > (64 + 128) * 1024);
  CHECK(stile::choose_frugal_tiles(256 * 1024, m).query >= 4);
  CHECK_THAT(stile_test::error_of([&] { stile::choose_frugal_tiles(floor_bytes - 1, m); }),
             Catch::Contains("below the minimum of " + std::to_string(floor_bytes)));
}

TEST_CASE("the frugal layer rejects bad calls with a clear error", "[ops][frugal]") {
  const RandomLayer l0(1);
  const std::vector<stile::LayerView<stile::PackedF32>> layers = {l0.view};
  stile::ThreadPool pool(1);
  const std::vector<std::size_t> offsets = {0, 5};
  CHECK_THAT(stile_test::error_of([&] { run_frugal(layers, l0.config, gaussian(5 * 64, 1), offsets, {0, 4}, pool); }),
             Catch::Contains("tile sizes must be positive"));
  const std::vector<std::size_t> bad_offsets = {1, 5};
  CHECK_THAT(stile_test::error_of([&] { run_frugal(layers, l0.config, gaussian(5 * 64, 1), bad_offsets, {4, 4}, pool); }),
             Catch::Contains("seq_offsets must start at 0"));
  std::vector<float> in = gaussian(5 * 64, 1);
  in[70] = std::numeric_limits<float>::infinity();
  CHECK_THAT(stile_test::error_of([&] { run_frugal(layers, l0.config, in, offsets, {4, 4}, pool); }),
             Catch::Contains("non-finite activation"));
}
