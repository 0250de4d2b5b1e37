#pragma once
// Task<T>: the pipeline's coroutine type. Lazy (it starts when awaited or handed to sync_wait),
// single-awaiter, and it resumes its awaiter by symmetric transfer, so a chain of co_awaits
// never grows the stack. Exceptions travel to the awaiter.
//
//   Task<int> load() { co_await io.schedule(); ...; co_return bytes; }
//   Task<void> run() { const int n = co_await load(); ... }
//   sync_wait(run());
#include <coroutine>
#include <exception>
#include <latch>
#include <optional>
#include <utility>

namespace stile {

template <class T = void>
class Task;

namespace task_detail {

struct PromiseBase {
  std::coroutine_handle<> continuation = std::noop_coroutine();
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> done) noexcept {
      return done.promise().continuation;
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <class T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object() noexcept;
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

}  // namespace task_detail

template <class T>
class [[nodiscard]] Task {
 public:
  using promise_type = task_detail::Promise<T>;

  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  // co_await task: starts it; the awaiter resumes when it finishes, with its value or exception.
  auto operator co_await() && noexcept {
    struct Awaiter {
      std::coroutine_handle<promise_type> handle;
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
        handle.promise().continuation = awaiter;
        return handle;
      }
      T await_resume() { return handle.promise().take(); }
    };
    return Awaiter{handle_};
  }

 private:
  friend promise_type;
  explicit Task(std::coroutine_handle<promise_type> h) noexcept : handle_(h) {}
  std::coroutine_handle<promise_type> handle_;
};

namespace task_detail {

template <class T>
Task<T> Promise<T>::get_return_object() noexcept {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() noexcept {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}

// A coroutine that runs a task to its end and counts down a latch (sync_wait's driver). It never
// suspends at its end, so its frame frees itself.
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }  // drive() catches everything
  };
};

template <class T>
Detached drive(Task<T>& task, std::exception_ptr& error, std::latch& done) {
  try {
    co_await std::move(task);
  } catch (...) {
    error = std::current_exception();
  }
  done.count_down();
}

}  // namespace task_detail

// Runs every task to its end on the calling thread until each first suspends (they then go on
// wherever they are resumed), blocks until all have finished, and rethrows the first exception
// (in argument order) after all have finished.
template <class... Ts>
void sync_wait_all(Task<Ts>&... tasks) {
  std::latch done(sizeof...(Ts));
  std::exception_ptr errors[sizeof...(Ts)];
  std::size_t i = 0;
  (task_detail::drive(tasks, errors[i++], done), ...);
  done.wait();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

inline void sync_wait(Task<void> task) { sync_wait_all(task); }

}  // namespace stile
