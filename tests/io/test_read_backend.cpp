// The read backends (io/read_backend.hpp) and the storage emulator (io/storage_emulator.hpp):
// every backend returns the bytes of a temporary file of random bytes at aligned offsets, short
// only where the file ends (also when it was truncated after opening); O_DIRECT misuse is a clear
// error; names parse or fail clearly; the emulator returns the same bytes, never faster than its
// model, and says that it emulates; concurrent callers all get their bytes.
#include "stile/io/read_backend.hpp"
#include "stile/io/storage_emulator.hpp"

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/core/aligned_buffer.hpp"

using Catch::Contains;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kPage = 4096;
// Not a multiple of 4096: the last block is a partial tail, as in a real store file.
constexpr std::size_t kFileBytes = 3 * (std::size_t{1} << 20) / 2 + 1234;

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::uint64_t s = seed;
  for (std::byte& b : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<std::byte>(s >> 56);
  }
  return out;
}

// A file of random bytes under the system's temporary directory, removed at the end.
struct TempFile {
  fs::path path;
  std::vector<std::byte> bytes;
  explicit TempFile(std::size_t n, fs::path dir = fs::temp_directory_path()) {
    path = dir / ("stile_read_backend_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".bin");
    bytes = random_bytes(n, 0x5eed + counter());
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

struct Span {
  std::uint64_t offset;
  std::size_t size;
};

// Aligned requests over the file: small, chunk-crossing (> 1 MiB), repeated, empty, one that
// crosses the end of the file (short) and one wholly past it (0 bytes).
const std::vector<Span> kSpans = {
    {0, kPage},
    {8 * kPage, 3 * kPage},
    {kPage, (std::size_t{1} << 20) + 5 * kPage},
    {0, kPage},
    {40 * kPage, 0},
    {(kFileBytes / kPage - 1) * kPage, 4 * kPage},  // crosses EOF
    {(kFileBytes / kPage + 8) * kPage, 2 * kPage},  // past EOF
};

std::size_t expected_got(const Span& s, std::uint64_t file_bytes) {
  if (s.offset >= file_bytes) return 0;
  return static_cast<std::size_t>(std::min<std::uint64_t>(s.size, file_bytes - s.offset));
}

// Reads `spans` through `backend` into page-aligned buffers and compares every byte and every
// count with `bytes` (the file's content, `file_bytes` long now). Returns what differs, empty when
// all is right; no Catch2 assertions, so threads may call it.
std::string read_mismatch(stile::ReadBackend& backend, const std::vector<std::byte>& bytes, std::uint64_t file_bytes,
                          const std::vector<Span>& spans) {
  std::vector<stile::AlignedBuffer<std::byte, kPage>> buffers(spans.size());
  std::vector<stile::ReadRequest> requests;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    buffers[i].resize(spans[i].size);
    if (spans[i].size != 0) std::memset(buffers[i].data(), 0xAB, spans[i].size);
    requests.push_back({spans[i].offset, buffers[i].span()});
  }
  std::vector<std::size_t> got(spans.size(), 12345);
  backend.read(requests, got);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const std::string where = backend.describe() + ": request " + std::to_string(i) + " at " +
                              std::to_string(spans[i].offset) + ", " + std::to_string(spans[i].size) + " bytes: ";
    const std::size_t want = expected_got(spans[i], file_bytes);
    if (got[i] != want) return where + "got " + std::to_string(got[i]) + ", expected " + std::to_string(want);
    if (want != 0 && std::memcmp(buffers[i].data(), bytes.data() + spans[i].offset, want) != 0) {
      return where + "wrong bytes";
    }
  }
  return {};
}

void check_reads(stile::ReadBackend& backend, const std::vector<std::byte>& bytes, std::uint64_t file_bytes,
                 const std::vector<Span>& spans = kSpans) {
  REQUIRE(read_mismatch(backend, bytes, file_bytes, spans) == "");
}

stile::ReadBackendOptions options_for(stile::ReadBackendKind kind, bool direct) {
  stile::ReadBackendOptions o;
  o.kind = kind;
  o.direct = direct;
  o.pread_threads = 3;
  o.queue_depth = 4;  // fewer entries than chunks: the queue is refilled as reads complete
  return o;
}

}  // namespace

