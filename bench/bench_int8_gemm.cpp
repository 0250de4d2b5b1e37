// The int8 GEMM (u8 x s8 -> int32, fused fp32 epilogue; kernels/int8_gemm.hpp) against stile's fp32
// GEMM on packed weights (PackedF32), same shapes, same run, same threads: MiniLM and BERT-base layer
// shapes at 16..256 tokens. The int8 time includes the dynamic quantization of the activations
// (it runs inside every gemm_int8 call); the `quant` column is that quantization alone.
//
//   bench_int8_gemm [--quick] [--target AVX2] [--no-dot] [--m 32,128] [--threads 1,2]
// --target forces a Highway target (AVX3, AVX2, SSE4, ...); --no-dot forbids the dot-product
// instructions (VNNI, AVX-VNNI, sdot), so the vpmaddubsw path with 7-bit weights runs.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/int8_gemm.hpp"

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<std::size_t> ms = {16, 32, 64, 128, 256};
  std::vector<std::size_t> thread_counts = {1, 2};
  stile_cli::Parser cli("bench_int8_gemm", "[options]",
                        "int8 GEMM (dynamic u8 activations x s8 weights) against stile's fp32 GEMM on packed weights: "
                        "MiniLM and BERT-base layer shapes, the same threads.");
  cli.toggle("--quick", "fewer repetitions", quick);
  cli.no_int8_dot();
  cli.simd_target();
  cli.flag("--m", "LIST", "rows (tokens) to run", ms);
  cli.flag("--threads", "LIST", "thread counts to run", thread_counts);
  cli.example("bench_int8_gemm --quick");
  cli.example("bench_int8_gemm --target AVX2 --no-dot", "what an AVX2 CPU without VNNI runs");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");

  struct Shape {
    const char* model;
    std::size_t N, K;
  };
  const std::vector<Shape> shapes = {{"MiniLM", 1152, 384}, {"MiniLM", 384, 384}, {"MiniLM", 1536, 384},
                                     {"MiniLM", 384, 1536}, {"base", 2304, 768},  {"base", 768, 768},
                                     {"base", 3072, 768},   {"base", 768, 3072}};
  const stile::Int8Packing packing = stile::int8_packing();
  fmt::print("machine: {}\nstile target: {}, int8 kernel: {} (weights +-{}, activations 0..{}, panel width {})\n",
             stile::bench::machine_description(), stile::active_target_name(),
             packing.weight_max == 127 ? "dot product" : "vpmaddubsw, 7-bit weights", packing.weight_max,
             packing.activation_max, packing.nr);
  fmt::print(
      "GOPS (2 M N K / s): the median of {} alternating rounds, each the median of 9 batches; ratio = int8 / fp32; "
      "quant = the activation quantization alone (us), included in int8\n\n",
      quick ? 1 : 5);
  fmt::print("{:>6} {:>4} {:>5} {:>5} {:>3} | {:>8} {:>8} | {:>6} | {:>7}\n", "model", "M", "N", "K", "thr", "fp32",
             "int8", "ratio", "quant");

  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<double> ratios;
  for (const std::size_t threads : thread_counts) {
    stile::ThreadPool pool(threads);
    for (const Shape& s : shapes) {
      std::vector<float> W(s.N * s.K);
      for (float& x : W) x = dist(rng) * 0.05f;
      const stile::PackedWeights w32 = stile::pack_weights(stile::DenseF32(W.data(), s.N, s.K));
      const stile::Int8Weights w8 = stile::quantize_int8(W.data(), s.N, s.K, s.K);
      for (const std::size_t M : ms) {
        std::vector<float> A(M * s.K), C(M * s.N);
        for (float& x : A) x = dist(rng);
        const double ops = 2.0 * double(M) * double(s.N) * double(s.K);
        const int batches = quick ? 3 : 9, rounds = quick ? 1 : 5;
        // Rounds alternate the two, so a slow spell of the machine hits both; each one's figure is
        // the median of its rounds.
        std::vector<double> t32, t8, tq;
        stile::QuantizedActivations qa;
        for (int round = 0; round < rounds; ++round) {
          t32.push_back(stile::bench::median_seconds(
              [&] { stile::gemm(M, A.data(), s.K, w32.view, C.data(), s.N, stile::epilogue::None{}, &pool); },
              batches));
          t8.push_back(stile::bench::median_seconds(
              [&] { stile::gemm_int8(M, A.data(), s.K, w8.view, C.data(), s.N, stile::epilogue::None{}, &pool); },
              batches));
          tq.push_back(stile::bench::median_seconds(
              [&] { stile::quantize_activations(M, A.data(), s.K, s.K, stile::ActivationQuant::kPerRow, qa, &pool); },
              batches));
        }
        const auto median = [](std::vector<double> v) {
          std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
          return v[v.size() / 2];
        };
        const double g32 = ops / median(t32) * 1e-9, g8 = ops / median(t8) * 1e-9;
        ratios.push_back(g8 / g32);
        fmt::print("{:>6} {:>4} {:>5} {:>5} {:>3} | {:>8.1f} {:>8.1f} | {:>6.2f} | {:>7.1f}\n", s.model, M, s.N, s.K,
                   threads, g32, g8, g8 / g32, median(tq) * 1e6);
      }
    }
  }
  std::sort(ratios.begin(), ratios.end());
  fmt::print("\nratio int8 / fp32: min {:.2f}, median {:.2f}, max {:.2f}\n", ratios.front(), ratios[ratios.size() / 2],
             ratios.back());
  return 0;
}
