#pragma once
// The cooperative layer behind the engine's layer-compute interface (ops/layer_compute.hpp): the
// engine hands each layer's shard views (any m of M shards, each at its own bitwidth); this
// decodes the layer once into each processor's format (int8, fp16 or fp32 weights), keeps the
// converted layer for the next request (hetero/converted_shard_layers.hpp; two processors of one
// format share one copy), and runs it split between the two processors (hetero/split_layer.hpp)
// at a fixed p or at the p the split predictor picks for the request's shape
// (plan/split_predictor.hpp; with no profile given, the processors are profiled on the first
// layer it sees: a few hundred calls on each processor, longer on a slow device).
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "stile/hetero/converted_shard_layers.hpp"
#include "stile/hetero/split_layer.hpp"
#include "stile/hetero/split_profiler.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/plan/split_predictor.hpp"

namespace stile {

class SplitLayerCompute final : public LayerCompute {
 public:
  // p: a fixed share of processor 0 (every layer, every request), or none for the predictor's
  // choice per request shape (`profile`, or profiled on the first layer).
  SplitLayerCompute(Processor& p0, Processor& p1, const OpFormats& ops, std::optional<double> p,
                    std::optional<SplitProfile> profile = std::nullopt, std::size_t cache_layers = 64)
      : proc_{&p0, &p1},
        split_(p0, p1),
        ops_(ops),
        fixed_p_(p),
        profile_(std::move(profile)),
        layers_(2 * cache_layers) {}

  const std::optional<SplitProfile>& profile() const noexcept { return profile_; }
  // The p of the last layer run (for the CLI's summary).
  double last_p() const noexcept { return last_p_; }

  void run(const EncoderConfig& config, std::size_t /*layer*/, const ShardShape& shape, std::span<const ShardView> shards,
           const LayerResidentView& resident, float* x, std::span<const std::size_t> seq_offsets) override {
    LayerPrecision p0, p1;
    p0.linear.fill(proc_[0]->format());
    p1.linear.fill(proc_[1]->format());
    p0.ops = p1.ops = ops_;
    const std::uint64_t versions = ConvertedShardLayers::versions_key(shape, shards);
    const std::array<const LayerView<LinearView>*, 2> view{&layers_.get(config, shape, shards, resident, p0, versions),
                                                           &layers_.get(config, shape, shards, resident, p1, versions)};
    SplitPlan plan = SplitPlan::uniform(1.0, ops_);
    if (fallen_back_) {
      // Processor 1 failed a request: everything on processor 0 from then on.
    } else if (fixed_p_) {
      plan = SplitPlan::uniform(*fixed_p_, ops_);
    } else {
      if (!profile_) {
        const std::array<Processor*, 2> procs{proc_[0], proc_[1]};
        const ProfiledLayer pl{{view[0], view[1]}, config.hidden};
        const std::array<std::size_t, 4> tokens{16, 32, 64, 128};
        profile_ = profile_split(procs, std::span<const ProfiledLayer>(&pl, 1), tokens, ops_,
                                 {{"profiled", "by SplitLayerCompute on the first layer"}});
      }
      SplitLayerShape s{{}, config.hidden, view[0]->heads, view[0]->ffn_width(), ops_.layer_norm};
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
      split_.run(*view[0], *view[1], plan, config, x, seq_offsets, ws_);
    } catch (const Error& e) {
      // The request fails with processor 1's error (its name and the call); the engine's next
      // requests run on processor 0 alone.
      if (std::string_view(e.what()).starts_with("processor '" + proc_[1]->name() + "'")) fallen_back_ = true;
      throw;
    }
  }
  // True once processor 1 has failed: every layer since runs on processor 0 alone.
  bool fallen_back() const noexcept { return fallen_back_; }
  double conversion_ms() const override { return layers_.conversion_ms(); }

 private:
  std::array<Processor*, 2> proc_;
  SplitLayer split_;
  OpFormats ops_;
  std::optional<double> fixed_p_;
  std::optional<SplitProfile> profile_;
  ConvertedShardLayers layers_;
  EncoderWorkspace ws_;
  double last_p_ = 1.0;
  bool fallen_back_ = false;
};

}  // namespace stile
