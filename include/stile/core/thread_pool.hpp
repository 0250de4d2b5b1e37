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
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <type_traits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "stile/core/error.hpp"

// ThreadSanitizer and code it does not instrument: the sanitizer stage of scripts/test compiles
// the SIMD kernels without -fsanitize=thread (tests/CMakeLists.txt), and their GEMMs run jobs on
// this pool, so the sanitizer misses the acquires and releases of those jobs and takes the next
// job's writes for races. With STILE_TSAN_ANNOTATIONS (defined for every translation unit of that
// build that links the kernels) the pool also hands each edge to the sanitizer's runtime.
#if defined(STILE_TSAN_ANNOTATIONS)
#include <sanitizer/tsan_interface.h>  // __tsan_acquire, __tsan_release (GCC and clang ship it)
#endif

namespace stile {

namespace detail {
inline void tsan_acquire([[maybe_unused]] const void* p) noexcept {
#if defined(STILE_TSAN_ANNOTATIONS)
  __tsan_acquire(const_cast<void*>(p));
#endif
}
inline void tsan_release([[maybe_unused]] const void* p) noexcept {
#if defined(STILE_TSAN_ANNOTATIONS)
  __tsan_release(const_cast<void*>(p));
#endif
}
}  // namespace detail

// Tells the scheduler that the calling thread is CPU-bound (Linux: SCHED_BATCH, which needs no
// privilege): it then never preempts a running thread when it wakes. The pipeline's compute
// threads use it so that they take every core without delaying the IO thread, which needs a core
// only for the moment it takes to issue the next read (on a 2-core board, waking compute workers
// otherwise preempt it for a whole time slice, milliseconds, while the storage sits idle).
inline void mark_thread_cpu_bound() noexcept {
#if defined(__linux__)
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);  // best effort
#endif
}

// Spins briefly on `word` (~50 us of pause instructions: back-to-back GEMMs of one layer find a
// waiting thread still awake), then sleeps on std::atomic::wait (a futex on Linux), until
// done(value) holds; returns that value. The pool's workers and callers, and hetero/'s CPU
// clusters, wait through it.
template <class Done>
std::uint32_t spin_then_wait(const std::atomic<std::uint32_t>& word, Done done) noexcept {
  constexpr int kSpinIterations = 1 << 14;
  for (int spin = 0;; ++spin) {
    const std::uint32_t value = word.load(std::memory_order_acquire);
    if (done(value)) return value;
    if (spin < kSpinIterations) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
    } else {
      word.wait(value, std::memory_order_acquire);
    }
  }
}

