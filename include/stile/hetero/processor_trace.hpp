#pragma once
// What each processor ran when: one span per call (processor, operator, start, end), recorded by
// the processors (Processor::set_trace) and exported as Chrome trace JSON (chrome://tracing,
// Perfetto) with one lane per processor.
#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stile {

struct ProcessorSpan {
  std::string processor;
  std::string op;
  double start_ms = 0, end_ms = 0;  // from the trace's start
};

class ProcessorTrace {
 public:
  ProcessorTrace() : origin_(std::chrono::steady_clock::now()) {}

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin_).count();
  }
  // Thread-safe: processors record from their own threads.
  void record(const std::string& processor, std::string op, double start_ms, double end_ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    spans_.push_back({processor, std::move(op), start_ms, end_ms});
  }
  std::vector<ProcessorSpan> spans() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return spans_;
  }

  // Chrome trace events: one thread (lane) per processor, in the order they first appear.
  nlohmann::json chrome_trace() const {
    const std::vector<ProcessorSpan> all = spans();
    std::vector<std::string> lanes;
    nlohmann::json events = nlohmann::json::array();
    for (const ProcessorSpan& s : all) {
      std::size_t tid = 0;
      while (tid < lanes.size() && lanes[tid] != s.processor) ++tid;
      if (tid == lanes.size()) {
        lanes.push_back(s.processor);
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid},
                          {"args", {{"name", s.processor}}}});
      }
      events.push_back({{"name", s.op}, {"ph", "X"}, {"pid", 1}, {"tid", tid}, {"ts", s.start_ms * 1000.0},
                        {"dur", (s.end_ms - s.start_ms) * 1000.0}});
    }
    return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  }

 private:
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<ProcessorSpan> spans_;
};

}  // namespace stile
