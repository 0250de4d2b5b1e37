#pragma once
// A layer assembled from shard views (any m of M shards, each at its own bitwidth) converted once
// into the weights the processors' calls read (hetero/processor.hpp's LinearCall takes a
// LinearView: fp32 packed, fp16, or int8 per channel), one format per linear layer, and kept for
// the next requests.
//
// The cache is keyed by the layer (its resident parameters' address, stable in an engine), by each
// chosen shard's bitwidth and biases (shards of a trained model have distinct biases, so a shard
// version is known by them without hashing its megabytes), and by the layer's formats. It keeps
// up to `capacity` converted layers, least recently used dropped first; a reference it returns
// stays valid until `capacity` - 1 more conversions. Memory: each kept layer's converted weights.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <utility>
#include <vector>

#include "stile/core/fnv1a.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/precision.hpp"
#include "stile/ops/sharded_layer.hpp"

namespace stile {

class ConvertedShardLayers {
 public:
  explicit ConvertedShardLayers(std::size_t capacity) : capacity_(std::max<std::size_t>(2, capacity)) {}

  // What tells a layer's chosen shard versions apart: their bitwidths and biases, hashed.
  static std::uint64_t versions_key(const ShardShape& shape, std::span<const ShardView> shards) {
    std::uint64_t key = kFnv1aOffset;
    for (const ShardView& s : shards) {
      key = fnv1a(key, &s.bits, sizeof s.bits);
      for (const float* b : {s.query_bias, s.key_bias, s.value_bias}) {
        key = fnv1a(key, b, shape.attn_rows * sizeof(float));
      }
      key = fnv1a(key, s.ffn_in_bias, shape.ffn_rows * sizeof(float));
    }
    return key;
  }

