#pragma once
// A layer of a shard store computed by several devices together, as a LayerCompute
// (ops/layer_compute.hpp): the engine, ShardedBert or the layer-wise evaluator of every rank runs
// the same requests over its own copy of the store, each with one of these set, and the layer's
// work is split between the ranks in whole shards (a shard is shape.heads heads and shape.ffn_rows
// FFN neurons: store/shard_layout.hpp), in proportion to fixed weights (uneven shares), whatever m
// of the layer's M shards the request's plan chose. WS and 1D as in dist/ws_layer.hpp and
// dist/tiled1d_layer.hpp, on the shards' own (dictionary-quantized) weights: each rank reads and
// decodes only what its share needs, except WS's row phase, which reads every chosen shard's
// W_o, W_1 and W_2 (WS holds the whole layer). Collective: every rank's run() must be called for
// the same layer of the same request.
#include <cstddef>
#include <span>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/dist/communicator.hpp"
#include "stile/dist/dist_layer.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/plan/layer_partition.hpp"

namespace stile {

class DistLayerCompute final : public LayerCompute {
 public:
  // weights: one per rank (its relative speed; 0 leaves it no shard). mode: WS or 1D. The pool runs
  // this rank's GEMMs; comm and pool outlive the compute.
  DistLayerCompute(Communicator& comm, DistMode mode, std::vector<double> weights, ThreadPool& pool)
      : comm_(comm), mode_(mode), weights_(std::move(weights)), pool_(pool) {
    require(mode != DistMode::k2d, "distributed layer compute: WS or 1D (2D splits below a shard)");
    require(weights_.size() == static_cast<std::size_t>(comm.size()), "distributed layer compute: one weight per rank");
  }

  void set_trace(DistTrace* trace) noexcept { trace_ = trace; }

  void run(const EncoderConfig& c, std::size_t /*layer*/, const ShardShape& shape, std::span<const ShardView> shards,
           const LayerResidentView& resident, float* x, std::span<const std::size_t> seq_offsets) override {
    require(!shards.empty(), "distributed layer compute: no shards chosen");
    const std::size_t n = weights_.size(), me = static_cast<std::size_t>(comm_.rank());
    split_ = proportional_split(shards.size(), weights_);
    const std::span<const ShardView> mine = shards.subspan(dist_detail::prefix(split_, me), split_[me]);
    if (mode_ == DistMode::kWs) {
      run_ws(c, shape, shards, mine, resident, x, seq_offsets, n, me);
    } else {
      run_1d(c, shape, mine, resident, x, seq_offsets);
    }
  }

 private:
  // ctx_ [tokens x da] = attention of the heads of `part` over x.
  void attention(const EncoderConfig& c, const LayerView<StackedDict>& v, const float* x,
                 std::span<const std::size_t> seq_offsets) {
    const std::size_t tokens = seq_offsets.back(), d = c.hidden, da = v.attn_width();
    qkv_.resize(tokens * 3 * da);
    ctx_.resize(tokens * da);
    linear(tokens, x, d, v.q, qkv_.data(), 3 * da, epilogue::Bias{.bias = v.q_bias}, &pool_);
    linear(tokens, x, d, v.kv, qkv_.data() + da, 3 * da, epilogue::Bias{.bias = v.kv_bias}, &pool_);
    self_attention(qkv_.data(), 3 * da, seq_offsets, v.heads, v.head_dim, ctx_.data(), da, pool_, v.attn_scale,
                   v.ops.softmax);
  }

  // ffn_ [rows x d_ff'] = GELU(x W_1^T + b_1) in the view's GELU format (as ops/encoder_layer.hpp).
  void ffn_in(const LayerView<StackedDict>& v, std::size_t rows, const float* x, std::size_t d) {
    const std::size_t ff = v.ffn_width();
    ffn_.resize(rows * ff);
    if (v.ops.gelu == GeluFormat::kExact) {
      linear(rows, x, d, v.ffn_in, ffn_.data(), ff, epilogue::BiasGelu{.bias = v.ffn_in_bias}, &pool_);
    } else {
      linear(rows, x, d, v.ffn_in, ffn_.data(), ff, epilogue::Bias{.bias = v.ffn_in_bias}, &pool_);
      gelu_inplace(v.ops.gelu, ffn_.data(), rows * ff);
    }
  }

