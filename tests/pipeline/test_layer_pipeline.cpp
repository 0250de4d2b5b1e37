// The pipeline's coroutine machinery (task, executor, event, semaphore) and the layer pipeline's
// schedule, on jobs that only record and sleep: ordering invariants read from the timestamps, the
// bound on layers in flight, error propagation, and a pipeline reused after a failed run. These
// are the scheduler tests CI also runs under AddressSanitizer and ThreadSanitizer.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "stile/pipeline/executor.hpp"
#include "stile/pipeline/layer_pipeline.hpp"
#include "stile/pipeline/preload_buffer.hpp"
#include "stile/pipeline/sync.hpp"
#include "stile/pipeline/task.hpp"

using namespace std::chrono_literals;

namespace {

stile::Task<int> forty_two() { co_return 42; }
stile::Task<int> plus_one(stile::Task<int> inner) { co_return 1 + co_await std::move(inner); }
stile::Task<int> throws() {
  throw std::runtime_error("boom");
  co_return 0;
}

stile::Task<void> hop(stile::Executor& e, std::thread::id& seen) {
  co_await e.schedule();
  seen = std::this_thread::get_id();
}

// Counts how many layers' loads have begun but whose compute has not yet finished.
struct InFlight {
  std::atomic<int> now{0}, most{0};
  void enter() {
    const int n = ++now;
    int m = most.load();
    while (n > m && !most.compare_exchange_weak(m, n)) {
    }
  }
  void leave() { --now; }
};

}  // namespace

TEST_CASE("tasks return values and exceptions through co_await", "[pipeline]") {
  int got = 0;
  auto body = [&]() -> stile::Task<void> { got = co_await plus_one(plus_one(forty_two())); };
  stile::sync_wait(body());
  CHECK(got == 44);
  auto failing = [&]() -> stile::Task<void> { co_await plus_one(throws()); };
  CHECK_THROWS_WITH(stile::sync_wait(failing()), "boom");
}

TEST_CASE("an executor resumes coroutines on its own thread", "[pipeline]") {
  stile::Executor e("test");
  std::thread::id seen{};
  stile::sync_wait(hop(e, seen));
  CHECK(seen != std::this_thread::get_id());
  CHECK(seen != std::thread::id{});
}

TEST_CASE("an event releases waiters that came before and after it was set", "[pipeline]") {
  stile::Executor a("a"), b("b");
  stile::AsyncEvent event;
  std::atomic<int> woke{0};
  auto waiter = [&](stile::Executor& e) -> stile::Task<void> {
    co_await e.schedule();
    co_await event;
    ++woke;
  };
  stile::Task<void> t1 = waiter(a);
  stile::Task<void> setter = [](stile::Executor& e, stile::AsyncEvent& ev) -> stile::Task<void> {
    co_await e.schedule();
    std::this_thread::sleep_for(2ms);
    ev.set();
  }(b, event);
  stile::sync_wait_all(t1, setter);
  stile::sync_wait(waiter(b));  // already set: does not wait
  CHECK(woke == 2);
  CHECK(event.is_set());
}

TEST_CASE("a semaphore never lets more than its count through", "[pipeline]") {
  stile::Executor a("a"), b("b"), c("c");
  stile::AsyncSemaphore sem(2);
  InFlight inside;
  auto user = [&](stile::Executor& e) -> stile::Task<void> {
    for (int i = 0; i < 20; ++i) {
      co_await sem.acquire();
      co_await e.schedule();
      inside.enter();
      std::this_thread::sleep_for(100us);
      inside.leave();
      sem.release();
    }
  };
  stile::Task<void> ta = user(a), tb = user(b), tc = user(c);
  stile::sync_wait_all(ta, tb, tc);
  CHECK(inside.most.load() <= 2);
  CHECK(inside.most.load() >= 1);
}

