#pragma once
// 2D-tiled weight-stationary mode (plan/layer_partition.hpp): a grid of R x C devices, rank i C + j.
// Device (i, j) holds, of every matrix, only the block of grid row i's heads (or neurons) and grid
// column j's hidden columns: W_q, W_k, W_v, W_1 rows of row i x columns cols[j]; W_o, W_2 rows
// cols[j] x columns of row i. Per layer:
//   QKV: partial sums over its hidden columns, all-reduced within grid row i (C devices); then
//        attention of row i's heads (repeated on the row's C devices: it has no weights);
//   O-proj: its [tokens x cols[j]] block of the output, summed over the grid rows by an
//        all-reduce over all devices of a [tokens x d] buffer zero outside its columns;
//   FFN1: like QKV (row all-reduce, then GELU); FFN2: like O-proj.
// Rank (0, j) adds the biases and the residual. A device holds 1/(R C) of the layer with even
// shares, which is what lets a layer fit devices that cannot each hold one whole head.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/dist/communicator.hpp"
#include "stile/dist/dense_layer.hpp"
#include "stile/dist/dist_layer.hpp"
#include "stile/kernels/activation.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/linear.hpp"

namespace stile {

class Tiled2dLayer final : public DistLayer {
 public:
  // Collective (splits the grid rows' communicators). @pre check_partition passed.
  Tiled2dLayer(const DenseLayer& full, const Partition& p, Communicator& world)
      : world_(world), d_(full.hidden), hd_(full.head_dim()), ff_(full.ffn), eps_(full.layer_norm_eps) {
    const auto r = static_cast<std::size_t>(world.rank());
    i_ = r / p.grid_cols(), j_ = r % p.grid_cols();
    row_ = world.split(static_cast<int>(i_));
    const std::size_t h0 = dist_detail::prefix(p.heads, i_), f0 = dist_detail::prefix(p.neurons, i_);
    c0_ = dist_detail::prefix(p.cols, j_);
    h_ = p.heads[i_], f_ = p.neurons[i_], k_ = p.cols[j_];
    qkv_ = dist_detail::pack_qkv_heads(full.wqkv.data(), d_, hd_, h0, h_, c0_, k_);
    if (j_ == 0) bqkv_ = dist_detail::qkv_bias_heads(full.bqkv, d_, hd_, h0, h_);
    wo_ = dist_detail::pack_block(full.wo.data(), d_, c0_, k_, h0 * hd_, h_ * hd_);
    w1_ = dist_detail::pack_block(full.w1.data(), d_, f0, f_, c0_, k_);
    if (j_ == 0) {
      b1_.assign(full.b1.begin() + static_cast<std::ptrdiff_t>(f0), full.b1.begin() + static_cast<std::ptrdiff_t>(f0 + f_));
    }
    w2_ = dist_detail::pack_block(full.w2.data(), ff_, c0_, k_, f0, f_);
    bo_ = full.bo, b2_ = full.b2;
    ln1g_ = full.ln1_gamma, ln1b_ = full.ln1_beta, ln2g_ = full.ln2_gamma, ln2b_ = full.ln2_beta;
  }

  DistMode mode() const override { return DistMode::k2d; }
  std::size_t weight_bytes() const override { return qkv_.bytes() + wo_.bytes() + w1_.bytes() + w2_.bytes(); }