  void run_ws(const EncoderConfig& c, const ShardShape& shape, std::span<const ShardView> shards,
              std::span<const ShardView> mine, const LayerResidentView& resident, float* x,
              std::span<const std::size_t> seq_offsets, std::size_t n, std::size_t me) {
    const std::size_t tokens = seq_offsets.back(), d = c.hidden, a = shape.attn_rows;
    {
      DistPhase ph(trace_, "qkv+attention (own shards)", false);
      if (!mine.empty()) {
        const ShardedLayer own(shape, mine, resident, ops_);
        attention(c, own.view(), x, seq_offsets);
      }
    }
    counts_.resize(n);
    for (std::size_t r = 0; r < n; ++r) counts_[r] = tokens * split_[r] * a;
    const std::size_t width = shards.size() * a;
    gathered_.resize(tokens * width);
    {
      DistPhase ph(trace_, "all-gather context", true);
      comm_.all_gather(ctx_.data(), counts_, gathered_.data());
    }
    full_ctx_.resize(tokens * width);
    for (std::size_t r = 0, at = 0, col = 0; r < n; ++r) {
      const std::size_t w = split_[r] * a;
      for (std::size_t t = 0; t < tokens; ++t) {
        std::copy(gathered_.data() + at + t * w, gathered_.data() + at + (t + 1) * w, full_ctx_.data() + t * width + col);
      }
      at += tokens * w, col += w;
    }
    const std::vector<std::size_t> rows = proportional_split(tokens, weights_);
    const std::size_t t0 = dist_detail::prefix(rows, me), m = rows[me];
    float* xr = x + t0 * d;
    {
      DistPhase ph(trace_, "rows: o-proj, ln, mlp", false);
      if (m > 0) {
        const ShardedLayer full(shape, shards, resident, ops_);
        const LayerView<StackedDict>& v = full.view();
        linear(m, full_ctx_.data() + t0 * width, width, v.attn_out, xr, d,
               epilogue::BiasResidual{v.attn_out_bias, xr, d}, &pool_);
        layer_norm_rows(v.ops.layer_norm, xr, m, d, d, v.ln1_gamma, v.ln1_beta, c.layer_norm_eps, &pool_);
        ffn_in(v, m, xr, d);
        linear(m, ffn_.data(), v.ffn_width(), v.ffn_out, xr, d, epilogue::BiasResidual{v.ffn_out_bias, xr, d}, &pool_);
        layer_norm_rows(v.ops.layer_norm, xr, m, d, d, v.ln2_gamma, v.ln2_beta, c.layer_norm_eps, &pool_);
      }
    }
    for (std::size_t r = 0; r < n; ++r) counts_[r] = rows[r] * d;
    DistPhase ph(trace_, "all-gather rows", true);
    comm_.all_gather(xr, counts_, x);
  }

  void run_1d(const EncoderConfig& c, const ShardShape& shape, std::span<const ShardView> mine,
              const LayerResidentView& resident, float* x, std::span<const std::size_t> seq_offsets) {
    const std::size_t tokens = seq_offsets.back(), d = c.hidden;
    const bool root = comm_.rank() == 0;
    // Rank 0 adds the biases and the residual; a rank without shards adds nothing.
    const auto add_bias = [&](const float* bias) {
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t i = 0; i < d; ++i) x[t * d + i] += bias[i];
      }
    };
    if (mine.empty()) {
      {
        DistPhase ph(trace_, "no shards", false);
        if (root) {
          add_bias(resident.attn_out_bias);
        } else {
          std::fill(x, x + tokens * d, 0.0f);
        }
      }
      comm_.all_reduce_sum(x, tokens * d);
      layer_norm_rows(ops_.layer_norm, x, tokens, d, d, resident.ln1_gamma, resident.ln1_beta, c.layer_norm_eps, &pool_);
      if (root) {
        add_bias(resident.ffn_out_bias);
      } else {
        std::fill(x, x + tokens * d, 0.0f);
      }
      comm_.all_reduce_sum(x, tokens * d);
      layer_norm_rows(ops_.layer_norm, x, tokens, d, d, resident.ln2_gamma, resident.ln2_beta, c.layer_norm_eps, &pool_);
      return;
    }
    const ShardedLayer own(shape, mine, resident, ops_);
    const LayerView<StackedDict>& v = own.view();
    {
      DistPhase ph(trace_, "qkv+attention+o-proj (own shards)", false);
      attention(c, v, x, seq_offsets);
      if (root) {
        linear(tokens, ctx_.data(), v.attn_width(), v.attn_out, x, d, epilogue::BiasResidual{v.attn_out_bias, x, d}, &pool_);
      } else {
        linear(tokens, ctx_.data(), v.attn_width(), v.attn_out, x, d, epilogue::None{}, &pool_);
      }
    }
    {
      DistPhase ph(trace_, "all-reduce attention", true);
      comm_.all_reduce_sum(x, tokens * d);
    }
    {
      DistPhase ph(trace_, "ln1, ffn (own shards)", false);
      layer_norm_rows(v.ops.layer_norm, x, tokens, d, d, v.ln1_gamma, v.ln1_beta, c.layer_norm_eps, &pool_);
      ffn_in(v, tokens, x, d);
      if (root) {
        linear(tokens, ffn_.data(), v.ffn_width(), v.ffn_out, x, d, epilogue::BiasResidual{v.ffn_out_bias, x, d}, &pool_);
      } else {
        linear(tokens, ffn_.data(), v.ffn_width(), v.ffn_out, x, d, epilogue::None{}, &pool_);
      }
    }
    {
      DistPhase ph(trace_, "all-reduce mlp", true);
      comm_.all_reduce_sum(x, tokens * d);
    }
    DistPhase ph(trace_, "ln2", false);
    layer_norm_rows(v.ops.layer_norm, x, tokens, d, d, v.ln2_gamma, v.ln2_beta, c.layer_norm_eps, &pool_);
  }

  Communicator& comm_;
  DistMode mode_;
  std::vector<double> weights_;
  ThreadPool& pool_;
  OpFormats ops_{};
  DistTrace* trace_ = nullptr;
  std::vector<std::size_t> split_, counts_;
  AlignedBuffer<float> qkv_, ctx_, gathered_, full_ctx_, ffn_;
};

}  // namespace stile
