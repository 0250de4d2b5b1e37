// The group-slab layout of quantized matrices (quant/packed_layout.hpp): every index and every
// fp32 value comes back from where the layout says it is, for every supported bitwidth.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "stile/quant/packed_layout.hpp"

namespace q = stile::quant;

TEST_CASE("packed indices round-trip for every bitwidth and ragged shapes", "[quant][layout]") {
  std::mt19937 rng(7);
  for (unsigned bits : {2u, 3u, 4u, 5u, 6u}) {
    for (auto [rows, cols] : {std::pair<std::size_t, std::size_t>{1, 1}, {16, 3}, {17, 5}, {40, 33}, {33, 1}}) {
      std::vector<std::uint8_t> idx(rows * cols);
      std::uniform_int_distribution<unsigned> pick(0, (1u << bits) - 1);
      for (auto& i : idx) i = static_cast<std::uint8_t>(pick(rng));
      idx[0] = static_cast<std::uint8_t>((1u << bits) - 1);  // the top index uses every bit
      std::vector<std::uint8_t> packed(q::packed_bytes(rows, cols, bits), 0xAB);
      q::pack_indices(rows, cols, bits, idx.data(), packed.data());
      REQUIRE(packed.size() == q::row_groups(rows) * cols * 2 * bits);
      for (std::size_t n = 0; n < q::row_groups(rows) * q::kGroupRows; ++n) {
        for (std::size_t k = 0; k < cols; ++k) {
          const std::uint8_t* slab = packed.data() + ((n / 16) * cols + k) * q::slab_bytes(bits);
          const unsigned want = n < rows ? idx[n * cols + k] : 0u;  // padding rows hold index 0
          INFO("bits " << bits << " n " << n << " k " << k);
          REQUIRE(q::slab_index(bits, slab, n % 16) == want);
        }
      }
    }
  }
}

TEST_CASE("the bit planes are where docs/format.md says", "[quant][layout]") {
  // 6 bits: low nibble plane (lane j at bits 4j..4j+3 of a LE u64), then a 2-bit plane.
  std::uint8_t idx[16] = {};
  idx[1] = 0x2F;  // low nibble 0xF, high bits 0b10
  std::uint8_t slab[12] = {};
  q::pack_slab(6, idx, slab);
  CHECK(slab[0] == 0xF0);  // lane 1's nibble: bits 4..7 of byte 0
  CHECK(slab[8] == 0x08);  // lane 1's high pair 0b10: bits 2..3 of the plane's byte 0
  for (int b : {1, 2, 3, 4, 5, 6, 7, 9, 10, 11}) CHECK(slab[b] == 0);
  // 3 bits: 2-bit plane (4 bytes), then a 1-bit plane (2 bytes); lane 9 = 0b101.
  std::uint8_t idx3[16] = {};
  idx3[9] = 5;
  std::uint8_t slab3[6] = {};
  q::pack_slab(3, idx3, slab3);
  CHECK(slab3[2] == 0x04);  // lane 9, low pair 0b01 at bits 18..19 = byte 2 bits 2..3
  CHECK(slab3[5] == 0x02);  // lane 9, high bit at bit 9 = byte 1 of the plane, bit 1
}

TEST_CASE("fp32 slabs round-trip bit-exactly, and outlier keys invert", "[quant][layout]") {
  const std::size_t rows = 21, cols = 7;
  std::vector<float> w(rows * cols);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& x : w) x = g(rng);
  w[5] = -0.0f;
  std::vector<float> packed(q::packed_bytes(rows, cols, 32) / sizeof(float), 1.0f);
  q::pack_f32(rows, cols, w.data(), packed.data());
  for (std::size_t n = 0; n < 32; ++n) {
    for (std::size_t k = 0; k < cols; ++k) {
      const float got = packed[((n / 16) * cols + k) * 16 + n % 16];
      const float want = n < rows ? w[n * cols + k] : 0.0f;
      REQUIRE(std::memcmp(&got, &want, sizeof(float)) == 0);
      const std::uint32_t key = q::outlier_key(n, k, cols);
      REQUIRE(q::outlier_row(key, cols) == n);
      REQUIRE(q::outlier_col(key, cols) == k);
    }
  }
  // Keys order by slab: group, then column, then row within the group.
  CHECK(q::outlier_key(15, 0, cols) < q::outlier_key(0, 1, cols));
  CHECK(q::outlier_key(0, cols - 1, cols) < q::outlier_key(16, 0, cols));
  CHECK_THROWS(q::require_supported_bits(7));
  CHECK_THROWS(q::require_supported_bits(1));
}
