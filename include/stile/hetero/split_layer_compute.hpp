#pragma once
// The cooperative layer behind the engine's layer-compute interface (ops/layer_compute.hpp): the
// engine hands each layer's shard views (any m of M shards, each at its own bitwidth); this
// decodes the layer once into each processor's format (int8, fp16 or fp32 weights), keeps the
// converted layer for the next request, and runs it split between the two processors
// (hetero/split_layer.hpp) at a fixed p or at the p the split predictor picks for the request's
// shape (plan/split_predictor.hpp; with no profile given, the processors are profiled on the
// first layer it sees: a few hundred calls on each processor, longer on a slow device).
//
// The cache is keyed by the layer (its resident parameters' address, stable in an engine) and by
// each chosen shard's bitwidth and biases: shards of a trained model have distinct biases, so a
// shard version is known by them without hashing its megabytes. Kept: up to `cache_layers`
// converted layers, least recently used dropped first. Memory: each processor's copy of the layer.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stile/hetero/split_layer.hpp"
#include "stile/hetero/split_profiler.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/plan/split_predictor.hpp"

namespace stile {

class SplitLayerCompute final : public LayerCompute {
 public:
  // p: a fixed share of processor 0 (every layer, every request), or none for the predictor's
  // choice per request shape (`profile`, or profiled on the first layer).
  SplitLayerCompute(Processor& p0, Processor& p1, const OpFormats& ops, std::optional<double> p,
                    std::optional<SplitProfile> profile = std::nullopt, std::size_t cache_layers = 64)
      : proc_{&p0, &p1}, split_(p0, p1), ops_(ops), fixed_p_(p), profile_(std::move(profile)),
        cache_layers_(std::max<std::size_t>(1, cache_layers)) {}

  const std::optional<SplitProfile>& profile() const noexcept { return profile_; }
  // The p of the last layer run (for the CLI's summary).
  double last_p() const noexcept { return last_p_; }

  void run(const BertConfig& config, const ShardShape& shape, std::span<const ShardView> shards,
           const LayerResidentView& resident, float* x, std::span<const std::size_t> seq_offsets) override {
    const Converted& layer = converted(config, shape, shards, resident);
    SplitPlan plan = SplitPlan::uniform(1.0, ops_);
    if (fallen_back_) {
      // Processor 1 failed a request: everything on processor 0 from then on.
    } else if (fixed_p_) {
      plan = SplitPlan::uniform(*fixed_p_, ops_);
    } else {
      if (!profile_) {
        const std::array<Processor*, 2> procs{proc_[0], proc_[1]};
        const ProfiledLayer pl{{&layer.view[0], &layer.view[1]}, config.hidden};
        const std::array<std::size_t, 4> tokens{16, 32, 64, 128};
        profile_ = profile_split(procs, std::span<const ProfiledLayer>(&pl, 1), tokens, ops_,
                                 {{"profiled", "by SplitLayerCompute on the first layer"}});
      }
      SplitLayerShape s{{}, config.hidden, layer.view[0].heads, layer.view[0].ffn_width(), ops_.layer_norm};
      for (std::size_t i = 0; i + 1 < seq_offsets.size(); ++i) s.lengths.push_back(seq_offsets[i + 1] - seq_offsets[i]);
      const std::array<SplitSide, 2> sides{SplitSide{proc_[0]->name(), proc_[0]->format(), proc_[0]->channel_granule()},
                                           SplitSide{proc_[1]->name(), proc_[1]->format(), proc_[1]->channel_granule()}};
      const SplitChoice choice = choose_split(*profile_, sides, s, true);
      plan = SplitPlan::uniform(choice.p, ops_);
      plan.heads = choice.heads;
    }
    plan.qkv_with_heads = true;
    last_p_ = plan.p[0];
    try {
      split_.run(layer.view[0], layer.view[1], plan, config, x, seq_offsets, ws_);
    } catch (const Error& e) {
      // The request fails with processor 1's error (its name and the call); the engine's next
      // requests run on processor 0 alone.
      if (std::string_view(e.what()).starts_with("processor '" + proc_[1]->name() + "'")) fallen_back_ = true;
      throw;
    }
  }
  // True once processor 1 has failed: every layer since runs on processor 0 alone.
  bool fallen_back() const noexcept { return fallen_back_; }

