#pragma once
// What one rank did when during a multi-device layer: compute and communication phases, in
// milliseconds from the trace's origin, exported as Chrome trace JSON (chrome://tracing, Perfetto)
// with one lane for compute and one for communication; the tool writes one file per rank.
// A trace can also emulate a slower device (set_slowdown: every compute phase is stretched to
// that many times its measured length by spinning, so peers wait as they would for a slower
// board); every figure made so must say it is emulated.
#include <chrono>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"

namespace stile {

struct DistEvent {
  std::string name;
  bool comm = false;
  double start_ms = 0, end_ms = 0;
};

class DistTrace {
 public:
  using Clock = std::chrono::steady_clock;
  DistTrace() : origin_(Clock::now()) {}

  double now_ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - origin_).count(); }
  void add(std::string name, bool comm, double start_ms) { events_.push_back({std::move(name), comm, start_ms, now_ms()}); }
  const std::vector<DistEvent>& events() const noexcept { return events_; }
  void clear() { events_.clear(); }
  // Emulated: compute phases take `factor` times as long (>= 1).
  void set_slowdown(double factor) noexcept { slowdown_ = factor < 1 ? 1 : factor; }
  double slowdown() const noexcept { return slowdown_; }
  double total_ms(bool comm) const {
    double s = 0;
    for (const DistEvent& e : events_) s += e.comm == comm ? e.end_ms - e.start_ms : 0;
    return s;
  }

  nlohmann::json chrome_json(int rank) const {
    nlohmann::json events = nlohmann::json::array();
    for (const DistEvent& e : events_) {
      events.push_back({{"name", e.name}, {"ph", "X"}, {"pid", rank}, {"tid", e.comm ? 1 : 0},
                        {"ts", e.start_ms * 1000.0}, {"dur", (e.end_ms - e.start_ms) * 1000.0}});
    }
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 1}, {"args", {{"name", "communication"}}}});
    return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  }
  void write(const std::string& path, int rank) const {
    std::ofstream out(path, std::ios::trunc);
    out << chrome_json(rank).dump(1) << "\n";
    require(out.good(), "cannot write the trace " + path);
  }

 private:
  Clock::time_point origin_;
  std::vector<DistEvent> events_;
  double slowdown_ = 1;
};

// Adds the phase from its construction to its end to a trace (none: nothing).
class DistPhase {
 public:
  DistPhase(DistTrace* trace, const char* name, bool comm)
      : trace_(trace), name_(name), comm_(comm), start_(trace ? trace->now_ms() : 0) {}
  ~DistPhase() {
    if (!trace_) return;
    if (!comm_ && trace_->slowdown() > 1) {
      // Busy, not asleep: the core stays taken as a slower device's would, and a spin ends on
      // time where a sleep would overshoot short phases.
      const double until = trace_->now_ms() + (trace_->slowdown() - 1) * (trace_->now_ms() - start_);
      while (trace_->now_ms() < until) {
      }
    }
    trace_->add(name_, comm_, start_);
  }
  DistPhase(const DistPhase&) = delete;
  DistPhase& operator=(const DistPhase&) = delete;

 private:
  DistTrace* trace_;
  const char* name_;
  bool comm_;
  double start_;
};

}  // namespace stile
