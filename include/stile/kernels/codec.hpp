#pragma once
// Weight codecs: how the B side of a GEMM is stored. The GEMM computes C = A * W^T for a weight
// matrix W of rows() = N outputs by cols() = K inputs (a PyTorch Linear weight), in whatever
// format W is kept. It never asks for W in fp32 as a whole: it asks the codec to decode one
// KC x NR panel at a time into the packed layout its micro-kernel reads, right before use, so a
// k-bit dictionary codec costs no fp32 copy of the layer.
//
// The contract (per Highway target, specialize stile::HWY_NAMESPACE::PanelDecoder<W>):
//   template <std::size_t kNR>
//   static void Decode(const W& w, size_t n0, size_t nr, size_t k0, size_t kc, float* out);
// writes out[k * kNR + j] = W[n0 + j][k0 + k] for j < nr, k < kc, and 0 for nr <= j < kNR.
// `out` is 64-byte aligned; n0 + nr <= rows(), k0 + kc <= cols(); it must read nothing outside.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "stile/core/error.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile {

template <class W>
concept WeightMatrix = requires(const W& w) {
  { w.rows() } -> std::convertible_to<std::size_t>;
  { w.cols() } -> std::convertible_to<std::size_t>;
};

// Plain fp32 weights, row-major [rows x cols] with row stride ld >= cols (in floats).
struct DenseF32 {
  const float* data = nullptr;
  std::size_t n_rows = 0;
  std::size_t n_cols = 0;
  std::size_t ld = 0;

  DenseF32() = default;
  DenseF32(const float* d, std::size_t rows_, std::size_t cols_, std::size_t ld_ = 0)
      : data(d), n_rows(rows_), n_cols(cols_), ld(ld_ == 0 ? cols_ : ld_) {}
  std::size_t rows() const noexcept { return n_rows; }
  std::size_t cols() const noexcept { return n_cols; }
};

// fp32 weights packed once, at load, into the GEMM's own panel layout for panel width nr (the
// NR of the target the GEMM runs on: see gemm_panel_width()). Panel p holds columns
// [p * nr, p * nr + nr) of C, zero-padded past rows(), k-major: data[(p * cols() + k) * nr + j].
// The micro-kernel reads panels straight from here: a GEMM on these weights decodes nothing, so
// short sequences (a few rows of A per weight read) do not pay a transpose per call.
struct PackedF32 {
  const float* data = nullptr;
  std::size_t n_rows = 0;
  std::size_t n_cols = 0;
  std::size_t nr = 0;
  std::size_t rows() const noexcept { return n_rows; }
  std::size_t cols() const noexcept { return n_cols; }
};

// fp16 (IEEE binary16) weights in PackedF32's panel layout: data[(p * cols() + k) * nr + j],
// zero-padded past rows(), for the panel width nr of the target the GEMM runs on. Half the
// bytes of PackedF32; the GEMM converts each KC x NR panel to fp32 (a contiguous run of halves)
// right before use and accumulates in fp32. Made by pack_weights_f16 (kernels/fp16_weights.hpp),
// which rejects weights a half cannot hold, so the halves are finite.
struct PackedF16 {
  const std::uint16_t* data = nullptr;
  std::size_t n_rows = 0;
  std::size_t n_cols = 0;
  std::size_t nr = 0;
  std::size_t rows() const noexcept { return n_rows; }
  std::size_t cols() const noexcept { return n_cols; }
};

inline void validate_weights(const PackedF16& w) {
  require(w.data != nullptr || w.n_rows == 0 || w.n_cols == 0, "fp16 weights: no data");
  require(w.nr > 0, "fp16 weights: panel width 0 (pack them with pack_weights_f16)");
}

// Plain fp32 weights stored transposed: W^T row-major [cols x rows], row stride ld >= rows.
// Attention's P * V is a GEMM whose "weight" V [tokens x head_dim] is W^T, read in place.
struct DenseF32Transposed {
  const float* data = nullptr;
  std::size_t n_rows = 0;  // N: outputs (columns of the stored matrix)
  std::size_t n_cols = 0;  // K: inputs (rows of the stored matrix)
  std::size_t ld = 0;

