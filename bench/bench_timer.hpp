#pragma once
// Timing helpers shared by the benchmarks: median over batches of repeated calls, and the name
// of the machine, so every printed figure says where it was measured.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace stile::bench {

// Median seconds per call of fn(): calls are grouped into batches of about `batch_seconds`,
// `batches` of them, after one warm-up batch.
template <class Fn>
double median_seconds(Fn&& fn, int batches = 9, double batch_seconds = 0.02) {
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
