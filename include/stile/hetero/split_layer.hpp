#pragma once
// muLayer's cooperative layer (EuroSys'19) on two processors: every linear layer's output
// channels are split p : (1 - p) between processor 0 and processor 1, each computing its slice
// in its own format from the one shared input, written straight into its columns of the shared
// output (no merge copy, no channel computed twice); attention heads are parallel branches, each
// run whole by one processor; LayerNorm rows are split the same way. Processor 1's part is
// enqueued first, then processor 0's (a CPU cluster on the caller's thread runs it at once), then
// both are awaited: the two parts overlap, and the layer waits at each operator boundary only.
//
// The layer is BERT's (ops/encoder_layer.hpp), with LayerNorm, GELU and softmax in the plan's
// OpFormats; each processor reads the layer's weights in its own format (two LayerViews of the
// same layer: view 0 in processor 0's format, view 1 in processor 1's; biases and LayerNorm
// parameters are read from view 0).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <numeric>
#include <span>
#include <tuple>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/hetero/processor.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/precision.hpp"
#include "stile/plan/split_point.hpp"

namespace stile {

// How one layer is split. p: the share of each linear layer's output channels on processor 0
// (rounded to the processors' channel granule; 1: all on processor 0). heads: the processor of
// each attention head (empty: the first round(p[kQkv] x heads) heads on processor 0).
struct SplitPlan {
  std::array<double, kLinearOps> p{1.0, 1.0, 1.0, 1.0};
  std::vector<std::uint8_t> heads;
  double rows_p = 1.0;  // share of LayerNorm rows on processor 0
  OpFormats ops;
  // Q, K and V split by heads instead of p[kQkv]: each processor computes the Q, K and V columns of
  // its own heads and goes straight on to their attention, with no meeting point in between (one
  // fewer per layer). Taken when every head starts on both processors' channel granule.
  bool qkv_with_heads = false;

  static SplitPlan uniform(double share, const OpFormats& ops = {}) {
    SplitPlan s;
    s.p.fill(share);
    s.rows_p = share;
    s.ops = ops;
    return s;
  }
};

class SplitLayer {
 public:
  SplitLayer(Processor& p0, Processor& p1) : proc_{&p0, &p1} {
    granule_ = std::lcm(std::max<std::size_t>(1, p0.channel_granule()), std::max<std::size_t>(1, p1.channel_granule()));
  }

  std::size_t granule() const noexcept { return granule_; }

