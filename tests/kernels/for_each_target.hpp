#pragma once
// Runs a test body once per Highway target that this CPU supports and stile compiled, each in its
// own Catch section, so every SIMD path is checked on the machine that runs the tests.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

// stile before Highway: stile's Highway configuration (kernels/hwy_config.hpp) must come first.
#include "stile/kernels/hwy_config.hpp"
#include "stile/kernels/active_target.hpp"

#include <hwy/targets.h>

namespace stile_test {

template <class Body>
void for_each_target(Body body) {
  const auto targets = hwy::SupportedAndGeneratedTargets();
  REQUIRE(!targets.empty());
  for (const std::int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    REQUIRE(std::string(stile::active_target_name()) == hwy::TargetName(target));
    DYNAMIC_SECTION("target " << hwy::TargetName(target)) { body(); }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace stile_test
