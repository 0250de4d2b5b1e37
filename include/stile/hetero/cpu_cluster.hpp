#pragma once
// A CPU cluster as a processor: a thread pool pinned to a list of cores (a big or a LITTLE
// cluster, or any core list), running stile's kernels in one linear format. Two ways to run:
//   * kOwnThread: a dispatcher thread (worker 0 of the pool) takes calls from an in-order queue,
//     so enqueue() returns at once and the caller can drive another processor meanwhile;
//   * kCallerThread: enqueue() runs the call on the calling thread (worker 0) and returns when it
//     is done. A thread that enqueues is pinned to the first core at its first call (and stays
//     so). The cooperative layer drives its first processor this way, so that the CPU part runs
//     on the caller while the other processor works, with no hand-off.
// Pinning (pthread_setaffinity_np) that fails, for a core that does not exist or a cgroup that
// forbids it, is said once on stderr and the cluster goes on unpinned.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/hetero/cpu_ops.hpp"
#include "stile/hetero/processor.hpp"
#include "stile/hetero/processor_trace.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/int8_gemm.hpp"

namespace stile {

// Pins the calling thread to one core. Returns an empty string, or why it could not.
inline std::string pin_this_thread(int core) {
#if defined(__linux__)
  if (core < 0 || core >= CPU_SETSIZE) return "core " + std::to_string(core) + " out of range";
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0) return "core " + std::to_string(core) + ": " + std::strerror(rc);
  return {};
#else
  return "core " + std::to_string(core) + ": pinning is not supported on this system";
#endif
}

// Parses "0,1,4-7" into core numbers; a bad list is a stile::Error quoting it.
inline std::vector<int> parse_core_list(const std::string& text) {
  std::vector<int> cores;
  std::size_t i = 0;
  const auto fail = [&] { throw Error("bad core list '" + text + "' (want, say, 0,1,4-7)"); };
  const auto number = [&] {
    if (i >= text.size() || text[i] < '0' || text[i] > '9') fail();
    int v = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      v = v * 10 + (text[i++] - '0');
      if (v > 4095) fail();
    }
    return v;
  };
  while (i < text.size()) {
    const int a = number();
    int b = a;
    if (i < text.size() && text[i] == '-') {
      ++i;
      b = number();
      if (b < a) fail();
    }
    for (int c = a; c <= b; ++c) cores.push_back(c);
    if (i < text.size()) {
      if (text[i] != ',') fail();
      ++i;
      if (i == text.size()) fail();
    }
  }
  if (cores.empty()) fail();
  return cores;
}

class CpuCluster final : public Processor {
 public:
  enum class Mode { kOwnThread, kCallerThread };

  // `cores`: one worker per core (empty: `threads` unpinned workers). `format`: the format of the
  // linear layers it is handed.
  CpuCluster(std::string name, std::vector<int> cores, LinearFormat format, Mode mode = Mode::kOwnThread,
             std::size_t threads = 1)
      : name_(std::move(name)),
        cores_(std::move(cores)),
        format_(format),
        mode_(mode),
        pool_(cores_.empty() ? std::max<std::size_t>(1, threads) : cores_.size()) {
    if (mode_ == Mode::kCallerThread) {
      pin_workers(false);
    } else {
      dispatcher_ = std::thread([this] {
        pin_workers(true);
        pinning_done_.store(true, std::memory_order_release);
        pinning_done_.notify_one();
        dispatch_loop();
      });
      pinning_done_.wait(false, std::memory_order_acquire);  // pinned() is known on return
    }
  }
  CpuCluster(const CpuCluster&) = delete;
  CpuCluster& operator=(const CpuCluster&) = delete;
  ~CpuCluster() override {
    if (dispatcher_.joinable()) {
      stop_.store(true, std::memory_order_relaxed);
      submitted_.fetch_add(1, std::memory_order_release);
      submitted_.notify_all();
      dispatcher_.join();
    }
  }

  const std::string& name() const override { return name_; }
  LinearFormat format() const override { return format_; }
  bool runs_any_format() const override { return true; }
  std::size_t channel_granule() const override {
    switch (format_) {
      case LinearFormat::kF32:
      case LinearFormat::kF16: return gemm_panel_width();
      case LinearFormat::kInt8: return int8_packing().nr;
    }
    return 1;
  }
  const std::vector<int>& cores() const noexcept { return cores_; }
  std::size_t threads() const noexcept { return pool_.num_threads(); }
  // False when a core list was given and some worker could not be pinned (said once on stderr).
  bool pinned() const noexcept { return !cores_.empty() && pin_failures_.load() == 0; }
  ThreadPool& pool() noexcept { return pool_; }