  DenseF32Transposed() = default;
  DenseF32Transposed(const float* d, std::size_t rows_, std::size_t cols_, std::size_t ld_ = 0)
      : data(d), n_rows(rows_), n_cols(cols_), ld(ld_ == 0 ? rows_ : ld_) {}
  std::size_t rows() const noexcept { return n_rows; }
  std::size_t cols() const noexcept { return n_cols; }
};

// A quantized matrix in the group-slab layout of quant/packed_layout.hpp: `bits` in 2..6 (k-bit
// indices into `centroids`, 2^bits floats, with outliers patched in exactly), or 32 (fp32
// slabs; centroids and outliers unused). Decoded panel by panel inside the GEMM.
struct DictMatrix {
  const std::uint8_t* packed = nullptr;         // quant::packed_bytes(rows, cols, bits) bytes
  const float* centroids = nullptr;             // 2^bits entries
  const std::uint32_t* outlier_keys = nullptr;  // ascending quant::outlier_key()s
  const float* outlier_values = nullptr;        // the exact weights at those keys
  std::size_t n_outliers = 0;
  std::size_t n_rows = 0;
  std::size_t n_cols = 0;
  unsigned bits = 32;
  std::size_t rows() const noexcept { return n_rows; }
  std::size_t cols() const noexcept { return n_cols; }
};

// Checks what a decoder relies on (gemm() calls it before any panel is decoded): a supported
// bitwidth and the arrays present. O(1), and no message is built unless it fails; the layout of
// the bytes themselves is the store's job.
inline void validate_weights(const DictMatrix& m) {
  if (!quant::is_supported_bits(m.bits)) quant::require_supported_bits(m.bits);
  require(m.packed != nullptr || m.n_rows == 0 || m.n_cols == 0, "quantized weights: no packed bytes");
  require(m.bits == 32 || m.centroids != nullptr, "quantized weights: no centroids");
  require(m.n_outliers == 0 || (m.outlier_keys != nullptr && m.outlier_values != nullptr),
          "quantized weights: outliers without keys or values");
}

// How the dictionary decoder (dict-inl.h) turns indices into centroids: kAuto is what the GEMM
// uses (per target and bitwidth, as measured); the others force one way, for benchmarks (kBytes
// where it does not apply, below 4 bits or on panels narrower than 8, falls back to kAuto).
enum class DictLookup : std::uint8_t { kAuto, kTree, kGather, kBytes };

// A weight matrix made of DictMatrix blocks, each at its own bitwidth, stacked along the output
// rows (blocks of equal cols: Q/K/V and FFN1 slices of the chosen shards) or along the input
// columns (blocks of equal rows: the attention-output and FFN2 slices). This is how one GEMM
// runs over a layer assembled from shards of mixed bitwidths.
struct StackedDict {
  enum class Axis : std::uint8_t { kRows, kCols };
  std::span<const DictMatrix> blocks;
  Axis axis = Axis::kRows;
  std::size_t n_rows = 0;
  std::size_t n_cols = 0;
  std::size_t rows() const noexcept { return n_rows; }
  std::size_t cols() const noexcept { return n_cols; }
};

// Each block valid, the blocks adding up to the stack's shape (O(blocks)).
inline void validate_weights(const StackedDict& s) {
  require(!s.blocks.empty(), "stacked weights: no blocks");
  const bool by_rows = s.axis == StackedDict::Axis::kRows;
  const std::size_t across = by_rows ? s.n_cols : s.n_rows;  // what every block shares
  std::size_t along = 0;
  for (const DictMatrix& b : s.blocks) {
    validate_weights(b);
    if ((by_rows ? b.n_cols : b.n_rows) != across) {
      throw Error(std::string("stile: stacked weights: a block has ") + (by_rows ? "cols " : "rows ") +
                  std::to_string(by_rows ? b.n_cols : b.n_rows) + ", the stack " + std::to_string(across));
    }
    along += by_rows ? b.n_rows : b.n_cols;
  }
  if (along != (by_rows ? s.n_rows : s.n_cols)) {
    throw Error("stile: stacked weights: the blocks add up to " + std::to_string(along) +
                (by_rows ? " rows" : " cols") + ", the stack has " + std::to_string(by_rows ? s.n_rows : s.n_cols));
  }
}

}  // namespace stile
