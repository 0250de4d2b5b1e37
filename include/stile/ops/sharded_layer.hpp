#pragma once
// One BERT encoder layer computed from shards (store/shard_layout.hpp): any m of the layer's M
// shards, each a ShardView at its own bitwidth, plus the layer's resident block. The GEMMs run
// straight on the quantized bytes: the shards' Q, K and V slices are stacked along the output
// rows into one QKV weight, their W_o and W_2 column slices along the input columns, and the GEMM
// decodes each panel as it needs it (kernels/dict-inl.h), so no fp32 copy of a layer is made.
//
// With all M shards this is exactly the layer of ops/encoder_layer.hpp; with fewer, attention
// runs over the chosen heads only (W_o sums over their columns) and the FFN over the chosen
// neurons only, the residuals and LayerNorms as in the full layer.
//
// Linear format (`linear`): kF32 (the default) is the above, the fp32 GEMM dequantizing panel by
// panel; kInt8 decodes each stack once, when the layer is made, to int8 (kernels/dict_int8_stack.hpp:
// the scales of row and column stacks, outliers kept exact) and runs the int8 GEMM with u8
// activations quantized per row (ops/linear.hpp adds the outliers before the GELU).
#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "stile/core/arena.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/store/shard_view.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/precision.hpp"
#include "stile/ops/tiled_layer.hpp"

namespace stile {

// The fp32 parameters of a layer that every shard shares: they stay resident.
struct LayerResidentView {
  const float* attn_out_bias = nullptr;  // [d]
  const float* ln1_gamma = nullptr;
  const float* ln1_beta = nullptr;
  const float* ffn_out_bias = nullptr;  // [d]
  const float* ln2_gamma = nullptr;
  const float* ln2_beta = nullptr;
};

// The view of a layer's resident block held as six vectors (store/shard_store.hpp's LayerResident;
// a template so that this header does not depend on the store's).
template <class Resident>
LayerResidentView resident_view(const Resident& r) noexcept {
  return {r.attn_out_bias.data(), r.ln1_gamma.data(), r.ln1_beta.data(),
          r.ffn_out_bias.data(),  r.ln2_gamma.data(), r.ln2_beta.data()};
}

// The GEMM weights of a layer assembled from m shard views (which must outlive it), as the
// LayerView the layer operators (untiled and tiled) read.
class ShardedLayer {
 public:
  // The int8 weights of the five stacks: kept by a caller that makes a layer per request and passed
  // back as `reuse`, so that each decode writes into the buffers of the last one.
  struct Int8Buffers {
    DictInt8Weights q, kv, attn_out, ffn_in, ffn_out;
  };

  // `ops`: the formats of LayerNorm, GELU and softmax; `linear`: kF32 (the GEMMs dequantize the
  // shards' own codec) or kInt8 (decoded to int8 here, on `pool`, the default pool if null, into
  // the buffers of `reuse` if given, which get them back when this layer goes; `reuse` must
  // outlive it).
  ShardedLayer(const ShardShape& shape, std::span<const ShardView> shards, const LayerResidentView& resident,
               const OpFormats& ops = {}, LinearFormat linear = LinearFormat::kF32, ThreadPool* pool = nullptr,
               Int8Buffers* reuse = nullptr)
      : m_(shards.size()), reuse_(reuse) {
    require(m_ > 0, "sharded layer: no shards chosen");
    require(linear != LinearFormat::kF16, "sharded layer: the shards have no fp16 format (fp32 or int8)");
    for (const ShardMatrix part : {ShardMatrix::kQuery, ShardMatrix::kKey, ShardMatrix::kValue}) {
      for (const ShardView& s : shards) qkv_blocks_.push_back(s.matrix(part));
    }
    for (const ShardView& s : shards) {
      attn_out_blocks_.push_back(s.matrix(ShardMatrix::kAttnOut));
      ffn_in_blocks_.push_back(s.matrix(ShardMatrix::kFfnIn));
      ffn_out_blocks_.push_back(s.matrix(ShardMatrix::kFfnOut));
    }
    const std::size_t a = shape.attn_rows;
    qkv_bias_.reserve(3 * m_ * a);
    for (const ShardView& s : shards) qkv_bias_.insert(qkv_bias_.end(), s.query_bias, s.query_bias + a);
    for (const ShardView& s : shards) qkv_bias_.insert(qkv_bias_.end(), s.key_bias, s.key_bias + a);
    for (const ShardView& s : shards) qkv_bias_.insert(qkv_bias_.end(), s.value_bias, s.value_bias + a);
    for (const ShardView& s : shards) {
      ffn_in_bias_.insert(ffn_in_bias_.end(), s.ffn_in_bias, s.ffn_in_bias + shape.ffn_rows);
    }
    const std::span<const DictMatrix> qkv(qkv_blocks_);
    view_.q = stack_rows(qkv.first(m_));
    view_.kv = stack_rows(qkv.subspan(m_));
    view_.attn_out = stack_cols(attn_out_blocks_);
    view_.ffn_in = stack_rows(ffn_in_blocks_);
    view_.ffn_out = stack_cols(ffn_out_blocks_);
    view_.q_bias = qkv_bias_.data();
    view_.kv_bias = qkv_bias_.data() + m_ * a;
    view_.attn_out_bias = resident.attn_out_bias;
    view_.ln1_gamma = resident.ln1_gamma;
    view_.ln1_beta = resident.ln1_beta;
    view_.ffn_in_bias = ffn_in_bias_.data();
    view_.ffn_out_bias = resident.ffn_out_bias;
    view_.ln2_gamma = resident.ln2_gamma;
    view_.ln2_beta = resident.ln2_beta;
    view_.heads = m_ * shape.heads;
    view_.head_dim = shape.heads == 0 ? 0 : shape.attn_rows / shape.heads;
    // The shards store W_q as trained, so the 1/sqrt(head_dim) of attention goes into softmax.
    view_.attn_scale = 1.0f / std::sqrt(static_cast<float>(view_.head_dim));
    view_.ops = ops;
    if (linear == LinearFormat::kInt8) make_int8(pool != nullptr ? *pool : default_thread_pool());
  }
  ShardedLayer(const ShardedLayer&) = delete;  // the stacks point into the block vectors
  ShardedLayer& operator=(const ShardedLayer&) = delete;
  ~ShardedLayer() {
    if (int8_ != nullptr && reuse_ != nullptr) *reuse_ = std::move(int8_->weights);
  }