  void run(float* x, std::span<const std::size_t> seq_offsets, ThreadPool& pool) override {
    const std::size_t tokens = seq_offsets.back(), da = h_ * hd_;
    if (h_ > 0) {
      qkv_buf_.resize(tokens * 3 * da);
      {
        DistPhase ph(trace_, "qkv partial (own columns)", false);
        row_partial(tokens, x, qkv_, bqkv_, qkv_buf_.data(), pool);
      }
      {
        DistPhase ph(trace_, "all-reduce qkv (grid row)", true);
        row_->all_reduce_sum(qkv_buf_.data(), tokens * 3 * da);
      }
      DistPhase ph(trace_, "attention (grid row's heads)", false);
      ctx_.resize(tokens * da);
      self_attention(qkv_buf_.data(), 3 * da, seq_offsets, h_, hd_, ctx_.data(), da, pool,
                     1.0f / std::sqrt(static_cast<float>(hd_)));
    }
    {
      DistPhase ph(trace_, "o-proj block", false);
      col_partial(tokens, ctx_.data(), da, wo_, bo_.data(), x, pool);
    }
    {
      DistPhase ph(trace_, "all-reduce attention", true);
      world_.all_reduce_sum(y_.data(), tokens * d_);
    }
    {
      DistPhase ph(trace_, "ln1", false);
      std::copy(y_.data(), y_.data() + tokens * d_, x);
      layer_norm_rows(x, tokens, d_, d_, ln1g_.data(), ln1b_.data(), eps_);
    }
    if (f_ > 0) {
      ffn_.resize(tokens * f_);
      {
        DistPhase ph(trace_, "ffn1 partial (own columns)", false);
        row_partial(tokens, x, w1_, b1_, ffn_.data(), pool);
      }
      {
        DistPhase ph(trace_, "all-reduce ffn1 (grid row)", true);
        row_->all_reduce_sum(ffn_.data(), tokens * f_);
      }
      DistPhase ph(trace_, "gelu", false);
      gelu_inplace(ffn_.data(), tokens * f_);
    }
    {
      DistPhase ph(trace_, "ffn2 block", false);
      col_partial(tokens, ffn_.data(), f_, w2_, b2_.data(), x, pool);
    }
    {
      DistPhase ph(trace_, "all-reduce mlp", true);
      world_.all_reduce_sum(y_.data(), tokens * d_);
    }
    DistPhase ph(trace_, "ln2", false);
    std::copy(y_.data(), y_.data() + tokens * d_, x);
    layer_norm_rows(x, tokens, d_, d_, ln2g_.data(), ln2b_.data(), eps_);
  }

 private:
  // out [tokens x w.rows] = x[:, own columns] W^T (+ bias on grid column 0).
  void row_partial(std::size_t tokens, const float* x, const dist_detail::Block& w, const std::vector<float>& bias,
                   float* out, ThreadPool& pool) const {
    if (w.empty()) {
      std::fill(out, out + tokens * w.rows, 0.0f);
      if (!bias.empty()) {
        for (std::size_t t = 0; t < tokens; ++t) std::copy(bias.begin(), bias.end(), out + t * w.rows);
      }
    } else if (!bias.empty()) {
      linear(tokens, x + c0_, d_, w.view(), out, w.rows, epilogue::Bias{.bias = bias.data()}, &pool);
    } else {
      linear(tokens, x + c0_, d_, w.view(), out, w.rows, epilogue::None{}, &pool);
    }
  }
  // y = 0 outside the own columns; y[:, own] = A W^T (+ bias + x[:, own] on grid row 0).
  void col_partial(std::size_t tokens, const float* a, std::size_t k, const dist_detail::Block& w, const float* bias,
                   const float* x, ThreadPool& pool) {
    y_.resize(tokens * d_);
    std::fill(y_.data(), y_.data() + tokens * d_, 0.0f);
    float* y = y_.data() + c0_;
    if (!w.empty()) {
      if (i_ == 0) {
        linear(tokens, a, k, w.view(), y, d_, epilogue::BiasResidual{bias + c0_, x + c0_, d_}, &pool);
      } else {
        linear(tokens, a, k, w.view(), y, d_, epilogue::None{}, &pool);
      }
    } else if (i_ == 0) {
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t c = 0; c < k_; ++c) y[t * d_ + c] = x[t * d_ + c0_ + c] + bias[c0_ + c];
      }
    }
  }

  Communicator& world_;
  std::unique_ptr<Communicator> row_;
  std::size_t d_, hd_, ff_;
  float eps_;
  std::size_t i_ = 0, j_ = 0, c0_ = 0, h_ = 0, f_ = 0, k_ = 0;
  dist_detail::Block qkv_, wo_, w1_, w2_;
  std::vector<float> bqkv_, bo_, b1_, b2_, ln1g_, ln1b_, ln2g_, ln2b_;
  AlignedBuffer<float> qkv_buf_, ctx_, ffn_, y_;
};

}  // namespace stile
