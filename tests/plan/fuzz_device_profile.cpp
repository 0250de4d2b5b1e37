// libFuzzer target for the device profile reader (plan/device_profile.hpp): the strict JSON
// parser, then DeviceProfile::from_json. Any byte string must either be refused with a
// stile::Error or give a profile whose every lookup the planner makes answers or throws
// stile::Error; anything else (a crash, a sanitizer report, another exception escaping) is a bug.
// Seeds: tests/plan/fuzz_seeds/ (a profile measured on a tiny store, and small variants).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stile/plan/device_profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j = stile::io_detail::parse_strict_json(
        text, stile::device_profile_detail::kMaxJsonDepth, "fuzz.profile.json", "the device profile");
    const stile::DeviceProfile p = stile::DeviceProfile::from_json(j, "fuzz.profile.json");
    for (const unsigned bits : p.bits) {
      (void)p.io_ms_at(bits);
      for (const std::size_t tokens : {std::size_t{0}, std::size_t{1}, std::size_t{300}}) {
        for (std::size_t m = 1; m <= p.shards_per_layer && m <= 4; ++m) (void)p.compute_ms_at(bits, tokens, m);
      }
    }
    (void)p.to_json().dump();
  } catch (const stile::Error&) {
  }
  return 0;
}
