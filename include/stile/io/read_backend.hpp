#pragma once
// Positional read backends for streaming shard bytes from a store file while the engine computes.
//
// One interface, two implementations:
//   - io_uring (liburing, Linux): one ring, every request of a call in flight at once, so the
//     device sees a deep queue from a single submitting thread. With O_DIRECT the bytes go from
//     the device straight into the caller's buffer: no page-cache copy, and a measurement of the
//     device instead of the cache.
//   - pread: portable POSIX, a few threads of its own issuing blocking reads.
// open_read_backend() picks one and falls back (io_uring -> pread, O_DIRECT -> buffered) with a
// note saying why, because an engine that refuses to start on a laptop's tmpfs or inside a
// seccomp'd container is worse than one that runs a little slower and says so.
//
// io_uring is compiled in when the build defines STILE_HAVE_IO_URING=1 (CMake does when it finds
// liburing; the aarch64 cross build does not).
//
// The storage emulator that wraps these backends is in io/storage_emulator.hpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"

#if defined(STILE_HAVE_IO_URING) && STILE_HAVE_IO_URING
#include <liburing.h>
#define STILE_READ_BACKEND_IO_URING 1
#else
#define STILE_READ_BACKEND_IO_URING 0
#endif

namespace stile {

// One positional read: `out.size()` bytes at `offset` into `out`.
struct ReadRequest {
  std::uint64_t offset = 0;
  std::span<std::byte> out;
};

class ReadBackend {
 public:
  virtual ~ReadBackend() = default;
  // What reads, in words: "io_uring, O_DIRECT", "pread x4 threads, buffered", ...
  virtual std::string describe() const = 0;
  // The file's size when it was opened.
  virtual std::uint64_t file_size() const noexcept = 0;
  // Buffers and offsets/sizes must be multiples of this (4096 with O_DIRECT, else 1).
  virtual std::size_t alignment() const noexcept = 0;
  // True when reads bypass the page cache (O_DIRECT).
  virtual bool bypasses_page_cache() const noexcept = 0;
  // Results made through an emulator must say so.
  virtual bool emulated() const noexcept { return false; }
  // Reads every request; blocks until all are done. got[i] = bytes read for request i, fewer than
  // requested only at end of file (a file truncated after opening). Throws std::system_error on an
  // I/O error, std::invalid_argument on misuse (sizes, alignment). Safe to call from several
  // threads at once (calls serialize).
  virtual void read(std::span<const ReadRequest> requests, std::span<std::size_t> got) = 0;
};

enum class ReadBackendKind { automatic, io_uring, pread };

struct ReadBackendOptions {
  ReadBackendKind kind = ReadBackendKind::automatic;  // automatic: io_uring with O_DIRECT on Linux, else pread
  bool direct = true;             // O_DIRECT where the file system allows it (else buffered, with a note)
  std::size_t pread_threads = 4;  // the portable backend's threads
  std::size_t queue_depth = 64;   // io_uring submission queue entries
};

inline std::string_view to_string(ReadBackendKind kind) {
  switch (kind) {
    case ReadBackendKind::automatic: return "auto";
    case ReadBackendKind::io_uring: return "io_uring";
    case ReadBackendKind::pread: return "pread";
  }
  return "unknown";
}

inline ReadBackendKind parse_read_backend_kind(std::string_view name) {
  if (name == "auto") return ReadBackendKind::automatic;
  if (name == "io_uring") return ReadBackendKind::io_uring;
  if (name == "pread") return ReadBackendKind::pread;
  throw Error(concat("stile: unknown read backend '", name, "' (expected one of: auto, io_uring, pread)"));
}

namespace read_backend_detail {

// O_DIRECT's contract on Linux is the logical block size (512 or 4096); 4096 satisfies both, and
// it is the page size, so the page-aligned buffers callers already use qualify.
inline constexpr std::size_t kDirectAlignment = 4096;
// Large requests are split into chunks of this size: several threads (pread) or several queue
// entries (io_uring) then work on one big shard at once. A multiple of kDirectAlignment.
inline constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

inline std::string errno_text(int err) { return std::system_category().message(err); }

[[noreturn]] inline void throw_io_error(int err, const std::filesystem::path& path, std::string_view what) {
  throw std::system_error(err, std::system_category(), concat("stile: ", path.string(), ": ", what));
}

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const noexcept { return fd_; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// An open file and what the backends need to know about it.
struct OpenedFile {
  std::filesystem::path path;
  UniqueFd fd;
  std::uint64_t size = 0;
  bool direct = false;
};

inline void add_note(std::string* note, const std::string& sentence) {
  if (note == nullptr) return;
  if (!note->empty()) *note += ' ';
  *note += sentence;
}

inline UniqueFd open_fd(const std::filesystem::path& path, int extra_flags, int& err) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | extra_flags);
  } while (fd < 0 && errno == EINTR);
  err = fd < 0 ? errno : 0;
  return UniqueFd(fd);
}

