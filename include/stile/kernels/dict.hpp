#pragma once
// Quantized (dictionary) weights in the GEMM. A DictMatrix (codec.hpp) is a weight matrix in the
// group-slab layout of quant/packed_layout.hpp; stile::gemm runs on it directly, decoding one
// KC x NR panel at a time into L1 (kernels/dict-inl.h), as it does on a StackedDict: the blocks
// of a layer assembled from shards of mixed bitwidths.
//
//   stile::gemm(M, A, lda, dict, C, ldc, epi);                              // fused dequant-GEMM
//   const stile::StackedDict qkv = stile::stack_rows(blocks);              // blocks of equal cols
//   stile::gemm(M, A, lda, qkv, C, ldc, epi);
//   stile::PackedWeights w = stile::decode_to_packed(dict);                // decode, then GEMM
//   stile::dequantize(dict, dense);                                        // scalar reference
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "stile/core/error.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile {

namespace detail {

inline StackedDict stack_blocks(std::span<const DictMatrix> blocks, StackedDict::Axis axis, const char* name) {
  require(!blocks.empty(), std::string(name) + ": no blocks to stack");
  const bool by_rows = axis == StackedDict::Axis::kRows;
  StackedDict s;
  s.blocks = blocks;
  s.axis = axis;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const DictMatrix& b = blocks[i];
    validate_weights(b);
    const std::size_t across = by_rows ? b.n_cols : b.n_rows, first = by_rows ? blocks[0].n_cols : blocks[0].n_rows;
    if (across != first) {
      throw Error(std::string("stile: ") + name + ": block " + std::to_string(i) + " has " + std::to_string(across) +
                  (by_rows ? " cols" : " rows") + ", block 0 has " + std::to_string(first) +
                  " (blocks stacked along the " + (by_rows ? "rows" : "cols") + " must have equal " +
                  (by_rows ? "cols" : "rows") + ")");
    }
    (by_rows ? s.n_rows : s.n_cols) += by_rows ? b.n_rows : b.n_cols;
  }
  (by_rows ? s.n_cols : s.n_rows) = by_rows ? blocks[0].n_cols : blocks[0].n_rows;
  return s;
}

// Defined in kernels/gemm_impl.hpp (per-target, kernels/dict-inl.h): decodes every panel of W into
// out, packed for Cfg's panel width on the current target.
template <class Cfg>
void decode_to_packed_on_target(const typename Cfg::Weights& w, float* out);

template <class TilesT, DictLookup kLookupV>
struct DictSweepConfig {
  using Tiles = TilePolicy<TilesT>;
  static constexpr DictLookup kLookup = kLookupV;
};

// Defined in kernels/gemm_impl.hpp: the panel sweep of decode_panels_in_gemm_order.
template <class Cfg>
void sweep_dict_panels(const DictMatrix& w);

// For benchmarks: decodes every KC x NR panel of w in the GEMM's order into one reused,
// L1-resident buffer, exactly as the GEMM's just-in-time path does, minus the arithmetic.
template <class Tiles = DefaultTiles>
void decode_panels_in_gemm_order(const DictMatrix& w, DictLookup lookup = DictLookup::kAuto) {
  validate_weights(w);
  switch (lookup) {
    case DictLookup::kTree: return sweep_dict_panels<DictSweepConfig<Tiles, DictLookup::kTree>>(w);
    case DictLookup::kGather: return sweep_dict_panels<DictSweepConfig<Tiles, DictLookup::kGather>>(w);
    case DictLookup::kBytes: return sweep_dict_panels<DictSweepConfig<Tiles, DictLookup::kBytes>>(w);
    default: return sweep_dict_panels<DictSweepConfig<Tiles, DictLookup::kAuto>>(w);
  }
}

}  // namespace detail

// One weight matrix of `blocks` stacked along the output rows: the blocks must have equal cols
// (Q, K, V or FFN1 row slices of shards). The StackedDict points into `blocks`, which must outlive it.
inline StackedDict stack_rows(std::span<const DictMatrix> blocks) {
  return detail::stack_blocks(blocks, StackedDict::Axis::kRows, "stack_rows");
}

