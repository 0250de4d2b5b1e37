// One layer's self-attention (every head of one sequence) at MiniLM's and BERT-base's head
// shapes: stile's fused kernel (ops/attention.hpp) against the unfused composition it replaced
// (per head: scores = Q K^T by the GEMM, softmax over the [s x s] scores, P V by the GEMM), in one
// alternating run, beside the rate of the GEMM at its own best shape (the roofline it aims for).
//
//   bench_attention [--lengths 16,128,512] [--threads 1,2] [--target AVX2]
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/core/aligned_buffer.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/ops/attention.hpp"

namespace {

// The composition the fused kernel replaced: one task per head, [s x s] scores per thread.
void unfused_attention(const float* qkv, std::size_t s, std::size_t heads, std::size_t hd, float* ctx,
                       stile::ThreadPool& pool) {
  const std::size_t d = heads * hd, ld = 3 * d;
  pool.run(heads, [&](std::size_t h, std::size_t) {
    static thread_local stile::AlignedBuffer<float> scores;
    scores.resize(s * s);
    stile::ThreadPool& serial = stile::single_thread_pool();
    const float* q = qkv + h * hd;
    stile::gemm(s, q, ld, stile::DenseF32(q + d, s, hd, ld), scores.data(), s, stile::epilogue::None{}, &serial);
    stile::softmax_rows(scores.data(), s, s, s, 1.0f);
    stile::gemm(s, scores.data(), s, stile::DenseF32Transposed(q + 2 * d, hd, s, ld), ctx + h * hd, d,
                stile::epilogue::None{}, &serial);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> lengths = {16, 32, 64, 128, 256, 512}, thread_counts = {1, 2};
  double seconds = 0.2;
  stile_cli::Parser cli("bench_attention", "[options]",
                        "One layer's self-attention, fused kernel against the unfused GEMM + softmax + GEMM, at "
                        "MiniLM's (12 x 32) and BERT-base's (12 x 64) heads, batch 1.");
  cli.flag("--lengths", "L,...", "sequence lengths", lengths).at_least(1);
  cli.flag("--threads", "T,...", "thread counts", thread_counts).range(1, 256);
  cli.simd_target();
  cli.flag("--seconds", "S", "seconds per cell per engine, in 9 alternating batches", seconds);
  cli.example("bench_attention --lengths 128,512 --threads 1");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");

  fmt::print("machine: {}; stile target {}\n", stile::bench::machine_description(), stile::active_target_name());
  for (const std::size_t threads : thread_counts) {
    stile::ThreadPool pool(threads);
    // The GEMM's own rate: MiniLM's FFN1 at 256 tokens.
    {
      const std::size_t M = 256, N = 1536, K = 384;
      std::vector<float> a(M * K, 0.5f), w(N * K, 0.25f), c(M * N);
      const double t = stile::bench::median_seconds(
          [&] {
            stile::gemm(M, a.data(), K, stile::DenseF32(w.data(), N, K), c.data(), N, stile::epilogue::None{}, &pool);
          },
          9, seconds / 9);
      fmt::print("\nthreads {}: GEMM {}x{}x{}: {:.1f} GFLOP/s\n", threads, M, N, K, 2.0 * M * N * K / t * 1e-9);
    }
    fmt::print("{:>8} {:>5} | {:>10} {:>8} | {:>10} {:>8} | {:>7}\n", "heads", "L", "fused ms", "GFLOP/s", "unfused ms",
               "GFLOP/s", "ratio");
    for (const std::size_t hd : {std::size_t{32}, std::size_t{64}}) {
      const std::size_t heads = 12, d = heads * hd;
      for (const std::size_t s : lengths) {
        std::mt19937 rng(7);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> qkv(s * 3 * d), ctx_fused(s * d), ctx_unfused(s * d);
        for (float& x : qkv) x = normal(rng) / std::sqrt(float(hd));
        const std::vector<std::size_t> offsets = {0, s};
        auto fused = [&] { stile::self_attention(qkv.data(), 3 * d, offsets, heads, hd, ctx_fused.data(), d, pool); };
        auto unfused = [&] { unfused_attention(qkv.data(), s, heads, hd, ctx_unfused.data(), pool); };
        // Alternate the two in short batches so both see the same spells of the machine.
        std::vector<double> tf, tu;
        for (int round = 0; round < 9; ++round) {
          tf.push_back(stile::bench::median_seconds(fused, 3, seconds / 27));
          tu.push_back(stile::bench::median_seconds(unfused, 3, seconds / 27));
        }
        std::nth_element(tf.begin(), tf.begin() + 4, tf.end());
        std::nth_element(tu.begin(), tu.begin() + 4, tu.end());
        double worst = 0;
        for (std::size_t i = 0; i < ctx_fused.size(); ++i) {
          worst = std::max(worst, double(std::abs(ctx_fused[i] - ctx_unfused[i])));
        }
        const double flops = 4.0 * double(s) * double(s) * double(d);
        fmt::print("{:>5}x{:<2} {:>5} | {:>10.4f} {:>8.1f} | {:>10.4f} {:>8.1f} | {:>7.2f}   (max |diff| {:.1e})\n",
                   heads, hd, s, tf[4] * 1e3, flops / tf[4] * 1e-9, tu[4] * 1e3, flops / tu[4] * 1e-9, tf[4] / tu[4],
                   worst);
      }
    }
  }
  return 0;
}