// Opens `path` for reading, with O_DIRECT when asked and allowed. Some file systems refuse
// O_DIRECT at open (EINVAL: tmpfs before Linux 6.6), others accept the flag and refuse the reads
// (some FUSE and network file systems), so a direct open is confirmed by reading one aligned
// block; either refusal falls back to buffered reads with a note.
inline OpenedFile open_for_reading(const std::filesystem::path& path, bool want_direct, std::string* note) {
  OpenedFile file;
  file.path = path;
  int err = 0;
#ifdef O_DIRECT
  if (want_direct) {
    file.fd = open_fd(path, O_DIRECT, err);
    if (file.fd.get() >= 0) {
      file.direct = true;
    } else if (err == EINVAL) {
      add_note(note, concat("stile: ", path.string(), ": the file system refuses O_DIRECT (", errno_text(err),
                            "); reading through the page cache instead."));
    }
  }
#else
  if (want_direct) {
    add_note(note, concat("stile: ", path.string(),
                          ": O_DIRECT is not available on this platform; reading "
                          "through the page cache instead."));
  }
#endif
  if (file.fd.get() < 0 && (err == 0 || err == EINVAL)) file.fd = open_fd(path, 0, err);
  if (file.fd.get() < 0) fail_in_file(path.string(), "cannot open for reading (", errno_text(err), ")");

  struct stat st {};
  if (::fstat(file.fd.get(), &st) != 0) {
    const int e = errno;
    fail_in_file(path.string(), "cannot stat the open file (", errno_text(e), ")");
  }
  if (!S_ISREG(st.st_mode)) fail_in_file(path.string(), "not a regular file");
  file.size = static_cast<std::uint64_t>(st.st_size);

  if (file.direct && file.size > 0) {
    void* block = std::aligned_alloc(kDirectAlignment, kDirectAlignment);
    if (block == nullptr) throw std::bad_alloc();
    ssize_t n;
    do {
      n = ::pread(file.fd.get(), block, kDirectAlignment, 0);
    } while (n < 0 && errno == EINTR);
    const int e = n < 0 ? errno : 0;
    std::free(block);
    if (n < 0 && e == EINVAL) {
      add_note(note, concat("stile: ", path.string(), ": the file system accepts O_DIRECT but refuses direct reads (",
                            errno_text(e), "); reading through the page cache instead."));
      file.fd = open_fd(path, 0, err);
      if (file.fd.get() < 0) fail_in_file(path.string(), "cannot open for reading (", errno_text(err), ")");
      file.direct = false;
    } else if (n < 0) {
      throw_io_error(e, path, "read error");
    }
  }
  return file;
}

inline void check_requests(const OpenedFile& file, std::span<const ReadRequest> requests, std::span<std::size_t> got) {
  if (got.size() != requests.size()) {
    throw std::invalid_argument(concat("stile: ", file.path.string(), ": read() got ", got.size(), " result slots for ",
                                       requests.size(), " requests"));
  }
  if (!file.direct) return;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const ReadRequest& r = requests[i];
    const auto address = reinterpret_cast<std::uintptr_t>(r.out.data());
    if (r.offset % kDirectAlignment != 0 || r.out.size() % kDirectAlignment != 0 || address % kDirectAlignment != 0) {
      throw std::invalid_argument(
          concat("stile: ", file.path.string(), ": read request ", i, " (offset ", r.offset, ", ", r.out.size(),
                 " bytes, buffer address % 4096 = ", static_cast<std::uint64_t>(address % kDirectAlignment),
                 ") is not aligned to 4096 bytes, which O_DIRECT requires for the offset, the size and "
                 "the buffer (check ReadBackend::alignment())"));
    }
  }
}