TEST_CASE("every backend reads the file's bytes, short only at the end of the file", "[read_backend]") {
  TempFile file(kFileBytes);
  for (auto kind :
       {stile::ReadBackendKind::automatic, stile::ReadBackendKind::io_uring, stile::ReadBackendKind::pread}) {
    for (bool direct : {true, false}) {
      std::string note;
      auto backend = stile::open_read_backend(file.path, options_for(kind, direct), &note);
      INFO(backend->describe() << " (note: " << note << ")");
      CHECK(backend->file_size() == kFileBytes);
      CHECK(!backend->emulated());
      CHECK(backend->alignment() == (backend->bypasses_page_cache() ? kPage : 1));
      check_reads(*backend, file.bytes, kFileBytes);
      // A second call on the same backend (the ring and the pool are reused).
      check_reads(*backend, file.bytes, kFileBytes, {{kPage, 2 * kPage}, {0, 64 * kPage}});
      // No requests at all.
      backend->read({}, {});
    }
  }
}

TEST_CASE("pread with one thread and buffered reads at unaligned offsets", "[read_backend]") {
  TempFile file(kFileBytes);
  stile::ReadBackendOptions o = options_for(stile::ReadBackendKind::pread, false);
  o.pread_threads = 1;
  auto backend = stile::open_read_backend(file.path, o);
  CHECK(backend->describe() == "pread x1 thread, buffered");
  CHECK(backend->alignment() == 1);
  std::vector<std::byte> a(1000), b(5);
  std::vector<stile::ReadRequest> requests = {{17, a}, {kFileBytes - 2, b}};
  std::vector<std::size_t> got(2);
  backend->read(requests, got);
  CHECK(got[0] == 1000);
  CHECK(got[1] == 2);
  CHECK(std::memcmp(a.data(), file.bytes.data() + 17, 1000) == 0);
  CHECK(std::memcmp(b.data(), file.bytes.data() + kFileBytes - 2, 2) == 0);
}

#if defined(STILE_HAVE_IO_URING) && STILE_HAVE_IO_URING
TEST_CASE("automatic picks io_uring with O_DIRECT here", "[read_backend]") {
  // The build machine's /tmp (ext4) allows both; a note explains it when this system refuses.
  TempFile file(kFileBytes);
  std::string note;
  auto backend = stile::open_read_backend(file.path, {}, &note);
  INFO("note: " << note);
  if (!note.empty()) {
    WARN("this system refuses io_uring or O_DIRECT: " << note);
    CHECK_THAT(note, Contains(file.path.string()));
    return;
  }
  CHECK(backend->describe() == "io_uring, O_DIRECT");
  CHECK(backend->bypasses_page_cache());
  CHECK(backend->alignment() == kPage);
}
#else
TEST_CASE("without io_uring compiled in, io_uring falls back to pread with a note", "[read_backend]") {
  TempFile file(kFileBytes);
  std::string note;
  auto backend = stile::open_read_backend(file.path, options_for(stile::ReadBackendKind::io_uring, false), &note);
  CHECK_THAT(backend->describe(), Contains("pread"));
  CHECK_THAT(note, Contains("built without io_uring"));
  CHECK_THAT(note, Contains(file.path.string()));
}
#endif

TEST_CASE("O_DIRECT refuses misaligned buffers, offsets and sizes with a clear error", "[read_backend]") {
  TempFile file(kFileBytes);
  for (auto kind : {stile::ReadBackendKind::io_uring, stile::ReadBackendKind::pread}) {
    auto backend = stile::open_read_backend(file.path, options_for(kind, true));
    if (!backend->bypasses_page_cache()) {
      WARN("O_DIRECT refused here; nothing to check for " << backend->describe());
      continue;
    }
    stile::AlignedBuffer<std::byte, kPage> buffer(4 * kPage);
    std::vector<std::size_t> got(1);
    const std::vector<stile::ReadRequest> bad = {
        {0, buffer.span().subspan(1, 2 * kPage)},  // buffer address
        {100, buffer.span().first(2 * kPage)},     // offset
        {0, buffer.span().first(kPage + 1)},       // size
    };
    for (const stile::ReadRequest& r : bad) {
      INFO(backend->describe());
      CHECK_THROWS_AS(backend->read({&r, 1}, got), std::invalid_argument);
      CHECK_THROWS_WITH(backend->read({&r, 1}, got), Contains("not aligned to 4096") && Contains(file.path.string()));
    }
    // The backend still works after refusing.
    check_reads(*backend, file.bytes, kFileBytes);
  }
}

