#pragma once
// Timing helpers shared by the benchmarks: per-call time over batches of repeated calls, and the name
// of the machine, so every printed figure says where it was measured.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace stile::bench {

// Seconds per call of fn() in each of `batches` batches of about `batch_seconds` of calls, after
// one warm-up batch.
template <class Fn>
std::vector<double> batch_seconds_per_call(Fn&& fn, int batches, double batch_seconds) {
  using clock = std::chrono::steady_clock;
  fn();
  const auto t0 = clock::now();
  fn();
  const double once = std::chrono::duration<double>(clock::now() - t0).count();
  const int reps = std::max(1, static_cast<int>(batch_seconds / std::max(once, 1e-7)));
  for (int r = 0; r < reps; ++r) fn();  // warm-up batch
  std::vector<double> per_call;
  for (int b = 0; b < batches; ++b) {
    const auto start = clock::now();
    for (int r = 0; r < reps; ++r) fn();
    per_call.push_back(std::chrono::duration<double>(clock::now() - start).count() / reps);
  }
  return per_call;
}

// Median seconds per call of fn() over the batches.
template <class Fn>
double median_seconds(Fn&& fn, int batches = 9, double batch_seconds = 0.02) {
  std::vector<double> per_call = batch_seconds_per_call(fn, batches, batch_seconds);
  std::nth_element(per_call.begin(), per_call.begin() + batches / 2, per_call.end());
  return per_call[batches / 2];
}

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      return line.substr(line.find(':') + 2);
    }
  }
  return "unknown CPU";
}

inline std::string machine_description() {
  return cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
}

}  // namespace stile::bench
