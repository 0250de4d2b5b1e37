// libFuzzer target for the fault-script parser (io/fault_injection.hpp), whose text comes from the
// command line (`run --inject`, the soak command): every input must be refused with a stile::Error
// or parsed, and a parsed script must drive the injecting backend over a few reads (of an
// in-memory file) without a crash; a read it fails must fail with std::system_error. Late rules
// are run with their delays cut to zero (a fuzz input may ask for a minute). Seeds:
// tests/io/fuzz_seeds_faults/.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "stile/io/fault_injection.hpp"

namespace {

// A 64 KiB file of a known pattern, in memory.
class MemoryBackend final : public stile::ReadBackend {
 public:
  std::string describe() const override { return "memory"; }
  std::uint64_t file_size() const noexcept override { return 65536; }
  std::size_t alignment() const noexcept override { return 1; }
  bool bypasses_page_cache() const noexcept override { return false; }
  void read(std::span<const stile::ReadRequest> requests, std::span<std::size_t> got) override {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      for (std::size_t b = 0; b < requests[i].out.size(); ++b) {
        requests[i].out[b] = static_cast<std::byte>((requests[i].offset + b) * 31u);
      }
      got[i] = requests[i].out.size();
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  stile::FaultScript script;
  try {
    script = stile::parse_fault_script(text);
  } catch (const stile::Error&) {
    return 0;
  }
  for (stile::FaultRule& r : script.rules) {
    r.min_delay_ms = 0;
    r.factor_lo = r.factor_hi = 1;
  }
  auto faults = std::make_shared<stile::FaultInjector>(script);
  std::unique_ptr<stile::ReadBackend> backend = stile::inject_faults(std::make_unique<MemoryBackend>(), faults);
  std::vector<std::byte> buffer(3 * 1000);
  for (int call = 0; call < 8; ++call) {
    const std::vector<stile::ReadRequest> requests = {{static_cast<std::uint64_t>(call) * 100, std::span(buffer).first(1000)},
                                                      {5000, std::span(buffer).subspan(1000, 1000)},
                                                      {7, std::span(buffer).subspan(2000, 1 + call)}};
    std::vector<std::size_t> got(requests.size());
    try {
      backend->read(requests, got);
    } catch (const std::system_error&) {
      continue;
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] > requests[i].out.size()) __builtin_trap();
    }
  }
  if (faults->reads() != 24) __builtin_trap();
  return 0;
}