TEST_CASE("a result slot per request", "[read_backend]") {
  TempFile file(kPage);
  auto backend = stile::open_read_backend(file.path, options_for(stile::ReadBackendKind::pread, false));
  std::vector<std::byte> a(10);
  const stile::ReadRequest r{0, a};
  std::vector<std::size_t> got(2);
  CHECK_THROWS_WITH(backend->read({&r, 1}, got), Contains("2 result slots for 1 requests"));
}

TEST_CASE("a file truncated after opening gives short reads", "[read_backend]") {
  for (auto kind : {stile::ReadBackendKind::io_uring, stile::ReadBackendKind::pread}) {
    for (bool direct : {true, false}) {
      TempFile file(kFileBytes);
      auto backend = stile::open_read_backend(file.path, options_for(kind, direct));
      INFO(backend->describe());
      const std::uint64_t now_bytes = (std::size_t{1} << 20) + 100;  // unaligned on purpose
      fs::resize_file(file.path, now_bytes);
      CHECK(backend->file_size() == kFileBytes);  // the size when opened
      check_reads(*backend, file.bytes, now_bytes);
      check_reads(*backend, file.bytes, now_bytes,
                  {{(std::size_t{1} << 20) - kPage, 4 * kPage}, {0, 2 << 20}, {2 << 20, kPage}});
      fs::resize_file(file.path, 0);
      check_reads(*backend, file.bytes, 0);
    }
  }
}

TEST_CASE("opening a missing file or a directory names it", "[read_backend]") {
  const fs::path missing = fs::temp_directory_path() / "stile_read_backend_no_such_file.bin";
  CHECK_THROWS_AS(stile::open_read_backend(missing), stile::Error);
  CHECK_THROWS_WITH(stile::open_read_backend(missing),
                    Contains(missing.string()) && Contains("cannot open") && Contains("No such file"));
  CHECK_THROWS_WITH(stile::open_read_backend(fs::temp_directory_path()), Contains("not a regular file"));
  stile::ReadBackendOptions o;
  o.pread_threads = 0;
  TempFile file(kPage);
  CHECK_THROWS_WITH(stile::open_read_backend(file.path, o), Contains("pread_threads"));
}

TEST_CASE("a file system that refuses O_DIRECT falls back to buffered reads with a note", "[read_backend]") {
  // /dev/shm is tmpfs, which refused O_DIRECT before Linux 6.6; newer kernels accept it, and then
  // there is nothing to fall back from.
  if (!fs::is_directory("/dev/shm")) return;
  TempFile file(kFileBytes, "/dev/shm");
  std::string note;
  auto backend = stile::open_read_backend(file.path, options_for(stile::ReadBackendKind::pread, true), &note);
  if (backend->bypasses_page_cache()) {
    CHECK(note.empty());
  } else {
    CHECK_THAT(note, Contains("O_DIRECT") && Contains(file.path.string()));
  }
  check_reads(*backend, file.bytes, kFileBytes);
}

TEST_CASE("backend kinds parse and print", "[read_backend]") {
  using K = stile::ReadBackendKind;
  for (K k : {K::automatic, K::io_uring, K::pread}) CHECK(stile::parse_read_backend_kind(stile::to_string(k)) == k);
  CHECK(stile::to_string(K::automatic) == "auto");
  CHECK_THROWS_AS(stile::parse_read_backend_kind("uring"), stile::Error);
  CHECK_THROWS_WITH(stile::parse_read_backend_kind("uring"), Contains("'uring'") && Contains("auto, io_uring, pread"));
}

TEST_CASE("storage profiles", "[read_backend][emulator]") {
  const auto names = stile::storage_profile_names();
  CHECK(names == std::vector<std::string>{"emmc", "sd", "nvme", "none"});
  for (const std::string& n : names) CHECK(stile::storage_profile(n).name == n);
  CHECK(stile::storage_profile("emmc").bandwidth_bytes_per_s == 80e6);
  CHECK(stile::storage_profile("none").bandwidth_bytes_per_s == 0);
  CHECK(stile::storage_profile("none").latency_s == 0);
  CHECK(stile::storage_profile("sd").bandwidth_bytes_per_s < stile::storage_profile("emmc").bandwidth_bytes_per_s);
  CHECK_THROWS_AS(stile::storage_profile("ssd"), stile::Error);
  CHECK_THROWS_WITH(stile::storage_profile("ssd"), Contains("'ssd'") && Contains("emmc, sd, nvme, none"));
}

