#pragma once
// The measured latency of a forward pass on one processor as the op latency profile defines it
// (calibrate/op_latency_profiler.hpp): one thread pinned to one core, one sequence of `tokens`
// tokens, encode() + mean pooling + a 2-class head's dot products (the operator graph's nodes); a
// mapped forward's: calibrate/request_cost_profiler.hpp's mapped_forward_us.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stile/calibrate/op_latency_profiler.hpp"
#include "stile/calibrate/request_cost_profiler.hpp"
#include "stile/hetero/mapped_forward.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/pooling.hpp"

namespace stile::bench {

using stile::synthetic_encoding;  // calibrate/request_cost_profiler.hpp
using stile::mapped_forward_us;

// The median over `repeats` runs (after 3 warm-up runs), in microseconds.
inline double pinned_forward_us(const BertModel& model, std::size_t tokens, unsigned cpu, std::size_t repeats) {
  const EncoderConfig& c = model.config();
  const Encoding e = synthetic_encoding(tokens);
  std::vector<double> us;
  run_pinned(cpu, [&] {
    ThreadPool pool(1);
    std::vector<float> hidden, pooled(c.hidden);
    const std::vector<float> head(2 * c.hidden, 0.01f);
    const std::vector<Encoding> batch{e};
    for (std::size_t r = 0; r < repeats + 3; ++r) {
      const auto a = std::chrono::steady_clock::now();
      model.encode(batch, hidden, &pool);
      pool_tokens(hidden, tokens, c.hidden, Pooling::kMean, pooled);
      volatile float logit = 0;
      for (std::size_t k = 0; k < 2; ++k) {
        float acc = 0;
        for (std::size_t j = 0; j < c.hidden; ++j) acc += head[k * c.hidden + j] * pooled[j];
        logit = logit + acc;
      }
      if (r >= 3) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
    }
  });
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace stile::bench
