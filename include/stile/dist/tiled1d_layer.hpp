#pragma once
// 1D-tiled weight-stationary mode (Megatron-style; plan/layer_partition.hpp): device r holds only its
// heads' rows of W_q, W_k, W_v (column-parallel), the same columns of W_o (row-parallel), its
// neurons' rows of W_1 (column-parallel) and the same columns of W_2 (row-parallel).
//   attention: QKV and attention of its heads, its partial output projection, all-reduce;
//   MLP: FFN1 + GELU of its neurons, its partial FFN2, all-reduce.
// Rank 0 adds the biases and the residual into its partial sum, so the all-reduce's result is
// the layer's pre-LayerNorm value on every rank; the LayerNorms run on every rank (replicated).
// Two all-reduces of [tokens x d] per layer.
#include <algorithm>
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

class Tiled1dLayer final : public DistLayer {
 public:
  // Takes this rank's part of `full` (a deployment would read only that part from its store).
  // @pre check_partition passed for comm.size() ranks.
  Tiled1dLayer(const DenseLayer& full, const Partition& p, Communicator& comm)
      : comm_(comm), d_(full.hidden), hd_(full.head_dim()), ff_(full.ffn), eps_(full.layer_norm_eps) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const std::size_t h0 = dist_detail::prefix(p.heads, r), f0 = dist_detail::prefix(p.neurons, r);
    h_ = p.heads[r], f_ = p.neurons[r];
    qkv_ = dist_detail::pack_qkv_heads(full.wqkv.data(), d_, hd_, h0, h_, 0, d_);
    bqkv_ = dist_detail::qkv_bias_heads(full.bqkv, d_, hd_, h0, h_);
    wo_ = dist_detail::pack_block(full.wo.data(), d_, 0, d_, h0 * hd_, h_ * hd_);
    w1_ = dist_detail::pack_block(full.w1.data(), d_, f0, f_, 0, d_);
    b1_.assign(full.b1.begin() + static_cast<std::ptrdiff_t>(f0), full.b1.begin() + static_cast<std::ptrdiff_t>(f0 + f_));
    w2_ = dist_detail::pack_block(full.w2.data(), ff_, 0, d_, f0, f_);
    bo_ = full.bo, b2_ = full.b2;
    ln1g_ = full.ln1_gamma, ln1b_ = full.ln1_beta, ln2g_ = full.ln2_gamma, ln2b_ = full.ln2_beta;
  }

  DistMode mode() const override { return DistMode::k1d; }
  std::size_t weight_bytes() const override { return qkv_.bytes() + wo_.bytes() + w1_.bytes() + w2_.bytes(); }

  void run(float* x, std::span<const std::size_t> seq_offsets, ThreadPool& pool) override {
    const std::size_t tokens = seq_offsets.back(), da = h_ * hd_;
    const bool root = comm_.rank() == 0;
    {
      DistPhase ph(trace_, "qkv+attention+o-proj (own heads)", false);
      if (h_ > 0) {
        qkv_buf_.resize(tokens * 3 * da);
        ctx_.resize(tokens * da);
        linear(tokens, x, d_, qkv_.view(), qkv_buf_.data(), 3 * da, epilogue::Bias{.bias = bqkv_.data()}, &pool);
        self_attention(qkv_buf_.data(), 3 * da, seq_offsets, h_, hd_, ctx_.data(), da, pool,
                       1.0f / std::sqrt(static_cast<float>(hd_)));
      }
      partial(tokens, ctx_.data(), da, wo_, bo_.data(), x, root, pool);
    }
    {
      DistPhase ph(trace_, "all-reduce attention", true);
      comm_.all_reduce_sum(x, tokens * d_);
    }
    {
      DistPhase ph(trace_, "ln1, ffn1 (own neurons), ffn2 partial", false);
      layer_norm_rows(x, tokens, d_, d_, ln1g_.data(), ln1b_.data(), eps_);
      if (f_ > 0) {
        ffn_.resize(tokens * f_);
        linear(tokens, x, d_, w1_.view(), ffn_.data(), f_, epilogue::BiasGelu{.bias = b1_.data()}, &pool);
      }
      partial(tokens, ffn_.data(), f_, w2_, b2_.data(), x, root, pool);
    }
    {
      DistPhase ph(trace_, "all-reduce mlp", true);
      comm_.all_reduce_sum(x, tokens * d_);
    }
    DistPhase ph(trace_, "ln2", false);
    layer_norm_rows(x, tokens, d_, d_, ln2g_.data(), ln2b_.data(), eps_);
  }

 private:
  // x = A W^T (+ bias + x on the root): this rank's term of the all-reduce, in place of x.
  void partial(std::size_t tokens, const float* a, std::size_t k, const dist_detail::Block& w, const float* bias,
               float* x, bool root, ThreadPool& pool) const {
    if (!w.empty()) {
      if (root) {
        linear(tokens, a, k, w.view(), x, d_, epilogue::BiasResidual{bias, x, d_}, &pool);
      } else {
        linear(tokens, a, k, w.view(), x, d_, epilogue::None{}, &pool);
      }
    } else if (root) {
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t c = 0; c < d_; ++c) x[t * d_ + c] += bias[c];
      }
    } else {
      std::fill(x, x + tokens * d_, 0.0f);
    }
  }

  Communicator& comm_;
  std::size_t d_, hd_, ff_;
  float eps_;
  std::size_t h_ = 0, f_ = 0;
  dist_detail::Block qkv_, wo_, w1_, w2_;
  std::vector<float> bqkv_, bo_, b1_, b2_, ln1g_, ln1b_, ln2g_, ln2b_;
  AlignedBuffer<float> qkv_buf_, ctx_, ffn_;
};

}  // namespace stile
