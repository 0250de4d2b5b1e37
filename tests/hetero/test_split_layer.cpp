// The cooperative layer (hetero/split_layer.hpp) on two CPU processors against the
// single-processor layer (ops/encoder_layer.hpp) and against a naive reference of the same
// arithmetic: at every split ratio of the grid {0, 0.125, ..., 1} and every head-to-processor
// mapping of a 4-head layer. Also: the in-place channel slices, the head-mapping search, core
// lists and pinning, and a failing call's error.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <sched.h>

#include <catch2/catch.hpp>

#include "hetero/random_layer.hpp"
#include "stile/core/half.hpp"
#include "stile/hetero/cpu_cluster.hpp"
#include "stile/hetero/split_layer.hpp"
#include "stile/kernels/int8_gemm.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "support/error_of.hpp"
#include "support/rng.hpp"

namespace {

using stile::LinearFormat;
using stile_test::FormattedLayer;
using stile_test::RandomLayer;

constexpr std::size_t kD = 256, kHeads = 4, kFf = 512;
const std::vector<std::size_t> kOffsets{0, 7, 20};  // two sequences, 7 and 13 tokens

std::vector<float> random_input(std::size_t n, std::uint64_t seed) {
  stile_test::Rng rng{seed};
  std::vector<float> x(n);
  for (float& v : x) v = rng.unit() * 2.0f;
  return x;
}

std::vector<double> grid() {
  std::vector<double> g;
  for (int i = 0; i <= 8; ++i) g.push_back(i / 8.0);
  return g;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

std::vector<float> single_processor(const FormattedLayer& f, const RandomLayer& l, const std::vector<float>& x0) {
  std::vector<float> x = x0;
  stile::EncoderWorkspace ws;
  stile::ThreadPool pool(1);
  stile::encoder_layer(f.view, l.config, x.data(), kOffsets, ws, pool);
  return x;
}

// ---- the naive reference: each output channel in the format of the processor it is on ----

// One linear layer: the columns on0(c) in format f0 (weights v0), the others in f1 (v1), fp64 sums.
template <class On0>
void naive_linear(std::size_t M, const std::vector<float>& A, std::size_t K, const RandomLayer& l, std::size_t wi,
                  const stile::LinearView& v0, const stile::LinearView& v1, const On0& on0, const float* bias,
                  std::vector<double>& out) {
  const std::size_t N = l.rows(wi);
  out.assign(M * N, 0.0);
  stile::QuantizedActivations qa;
  stile::quantize_activations(M, A.data(), K, K, stile::ActivationQuant::kPerRow, qa);
  for (std::size_t m = 0; m < M; ++m) {
    for (std::size_t c = 0; c < N; ++c) {
      const stile::LinearView& v = on0(c) ? v0 : v1;
      double acc = 0;
      if (v.format == LinearFormat::kInt8) {
        std::int64_t iacc = 0;
        for (std::size_t k = 0; k < K; ++k) {
          iacc += (std::int64_t{qa.data[m * qa.ld + k]} - qa.zero_point[m]) *
                  (std::int64_t{v.i8.stored(c, k)} - v.i8.zero_point);
        }
        acc = double(qa.scale[m]) * double(v.i8.scales[c]) * double(iacc);
      } else {
        for (std::size_t k = 0; k < K; ++k) {
          float w = l.w[wi][c * K + k];
          if (v.format == LinearFormat::kF16) w = stile::half_to_float(stile::float_to_half(w));
          acc += double(A[m * K + k]) * w;
        }
      }
      out[m * N + c] = acc + bias[c];
    }
  }
}

void naive_layer_norm(std::vector<float>& x, std::size_t rows, std::size_t d, const std::vector<float>& g,
                      const std::vector<float>& b) {
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::size_t i = 0; i < d; ++i) mean += x[r * d + i];
    mean /= double(d);
    for (std::size_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
    var /= double(d);
    for (std::size_t i = 0; i < d; ++i) {
      x[r * d + i] = static_cast<float>((x[r * d + i] - mean) / std::sqrt(var + 1e-12) * g[i] + b[i]);
    }
  }
}

auto below(std::size_t n) {
  return [n](std::size_t c) { return c < n; };
}

// The layer with every linear layer split at p (fp32 LayerNorm, exact GELU, fp32 softmax); with
// qkv_heads, Q, K and V split by the heads' processors instead.
std::vector<float> naive_split_layer(const RandomLayer& l, const FormattedLayer& f0, const FormattedLayer& f1,
                                     double p, std::size_t granule, const std::vector<float>& x0,
                                     const std::vector<std::uint8_t>* qkv_heads = nullptr) {
  const std::size_t d = kD, ff = kFf, T = kOffsets.back(), hd = kD / kHeads;
  std::vector<double> q, kv, ao, h1, h2;
  if (qkv_heads != nullptr) {
    const auto by_head = [&](std::size_t c) { return (*qkv_heads)[(c % d) / hd] == 0; };
    naive_linear(T, x0, d, l, 0, f0.view.q, f1.view.q, by_head, l.qkv_bias.data(), q);
    naive_linear(T, x0, d, l, 1, f0.view.kv, f1.view.kv, by_head, l.qkv_bias.data() + d, kv);
  } else {
    naive_linear(T, x0, d, l, 0, f0.view.q, f1.view.q, below(stile::split_point(d, p, granule)), l.qkv_bias.data(), q);
    naive_linear(T, x0, d, l, 1, f0.view.kv, f1.view.kv, below(stile::split_point(2 * d, p, granule)),
                 l.qkv_bias.data() + d, kv);
  }
  std::vector<float> ctx(T * d);
  for (std::size_t s = 0; s + 1 < kOffsets.size(); ++s) {
    const std::size_t b = kOffsets[s], n = kOffsets[s + 1] - b;
    for (std::size_t h = 0; h < kHeads; ++h) {
      for (std::size_t i = 0; i < n; ++i) {
        std::vector<double> sc(n);
        double mx = -1e300;
        for (std::size_t j = 0; j < n; ++j) {
          double dot = 0;
          for (std::size_t e = 0; e < hd; ++e) {
            dot += float(q[(b + i) * d + h * hd + e]) * double(float(kv[(b + j) * 2 * d + h * hd + e]));
          }
          sc[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (std::size_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (std::size_t j = 0; j < n; ++j) acc += sc[j] / sum * float(kv[(b + j) * 2 * d + d + h * hd + e]);
          ctx[(b + i) * d + h * hd + e] = static_cast<float>(acc);
        }
      }
    }
  }
  naive_linear(T, ctx, d, l, 2, f0.view.attn_out, f1.view.attn_out, below(stile::split_point(d, p, granule)),
               l.attn_out_bias.data(), ao);
  std::vector<float> x(T * d);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(ao[i] + x0[i]);
  naive_layer_norm(x, T, d, l.ln1_gamma, l.ln1_beta);
  naive_linear(T, x, d, l, 3, f0.view.ffn_in, f1.view.ffn_in, below(stile::split_point(ff, p, granule)),
               l.ffn_in_bias.data(), h1);
  std::vector<float> g(T * ff);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(0.5 * h1[i] * (1 + std::erf(h1[i] / std::sqrt(2.0))));
  naive_linear(T, g, ff, l, 4, f0.view.ffn_out, f1.view.ffn_out, below(stile::split_point(d, p, granule)),
               l.ffn_out_bias.data(), h2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(h2[i] + x[i]);
  naive_layer_norm(x, T, d, l.ln2_gamma, l.ln2_beta);
  return x;
}

std::vector<std::vector<std::uint8_t>> every_head_mapping() {
  std::vector<std::vector<std::uint8_t>> all;
  for (unsigned mask = 0; mask < (1u << kHeads); ++mask) {
    std::vector<std::uint8_t> m(kHeads);
    for (std::size_t h = 0; h < kHeads; ++h) m[h] = static_cast<std::uint8_t>((mask >> h) & 1u);
    all.push_back(m);
  }
  return all;
}

}  // namespace

TEST_CASE("fp32 on both processors: every split ratio and head mapping equals the single-processor layer",
          "[hetero]") {
  const RandomLayer l(kD, kHeads, kFf, 17);
  const FormattedLayer f(l, LinearFormat::kF32);
  const std::vector<float> x0 = random_input(kOffsets.back() * kD, 3);
  const std::vector<float> want = single_processor(f, l, x0);
  stile::CpuCluster p0("cpu:a", {}, LinearFormat::kF32, stile::CpuCluster::Mode::kCallerThread);
  stile::CpuCluster p1("cpu:b", {}, LinearFormat::kF32);
  stile::SplitLayer split(p0, p1);
  stile::EncoderWorkspace ws;
  std::size_t runs = 0;
  for (const bool by_heads : {false, true}) {
    for (const double p : grid()) {
      for (const auto& heads : every_head_mapping()) {
        stile::SplitPlan plan = stile::SplitPlan::uniform(p);
        plan.heads = heads;
        plan.qkv_with_heads = by_heads;
        std::vector<float> x = x0;
        split.run(f.view, f.view, plan, l.config, x.data(), kOffsets, ws);
        INFO("p " << p << " heads " << int(heads[0]) << int(heads[1]) << int(heads[2]) << int(heads[3]) << " qkv by heads "
                  << by_heads);
        REQUIRE(max_abs_diff(x, want) <= 1e-5);
        ++runs;
      }
    }
  }
  CHECK(runs == 2 * 9 * 16);
}

TEST_CASE("int8 and fp16 halves: every split ratio and head mapping equals the naive reference of the same "
          "arithmetic",
          "[hetero]") {
  const RandomLayer l(kD, kHeads, kFf, 19);
  const FormattedLayer f8(l, LinearFormat::kInt8), f16(l, LinearFormat::kF16);
  const std::vector<float> x0 = random_input(kOffsets.back() * kD, 5);
  stile::CpuCluster p0("cpu:int8", {}, LinearFormat::kInt8, stile::CpuCluster::Mode::kCallerThread);
  stile::CpuCluster p1("cpu:fp16", {}, LinearFormat::kF16);
  stile::SplitLayer split(p0, p1);
  stile::EncoderWorkspace ws;
  // The ends are the single-processor layers themselves.
  const std::vector<float> all8 = single_processor(f8, l, x0), all16 = single_processor(f16, l, x0);
  // The tolerance below is under the gap between the formats (the int8 and fp16 layers differ by
  // 0.033 here; the split layer is within 0.012 of its reference): a channel in the wrong format
  // shows as a difference, a missing or doubled one as an O(1) one. Each format's slice is exact to
  // 1e-5 in "a slice of output channels ..." below, and the ends equal the single-processor layers.
  INFO("int8 vs fp16 layer: " << max_abs_diff(all8, all16));
  CHECK(max_abs_diff(all8, all16) > 2e-2);
  for (const double p : grid()) {
    const std::vector<float> want = naive_split_layer(l, f8, f16, p, split.granule(), x0);
    for (const auto& heads : every_head_mapping()) {
      stile::SplitPlan plan = stile::SplitPlan::uniform(p);
      plan.heads = heads;
      std::vector<float> x = x0;
      split.run(f8.view, f16.view, plan, l.config, x.data(), kOffsets, ws);
      INFO("p " << p << " heads " << int(heads[0]) << int(heads[1]) << int(heads[2]) << int(heads[3]));
      // fp16 halves: float sums of the same products (LayerNorm outputs are O(1)). int8 halves: a
      // float difference upstream can move an activation across a rounding boundary of its 8-bit
      // quantization, one step (about 1/127 of the row's range) on one input of a dot product.
      REQUIRE(max_abs_diff(x, want) <= (p == 0.0 ? 2e-4 : 2e-2));
      if (p == 1.0) REQUIRE(max_abs_diff(x, all8) <= 1e-5);
      if (p == 0.0) REQUIRE(max_abs_diff(x, all16) <= 1e-5);
      // Q, K and V by the heads' processors: against the reference split the same way.
      plan.qkv_with_heads = true;
      x = x0;
      split.run(f8.view, f16.view, plan, l.config, x.data(), kOffsets, ws);
      const std::vector<float> want_heads = naive_split_layer(l, f8, f16, p, split.granule(), x0, &heads);
      REQUIRE(max_abs_diff(x, want_heads) <= 2e-2);
    }
  }
}

TEST_CASE("a slice of output channels of each format equals the naive product of the same arithmetic",
          "[hetero]") {
  const RandomLayer l(kD, kHeads, kFf, 23);
  const std::vector<float> A = random_input(kOffsets.back() * kD, 7);
  const std::size_t M = kOffsets.back(), K = kD, N = kFf;  // ffn_in: [ff x d]
  for (const LinearFormat format : {LinearFormat::kF32, LinearFormat::kF16, LinearFormat::kInt8}) {
    const FormattedLayer f(l, format);
    stile::CpuCluster cpu("cpu:x", {}, format, stile::CpuCluster::Mode::kCallerThread);
    const std::size_t g = cpu.channel_granule();
    std::vector<double> want;
    naive_linear(M, A, K, l, 3, f.view.ffn_in, f.view.ffn_in, below(N), l.ffn_in_bias.data(), want);
    for (const double p : grid()) {
      const std::size_t n = stile::split_point(N, p, g);
      std::vector<float> C(M * N, -7.0f);
      stile::LinearCall call;
      call.M = M;
      call.A = A.data();
      call.lda = K;
      call.w = f.view.ffn_in;
      call.n0 = n;
      call.n1 = N;
      call.C = C.data();
      call.ldc = N;
      call.bias = l.ffn_in_bias.data();
      cpu.enqueue(call);
      cpu.wait();
      double worst = 0;
      for (std::size_t m = 0; m < M; ++m) {
        for (std::size_t c = 0; c < N; ++c) {
          if (c < n) {
            REQUIRE(C[m * N + c] == -7.0f);  // outside the slice: untouched
          } else {
            worst = std::max(worst, std::abs(C[m * N + c] - want[m * N + c]) / (1.0 + std::abs(want[m * N + c])));
          }
        }
      }
      INFO(stile::to_string(format) << " p " << p);
      CHECK(worst <= 1e-5);
    }
  }
}

TEST_CASE("best_head_mapping enumerates mappings and minimizes the slower processor's predicted time", "[hetero]") {
  // Processor 1 twice as slow: 6 equal heads go 4 : 2.
  const std::vector<double> c0(6, 1.0), c1(6, 2.0);
  const auto m = stile::best_head_mapping(c0, c1);
  std::size_t on1 = 0;
  for (const auto h : m) on1 += h;
  CHECK(on1 == 2);
  // Unequal heads {5, 3, 2, 2} on equal processors: no subset sums to 6, so the best makespan is 7.
  const std::vector<double> u{5, 3, 2, 2};
  const auto mu = stile::best_head_mapping(u, u);
  double t0 = 0, t1 = 0;
  for (std::size_t h = 0; h < u.size(); ++h) (mu[h] ? t1 : t0) += u[h];
  CHECK(std::max(t0, t1) == 7.0);
  CHECK(stile::split_point(384, 0.5, 32) == 192);
  CHECK(stile::split_point(384, 0.125, 32) == 32 * 2);  // 48 rounds to 64 (1.5 granules -> 2)
  CHECK(stile::split_point(384, 0.0, 32) == 0);
  CHECK(stile::split_point(384, 1.0, 32) == 384);
}

TEST_CASE("core lists parse, and a core that cannot be pinned is said and the cluster runs unpinned", "[hetero]") {
  CHECK(stile::parse_core_list("0") == std::vector<int>{0});
  CHECK(stile::parse_core_list("0,2-4") == std::vector<int>{0, 2, 3, 4});
  for (const char* bad : {"", "a", "1,", "3-1", "1--2", "99999"}) {
    CHECK_THROWS_WITH(stile::parse_core_list(bad), Catch::Contains("bad core list"));
  }
  CHECK(stile::pin_this_thread(-1) != "");
  // Pinning to a core this process may run on must work (outside its mask, a cpuset may refuse).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  const bool have0 = CPU_ISSET(0, &allowed), have01 = have0 && CPU_ISSET(1, &allowed);
  stile::CpuCluster ok("cpu:0", {0}, LinearFormat::kF32);
  if (have0) CHECK(ok.pinned());
  // Two cores: the dispatcher and a pool worker, each pinned to its own; a call uses both.
  stile::CpuCluster two("cpu:0-1", {0, 1}, LinearFormat::kF32);
  if (have01) CHECK(two.pinned());
  CHECK(two.threads() == 2);
  stile::CpuCluster bad("cpu:big", {4000}, LinearFormat::kF32);  // no such core
  CHECK_FALSE(bad.pinned());
  // ...and it still runs calls.
  std::vector<float> x{1, 2, 3, 4}, g{1, 1, 1, 1}, b{0, 0, 0, 0};
  bad.enqueue(stile::LayerNormCall{x.data(), 0, 1, 4, 4, g.data(), b.data(), 1e-12f, stile::NormFormat::kF32});
  bad.wait();
  CHECK(std::abs(x[0] + std::sqrt(1.8)) < 1e-4);  // (1 - 2.5) / sqrt(1.25)
  std::vector<float> rows(64 * 4, 1.0f);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = float(i % 7);
  two.enqueue(stile::LayerNormCall{rows.data(), 0, 64, 4, 4, g.data(), b.data(), 1e-12f, stile::NormFormat::kInt8});
  two.wait();
  double row_sum = 0;
  for (std::size_t i = 0; i < 4; ++i) row_sum += rows[i];
  CHECK(std::abs(row_sum) < 5e-2);  // normalized rows sum to about 0 (the int8 LayerNorm, split over both workers)
}

TEST_CASE("a failing call fails wait() naming the processor and the call; the processor goes on", "[hetero]") {
  const RandomLayer l(64, 2, 128, 29);
  const FormattedLayer f(l, LinearFormat::kF32);
  for (const auto mode : {stile::CpuCluster::Mode::kOwnThread, stile::CpuCluster::Mode::kCallerThread}) {
    stile::CpuCluster cpu("cpu:1", {}, LinearFormat::kF32, mode);
    std::vector<float> A(4 * 64, 1.0f), C(4 * 128);
    stile::LinearCall call;
    call.op = "ffn_in";
    call.M = 4;
    call.A = A.data();
    call.lda = 64;
    call.w = f.view.ffn_in;
    call.n0 = 1;  // not on a panel
    call.n1 = 128;
    call.C = C.data();
    call.ldc = 128;
    call.bias = l.ffn_in_bias.data();
    cpu.enqueue(call);
    const std::string e = stile_test::error_of([&] { cpu.wait(); });
    CHECK_THAT(e, Catch::Contains("processor 'cpu:1': linear ffn_in channels [1, 128)") &&
                      Catch::Contains("panel width"));
    call.n0 = 0;
    cpu.enqueue(call);
    cpu.wait();  // usable again
    CHECK(C[0] != 0.0f);
  }
}
