#pragma once
// A small fork-join pool for kernels: run(n, f) calls f(task, worker) for task in [0, n) on all
// workers (the calling thread is worker 0) and returns when every task is done.
//
// Why not std::async or a task queue: BERT's GEMMs at short sequence lengths take tens of
// microseconds, so waking threads must cost less than that. Workers spin briefly on a generation
// counter after each job (back-to-back GEMMs of one layer find them awake), then sleep on
// std::atomic::wait (a futex on Linux) so an idle pool burns no CPU.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <string>
#include <type_traits>
#include <memory>
#include <thread>
#include <vector>

#include "stile/core/error.hpp"

namespace stile {

class ThreadPool {
 public:
  // num_threads counts the caller; 0 means one per core.
  explicit ThreadPool(std::size_t num_threads = 0) {
    if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
    num_workers_ = num_threads;
    for (std::size_t w = 1; w < num_threads; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
  }

  std::size_t num_threads() const noexcept { return num_workers_; }

  // Calls f(task, worker) for every task in [0, num_tasks); tasks are handed out dynamically.
  // Not reentrant: f must not call run() on the same pool. An exception thrown by f is rethrown
  // here after all workers have finished.
  template <class F>
  void run(std::size_t num_tasks, F&& f) {
    if (num_tasks == 0) return;
    if (num_workers_ == 1 || num_tasks == 1) {
      for (std::size_t t = 0; t < num_tasks; ++t) f(t, std::size_t{0});
      return;
    }
    using Fn = std::remove_reference_t<F>;
    job_ctx_ = const_cast<void*>(static_cast<const void*>(std::addressof(f)));
    job_fn_ = [](void* ctx, std::size_t task, std::size_t worker) {
      (*static_cast<Fn*>(ctx))(task, worker);
    };
    num_tasks_ = num_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    pending_workers_.store(num_workers_ - 1, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();

    work(0);

    // Wait for the other workers: spin first (they finish within microseconds of us), then sleep.
    for (int spin = 0;; ++spin) {
      const std::size_t left = pending_workers_.load(std::memory_order_acquire);
      if (left == 0) break;
      if (spin < kSpinIterations) {
        cpu_relax();
      } else {
        pending_workers_.wait(left, std::memory_order_acquire);
      }
    }
    if (failed_.load(std::memory_order_relaxed)) {
      std::exception_ptr e = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  static constexpr int kSpinIterations = 1 << 14;  // ~50 us of pause instructions

  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  void work(std::size_t worker) {
    for (;;) {
      const std::size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
      if (task >= num_tasks_) return;
      try {
        job_fn_(job_ctx_, task, worker);
      } catch (...) {
        if (!failed_.exchange(true)) error_ = std::current_exception();
      }
    }
  }

  void worker_loop(std::size_t worker) {
    std::size_t seen = 0;
    for (;;) {
      std::size_t gen;
      for (int spin = 0;; ++spin) {
        gen = generation_.load(std::memory_order_acquire);
        if (gen != seen) break;
        if (spin < kSpinIterations) {
          cpu_relax();
        } else {
          generation_.wait(seen, std::memory_order_acquire);
        }
      }
      seen = gen;
      if (stop_.load(std::memory_order_relaxed)) return;
      work(worker);
      if (pending_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_workers_.notify_one();
    }
  }

  std::size_t num_workers_ = 1;
  std::vector<std::thread> threads_;
  // The job, published by the release increment of generation_.
  void* job_ctx_ = nullptr;
  void (*job_fn_)(void*, std::size_t, std::size_t) = nullptr;
  std::size_t num_tasks_ = 0;
  alignas(64) std::atomic<std::size_t> generation_{0};
  alignas(64) std::atomic<std::size_t> next_task_{0};
  alignas(64) std::atomic<std::size_t> pending_workers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

// A pool of one thread (the caller). Its run() is a plain loop that touches no shared state, so
// one instance serves any number of threads at once: kernels called inside another pool's task
// pass it to stay on their own thread.
inline ThreadPool& single_thread_pool() {
  static ThreadPool pool(1);
  return pool;
}

// The pool kernels use when the caller passes none. Its size is read once, from the environment
// variable STILE_NUM_THREADS if set (a positive integer), else one thread per core.
inline ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("STILE_NUM_THREADS");
    if (env == nullptr || *env == '\0') return std::size_t{0};
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    require(*end == '\0' && n > 0 && n <= 1024,
            std::string("STILE_NUM_THREADS must be a positive integer, got '") + env + "'");
    return static_cast<std::size_t>(n);
  }());
  return pool;
}

}  // namespace stile