// One weight matrix of `blocks` side by side along the input columns: the blocks must have
// equal rows (attention-output or FFN2 column slices). Points into `blocks` too.
inline StackedDict stack_cols(std::span<const DictMatrix> blocks) {
  return detail::stack_blocks(blocks, StackedDict::Axis::kCols, "stack_cols");
}

// The scalar reference decoder: out[n * ld + k] = W[n][k] (ld = cols() if 0), every weight its
// centroid or, at an outlier, its exact value. For tests and tools.
inline void dequantize(const DictMatrix& m, float* out, std::size_t ld = 0) {
  validate_weights(m);
  if (ld == 0) ld = m.n_cols;
  const std::size_t sb = quant::slab_bytes(m.bits);
  for (std::size_t n = 0; n < m.n_rows; ++n) {
    const std::uint8_t* group = m.packed + (n / quant::kGroupRows) * m.n_cols * sb;
    const std::size_t j = n % quant::kGroupRows;
    for (std::size_t k = 0; k < m.n_cols; ++k) {
      const std::uint8_t* slab = group + k * sb;
      if (m.bits == 32) {
        std::memcpy(out + n * ld + k, slab + j * sizeof(float), sizeof(float));
      } else {
        out[n * ld + k] = m.centroids[quant::slab_index(m.bits, slab, j)];
      }
    }
  }
  if (m.bits == 32) return;
  for (std::size_t i = 0; i < m.n_outliers; ++i) {
    const std::uint32_t key = m.outlier_keys[i];
    const std::size_t n = quant::outlier_row(key, m.n_cols), k = quant::outlier_col(key, m.n_cols);
    require(n < m.n_rows && k < m.n_cols, "dequantize: an outlier key is outside the matrix");
    out[n * ld + k] = m.outlier_values[i];
  }
}

// The same for a stack: out[n * ld + k] = W[n][k] over the whole stacked matrix.
inline void dequantize(const StackedDict& s, float* out, std::size_t ld = 0) {
  validate_weights(s);
  if (ld == 0) ld = s.n_cols;
  std::size_t start = 0;
  for (const DictMatrix& b : s.blocks) {
    if (s.axis == StackedDict::Axis::kRows) {
      dequantize(b, out + start * ld, ld);
      start += b.n_rows;
    } else {
      dequantize(b, out + start, ld);
      start += b.n_cols;
    }
  }
}

// Decodes W once into fp32 weights packed for the GEMM on the current target (PackedF32, panel
// width gemm_panel_width<Tiles>()), with the GEMM's own panel decoder: the decode-then-GEMM path,
// which trades a fp32 copy of the matrix for GEMMs that decode nothing.
template <class Tiles = DefaultTiles, class W>
requires std::is_same_v<W, DictMatrix> || std::is_same_v<W, StackedDict> PackedWeights decode_to_packed(const W& w) {
  validate_weights(w);
  const std::size_t nr = gemm_panel_width<Tiles>();
  const std::size_t panels = (w.rows() + nr - 1) / nr, K = w.cols();
  PackedWeights out;
  out.storage.resize(panels * K * nr);  // every float is written, padding rows as zeros
  if (!out.storage.span().empty()) {
    detail::decode_to_packed_on_target<GemmConfig<Tiles, W, epilogue::None>>(w, out.storage.data());
  }
  out.view = PackedF32{out.storage.data(), w.rows(), K, nr};
  return out;
}

}  // namespace stile

#ifndef STILE_NO_EXTERN_KERNELS  // compiled once in stile::compiled (kernels/instantiate_kernels.hpp)
extern template void stile::detail::decode_to_packed_on_target<
    stile::GemmConfig<stile::DefaultTiles, stile::DictMatrix, stile::epilogue::None>>(const stile::DictMatrix&, float*);
extern template void stile::detail::decode_to_packed_on_target<
    stile::GemmConfig<stile::DefaultTiles, stile::StackedDict, stile::epilogue::None>>(const stile::StackedDict&,
                                                                                       float*);
extern template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kAuto>>(const stile::DictMatrix&);
extern template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kTree>>(const stile::DictMatrix&);
extern template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kGather>>(const stile::DictMatrix&);
extern template void stile::detail::sweep_dict_panels<
    stile::detail::DictSweepConfig<stile::DefaultTiles, stile::DictLookup::kBytes>>(const stile::DictMatrix&);
#endif
