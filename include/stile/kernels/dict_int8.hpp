#pragma once
// Dictionary weights (DictMatrix) decoded to int8 for the int8 GEMM (kernels/int8_gemm.hpp): the
// number-formats path for quantized shards, "decode to int8 instead of fp32".
//
//   const stile::DictInt8Weights w = stile::decode_to_int8(dict);  // on the target the GEMM runs on
//   stile::gemm_dict_int8(M, A, lda, w, C, ldc);                    // int8 GEMM + exact outliers
//
// Rounding: the 2^k centroids are rounded once to int8 with one scale for the whole matrix,
// s = max |centroid| / qmax (qmax: the target's weight range, 127, or 63 on AVX2 / SSE4 without
// VNNI), q = round(c / s): every row shares them, since every row draws on the same centroids (a
// scale per output channel would differ only through the outliers). Outliers are not squeezed into
// that range: they are stored as 0 in the int8 matrix and added back exactly in fp32 after the
// integer product, C[m][n] += A[m][k] * value, which costs M multiply-adds per outlier.
// Light: the decoder itself is per target (kernels/dict_int8-inl.h), compiled once in
// stile::compiled (part 6 of kernels/instantiate_kernels.hpp).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/int8_gemm.hpp"
#include "stile/quant/int8_weights.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile {

// The int8 inliers and the exact fp32 outliers of one DictMatrix.
struct DictInt8Weights {
  Int8Weights int8;                      // packed for the target it was decoded on; outliers stored 0
  float scale = 1.0f;                    // s: every row's scale (a stack: 0, its scales per row in int8)
  std::vector<std::int8_t> table;        // the int8 value of each index (2^k entries; a stack: empty)
  std::vector<std::uint32_t> outlier_n;  // outliers: row, column and exact value
  std::vector<std::uint32_t> outlier_k;
  std::vector<float> outlier_v;
};

namespace detail {
// Defined in kernels/instantiate_kernels.hpp (part 6), on the best target of the CPU: decodes m
// into the panels at `packed`, `panel_stride` bytes apart (zeroed; this target's int8 packing),
// and col_sums[n] (N entries), table[index] being the int8 value of each index (64 entries).
void dict_to_int8_on_target(const DictMatrix& m, const std::int8_t* table, std::int8_t* packed,
                            std::size_t panel_stride, std::int32_t* col_sums);

// Decodes m (2..6 bits), its centroids rounded with `scale` and clamped to +-qmax, into the panels
// at `packed` (panel width nr, panels `panel_stride` bytes apart, zeroed: m's own matrix, or where m
// sits inside a wider one) and col_sums[0, N); its outliers are stored 0 there and appended to
// `to`'s list shifted by (n0, k0), the place of m's first weight in the matrix the list belongs to.
// Returns the int8 value of each index (64 entries, the unused ones 0). Throws on an unusable scale.
inline std::vector<std::int8_t> decode_dict_block(const DictMatrix& m, float scale, std::int32_t qmax, std::size_t nr,
                                                  std::int8_t* packed, std::size_t panel_stride, std::int32_t* col_sums,
                                                  std::size_t n0, std::size_t k0, DictInt8Weights& to) {
  validate_int8_scale(scale, "dictionary", 0);
  std::vector<std::int8_t> table(64, 0);
  for (std::size_t i = 0; i < (std::size_t{1} << m.bits); ++i) {
    const float q = std::nearbyint(m.centroids[i] / scale);
    table[i] = static_cast<std::int8_t>(std::clamp(q, -static_cast<float>(qmax), static_cast<float>(qmax)));
  }
  const std::size_t N = m.n_rows, K = m.n_cols;
  if (N == 0 || K == 0) return table;
  dict_to_int8_on_target(m, table.data(), packed, panel_stride, col_sums);
  // Outliers: out of the int8 matrix (0, and out of its column sum), into the fp32 list. A key is
  // (row group * K + column) * 16 + row in group (quant/packed_layout.hpp); the keys come in order,
  // so the division by K is taken only when the row group changes.
  to.outlier_n.reserve(to.outlier_n.size() + m.n_outliers);
  to.outlier_k.reserve(to.outlier_k.size() + m.n_outliers);
  to.outlier_v.reserve(to.outlier_v.size() + m.n_outliers);
  std::size_t group = 0, group_start = 0;  // the row group of the last key, and its first slab
  for (std::size_t i = 0; i < m.n_outliers; ++i) {
    const std::size_t slab = m.outlier_keys[i] / quant::kGroupRows;
    if (slab - group_start >= K) {  // another row group (unsigned: also when slab < group_start)
      group = slab / K;
      group_start = group * K;
    }
    const std::size_t n = group * quant::kGroupRows + m.outlier_keys[i] % quant::kGroupRows, k = slab - group_start;
    require(n < N, "decode_to_int8: an outlier key is outside the matrix");
    std::int8_t& q =
        packed[(n / nr) * panel_stride + ((k / kInt8KGroup) * nr + n % nr) * kInt8KGroup + k % kInt8KGroup];
    col_sums[n] -= q;
    q = 0;
    to.outlier_n.push_back(static_cast<std::uint32_t>(n0 + n));
    to.outlier_k.push_back(static_cast<std::uint32_t>(k0 + k));
    to.outlier_v.push_back(m.outlier_values[i]);
  }
  return table;
}
}  // namespace detail

