#pragma once
// A stack of shard blocks (StackedDict: dictionary blocks of 2..6 bits and fp32 blocks, stacked
// along the output rows or along the input columns) decoded to int8 as ONE int8 weight matrix for
// the int8 GEMM: the int8 linear format of the layer assembled from shards (ops/sharded_layer.hpp).
//
//   const stile::DictInt8Weights w = stile::decode_to_int8(stack, &pool);  // per request and layer
//   stile::gemm_int8(M, A, lda, w.int8.view, C, ldc, epi, &pool);          // then add the outliers:
//   stile::add_dict_outliers(w, A, lda, C, ldc, 0, M);                    //   ops/linear.hpp does both
//
// Scales, one per output row (what the int8 GEMM takes):
//   rows stacked (Q, K, V, FFN1): each row lies in one block and takes that block's scale: a
//     dictionary block's dict_int8_scale (max |centroid| / qmax, as decode_to_int8 of the block
//     alone), an fp32 block's rows their own max |w| / qmax (symmetric per channel).
//   columns stacked (W_o, FFN2): each row runs through every block and the integer product sums
//     over all of them, so one scale must serve the whole row. It is the largest dictionary
//     block's scale (the same for every row: a block's rows all draw on its centroids), so a block
//     of narrower centroids is rounded on a coarser grid than its own (the cost is measured in
//     docs/design-notes.md). fp32 blocks are rounded with it too, and their weights beyond +-qmax of it
//     become exact outliers, like the dictionary's own. Without a dictionary block, each row takes
//     its max |w| over all blocks.
//   (The other way, a partial int32 product per block rescaled and summed in fp32, keeps every
//   block's scale but turns one GEMM over K into m GEMMs over K/m columns each, with m passes of
//   the output.)
// Outliers are 0 in the int8 matrix and kept as exact fp32 (row, column, value) in the stack's
// coordinates; they must be added before a non-linear epilogue (ops/linear.hpp does).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/dict_int8.hpp"
#include "stile/quant/int8_weights.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile {

