#pragma once
// The Communicator over threads of one process (dist/communicator.hpp), for unit tests: a
// InProcessGroup of n ranks hands out one communicator per rank, each used by one thread. Every
// collective is two or three rendezvous of all ranks around shared pointers to the ranks' buffers
// (post, copy, release), so no rank reuses a buffer another still reads. A rendezvous that some
// rank misses for timeout() throws on every waiting rank, naming the missing ranks.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/dist/communicator.hpp"

namespace stile {

namespace inprocess_detail {

// The state the ranks of one group share.
struct Hub {
  explicit Hub(int n) : ranks(n), arrived_at(static_cast<std::size_t>(n), 0), posted(static_cast<std::size_t>(n)) {}

  struct Post {
    const void* send = nullptr;
    void* recv = nullptr;
    std::size_t n = 0;
    int color = 0;
  };

  int ranks;
  std::mutex m;
  std::condition_variable cv;
  std::size_t generation = 0;          // rendezvous completed so far
  std::size_t waiting = 0;             // ranks in the current rendezvous
  std::vector<std::size_t> arrived_at;  // per rank: the rendezvous it last arrived at (+1)
  std::vector<Post> posted;
  bool aborted = false;
  std::string abort_reason;
  std::map<std::pair<std::size_t, int>, std::shared_ptr<Hub>> children;  // (split, color)

