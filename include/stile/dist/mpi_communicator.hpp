#pragma once
// The Communicator over MPI (Debian's Open MPI; dist/communicator.hpp): ranks are processes, on one
// host (shared memory: `--mca btl self,vader`) or across hosts (TCP: `--mca btl self,tcp` and a
// hostfile, docs/dist.md). Optional at build time: the build defines STILE_HAVE_MPI=1 when CMake's
// FindMPI found MPI; without it this header still compiles, mpi_available() is false and
// MpiSession's constructor throws an error that says so.
//
// Every collective is MPI's non-blocking one (MPI_Iallgatherv, MPI_Iallreduce, MPI_Ibcast,
// MPI_Ibarrier) polled until done or until timeout(): a rank that never arrives (dead without the
// launcher noticing, stopped, stuck) gives every waiting rank an error naming the collective,
// never a hang. abort() calls MPI_Abort, which ends every rank of the job.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/dist/communicator.hpp"

#if defined(STILE_HAVE_MPI)
#include <mpi.h>
#endif

namespace stile {

constexpr bool mpi_available() noexcept {
#if defined(STILE_HAVE_MPI)
  return true;
#else
  return false;
#endif
}

#if defined(STILE_HAVE_MPI)

class MpiCommunicator final : public Communicator {
 public:
  // Wraps `comm` (not freed unless `owned`).
  MpiCommunicator(MPI_Comm comm, std::chrono::milliseconds timeout, bool owned = false)
      : Communicator(timeout), comm_(comm), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string transport() const override { return "mpi"; }

  void all_gather(const float* send, std::span<const std::size_t> counts, float* recv) override {
    require(counts.size() == static_cast<std::size_t>(size_), "all_gather: one count per rank");
    counts_.resize(counts.size());
    displs_.resize(counts.size());
    std::size_t at = 0, bytes = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      require(at + counts[r] < (std::size_t{1} << 31), "all_gather: more than 2^31 floats");
      counts_[r] = static_cast<int>(counts[r]);
      displs_[r] = static_cast<int>(at);
      if (static_cast<int>(r) != rank_) bytes += counts[r] * sizeof(float);
      at += counts[r];
    }
    const Clock::time_point t0 = Clock::now();
    const bool in_place = send == recv + displs_[static_cast<std::size_t>(rank_)];
    MPI_Request req;
    MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, counts_[static_cast<std::size_t>(rank_)], MPI_FLOAT, recv,
                    counts_.data(), displs_.data(), MPI_FLOAT, comm_, &req);
    wait(req, "all_gather", t0);
    count(bytes, seconds_since(t0));
  }

  void all_reduce_sum(float* data, std::size_t n) override {
    require(n < (std::size_t{1} << 31), "all_reduce: more than 2^31 floats");
    const Clock::time_point t0 = Clock::now();
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_, &req);
    wait(req, "all_reduce", t0);
    count(all_reduce_bytes(n, size_), seconds_since(t0));
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    require(root >= 0 && root < size_ && bytes < (std::size_t{1} << 31), "broadcast: bad root or size");
    const Clock::time_point t0 = Clock::now();
    MPI_Request req;
    MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &req);
    wait(req, "broadcast", t0);
    count(rank_ == root ? 0 : bytes, seconds_since(t0));
  }

  void barrier() override {
    const Clock::time_point t0 = Clock::now();
    MPI_Request req;
    MPI_Ibarrier(comm_, &req);
    wait(req, "barrier", t0);
    count(0, seconds_since(t0));
  }

  std::unique_ptr<Communicator> split(int color) override {
    // MPI_Comm_split is blocking: a barrier with the timeout first, so a dead rank is reported.
    barrier();
    MPI_Comm sub;
    MPI_Comm_split(comm_, color, rank_, &sub);
    return std::make_unique<MpiCommunicator>(sub, timeout(), true);
  }

  [[noreturn]] void abort(const std::string& reason) override {
    std::fprintf(stderr, "stile: rank %d: aborting the job: %s\n", rank_, reason.c_str());
    std::fflush(stderr);
    MPI_Abort(comm_, 1);
    std::abort();  // MPI_Abort does not return
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  // Polls: spins (yielding) for the first 2 ms, which is where a layer's collectives end when the
  // ranks are balanced, then sleeps 100 us between tests so a rank waiting long for a slow peer
  // leaves the core to it.
  void wait(MPI_Request& req, const char* what, Clock::time_point t0) {
    const Clock::time_point deadline = t0 + timeout();
    for (int flag = 0;;) {
      MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (flag) return;
      const Clock::time_point now = Clock::now();
      if (now > deadline) {
        throw Error("stile: rank " + std::to_string(rank_) + ": " + what + " timed out after " +
                    std::to_string(timeout().count()) + " ms: a peer rank is dead, stopped or stuck");
      }
      if (now - t0 < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  std::vector<int> counts_, displs_;
};

// MPI_Init for the program's lifetime (MPI_Finalize at its end), and the world communicator.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv, std::chrono::milliseconds timeout = kDefaultCollectiveTimeout) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
      owned_ = true;
    }
    world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, timeout);
  }
  ~MpiSession() {
    world_.reset();
    if (owned_) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  Communicator& world() noexcept { return *world_; }

 private:
  bool owned_ = false;
  std::unique_ptr<MpiCommunicator> world_;
};

#else  // !STILE_HAVE_MPI

class MpiSession {
 public:
  MpiSession(int*, char***, std::chrono::milliseconds = kDefaultCollectiveTimeout) {
    throw Error("stile: built without MPI (install libopenmpi-dev and reconfigure): no multi-process communicator");
  }
  [[noreturn]] Communicator& world() { throw Error("stile: built without MPI"); }
};

#endif

}  // namespace stile