class ThreadPool {
 public:
  // num_threads counts the caller; 0 means one per core. cpu_bound_workers: the workers call
  // mark_thread_cpu_bound() (the caller's thread is left as it is).
  explicit ThreadPool(std::size_t num_threads = 0, bool cpu_bound_workers = false) {
    if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
    num_workers_ = num_threads;
    for (std::size_t w = 1; w < num_threads; ++w) {
      threads_.emplace_back([this, w, cpu_bound_workers] {
        if (cpu_bound_workers) mark_thread_cpu_bound();
        worker_loop(w);
      });
    }
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    stop_.store(true, std::memory_order_relaxed);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  std::size_t num_threads() const noexcept { return num_workers_; }

  // Calls f(task, worker) for every task in [0, num_tasks); tasks are handed out dynamically.
  // Returns when every task has run: a worker that is descheduled (another program holds its
  // core) costs nothing, because the caller runs the tasks it does not claim and waits only for
  // tasks in flight. Callers on several threads take turns (a model shared by request threads
  // shares the default pool); a task that calls run() on its own pool runs those tasks itself,
  // in order. An exception thrown by f is rethrown here after all tasks have finished.
  template <class F>
  void run(std::size_t num_tasks, F&& f) {
    if (num_tasks == 0) return;
    if (num_workers_ == 1 || num_tasks == 1 || running_pool() == this) {
      for (std::size_t t = 0; t < num_tasks; ++t) f(t, std::size_t{0});
      return;
    }
    std::lock_guard<std::mutex> one_job_at_a_time(run_mutex_);
    // The pool this thread was running for, back on return: a task of another pool (or one of
    // its workers) that calls this pool must still see its own pool afterwards, or its next
    // nested call would queue behind the job it is part of.
    struct Restore {
      ThreadPool* previous = running_pool();
      ~Restore() { running_pool() = previous; }
    } restore;
    running_pool() = this;
    require(num_tasks <= kMaxTasks, "ThreadPool::run: too many tasks in one call");
    using Fn = std::remove_reference_t<F>;
    job_ctx_ = const_cast<void*>(static_cast<const void*>(std::addressof(f)));
    job_fn_ = [](void* ctx, std::size_t task, std::size_t worker) { (*static_cast<Fn*>(ctx))(task, worker); };
    failed_.store(false, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    job_ = (job_ + 1) & kJobMask;
    // Publishes the job: everything above happens-before a worker's successful claim.
    detail::tsan_release(&ticket_);
    ticket_.store(make_ticket(job_, num_tasks, 0), std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();

    work(job_, 0);

    spin_then_wait(done_, [&](std::uint32_t done) { return done == num_tasks; });
    detail::tsan_acquire(&done_);
    if (failed_.load(std::memory_order_relaxed)) {
      std::exception_ptr e = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  // A ticket packs [job id : 24 | task count : 20 | next task : 20] into one atomic word, so a
  // worker claims a task of the job it woke for, or nothing, with one compare-exchange: a late
  // worker can never run a task of a finished job or read the fields of the next one.
  static constexpr std::uint64_t kTaskBits = 20;
  static constexpr std::uint64_t kTaskMask = (std::uint64_t{1} << kTaskBits) - 1;
  static constexpr std::uint64_t kJobMask = (std::uint64_t{1} << 24) - 1;
  static constexpr std::size_t kMaxTasks = kTaskMask;
  static constexpr std::uint64_t make_ticket(std::uint64_t job, std::uint64_t count, std::uint64_t next) {
    return (job << (2 * kTaskBits)) | (count << kTaskBits) | next;
  }

  // The pool whose tasks this thread is running now (workers: their pool, for good).
  static ThreadPool*& running_pool() noexcept {
    static thread_local ThreadPool* pool = nullptr;
    return pool;
  }

  // Claims and runs tasks of job `job` until none is left.
  void work(std::uint64_t job, std::size_t worker) {
    std::uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      const std::uint64_t count = (t >> kTaskBits) & kTaskMask, next = t & kTaskMask;
      if ((t >> (2 * kTaskBits)) != job || next >= count) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;  // t now holds the current ticket
      }
      detail::tsan_acquire(&ticket_);
      try {
        job_fn_(job_ctx_, static_cast<std::size_t>(next), worker);
      } catch (...) {
        if (!failed_.exchange(true)) error_ = std::current_exception();
      }
      detail::tsan_release(&done_);
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == count) done_.notify_one();
      t = ticket_.load(std::memory_order_acquire);
    }
  }

  void worker_loop(std::size_t worker) {
    running_pool() = this;
    std::uint32_t seen = 0;
    for (;;) {
      seen = spin_then_wait(wake_, [seen](std::uint32_t wake) { return wake != seen; });
      if (stop_.load(std::memory_order_relaxed)) return;
      const std::uint64_t t = ticket_.load(std::memory_order_acquire);
      work(t >> (2 * kTaskBits), worker);
    }
  }

  std::size_t num_workers_ = 1;
  std::vector<std::thread> threads_;
  std::mutex run_mutex_;
  std::uint64_t job_ = 0;  // id of the latest job (caller only)
  // The job, published by the release store of ticket_.
  void* job_ctx_ = nullptr;
  void (*job_fn_)(void*, std::size_t, std::size_t) = nullptr;
  alignas(64) std::atomic<std::uint64_t> ticket_{0};
  alignas(64) std::atomic<std::uint32_t> done_{0};
  alignas(64) std::atomic<std::uint32_t> wake_{0};
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