namespace detail {

// Rows [16 g, 16 g + 16) of an fp32 (32-bit) block, those below N, row-major into rows[j * K + k]:
// the group's slabs hold 16 rows by one column each (quant/packed_layout.hpp). Throws on a weight
// that is not finite.
inline void f32_block_group(const DictMatrix& b, std::size_t g, float* rows) {
  const std::size_t K = b.n_cols, R = std::min(quant::kGroupRows, b.n_rows - g * quant::kGroupRows);
  const std::uint8_t* group = b.packed + g * K * quant::slab_bytes(32);
  for (std::size_t k = 0; k < K; ++k) {
    float slab[quant::kGroupRows];
    // A whole slab in one fixed-size copy (a few vector moves); the group's last rows otherwise.
    if (R == quant::kGroupRows) {
      std::memcpy(slab, group + k * quant::slab_bytes(32), sizeof slab);
    } else {
      std::memcpy(slab, group + k * quant::slab_bytes(32), R * sizeof(float));
    }
    for (std::size_t j = 0; j < R; ++j) rows[j * K + k] = slab[j];
  }
  // max |x| over the bits of |x| (Inf and NaN above every finite value): a loop that vectorizes.
  std::uint32_t top = 0;
  for (std::size_t i = 0; i < R * K; ++i) top = std::max(top, std::bit_cast<std::uint32_t>(rows[i]) & 0x7fffffffu);
  require(std::isfinite(std::bit_cast<float>(top)), "decode_to_int8: an fp32 shard weight is not finite");
}

// max |W[n][:]| of every row n of an fp32 block (0 for a row of zeros).
inline std::vector<float> f32_block_row_max(const DictMatrix& b) {
  std::vector<float> amax(b.n_rows, 0.0f), rows(quant::kGroupRows * b.n_cols);
  for (std::size_t g = 0; g < quant::row_groups(b.n_rows); ++g) {
    f32_block_group(b, g, rows.data());
    for (std::size_t j = 0; j < quant::kGroupRows && g * quant::kGroupRows + j < b.n_rows; ++j) {
      std::uint32_t top = 0;
      for (std::size_t k = 0; k < b.n_cols; ++k) {
        top = std::max(top, std::bit_cast<std::uint32_t>(rows[j * b.n_cols + k]) & 0x7fffffffu);
      }
      amax[g * quant::kGroupRows + j] = std::bit_cast<float>(top);
    }
  }
  return amax;
}

// The scale of a row whose largest |w| is amax: amax / qmax, or 1 for a row of zeros.
inline float f32_row_scale(float amax, std::int32_t qmax) {
  return amax > 0.0f ? amax / static_cast<float>(qmax) : 1.0f;
}

// An fp32 block rounded with row_scale[n] per row (in the block's own coordinates), or, without
// row_scale, each row with its own f32_row_scale (rows stacked); q = round(w / scale) (ties to
// even); a weight beyond +-qmax becomes an outlier (0 in the int8 matrix, exact in the list).
inline DictInt8Weights f32_block_to_int8(const DictMatrix& b, const std::vector<float>* row_scale,
                                         Int8Packing packing) {
  const std::size_t N = b.n_rows, K = b.n_cols, nr = packing.nr, Kp = int8_padded_k(K);
  const std::int32_t qmax = packing.weight_max;
  DictInt8Weights out;
  out.scale = 0.0f;
  out.int8 = zeroed_int8_weights((N + nr - 1) / nr, Kp, nr);
  std::vector<float> rows(quant::kGroupRows * K), q(K);
  std::vector<std::int8_t> stored(K);
  const float top = qmax + 1.0f;
  for (std::size_t g = 0; g < quant::row_groups(N); ++g) {
    f32_block_group(b, g, rows.data());
    for (std::size_t j = 0; j < quant::kGroupRows && g * quant::kGroupRows + j < N; ++j) {
      const std::size_t n = g * quant::kGroupRows + j;
      const float* row = rows.data() + j * K;
      float s = 0.0f;
      if (row_scale != nullptr) {
        s = (*row_scale)[n];
      } else {
        std::uint32_t top_bits = 0;  // max |w| over the bits of |w| (finite here): a loop that vectorizes
        for (std::size_t k = 0; k < K; ++k)
          top_bits = std::max(top_bits, std::bit_cast<std::uint32_t>(row[k]) & 0x7fffffffu);
        s = f32_row_scale(std::bit_cast<float>(top_bits), qmax);
      }
      // round(w / s), ties to even, then clamped to +-(qmax + 1): every value past +-qmax is an
      // outlier. Float-only and integer-only loops, so that both vectorize. (round_half_even_small
      // is exact below 2^22; a larger quotient stays larger than qmax + 1 through it.)
      for (std::size_t k = 0; k < K; ++k) {
        float v = round_half_even_small(row[k] / s);
        v = v > top ? top : v;
        q[k] = v < -top ? -top : v;
      }
      std::int32_t sum = 0, outliers = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const auto v = static_cast<std::int32_t>(q[k]);
        // All ones where v is kept, 0 for an outlier (stored 0): masks, not branches.
        const std::int32_t keep = -static_cast<std::int32_t>((v <= qmax) & (v >= -qmax));
        outliers += 1 + keep;
        stored[k] = static_cast<std::int8_t>(v & keep);
        sum += v & keep;
      }
      for (std::size_t k = 0; outliers > 0 && k < K; ++k) {
        if (std::abs(q[k]) > qmax) {
          out.outlier_n.push_back(static_cast<std::uint32_t>(n));
          out.outlier_k.push_back(static_cast<std::uint32_t>(k));
          out.outlier_v.push_back(row[k]);
          --outliers;
        }
      }
      std::int8_t* panel = out.int8.packed.data() + (n / nr) * Kp * nr + (n % nr) * kInt8KGroup;
      const std::size_t whole = K / kInt8KGroup * kInt8KGroup;
      for (std::size_t k = 0; k < whole; k += kInt8KGroup) {
        std::memcpy(panel + (k / kInt8KGroup) * nr * kInt8KGroup, stored.data() + k, kInt8KGroup);
      }
      if (whole < K) std::memcpy(panel + (whole / kInt8KGroup) * nr * kInt8KGroup, stored.data() + whole, K - whole);
      out.int8.col_sums[n] = sum;
      out.int8.scales[n] = s;
    }
  }
  out.int8.view =
      Int8Matrix{out.int8.packed.data(), out.int8.scales.data(),          out.int8.col_sums.data(), 0, N, K, nr,
                 packing.weight_max,     Int8Scheme::kSymmetricPerChannel};
  return out;
}

