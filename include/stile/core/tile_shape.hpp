#pragma once
// Compile-time GEMM blocking, in the spirit of CuTe's shape types: the numbers a kernel unrolls
// over or sizes its buffers by are template arguments, and what must hold between them is a
// static_assert at the point of use, not a comment.
//
// The BLIS picture (docs/gemm.md): C[M x N] += A[M x K] * B[K x N], with B = W^T.
//   MR x NR  register block: the micro-kernel keeps an MR x NR accumulator tile in registers.
//   KC       depth of one packed panel: a KC x NR micro-panel of B stays in L1 while the kernel
//            sweeps MR-row slivers of A across it.
//   MC       rows of A swept per packed B block; an MC x KC block of A stays in L2.
//   NC       columns of B packed at once (per thread); a KC x NC block of B stays in L2/L3.
#include <cstddef>

namespace stile {

template <std::size_t MR_, std::size_t NR_, std::size_t KC_, std::size_t MC_, std::size_t NC_>
struct TileShape {
  static constexpr std::size_t MR = MR_;
  static constexpr std::size_t NR = NR_;
  static constexpr std::size_t KC = KC_;
  static constexpr std::size_t MC = MC_;
  static constexpr std::size_t NC = NC_;

  static_assert(MR >= 1 && MR <= 16, "MR (rows of the register tile) must be in 1..16");
  static_assert(NR >= 1 && NR <= 64 && (NR & (NR - 1)) == 0,
                "NR (columns of the register tile) must be a power of two up to 64, so it splits "
                "into whole vectors on every target");
  static_assert(KC >= 8 && KC % 8 == 0, "KC must be a positive multiple of 8");
  static_assert(MC >= MR && MC % MR == 0, "MC must be a positive multiple of MR");
  static_assert(NC >= NR && NC % NR == 0, "NC must be a positive multiple of NR");

  // Bytes of one packed B micro-panel (KC x NR floats): should stay within L1 (32 KiB on every
  // core we target), with room for the A sliver and C tile.
  static constexpr std::size_t kBMicroPanelBytes = KC * NR * sizeof(float);
  static_assert(kBMicroPanelBytes <= 32 * 1024, "a KC x NR micro-panel of B must fit in L1");

  // Vector registers the micro-kernel needs for a vector width of `lanes` floats: the MR x NR
  // accumulators, the NR/lanes B vectors of one k step and one broadcast A value.
  static constexpr std::size_t registers_needed(std::size_t lanes) {
    const std::size_t b_vectors = NR >= lanes ? NR / lanes : 1;
    return MR * b_vectors + b_vectors + 1;
  }
};

template <class T>
inline constexpr bool is_tile_shape_v = false;
template <std::size_t MR, std::size_t NR, std::size_t KC, std::size_t MC, std::size_t NC>
inline constexpr bool is_tile_shape_v<TileShape<MR, NR, KC, MC, NC>> = true;

}  // namespace stile
