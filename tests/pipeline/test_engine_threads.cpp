// One engine, many threads (engine.hpp, "Thread safety"): 8 threads x 50 planned requests of
// mixed lengths while another thread changes the target, the preload and word-row cache budgets
// and the heads (and online re-profiling replaces the planner as it likes). Every result must equal the same request run alone on a fresh engine with the plan
// it got (bit for bit: one compute thread), carry a head's logits for that plan, and have been
// planned for one of the targets set. The ticket lock the engine queues on admits callers in
// the order they arrived. Built and run under AddressSanitizer and ThreadSanitizer by scripts/test
// (stage 3), on a 2-layer tiny model so that stage stays short.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stile/core/ticket_mutex.hpp"
#include "stile/engine.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "support/converted_store.hpp"
#include "support/rng.hpp"
#include "support/tiny_bert.hpp"

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kLayers = 2, kShards = 4, kHidden = 32;

const stile_test::ConvertedStore& store() {
  static const stile_test::ConvertedStore s(
      "threads.stile", [](const fs::path& dir) { stile_test::write_tiny_bert(dir, kLayers, 4321); }, {4, 32});
  return s;
}

stile::HeadsFile heads(std::uint64_t seed) {
  stile_test::Rng rng{seed};
  stile::HeadsFile h;
  h.store = "threads.stile";
  h.num_layers = kLayers;
  h.shards_per_layer = kShards;
  for (const char* key : {"gold", "2x4", "2x3", "2x2", "1x4", "1x2", "2x1"}) {
    stile::StoredHead& s = h.heads[key];
    s.head.labels = {"negative", "positive"};
    for (std::size_t i = 0; i < 2 * kHidden; ++i) s.head.weight.push_back(rng.unit());
    s.head.bias = {rng.unit(), rng.unit()};
    s.calibration_accuracy = s.train_accuracy = 0.5 + 0.4 * (rng() + 1) / 2;
  }
  return h;
}

stile::EngineOptions options() {
  stile::EngineOptions o;
  o.threads = 1;  // one summation order: a result compares bit for bit with the same plan run alone
  o.backend.kind = stile::ReadBackendKind::pread;  // the portable backend's own threads, too
  o.target_ms = 4;
  o.preload_bytes = 16u << 10;
  o.word_cache_bytes = 1u << 10;
  o.reprofile = true;  // the planner is replaced as measured times drift: under the same lock
  return o;
}

struct Done {
  stile::Encoding tokens;
  stile::EngineResult result;
};

}  // namespace

TEST_CASE("the ticket lock admits callers in the order they arrived", "[engine][threads]") {
  stile::TicketMutex mutex;
  std::vector<int> order;
  std::atomic<int> arrived{0};
  std::vector<std::thread> threads;
  mutex.lock();
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      arrived.store(i + 1);
      std::lock_guard<stile::TicketMutex> lock(mutex);
      order.push_back(i);
    });
    // The next thread starts only once this one holds its ticket (a ticket per lock() call).
    while (mutex.tickets_taken() < static_cast<std::uint64_t>(i) + 2) std::this_thread::yield();
  }
  mutex.unlock();
  for (std::thread& t : threads) t.join();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(arrived.load() == 8);
}

TEST_CASE("8 threads x 50 requests on one engine while settings change equal the requests run alone",
          "[engine][threads]") {
  const std::size_t kThreads = 8, kRequests = 50;
  const std::vector<double> targets = {2.5, 4, 8, 30};
  const stile::HeadsFile heads_a = heads(1), heads_b = heads(2);
  stile::Engine engine(store().store, options(), stile_test::tiny_profile(store().store));
  engine.set_heads(heads_a);

  std::vector<std::vector<Done>> done(kThreads);
  std::atomic<std::size_t> running{kThreads};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = 0; i < kRequests; ++i) {
        const stile::Encoding tokens = stile_test::tiny_tokens(3 + (t * 11 + i * 7) % 40, t * kRequests + i);
        done[t].push_back({tokens, engine.run(tokens)});
      }
      running.fetch_sub(1);
    });
  }
  // The setters, from a thread of their own, until the requests are done.
  std::size_t changes = 0;
  std::thread setter([&] {
    for (std::size_t k = 0; running.load() > 0; ++k, ++changes) {
      switch (k % 4) {
        case 0: engine.set_target_ms(targets[(k / 4) % targets.size()]); break;
        case 1: engine.set_preload_budget((k % 3) * (12u << 10)); break;
        case 2: engine.set_word_cache_budget((k % 5) * 256); break;
        case 3: engine.set_heads(k % 8 == 3 ? heads_b : heads_a); break;
      }
      std::this_thread::yield();
    }
  });
  for (std::thread& t : threads) t.join();
  setter.join();
  INFO(changes << " settings changed during the requests");

  // Each request alone, on a fresh engine, with the plan it got.
  stile::Engine alone(store().store, options());
  std::set<double> seen_targets;
  std::size_t requests = 0;
  for (const std::vector<Done>& per_thread : done) {
    REQUIRE(per_thread.size() == kRequests);
    for (const Done& d : per_thread) {
      ++requests;
      const stile::EngineResult& r = d.result;
      CHECK(r.tokens == d.tokens.size());
      CHECK(alone.run(d.tokens, r.plan).embedding == r.embedding);
      seen_targets.insert(r.target_ms);
      CHECK(std::find(targets.begin(), targets.end(), r.target_ms) != targets.end());
      // The logits are those of heads_a's or heads_b's head for the plan's shape.
      if (!r.logits.empty()) {
        bool matched = false;
        for (const stile::HeadsFile* h : {&heads_a, &heads_b}) {
          const stile::StoredHead* head = h->find_for(r.plan);
          if (head == nullptr) continue;
          const std::vector<double> z = head->head.logits(r.embedding);
          matched = matched || (z.size() == r.logits.size() && static_cast<float>(z[0]) == r.logits[0] &&
                                static_cast<float>(z[1]) == r.logits[1]);
        }
        CHECK(matched);
      }
    }
  }
  CHECK(requests == kThreads * kRequests);
  CHECK(engine.working_buffer_bytes() == 0);
}