// Copies block `src` (packed for the same panel width) into `dst` (its view set) at rows n0.., columns k0..: whole
// panels by memcpy when the block starts on a panel row and a k-group, value by value otherwise.
// A whole-panel copy also writes the block's zero padding, so blocks are placed in order (a
// later block overwrites what an earlier one padded).
inline void place_int8_block(DictInt8Weights& dst, const DictInt8Weights& src, std::size_t n0, std::size_t k0) {
  const Int8Matrix& s = src.int8.view;
  const std::size_t nr = s.nr, Kp = dst.int8.view.padded_cols(), Kps = s.padded_cols();
  if (n0 % nr == 0 && k0 % kInt8KGroup == 0) {
    for (std::size_t p = 0; p < s.panels(); ++p) {
      std::memcpy(dst.int8.packed.data() + (n0 / nr + p) * Kp * nr + k0 * nr, s.packed + p * Kps * nr, Kps * nr);
    }
  } else {
    for (std::size_t n = 0; n < s.n_rows; ++n) {
      const std::size_t dn = n0 + n;
      std::int8_t* panel = dst.int8.packed.data() + (dn / nr) * Kp * nr;
      for (std::size_t k = 0; k < s.n_cols; ++k) {
        const std::size_t dk = k0 + k;
        panel[((dk / kInt8KGroup) * nr + dn % nr) * kInt8KGroup + dk % kInt8KGroup] = s.stored(n, k);
      }
    }
  }
  for (std::size_t n = 0; n < s.n_rows; ++n) {
    dst.int8.col_sums[n0 + n] += s.col_sums[n];
    dst.int8.scales[n0 + n] = s.scales[n];  // columns stacked: every block has the row's one scale
  }
  for (std::size_t i = 0; i < src.outlier_v.size(); ++i) {
    dst.outlier_n.push_back(static_cast<std::uint32_t>(n0 + src.outlier_n[i]));
    dst.outlier_k.push_back(static_cast<std::uint32_t>(k0 + src.outlier_k[i]));
    dst.outlier_v.push_back(src.outlier_v[i]);
  }
}

}  // namespace detail