  // x: [tokens x d] packed rows of all sequences, updated in place; seq_offsets: n + 1 offsets.
  // v0, v1: the layer in processor 0's and processor 1's formats (same shapes). Throws the first
  // processor's error after both have finished; x is then undefined.
  void run(const LayerView<LinearView>& v0, const LayerView<LinearView>& v1, const SplitPlan& plan,
           const EncoderConfig& c, float* x, std::span<const std::size_t> seq_offsets, EncoderWorkspace& ws) {
    check(v0, v1, plan, c);
    const std::size_t tokens = seq_offsets.back();
    if (tokens == 0) return;
    const std::size_t d = c.hidden, da = v0.attn_width(), ff = v0.ffn_width();
    const OpFormats& f = plan.ops;
    ws.reserve(tokens, da, ff);
    const std::array<const LayerView<LinearView>*, 2> v{&v0, &v1};
    const auto q = [&](std::size_t i) { return v[i]->q; };
    const auto kv = [&](std::size_t i) { return v[i]->kv; };
    const auto attn_out = [&](std::size_t i) { return v[i]->attn_out; };
    const auto ffn_in = [&](std::size_t i) { return v[i]->ffn_in; };
    const auto ffn_out = [&](std::size_t i) { return v[i]->ffn_out; };

    LinearCall call;
    call.M = tokens;
    // Q and K/V side by side in one [tokens x 3d'] buffer, as attention reads them.
    call.op = "q";
    call.A = x;
    call.lda = d;
    call.C = ws.qkv.data();
    call.ldc = 3 * da;
    call.bias = v0.q_bias;
    LinearCall kv_call = call;
    kv_call.op = "kv";
    kv_call.C = ws.qkv.data() + da;
    kv_call.bias = v0.kv_bias;
    assign_heads(v0, plan);
    if (plan.qkv_with_heads && v0.head_dim % granule_ == 0) {
      // Each processor: the Q, K, V columns of its heads, then their attention (an in-order queue).
      for (const std::size_t i : {std::size_t{1}, std::size_t{0}}) {
        for (std::size_t at = 0; at < heads_[i].size();) {
          std::size_t end = at + 1;  // a run of consecutive heads: one slice
          while (end < heads_[i].size() && heads_[i][end] == heads_[i][end - 1] + 1) ++end;
          const std::size_t c0 = heads_[i][at] * v0.head_dim, c1 = (heads_[i][end - 1] + 1) * v0.head_dim;
          for (const auto& [base, w, offset] : {std::tuple{&call, &v[i]->q, std::size_t{0}},
                                                std::tuple{&kv_call, &v[i]->kv, std::size_t{0}},
                                                std::tuple{&kv_call, &v[i]->kv, da}}) {
            LinearCall slice = *base;
            slice.w = *w;
            slice.n0 = offset + c0;
            slice.n1 = offset + c1;
            proc_[i]->enqueue(slice);
          }
          at = end;
        }
        enqueue_attention(i, v0, plan, seq_offsets, ws);
      }
      wait_both();
    } else {
      split_linear(call, q, plan.p[0]);
      split_linear(kv_call, kv, plan.p[0]);
      wait_both();
      for (const std::size_t i : {std::size_t{1}, std::size_t{0}}) enqueue_attention(i, v0, plan, seq_offsets, ws);
      wait_both();
    }

    call = LinearCall{};
    call.op = "attn_out";
    call.M = tokens;
    call.A = ws.ctx.data();
    call.lda = da;
    call.C = x;
    call.ldc = d;
    call.epilogue = LinearEpilogue::kBiasResidual;
    call.bias = v0.attn_out_bias;
    call.residual = x;
    call.residual_ld = d;
    split_linear(call, attn_out, plan.p[1]);
    wait_both();
    split_rows(x, tokens, d, v0.ln1_gamma, v0.ln1_beta, c.layer_norm_eps, f.layer_norm, plan.rows_p);
    wait_both();

    call = LinearCall{};
    call.op = "ffn_in";
    call.M = tokens;
    call.A = x;
    call.lda = d;
    call.C = ws.ffn.data();
    call.ldc = ff;
    call.bias = v0.ffn_in_bias;
    const bool whole_tensor_gelu = f.gelu == GeluFormat::kInteger;
    call.epilogue = whole_tensor_gelu ? LinearEpilogue::kBias : LinearEpilogue::kBiasGelu;
    call.gelu = f.gelu;
    split_linear(call, ffn_in, plan.p[2]);
    wait_both();
    if (whole_tensor_gelu) {  // its scale is the whole tensor's: one call, on processor 0
      proc_[0]->enqueue(GeluCall{ws.ffn.data(), tokens * ff, f.gelu});
      wait_both();
    }

    call = LinearCall{};
    call.op = "ffn_out";
    call.M = tokens;
    call.A = ws.ffn.data();
    call.lda = ff;
    call.C = x;
    call.ldc = d;
    call.epilogue = LinearEpilogue::kBiasResidual;
    call.bias = v0.ffn_out_bias;
    call.residual = x;
    call.residual_ld = d;
    split_linear(call, ffn_out, plan.p[3]);
    wait_both();
    split_rows(x, tokens, d, v0.ln2_gamma, v0.ln2_beta, c.layer_norm_eps, f.layer_norm, plan.rows_p);
    wait_both();
  }

