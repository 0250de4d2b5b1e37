#pragma once
// stile-serve's admission and batching: HTTP threads submit jobs and wait; one worker thread takes
// the oldest job and the jobs queued behind it that batch with it (the same batch_key) while their
// tokens fit the budget, and runs them as one call. The encoder packs sequences without padding,
// so a batch costs its tokens, not its longest text times its texts.
//
// Contract:
// - submit() waits until the job has run (its run_batch call returned) and says how it ended:
//   kDone; kQueueFull at once when max_queued jobs already wait (the caller answers 503, the job
//   never runs); kTimedOut when the job waited queue_timeout without being started (it is taken
//   out and never runs); kStopped when the queue is stopping (new jobs are refused, queued ones
//   still run).
// - A batch holds jobs of one batch_key, in arrival order; the first job always goes in even when
//   its tokens alone exceed the budget. max_batch_jobs caps the jobs per batch (1: one at a time,
//   the elastic engine's way).
// - run_batch runs on the worker thread, one call at a time; an exception from it is stored in
//   each job of the batch (Job::error) and the jobs count as done.
// - stop() refuses new jobs, runs what is queued and joins the worker (idempotent).
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

namespace stile_serve {

// The part of a job the queue reads and writes; the server's job type derives from it.
struct QueuedJob {
  int batch_key = 0;         // jobs batch together only with the same key
  std::size_t tokens = 0;    // what the job costs against the batch budget
  std::exception_ptr error;  // set when run_batch threw
};

enum class SubmitResult { kDone, kQueueFull, kTimedOut, kStopped };

template <class Job>
class BatchQueue {
 public:
  using RunBatch = std::function<void(std::span<Job* const>)>;

  BatchQueue(std::size_t max_queued, std::size_t max_batch_tokens, std::size_t max_batch_jobs, RunBatch run_batch)
      : max_queued_(max_queued),
        max_batch_tokens_(max_batch_tokens),
        max_batch_jobs_(max_batch_jobs),
        run_batch_(std::move(run_batch)),
        worker_([this] { work(); }) {}

  ~BatchQueue() { stop(); }
  BatchQueue(const BatchQueue&) = delete;
  BatchQueue& operator=(const BatchQueue&) = delete;

  SubmitResult submit(Job& job, std::chrono::milliseconds queue_timeout) {
    auto slot = std::make_shared<Slot>(Slot{&job});
    std::unique_lock lock(mutex_);
    if (stopping_) return SubmitResult::kStopped;
    if (queue_.size() >= max_queued_) return SubmitResult::kQueueFull;
    queue_.push_back(slot);
    work_ready_.notify_one();
    const auto deadline = std::chrono::steady_clock::now() + queue_timeout;
    if (!done_.wait_until(lock, deadline, [&] { return slot->started; })) {
      std::erase(queue_, slot);
      return SubmitResult::kTimedOut;
    }
    done_.wait(lock, [&] { return slot->done; });
    return SubmitResult::kDone;
  }

  // Jobs waiting to start.
  [[nodiscard]] std::size_t queued() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

 private:
  struct Slot {
    Job* job = nullptr;
    bool started = false;
    bool done = false;
  };

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      std::vector<std::shared_ptr<Slot>> batch{queue_.front()};
      std::size_t tokens = queue_.front()->job->tokens;
      queue_.pop_front();
      while (!queue_.empty() && batch.size() < max_batch_jobs_ &&
             queue_.front()->job->batch_key == batch.front()->job->batch_key &&
             tokens + queue_.front()->job->tokens <= max_batch_tokens_) {
        tokens += queue_.front()->job->tokens;
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      std::vector<Job*> jobs;
      for (const auto& s : batch) {
        s->started = true;
        jobs.push_back(s->job);
      }
      done_.notify_all();
      lock.unlock();
      try {
        run_batch_(jobs);
      } catch (...) {
        for (Job* j : jobs) j->error = std::current_exception();
      }
      lock.lock();
      for (const auto& s : batch) s->done = true;
      done_.notify_all();
    }
  }

  const std::size_t max_queued_;
  const std::size_t max_batch_tokens_;
  const std::size_t max_batch_jobs_;
  const RunBatch run_batch_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;  // the worker waits for jobs
  std::condition_variable done_;        // submitters wait for their job to start, then to finish
  std::deque<std::shared_ptr<Slot>> queue_;
  bool stopping_ = false;
  std::thread worker_;  // last: it starts in the constructor and reads the members above
};

}  // namespace stile_serve
