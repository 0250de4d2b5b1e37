// End-to-end latency of stile's fp32 encoder on the default model (all-MiniLM-L6-v2), one
// sentence of exactly L tokens, batch 1, at 1 and 2 threads; beside PyTorch and ONNX Runtime
// when given their figures from the same run (bench/peers/bert_peers.py, see bench/run_bert_bench).
// Also reports the fraction of the machine's measured GEMM peak that the whole forward reaches.
//
//   bench_bert [--model DIR] [--peers peers.json] [--out stile.json] [--seconds S]
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/bert_model.hpp"

namespace {

// Multiply-adds x 2 of one forward pass of L tokens (GEMMs and attention products).
double forward_flops(const stile::BertConfig& c, double L) {
  const double d = double(c.hidden), ff = double(c.intermediate);
  const double per_layer = 2 * L * d * 3 * d + 2 * 2 * L * L * d + 2 * L * d * d + 2 * 2 * L * d * ff;
  return per_layer * double(c.num_layers);
}

// The GEMM peak on this machine: best GFLOP/s of stile's GEMM over large, cache-friendly shapes.
double gemm_peak_gflops(stile::ThreadPool& pool) {
  const std::size_t M = 256, N = 1536, K = 768;
  std::vector<float> A(M * K, 0.5f), W(N * K, 0.25f), C(M * N);
  const double t = stile::bench::median_seconds([&] {
    stile::gemm(M, A.data(), K, stile::DenseF32(W.data(), N, K), C.data(), N, stile::epilogue::None{}, &pool);
  });
  return 2.0 * M * N * K / t * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir = stile::default_model_dir().string();
  std::string peers_path, out_path;
  double batch_seconds = 0.05;  // a cell: 9 batches of runs
  stile_cli::Parser cli("bench_bert", "[options]",
                        "End-to-end latency of stile's fp32 encoder on the default model, batch 1, at 1 and 2 "
                        "threads, beside PyTorch and ONNX Runtime when given their figures (bench/run_bert_bench).");
  cli.flag("--model", "DIR", "model directory (default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2)",
           model_dir);
  cli.flag("--peers", "FILE", "the peers' figures (bench/peers/bert_peers.py --out)", peers_path);
  cli.flag("--out", "FILE", "write stile's figures as JSON", out_path);
  cli.flag("--seconds", "S", "seconds per cell, 9 batches of runs (default: 0.45)",
           [&](std::string_view v) { batch_seconds = stile_cli::parse_number(v, "--seconds") / 9; });
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");

  const stile::BertModel model = stile::BertModel::load(model_dir);
  const stile::BertConfig& c = model.config();
  const std::vector<std::size_t> lengths = {16, 32, 64, 128, 256};
  const std::vector<std::size_t> thread_counts = {1, 2};

  std::map<std::pair<std::string, std::size_t>, std::map<std::size_t, double>> peers;  // (engine, threads) -> L -> ms
  if (!peers_path.empty()) {
    std::ifstream in(peers_path);
    if (!in) {
      fmt::print(stderr, "bench_bert: cannot read {}\n", peers_path);
      return 1;
    }
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& r : j.at("results")) {
      peers[{r.at("engine").get<std::string>(), r.at("threads").get<std::size_t>()}]
           [r.at("seq_len").get<std::size_t>()] = r.at("median_ms").get<double>();
    }
  }

  fmt::print("machine: {}; stile target {}\n", stile::bench::machine_description(), stile::active_target_name());
  fmt::print("model: {} layers, hidden {}, {} heads, FFN {} (all-MiniLM-L6-v2, real weights)\n", c.num_layers, c.hidden,
             c.num_heads, c.intermediate);
  fmt::print("batch 1, median of 9 batches of runs, ms; ratio = stile / peer (lower is better)\n\n");

  nlohmann::json out = {{"machine", stile::bench::machine_description()},
                        {"target", stile::active_target_name()},
                        {"results", nlohmann::json::array()}};
  std::mt19937 rng(1);
  for (const std::size_t threads : thread_counts) {
    stile::ThreadPool pool(threads);
    const double peak = gemm_peak_gflops(pool);
    fmt::print("threads {}: GEMM peak measured {:.1f} GFLOP/s (256x1536x768)\n", threads, peak);
    std::string header = fmt::format("{:>5} | {:>8} {:>7}", "L", "stile", "%peak");
    for (const auto& [key, cells] : peers) {
      if (key.second == threads) header += fmt::format(" | {:>15} {:>6}", key.first, "ratio");
    }
    fmt::print("{}\n", header);
    for (const std::size_t L : lengths) {
      stile::Encoding e;
      e.input_ids.assign(L, 0);
      e.input_ids.front() = 101;  // [CLS]
      e.input_ids.back() = 102;   // [SEP]
      for (std::size_t t = 1; t + 1 < L; ++t) e.input_ids[t] = 1000 + static_cast<std::int32_t>(rng() % 20000);
      e.token_type_ids.assign(L, 0);
      e.attention_mask.assign(L, 1);
      std::vector<float> hidden;
      const std::span<const stile::Encoding> batch(&e, 1);
      const double ms =
          1e3 * stile::bench::median_seconds([&] { model.encode(batch, hidden, &pool); }, 9, batch_seconds);
      const double frac = forward_flops(c, double(L)) / (ms * 1e-3) * 1e-9 / peak;
      std::string line = fmt::format("{:>5} | {:>8.2f} {:>6.0f}%", L, ms, 100 * frac);
      for (const auto& [key, cells] : peers) {
        if (key.second != threads) continue;
        const auto it = cells.find(L);
        line += it == cells.end() ? fmt::format(" | {:>15} {:>6}", "-", "-")
                                  : fmt::format(" | {:>15.2f} {:>6.2f}", it->second, ms / it->second);
      }
      fmt::print("{}\n", line);
      out["results"].push_back({{"engine", "stile"},
                                {"threads", threads},
                                {"seq_len", L},
                                {"median_ms", ms},
                                {"fraction_of_gemm_peak", frac},
                                {"gemm_peak_gflops", peak}});
    }
    fmt::print("\n");
  }
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(1) << "\n";
  return 0;
}