 private:
  void check(const LayerView<LinearView>& v0, const LayerView<LinearView>& v1, const SplitPlan& plan,
             const EncoderConfig& c) const {
    const std::array<const LayerView<LinearView>*, 2> v{&v0, &v1};
    for (std::size_t i = 0; i < 2; ++i) {
      for (const LinearView* w : {&v[i]->q, &v[i]->kv, &v[i]->attn_out, &v[i]->ffn_in, &v[i]->ffn_out}) {
        require(w->format == proc_[i]->format(),
                "split layer: view " + std::to_string(i) + " has " + to_string(w->format) + " weights, but processor '" +
                    proc_[i]->name() + "' runs " + to_string(proc_[i]->format()));
      }
    }
    require(v0.heads == v1.heads && v0.head_dim == v1.head_dim && v0.ffn_width() == v1.ffn_width() &&
                v0.q.cols() == c.hidden && v1.q.cols() == c.hidden,
            "split layer: the two views are not the same layer shape");
    require(plan.heads.empty() || plan.heads.size() == v0.heads,
            "split layer: the plan maps " + std::to_string(plan.heads.size()) + " heads, the layer has " +
                std::to_string(v0.heads));
    for (const std::uint8_t h : plan.heads) require(h < 2, "split layer: a head mapped to a processor other than 0, 1");
  }

  template <class Weights>
  void split_linear(const LinearCall& base, const Weights& weights, double p) {
    const std::size_t N = weights(0).rows();
    const std::size_t n = split_point(N, p, granule_);
    if (n < N) {
      LinearCall c1 = base;
      c1.w = weights(1);
      c1.n0 = n;
      c1.n1 = N;
      proc_[1]->enqueue(c1);
    }
    if (n > 0) {
      LinearCall c0 = base;
      c0.w = weights(0);
      c0.n0 = 0;
      c0.n1 = n;
      proc_[0]->enqueue(c0);
    }
  }

  void assign_heads(const LayerView<LinearView>& v, const SplitPlan& plan) {
    const std::size_t H = v.heads;
    for (auto& h : heads_) h.clear();
    if (plan.heads.empty()) {
      const std::size_t on0 = split_point(H, plan.p[0], 1);
      for (std::size_t h = 0; h < H; ++h) heads_[h < on0 ? 0 : 1].push_back(static_cast<std::uint16_t>(h));
    } else {
      for (std::size_t h = 0; h < H; ++h) heads_[plan.heads[h]].push_back(static_cast<std::uint16_t>(h));
    }
  }

  void enqueue_attention(std::size_t i, const LayerView<LinearView>& v, const SplitPlan& plan,
                         std::span<const std::size_t> seq_offsets, EncoderWorkspace& ws) {
    const std::size_t H = v.heads;
    {
      if (heads_[i].empty()) return;
      AttentionCall a;
      a.qkv = ws.qkv.data();
      a.ld_qkv = 3 * v.attn_width();
      a.seq_offsets = seq_offsets;
      a.heads = heads_[i];
      a.heads_total = H;
      a.head_dim = v.head_dim;
      a.ctx = ws.ctx.data();
      a.ld_ctx = v.attn_width();
      a.scale = v.attn_scale;
      a.softmax = plan.ops.softmax;
      proc_[i]->enqueue(a);
    }
  }

  void split_rows(float* x, std::size_t rows, std::size_t d, const float* gamma, const float* beta, float eps,
                  NormFormat format, double p) {
    const std::size_t r = split_point(rows, p, 1);
    LayerNormCall n{x, 0, 0, d, d, gamma, beta, eps, format};
    if (r < rows) {
      n.r0 = r;
      n.r1 = rows;
      proc_[1]->enqueue(n);
    }
    if (r > 0) {
      n.r0 = 0;
      n.r1 = r;
      proc_[0]->enqueue(n);
    }
  }

  // Waits for both processors (both, even when the first fails: their calls point into the
  // layer's buffers), then throws the first error.
  void wait_both() {
    std::exception_ptr first;
    for (Processor* p : proc_) {
      try {
        p->wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  std::array<Processor*, 2> proc_;
  std::size_t granule_ = 1;
  std::array<std::vector<std::uint16_t>, 2> heads_;
};

}  // namespace stile
