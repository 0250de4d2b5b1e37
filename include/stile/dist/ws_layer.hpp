#pragma once
// WS, Hepti's weight-stationary mode (plan/layer_partition.hpp): every device holds the whole layer.
//   1. Q, K, V and attention for this device's heads, over all tokens (column-wise split);
//   2. an all-gather of the per-head context (uneven counts: heads[r] x head_dim columns each);
//   3. this device's token rows, in proportion to neurons[r]: output projection + residual, LN1,
//      FFN1 + GELU, FFN2 + residual, LN2, all with the full weights and no communication;
//   4. an all-gather of the rows (uneven counts) at the layer's end.
// Two collectives per layer, each moving [tokens x d] floats in all.
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/dist/communicator.hpp"
#include "stile/dist/dense_layer.hpp"
#include "stile/dist/dist_layer.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/linear.hpp"

namespace stile {

class WsLayer final : public DistLayer {
 public:
  // Takes this rank's part of `full` (here: all of it, and the Q/K/V rows of its heads packed on
  // their own). @pre check_partition passed for comm.size() ranks.
  WsLayer(const DenseLayer& full, const Partition& p, Communicator& comm)
      : comm_(comm), p_(p), d_(full.hidden), hd_(full.head_dim()), ff_(full.ffn), eps_(full.layer_norm_eps) {
    const auto r = static_cast<std::size_t>(comm.rank());
    h0_ = dist_detail::prefix(p.heads, r);
    h_ = p.heads[r];
    qkv_ = dist_detail::pack_qkv_heads(full.wqkv.data(), d_, hd_, h0_, h_, 0, d_);
    bqkv_ = dist_detail::qkv_bias_heads(full.bqkv, d_, hd_, h0_, h_);
    wo_ = dist_detail::pack_block(full.wo.data(), d_, 0, d_, 0, d_);
    w1_ = dist_detail::pack_block(full.w1.data(), d_, 0, ff_, 0, d_);
    w2_ = dist_detail::pack_block(full.w2.data(), ff_, 0, d_, 0, ff_);
    bo_ = full.bo, b1_ = full.b1, b2_ = full.b2;
    ln1g_ = full.ln1_gamma, ln1b_ = full.ln1_beta, ln2g_ = full.ln2_gamma, ln2b_ = full.ln2_beta;
  }

  DistMode mode() const override { return DistMode::kWs; }
  std::size_t weight_bytes() const override {
    // The full Q/K/V is held too (a device of this mode can take any heads); its own heads' rows
    // are a packed copy of part of it.
    return 3 * d_ * d_ * sizeof(float) + wo_.bytes() + w1_.bytes() + w2_.bytes();
  }

  void run(float* x, std::span<const std::size_t> seq_offsets, ThreadPool& pool) override {
    const std::size_t tokens = seq_offsets.back(), n = p_.heads.size(), da = h_ * hd_;
    const auto me = static_cast<std::size_t>(comm_.rank());
    {
      DistPhase ph(trace_, "qkv+attention (own heads)", false);
      qkv_buf_.resize(tokens * 3 * da);
      ctx_own_.resize(tokens * da);
      if (h_ > 0) {
        linear(tokens, x, d_, qkv_.view(), qkv_buf_.data(), 3 * da, epilogue::Bias{.bias = bqkv_.data()}, &pool);
        self_attention(qkv_buf_.data(), 3 * da, seq_offsets, h_, hd_, ctx_own_.data(), da, pool,
                       1.0f / std::sqrt(static_cast<float>(hd_)));
      }
    }
    counts_.resize(n);
    for (std::size_t r = 0; r < n; ++r) counts_[r] = tokens * p_.heads[r] * hd_;
    gathered_.resize(tokens * d_);
    {
      DistPhase ph(trace_, "all-gather context", true);
      comm_.all_gather(ctx_own_.data(), counts_, gathered_.data());
    }
    // Rank r's block is [tokens x heads[r] hd]: put it at its heads' columns of ctx [tokens x d].
    ctx_.resize(tokens * d_);
    for (std::size_t r = 0, at = 0, col = 0; r < n; ++r) {
      const std::size_t w = p_.heads[r] * hd_;
      for (std::size_t t = 0; t < tokens; ++t) {
        std::copy(gathered_.data() + at + t * w, gathered_.data() + at + (t + 1) * w, ctx_.data() + t * d_ + col);
      }
      at += tokens * w, col += w;
    }
    const std::vector<double> row_weights(p_.neurons.begin(), p_.neurons.end());
    const std::vector<std::size_t> rows = proportional_split(tokens, row_weights);
    const std::size_t t0 = dist_detail::prefix(rows, me), m = rows[me];
    float* xr = x + t0 * d_;
    {
      DistPhase ph(trace_, "rows: o-proj, ln, mlp", false);
      if (m > 0) {
        linear(m, ctx_.data() + t0 * d_, d_, wo_.view(), xr, d_, epilogue::BiasResidual{bo_.data(), xr, d_}, &pool);
        layer_norm_rows(xr, m, d_, d_, ln1g_.data(), ln1b_.data(), eps_);
        ffn_.resize(m * ff_);
        linear(m, xr, d_, w1_.view(), ffn_.data(), ff_, epilogue::BiasGelu{.bias = b1_.data()}, &pool);
        linear(m, ffn_.data(), ff_, w2_.view(), xr, d_, epilogue::BiasResidual{b2_.data(), xr, d_}, &pool);
        layer_norm_rows(xr, m, d_, d_, ln2g_.data(), ln2b_.data(), eps_);
      }
    }
    for (std::size_t r = 0; r < n; ++r) counts_[r] = rows[r] * d_;
    DistPhase ph(trace_, "all-gather rows", true);
    comm_.all_gather(xr, counts_, x);
  }

 private:
  Communicator& comm_;
  Partition p_;
  std::size_t d_, hd_, ff_;
  float eps_;
  std::size_t h0_ = 0, h_ = 0;
  dist_detail::Block qkv_, wo_, w1_, w2_;
  std::vector<float> bqkv_, bo_, b1_, b2_, ln1g_, ln1b_, ln2g_, ln2b_;
  AlignedBuffer<float> qkv_buf_, ctx_own_, gathered_, ctx_, ffn_;
  std::vector<std::size_t> counts_;
};

}  // namespace stile
