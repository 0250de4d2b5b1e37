// Online re-profiling (EngineOptions::reprofile, plan/load_tracker.hpp): when the device computes
// slower than its profile says (here a layer compute that sleeps 8 ms a layer on top of the real
// one, as a CPU shared with a busy app would be), the engine's measured-to-profiled ratio rises and
// it re-plans smaller; without reprofile it keeps planning from the quiet profile. The sleeps
// bound the times from below, so the outcome does not depend on the machine's speed. The same
// sleep reported as a conversion (weights kept for later requests) does not count. And the
// tracker's median ignores a single late read.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <thread>

#include "stile/core/arena.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/engine.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/plan/load_tracker.hpp"
#include "support/converted_store.hpp"
#include "support/tiny_bert.hpp"

namespace fs = std::filesystem;

namespace {

const stile_test::ConvertedStore& store() {
  static const stile_test::ConvertedStore s(
      "reprofile.stile", [](const fs::path& dir) { stile_test::write_tiny_bert(dir, 3, 555); }, {4, 32});
  return s;
}

// The CPU layer, then a sleep: a device busier than when it was profiled.
class BusyCompute final : public stile::LayerCompute {
 public:
  void run(const stile::EncoderConfig& config, std::size_t layer, const stile::ShardShape& shape,
           std::span<const stile::ShardView> shards, const stile::LayerResidentView& resident, float* x,
           std::span<const std::size_t> seq_offsets) override {
    stile::CpuLayerCompute(pool_, {}, workspace_, arena_).run(config, layer, shape, shards, resident, x, seq_offsets);
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
  }

 private:
  stile::ThreadPool pool_{1};
  stile::EncoderWorkspace workspace_;
  stile::Arena arena_;
};

// The CPU layer after an 8 ms "conversion" reported through conversion_ms(): a layer compute
// that converts its weights on every request (a plan that keeps changing), as a mapped layer does
// on the first request of each version.
class ConvertingCompute final : public stile::LayerCompute {
 public:
  void run(const stile::EncoderConfig& config, std::size_t layer, const stile::ShardShape& shape,
           std::span<const stile::ShardView> shards, const stile::LayerResidentView& resident, float* x,
           std::span<const std::size_t> seq_offsets) override {
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(8));
    converted_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    stile::CpuLayerCompute(pool_, {}, workspace_, arena_).run(config, layer, shape, shards, resident, x, seq_offsets);
  }
  double conversion_ms() const override { return converted_ms_; }

 private:
  stile::ThreadPool pool_{1};
  stile::EncoderWorkspace workspace_;
  stile::Arena arena_;
  double converted_ms_ = 0;
};

// An engine on the tiny store with its profile, a 12 ms target, one thread, and `compute`.
std::unique_ptr<stile::Engine> engine_with(std::unique_ptr<stile::LayerCompute> compute, bool reprofile) {
  stile::EngineOptions o;
  o.threads = 1;
  o.target_ms = 12;
  o.reprofile = reprofile;
  auto engine = std::make_unique<stile::Engine>(store().store, o, stile_test::tiny_profile(store().store));
  engine->set_layer_compute(std::move(compute));
  return engine;
}

std::size_t shards_of(const stile::SubmodelPlan& p) {
  std::size_t n = 0;
  for (const auto& layer : p.layers) n += layer.size();
  return n;
}

}  // namespace

TEST_CASE("with reprofile, a device slower than its profile gets smaller plans", "[engine][reprofile]") {
  const stile::Encoding e = stile_test::tiny_tokens(10, 4);
  for (const bool reprofile : {false, true}) {
    INFO((reprofile ? "reprofile" : "fixed profile"));
    const std::unique_ptr<stile::Engine> engine = engine_with(std::make_unique<BusyCompute>(), reprofile);
    const stile::EngineResult first = engine->run(e);
    INFO("first plan: " << first.plan_note);
    CHECK(first.compute_scale == 1);
    stile::EngineResult last;
    for (int i = 0; i < 20; ++i) last = engine->run(e);
    INFO("last plan: " << last.plan_note << "; scale " << last.compute_scale);
    if (reprofile) {
      // At least 8 ms of compute a layer against the profile's 0.8 ms (4 shards at 4 bits).
      CHECK(last.compute_scale > 2);
      CHECK(shards_of(last.plan) < shards_of(first.plan));
      CHECK(last.estimated_ms <= 12);
    } else {
      CHECK(last.compute_scale == 1);
      CHECK(last.plan.layers == first.plan.layers);
    }
  }
}

