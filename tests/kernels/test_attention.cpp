// The fused attention kernel (kernels/attention.hpp) against a double-precision reference, on
// every supported target: sequence lengths that leave register-tile, panel and key-chunk edges
// (1, 2, 17, 129, 513), head widths narrower than, equal to and not a multiple of a panel, query
// ranges that start inside the sequence, windows, a position term, I-BERT's softmax in place of
// the fp32 one, context written over the queries, a caller's workspace, and the low-memory mode
// (no packed copy of the head).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "for_each_target.hpp"
#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/kernels/attention.hpp"
#include "stile/kernels/number_formats.hpp"

namespace {

struct Problem {
  std::size_t s, dh, ld;  // keys, head width, row stride of Q, K, V (columns beyond dh are other data)
  std::vector<float> q, k, v;
};

Problem make_problem(std::size_t s, std::size_t dh, std::uint32_t seed) {
  Problem p{s, dh, dh + 5, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto* m : {&p.q, &p.k, &p.v}) {
    m->resize(s * p.ld);
    for (float& x : *m) x = normal(rng);
  }
  return p;
}

// A position term the reference and the kernel add alike: a bias by key - query.
float term(std::size_t i, std::size_t j) { return 0.05f * (float(j) - float(i)) + (i % 3 == j % 3 ? 0.5f : 0.0f); }

struct TermContext {
  float unscale;
};
void add_terms(const void* context, float* scores, std::size_t ld, std::size_t first_query, std::size_t rows,
               std::size_t key_begin, std::size_t key_end) {
  const float unscale = static_cast<const TermContext*>(context)->unscale;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = key_begin; j < key_end; ++j) scores[r * ld + j] += term(first_query + r, j) * unscale;
  }
}

// ctx rows [first, first + rows) in double: softmax(scale q.k + term) over the window, times V.
std::vector<double> reference(const Problem& p, std::size_t first, std::size_t rows, float scale, std::size_t window,
                              bool with_terms) {
  std::vector<double> out(rows * p.dh, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t i = first + r;
    const std::size_t lo = window != 0 && i > window ? i - window : 0;
    const std::size_t hi = window != 0 ? std::min(p.s, i + window + 1) : p.s;
    std::vector<double> e(p.s, 0.0);
    double max = -1e300, sum = 0;
    for (std::size_t j = lo; j < hi; ++j) {
      double dot = 0;
      for (std::size_t c = 0; c < p.dh; ++c) dot += double(p.q[i * p.ld + c]) * double(p.k[j * p.ld + c]);
      e[j] = scale * dot + (with_terms ? term(i, j) : 0.0);
      max = std::max(max, e[j]);
    }
    for (std::size_t j = lo; j < hi; ++j) sum += (e[j] = std::exp(e[j] - max));
    for (std::size_t j = lo; j < hi; ++j) {
      for (std::size_t c = 0; c < p.dh; ++c) out[r * p.dh + c] += e[j] / sum * double(p.v[j * p.ld + c]);
    }
  }
  return out;
}

struct Case {
  std::size_t first, rows, window;
  bool terms;
};

// Runs the kernel on rows [first, first + rows) and returns the worst |difference| to the reference.
double run_case(const Problem& p, const Case& c, float scale, bool alias_ctx, bool own_workspace, bool low_memory) {
  std::vector<float> ctx_buffer(c.rows * p.ld, -7.0f);
  std::vector<float> q = p.q;  // a copy, since ctx may be written over it
  float* ctx = alias_ctx ? q.data() + c.first * p.ld : ctx_buffer.data();
  stile::AlignedBuffer<float> workspace(own_workspace ? stile::attention_workspace_floats(p.s, p.dh, low_memory) : 0);
  TermContext context{1.0f / scale};
  stile::attention_rows({.q = q.data() + c.first * p.ld,
                         .ld_q = p.ld,
                         .k = p.k.data(),
                         .v = p.v.data(),
                         .ld_kv = p.ld,
                         .rows = c.rows,
                         .first_query = c.first,
                         .keys = p.s,
                         .head_dim = p.dh,
                         .scale = scale,
                         .ctx = ctx,
                         .ld_ctx = p.ld,
                         .window = c.window,
                         .terms = c.terms ? &add_terms : nullptr,
                         .terms_context = &context,
                         .low_memory = low_memory,
                         .workspace = own_workspace ? workspace.data() : nullptr});
  const std::vector<double> want = reference(p, c.first, c.rows, scale, c.window, c.terms);
  double worst = 0;
  for (std::size_t r = 0; r < c.rows; ++r) {
    for (std::size_t col = 0; col < p.dh; ++col) {
      worst = std::max(worst, std::abs(double(ctx[r * p.ld + col]) - want[r * p.dh + col]));
    }
    // The columns past head_dim in the row stride are never written.
    for (std::size_t col = p.dh; col < p.ld && !alias_ctx; ++col) REQUIRE(ctx[r * p.ld + col] == -7.0f);
  }
  return worst;
}

}  // namespace