// A piece of one request; both backends work in chunks so one large request spreads over several
// threads or queue entries.
struct Chunk {
  std::size_t request = 0;
  std::uint64_t offset = 0;
  std::byte* data = nullptr;
  std::size_t size = 0;
  std::size_t done = 0;  // bytes read so far
  bool eof = false;      // the file ended inside (or before) this chunk
};

inline std::vector<Chunk> split_into_chunks(std::span<const ReadRequest> requests) {
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const ReadRequest& r = requests[i];
    for (std::size_t pos = 0; pos < r.out.size(); pos += kChunkBytes) {
      chunks.push_back({i, r.offset + pos, r.out.data() + pos, std::min(kChunkBytes, r.out.size() - pos), 0, false});
    }
  }
  return chunks;
}

// got[i] counts the bytes of request i up to its first short chunk: the prefix that really holds
// file bytes (a later chunk could only be non-empty if the file grew again meanwhile).
inline void gather_got(std::span<const Chunk> chunks, std::span<std::size_t> got) {
  std::fill(got.begin(), got.end(), std::size_t{0});
  std::vector<bool> ended(got.size(), false);
  for (const Chunk& c : chunks) {
    if (ended[c.request]) continue;
    got[c.request] += c.done;
    if (c.done < c.size) ended[c.request] = true;
  }
}

// After a read of `n` bytes that left the chunk unfinished: is that the end of the file? A
// buffered read of 0 bytes is. With O_DIRECT the kernel returns the file's unaligned tail as a
// short read; the next read would start at an unaligned offset, which O_DIRECT refuses, so a
// short read that is not a whole number of blocks is the end of the file too.
inline bool short_read_is_eof(std::size_t n, bool direct) { return n == 0 || (direct && n % kDirectAlignment != 0); }

}  // namespace read_backend_detail

// Reads up to out.size() bytes at `offset` of the open file `fd` with pread: the one positional
// read loop of stile's file readers (the pread backend below, the shard store's reader). It
// retries interrupted calls (EINTR, EAGAIN), goes on after a short read, and asks for at most
// 1 GiB per call. Returns the bytes read: fewer than out.size() only at the end of the file (a
// read of 0 bytes; with `direct`, the file opened O_DIRECT, also a short read that is not a whole
// number of blocks) or past the largest offset off_t holds. Throws std::system_error (errno) on an
// I/O error.
inline std::size_t pread_fully(int fd, std::uint64_t offset, std::span<std::byte> out, bool direct = false) {
  std::size_t done = 0;
  while (done < out.size()) {
    if (offset + done > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) break;
    const std::size_t chunk = std::min<std::size_t>(out.size() - done, std::size_t{1} << 30);
    const ssize_t n = ::pread(fd, out.data() + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw std::system_error(errno, std::system_category());
    }
    done += static_cast<std::size_t>(n);
    if (done < out.size() && read_backend_detail::short_read_is_eof(static_cast<std::size_t>(n), direct)) break;
  }
  return done;
}

