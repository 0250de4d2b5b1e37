#pragma once
// A host's own tile shape with small cache blocks (MC 9, KC 16, NC 24), so that small problems
// cross every block: 3 x 8 register tiles, and 1 x 8 on the scalar targets, where 3 x 8 unrolls
// to 24 scalar accumulators and was a quarter of the compile time of the tests that use it.
#include <cstdint>
#include <type_traits>

#include "stile/kernels/hwy_config.hpp"
#include "stile/core/tile_shape.hpp"

#include <hwy/targets.h>

namespace stile_test {

struct SmallHostTiles {
  template <std::int64_t kTarget>
  using For = std::conditional_t<(kTarget & (HWY_SCALAR | HWY_EMU128)) != 0, stile::TileShape<1, 8, 16, 9, 24>,
                                 stile::TileShape<3, 8, 16, 9, 24>>;
};

}  // namespace stile_test
