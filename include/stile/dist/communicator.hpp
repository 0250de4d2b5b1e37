#pragma once
// The collectives a layer split across devices needs (ranks = devices), behind one interface: MPI
// between processes or hosts (dist/mpi_communicator.hpp), threads of one process for unit tests
// (dist/inprocess_communicator.hpp). Partitions may be uneven, so the all-gather takes a count per
// rank (MPI_Allgatherv).
//
// Contract of every collective: all ranks of the communicator call it in the same order with
// matching arguments. None of them waits forever: a rank that has not arrived after timeout()
// (dead, stopped, or stuck in other work) makes the call throw stile::Error on every rank that
// waits, naming the collective and, where the transport knows it, the missing ranks. A rank that
// fails on its own calls abort(reason), which makes the others' pending or next call throw with
// that reason (MPI: the job is ended). After a throw the communicator is unusable.
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace stile {

// What this rank has communicated so far. Bytes are the payload this rank receives: for an
// all-gather, the other ranks' blocks; for an all-reduce of n floats over p ranks, the 2 (p - 1) / p
// n floats that a ring (reduce-scatter, then all-gather) moves into each rank; for a broadcast, the
// buffer on non-root ranks. That is the transport-independent figure that Hepti's per-layer bytes
// compare with; what Open MPI's algorithm actually moves may differ.
struct CommStats {
  std::size_t calls = 0;
  std::size_t bytes = 0;
  double seconds = 0;  // wall time inside collectives (waiting for slower ranks included)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;

  // Rank r contributes counts[r] floats from `send`; recv receives every rank's block back to back
  // in rank order (sum(counts) floats). send may be recv + (the offset of this rank's block): in
  // place. @pre counts.size() == size().
  virtual void all_gather(const float* send, std::span<const std::size_t> counts, float* recv) = 0;
  // data[0, n) = the element-wise sum over ranks of data[0, n), identical bits on every rank.
  virtual void all_reduce_sum(float* data, std::size_t n) = 0;
  // bytes from `root` into data on every other rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // A communicator of the ranks that pass the same color (collective over this one), ranked in
  // this communicator's order; the same timeout.
  virtual std::unique_ptr<Communicator> split(int color) = 0;
  // Ends the collective work of every rank with `reason` (this rank has failed); does not return
  // for MPI (the job ends), returns for the in-process transport.
  virtual void abort(const std::string& reason) = 0;
  // Which transport ("in-process", "mpi: ...").
  virtual std::string transport() const = 0;

  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
  const CommStats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = {}; }

 protected:
  explicit Communicator(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  // Adds a call's payload and time to the stats (the transports call it).
  void count(std::size_t bytes, double seconds) noexcept {
    ++stats_.calls;
    stats_.bytes += bytes;
    stats_.seconds += seconds;
  }
  // The ring all-reduce's payload into one rank (CommStats).
  static std::size_t all_reduce_bytes(std::size_t n, int ranks) noexcept {
    return ranks <= 1 ? 0 : 2 * (static_cast<std::size_t>(ranks) - 1) * n * sizeof(float) / static_cast<std::size_t>(ranks);
  }

 private:
  std::chrono::milliseconds timeout_;
  CommStats stats_;
};

// The default timeout of a collective: long enough for a slow rank's layer on a small board, short
// enough that a dead rank is reported in CI's time.
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout{60'000};

// Each rank's result of a local check, made known to all: returns, on every rank, the ranks whose
// `ok` was false (so every rank can throw the same clear error, none waits for a rank that gave
// up).
inline std::vector<int> failed_ranks(Communicator& comm, bool ok) {
  std::vector<float> flags(static_cast<std::size_t>(comm.size()), 0.0f);
  flags[static_cast<std::size_t>(comm.rank())] = ok ? 0.0f : 1.0f;
  comm.all_reduce_sum(flags.data(), flags.size());
  std::vector<int> failed;
  for (std::size_t r = 0; r < flags.size(); ++r) {
    if (flags[r] != 0.0f) failed.push_back(static_cast<int>(r));
  }
  return failed;
}

}  // namespace stile