namespace read_backend_detail {

// ---------------------------------------------------------------------------------------------
// pread: the portable backend.
//
// A pool of its own threads (pread_threads - 1 workers plus the calling thread) pulls chunks off
// a shared counter. Calls serialize on one mutex: a second call's reads would only compete with
// the first for the same device, and serializing keeps one job in the pool at a time.
class PreadBackend final : public ReadBackend {
 public:
  PreadBackend(OpenedFile file, std::size_t threads) : file_(std::move(file)), threads_(threads) {
    require(threads_ >= 1, "pread_threads must be at least 1");
    workers_.reserve(threads_ - 1);
    for (std::size_t t = 0; t + 1 < threads_; ++t) workers_.emplace_back([this] { worker_loop(); });
  }
  PreadBackend(const PreadBackend&) = delete;
  PreadBackend& operator=(const PreadBackend&) = delete;
  ~PreadBackend() override {
    {
      std::lock_guard lock(pool_mutex_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& w : workers_) w.join();
  }

  std::string describe() const override {
    return concat("pread x", threads_, threads_ == 1 ? " thread" : " threads",
                  file_.direct ? ", O_DIRECT" : ", buffered");
  }
  std::uint64_t file_size() const noexcept override { return file_.size; }
  std::size_t alignment() const noexcept override { return file_.direct ? kDirectAlignment : 1; }
  bool bypasses_page_cache() const noexcept override { return file_.direct; }

  void read(std::span<const ReadRequest> requests, std::span<std::size_t> got) override {
    check_requests(file_, requests, got);
    std::lock_guard call_lock(call_mutex_);
    Job job;
    job.chunks = split_into_chunks(requests);
    if (job.chunks.size() > 1 && !workers_.empty()) {
      {
        std::lock_guard lock(pool_mutex_);
        job_ = &job;
        ++generation_;
      }
      work_cv_.notify_all();
      run(job);
      // No worker may touch `job` once this returns: stop new ones joining, wait for the rest.
      std::unique_lock lock(pool_mutex_);
      job_ = nullptr;
      done_cv_.wait(lock, [this] { return active_ == 0; });
    } else {
      run(job);
    }
    if (job.error != 0) throw_io_error(job.error, file_.path, "read error");
    gather_got(job.chunks, got);
  }

 private:
  struct Job {
    std::vector<Chunk> chunks;
    std::atomic<std::size_t> next{0};
    std::atomic<int> error{0};  // the first errno seen; stops the others
  };

  void run(Job& job) const {
    while (job.error.load(std::memory_order_relaxed) == 0) {
      const std::size_t i = job.next.fetch_add(1, std::memory_order_relaxed);
      if (i >= job.chunks.size()) return;
      Chunk& c = job.chunks[i];
      try {
        c.done = pread_fully(file_.fd.get(), c.offset, std::span(c.data, c.size), file_.direct);
      } catch (const std::system_error& e) {
        int expected = 0;
        job.error.compare_exchange_strong(expected, e.code().value());
        return;
      }
      c.eof = c.done < c.size;
    }
  }

  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock lock(pool_mutex_);
        work_cv_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
        if (stop_) return;
        seen = generation_;
        job = job_;
        ++active_;
      }
      run(*job);
      {
        std::lock_guard lock(pool_mutex_);
        --active_;
      }
      done_cv_.notify_all();
    }
  }

  OpenedFile file_;
  std::size_t threads_;
  std::mutex call_mutex_;
  std::mutex pool_mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  std::size_t active_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

