// GEMM throughput of stile against OpenBLAS cblas_sgemm, same shapes, same run, same threads.
// C[M x N] = A[M x K] * W^T with W [N x K] (PyTorch Linear layout); BERT-base and MiniLM layer
// shapes at M = 32 and 128 tokens. stile runs on W as stored (DenseF32), packed at load
// (PackedF32), and packed at load in fp16 (PackedF16: half the bytes, converted per panel).
//
//   bench_gemm [--quick] [--rows 32,128] [--threads 1,2]
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/kernels/fp16_weights.hpp"
#include "stile/kernels/gemm.hpp"

extern "C" void openblas_set_num_threads(int);

int main(int argc, char** argv) {
  bool quick = false;
  stile_cli::Parser cli("bench_gemm", "[options]",
                        "GEMM throughput of stile against OpenBLAS cblas_sgemm: BERT-base and MiniLM layer shapes at "
                        "32 and 128 tokens, the same threads.");
  std::vector<std::size_t> ms = {32, 128}, thread_counts = {1, 2};
  cli.toggle("--quick", "fewer repetitions", quick);
  cli.flag("--rows", "M,...", "rows of A (tokens) to run", ms).at_least(1);
  cli.flag("--threads", "T,...", "thread counts to run", thread_counts).range(1, 256);
  cli.example("bench_gemm --rows 16,128 --threads 1,2");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  struct Shape {
    std::size_t N, K;
  };
  const std::vector<Shape> shapes = {{768, 768}, {3072, 768}, {768, 3072}, {384, 384}, {1536, 384}, {384, 1536}};

  fmt::print("machine: {}\nstile target: {}\n", stile::bench::machine_description(), stile::active_target_name());
  fmt::print(
      "GFLOP/s: best of 3 alternating rounds, each the median of 9 batches; stile on W as stored (dense), packed "
      "fp32 (pf32) and packed fp16 (pf16); ratio = dense / OpenBLAS, f16/f32 = pf16 / pf32 (higher is better)\n\n");
  fmt::print("{:>5} {:>5} {:>5} {:>3} | {:>8} {:>8} {:>8} {:>8} | {:>6} {:>7}\n", "M", "N", "K", "thr", "dense", "pf32",
             "pf16", "OpenBLAS", "ratio", "f16/f32");

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  double worst_ratio = 1e9;
  for (const std::size_t threads : thread_counts) {
    stile::ThreadPool pool(threads);
    openblas_set_num_threads(static_cast<int>(threads));
    for (const std::size_t M : ms) {
      for (const Shape& s : shapes) {
        std::vector<float> A(M * s.K), W(s.N * s.K), C(M * s.N);
        for (float& x : A) x = dist(rng);
        for (float& x : W) x = dist(rng);
        const stile::DenseF32 w(W.data(), s.N, s.K);
        const stile::PackedWeights w32 = stile::pack_weights(w);
        const stile::PackedWeightsF16 w16 = stile::pack_weights_f16(w);
        const double flops = 2.0 * double(M) * double(s.N) * double(s.K);
        const int batches = quick ? 3 : 9;
        // Rounds alternate the two engines, so a slow spell of the machine hits both; each
        // engine's figure is its best round (a median over batches within the round).
        double t_stile = 1e30, t_blas = 1e30, t_p32 = 1e30, t_p16 = 1e30;
        for (int round = 0; round < (quick ? 1 : 3); ++round) {
          t_stile = std::min(
              t_stile,
              stile::bench::median_seconds(
                  [&] { stile::gemm(M, A.data(), s.K, w, C.data(), s.N, stile::epilogue::None{}, &pool); }, batches));
          t_p32 = std::min(
              t_p32,
              stile::bench::median_seconds(
                  [&] { stile::gemm(M, A.data(), s.K, w32.view, C.data(), s.N, stile::epilogue::None{}, &pool); },
                  batches));
          t_p16 = std::min(
              t_p16,
              stile::bench::median_seconds(
                  [&] { stile::gemm(M, A.data(), s.K, w16.view, C.data(), s.N, stile::epilogue::None{}, &pool); },
                  batches));
          t_blas = std::min(t_blas, stile::bench::median_seconds(
                                        [&] {
                                          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(s.N),
                                                      int(s.K), 1.0f, A.data(), int(s.K), W.data(), int(s.K), 0.0f,
                                                      C.data(), int(s.N));
                                        },
                                        batches));
          // OpenBLAS workers spin for a while after a call; let them sleep before stile runs.
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        const double g_stile = flops / t_stile * 1e-9, g_blas = flops / t_blas * 1e-9;
        const double g_p32 = flops / t_p32 * 1e-9, g_p16 = flops / t_p16 * 1e-9;
        worst_ratio = std::min(worst_ratio, g_stile / g_blas);
        fmt::print("{:>5} {:>5} {:>5} {:>3} | {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f} | {:>6.3f} {:>7.3f}\n", M, s.N, s.K,
                   threads, g_stile, g_p32, g_p16, g_blas, g_stile / g_blas, g_p16 / g_p32);
      }
    }
  }
  fmt::print("\nworst ratio: {:.3f}\n", worst_ratio);
  return 0;
}
