#pragma once
// Measures an op latency profile (plan/op_latency_profile.hpp) on this machine: every node kind of
// the operator graph (plan/op_graph.hpp) in every format it has, at each token count, on each
// processor, and the transfer cost between each ordered pair of processors.
//
// Processors here are CPU core sets of one core each ("cpu:<n>"): the measuring thread pins
// itself to core n (sched affinity) and runs the operator with a one-thread pool, the way a
// processor runtime would run a node there. Each node runs the same kernels and epilogues as
// ops/encoder_layer.hpp on random weights of the model's shape; one copy of the weights per
// encoder layer is cycled through, so the caches see a whole model's weights as in a forward
// pass, not one layer's kept hot, and before each timed run of a linear node the bytes of the rest
// of a layer's weights in its format are read (untimed) from a buffer as large as all layers'
// weights, as the other operators of a forward pass would. Latency: the median of `repeats` runs
// after `warmup`.
//
// Transfer p -> q: thread A on p writes b bytes and signals B on q, which reads them and answers.
// transfer(b) = round trip(b) - (A writing and reading b bytes itself) - the answer's one-way
// signal (half the round trip of an empty message); call_us and byte_us are the least-squares
// line through transfer(b) over `transfer_bytes`, clamped at 0.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "stile/calibrate/device_profiler.hpp"
#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/ops/linear.hpp"
#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/op_latency_profile.hpp"

namespace stile {

struct OpProfileSettings {
  std::vector<std::size_t> tokens{16, 32, 64, 128};
  std::vector<unsigned> cpus{0, 1};  // processor i is "cpu:<cpus[i]>"
  std::size_t repeats = 15, warmup = 3;
  std::vector<std::size_t> transfer_bytes{0, 4096, 65536, 262144, 1048576};
  std::size_t transfer_repeats = 200;
  Int8Scheme int8_scheme = Int8Scheme::kSymmetricPerChannel;
  std::size_t classes = 2;
};

// Pins the calling thread to one core; Error when the core does not exist or is not allowed.
inline void pin_current_thread_to_cpu(unsigned cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  require(cpu < CPU_SETSIZE, "op profiler: cpu " + std::to_string(cpu) + " is out of range");
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
    throw Error("op profiler: cannot pin a thread to cpu " + std::to_string(cpu) +
                " (no such core, or not in this process's affinity mask)");
  }
#else
  (void)cpu;
  throw Error("op profiler: pinning threads to cores needs Linux");
#endif
}

// Runs f on a new thread pinned to `cpu` and returns when it has finished (rethrowing its error).
template <class F>
void run_pinned(unsigned cpu, F&& f) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      pin_current_thread_to_cpu(cpu);
      f();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

