// gemm_demo: runs the FFN of one BERT layer (FFN1 + bias + GELU, then FFN2 + bias + residual in
// place) with stile's GEMM on random weights made on the spot, checks sampled outputs against a
// naive loop, and prints the time and throughput on this machine.
//
//   gemm_demo [tokens] [hidden] [ffn]     (defaults: 128 768 3072, BERT-base)
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/stile.hpp"

int main(int argc, char** argv) {
  stile_cli::Parser cli("gemm_demo", "[tokens] [hidden] [ffn]",
                        "Runs the FFN of one BERT layer with stile's GEMM on random weights, checks sampled outputs "
                        "against a naive loop, and prints the time and throughput (default shape: 128 768 3072, "
                        "BERT-base).");
  cli.example("gemm_demo", "one BERT-base FFN at 128 tokens");
  cli.example("gemm_demo 16 384 1536", "MiniLM's FFN at 16 tokens");
  const std::vector<std::string> args = cli.parse(argc, argv);
  if (args.size() > 3) cli.fail("at most three dimensions: tokens, hidden, ffn");
  const auto dim = [&](std::size_t i, const char* what, std::size_t otherwise) {
    return i < args.size() ? cli.whole(args[i], what, 1, 100000) : otherwise;
  };
  const std::size_t M = dim(0, "tokens", 128);
  const std::size_t d = dim(1, "hidden", 768);
  const std::size_t f = dim(2, "ffn", 3072);

  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> x(M * d), w1(f * d), b1(f), w2(d * f), b2(d), h(M * f);
  for (auto* v : {&x, &w1, &b1, &w2, &b2}) {
    for (float& e : *v) e = dist(rng);
  }
  const std::vector<float> x0 = x;

  auto& pool = stile::default_thread_pool();
  const auto t0 = std::chrono::steady_clock::now();
  stile::gemm(M, x.data(), d, stile::DenseF32(w1.data(), f, d), h.data(), f,
              stile::epilogue::BiasGelu{.bias = b1.data()});
  stile::gemm(M, h.data(), f, stile::DenseF32(w2.data(), d, f), x.data(), d,
              stile::epilogue::BiasResidual{b2.data(), x.data(), d});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Check a few outputs against the naive computation in double.
  double worst = 0.0;
  for (std::size_t m : {std::size_t{0}, M / 2, M - 1}) {
    std::vector<double> hid(f);
    for (std::size_t j = 0; j < f; ++j) {
      double acc = b1[j];
      for (std::size_t k = 0; k < d; ++k) acc += double(x0[m * d + k]) * w1[j * d + k];
      hid[j] = 0.5 * acc * (1.0 + std::erf(acc / std::sqrt(2.0)));
    }
    for (std::size_t n = 0; n < d; n += 97) {
      double acc = b2[n] + x0[m * d + n];
      for (std::size_t j = 0; j < f; ++j) acc += hid[j] * w2[n * f + j];
      worst = std::fmax(worst, std::fabs(acc - x[m * d + n]) / (1.0 + std::fabs(acc)));
    }
  }
  const double flops = 4.0 * double(M) * double(d) * double(f);
  fmt::print("stile GEMM demo: FFN of one layer, {} tokens, hidden {}, FFN {} (random weights)\n", M, d, f);
  fmt::print("target {}, {} threads: {:.2f} ms (first call, cold), {:.1f} GFLOP/s\n", stile::active_target_name(),
             pool.num_threads(), seconds * 1e3, flops / seconds * 1e-9);
  fmt::print("worst relative error against a naive loop on sampled outputs: {:.2e} ({})\n", worst,
             worst <= 1e-4 ? "ok" : "MISMATCH");
  return worst <= 1e-4 ? 0 : 1;
}
