// Per-target decode of dictionary weights (DictMatrix) straight into the int8 GEMM's packed
// weights (quant/int8_weights.hpp layout, this target's panel width kInt8NR): the centroids
// rounded once to int8 (one 2^k-entry byte table, kernels/dict_int8.hpp makes it), then each slab's
// 16 indices looked up by the byte-plane decoder of dict_bytes-inl.h (one plane instead of four),
// four consecutive k transposed into the [nr][4] groups the dot-product kernels read, and the
// column sums the zero-point correction needs accumulated on the way (16-bit lanes, flushed every
// 256 k). Outliers are not decoded here: the caller zeroes them and adds them back in fp32.
#if defined(STILE_KERNELS_DICT_INT8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_DICT_INT8_INL_H_
#undef STILE_KERNELS_DICT_INT8_INL_H_
#else
#define STILE_KERNELS_DICT_INT8_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "stile/kernels/codec.hpp"
#include "stile/kernels/dict_bytes-inl.h"
#include "stile/kernels/int8_gemm-inl.h"
#include "stile/quant/int8_weights.hpp"
#include "stile/quant/packed_layout.hpp"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The scalar decode of rows [16 g, 16 g + 16) (those below N): packed, panel_stride and col_sums
// as for DictToInt8 below. The reference, and the path of targets without byte shuffles and of a
// group's last rows below 16.
inline void DictGroupToInt8Scalar(const DictMatrix& m, const std::int8_t* table, std::size_t g, std::size_t nr,
                                  std::int8_t* packed, std::size_t panel_stride, std::int32_t* col_sums) {
  const std::size_t K = m.n_cols, sb = quant::slab_bytes(m.bits);
  const std::uint8_t* group = m.packed + g * K * sb;
  for (std::size_t j = 0; j < quant::kGroupRows && g * quant::kGroupRows + j < m.n_rows; ++j) {
    const std::size_t n = g * quant::kGroupRows + j;
    std::int8_t* panel = packed + (n / nr) * panel_stride;
    std::int32_t sum = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const std::int8_t q = table[quant::slab_index(m.bits, group + k * sb, j)];
      panel[((k / kInt8KGroup) * nr + n % nr) * kInt8KGroup + k % kInt8KGroup] = q;
      sum += q;
    }
    col_sums[n] = sum;
  }
}