// The scale decode_to_int8 gives m (2..6 bits) on a target of weight range qmax: max |centroid| /
// qmax (1 when every centroid is 0). Throws on a centroid that is not finite.
inline float dict_int8_scale(const DictMatrix& m, std::int32_t qmax) {
  validate_weights(m);
  require(m.bits != 32, "decode_to_int8: 32-bit weights are not dictionary-quantized (use quantize_int8)");
  float amax = 0.0f;
  for (std::size_t i = 0; i < (std::size_t{1} << m.bits); ++i) {
    require(std::isfinite(m.centroids[i]), "decode_to_int8: a centroid is not finite");
    amax = std::max(amax, std::abs(m.centroids[i]));
  }
  return amax > 0.0f ? amax / static_cast<float>(qmax) : 1.0f;
}

// Decodes m (2..6 bits; not 32) for the int8 GEMM of the target the CPU runs now, its centroids
// rounded with `scale` (clamped to the target's range: a scale below dict_int8_scale(m) clips
// the largest centroids). The stacks of shards (kernels/dict_int8_stack.hpp) pass one scale for
// several blocks.
inline DictInt8Weights decode_to_int8(const DictMatrix& m, float scale) {
  validate_weights(m);
  require(m.bits != 32, "decode_to_int8: 32-bit weights are not dictionary-quantized (use quantize_int8)");
  const Int8Packing packing = int8_packing();
  const std::size_t N = m.n_rows, K = m.n_cols, nr = packing.nr, Kp = int8_padded_k(K);
  DictInt8Weights out;
  out.scale = scale;
  out.int8 = zeroed_int8_weights((N + nr - 1) / nr, Kp, nr);
  out.table = detail::decode_dict_block(m, scale, packing.weight_max, nr, out.int8.packed.data(), Kp * nr,
                                        out.int8.col_sums.data(), 0, 0, out);
  std::fill(out.int8.scales.begin(), out.int8.scales.begin() + static_cast<std::ptrdiff_t>(N), out.scale);
  out.int8.view =
      Int8Matrix{out.int8.packed.data(), out.int8.scales.data(),          out.int8.col_sums.data(), 0, N, K, nr,
                 packing.weight_max,     Int8Scheme::kSymmetricPerChannel};
  validate(out.int8.view, "dictionary");
  return out;
}

// Decodes m (2..6 bits) with its own scale, dict_int8_scale(m).
inline DictInt8Weights decode_to_int8(const DictMatrix& m) {
  return decode_to_int8(m, dict_int8_scale(m, int8_weight_max()));
}

// C[M x N] = quant(A) * int8(W)^T (the int8 GEMM, no epilogue) + the outliers' exact products.
inline void gemm_dict_int8(std::size_t M, const float* A, std::size_t lda, const DictInt8Weights& w, float* C,
                           std::size_t ldc, ThreadPool* pool = nullptr,
                           ActivationQuant aq = ActivationQuant::kPerRow) {
  gemm_int8(M, A, lda, w.int8.view, C, ldc, epilogue::None{}, pool, aq);
  // Row by row: a row of A and of C stay in L1 while every outlier is added into it.
  const std::size_t n_out = w.outlier_v.size();
  for (std::size_t m = 0; m < M; ++m) {
    const float* a = A + m * lda;
    float* c = C + m * ldc;
    for (std::size_t i = 0; i < n_out; ++i) c[w.outlier_n[i]] += a[w.outlier_k[i]] * w.outlier_v[i];
  }
}

}  // namespace stile