  std::size_t shards() const noexcept { return m_; }
  std::size_t heads() const noexcept { return view_.heads; }
  const LayerView<StackedDict>& view() const noexcept { return view_; }
  LinearFormat linear_format() const noexcept { return int8_ ? LinearFormat::kInt8 : LinearFormat::kF32; }

  // x: [tokens x d] packed rows of all sequences, updated in place; seq_offsets: n + 1 offsets.
  // Tiled (ops/tiled_layer.hpp) when tiles are given, with its working memory from `arena`.
  void run(const EncoderConfig& c, float* x, std::span<const std::size_t> seq_offsets, const LayerTiles& tiles,
           Arena& arena, ThreadPool& pool) const {
    if (int8_) return tiled_encoder_layer(int8_->view, c, x, seq_offsets, tiles, arena, pool);
    tiled_encoder_layer(view_, c, x, seq_offsets, tiles, arena, pool);
  }
  void run(const EncoderConfig& c, float* x, std::span<const std::size_t> seq_offsets, EncoderWorkspace& ws,
           ThreadPool& pool) const {
    if (int8_) return encoder_layer(int8_->view, c, x, seq_offsets, ws, pool);
    encoder_layer(view_, c, x, seq_offsets, ws, pool);
  }

 private:
  // The five stacks decoded to int8, and the same layer over them.
  struct Int8Layer {
    Int8Buffers weights;
    LayerView<DictInt8View> view;
  };

  // The five stacks in one pool job, a stack per task (decoded serially inside it): the pool's
  // workers stay busy from the first stack to the last. Five jobs, one per stack, each with its
  // serial parts (scales, zeroing, placement) between them, let a worker outlast its spin and
  // sleep, and waking it cost the layer about 0.7 ms on a KVM guest (docs/design-notes.md).
  void make_int8(ThreadPool& pool) {
    int8_ = std::make_unique<Int8Layer>();
    Int8Buffers& w = int8_->weights;
    const std::array<const StackedDict*, 5> stacks{&view_.q, &view_.kv, &view_.attn_out, &view_.ffn_in, &view_.ffn_out};
    const std::array<DictInt8Weights*, 5> out{&w.q, &w.kv, &w.attn_out, &w.ffn_in, &w.ffn_out};
    std::array<DictInt8Weights*, 5> reuse{};
    if (reuse_ != nullptr) reuse = {&reuse_->q, &reuse_->kv, &reuse_->attn_out, &reuse_->ffn_in, &reuse_->ffn_out};
    pool.run(stacks.size(),
             [&](std::size_t i, std::size_t) { *out[i] = decode_to_int8(*stacks[i], nullptr, reuse[i]); });
    int8_->view = with_weights<DictInt8View>(view_, {&w.q}, {&w.kv}, {&w.attn_out}, {&w.ffn_in}, {&w.ffn_out});
  }

  std::size_t m_;
  std::vector<DictMatrix> qkv_blocks_, attn_out_blocks_, ffn_in_blocks_, ffn_out_blocks_;
  std::vector<float> qkv_bias_, ffn_in_bias_;
  LayerView<StackedDict> view_;
  std::unique_ptr<Int8Layer> int8_;  // set in the int8 linear format
  Int8Buffers* reuse_ = nullptr;
};

}  // namespace stile
