#pragma once
// Profiles two processors for the split predictor (plan/split_predictor.hpp): times the calls the
// cooperative layer makes (each linear layer on 1/4 .. 4/4 of its channels, attention on 1, half
// and all heads, LayerNorm on half and all rows) at each token count, on each processor, through
// the processors themselves (enqueue + wait: a hand-off to a processor's own thread is part of
// what it costs), and fits each processor's linear, attention and layer_norm models.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/hetero/processor.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/plan/split_predictor.hpp"

namespace stile {

// One layer shape to profile on: the layer in each processor's format.
struct ProfiledLayer {
  const LayerView<LinearView>* view[2] = {nullptr, nullptr};
  std::size_t hidden = 0;
};

namespace split_profiler_detail {

// Median ms of `reps` runs of enqueue(call) + wait(), after one warm-up.
inline double time_call(Processor& p, const OpCall& call, int reps) {
  p.enqueue(call);
  p.wait();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    p.enqueue(call);
    p.wait();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return std::max(t[static_cast<std::size_t>(reps / 2)], 1e-6);
}

}  // namespace split_profiler_detail

inline SplitProfile profile_split(const std::array<Processor*, 2>& procs, std::span<const ProfiledLayer> layers,
                                  std::span<const std::size_t> tokens, const OpFormats& ops, nlohmann::json machine,
                                  int reps = 5) {
  using split_profiler_detail::time_call;
  SplitProfile profile;
  profile.machine = std::move(machine);
  for (std::size_t side = 0; side < 2; ++side) {
    Processor& proc = *procs[side];
    std::vector<LatencySample> lin, att, ln;
    const std::size_t g = std::max<std::size_t>(1, proc.channel_granule());
    for (const ProfiledLayer& layer : layers) {
      const LayerView<LinearView>& v = *layer.view[side];
      const std::size_t d = layer.hidden, ff = v.ffn_width(), H = v.heads;
      for (const std::size_t T : tokens) {
        std::vector<float> in(T * std::max(d, ff) * 3, 0.5f), out(T * std::max(3 * d, ff), 0.0f),
            bias(std::max(2 * d, ff), 0.1f);
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        struct Op {
          const LinearView* w;
          std::size_t K;
          LinearEpilogue epi;
        };
        const std::array<Op, 5> lin_ops{Op{&v.q, d, LinearEpilogue::kBias}, Op{&v.kv, d, LinearEpilogue::kBias},
                                        Op{&v.attn_out, d, LinearEpilogue::kBiasResidual},
                                        Op{&v.ffn_in, d, LinearEpilogue::kBiasGelu},
                                        Op{&v.ffn_out, ff, LinearEpilogue::kBiasResidual}};
        for (const Op& op : lin_ops) {
          const std::size_t N = op.w->rows();
          for (const double frac : {0.25, 0.5, 0.75, 1.0}) {
            // Processor 1's slices end at N and start on its granule; processor 0's start at 0.
            const std::size_t n = std::min(N, std::max(g, (static_cast<std::size_t>(frac * double(N)) + g / 2) / g * g));
            LinearCall c;
            c.op = "profile";
            c.M = T;
            c.A = in.data();
            c.lda = op.K;
            c.w = *op.w;
            c.n0 = side == 0 ? 0 : N - n - (N - n) % g;
            c.n1 = side == 0 ? n : N;
            c.C = out.data();
            c.ldc = N;
            c.epilogue = op.epi;
            c.bias = bias.data();
            c.residual = out.data();
            c.residual_ld = N;
            c.gelu = ops.gelu == GeluFormat::kInteger ? GeluFormat::kExact : ops.gelu;
            lin.push_back({linear_features(T, c.n1 - c.n0, op.K, proc.format()), time_call(proc, c, reps)});
          }
        }
        const std::vector<std::size_t> lengths{T};
        const std::array<std::size_t, 2> offsets{0, T};
        std::vector<std::uint16_t> all(H);
        for (std::size_t h = 0; h < H; ++h) all[h] = static_cast<std::uint16_t>(h);
        for (const std::size_t nh : {std::size_t{1}, std::max<std::size_t>(1, H / 2), H}) {
          AttentionCall a;
          a.qkv = in.data();
          a.ld_qkv = 3 * d;
          a.seq_offsets = offsets;
          a.heads = std::span<const std::uint16_t>(all).first(nh);
          a.heads_total = H;
          a.head_dim = v.head_dim;
          a.ctx = out.data();
          a.ld_ctx = d;
          a.scale = v.attn_scale;
          a.softmax = ops.softmax;
          att.push_back({attention_features(lengths, nh, v.head_dim), time_call(proc, a, reps)});
        }
        std::vector<float> gamma(d, 1.0f), beta(d, 0.0f);
        for (const std::size_t rows : {std::max<std::size_t>(1, T / 2), T}) {
          std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(T * d), out.begin());
          const LayerNormCall n{out.data(), 0, rows, d, d, gamma.data(), beta.data(), 1e-12f, ops.layer_norm};
          ln.push_back({layer_norm_features(rows, d), time_call(proc, n, reps)});
        }
      }
    }
    profile.fits.push_back({proc.name(), "linear", to_string(proc.format()), fit_latency(lin)});
    profile.fits.push_back({proc.name(), "attention", "fp32", fit_latency(att)});
    profile.fits.push_back({proc.name(), "layer_norm", to_string(ops.layer_norm), fit_latency(ln)});
  }
  return profile;
}

}  // namespace stile