TEST_CASE("the layer pipeline overlaps IO of layer k+1 with compute of layer k", "[pipeline]") {
  stile::Executor io("io"), compute("compute");
  stile::LayerPipeline pipeline(io, compute);
  const std::size_t n = 6;
  for (const std::size_t slots : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
    INFO("slots " << slots);
    InFlight flight;
    std::vector<std::size_t> slot_of(n, 99);
    stile::LayerJobs jobs;
    jobs.load = [&](std::size_t k, std::size_t slot, stile::LayerTimes& t) {
      flight.enter();
      slot_of[k] = slot;
      std::this_thread::sleep_for(3ms);
      t.shards_read = 1;
    };
    jobs.compute = [&](std::size_t, std::size_t) {
      std::this_thread::sleep_for(3ms);
      flight.leave();
    };
    std::vector<stile::LayerTimes> times;
    pipeline.run(n, slots, stile::PipelineMode::pipelined, jobs, std::chrono::steady_clock::now(), times);
    REQUIRE(times.size() == n);
    CHECK(flight.most.load() <= static_cast<int>(slots));
    for (std::size_t k = 0; k < n; ++k) {
      CHECK(slot_of[k] == k % slots);
      CHECK(times[k].io_start_ms <= times[k].io_end_ms);
      CHECK(times[k].io_end_ms <= times[k].compute_start_ms);  // compute waits for its shards
      CHECK(times[k].compute_start_ms < times[k].compute_end_ms);
      CHECK(times[k].stall_ms >= 0);
      if (k > 0) CHECK(times[k - 1].compute_end_ms <= times[k].compute_start_ms);
      if (k >= slots) CHECK(times[k - slots].compute_end_ms <= times[k].io_start_ms);          // a slot was free
      if (slots >= 2 && k + 1 < n) CHECK(times[k + 1].io_start_ms < times[k].compute_end_ms);  // overlap
    }
  }
}

TEST_CASE("load-then-execute reads every layer before computing any", "[pipeline]") {
  stile::Executor io("io"), compute("compute");
  stile::LayerPipeline pipeline(io, compute);
  const std::size_t n = 4;
  stile::LayerJobs jobs;
  jobs.load = [](std::size_t, std::size_t, stile::LayerTimes&) { std::this_thread::sleep_for(1ms); };
  jobs.compute = [](std::size_t, std::size_t) { std::this_thread::sleep_for(1ms); };
  std::vector<stile::LayerTimes> times;
  CHECK_THROWS_WITH(
      pipeline.run(n, 2, stile::PipelineMode::load_then_execute, jobs, std::chrono::steady_clock::now(), times),
      Catch::Contains("a slot for every layer"));
  pipeline.run(n, n, stile::PipelineMode::load_then_execute, jobs, std::chrono::steady_clock::now(), times);
  for (std::size_t k = 0; k < n; ++k) CHECK(times[n - 1].io_end_ms <= times[k].compute_start_ms);
  CHECK(times[0].stall_ms > 0);
}

TEST_CASE("a failing job fails the run, and the pipeline runs again afterwards", "[pipeline]") {
  stile::Executor io("io"), compute("compute");
  stile::LayerPipeline pipeline(io, compute);
  const std::size_t n = 6;
  std::vector<stile::LayerTimes> times;
  for (const bool fail_in_io : {true, false}) {
    std::set<std::size_t> computed;
    std::mutex m;
    stile::LayerJobs jobs;
    jobs.load = [&](std::size_t k, std::size_t, stile::LayerTimes&) {
      if (fail_in_io && k == 3) throw std::runtime_error("layer 3: checksum mismatch");
    };
    jobs.compute = [&](std::size_t k, std::size_t) {
      if (!fail_in_io && k == 2) throw std::runtime_error("layer 2: compute failed");
      std::lock_guard<std::mutex> lock(m);
      computed.insert(k);
    };
    CHECK_THROWS_WITH(pipeline.run(n, 2, stile::PipelineMode::pipelined, jobs, std::chrono::steady_clock::now(), times),
                      fail_in_io ? "layer 3: checksum mismatch" : "layer 2: compute failed");
    for (const std::size_t k : computed) CHECK(k < (fail_in_io ? 3u : 2u));
  }
  std::atomic<int> ok{0};
  stile::LayerJobs fine;
  fine.load = [](std::size_t, std::size_t, stile::LayerTimes&) {};
  fine.compute = [&](std::size_t, std::size_t) { ++ok; };
  pipeline.run(n, 2, stile::PipelineMode::pipelined, fine, std::chrono::steady_clock::now(), times);
  CHECK(ok == static_cast<int>(n));
}

TEST_CASE("many short pipelines in a row (the sanitizers' workload)", "[pipeline]") {
  stile::Executor io("io"), compute("compute");
  stile::LayerPipeline pipeline(io, compute);
  std::vector<int> done(12, 0);
  stile::LayerJobs jobs;
  jobs.load = [&](std::size_t k, std::size_t, stile::LayerTimes& t) { t.bytes_read = k; };
  jobs.compute = [&](std::size_t k, std::size_t) { ++done[k]; };
  std::vector<stile::LayerTimes> times;
  for (int run = 0; run < 300; ++run) {
    pipeline.run(done.size(), 1 + run % 3, stile::PipelineMode::pipelined, jobs, std::chrono::steady_clock::now(),
                 times);
  }
  for (const int d : done) CHECK(d == 300);
  CHECK(times[5].bytes_read == 5);
}

