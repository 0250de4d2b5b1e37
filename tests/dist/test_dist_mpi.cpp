// The multi-device modes over Open MPI, one process per rank (run under mpiexec by ctest):
//   test_dist_mpi               every mode on this many ranks, uneven shares, against the
//                               single-device layer (BERT-large-shaped layer made on the spot, and
//                               the whole default model when it is there); exit 0 when all match
//                               to 1e-5 on every rank.
//   test_dist_mpi --fault stop  rank 1 stops itself (SIGSTOP: alive to the launcher, dead to its
//                               peers) before a collective: every other rank must report a clear
//                               timeout error (tests/dist/expect_output.cmake checks each rank's).
//   test_dist_mpi --fault exit  rank 1 exits: Open MPI's launcher ends the job, naming rank 1 (the
//                               others are killed while they wait, or time out and report first).
//   test_dist_mpi --fault fit   rank 1 cannot hold its part: every rank reports it and fails.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "dist_test_util.hpp"
#include "stile/dist/dist_model.hpp"
#include "stile/dist/make_dist_layer.hpp"
#include "stile/dist/mpi_communicator.hpp"
#include "stile/model/bert_model.hpp"

using namespace stile;

namespace {

int failures = 0;

void check(Communicator& comm, const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  const float diff = stile_test::max_abs_diff(got, want);
  const bool ok = diff <= 1e-5f;
  std::printf("rank %d: %s: max abs diff %.3g %s\n", comm.rank(), what.c_str(), static_cast<double>(diff),
              ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

void modes_on_layer(Communicator& comm) {
  const DenseLayer layer = DenseLayer::random(1024, 16, 4096, 7);
  const std::vector<std::size_t> offsets{0, 7, 12};
  const DenseLayer noise = DenseLayer::random(1024, 1, offsets.back(), 99);
  std::vector<float> x0(noise.w1.begin(), noise.w1.end());
  for (float& v : x0) v *= 50.0f;
  std::vector<float> want = x0;
  single_device_layer(layer, want.data(), offsets, single_thread_pool());
  const auto n = static_cast<std::size_t>(comm.size());
  for (const Partition& p : stile_test::test_partitions(n, layer.heads, layer.ffn, layer.hidden)) {
    const auto dist = make_dist_layer(layer, p, comm);
    std::vector<float> x = x0;
    dist->run(x.data(), offsets, single_thread_pool());
    check(comm, "BERT-large layer, " + partition_text(p), x, want);
  }
}

void modes_on_minilm(Communicator& comm) {
  const std::filesystem::path dir = STILE_MODEL_DIR;
  if (!std::filesystem::exists(dir / "model.safetensors")) {
    std::printf("rank %d: MiniLM skipped: the default model is not in %s (scripts/fetch-model)\n", comm.rank(),
                dir.c_str());
    return;
  }
  const BertModel model = BertModel::load(dir);
  const EncoderConfig& c = model.config();
  Encoding e;
  for (std::int32_t t = 0; t < 21; ++t) e.input_ids.push_back(t == 0 ? 101 : t == 20 ? 102 : 1000 + 37 * t);
  std::vector<float> want;
  model.encode(std::span(&e, 1), want, &single_thread_pool());
  const std::vector<std::size_t> offsets{0, e.input_ids.size()};
  const auto n = static_cast<std::size_t>(comm.size());
  for (const Partition& p : stile_test::test_partitions(n, c.num_heads, c.intermediate, c.hidden)) {
    DistModel dist(model.weights(), p, comm);
    std::vector<float> x;
    dist.embed(e, x);
    dist.run_layers(x.data(), offsets, single_thread_pool());
    check(comm, "MiniLM, " + partition_text(p), x, want);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv, std::chrono::seconds(60));
  Communicator& comm = mpi.world();
  const std::string fault = argc >= 3 && std::strcmp(argv[1], "--fault") == 0 ? argv[2] : "";
  try {
    if (fault == "stop") {
      comm.set_timeout(std::chrono::seconds(3));
      comm.barrier();
      if (comm.rank() == 1) std::raise(SIGSTOP);  // never reaches the next collective
      std::vector<float> v(16, 1.0f);
      comm.all_reduce_sum(v.data(), v.size());
      std::printf("rank %d: the all-reduce completed without rank 1\n", comm.rank());
      return 1;
    }
    if (fault == "exit") {  // a rank that really dies: the launcher ends the job and names it
      comm.set_timeout(std::chrono::seconds(3));
      comm.barrier();
      if (comm.rank() == 1) std::_Exit(3);
      std::vector<float> v(16, 1.0f);
      comm.all_reduce_sum(v.data(), v.size());
      return 1;
    }
    if (fault == "fit") {
      const std::vector<int> failed = failed_ranks(comm, comm.rank() != 1);
      if (!failed.empty()) {
        throw Error("stile: partition cannot fit: rank " + std::to_string(failed[0]) +
                    " cannot hold its part of the layer");
      }
      return 1;
    }
    modes_on_layer(comm);
    modes_on_minilm(comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", comm.rank(), e.what());
    std::fflush(stderr);
    // Let the other ranks that fail the same way report it before the job ends.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    comm.abort(e.what());
  }
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}