  // The layer of `shards` (shape `shape`) and `resident`, its linear layers in p's formats (int8:
  // symmetric per channel) and p.ops in the view.
  const LayerView<LinearView>& get(const EncoderConfig& c, const ShardShape& shape, std::span<const ShardView> shards,
                                   const LayerResidentView& resident, const LayerPrecision& p) {
    return get(c, shape, shards, resident, p, versions_key(shape, shards));
  }
  // The same with the shards' versions_key given (one hash for the layer in several formats).
  const LayerView<LinearView>& get(const EncoderConfig& c, const ShardShape& shape, std::span<const ShardView> shards,
                                   const LayerResidentView& resident, const LayerPrecision& p, std::uint64_t versions) {
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->versions == versions && it->layer == resident.attn_out_bias && it->precision == p) {
        cache_.splice(cache_.begin(), cache_, it);  // most recent first
        return cache_.front().view;
      }
    }
    if (cache_.size() >= capacity_) cache_.pop_back();
    const auto start = std::chrono::steady_clock::now();
    cache_.push_front(convert(c, shape, shards, resident, p));
    conversion_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    cache_.front().versions = versions;
    return cache_.front().view;
  }

  // Milliseconds spent converting, in get(), since this was made.
  double conversion_ms() const noexcept { return conversion_ms_; }

  // Bytes held by the kept layers: their weights in their formats and their float vectors.
  std::size_t bytes() const noexcept {
    std::size_t total = 0;
    for (const Converted& c : cache_) {
      for (const LinearWeights& w : c.w) total += w.bytes();
      total += (c.q_bias.size() + c.kv_bias.size() + c.ffn_in_bias.size() + c.resident.size()) * sizeof(float);
    }
    return total;
  }

 private:
  struct Converted {
    std::uint64_t versions = 0;  // versions_key
    const float* layer = nullptr;
    LayerPrecision precision;
    std::array<LinearWeights, 5> w;                             // q, kv, attn_out, ffn_in, ffn_out
    std::vector<float> q_bias, kv_bias, ffn_in_bias, resident;  // resident: the six d-vectors
    LayerView<LinearView> view;
  };

  // W [rows x cols] row-major from its panel layout (kernels/gemm.hpp: data[(n / nr) * K * nr +
  // k * nr + n % nr]).
  static void unpack_rows(const PackedF32& w, float* out) {
    const std::size_t K = w.cols(), nr = w.nr;
    for (std::size_t n0 = 0; n0 < w.rows(); n0 += nr) {
      const float* panel = w.data + n0 * K;
      const std::size_t rows = std::min(nr, w.rows() - n0);
      // 8 k at a time: 32 bytes read per panel row and written per output row (row by row, every
      // read was a cache line of its own: 1.8x slower).
      for (std::size_t k0 = 0; k0 < K; k0 += 8) {
        const std::size_t k1 = std::min(K, k0 + 8);
        for (std::size_t j = 0; j < rows; ++j) {
          for (std::size_t k = k0; k < k1; ++k) out[(n0 + j) * K + k] = panel[k * nr + j];
        }
      }
    }
  }

  // One decoded matrix in `format`: fp32 as decoded, fp16 rounded where it lies, int8 quantized
  // from its rows (unpacked into `rows`, scratch kept across calls).
  static LinearWeights in_format(PackedWeights decoded, LinearFormat format, const char* name,
                                 std::vector<float>& rows) {
    switch (format) {
      case LinearFormat::kF32: return LinearWeights::from(std::move(decoded));
      case LinearFormat::kF16: return LinearWeights::from(pack_weights_f16(decoded.view, name));
      case LinearFormat::kInt8: break;
    }
    const std::size_t N = decoded.view.rows(), K = decoded.view.cols();
    rows.resize(N * K);
    unpack_rows(decoded.view, rows.data());
    return LinearWeights::from(quantize_int8(rows.data(), N, K, K, Int8Scheme::kSymmetricPerChannel, name));
  }

  static Converted convert(const EncoderConfig& c, const ShardShape& shape, std::span<const ShardView> shards,
                           const LayerResidentView& resident, const LayerPrecision& p) {
    const ShardedLayer sharded(shape, shards, resident, p.ops);
    const LayerView<StackedDict>& v = sharded.view();
    Converted out;
    out.layer = resident.attn_out_bias;
    out.precision = p;
    const std::size_t d = c.hidden, da = v.attn_width(), ff = v.ffn_width();
    out.q_bias.assign(v.q_bias, v.q_bias + da);
    out.kv_bias.assign(v.kv_bias, v.kv_bias + 2 * da);
    out.ffn_in_bias.assign(v.ffn_in_bias, v.ffn_in_bias + ff);
    for (const float* r : {resident.attn_out_bias, resident.ln1_gamma, resident.ln1_beta, resident.ffn_out_bias,
                           resident.ln2_gamma, resident.ln2_beta}) {
      out.resident.insert(out.resident.end(), r, r + d);
    }
    const std::array<const StackedDict*, 5> mats{&v.q, &v.kv, &v.attn_out, &v.ffn_in, &v.ffn_out};
    const std::array<LinearOp, 5> ops{LinearOp::kQkv, LinearOp::kQkv, LinearOp::kAttnOut, LinearOp::kFfnIn,
                                      LinearOp::kFfnOut};
    static constexpr std::array<const char*, 5> kNames{"q", "kv", "attn_out", "ffn_in", "ffn_out"};
    // Decoded by the GEMM's own SIMD panel decoders (every weight its centroid or outlier, as the
    // scalar dequantize gives it, at a fraction of the time: a conversion is on the request's
    // path whenever a plan picks shard versions not kept).
    std::vector<float> rows;
    for (std::size_t m = 0; m < 5; ++m) {
      out.w[m] = in_format(decode_to_packed(*mats[m]), p.format(ops[m]), kNames[m], rows);
    }
    const std::array<LinearView, 5> lin{out.w[0].view(), out.w[1].view(), out.w[2].view(), out.w[3].view(),
                                        out.w[4].view()};
    out.view = with_weights(v, lin[0], lin[1], lin[2], lin[3], lin[4]);
    out.view.q_bias = out.q_bias.data();
    out.view.kv_bias = out.kv_bias.data();
    out.view.ffn_in_bias = out.ffn_in_bias.data();
    out.view.attn_out_bias = out.resident.data();
    out.view.ln1_gamma = out.resident.data() + d;
    out.view.ln1_beta = out.resident.data() + 2 * d;
    out.view.ffn_out_bias = out.resident.data() + 3 * d;
    out.view.ln2_gamma = out.resident.data() + 4 * d;
    out.view.ln2_beta = out.resident.data() + 5 * d;
    return out;
  }

  std::size_t capacity_;
  double conversion_ms_ = 0;
  std::list<Converted> cache_;  // most recently used first
};

}  // namespace stile
