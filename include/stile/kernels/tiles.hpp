#pragma once
// Tile policies: which TileShape the GEMM uses on each Highway target. A host passes either a
// TileShape (the same blocking on every target) or a policy with a `For<target>` alias.
#include <cstdint>
#include <type_traits>

#include "stile/kernels/hwy_config.hpp"

#include "stile/core/tile_shape.hpp"

namespace stile {

// Register budgets behind the defaults (vector registers / float lanes per vector):
//   AVX2, x86 16 x 8: 6 x 16 keeps 12 accumulators + 2 B vectors + 1 broadcast = 15 of 16.
//   SSE4/SSSE3 16 x 4: 6 x 8 is the same 12 + 2 + 1 shape in 128-bit vectors.
//   AVX-512 32 x 16: 8 x 32 uses 16 + 2 + 1, leaving room for the epilogue's temporaries.
//   NEON 32 x 4: 6 x 16 uses 24 + 4 + 1 = 29 of 32.
// KC keeps a KC x NR micro-panel of B at 16 KiB, half of a 32 KiB L1; MC = 144 rows of A at KC
// = 256 is 144 KiB, inside a 512 KiB - 1 MiB L2; NC = 1024 keeps a packed B block at 1 MiB.
struct DefaultTiles {
  template <std::int64_t kTarget>
  using For = std::conditional_t<
      (kTarget & (HWY_AVX3 | HWY_AVX3_DL)) != 0, TileShape<8, 32, 128, 96, 1024>,
      std::conditional_t<kTarget == HWY_AVX2, TileShape<6, 16, 256, 144, 1024>,
                         std::conditional_t<(kTarget & (HWY_SSE4 | HWY_SSSE3)) != 0, TileShape<6, 8, 256, 144, 1024>,
                                            std::conditional_t<kTarget == HWY_NEON, TileShape<6, 16, 256, 144, 1024>,
                                                               TileShape<4, 8, 256, 128, 1024>>>>>;
};

// The same TileShape on every target.
template <class Shape>
struct FixedTiles {
  static_assert(is_tile_shape_v<Shape>, "FixedTiles takes a stile::TileShape");
  template <std::int64_t>
  using For = Shape;
};

// A TileShape passed where a policy is expected means FixedTiles of it.
template <class T>
using TilePolicy = std::conditional_t<is_tile_shape_v<T>, FixedTiles<T>, T>;

}  // namespace stile
