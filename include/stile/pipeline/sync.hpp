#pragma once
// Coroutine synchronization for the pipeline: an event (a layer's shards are in memory) and a
// counting semaphore (working-buffer slots). A waiter is resumed on the thread that sets or
// releases; it hops to its own executor with `co_await executor.schedule()` afterwards.
#include <coroutine>
#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

namespace stile {

// Set once; every waiter, earlier or later, goes on.
class AsyncEvent {
 public:
  void set() {
    std::vector<std::coroutine_handle<>> waiters;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      set_ = true;
      waiters.swap(waiters_);
    }
    for (const std::coroutine_handle<> h : waiters) h.resume();
  }
  bool is_set() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return set_;
  }

  auto operator co_await() noexcept {
    struct Awaiter {
      AsyncEvent& event;
      bool await_ready() const noexcept { return false; }
      bool await_suspend(std::coroutine_handle<> h) {
        std::lock_guard<std::mutex> lock(event.mutex_);
        if (event.set_) return false;  // go on at once
        event.waiters_.push_back(h);
        return true;
      }
      void await_resume() const noexcept {}
    };
    return Awaiter{*this};
  }

 private:
  mutable std::mutex mutex_;
  bool set_ = false;
  std::vector<std::coroutine_handle<>> waiters_;
};

// `count` permits; acquire() waits for one, release() hands one back (to the oldest waiter first).
class AsyncSemaphore {
 public:
  explicit AsyncSemaphore(std::size_t count) : count_(count) {}

  auto acquire() noexcept {
    struct Awaiter {
      AsyncSemaphore& sem;
      bool await_ready() const noexcept { return false; }
      bool await_suspend(std::coroutine_handle<> h) {
        std::lock_guard<std::mutex> lock(sem.mutex_);
        if (sem.count_ > 0) {
          --sem.count_;
          return false;
        }
        sem.waiters_.push_back(h);
        return true;
      }
      void await_resume() const noexcept {}
    };
    return Awaiter{*this};
  }

  void release(std::size_t n = 1) {
    for (std::size_t i = 0; i < n; ++i) {
      std::coroutine_handle<> next;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (waiters_.empty()) {
          ++count_;
          continue;
        }
        next = waiters_.front();
        waiters_.pop_front();
      }
      next.resume();  // the permit passes straight to it
    }
  }

 private:
  std::mutex mutex_;
  std::size_t count_;
  std::deque<std::coroutine_handle<>> waiters_;
};

}  // namespace stile