 private:
  struct Converted {
    std::uint64_t key = 0;
    const float* layer = nullptr;
    std::array<std::array<LinearWeights, 5>, 2> w;
    std::vector<float> q_bias, kv_bias, ffn_in_bias, resident;  // resident: the six d-vectors
    std::array<LayerView<LinearView>, 2> view;
  };

  static std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }

  const Converted& converted(const BertConfig& c, const ShardShape& shape, std::span<const ShardView> shards,
                             const LayerResidentView& resident) {
    std::uint64_t key = 1469598103934665603ull;
    for (const ShardView& s : shards) {
      key = fnv(key, &s.bits, sizeof s.bits);
      for (const float* b : {s.query_bias, s.key_bias, s.value_bias}) key = fnv(key, b, shape.attn_rows * sizeof(float));
      key = fnv(key, s.ffn_in_bias, shape.ffn_rows * sizeof(float));
    }
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->key == key && it->layer == resident.attn_out_bias) {
        cache_.splice(cache_.begin(), cache_, it);  // most recent first
        return cache_.front();
      }
    }
    const ShardedLayer sharded(shape, shards, resident, ops_);
    const LayerView<StackedDict>& v = sharded.view();
    Converted out;
    out.key = key;
    out.layer = resident.attn_out_bias;
    const std::size_t d = c.hidden, da = v.attn_width(), ff = v.ffn_width();
    out.q_bias.assign(v.q_bias, v.q_bias + da);
    out.kv_bias.assign(v.kv_bias, v.kv_bias + 2 * da);
    out.ffn_in_bias.assign(v.ffn_in_bias, v.ffn_in_bias + ff);
    for (const float* r : {resident.attn_out_bias, resident.ln1_gamma, resident.ln1_beta, resident.ffn_out_bias,
                           resident.ln2_gamma, resident.ln2_beta}) {
      out.resident.insert(out.resident.end(), r, r + d);
    }
    const std::array<const StackedDict*, 5> mats{&v.q, &v.kv, &v.attn_out, &v.ffn_in, &v.ffn_out};
    static constexpr std::array<const char*, 5> kNames{"q", "kv", "attn_out", "ffn_in", "ffn_out"};
    std::vector<float> dense;
    for (std::size_t m = 0; m < 5; ++m) {
      const StackedDict& w = *mats[m];
      dense.resize(w.rows() * w.cols());
      dequantize(w, dense.data());
      // Two processors that take the same format share one copy (processor 1 reads view 0's
      // weights: an OpenCL device converts the CPU's int8 bytes on the device).
      const std::size_t copies = proc_[0]->format() == proc_[1]->format() ? 1 : 2;
      for (std::size_t i = 0; i < copies; ++i) {
        out.w[i][m] = LinearWeights::make(DenseF32(dense.data(), w.rows(), w.cols()), proc_[i]->format(),
                                          Int8Scheme::kSymmetricPerChannel, kNames[m]);
      }
    }
    const bool shared = proc_[0]->format() == proc_[1]->format();
    for (std::size_t i = 0; i < 2; ++i) {
      LayerView<LinearView>& lv = out.view[i];
      const auto& w = out.w[shared ? 0 : i];
      lv.q = w[0].view();
      lv.kv = w[1].view();
      lv.attn_out = w[2].view();
      lv.ffn_in = w[3].view();
      lv.ffn_out = w[4].view();
      lv.q_bias = out.q_bias.data();
      lv.kv_bias = out.kv_bias.data();
      lv.ffn_in_bias = out.ffn_in_bias.data();
      lv.attn_out_bias = out.resident.data();
      lv.ln1_gamma = out.resident.data() + d;
      lv.ln1_beta = out.resident.data() + 2 * d;
      lv.ffn_out_bias = out.resident.data() + 3 * d;
      lv.ln2_gamma = out.resident.data() + 4 * d;
      lv.ln2_beta = out.resident.data() + 5 * d;
      lv.heads = v.heads;
      lv.head_dim = v.head_dim;
      lv.attn_scale = v.attn_scale;
      lv.ops = ops_;
    }
    if (cache_.size() >= cache_layers_) cache_.pop_back();
    cache_.push_front(std::move(out));
    return cache_.front();
  }

  std::array<Processor*, 2> proc_;
  SplitLayer split_;
  OpFormats ops_;
  std::optional<double> fixed_p_;
  std::optional<SplitProfile> profile_;
  std::size_t cache_layers_;
  std::list<Converted> cache_;  // most recently used first
  EncoderWorkspace ws_;
  double last_p_ = 1.0;
  bool fallen_back_ = false;
};

}  // namespace stile
