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

}  // namespace stile
