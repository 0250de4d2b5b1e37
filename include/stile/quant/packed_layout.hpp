#pragma once
// The memory (and on-disk) layout of a quantized weight matrix W [rows x cols], W[n][k] being
// output n, input k (a PyTorch Linear weight). Shared by the quantizer that writes it and the
// GEMM codec that decodes it (kernels/dict-inl.h), and specified for users in docs/format.md.
//
// Rows are taken in groups of kGroupRows = 16 (the last group zero-padded). A group is stored
// k-major: for each column k, one "slab" holds the 16 values W[16g + j][k], j = 0..15. So a slab
// is exactly one k-step of a 16-wide GEMM panel, and panels of width 8 or 32 are a half or two
// groups: decoding never depends on the SIMD target the store is read on.
//
//   bits 32: a slab is 16 floats (64 bytes).
//   bits k in 2..6: a slab is 16 indices of k bits into a dictionary of 2^k centroids, in 2k
//   bytes, split into bit planes that SIMD lanes extract with one variable shift and a mask:
//     low plane:  bits 0..3 of each index if k >= 4 (8 bytes: lane j at bits 4j..4j+3 of a
//                 little-endian u64), else bits 0..1 (4 bytes: lane j at bits 2j..2j+1 of a
//                 little-endian u32);
//     high plane: the remaining k - 4 or k - 2 bits (none for k = 2 and 4): one bit (2 bytes:
//                 lane j at bit j of a little-endian u16) for k = 3 and 5, two bits (4 bytes,
//                 like the low 2-bit plane) for k = 6. It follows the low plane.
//   Padding rows of the last group have index 0 (or 0.0f at 32 bits).
//
// Outliers (weights kept exactly in fp32) are listed beside the slabs, sorted by their slab
// position key = (group * cols + k) * 16 + j, so a panel's outliers are one contiguous run.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "stile/core/error.hpp"

namespace stile::quant {

inline constexpr std::size_t kGroupRows = 16;

inline constexpr bool is_supported_bits(unsigned bits) noexcept { return (bits >= 2 && bits <= 6) || bits == 32; }

inline void require_supported_bits(unsigned bits) {
  require(is_supported_bits(bits),
          "quantized weights: " + std::to_string(bits) + " bits is not supported (2..6 or 32)");
}

// Bytes of one slab (16 values of one column of one row group).
inline constexpr std::size_t slab_bytes(unsigned bits) noexcept {
  return bits == 32 ? kGroupRows * sizeof(float) : 2 * std::size_t{bits};
}

inline constexpr std::size_t row_groups(std::size_t rows) noexcept { return (rows + kGroupRows - 1) / kGroupRows; }

// Bytes of the slabs of a rows x cols matrix.
inline constexpr std::size_t packed_bytes(std::size_t rows, std::size_t cols, unsigned bits) noexcept {
  return row_groups(rows) * cols * slab_bytes(bits);
}

// Bits of the low plane and the high plane of a k-bit index.
inline constexpr unsigned low_plane_bits(unsigned bits) noexcept { return bits >= 4 ? 4 : 2; }
inline constexpr unsigned high_plane_bits(unsigned bits) noexcept { return bits - low_plane_bits(bits); }
// Bytes of a plane of 16 fields of w bits.
inline constexpr std::size_t plane_bytes(unsigned w) noexcept { return 2 * std::size_t{w}; }

// Packs 16 indices (each < 2^bits) into one slab of slab_bytes(bits) bytes.
inline void pack_slab(unsigned bits, const std::uint8_t* idx, std::uint8_t* slab) {
  const unsigned lo = low_plane_bits(bits), hi = high_plane_bits(bits);
  std::uint64_t low = 0, high = 0;
  for (std::size_t j = 0; j < kGroupRows; ++j) {
    low |= std::uint64_t(idx[j] & ((1u << lo) - 1)) << (lo * j);
    if (hi != 0) high |= std::uint64_t(idx[j] >> lo) << (hi * j);
  }
  // Little-endian byte order, whatever the host's.
  for (std::size_t b = 0; b < plane_bytes(lo); ++b) slab[b] = std::uint8_t(low >> (8 * b));
  for (std::size_t b = 0; b < plane_bytes(hi); ++b) slab[plane_bytes(lo) + b] = std::uint8_t(high >> (8 * b));
}

// Index of lane j (0..15) of a slab: the scalar reference of the SIMD decoder.
inline unsigned slab_index(unsigned bits, const std::uint8_t* slab, std::size_t j) {
  const unsigned lo = low_plane_bits(bits), hi = high_plane_bits(bits);
  auto field = [](const std::uint8_t* plane, unsigned w, std::size_t lane) {
    const std::size_t bit = w * lane;
    const unsigned two =
        unsigned(plane[bit / 8]) | (bit / 8 + 1 < plane_bytes(w) ? unsigned(plane[bit / 8 + 1]) << 8 : 0u);
    return (two >> (bit % 8)) & ((1u << w) - 1);
  };
  unsigned index = field(slab, lo, j);
  if (hi != 0) index |= field(slab + plane_bytes(lo), hi, j) << lo;
  return index;
}

// Packs indices idx[n * cols + k] (row-major, each < 2^bits) of a rows x cols matrix into
// packed_bytes(rows, cols, bits) bytes at out.
inline void pack_indices(std::size_t rows, std::size_t cols, unsigned bits, const std::uint8_t* idx,
                         std::uint8_t* out) {
  const std::size_t sb = slab_bytes(bits);
  std::uint8_t lanes[kGroupRows];
  for (std::size_t g = 0; g < row_groups(rows); ++g) {
    for (std::size_t k = 0; k < cols; ++k) {
      for (std::size_t j = 0; j < kGroupRows; ++j) {
        const std::size_t n = g * kGroupRows + j;
        lanes[j] = n < rows ? idx[n * cols + k] : 0;
      }
      pack_slab(bits, lanes, out + (g * cols + k) * sb);
    }
  }
}

// The 32-bit layout: w[n * cols + k] (row-major) into group slabs of 16 floats.
inline void pack_f32(std::size_t rows, std::size_t cols, const float* w, float* out) {
  for (std::size_t g = 0; g < row_groups(rows); ++g) {
    for (std::size_t k = 0; k < cols; ++k) {
      float* slab = out + (g * cols + k) * kGroupRows;
      for (std::size_t j = 0; j < kGroupRows; ++j) {
        const std::size_t n = g * kGroupRows + j;
        slab[j] = n < rows ? w[n * cols + k] : 0.0f;
      }
    }
  }
}

// Position key of W[n][k] in slab order, and back.
inline constexpr std::uint32_t outlier_key(std::size_t n, std::size_t k, std::size_t cols) noexcept {
  return static_cast<std::uint32_t>(((n / kGroupRows) * cols + k) * kGroupRows + n % kGroupRows);
}
inline constexpr std::size_t outlier_row(std::uint32_t key, std::size_t cols) noexcept {
  return (key / kGroupRows) / cols * kGroupRows + key % kGroupRows;
}
inline constexpr std::size_t outlier_col(std::uint32_t key, std::size_t cols) noexcept {
  return (key / kGroupRows) % cols;
}

}  // namespace stile::quant