#if STILE_READ_BACKEND_IO_URING
// ---------------------------------------------------------------------------------------------
// io_uring: one ring, guarded by a mutex (a ring is a single-producer queue; a second caller
// waits). Each call keeps up to queue_depth chunks in flight, resubmits the remainder of short
// reads and retries -EINTR/-EAGAIN; the first other error is thrown once nothing is in flight,
// so the kernel never writes into a buffer the caller believes is done.
class IoUringBackend final : public ReadBackend {
 public:
  // Returns null, with why the kernel will not give us a usable ring in `why`, or the backend
  // (which then owns `file`).
  static std::unique_ptr<IoUringBackend> create(OpenedFile& file, std::size_t depth, std::string& why) {
    auto backend = std::unique_ptr<IoUringBackend>(new IoUringBackend());
    const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &backend->ring_, 0);
    if (rc < 0) {
      why = concat("io_uring_queue_init: ", errno_text(-rc));
      return nullptr;
    }
    backend->ring_ready_ = true;
    // IORING_OP_READ arrived in Linux 5.6; a 5.1-5.5 ring would fail every read with EINVAL.
    io_uring_probe* probe = io_uring_get_probe_ring(&backend->ring_);
    const bool can_read = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!can_read) {
      why = "the kernel's io_uring has no IORING_OP_READ (Linux < 5.6)";
      return nullptr;
    }
    backend->depth_ = depth;
    backend->file_ = std::move(file);
    return backend;
  }
  IoUringBackend(const IoUringBackend&) = delete;
  IoUringBackend& operator=(const IoUringBackend&) = delete;
  ~IoUringBackend() override {
    if (ring_ready_) io_uring_queue_exit(&ring_);
  }

  std::string describe() const override { return file_.direct ? "io_uring, O_DIRECT" : "io_uring, buffered"; }
  std::uint64_t file_size() const noexcept override { return file_.size; }
  std::size_t alignment() const noexcept override { return file_.direct ? kDirectAlignment : 1; }
  bool bypasses_page_cache() const noexcept override { return file_.direct; }

  void read(std::span<const ReadRequest> requests, std::span<std::size_t> got) override {
    check_requests(file_, requests, got);
    std::vector<Chunk> chunks = split_into_chunks(requests);
    std::lock_guard lock(mutex_);
    if (broken_ != 0) throw_io_error(broken_, file_.path, "the io_uring ring failed earlier");

    std::vector<std::size_t> ready;  // chunk indices waiting to be (re)submitted, used as a stack
    ready.reserve(chunks.size());
    for (std::size_t i = chunks.size(); i-- > 0;) ready.push_back(i);
    std::size_t in_flight = 0;
    int error = 0;

    while (in_flight > 0 || (error == 0 && !ready.empty())) {
      while (error == 0 && !ready.empty() && in_flight < depth_) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;  // cannot happen with in_flight < depth, but never spin on it
        const std::size_t i = ready.back();
        ready.pop_back();
        Chunk& c = chunks[i];
        io_uring_prep_read(sqe, file_.fd.get(), c.data + c.done, static_cast<unsigned>(c.size - c.done),
                           c.offset + c.done);
        io_uring_sqe_set_data64(sqe, i);
        ++in_flight;
      }
      const int rc = io_uring_submit_and_wait(&ring_, 1);
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        // Prepared entries may still sit in the submission queue with pointers into this call's
        // buffers; nothing safe can be done with the ring after this.
        broken_ = -rc;
        throw_io_error(-rc, file_.path, "io_uring submit failed");
      }
      unsigned head;
      io_uring_cqe* cqe;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        --in_flight;
        const std::size_t i = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
        Chunk& c = chunks[i];
        const int res = cqe->res;
        if (res == -EINTR || res == -EAGAIN) {
          ready.push_back(i);
        } else if (res < 0) {
          if (error == 0) error = -res;
        } else {
          c.done += static_cast<std::size_t>(res);
          if (c.done < c.size) {
            if (short_read_is_eof(static_cast<std::size_t>(res), file_.direct)) {
              c.eof = true;
            } else {
              ready.push_back(i);
            }
          }
        }
      }
      io_uring_cq_advance(&ring_, seen);
    }
    if (error != 0) throw_io_error(error, file_.path, "read error");
    gather_got(chunks, got);
  }

 private:
  IoUringBackend() = default;

  OpenedFile file_;
  std::size_t depth_ = 0;
  io_uring ring_{};
  bool ring_ready_ = false;
  int broken_ = 0;
  std::mutex mutex_;
};
#endif  // STILE_READ_BACKEND_IO_URING

}  // namespace read_backend_detail

// Opens `path` for reading with the chosen backend. Falls back (io_uring -> pread, direct ->
// buffered) when the system refuses, and says why in *note (cleared first; empty when nothing
// fell back). Throws stile::Error naming the file when the file itself cannot be opened.
inline std::unique_ptr<ReadBackend> open_read_backend(const std::filesystem::path& path,
                                                      const ReadBackendOptions& options = {},
                                                      std::string* note = nullptr) {
  namespace d = read_backend_detail;
  require(options.pread_threads >= 1, "ReadBackendOptions::pread_threads must be at least 1");
  require(options.queue_depth >= 1 && options.queue_depth <= 32768,
          "ReadBackendOptions::queue_depth must be in 1..32768");
  if (note != nullptr) note->clear();
  d::OpenedFile file = d::open_for_reading(path, options.direct, note);

  if (options.kind == ReadBackendKind::pread) {
    return std::make_unique<d::PreadBackend>(std::move(file), options.pread_threads);
  }
  // automatic and io_uring: io_uring where it works, else pread with a note (an explicit
  // io_uring request is not an error: the note says it was not honoured).
  std::string why;
#if STILE_READ_BACKEND_IO_URING
  std::string ring_error;
  if (auto ring = d::IoUringBackend::create(file, options.queue_depth, ring_error)) return ring;
  why = concat("io_uring is unavailable (", ring_error, ")");
#elif defined(__linux__)
  why = "stile was built without io_uring (liburing not found)";
#else
  if (options.kind == ReadBackendKind::io_uring) why = "io_uring exists only on Linux";
#endif
  auto fallback = std::make_unique<d::PreadBackend>(std::move(file), options.pread_threads);
  if (!why.empty()) {
    d::add_note(note,
                concat("stile: ", path.string(), ": ", why, "; reading with ", fallback->describe(), " instead."));
  }
  return fallback;
}

}  // namespace stile
