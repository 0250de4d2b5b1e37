#pragma once
// stile-serve's counters, in the Prometheus text exposition format (version 0.0.4) for GET
// /metrics: requests by endpoint and status, request latency as a histogram per endpoint, texts
// and tokens computed, batches run, jobs waiting, and the elastic engine's missed deadlines.
// Thread-safe: every HTTP thread records, one reads.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace stile_serve {

class Metrics {
 public:
  // Upper bounds of the latency buckets, seconds (Prometheus' le), +Inf implied.
  static constexpr std::array<double, 12> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                             0.1,   0.25,   0.5,   1.0,  2.5,   10.0};

  void record_request(const std::string& endpoint, int status, double seconds) {
    std::lock_guard lock(mutex_);
    ++requests_[{endpoint, status}];
    Histogram& h = latency_[endpoint];
    for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) h.counts[i] += seconds <= kLatencyBuckets[i];
    ++h.count;
    h.sum += seconds;
  }

  void record_batch(std::size_t texts, std::size_t tokens) {
    std::lock_guard lock(mutex_);
    ++batches_;
    texts_ += texts;
    tokens_ += tokens;
  }

  void record_deadline_miss() {
    std::lock_guard lock(mutex_);
    ++deadline_misses_;
  }

  // The exposition text; queued: the jobs waiting now.
  [[nodiscard]] std::string render(std::size_t queued) const {
    std::lock_guard lock(mutex_);
    std::string out;
    out += "# HELP stile_requests_total HTTP requests answered, by endpoint and status code.\n";
    out += "# TYPE stile_requests_total counter\n";
    for (const auto& [key, n] : requests_) {
      out += fmt::format("stile_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
    }
    out += "# HELP stile_request_duration_seconds Time from a request's body read to its answer.\n";
    out += "# TYPE stile_request_duration_seconds histogram\n";
    for (const auto& [endpoint, h] : latency_) {
      for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
        out += fmt::format("stile_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"{}\"}} {}\n", endpoint,
                           kLatencyBuckets[i], h.counts[i]);
      }
      out +=
          fmt::format("stile_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"+Inf\"}} {}\n", endpoint, h.count);
      out += fmt::format("stile_request_duration_seconds_sum{{endpoint=\"{}\"}} {}\n", endpoint, h.sum);
      out += fmt::format("stile_request_duration_seconds_count{{endpoint=\"{}\"}} {}\n", endpoint, h.count);
    }
    const auto counter = [&out](const char* name, const char* help, std::uint64_t value) {
      out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, value);
    };
    counter("stile_texts_total", "Texts (or pairs) computed.", texts_);
    counter("stile_tokens_total", "Tokens computed, special tokens included.", tokens_);
    counter("stile_batches_total", "Encoder runs: each batches one or more requests.", batches_);
    counter("stile_deadline_misses_total", "Elastic-engine requests that ran past their latency target.",
            deadline_misses_);
    out += fmt::format(
        "# HELP stile_queue_depth Requests waiting for the encoder.\n# TYPE stile_queue_depth gauge\n"
        "stile_queue_depth {}\n",
        queued);
    return out;
  }

 private:
  struct Histogram {
    std::array<std::uint64_t, kLatencyBuckets.size()> counts{};
    std::uint64_t count = 0;
    double sum = 0;
  };

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::string, Histogram> latency_;
  std::uint64_t texts_ = 0;
  std::uint64_t tokens_ = 0;
  std::uint64_t batches_ = 0;
  std::uint64_t deadline_misses_ = 0;
};

}  // namespace stile_serve