TEST_CASE("with reprofile, weights converted for later requests are not taken for slow compute",
          "[engine][reprofile]") {
  // The same 8 ms a layer as BusyCompute above (which drives the compute scale past 2), but
  // reported as conversion: the engine records it per layer and the tracker leaves it out.
  const stile::Encoding e = stile_test::tiny_tokens(10, 4);
  const std::unique_ptr<stile::Engine> engine = engine_with(std::make_unique<ConvertingCompute>(), true);
  stile::EngineResult last;
  for (int i = 0; i < 20; ++i) last = engine->run(e);
  INFO("last plan: " << last.plan_note << "; scale " << last.compute_scale);
  REQUIRE_FALSE(last.timeline.layers.empty());
  for (const stile::LayerTimes& l : last.timeline.layers) CHECK(l.convert_ms >= 8);
  CHECK(last.compute_scale <= 1);
}

TEST_CASE("the load tracker's median ignores one late read and follows a lasting change", "[reprofile]") {
  const stile::DeviceProfile p = stile_test::tiny_profile(store().store);
  const stile::ReadCostLine line = stile::read_cost_line(p);
  const auto timeline = [&](double read_factor, double compute_ms) {
    stile::Timeline t;
    stile::LayerTimes l;
    l.reads = 2;
    l.bytes_read = 100000;
    l.io_start_ms = 0;
    l.read_end_ms = read_factor * (2 * line.latency_ms + 100000 * line.ms_per_byte);
    l.compute_start_ms = 10;
    l.compute_end_ms = 10 + compute_ms;
    t.layers.push_back(l);
    return t;
  };
  stile::LoadTracker tracker;
  for (int i = 0; i < 10; ++i) tracker.observe(p, timeline(1.0, 2.0), 2.0);
  CHECK(tracker.measured().io == Approx(1.0));
  CHECK(tracker.measured().compute == Approx(1.0));
  tracker.observe(p, timeline(50.0, 2.0), 2.0);  // one late read
  CHECK(tracker.measured().io == Approx(1.0));
  CHECK_FALSE(tracker.should_replan({1, 1}));
  for (int i = 0; i < 10; ++i) tracker.observe(p, timeline(1.5, 3.0), 2.0);  // a busier device
  CHECK(tracker.measured().io == Approx(1.5));
  CHECK(tracker.measured().compute == Approx(1.5));
  CHECK(tracker.should_replan({1, 1}));
  CHECK_FALSE(tracker.should_replan({1.5, 1.5}));
  // A spread device: compute 1.0 and 1.4 alternating (8 and 7 of the window). The median would
  // be 1.0; the 90% quantile the tracker keeps is 1.4, what the slow requests need.
  for (int i = 0; i < 15; ++i) tracker.observe(p, timeline(1.0, i % 2 == 0 ? 2.0 : 2.8), 2.0);
  CHECK(tracker.measured().compute == Approx(1.4));
  CHECK(tracker.measured().io == Approx(1.0));
  stile::DeviceProfile with_after_read = p;
  with_after_read.compute_after_read_ms = p.compute_ms;
  const stile::DeviceProfile scaled = stile::LoadTracker::scaled(with_after_read, {2, 3});
  CHECK(scaled.io_ms[0] == Approx(2 * p.io_ms[0]));
  CHECK(scaled.compute_ms[1][2][3] == Approx(3 * p.compute_ms[1][2][3]));
  CHECK(scaled.compute_after_read_ms[1][2][3] == Approx(3 * p.compute_ms[1][2][3]));
}