namespace op_profiler_detail {

inline double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// `before` runs untimed before each run (the cache traffic of the operators between two of this
// kind in a forward pass).
inline double time_us(const std::function<void()>& f, std::size_t warmup, std::size_t repeats,
                      const std::function<void()>& before = {}) {
  for (std::size_t i = 0; i < warmup; ++i) f();
  std::vector<double> us;
  for (std::size_t i = 0; i < repeats; ++i) {
    if (before) before();
    const auto a = std::chrono::steady_clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  return median_us(std::move(us));
}

inline std::vector<float> random_floats(std::size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// One linear layer's fp32 weights and bias, and its converted copies per format.
struct RandomLinear {
  std::vector<float> w, bias;
  std::size_t out = 0, in = 0;
  RandomLinear(std::size_t out_, std::size_t in_, std::mt19937& rng)
      : w(random_floats(out_ * in_, 1.0f / std::sqrt(float(in_)), rng)),
        bias(random_floats(out_, 0.02f, rng)),
        out(out_),
        in(in_) {}
  LinearWeights as(LinearFormat f, Int8Scheme s) const { return LinearWeights::make(DenseF32(w.data(), out, in), f, s, "random"); }
};

struct LayerWeights {
  RandomLinear q, kv, attn_out, ffn_in, ffn_out;
  LayerWeights(const EncoderConfig& c, std::mt19937& rng)
      : q(c.hidden, c.hidden, rng),
        kv(2 * c.hidden, c.hidden, rng),
        attn_out(c.hidden, c.hidden, rng),
        ffn_in(c.intermediate, c.hidden, rng),
        ffn_out(c.hidden, c.intermediate, rng) {}
};

// Transfer round trips between two pinned threads (see the top of calibrate/op_latency_profiler.hpp).
inline double round_trip_us(unsigned a, unsigned b, std::size_t bytes, std::size_t repeats, bool same_thread) {
  AlignedBuffer<float> buf;
  buf.resize(std::max<std::size_t>(1, bytes / sizeof(float)));
  const std::size_t n = bytes / sizeof(float);
  constexpr std::int64_t kStop = -2;
  std::atomic<std::int64_t> flag{-1}, ack{-1};
  std::atomic<float> sink{0};
  std::vector<double> us;
  auto consume = [&] {
    float s = 0;
    for (std::size_t i = 0; i < n; ++i) s += buf[i];
    sink.store(s, std::memory_order_relaxed);
  };
  if (same_thread) {
    run_pinned(a, [&] {
      for (std::size_t r = 0; r < repeats + 10; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        std::fill_n(buf.data(), n, float(r));
        consume();
        if (r >= 10) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    });
    return median_us(us);
  }
  std::exception_ptr error;
  std::thread consumer([&] {
    try {
      pin_current_thread_to_cpu(b);
      for (std::int64_t r = 0; r < std::int64_t(repeats + 10); ++r) {
        for (std::int64_t v = flag.load(std::memory_order_acquire); v != r; v = flag.load(std::memory_order_acquire)) {
          if (v == kStop) return;  // the producer could not run
        }
        consume();
        ack.store(r, std::memory_order_release);
      }
    } catch (...) {
      error = std::current_exception();
      ack.store(1 << 30, std::memory_order_release);
    }
  });
  try {
    run_pinned(a, [&] {
      for (std::int64_t r = 0; r < std::int64_t(repeats + 10); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        std::fill_n(buf.data(), n, float(r));
        flag.store(r, std::memory_order_release);
        while (ack.load(std::memory_order_acquire) < r) {
        }
        if (error) break;
        if (r >= 10) us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    });
  } catch (...) {
    flag.store(kStop, std::memory_order_release);
    consumer.join();
    throw;
  }
  consumer.join();
  if (error) std::rethrow_exception(error);
  return median_us(us);
}

}  // namespace op_profiler_detail

// The profile of a model of config `c` (dimensions only: the weights are random). Progress, when
// set, counts processors x token counts, then the transfer pairs.
inline OpLatencyProfile measure_op_latency_profile(const EncoderConfig& c, const OpProfileSettings& s,
                                                   ProgressBar* progress = nullptr) {
  using namespace op_profiler_detail;
  require(!s.tokens.empty() && !s.cpus.empty() && s.repeats >= 1, "op profiler: nothing to measure");
  require(c.hidden % c.num_heads == 0, "op profiler: hidden is not a multiple of heads");
  std::vector<std::string> names;
  for (const unsigned cpu : s.cpus) names.push_back("cpu:" + std::to_string(cpu));
  OpGraphShape shape{.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads, .ffn = c.intermediate,
                     .tokens = 0, .classes = s.classes};
  OpLatencyProfile prof = OpLatencyProfile::empty(shape, s.tokens, names);

  std::mt19937 rng(19);
  std::vector<LayerWeights> layers;
  for (std::size_t l = 0; l < c.num_layers; ++l) layers.emplace_back(c, rng);
  const std::size_t d = c.hidden, ff = c.intermediate, hd = c.head_dim();
  const std::size_t max_t = *std::max_element(s.tokens.begin(), s.tokens.end());
  const std::vector<float> gamma(d, 1.0f), beta(d, 0.0f);
  const std::vector<float> table = random_floats(512 * d, 0.05f, rng);
  const std::vector<float> position = random_floats(max_t * d, 0.05f, rng);
  const std::vector<float> head_w = random_floats(s.classes * d, 0.05f, rng);
  const std::vector<float> x0 = random_floats(max_t * d, 1.0f, rng);
  const std::vector<float> h0 = random_floats(max_t * ff, 1.0f, rng);
  const std::vector<float> qkv0 = random_floats(max_t * 3 * d, 1.0f, rng);
  // Every layer's GEMM weights in fp32.
  const std::vector<float> polluter = random_floats(c.num_layers * (4 * d * d + 2 * d * ff), 1.0f, rng);
  std::atomic<float> sink{0};
  const std::size_t steps = s.cpus.size() * s.tokens.size();
  std::size_t step = 0;

  for (std::size_t p = 0; p < s.cpus.size(); ++p) {
    run_pinned(s.cpus[p], [&] {
      ThreadPool pool(1);  // runs every task on this (pinned) thread
      AlignedBuffer<float> x, res, out, qkv, ctx, ffn;
      for (const std::size_t t : s.tokens) {
        x.resize(t * d);
        res.resize(t * d);
        out.resize(t * d);
        qkv.resize(t * 3 * d);
        ctx.resize(t * d);
        ffn.resize(t * ff);
        std::copy_n(x0.data(), t * d, res.data());
        std::copy_n(h0.data(), t * ff, ffn.data());
        std::copy_n(qkv0.data(), t * 3 * d, qkv.data());
        const std::size_t offsets[2] = {0, t};
        std::size_t cycle = 0;
        // Between two linear nodes of one kind, a forward pass reads the rest of a layer's weights:
        // `other_bytes` of them are read (untimed) before each run.
        // The window read moves on through a buffer of the whole model's weights, so that over a
        // run the caches see as many distinct bytes as a forward pass streams.
        std::size_t other_bytes = 0, window = 0;
        float polluted = 0;
        auto pollute = [&] {
          const std::size_t n = std::min(other_bytes / sizeof(float), polluter.size());
          float acc = 0;
          for (std::size_t i = 0; i < n; i += 16) acc += polluter[(window + i) % polluter.size()];
          window = (window + n) % polluter.size();
          polluted += acc;
        };
        auto measure = [&](OpNodeKind kind, NumberFormat f, const std::function<void(std::size_t layer)>& run) {
          const double us = time_us([&] { run(cycle++ % layers.size()); }, s.warmup, s.repeats,
                                    other_bytes > 0 ? std::function<void()>(pollute) : std::function<void()>());
          std::vector<double>& e = prof.entry(p, kind, f);
          if (e.empty()) e.assign(s.tokens.size(), 0.0);
          e[static_cast<std::size_t>(std::find(s.tokens.begin(), s.tokens.end(), t) - s.tokens.begin())] = us;
        };
        auto norm_of = [](NumberFormat f) {
          return f == NumberFormat::kInt8 ? NormFormat::kInt8 : f == NumberFormat::kInteger ? NormFormat::kInteger
                                                                                           : NormFormat::kF32;
        };
        auto linear_of = [](NumberFormat f) {
          return f == NumberFormat::kF16 ? LinearFormat::kF16 : f == NumberFormat::kF32 ? LinearFormat::kF32
                                                                                       : LinearFormat::kInt8;
        };
        for (const NumberFormat f : formats_of(OpNodeKind::kEmbedding)) {
          measure(OpNodeKind::kEmbedding, f, [&](std::size_t) {
            for (std::size_t i = 0; i < t; ++i) {
              const float* wr = table.data() + ((i * 7919) % 512) * d;
              const float* pr = position.data() + i * d;
              float* o = x.data() + i * d;
              for (std::size_t k = 0; k < d; ++k) o[k] = wr[k] + pr[k] + pr[k];  // word + position + type
            }
            layer_norm_rows(norm_of(f), x.data(), t, d, d, gamma.data(), beta.data(), 1e-12f, &pool);
          });
        }
        // A layer's GEMM weights in format f, less the node's own.
        auto others = [&](NumberFormat f, std::size_t own_params) {
          const std::size_t bytes_per = f == NumberFormat::kF32 ? 4 : f == NumberFormat::kF16 ? 2 : 1;
          return (4 * d * d + 2 * d * ff - own_params) * bytes_per;
        };
        for (const NumberFormat f : formats_of(OpNodeKind::kQkv)) {
          other_bytes = others(f, 3 * d * d);
          std::vector<LinearWeights> q, kv;
          for (const auto& l : layers) {
            q.push_back(l.q.as(linear_of(f), s.int8_scheme));
            kv.push_back(l.kv.as(linear_of(f), s.int8_scheme));
          }
          measure(OpNodeKind::kQkv, f, [&](std::size_t l) {
            linear(t, res.data(), d, q[l].view(), qkv.data(), 3 * d, epilogue::Bias{.bias = layers[l].q.bias.data()},
                   &pool);
            linear(t, res.data(), d, kv[l].view(), qkv.data() + d, 3 * d,
                   epilogue::Bias{.bias = layers[l].kv.bias.data()}, &pool);
          });
        }
        std::copy_n(qkv0.data(), t * 3 * d, qkv.data());
        other_bytes = 0;
        for (const NumberFormat f : formats_of(OpNodeKind::kAttentionHead)) {
          // One head: its Q, K and V columns are the first 3 x head_dim of a [t x 3 head_dim] buffer.
          measure(OpNodeKind::kAttentionHead, f, [&](std::size_t) {
            self_attention(qkv.data(), 3 * hd, offsets, 1, hd, ctx.data(), hd, pool, 1.0f / std::sqrt(float(hd)),
                           f == NumberFormat::kInteger ? SoftmaxFormat::kInteger : SoftmaxFormat::kF32);
          });
        }
        std::copy_n(x0.data(), t * d, ctx.data());
        for (const NumberFormat f : formats_of(OpNodeKind::kAttnOut)) {
          other_bytes = others(f, d * d);
          std::vector<LinearWeights> w;
          for (const auto& l : layers) w.push_back(l.attn_out.as(linear_of(f), s.int8_scheme));
          measure(OpNodeKind::kAttnOut, f, [&](std::size_t l) {
            linear(t, ctx.data(), d, w[l].view(), out.data(), d,
                   epilogue::BiasResidual{layers[l].attn_out.bias.data(), res.data(), d}, &pool);
          });
        }
        other_bytes = 0;
        for (const NumberFormat f : formats_of(OpNodeKind::kLayerNorm)) {
          std::copy_n(x0.data(), t * d, x.data());
          measure(OpNodeKind::kLayerNorm, f, [&](std::size_t) {
            layer_norm_rows(norm_of(f), x.data(), t, d, d, gamma.data(), beta.data(), 1e-12f, &pool);
          });
        }
        for (const NumberFormat f : formats_of(OpNodeKind::kFfnIn)) {
          other_bytes = others(f, d * ff);
          std::vector<LinearWeights> w;
          for (const auto& l : layers) w.push_back(l.ffn_in.as(linear_of(f), s.int8_scheme));
          measure(OpNodeKind::kFfnIn, f, [&](std::size_t l) {
            const float* b = layers[l].ffn_in.bias.data();
            if (f == NumberFormat::kF32 || f == NumberFormat::kF16) {
              linear(t, res.data(), d, w[l].view(), ffn.data(), ff, epilogue::BiasGelu{.bias = b}, &pool);
            } else if (f == NumberFormat::kInt8) {
              linear(t, res.data(), d, w[l].view(), ffn.data(), ff, epilogue::BiasGeluErfApprox{.bias = b}, &pool);
            } else {
              linear(t, res.data(), d, w[l].view(), ffn.data(), ff, epilogue::Bias{.bias = b}, &pool);
              gelu_inplace(GeluFormat::kInteger, ffn.data(), t * ff);
            }
          });
        }
        std::copy_n(h0.data(), t * ff, ffn.data());
        for (const NumberFormat f : formats_of(OpNodeKind::kFfnOut)) {
          other_bytes = others(f, d * ff);
          std::vector<LinearWeights> w;
          for (const auto& l : layers) w.push_back(l.ffn_out.as(linear_of(f), s.int8_scheme));
          measure(OpNodeKind::kFfnOut, f, [&](std::size_t l) {
            linear(t, ffn.data(), ff, w[l].view(), out.data(), d,
                   epilogue::BiasResidual{layers[l].ffn_out.bias.data(), res.data(), d}, &pool);
          });
        }
        other_bytes = 0;
        sink.store(polluted, std::memory_order_relaxed);
        std::vector<double> sum(d);
        std::vector<float> pooled(d), logits(s.classes);
        measure(OpNodeKind::kPooling, NumberFormat::kF32, [&](std::size_t) {
          std::fill(sum.begin(), sum.end(), 0.0);
          for (std::size_t i = 0; i < t; ++i) {
            for (std::size_t k = 0; k < d; ++k) sum[k] += res[i * d + k];
          }
          for (std::size_t k = 0; k < d; ++k) pooled[k] = float(sum[k] / double(t));
        });
        measure(OpNodeKind::kClassifier, NumberFormat::kF32, [&](std::size_t) {
          for (std::size_t k = 0; k < s.classes; ++k) {
            float acc = 0;
            for (std::size_t i = 0; i < d; ++i) acc += head_w[k * d + i] * pooled[i];
            logits[k] = acc;
          }
          std::atomic_signal_fence(std::memory_order_seq_cst);
        });
        if (progress) progress->update(++step, steps + s.cpus.size() * (s.cpus.size() - 1));
      }
    });
  }

  // Transfers between each ordered pair.
  for (std::size_t a = 0; a < s.cpus.size(); ++a) {
    for (std::size_t b = 0; b < s.cpus.size(); ++b) {
      if (a == b) continue;
      const double signal = round_trip_us(s.cpus[a], s.cpus[b], 0, s.transfer_repeats, false) / 2;
      std::vector<double> xs, ys;
      for (const std::size_t bytes : s.transfer_bytes) {
        const double cross = round_trip_us(s.cpus[a], s.cpus[b], bytes, s.transfer_repeats, false);
        const double local = round_trip_us(s.cpus[a], s.cpus[b], bytes, s.transfer_repeats, true);
        xs.push_back(double(bytes));
        ys.push_back(std::max(0.0, cross - local - signal));
      }
      // Least squares y = call + byte * x.
      double mx = 0, my = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) mx += xs[i] / double(xs.size()), my += ys[i] / double(xs.size());
      double sxy = 0, sxx = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
      const double slope = sxx > 0 ? std::max(0.0, sxy / sxx) : 0.0;
      prof.transfer[a][b] = {std::max(0.0, my - slope * mx), slope};
      if (progress) progress->update(++step, steps + s.cpus.size() * (s.cpus.size() - 1));
    }
  }
  namespace dp = device_profiler_detail;
  prof.machine = nlohmann::json{{"cpu", dp::cpu_model()},
                                {"cores", std::thread::hardware_concurrency()},
                                {"simd_target", active_target_name()},
                                {"compiler", dp::compiler()},
                                {"date", dp::utc_now_iso8601()},
                                {"emulated", false}};
  nlohmann::json sizes = s.transfer_bytes;
  prof.settings = {{"repeats", s.repeats},
                   {"warmup", s.warmup},
                   {"threads_per_processor", 1},
                   {"processors", "one CPU core each, the measuring thread pinned to it"},
                   {"weights", "random, of the model's shape, one copy per layer cycled through"},
                   {"int8_scheme", s.int8_scheme == Int8Scheme::kSymmetricPerChannel ? "symmetric per channel"
                                                                                       : "asymmetric per tensor"},
                   {"transfer_bytes", sizes},
                   {"transfer_repeats", s.transfer_repeats},
                   {"statistic", "median"}};
  return prof;
}

}  // namespace stile
