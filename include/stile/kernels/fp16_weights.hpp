#pragma once
// fp16 weights for the GEMM: fp32 weights rounded once, at load, to IEEE binary16 and packed into
// the GEMM's panel layout (PackedF16, codec.hpp). Half the memory of PackedF32; the GEMM converts
// one KC x NR panel at a time back to fp32 and accumulates in fp32, so the only error is the
// rounding of each weight to 11 significant bits.
//
//   stile::PackedWeightsF16 w = stile::pack_weights_f16(stile::DenseF32(W, N, K), "layer.0.ffn1");
//   stile::gemm(M, A, lda, w.view, C, ldc, stile::epilogue::BiasGelu{.bias = b});
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/half.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/gemm.hpp"

namespace stile {

// Owns fp16 weights packed for the GEMM (see PackedF16).
struct PackedWeightsF16 {
  AlignedBuffer<std::uint16_t> storage;
  PackedF16 view;
  std::size_t bytes() const noexcept { return storage.size() * sizeof(std::uint16_t); }
};

namespace fp16_weights_detail {

[[noreturn]] inline void fail_unholdable(std::string_view tensor_name, float x, std::size_t n, std::size_t k) {
  throw Error("stile: fp16 weights: " + (tensor_name.empty() ? std::string("a tensor") : std::string(tensor_name)) +
              " has " + std::to_string(x) + " at row " + std::to_string(n) + ", column " + std::to_string(k) +
              ", which fp16 cannot hold (|w| <= 65504, not NaN): keep this tensor in fp32");
}

}  // namespace fp16_weights_detail

// Rounds W [rows x cols] (row stride ld) to fp16 (nearest, ties to even) and packs it for the
// panel width of the current target, as pack_weights does for fp32: a GEMM on another target
// (another panel width) refuses it. A weight a half cannot hold, |w| > 65504 or NaN, is an
// error naming `tensor_name`, the row and the column: it is not saturated, nor turned into inf.
template <class Tiles = DefaultTiles>
PackedWeightsF16 pack_weights_f16(const DenseF32& w, std::string_view tensor_name = {}) {
  require(w.data != nullptr || w.rows() == 0 || w.cols() == 0, "pack_weights_f16: no weights");
  require(w.ld >= w.cols(), "pack_weights_f16: ld < cols");
  const std::size_t nr = gemm_panel_width<Tiles>();
  const std::size_t K = w.cols();
  PackedWeightsF16 out;
  pack_panels(w, nr, out.storage, [&](float x, std::size_t n, std::size_t k) {
    if (!(x <= kHalfMax && x >= -kHalfMax)) fp16_weights_detail::fail_unholdable(tensor_name, x, n, k);  // also NaN
    return float_to_half(x);
  });
  out.view = PackedF16{out.storage.data(), w.rows(), K, nr};
  return out;
}

// The same from fp32 weights already packed for this target (pack_weights, or a dictionary
// codec's decode_to_packed): each weight rounded where it lies, no unpacking and repacking (the
// mapped layer converts decoded shards this way on a request's path). Bit for bit what
// pack_weights_f16 gives for the same dense weights; the padding past the last row stays zero.
template <class Tiles = DefaultTiles>
PackedWeightsF16 pack_weights_f16(const PackedF32& w, std::string_view tensor_name = {}) {
  require(w.data != nullptr || w.rows() == 0 || w.cols() == 0, "pack_weights_f16: no weights");
  const std::size_t nr = gemm_panel_width<Tiles>(), K = w.cols();
  require(w.nr == nr, "pack_weights_f16: weights packed for another panel width than this target's");
  const std::size_t size = (w.rows() + nr - 1) / nr * K * nr;
  PackedWeightsF16 out;
  out.storage.resize(size);
  std::uint16_t* h = out.storage.data();
  for (std::size_t i = 0; i < size; ++i) {
    const float x = w.data[i];
    if (!(x <= kHalfMax && x >= -kHalfMax)) {  // also NaN
      const std::size_t within = i % (K * nr);
      fp16_weights_detail::fail_unholdable(tensor_name, x, i / (K * nr) * nr + within % nr, within / nr);
    }
    h[i] = float_to_half(x);
  }
  out.view = PackedF16{out.storage.data(), w.rows(), K, nr};
  return out;
}

}  // namespace stile
