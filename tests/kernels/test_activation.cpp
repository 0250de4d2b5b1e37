// GELU (and the erf inside it) against std::erf in double, on every supported target.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "stile/kernels/activation.hpp"
#include "stile/kernels/hwy_config.hpp"  // before Highway

#include <hwy/targets.h>

TEST_CASE("gelu matches 0.5 x (1 + erf(x / sqrt 2)) on every target", "[activation]") {
  std::vector<float> xs;
  for (float x = -12.0f; x <= 12.0f; x += 0.00390625f) xs.push_back(x);
  xs.push_back(0.0f);
  xs.push_back(-0.0f);
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::vector<float> y = xs;
    // An odd length exercises the tail path.
    stile::gelu_inplace(y.data(), y.size() - 1);
    double worst = 0.0;
    for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
      const double x = xs[i];
      const double ref = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
      // In float, 0.5 x (1 + erf) carries an error of about eps |x| / 2 wherever 1 + erf
      // rounds (the reference implementations compute the same formula): scale by max(1, |x|).
      worst = std::max(worst, std::abs(y[i] - ref) / std::max(1.0, std::abs(x)));
    }
    INFO("target " << hwy::TargetName(target) << " worst error " << worst);
    CHECK(worst <= 3e-7);          // about 2.5 float epsilons; targets without FMA reach 2.1e-7
    CHECK(y.back() == xs.back());  // past n: untouched
  }
  hwy::SetSupportedTargetsForTest(0);
}
