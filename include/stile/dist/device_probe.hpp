#pragma once
// The profile the partitioner (plan/lp_partition.hpp) needs, measured on each rank: seconds per
// FLOP by running the layer's GEMMs on this device (packed fp32 weights of the layer's shapes),
// the memory it can give to weights, and its link's latency and bandwidth measured through the
// communicator (collectives over all ranks: every rank gets the same link figures, the slowest
// link's). Gathered so that every rank holds every device's profile.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/dist/communicator.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/plan/lp_partition.hpp"

namespace stile {

struct ProbeOptions {
  double slowdown = 1;    // emulated: this device's measured time per FLOP is multiplied by it
  double free_bytes = 0;  // > 0: what this device may use for weights (emulated); else MemAvailable
};

// MemAvailable of /proc/meminfo in bytes (0 where there is none).
inline double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    double kb = 0;
    std::string unit;
    in >> kb >> unit;
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

// Median seconds per FLOP of the layer's two GEMM shapes ([tokens x d] by [d x d] and by
// [d_ff x d]) on `pool`.
inline double measure_seconds_per_flop(const DistLayerShape& L, ThreadPool& pool, int reps = 5) {
  const std::size_t s = L.tokens, d = L.hidden, ff = L.ffn;
  std::vector<float> w(ff * d, 0.01f), a(s * d, 0.5f);
  const PackedWeights wd = pack_weights(DenseF32(w.data(), d, d));
  const PackedWeights wf = pack_weights(DenseF32(w.data(), ff, d));
  AlignedBuffer<float> c(s * ff);
  std::vector<double> per_flop;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm(s, a.data(), d, wd.view, c.data(), d, epilogue::None{}, &pool);
    gemm(s, a.data(), d, wf.view, c.data(), ff, epilogue::None{}, &pool);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) per_flop.push_back(sec / (2.0 * static_cast<double>(s * d * (d + ff))));  // the first warms up
  }
  std::nth_element(per_flop.begin(), per_flop.begin() + static_cast<std::ptrdiff_t>(per_flop.size() / 2), per_flop.end());
  return per_flop[per_flop.size() / 2];
}

// Latency (median 1-float all-reduce) and bandwidth (an all-gather of `bytes` per rank) of the
// communicator's links. Collective.
inline void measure_link(Communicator& comm, double& latency_seconds, double& bytes_per_second,
                         std::size_t bytes = 1 << 20) {
  latency_seconds = 0, bytes_per_second = 0;
  if (comm.size() <= 1) return;
  using Clock = std::chrono::steady_clock;
  std::vector<double> lat;
  for (int r = 0; r < 21; ++r) {
    float one = 1;
    const auto t0 = Clock::now();
    comm.all_reduce_sum(&one, 1);
    lat.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(lat.begin(), lat.begin() + 10, lat.end());
  latency_seconds = lat[10];
  const auto n = static_cast<std::size_t>(comm.size());
  const std::size_t floats = bytes / sizeof(float);
  std::vector<float> all(n * floats, 1.0f);
  const std::vector<std::size_t> counts(n, floats);
  std::vector<double> bw;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    comm.all_gather(all.data() + static_cast<std::size_t>(comm.rank()) * floats, counts, all.data());
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count() - latency_seconds;
    bw.push_back(static_cast<double>((n - 1) * floats * sizeof(float)) / std::max(sec, 1e-9));
  }
  std::nth_element(bw.begin(), bw.begin() + 2, bw.end());
  bytes_per_second = bw[2];
  // Every rank takes the slowest figures, so that every rank plans from the same profile.
  float figures[2] = {static_cast<float>(latency_seconds), static_cast<float>(-bytes_per_second)};
  std::vector<float> gathered(2 * n);
  comm.all_gather(figures, std::vector<std::size_t>(n, 2), gathered.data());
  for (std::size_t r = 0; r < n; ++r) {
    latency_seconds = std::max(latency_seconds, static_cast<double>(gathered[2 * r]));
    bytes_per_second = std::min(bytes_per_second, static_cast<double>(-gathered[2 * r + 1]));
  }
}

// Every device's profile, on every rank. Collective.
inline std::vector<DistDevice> probe_devices(Communicator& comm, const DistLayerShape& L, ThreadPool& pool,
                                             const ProbeOptions& options = {}) {
  double latency = 0, bandwidth = 0;
  measure_link(comm, latency, bandwidth);
  const double spf = measure_seconds_per_flop(L, pool) * std::max(1.0, options.slowdown);
  const double mem = options.free_bytes > 0 ? options.free_bytes : available_memory_bytes();
  const auto n = static_cast<std::size_t>(comm.size());
  // As floats: seconds per FLOP (~1e-11) scaled to picoseconds, memory in MB.
  float mine[2] = {static_cast<float>(spf * 1e12), static_cast<float>(mem / 1e6)};
  std::vector<float> all(2 * n);
  comm.all_gather(mine, std::vector<std::size_t>(n, 2), all.data());
  std::vector<DistDevice> devices(n);
  for (std::size_t r = 0; r < n; ++r) {
    devices[r] = {.seconds_per_flop = static_cast<double>(all[2 * r]) * 1e-12,
                  .free_bytes = static_cast<double>(all[2 * r + 1]) * 1e6,
                  .bytes_per_second = bandwidth,
                  .latency_seconds = latency};
  }
  return devices;
}

}  // namespace stile