TEST_CASE("the emulator delays reads to the model and returns the same bytes", "[read_backend][emulator]") {
  TempFile file(kFileBytes);
  for (auto kind : {stile::ReadBackendKind::automatic, stile::ReadBackendKind::pread}) {
    auto inner = stile::open_read_backend(file.path, options_for(kind, true));
    const std::string inner_name = inner->describe();
    const stile::StorageProfile profile{"test", 50e6, 2e-3};
    auto backend = stile::emulate_storage(std::move(inner), profile);
    CHECK(backend->emulated());
    CHECK_THAT(backend->describe(),
               Contains("emulat") && Contains(inner_name) && Contains("50 MB/s") && Contains("2 ms per request"));
    CHECK(backend->file_size() == kFileBytes);

    const std::vector<Span> spans = {{0, 64 * kPage}, {64 * kPage, 64 * kPage}, {0, 0}, {128 * kPage, 32 * kPage}};
    double model_s = 0;
    for (const Span& s : spans) {
      if (s.size != 0) model_s += profile.latency_s + static_cast<double>(s.size) / profile.bandwidth_bytes_per_s;
    }
    const auto start = std::chrono::steady_clock::now();
    check_reads(*backend, file.bytes, kFileBytes, spans);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(backend->describe() << ": " << elapsed << " s, model " << model_s << " s");
    CHECK(elapsed >= model_s - 1e-6);  // a lower bound only: the model is the emulator's contract
  }
  // Named profiles describe themselves; "none" adds nothing.
  auto emmc = stile::emulate_storage(stile::open_read_backend(file.path), stile::storage_profile("emmc"));
  CHECK_THAT(emmc->describe(), Contains("emmc emulator (80 MB/s, 0.3 ms per request)"));
  auto nvme = stile::emulate_storage(stile::open_read_backend(file.path), stile::storage_profile("nvme"));
  CHECK_THAT(nvme->describe(), Contains("nvme emulator (2000 MB/s, 60 us per request)"));
  auto plain = stile::emulate_storage(stile::open_read_backend(file.path), stile::storage_profile("none"));
  CHECK(!plain->emulated());
  CHECK_THAT(plain->describe(), !Contains("emulat"));
  CHECK_THROWS_WITH(stile::emulate_storage(stile::open_read_backend(file.path), {"bad", -1, 0}), Contains("'bad'"));
}

TEST_CASE("two backends on one emulated device queue behind each other", "[read_backend][emulator]") {
  // Two readers of one chip (an engine and a background reader): each read costs 20 ms of the
  // model; started together from two threads, the later one ends no sooner than 40 ms after the
  // start (a lower bound, the emulator's contract). Each gets its own bytes.
  TempFile file(kFileBytes);
  const stile::StorageProfile profile{"test", 0, 20e-3};
  const auto device = std::make_shared<stile::EmulatedDevice>();
  auto a = stile::emulate_storage(stile::open_read_backend(file.path), profile, device);
  auto b = stile::emulate_storage(stile::open_read_backend(file.path), profile, device);
  const std::vector<Span> spans = {{0, 4 * kPage}};
  std::string problems[2];
  const auto start = std::chrono::steady_clock::now();
  std::thread other([&] { problems[1] = read_mismatch(*b, file.bytes, kFileBytes, spans); });
  problems[0] = read_mismatch(*a, file.bytes, kFileBytes, spans);
  other.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(problems[0].empty());
  CHECK(problems[1].empty());
  CHECK(elapsed >= 2 * profile.latency_s - 1e-6);
}

TEST_CASE("concurrent callers all get their bytes", "[read_backend][emulator]") {
  TempFile file(kFileBytes);
  std::vector<std::unique_ptr<stile::ReadBackend>> backends;
  for (auto kind : {stile::ReadBackendKind::io_uring, stile::ReadBackendKind::pread}) {
    backends.push_back(stile::open_read_backend(file.path, options_for(kind, true)));
  }
  backends.push_back(stile::emulate_storage(
      stile::open_read_backend(file.path, options_for(stile::ReadBackendKind::pread, false)), {"fast", 4e9, 50e-6}));
  for (auto& backend : backends) {
    INFO(backend->describe());
    std::string problems[2];
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        try {
          for (int round = 0; round < 10 && problems[t].empty(); ++round) {
            problems[t] = read_mismatch(*backend, file.bytes, kFileBytes, kSpans);
          }
        } catch (const std::exception& e) {
          problems[t] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(problems[0] == "");
    CHECK(problems[1] == "");
  }
}