  void enqueue(const OpCall& call) override {
    if (mode_ == Mode::kCallerThread) {
      if (!cores_.empty() && caller_ != std::this_thread::get_id()) {
        caller_ = std::this_thread::get_id();
        report_pinning({pin_this_thread(cores_[0])});
      }
      run_or_skip(call);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.push_back(call);
    }
    ++enqueued_;
    submitted_.fetch_add(1, std::memory_order_release);
    submitted_.notify_one();
  }

  void enqueue_batch(std::span<const OpCall> calls) override {
    if (mode_ == Mode::kCallerThread) {
      for (const OpCall& c : calls) enqueue(c);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      queue_.insert(queue_.end(), calls.begin(), calls.end());
    }
    enqueued_ += static_cast<std::uint32_t>(calls.size());
    submitted_.fetch_add(1, std::memory_order_release);
    submitted_.notify_one();
  }
  bool waits_in_queue() const override { return mode_ == Mode::kOwnThread; }

  void wait() override {
    if (mode_ == Mode::kOwnThread) {
      // Only the caller enqueues, so every call it enqueued is counted in enqueued_.
      spin_then_wait(done_, [this](std::uint32_t done) { return done == enqueued_; });
    }
    if (failed_) {
      failed_ = false;
      std::exception_ptr e = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  // Each worker pins itself to its core: one task per worker, held at a barrier until all have
  // arrived, so that no worker runs two (the pool hands tasks out dynamically). Worker 0 (the
  // thread running this) is pinned only when it is the cluster's own dispatcher thread.
  void pin_workers(bool pin_worker0) {
    if (cores_.empty()) return;
    const std::size_t n = pool_.num_threads();
    std::atomic<std::size_t> arrived{0};
    std::vector<std::string> why(n);
    pool_.run(n, [&](std::size_t, std::size_t worker) {
      if (worker > 0 || pin_worker0) why[worker] = pin_this_thread(cores_[worker]);
      arrived.fetch_add(1);
      while (arrived.load() < n) std::this_thread::yield();
    });
    report_pinning(why);
  }

  void report_pinning(const std::vector<std::string>& why) {
    std::string failures;
    for (const std::string& w : why) {
      if (!w.empty()) failures += (failures.empty() ? "" : "; ") + w;
    }
    if (!failures.empty() && pin_failures_.exchange(1) == 0) {  // said once
      std::fprintf(stderr, "stile: cpu cluster '%s': could not pin (%s); running unpinned\n", name_.c_str(),
                   failures.c_str());
    }
  }

  // After a failure the queue's calls are skipped, but its signals still fire (marked failed), so
  // that no other processor waits forever on this one.
  void run_or_skip(const OpCall& call) {
    if (!failed_) return run_call(call);
    if (const auto* s = std::get_if<SignalCall>(&call)) signal_event(*s->event, s->request, true);
  }

  // Runs one call; its failure is kept for wait() with the processor's name and the call.
  void run_call(const OpCall& call) {
    const double start = trace_ != nullptr ? trace_->now_ms() : 0.0;
    try {
      run_on_cpu(call, pool_);
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(processor_error(name_, call, e.what()));
      failed_ = true;
    }
    if (trace_ != nullptr) trace_->record(name_, op_name(call), start, trace_->now_ms());
  }

  void dispatch_loop() {
    std::uint32_t seen = 0;
    std::vector<OpCall> batch;
    for (;;) {
      seen = spin_then_wait(submitted_, [seen](std::uint32_t now) { return now != seen; });
      if (stop_.load(std::memory_order_relaxed)) return;
      {
        std::lock_guard<std::mutex> lock(queue_mutex_);
        batch.swap(queue_);
      }
      for (const OpCall& call : batch) {
        run_or_skip(call);  // after a failure the rest of the queue is skipped, signals excepted
        done_.fetch_add(1, std::memory_order_release);
      }
      done_.notify_one();
      batch.clear();
    }
  }

  std::string name_;
  std::vector<int> cores_;
  LinearFormat format_;
  Mode mode_;
  ThreadPool pool_;
  std::atomic<int> pin_failures_{0};
  std::atomic<bool> pinning_done_{false};
  std::thread::id caller_;  // kCallerThread: the thread pinned to cores_[0]
  // The queue (kOwnThread). failed_ and error_ are written by the thread that runs calls and read
  // by wait() after done_ (acquire) says that thread is finished with them.
  std::mutex queue_mutex_;
  std::vector<OpCall> queue_;
  std::uint32_t enqueued_ = 0;  // caller only
  alignas(64) std::atomic<std::uint32_t> submitted_{0};
  alignas(64) std::atomic<std::uint32_t> done_{0};
  std::atomic<bool> stop_{false};
  bool failed_ = false;
  std::exception_ptr error_;
  std::thread dispatcher_;
};

}  // namespace stile
