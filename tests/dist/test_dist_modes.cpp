// The multi-device layer modes (WS, 1D, 2D) over the in-process communicator, 1..4 ranks with
// uneven shares (and a rank with none), against the single-device layer (max abs diff <= 1e-5):
// a BERT-large-shaped layer made on the spot and the whole default model (MiniLM); and the
// in-process communicator itself (uneven all-gather, all-reduce, broadcast, split, a dead rank,
// an abort).
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <stdexcept>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "dist_test_util.hpp"
#include "stile/dist/dist_model.hpp"
#include "stile/dist/inprocess_communicator.hpp"
#include "stile/dist/make_dist_layer.hpp"
#include "stile/model/bert_model.hpp"
#include "support/default_model.hpp"

using namespace stile;
using stile_test::max_abs_diff;

namespace {

// Runs fn(comm) on n threads, one rank each; returns each rank's exception message ("" if none).
std::vector<std::string> on_ranks(InProcessGroup& group, const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> errors(static_cast<std::size_t>(group.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(group.communicator(r));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Catch's assertions are not thread-safe: the ranks' threads check with this, and the test body
// reports what was thrown.
#define EXPECT(...) \
  if (!(__VA_ARGS__)) throw std::runtime_error("failed: " #__VA_ARGS__)

void require_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

// Two sequences (7 and 5 tokens) of random activations.
std::vector<float> random_x(std::size_t tokens, std::size_t d) {
  const DenseLayer noise = DenseLayer::random(d, 1, tokens, 99);  // its W_1 is tokens x d of noise
  std::vector<float> x(noise.w1.begin(), noise.w1.end());
  for (float& v : x) v *= 50.0f;  // ~ unit scale
  return x;
}

void check_layer_modes(const DenseLayer& layer, std::size_t ranks) {
  const std::vector<std::size_t> offsets{0, 7, 12};
  const std::vector<float> x0 = random_x(offsets.back(), layer.hidden);
  std::vector<float> want = x0;
  single_device_layer(layer, want.data(), offsets, single_thread_pool());
  for (const Partition& p : stile_test::test_partitions(ranks, layer.heads, layer.ffn, layer.hidden)) {
    InProcessGroup group(static_cast<int>(ranks), std::chrono::seconds(60));
    std::vector<std::vector<float>> got(ranks);
    require_no_errors(on_ranks(group, [&](Communicator& comm) {
      ThreadPool pool(1);
      const auto dist = make_dist_layer(layer, p, comm);
      std::vector<float> x = x0;
      dist->run(x.data(), offsets, pool);
      got[static_cast<std::size_t>(comm.rank())] = std::move(x);
    }));
    for (std::size_t r = 0; r < ranks; ++r) {
      INFO(partition_text(p) << ", rank " << r << " of " << ranks);
      CHECK(max_abs_diff(got[r], want) <= 1e-5f);
    }
  }
}

}  // namespace

TEST_CASE("in-process communicator: uneven all-gather, all-reduce, broadcast, split") {
  InProcessGroup group(3, std::chrono::seconds(30));
  require_no_errors(on_ranks(group, [](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<std::size_t> counts{2, 0, 3};
    std::vector<float> send(counts[static_cast<std::size_t>(r)], static_cast<float>(r + 1));
    std::vector<float> all(5, -1.0f);
    comm.all_gather(send.data(), counts, all.data());
    EXPECT(all == std::vector<float>{1, 1, 3, 3, 3});
    // In place: each rank's block already at its offset.
    std::vector<float> in_place(5, 0.0f);
    const std::size_t at = r == 0 ? 0 : r == 1 ? 2 : 2;
    for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) in_place[at + i] = static_cast<float>(10 * (r + 1));
    comm.all_gather(in_place.data() + at, counts, in_place.data());
    EXPECT(in_place == std::vector<float>{10, 10, 30, 30, 30});
    std::vector<float> v{static_cast<float>(r), 1.0f};
    comm.all_reduce_sum(v.data(), v.size());
    EXPECT(v == std::vector<float>{3, 3});
    int value = r == 2 ? 42 : 0;
    comm.broadcast(&value, sizeof value, 2);
    EXPECT(value == 42);
    const auto sub = comm.split(r == 1 ? 1 : 0);  // {0, 2} and {1}
    EXPECT(sub->size() == (r == 1 ? 1 : 2));
    EXPECT(sub->rank() == (r == 2 ? 1 : 0));
    float s = static_cast<float>(r);
    sub->all_reduce_sum(&s, 1);
    EXPECT(s == (r == 1 ? 1.0f : 2.0f));
    comm.barrier();
    EXPECT(comm.stats().calls == 5);  // split is not counted
  }));
}

TEST_CASE("in-process communicator: a dead rank gives every other rank an error naming it, not a hang") {
  InProcessGroup group(3, std::chrono::milliseconds(300));
  const std::vector<std::string> errors = on_ranks(group, [](Communicator& comm) {
    std::vector<float> v(4, 1.0f);
    comm.all_reduce_sum(v.data(), v.size());
    if (comm.rank() == 1) return;  // dies: never reaches the second collective
    comm.all_reduce_sum(v.data(), v.size());
  });
  CHECK(errors[1].empty());
  for (const int r : {0, 2}) {
    INFO(errors[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)].find("rank " + std::to_string(r) + ": all_reduce") != std::string::npos);
    CHECK(errors[static_cast<std::size_t>(r)].find("rank(s) 1 did not arrive") != std::string::npos);
  }
}

TEST_CASE("in-process communicator: a rank that fails aborts the others' collectives with its reason") {
  InProcessGroup group(3, std::chrono::seconds(60));
  const std::vector<std::string> errors = on_ranks(group, [](Communicator& comm) {
    if (comm.rank() == 2) {
      comm.abort("cannot hold its part");
      return;
    }
    comm.barrier();
  });
  for (const int r : {0, 1}) {
    INFO(errors[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)].find("rank 2 failed: cannot hold its part") != std::string::npos);
  }
}

TEST_CASE("failed_ranks: a local check known to every rank") {
  InProcessGroup group(4, std::chrono::seconds(30));
  require_no_errors(on_ranks(group, [](Communicator& comm) {
    EXPECT(failed_ranks(comm, comm.rank() != 1 && comm.rank() != 3) == std::vector<int>{1, 3});
  }));
}

TEST_CASE("partitions: checks and the proportional split") {
  CHECK(proportional_split(16, {3, 1}) == std::vector<std::size_t>{12, 4});
  CHECK(proportional_split(10, {1, 1, 1}) == std::vector<std::size_t>{4, 3, 3});
  CHECK(proportional_split(5, {0, 1}) == std::vector<std::size_t>{0, 5});
  Partition p = even_partition(DistMode::k2d, 4, 16, 4096, 1024);
  CHECK(p.grid_rows() == 2);
  CHECK(p.grid_cols() == 2);
  p.heads = {8, 7};
  CHECK_THROWS_WITH(check_partition(p, 4, 16, 4096, 1024), Catch::Contains("15 heads given, the layer has 16"));
  CHECK_THROWS_WITH(check_partition(even_partition(DistMode::k1d, 3, 16, 4096, 1024), 2, 16, 4096, 1024),
                    Catch::Contains("for 3 devices, run on 2 ranks"));
}

TEST_CASE("every mode on 1..4 ranks equals the single-device layer: BERT-large-shaped layer") {
  const DenseLayer layer = DenseLayer::random(1024, 16, 4096, 7);
  for (std::size_t ranks = 1; ranks <= 4; ++ranks) check_layer_modes(layer, ranks);
}

TEST_CASE("every mode on 1..4 ranks equals the single-device model: MiniLM, all layers") {
  REQUIRE_MODEL();
  const BertModel model = BertModel::load(stile_test::model_dir());
  const EncoderConfig& c = model.config();
  Encoding e;
  for (std::int32_t t = 0; t < 21; ++t) e.input_ids.push_back(t == 0 ? 101 : t == 20 ? 102 : 1000 + 37 * t);
  std::vector<float> want;
  model.encode(std::span(&e, 1), want, &single_thread_pool());
  const std::vector<std::size_t> offsets{0, e.input_ids.size()};
  for (std::size_t ranks = 1; ranks <= 4; ++ranks) {
    for (const Partition& p : stile_test::test_partitions(ranks, c.num_heads, c.intermediate, c.hidden)) {
      InProcessGroup group(static_cast<int>(ranks), std::chrono::seconds(60));
      std::vector<std::vector<float>> got(ranks);
      require_no_errors(on_ranks(group, [&](Communicator& comm) {
        ThreadPool pool(1);
        DistModel dist(model.weights(), p, comm);
        std::vector<float> x;
        dist.embed(e, x);
        dist.run_layers(x.data(), offsets, pool);
        got[static_cast<std::size_t>(comm.rank())] = std::move(x);
      }));
      for (std::size_t r = 0; r < ranks; ++r) {
        INFO(partition_text(p) << ", rank " << r << " of " << ranks);
        CHECK(max_abs_diff(got[r], want) <= 1e-5f);
      }
    }
  }
}
