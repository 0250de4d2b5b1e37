// bench_dist: one encoder layer (or a whole model) split over MPI ranks in each mode (WS, 1D, 2D),
// run under mpirun; rank 0 prints one JSON line per mode: the median time of the layer (the
// slowest rank's), per-rank compute and communication time, bytes communicated per layer (the
// payload one rank receives, dist/communicator.hpp), weight bytes per device. bench/run_dist_bench
// runs it at 1 and 2 ranks over shared memory and TCP loopback and prints the speedups.
//
//   mpirun -np 2 --bind-to core bench_dist --shape large --tokens 128 [--modes ws,1d,2d]
//   mpirun -np 2 bench_dist --shape minilm --tokens 128            (the default model, all layers)
//   ... --slow-rank 1 --slowdown 2 --heads 11,5 --neurons 2731,1365  (emulated: rank 1 at half speed)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/dist/broadcast_partition.hpp"
#include "stile/dist/device_probe.hpp"
#include "stile/dist/dist_model.hpp"
#include "stile/dist/make_dist_layer.hpp"
#include "stile/dist/mpi_communicator.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/plan/lp_partition.hpp"

using namespace stile;
namespace fs = std::filesystem;

namespace {

std::vector<std::size_t> parse_counts(const std::string& text) {
  std::vector<std::size_t> out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(std::stoul(text.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

// The figures of one mode, gathered to every rank.
struct Run {
  double ms = 0;                               // median over reps of the slowest rank's time
  std::vector<float> compute_ms, comm_ms;      // per rank, per run (mean)
  double bytes_per_layer = 0;                  // rank 0's received payload per layer
  std::vector<float> weight_bytes;             // per rank
};

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  Communicator& comm = mpi.world();
  std::string shape = "large", modes_text = "ws,1d,2d", heads_text, neurons_text;
  std::size_t tokens = 128, reps = 7;
  std::size_t slow_rank = SIZE_MAX;  // none
  double slowdown = 1;
  bool lp = false;
  fs::path model_dir = fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/stile/all-MiniLM-L6-v2";
  stile_cli::Parser cli("bench_dist", "[options]  (under mpirun)",
                        "Times a layer (or the whole default model) split over the MPI ranks in each mode.");
  cli.flag("--shape", "NAME", "large: a BERT-large-shaped layer (random weights); minilm: the default model, all layers",
           shape).one_of({"large", "minilm"});
  cli.flag("--tokens", "N", "tokens (one sequence)", tokens).at_least(1);
  cli.flag("--modes", "LIST", "modes to run, comma-separated (ws, 1d, 2d)", modes_text);
  cli.flag("--reps", "R", "timed runs per mode", reps).at_least(1);
  cli.flag("--model", "DIR", "the model for --shape minilm", model_dir);
  cli.flag("--heads", "H0,H1,..", "heads per rank (default: even)", heads_text);
  cli.flag("--neurons", "F0,F1,..", "FFN neurons per rank (default: even)", neurons_text);
  cli.flag("--slow-rank", "R", "emulate a slower device on this rank", slow_rank).shown_default("no rank is slowed");
  cli.flag("--slowdown", "F", "its compute phases take F times as long (emulated, by spinning)", slowdown).at_least(1);
  cli.toggle("--lp", "shares from the LP partitioner on measured profiles (the slow rank's slowdown included)", lp);
  cli.example("mpirun -np 2 --bind-to core bench_dist --shape large --tokens 128 --modes ws,1d");
  const std::vector<std::string> args = cli.parse(argc, argv);
  if (!args.empty()) cli.fail("no positional arguments");

  try {
    const auto n = static_cast<std::size_t>(comm.size());
    std::unique_ptr<BertModel> model;
    DenseLayer layer;
    if (shape == "large") {
      layer = DenseLayer::random(1024, 16, 4096, 7);
    } else {
      model = std::make_unique<BertModel>(BertModel::load(model_dir));
    }
    const std::size_t d = model ? model->config().hidden : layer.hidden;
    const std::size_t heads = model ? model->config().num_heads : layer.heads;
    const std::size_t ffn = model ? model->config().intermediate : layer.ffn;
    const std::size_t layers = model ? model->config().num_layers : 1;
    const DenseLayer noise = DenseLayer::random(d, 1, tokens, 99);
    std::vector<float> x0(noise.w1.begin(), noise.w1.end());
    for (float& v : x0) v *= 50.0f;
    const std::vector<std::size_t> offsets{0, tokens};
    ThreadPool pool(1);  // one core per rank
    DistTrace trace;
    if (static_cast<std::size_t>(comm.rank()) == slow_rank) trace.set_slowdown(slowdown);

    std::vector<std::string> modes;
    for (std::size_t at = 0; at < modes_text.size();) {
      const std::size_t comma = std::min(modes_text.find(',', at), modes_text.size());
      modes.push_back(modes_text.substr(at, comma - at));
      at = comma + 1;
    }
    const DistLayerShape lp_shape{.hidden = d, .heads = heads, .ffn = ffn, .tokens = tokens};
    std::vector<DistDevice> devices;
    if (lp) {
      const bool slow_here = static_cast<std::size_t>(comm.rank()) == slow_rank;
      devices = probe_devices(comm, lp_shape, pool, {.slowdown = slow_here ? slowdown : 1});
    }
    for (const std::string& mode_name_text : modes) {
      Partition p = even_partition(parse_mode(mode_name_text), n, heads, ffn, d);
      if (lp && p.mode != DistMode::k2d) {
        if (comm.rank() == 0) p = solve_layer_partition(devices, lp_shape, p.mode, false).partition;
        broadcast_partition(comm, p);
      }
      if (!heads_text.empty() && p.mode != DistMode::k2d) p.heads = parse_counts(heads_text);
      if (!neurons_text.empty() && p.mode != DistMode::k2d) p.neurons = parse_counts(neurons_text);
      std::unique_ptr<DistModel> dist_model;
      std::unique_ptr<DistLayer> dist_layer;
      if (model) {
        dist_model = std::make_unique<DistModel>(model->weights(), p, comm);
        dist_model->set_trace(&trace);
      } else {
        dist_layer = make_dist_layer(layer, p, comm);
        dist_layer->set_trace(&trace);
      }
      const auto run_once = [&] {
        std::vector<float> x = x0;
        if (dist_model) {
          dist_model->run_layers(x.data(), offsets, pool);
        } else {
          dist_layer->run(x.data(), offsets, pool);
        }
      };
      run_once();  // warm-up
      comm.barrier();
      comm.reset_stats();
      trace.clear();
      std::vector<double> times;
      for (std::size_t r = 0; r < reps; ++r) {
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        run_once();
        float mine = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::vector<float> all(n);
        std::vector<std::size_t> ones(n, 1);
        comm.all_gather(&mine, ones, all.data());  // not timed
        times.push_back(*std::max_element(all.begin(), all.end()));
      }
      // The stats include the timing all-gathers (4 bytes a rank each): subtract them.
      const double bytes =
          (static_cast<double>(comm.stats().bytes) - 4.0 * static_cast<double>(reps) * static_cast<double>(n - 1)) /
          static_cast<double>(reps * layers);
      float own[4] = {static_cast<float>(trace.total_ms(false) / reps), static_cast<float>(trace.total_ms(true) / reps),
                      static_cast<float>(bytes),
                      static_cast<float>(dist_model ? dist_model->weight_bytes() / layers : dist_layer->weight_bytes())};
      std::vector<float> gathered(4 * n);
      std::vector<std::size_t> fours(n, 4);
      comm.all_gather(own, fours, gathered.data());
      std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(reps / 2), times.end());
      if (comm.rank() == 0) {
        nlohmann::json j;
        j["machine"] = bench::machine_description();
        j["shape"] = shape == "large" ? "BERT-large layer (hidden 1024, 16 heads, FFN 4096, random weights)"
                                      : "MiniLM (all-MiniLM-L6-v2), " + std::to_string(layers) + " layers";
        j["tokens"] = tokens;
        j["ranks"] = n;
        j["mode"] = mode_name_text;
        j["partition"] = partition_text(p);
        j["shares"] = lp ? "lp" : heads_text.empty() ? "even" : "given";
        j["ms"] = times[reps / 2];
        std::vector<double> compute, commt, wbytes;
        double bytes0 = gathered[2];
        for (std::size_t r = 0; r < n; ++r) {
          compute.push_back(gathered[4 * r]);
          commt.push_back(gathered[4 * r + 1]);
          wbytes.push_back(gathered[4 * r + 3]);
        }
        j["compute_ms_per_rank"] = compute;
        j["comm_ms_per_rank"] = commt;
        j["comm_bytes_per_layer_rank0"] = bytes0;
        j["weight_bytes_per_layer_per_rank"] = wbytes;
        if (slow_rank != SIZE_MAX && slowdown > 1) {
          j["emulated"] = "rank " + std::to_string(slow_rank) + " slowed " + std::to_string(slowdown) +
                          "x (its compute phases stretched by spinning)";
        }
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dist: rank %d: %s\n", comm.rank(), e.what());
    comm.abort(e.what());
  }
  return 0;
}
