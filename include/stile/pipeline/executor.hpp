#pragma once
// An executor: one thread that resumes the coroutines scheduled on it, in order. The pipeline has
// two, an IO executor (its jobs mostly wait on the storage) and a compute executor (its jobs fan
// out over the kernel thread pool), so a layer's reads never queue behind another layer's GEMMs.
//
//   co_await executor.schedule();  // the rest of this coroutine runs on executor's thread
#include <condition_variable>
#include <coroutine>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace stile {

class Executor {
 public:
  // on_start runs first on the executor's thread (to set its scheduling, say).
  explicit Executor(std::string name, std::function<void()> on_start = {})
      : name_(std::move(name)), thread_([this, start = std::move(on_start)] {
          if (start) start();
          loop();
        }) {}
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Finishes what is queued, then joins. Nothing may be scheduled on it after this starts.
  ~Executor() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  const std::string& name() const noexcept { return name_; }
  bool on_this_thread() const noexcept { return std::this_thread::get_id() == thread_.get_id(); }

  // Awaitable: resumes the awaiting coroutine on this executor's thread; does not suspend when
  // already there.
  auto schedule() noexcept {
    struct Awaiter {
      Executor& executor;
      bool await_ready() const noexcept { return executor.on_this_thread(); }
      void await_suspend(std::coroutine_handle<> h) { executor.post(h); }
      void await_resume() const noexcept {}
    };
    return Awaiter{*this};
  }

  void post(std::coroutine_handle<> h) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(h);
    }
    wake_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      const std::coroutine_handle<> h = queue_.front();
      queue_.pop_front();
      lock.unlock();
      h.resume();
      lock.lock();
    }
  }

  std::string name_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::coroutine_handle<>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it reads
};

}  // namespace stile