// Decodes a stack (its blocks 2..6 or 32 bits, mixed) for the int8 GEMM of the target the CPU runs
// now, with the scales above. The blocks are decoded in parallel on `pool` when given. The
// result's `scale` is 0 and `table` empty (a stack has a scale per row: int8.scales).
// A dictionary block that starts on a panel row and a k-group (and ends on a k-group, unless it is
// the last along k) is decoded straight into its place in the stack's matrix; the others (fp32
// blocks, blocks of odd sizes) are decoded on their own and copied into place, in block order.
// `reuse`: a previous result whose buffers this one takes over (left empty), so that a decode per
// request does not fault in fresh pages each time.
inline DictInt8Weights decode_to_int8(const StackedDict& s, ThreadPool* pool = nullptr,
                                      DictInt8Weights* reuse = nullptr) {
  validate_weights(s);
  const Int8Packing packing = int8_packing();
  const std::int32_t qmax = packing.weight_max;
  const bool by_rows = s.axis == StackedDict::Axis::kRows;
  const std::size_t B = s.blocks.size(), N = s.n_rows, K = s.n_cols;

  // Every dictionary block's scale of each of its rows, and in a column stack every block's (an
  // fp32 block of a row stack takes each row's own, in its conversion).
  std::vector<std::vector<float>> row_scale(B);
  if (by_rows) {
    for (std::size_t b = 0; b < B; ++b) {
      const DictMatrix& m = s.blocks[b];
      if (m.bits != 32) row_scale[b].assign(m.n_rows, dict_int8_scale(m, qmax));
    }
  } else {
    float common = 0.0f;  // the largest dictionary block's scale (0: none)
    for (const DictMatrix& m : s.blocks) {
      if (m.bits != 32) common = std::max(common, dict_int8_scale(m, qmax));
    }
    std::vector<float> row(N, common);
    if (common == 0.0f) {  // no dictionary block: each row its max over the fp32 blocks
      for (const DictMatrix& m : s.blocks) {
        const std::vector<float> amax = detail::f32_block_row_max(m);
        for (std::size_t n = 0; n < N; ++n) row[n] = std::max(row[n], amax[n]);
      }
      for (float& x : row) x = detail::f32_row_scale(x, qmax);
    }
    for (std::size_t b = 0; b < B; ++b) row_scale[b] = row;
  }

  DictInt8Weights out;
  if (reuse != nullptr) std::swap(out, *reuse);
  out.scale = 0.0f;
  out.table.clear();
  out.outlier_n.clear();
  out.outlier_k.clear();
  out.outlier_v.clear();
  const std::size_t nr = packing.nr, Kp = int8_padded_k(K), panel_stride = Kp * nr;
  zero_int8_weights(out.int8, (N + nr - 1) / nr, Kp, nr);
  out.int8.view =
      Int8Matrix{out.int8.packed.data(),          out.int8.scales.data(), out.int8.col_sums.data(), 0, N, K, nr, qmax,
                 Int8Scheme::kSymmetricPerChannel};

  // Where each block starts along the stack, and whether it is decoded in place.
  std::vector<std::size_t> start(B);
  std::vector<char> in_place(B);
  for (std::size_t b = 0, at = 0; b < B; ++b) {
    const DictMatrix& m = s.blocks[b];
    start[b] = at;
    at += by_rows ? m.n_rows : m.n_cols;
    const bool aligned =
        by_rows ? start[b] % nr == 0 : start[b] % kInt8KGroup == 0 && (m.n_cols % kInt8KGroup == 0 || at == K);
    in_place[b] = m.bits != 32 && m.n_rows > 0 && m.n_cols > 0 && aligned;
  }
  // parts[b]: an in-place block's outliers (in the stack's coordinates); any other block whole.
  // sums[b]: an in-place block's column sums where blocks share rows (columns stacked).
  std::vector<DictInt8Weights> parts(B);
  std::vector<std::vector<std::int32_t>> sums(B);
  auto decode = [&](std::size_t b, std::size_t /*worker*/) {
    const DictMatrix& m = s.blocks[b];
    if (m.n_rows == 0 || m.n_cols == 0) return;
    if (!in_place[b]) {
      parts[b] = m.bits == 32 ? detail::f32_block_to_int8(m, by_rows ? nullptr : &row_scale[b], packing)
                              : decode_to_int8(m, row_scale[b][0]);
      return;
    }
    const std::size_t n0 = by_rows ? start[b] : 0, k0 = by_rows ? 0 : start[b];
    std::int32_t* col_sums = out.int8.col_sums.data() + n0;
    if (!by_rows) {
      sums[b].assign(N, 0);
      col_sums = sums[b].data();
    }
    detail::decode_dict_block(m, row_scale[b][0], qmax, nr, out.int8.packed.data() + (n0 / nr) * panel_stride + k0 * nr,
                              panel_stride, col_sums, n0, k0, parts[b]);
  };
  if (pool != nullptr && B > 1) {
    pool->run(B, decode);
  } else {
    for (std::size_t b = 0; b < B; ++b) decode(b, 0);
  }

  for (std::size_t b = 0; b < B; ++b) {
    const DictMatrix& m = s.blocks[b];
    if (m.n_rows == 0 || m.n_cols == 0) continue;
    if (!in_place[b]) {
      detail::place_int8_block(out, parts[b], by_rows ? start[b] : 0, by_rows ? 0 : start[b]);
      continue;
    }
    const std::size_t n0 = by_rows ? start[b] : 0;
    for (std::size_t n = 0; n < m.n_rows; ++n) out.int8.scales[n0 + n] = row_scale[b][n];
    if (!by_rows) {
      for (std::size_t n = 0; n < N; ++n) out.int8.col_sums[n] += sums[b][n];
    }
    out.outlier_n.insert(out.outlier_n.end(), parts[b].outlier_n.begin(), parts[b].outlier_n.end());
    out.outlier_k.insert(out.outlier_k.end(), parts[b].outlier_k.begin(), parts[b].outlier_k.end());
    out.outlier_v.insert(out.outlier_v.end(), parts[b].outlier_v.begin(), parts[b].outlier_v.end());
  }
  validate(out.int8.view, "stacked shards");
  return out;
}

// C[m][n] += A[m][k] * value for every outlier of w, rows m0..m1 of A and C: the exact fp32 part
// of gemm_dict_int8, row by row (a row of A and of C stay in L1 while every outlier is added).
inline void add_dict_outliers(const DictInt8Weights& w, const float* A, std::size_t lda, float* C, std::size_t ldc,
                              std::size_t m0, std::size_t m1) noexcept {
  const std::size_t n_out = w.outlier_v.size();
  for (std::size_t m = m0; m < m1; ++m) {
    const float* a = A + m * lda;
    float* c = C + m * ldc;
    for (std::size_t i = 0; i < n_out; ++i) c[w.outlier_n[i]] += a[w.outlier_k[i]] * w.outlier_v[i];
  }
}

}  // namespace stile
