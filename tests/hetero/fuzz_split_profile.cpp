// libFuzzer target for the split profile's reader (plan/split_predictor.hpp), outside bytes: each
// input goes through the strict JSON parser and SplitProfile::from_json, which must refuse it with
// a stile::Error or accept it; what it accepts must serialize again and answer the predictor's
// lookups (choose_split on the first two processors it names). Anything else (a crash, a sanitizer
// report, another exception escaping) is a bug. Seed: fuzz_seeds/split_profile.json (measured here).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stile/io/strict_json.hpp"
#include "stile/plan/split_predictor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json j =
        stile::parse_strict_json(text, stile::SplitProfile::kMaxJsonDepth, "fuzz.split.json", "the split profile");
    const stile::SplitProfile p = stile::SplitProfile::from_json(j, "fuzz.split.json");
    (void)p.to_json().dump();
    if (p.fits.size() >= 2) {
      const std::array<stile::SplitSide, 2> sides{stile::SplitSide{p.fits.front().processor, stile::LinearFormat::kInt8, 16},
                                                  stile::SplitSide{p.fits.back().processor, stile::LinearFormat::kF16, 32}};
      (void)stile::choose_split(p, sides, stile::SplitLayerShape{{7, 3}, 64, 4, 128, stile::NormFormat::kF32});
    }
  } catch (const stile::Error&) {
  }
  return 0;
}
