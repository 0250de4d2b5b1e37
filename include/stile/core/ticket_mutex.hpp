#pragma once
// A mutex that admits its waiters in the order they arrived (a ticket lock over a condition
// variable). std::mutex promises no order: under contention one thread may take it again and
// again while another waits, so an engine whose requests queue on it could serve a later request
// before an earlier one. BasicLockable: use it with std::lock_guard / std::unique_lock.
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace stile {

class TicketMutex {
 public:
  void lock() {
    std::unique_lock<std::mutex> guard(mutex_);
    const std::uint64_t ticket = next_++;
    turn_.wait(guard, [&] { return serving_ == ticket; });
  }
  // Tickets handed out so far: the callers that have arrived (holding, waiting or gone).
  std::uint64_t tickets_taken() {
    std::lock_guard<std::mutex> guard(mutex_);
    return next_;
  }
  void unlock() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      ++serving_;
    }
    // Every waiter checks whether its ticket is up; only one is.
    turn_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  std::uint64_t next_ = 0;     // the ticket the next arrival gets
  std::uint64_t serving_ = 0;  // the ticket that holds the lock (or is next to take it)
};

}  // namespace stile