TEST_CASE("the preload buffer evicts from the top layers down", "[pipeline]") {
  stile::PreloadBuffer buffer(10'000);
  std::vector<std::byte> bytes(1000, std::byte{7});
  const auto view = [](std::span<const std::byte>) { return stile::ShardView{}; };
  for (std::size_t l = 0; l < 3; ++l) {
    for (std::size_t s = 0; s < 3; ++s) CHECK(buffer.insert({l, s, 4}, bytes, view));
  }
  CHECK(buffer.held_bytes() == 9000);
  CHECK_FALSE(buffer.insert({3, 0, 4}, std::vector<std::byte>(2000), view));  // over budget: not kept
  CHECK(buffer.set_budget(5500) == 4);
  const std::vector<stile::ShardKey> kept = buffer.keys();
  REQUIRE(kept.size() == 5);
  CHECK(kept.back() == stile::ShardKey{1, 1, 4});
  CHECK(buffer.held_bytes() == 5000);
  buffer.retain_only({{0, 0, 4}, {1, 1, 4}, {2, 2, 4}});
  CHECK(buffer.keys() == std::vector<stile::ShardKey>{{0, 0, 4}, {1, 1, 4}});
  CHECK(buffer.find({0, 0, 4}) != nullptr);
  CHECK(buffer.find({0, 1, 4}) == nullptr);
}

TEST_CASE("during a request the versions it drops at its end do not count against the budget", "[pipeline]") {
  stile::PreloadBuffer buffer(3000);
  const std::vector<std::byte> bytes(1000, std::byte{7});
  const auto view = [](std::span<const std::byte>) { return stile::ShardView{}; };
  for (std::size_t s = 0; s < 3; ++s) CHECK(buffer.insert({0, s, 4}, bytes, view));  // the last request's
  CHECK_FALSE(buffer.insert({0, 0, 6}, bytes, view));                                 // full
  // The next request keeps {0,0,6}, {0,1,6} and {0,1,4}; it still computes on {0,2,4};
  // {0,0,4} it neither keeps nor uses.
  const std::set<stile::ShardKey> keep{{0, 0, 6}, {0, 1, 6}, {0, 1, 4}};
  buffer.begin_request(keep, {{0, 1, 4}, {0, 2, 4}, {0, 0, 6}, {0, 1, 6}});
  CHECK(buffer.find({0, 0, 4}) == nullptr);
  CHECK(buffer.find({0, 2, 4}) != nullptr);  // still in use
  CHECK(buffer.insert({0, 0, 6}, bytes, view));
  CHECK(buffer.insert({0, 1, 6}, bytes, view));
  CHECK(buffer.held_bytes() == 4000);  // the budget plus the leaving {0,2,4}
  CHECK_FALSE(buffer.insert({1, 0, 4}, bytes, view));  // beyond what is kept: still refused
  buffer.end_request(keep);
  CHECK(buffer.keys() == std::vector<stile::ShardKey>{{0, 0, 6}, {0, 1, 4}, {0, 1, 6}});
  CHECK(buffer.held_bytes() == 3000);
  CHECK_FALSE(buffer.insert({1, 0, 4}, bytes, view));  // between requests the budget is whole again
}

TEST_CASE("the preload set is the plan's first shards in layer order that fit", "[pipeline]") {
  const stile::SubmodelPlan plan{{{{2, 4}, {0, 4}}, {{1, 32}, {0, 4}}}};
  const auto bytes = [](const stile::ShardKey& k) { return k.bits == 32 ? std::size_t{8} : std::size_t{1}; };
  CHECK(stile::preload_set(plan, 0, bytes).empty());
  CHECK(stile::preload_set(plan, 2, bytes) == std::set<stile::ShardKey>{{0, 2, 4}, {0, 0, 4}});
  CHECK(stile::preload_set(plan, 9, bytes) ==
        std::set<stile::ShardKey>{{0, 2, 4}, {0, 0, 4}});  // a prefix: stops at the first misfit
  CHECK(stile::preload_set(plan, 11, bytes).size() == 4);
}
