// End-to-end latency of stile's encoder on the default model (all-MiniLM-L6-v2), one sentence of
// exactly L tokens, batch 1, at 1 and 2 threads, in each precision asked for (ops/precision.hpp),
// the precisions timed in alternation within each cell; beside PyTorch and ONNX Runtime when given
// their figures from the same run (bench/peers/bert_peers.py, see bench/run_bert_bench). Also
// reports the fraction of the machine's measured GEMM peak that the fp32 forward reaches, each
// precision's weight memory, and (--breakdown) where each forward spends its time per operator.
//
//   bench_bert [--model DIR] [--precision fp32,int8] [--peers peers.json] [--out stile.json]
//              [--target AVX2 --no-dot]
//              [--seconds S] [--lengths 16,32] [--threads 1,2] [--breakdown]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/io/json_file.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/ops/precision.hpp"

namespace {

// Multiply-adds x 2 of one forward pass of L tokens (GEMMs and attention products).
double forward_flops(const stile::EncoderConfig& c, double L) {
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

// Median seconds per call of each of fns, timed in alternation (batch b of every fn before batch
// b + 1 of any), so that a drift of the machine's speed falls on all of them alike.
std::vector<double> interleaved_median_seconds(const std::vector<std::function<void()>>& fns, int batches,
                                               double batch_seconds) {
  using clock = std::chrono::steady_clock;
  std::vector<int> reps;
  for (const auto& fn : fns) {
    fn();
    const auto t0 = clock::now();
    fn();
    const double once = std::chrono::duration<double>(clock::now() - t0).count();
    reps.push_back(std::max(1, static_cast<int>(batch_seconds / std::max(once, 1e-7))));
  }
  std::vector<std::vector<double>> per_call(fns.size());
  for (int b = 0; b < batches; ++b) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      const auto start = clock::now();
      for (int r = 0; r < reps[i]; ++r) fns[i]();
      per_call[i].push_back(std::chrono::duration<double>(clock::now() - start).count() / reps[i]);
    }
  }
  std::vector<double> out;
  for (std::vector<double>& v : per_call) {
    std::nth_element(v.begin(), v.begin() + batches / 2, v.end());
    out.push_back(v[batches / 2]);
  }
  return out;
}

// The engine name of a stile precision in the JSON and the table: "stile" for fp32 (as before
// precisions existed), else "stile-<precision>".
std::string engine_name(const std::string& precision) { return precision == "fp32" ? "stile" : "stile-" + precision; }

// A peer compares with stile in its own number format: int8 peers with stile int8, the rest fp32.
std::string matching_precision(const std::string& peer) {
  return peer.find("int8") != std::string::npos ? "int8" : "fp32";
}