  // Waits until every rank has arrived at this rendezvous; throws on abort or timeout.
  void rendezvous(int rank, const char* what, std::chrono::milliseconds timeout) {
    std::unique_lock lock(m);
    if (aborted) throw Error(concat_abort(rank, what));
    const std::size_t gen = generation;
    arrived_at[static_cast<std::size_t>(rank)] = gen + 1;
    if (++waiting == static_cast<std::size_t>(ranks)) {
      waiting = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const bool done = cv.wait_for(lock, timeout, [&] { return generation != gen || aborted; });
    if (generation != gen) return;  // completed, even if an abort came after
    if (!done) {
      std::string missing;
      for (int r = 0; r < ranks; ++r) {
        if (arrived_at[static_cast<std::size_t>(r)] == gen + 1) continue;
        if (!missing.empty()) missing += ", ";
        missing += std::to_string(r);
      }
      // The others fail at once rather than each waiting its own timeout.
      aborted = true;
      abort_reason = "rank(s) " + missing + " did not arrive within " + std::to_string(timeout.count()) + " ms";
      cv.notify_all();
      throw Error("stile: rank " + std::to_string(rank) + ": " + what + " timed out: " + abort_reason +
                  " (dead or stuck)");
    }
    throw Error(concat_abort(rank, what));
  }

  std::string concat_abort(int rank, const char* what) const {
    return "stile: rank " + std::to_string(rank) + ": " + what + " aborted: " + abort_reason;
  }

  void abort(int rank, const std::string& reason) {
    std::lock_guard lock(m);
    if (aborted) return;
    aborted = true;
    abort_reason = "rank " + std::to_string(rank) + " failed: " + reason;
    cv.notify_all();
  }
};

}  // namespace inprocess_detail

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<inprocess_detail::Hub> hub, int rank, std::chrono::milliseconds timeout)
      : Communicator(timeout), hub_(std::move(hub)), rank_(rank) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return hub_->ranks; }
  std::string transport() const override { return "in-process"; }

  void all_gather(const float* send, std::span<const std::size_t> counts, float* recv) override {
    require(counts.size() == static_cast<std::size_t>(size()), "all_gather: one count per rank");
    const Clock::time_point t0 = Clock::now();
    post({send, recv, counts[static_cast<std::size_t>(rank_)]});
    sync("all_gather");
    std::size_t at = 0, bytes = 0;
    for (int r = 0; r < size(); ++r) {
      const std::size_t n = counts[static_cast<std::size_t>(r)];
      const auto& p = hub_->posted[static_cast<std::size_t>(r)];
      require(p.n == n, "all_gather: rank " + std::to_string(r) + " passed a different count");
      if (r != rank_ || recv + at != send) std::memcpy(recv + at, p.send, n * sizeof(float));
      if (r != rank_) bytes += n * sizeof(float);
      at += n;
    }
    sync("all_gather");  // every rank has read every send buffer
    count(bytes, seconds_since(t0));
  }

  void all_reduce_sum(float* data, std::size_t n) override {
    const Clock::time_point t0 = Clock::now();
    post({data, data, n});
    sync("all_reduce");
    // Summed in rank order on every rank: identical bits everywhere.
    sum_.assign(n, 0.0f);
    for (int r = 0; r < size(); ++r) {
      const auto& p = hub_->posted[static_cast<std::size_t>(r)];
      require(p.n == n, "all_reduce: rank " + std::to_string(r) + " passed a different count");
      const float* src = static_cast<const float*>(p.send);
      for (std::size_t i = 0; i < n; ++i) sum_[i] += src[i];
    }
    sync("all_reduce");  // every rank has read every buffer before any is overwritten
    std::copy(sum_.begin(), sum_.end(), data);
    count(all_reduce_bytes(n, size()), seconds_since(t0));
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    require(root >= 0 && root < size(), "broadcast: root out of range");
    const Clock::time_point t0 = Clock::now();
    post({data, data, bytes});
    sync("broadcast");
    const auto& p = hub_->posted[static_cast<std::size_t>(root)];
    require(p.n == bytes, "broadcast: ranks passed different sizes");
    if (rank_ != root) std::memcpy(data, p.send, bytes);
    sync("broadcast");
    count(rank_ == root ? 0 : bytes, seconds_since(t0));
  }

  void barrier() override {
    const Clock::time_point t0 = Clock::now();
    sync("barrier");
    count(0, seconds_since(t0));
  }

  std::unique_ptr<Communicator> split(int color) override {
    post({nullptr, nullptr, 0, color});
    sync("split");
    int sub_rank = 0, sub_size = 0;
    for (int r = 0; r < size(); ++r) {
      if (hub_->posted[static_cast<std::size_t>(r)].color != color) continue;
      if (r < rank_) ++sub_rank;
      ++sub_size;
    }
    std::shared_ptr<inprocess_detail::Hub> child;
    {
      std::lock_guard lock(hub_->m);
      auto& slot = hub_->children[{splits_, color}];
      if (!slot) slot = std::make_shared<inprocess_detail::Hub>(sub_size);
      child = slot;
    }
    sync("split");
    ++splits_;
    return std::make_unique<InProcessCommunicator>(child, sub_rank, timeout());
  }

  void abort(const std::string& reason) override { hub_->abort(rank_, reason); }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  void post(const inprocess_detail::Hub::Post& p) {
    // Each rank writes only its own slot, and only while no other rank reads the slots (between
    // a collective's last rendezvous and the next one's first).
    hub_->posted[static_cast<std::size_t>(rank_)] = p;
  }
  void sync(const char* what) { hub_->rendezvous(rank_, what, timeout()); }

  std::shared_ptr<inprocess_detail::Hub> hub_;
  int rank_;
  std::size_t splits_ = 0;
  std::vector<float> sum_;
};

// n ranks in one process: communicator(r) is rank r's, for the thread that plays rank r.
class InProcessGroup {
 public:
  explicit InProcessGroup(int ranks, std::chrono::milliseconds timeout = kDefaultCollectiveTimeout)
      : hub_(std::make_shared<inprocess_detail::Hub>(ranks)) {
    require(ranks > 0, "in-process group: no ranks");
    for (int r = 0; r < ranks; ++r) comms_.push_back(std::make_unique<InProcessCommunicator>(hub_, r, timeout));
  }
  int size() const noexcept { return static_cast<int>(comms_.size()); }
  Communicator& communicator(int rank) { return *comms_.at(static_cast<std::size_t>(rank)); }

 private:
  std::shared_ptr<inprocess_detail::Hub> hub_;
  std::vector<std::unique_ptr<InProcessCommunicator>> comms_;
};

}  // namespace stile
