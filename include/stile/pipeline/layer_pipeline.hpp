#pragma once
// The layer pipeline: for layers 0..n-1, an IO job on the IO executor and a compute job on the
// compute executor. Compute of layer k starts when layer k's IO is done and compute of layer k-1
// has finished; IO of layer k starts when a working-buffer slot is free, i.e. once compute of
// layer k - slots is done. With two slots, IO of layer k+1 overlaps compute of layer k and at
// most two layers' shards are in memory; load-then-execute runs every IO job first, then every
// compute job (the baseline the pipeline is measured against).
//
// A job that throws stops the pipeline: the other lane stops at its next step, and the first
// error (IO's, if both failed) is rethrown to the caller after both lanes have ended.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/pipeline/executor.hpp"
#include "stile/pipeline/pipeline_mode.hpp"
#include "stile/pipeline/sync.hpp"
#include "stile/pipeline/task.hpp"
#include "stile/pipeline/timeline.hpp"

namespace stile {

struct LayerJobs {
  // Reads layer k's shards into working-buffer slot `slot` and checks them; returns when they are
  // in memory. Fills the counts of `times` and its read_end_ms (the pipeline sets io_start_ms and
  // io_end_ms). Called on the IO executor.
  std::function<void(std::size_t layer, std::size_t slot, LayerTimes& times)> load;
  // Runs layer k on the shards in slot `slot`. Called on the compute executor.
  std::function<void(std::size_t layer, std::size_t slot)> compute;
};

class LayerPipeline {
 public:
  using Clock = std::chrono::steady_clock;

  LayerPipeline(Executor& io, Executor& compute) : io_(io), compute_(compute) {}

  // Runs `layers` layers with `slots` working-buffer slots (load-then-execute needs one per layer).
  // times[k] gets layer k's IO and compute spans, in ms from `start`.
  void run(std::size_t layers, std::size_t slots, PipelineMode mode, const LayerJobs& jobs, Clock::time_point start,
           std::vector<LayerTimes>& times) {
    require(slots >= 1, "layer pipeline: at least one working-buffer slot is needed");
    require(mode == PipelineMode::pipelined || slots >= layers,
            "layer pipeline: load-then-execute needs a slot for every layer");
    times.resize(layers);
    if (layers == 0) return;
    Run run{jobs, start, times, std::vector<AsyncEvent>(layers), AsyncSemaphore(slots), slots, {}};
    Task<void> io = io_lane(run);
    Task<void> compute = compute_lane(run, mode);
    sync_wait_all(io, compute);
  }

 private:
  struct Run {
    const LayerJobs& jobs;
    Clock::time_point start;
    std::vector<LayerTimes>& times;
    std::vector<AsyncEvent> loaded;  // loaded[k]: layer k's IO has ended (done or failed)
    AsyncSemaphore free_slots;
    std::size_t slots;
    std::atomic<bool> failed{false};

    double ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }
  };

  Task<void> io_lane(Run& r) {
    for (std::size_t k = 0; k < r.loaded.size(); ++k) {
      co_await r.free_slots.acquire();
      if (r.failed.load()) co_return;
      co_await io_.schedule();
      r.times[k].io_start_ms = r.ms();
      try {
        r.jobs.load(k, k % r.slots, r.times[k]);
      } catch (...) {
        r.failed.store(true);
        r.loaded[k].set();
        throw;
      }
      r.times[k].io_end_ms = r.ms();
      r.loaded[k].set();
    }
  }

  Task<void> compute_lane(Run& r, PipelineMode mode) {
    co_await compute_.schedule();
    if (mode == PipelineMode::load_then_execute) {
      const double wait_from = r.ms();
      co_await r.loaded.back();
      co_await compute_.schedule();
      r.times[0].stall_ms = r.ms() - wait_from;  // the whole load is one stall before layer 0
    }
    for (std::size_t k = 0; k < r.loaded.size(); ++k) {
      const double ready = r.ms();
      co_await r.loaded[k];
      co_await compute_.schedule();
      if (r.failed.load()) co_return;  // IO failed: its error is the one reported
      LayerTimes& t = r.times[k];
      t.compute_start_ms = r.ms();
      if (mode == PipelineMode::pipelined) t.stall_ms = t.compute_start_ms - ready;
      try {
        r.jobs.compute(k, k % r.slots);
      } catch (...) {
        r.failed.store(true);
        r.free_slots.release(r.loaded.size());  // wake the IO lane so it sees the failure
        throw;
      }
      t.compute_end_ms = r.ms();
      r.free_slots.release();
    }
  }

  Executor& io_;
  Executor& compute_;
};

}  // namespace stile