stile::Encoding sentence_of_length(std::size_t L, std::mt19937& rng) {
  stile::Encoding e;
  e.input_ids.assign(L, 0);
  e.input_ids.front() = 101;  // [CLS]
  e.input_ids.back() = 102;   // [SEP]
  for (std::size_t t = 1; t + 1 < L; ++t) e.input_ids[t] = 1000 + static_cast<std::int32_t>(rng() % 20000);
  e.token_type_ids.assign(L, 0);
  e.attention_mask.assign(L, 1);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir = stile::default_model_dir().string();
  std::string peers_path, out_path;
  std::vector<std::string> precisions{"fp32"};
  std::vector<std::size_t> lengths = {16, 32, 64, 128, 256};
  std::vector<std::size_t> thread_counts = {1, 2};
  bool breakdown = false;
  double batch_seconds = 0.05;  // a cell: 9 batches of runs
  stile_cli::Parser cli("bench_bert", "[options]",
                        "End-to-end latency of stile's encoder on the default model, batch 1, at 1 and 2 threads, in "
                        "each precision asked for, beside PyTorch and ONNX Runtime when given their figures "
                        "(bench/run_bert_bench).");
  cli.flag("--model", "DIR", "model directory (default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2)",
           model_dir);
  cli.flag("--precision", "LIST", "precisions to time, comma-separated: fp32, fp16, int8, ibert (default: fp32)",
           [&](std::string_view v) {
             precisions = stile_cli::parse_list(v, "--precision", [](std::string_view p) {
               stile::precision_preset(p);  // a stile::Error naming the presets if unknown
               return std::string(p);
             });
           });
  cli.flag("--lengths", "LIST", "sequence lengths (default: 16,32,64,128,256)", lengths);
  cli.flag("--threads", "LIST", "thread counts (default: 1,2)", thread_counts);
  cli.flag("--peers", "FILE", "the peers' figures (bench/peers/bert_peers.py --out)", peers_path);
  cli.flag("--out", "FILE", "write stile's figures as JSON", out_path);
  cli.flag("--seconds", "S", "seconds per cell, 9 batches of runs (default: 0.45)",
           [&](std::string_view v) { batch_seconds = stile_cli::parse_number(v, "--seconds") / 9; });
  cli.toggle("--breakdown", "also print the time per operator class of each precision", breakdown);
  cli.simd_target();
  cli.no_int8_dot();
  cli.example("bench_bert --precision fp32,int8 --lengths 16,128 --threads 1,2");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");

  std::vector<stile::BertModel> models;
  for (const std::string& p : precisions) {
    try {
      models.push_back(stile::BertModel::load(model_dir, stile::precision_preset(p)));
    } catch (const stile::Error& e) {
      cli.fail(e.what());
    }
  }
  const stile::EncoderConfig& c = models.front().config();

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
  fmt::print("weight memory of the encoder layers' linear weights:");
  for (std::size_t i = 0; i < models.size(); ++i) {
    std::size_t bytes = 0;
    for (const auto& layer : models[i].weights().layers) bytes += layer.linear_bytes();
    fmt::print(" {} {:.1f} MiB;", precisions[i], double(bytes) / (1 << 20));
  }
  fmt::print(
      "\nbatch 1, median of 9 batches of runs (precisions alternated), ms; ratio = stile in the peer's "
      "format (int8 for int8 peers, else fp32) / peer (lower is better)\n\n");

  nlohmann::json out = {{"machine", stile::bench::machine_description()},
                        {"target", stile::active_target_name()},
                        {"results", nlohmann::json::array()}};
  std::mt19937 rng(1);
  std::map<std::tuple<std::size_t, std::size_t, std::size_t>, stile::OpTimes> times;  // (threads, L, precision)
  for (const std::size_t threads : thread_counts) {
    stile::ThreadPool pool(threads);
    const double peak = gemm_peak_gflops(pool);
    fmt::print("threads {}: GEMM peak measured {:.1f} GFLOP/s (256x1536x768)\n", threads, peak);
    std::string header = fmt::format("{:>5}", "L");
    for (const std::string& p : precisions) {
      header += fmt::format(" | {:>13}", engine_name(p));
      if (p == "fp32") header += fmt::format(" {:>6}", "%peak");
    }
    for (const auto& [key, cells] : peers) {
      if (key.second == threads) header += fmt::format(" | {:>17} {:>6}", key.first, "ratio");
    }
    fmt::print("{}\n", header);
    for (const std::size_t L : lengths) {
      const stile::Encoding e = sentence_of_length(L, rng);
      const std::span<const stile::Encoding> batch(&e, 1);
      std::vector<std::vector<float>> hidden(models.size());
      std::vector<std::function<void()>> runs;
      for (std::size_t i = 0; i < models.size(); ++i) {
        runs.push_back([&, i] { models[i].encode(batch, hidden[i], &pool); });
      }
      const std::vector<double> seconds = interleaved_median_seconds(runs, 9, batch_seconds);
      std::map<std::string, double> ms_of;
      std::string line = fmt::format("{:>5}", L);
      for (std::size_t i = 0; i < models.size(); ++i) {
        const double ms = 1e3 * seconds[i];
        ms_of[precisions[i]] = ms;
        line += fmt::format(" | {:>13.2f}", ms);
        nlohmann::json row = {{"engine", engine_name(precisions[i])},
                              {"precision", precisions[i]},
                              {"threads", threads},
                              {"seq_len", L},
                              {"median_ms", ms}};
        if (precisions[i] == "fp32") {
          const double frac = forward_flops(c, double(L)) / (ms * 1e-3) * 1e-9 / peak;
          line += fmt::format(" {:>5.0f}%", 100 * frac);
          row["fraction_of_gemm_peak"] = frac;
          row["gemm_peak_gflops"] = peak;
        }
        out["results"].push_back(row);
        if (breakdown) {
          stile::OpTimes& t = times[{threads, L, i}];
          const int reps = 20;
          for (int r = 0; r < reps; ++r) models[i].encode(batch, hidden[i], &pool, &t);
          for (double& s : t.seconds) s /= reps;
        }
      }
      for (const auto& [key, cells] : peers) {
        if (key.second != threads) continue;
        const auto it = cells.find(L);
        const auto mine = ms_of.find(matching_precision(key.first));
        if (it == cells.end()) {
          line += fmt::format(" | {:>17} {:>6}", "-", "-");
        } else if (mine == ms_of.end()) {
          line += fmt::format(" | {:>17.2f} {:>6}", it->second, "-");
        } else {
          line += fmt::format(" | {:>17.2f} {:>6.2f}", it->second, mine->second / it->second);
        }
      }
      fmt::print("{}\n", line);
    }
    fmt::print("\n");
  }
  if (breakdown) {
    fmt::print("time per operator class, ms per forward (mean of 20 forwards, timed apart from the table)\n");
    for (const std::size_t threads : thread_counts) {
      for (std::size_t i = 0; i < models.size(); ++i) {
        std::string header = fmt::format("threads {} {:>6} {:>5}", threads, precisions[i], "L");
        for (std::size_t k = 0; k < stile::kOpKinds; ++k) {
          header += fmt::format(" {:>9}", stile::to_string(static_cast<stile::OpKind>(k)));
        }
        fmt::print("{} {:>9}\n", header, "total");
        for (const std::size_t L : lengths) {
          const stile::OpTimes& t = times[{threads, L, i}];
          std::string line = fmt::format("{:>22}", L);
          nlohmann::json ops;
          for (std::size_t k = 0; k < stile::kOpKinds; ++k) {
            line += fmt::format(" {:>9.3f}", 1e3 * t.seconds[k]);
            ops[stile::to_string(static_cast<stile::OpKind>(k))] = 1e3 * t.seconds[k];
          }
          fmt::print("{} {:>9.3f}\n", line, 1e3 * t.total());
          out["breakdown"].push_back(
              {{"engine", engine_name(precisions[i])}, {"threads", threads}, {"seq_len", L}, {"ops_ms", ops}});
        }
      }
    }
  }
  if (!out_path.empty()) {
    try {
      stile::write_file_atomically(out_path, out.dump(1) + "\n");
    } catch (const stile::Error& e) {
      std::fprintf(stderr, "bench_bert: %s\n", e.what());
      return 1;
    }
  }
  return 0;
}
