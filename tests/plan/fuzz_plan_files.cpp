// libFuzzer target for the readers of the planner's input files, all outside bytes: the device
// profile (plan/device_profile.hpp), the classification heads (model/heads_file.hpp) and the
// importance profile (plan/importance.hpp). Every input goes through the strict JSON parser and
// each reader; each must refuse it with a stile::Error or accept it, and what it accepts must
// answer the lookups its users make. Anything else (a crash, a sanitizer report, another exception
// escaping) is a bug. Seeds: tests/plan/fuzz_seeds/ (a measured MiniLM profile, a two-head file,
// a MiniLM importance profile, small variants).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "stile/model/heads_file.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/pipeline_estimate.hpp"
#include "stile/plan/importance.hpp"

namespace {

template <class Read>
void refused_or_read(Read&& read) {
  try {
    read();
  } catch (const stile::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  refused_or_read([&] {
    const nlohmann::json j = stile::parse_strict_json(text, stile::device_profile_detail::kMaxJsonDepth,
                                                      "fuzz.profile.json", "the device profile");
    const stile::DeviceProfile p = stile::DeviceProfile::from_json(j, "fuzz.profile.json");
    for (const unsigned bits : p.bits) {
      (void)p.io_ms_at(bits);
      for (const std::size_t tokens : {std::size_t{0}, std::size_t{1}, std::size_t{300}}) {
        for (std::size_t m = 1; m <= p.shards_per_layer && m <= 4; ++m) {
          (void)p.compute_ms_at(bits, tokens, m);
          (void)p.compute_after_read_ms_at(bits, tokens, m);
        }
      }
    }
    // The read cost line fits whatever the numbers are, and its estimates stay numbers >= 0.
    const stile::ReadCostLine line = stile::read_cost_line(p);
    if (!(line.latency_ms >= 0) || !(line.ms_per_byte >= 0) || !(stile::estimated_row_read_ms(p) < HUGE_VAL)) {
      std::abort();
    }
    (void)p.to_json().dump();
  });
  refused_or_read([&] {
    const nlohmann::json j =
        stile::parse_strict_json(text, stile::heads_detail::kMaxJsonDepth, "fuzz.heads.json", "the heads file");
    const stile::HeadsFile h = stile::HeadsFile::from_json(j, "fuzz.heads.json");
    for (const auto& [key, stored] : h.heads) {
      const std::vector<float> e(stored.head.hidden(), 0.5f);
      (void)stored.head.predict(e);
    }
    (void)h.to_json().dump();
  });
  refused_or_read([&] {
    const nlohmann::json j = stile::parse_strict_json(text, stile::importance_detail::kMaxJsonDepth,
                                                      "fuzz.importance.json", "the importance profile");
    const stile::ImportanceProfile p = stile::ImportanceProfile::from_json(j, "fuzz.importance.json");
    (void)p.to_json().dump();
  });
  return 0;
}
