#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "stile/core/thread_pool.hpp"

TEST_CASE("thread pool runs every task exactly once, repeatedly", "[core]") {
  for (const std::size_t threads : {1, 2, 4}) {
    stile::ThreadPool pool(threads);
    REQUIRE(pool.num_threads() == threads);
    for (int round = 0; round < 200; ++round) {
      const std::size_t tasks = 1 + static_cast<std::size_t>(round % 37);
      std::vector<std::atomic<int>> hits(tasks);
      std::atomic<std::size_t> max_worker{0};
      pool.run(tasks, [&](std::size_t task, std::size_t worker) {
        hits[task].fetch_add(1);
        std::size_t seen = max_worker.load();
        while (worker > seen && !max_worker.compare_exchange_weak(seen, worker)) {
        }
      });
      for (auto& h : hits) REQUIRE(h.load() == 1);
      REQUIRE(max_worker.load() < threads);
    }
  }
}

TEST_CASE("thread pool rethrows a task's exception after joining", "[core]") {
  stile::ThreadPool pool(3);
  std::atomic<int> done{0};
  CHECK_THROWS_AS(pool.run(64,
                           [&](std::size_t task, std::size_t) {
                             done.fetch_add(1);
                             if (task == 5) throw std::runtime_error("boom");
                           }),
                  std::runtime_error);
  CHECK(done.load() == 64);  // the other tasks still ran
  // The pool stays usable.
  std::atomic<int> after{0};
  pool.run(10, [&](std::size_t, std::size_t) { after.fetch_add(1); });
  CHECK(after.load() == 10);
}

TEST_CASE("thread pool serves callers on several threads and nested calls", "[core]") {
  stile::ThreadPool pool(2);
  std::atomic<int> total{0};
  auto job = [&] {
    for (int round = 0; round < 100; ++round) {
      pool.run(8, [&](std::size_t, std::size_t) {
        // A nested call on the same pool runs in the calling task, in order.
        std::atomic<int> inner{0};
        pool.run(3, [&](std::size_t, std::size_t) { inner.fetch_add(1); });
        total.fetch_add(inner.load());
      });
    }
  };
  std::thread other(job);
  job();
  other.join();
  CHECK(total.load() == 2 * 100 * 8 * 3);
}

TEST_CASE("a task that calls another pool can still nest calls to its own", "[core]") {
  // Before the fix, returning from Q.run cleared which pool the thread was running for: the
  // nested P.run below then waited for P's lock, held by the job it is part of (a deadlock).
  stile::ThreadPool p(2), q(2);
  std::atomic<int> total{0};
  std::promise<void> finished;
  std::future<void> done = finished.get_future();
  // The promise lives in the thread, which may still be inside set_value() when done is ready.
  std::thread([&, finished = std::move(finished)]() mutable {
    for (int round = 0; round < 50; ++round) {
      p.run(4, [&](std::size_t, std::size_t) {
        q.run(2, [&](std::size_t, std::size_t) { total.fetch_add(1); });
        p.run(3, [&](std::size_t, std::size_t) { total.fetch_add(10); });
      });
    }
    finished.set_value();
  }).detach();
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fputs("a nested call deadlocked after a call to another pool\n", stderr);
    std::_Exit(1);  // the deadlocked threads cannot be joined
  }
  CHECK(total.load() == 50 * 4 * (2 + 30));
}