TEST_CASE("fused attention matches a double reference on every target", "[kernels][attention]") {
  stile_test::for_each_target([] {
    for (const std::size_t s : {1, 2, 17, 129, 513}) {
      for (const std::size_t dh : {8, 20, 32, 64}) {
        const Problem p = make_problem(s, dh, static_cast<std::uint32_t>(s * 100 + dh));
        const float scale = 1.0f / std::sqrt(float(dh));
        std::vector<Case> cases = {{0, s, 0, false}, {0, s, 0, true}};
        if (s > 2) {
          cases.push_back({s / 3, s - s / 3 - 1, 0, false});  // a range inside the sequence
          cases.push_back({0, s, 3, false});                  // a window narrower than a tile
          cases.push_back({s / 2, s - s / 2, 40, true});      // a window with a term
        }
        for (std::size_t n = 0; n < cases.size(); ++n) {
          const Case& c = cases[n];
          const bool alias = n % 2 == 1, own = n % 3 == 2;
          for (const bool low_memory : {false, true}) {
            const double worst = run_case(p, c, scale, alias, own, low_memory);
            INFO("s " << s << " head_dim " << dh << " first " << c.first << " rows " << c.rows << " window " << c.window
                      << " terms " << c.terms << " alias " << alias << " workspace " << own << " low memory "
                      << low_memory << ": max diff " << worst);
            CHECK(worst <= 2e-6);
          }
        }
      }
    }
  });
}

TEST_CASE("fused attention with I-BERT's softmax equals that softmax's probabilities times V", "[kernels][attention]") {
  const std::size_t s = 70, dh = 32;
  const Problem p = make_problem(s, dh, 3);
  const float scale = 1.0f / std::sqrt(float(dh));
  std::vector<float> ctx(s * dh);
  stile::attention_rows({.q = p.q.data(),
                         .ld_q = p.ld,
                         .k = p.k.data(),
                         .v = p.v.data(),
                         .ld_kv = p.ld,
                         .rows = s,
                         .keys = s,
                         .head_dim = dh,
                         .scale = scale,
                         .ctx = ctx.data(),
                         .ld_ctx = dh,
                         .softmax = &stile::softmax_integer_rows});
  // The composition: every score in fp32, the integer softmax over whole rows, then P V.
  std::vector<float> scores(s * s);
  for (std::size_t i = 0; i < s; ++i) {
    for (std::size_t j = 0; j < s; ++j) {
      float dot = 0;
      for (std::size_t c = 0; c < dh; ++c) dot += p.q[i * p.ld + c] * p.k[j * p.ld + c];
      scores[i * s + j] = dot;
    }
  }
  stile::softmax_integer_rows(scores.data(), s, s, s, scale);
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < s; ++i) {
    for (std::size_t c = 0; c < dh; ++c) {
      double want = 0;
      for (std::size_t j = 0; j < s; ++j) want += double(scores[i * s + j]) * double(p.v[j * p.ld + c]);
      worst = std::max(worst, std::abs(want - double(ctx[i * dh + c])));
      largest = std::max(largest, std::abs(want));
    }
  }
  INFO("max diff " << worst << " (largest output " << largest << ")");
  // The integer softmax quantizes its input; a score rounded the other way moves one probability
  // by a quantization step, so allow a few such steps, well under the gap to the fp32 softmax.
  CHECK(worst <= 1e-4 * std::max(1.0, largest));
  CHECK(largest > 0.1);
}

TEST_CASE("fused attention refuses bad arguments", "[kernels][attention]") {
  const Problem p = make_problem(4, 8, 1);
  std::vector<float> ctx(4 * 8);
  stile::AttentionRowsArgs a{.q = p.q.data(),
                             .ld_q = p.ld,
                             .k = p.k.data(),
                             .v = p.v.data(),
                             .ld_kv = p.ld,
                             .rows = 4,
                             .keys = 4,
                             .head_dim = 8,
                             .ctx = ctx.data(),
                             .ld_ctx = 8};
  CHECK_NOTHROW(stile::attention_rows(a));
  auto fails = [&](auto change, const char* message) {
    stile::AttentionRowsArgs b = a;
    change(b);
    CHECK_THROWS_WITH(stile::attention_rows(b), Catch::Matchers::Contains(message));
  };
  fails([](auto& b) { b.first_query = 1; }, "queries past the sequence's end");
  fails([](auto& b) { b.ld_kv = 4; }, "row stride below head_dim");
  fails([](auto& b) { b.scale = 0.0f; }, "scale must be positive");
  fails([](auto& b) { b.k = nullptr; }, "null pointer");
  fails([](auto& b) { b.rows = 0; }, "must be positive");
}