#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
// One whole group g (16 rows, all below N) at kBits in 2..6, 128-bit vectors: for each 4 k, the
// four slabs' int8 values (16 rows each) are zipped into rows 0-3, 4-7, 8-11, 12-15 of 4 bytes.
template <unsigned kBits>
HWY_NOINLINE void DictGroupToInt8(const DictMatrix& m, const std::uint8_t* table, std::size_t g, std::size_t nr,
                                  std::int8_t* packed, std::size_t panel_stride, std::int32_t* col_sums) {
  constexpr std::size_t kSlab = quant::slab_bytes(kBits);
  const hn::Full128<std::uint8_t> d8;
  const hn::Full128<std::uint16_t> d16;
  const hn::Full128<std::int16_t> di16;
  const std::size_t K = m.n_cols;
  const std::uint8_t* group = m.packed + g * K * kSlab;
  const std::uint8_t* end = m.packed + quant::packed_bytes(m.n_rows, m.n_cols, kBits);
  // Where rows 4t .. 4t + 3 of the group go: their panel and their column in it.
  std::int8_t* rows_at[4];
  for (std::size_t t = 0; t < 4; ++t) {
    const std::size_t n = g * quant::kGroupRows + 4 * t;
    rows_at[t] = packed + (n / nr) * panel_stride + (n % nr) * kInt8KGroup;
  }
  std::int32_t sums[16] = {};
  auto acc_lo = hn::Zero(di16), acc_hi = hn::Zero(di16);
  const auto flush = [&] {
    HWY_ALIGN std::int16_t s[16];
    hn::Store(acc_lo, di16, s);
    hn::Store(acc_hi, di16, s + 8);
    for (std::size_t j = 0; j < 16; ++j) sums[j] += s[j];
    acc_lo = hn::Zero(di16);
    acc_hi = hn::Zero(di16);
  };
  for (std::size_t k = 0; k < K; k += kInt8KGroup) {
    hn::Vec<decltype(d8)> S[4];
    for (std::size_t i = 0; i < 4; ++i) {
      if (k + i < K) {
        const DictBytesIndex<kBits, hn::Full128<std::uint8_t>> x(d8, DictLoadSlab<kBits>(d8, group + (k + i) * kSlab, end));
        S[i] = DictBytesLookup<kBits>(d8, table, x);
      } else {
        S[i] = hn::Zero(d8);  // K padding
      }
      // Sign-extended into 16-bit lanes: each byte moved to the top of its lane, then shifted back.
      const auto z = hn::Zero(d8);
      acc_lo = hn::Add(acc_lo, hn::ShiftRight<8>(hn::BitCast(di16, hn::InterleaveLower(d8, z, S[i]))));
      acc_hi = hn::Add(acc_hi, hn::ShiftRight<8>(hn::BitCast(di16, hn::InterleaveUpper(d8, z, S[i]))));
    }
    const auto h01lo = hn::ZipLower(d16, S[0], S[1]), h01hi = hn::ZipUpper(d16, S[0], S[1]);
    const auto h23lo = hn::ZipLower(d16, S[2], S[3]), h23hi = hn::ZipUpper(d16, S[2], S[3]);
    const hn::Repartition<std::uint32_t, decltype(d8)> d32;
    const std::size_t at = (k / kInt8KGroup) * nr * kInt8KGroup;
    hn::StoreU(hn::BitCast(d8, hn::ZipLower(d32, h01lo, h23lo)), d8, reinterpret_cast<std::uint8_t*>(rows_at[0] + at));
    hn::StoreU(hn::BitCast(d8, hn::ZipUpper(d32, h01lo, h23lo)), d8, reinterpret_cast<std::uint8_t*>(rows_at[1] + at));
    hn::StoreU(hn::BitCast(d8, hn::ZipLower(d32, h01hi, h23hi)), d8, reinterpret_cast<std::uint8_t*>(rows_at[2] + at));
    hn::StoreU(hn::BitCast(d8, hn::ZipUpper(d32, h01hi, h23hi)), d8, reinterpret_cast<std::uint8_t*>(rows_at[3] + at));
    // At most 128 values of |q| <= 128 per lane between flushes: 16384 fits 16 bits.
    if ((k / kInt8KGroup) % 32 == 31) flush();
  }
  flush();
  for (std::size_t j = 0; j < 16; ++j) col_sums[g * quant::kGroupRows + j] = sums[j];
}
#endif

// Decodes all of m for this target's packing into panels `panel_stride` bytes apart from `packed`
// (zeroed; int8_padded_k(K) * kInt8NR for a matrix of its own, more for a block inside a wider
// one) and col_sums (N entries); table: 64 bytes, the int8 value of each index. Writes rows below
// N only, and K's padding only where K is not a multiple of kInt8KGroup.
struct DictToInt8 {
  static void Run(const DictMatrix& m, const std::int8_t* table, std::int8_t* packed, std::size_t panel_stride,
                  std::int32_t* col_sums) {
    const std::size_t nr = kInt8NR, groups = quant::row_groups(m.n_rows);
    const auto* utable = reinterpret_cast<const std::uint8_t*>(table);
    for (std::size_t g = 0; g < groups; ++g) {
      const bool whole = (g + 1) * quant::kGroupRows <= m.n_rows;
      (void)whole;
      (void)utable;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
      if (whole) {
        switch (m.bits) {
          case 2: DictGroupToInt8<2>(m, utable, g, nr, packed, panel_stride, col_sums); continue;
          case 3: DictGroupToInt8<3>(m, utable, g, nr, packed, panel_stride, col_sums); continue;
          case 4: DictGroupToInt8<4>(m, utable, g, nr, packed, panel_stride, col_sums); continue;
          case 5: DictGroupToInt8<5>(m, utable, g, nr, packed, panel_stride, col_sums); continue;
          case 6: DictGroupToInt8<6>(m, utable, g, nr, packed, panel_stride, col_sums); continue;
          default: break;
        }
      }
#endif
      DictGroupToInt8Scalar(m, table, g, nr, packed, panel_stride, col_sums);
    }
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
