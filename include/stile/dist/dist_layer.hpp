#pragma once
// A layer computed by several devices together (ranks of a Communicator), each holding its part of
// the weights as a Partition gives it (plan/layer_partition.hpp); one implementation per mode:
// dist/ws_layer.hpp, dist/tiled1d_layer.hpp, dist/tiled2d_layer.hpp (made by
// dist/make_dist_layer.hpp). Every rank calls run() with the same x and sequences; on return, x
// holds the layer's output on every rank, equal to the single-device layer's up to float rounding
// (the partial sums are added in another order).
#include <cstddef>
#include <span>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/plan/layer_partition.hpp"
#include "stile/dist/trace.hpp"
#include "stile/kernels/gemm.hpp"

namespace stile {

class DistLayer {
 public:
  virtual ~DistLayer() = default;
  // x: [tokens x d], the packed rows of all sequences (the same on every rank), updated in place;
  // seq_offsets: n + 1 row offsets. Collective: every rank of the communicator calls it. Throws
  // stile::Error (a rank that does not arrive: dist/communicator.hpp), x then undefined.
  virtual void run(float* x, std::span<const std::size_t> seq_offsets, ThreadPool& pool) = 0;
  // Bytes of GEMM weights this rank holds (packed, fp32).
  virtual std::size_t weight_bytes() const = 0;
  virtual DistMode mode() const = 0;
  // Phases of the following runs go to `trace` (nullptr: none).
  void set_trace(DistTrace* trace) noexcept { trace_ = trace; }

 protected:
  DistTrace* trace_ = nullptr;
};

namespace dist_detail {

// A block of a row-major fp32 matrix (row stride ld), packed for the GEMM; empty when it has no
// rows or columns (the caller then skips its GEMM).
struct Block {
  PackedWeights w;
  std::size_t rows = 0, cols = 0;
  bool empty() const noexcept { return rows == 0 || cols == 0; }
  const PackedF32& view() const noexcept { return w.view; }
  std::size_t bytes() const noexcept { return empty() ? 0 : w.bytes(); }
};

inline Block pack_block(const float* w, std::size_t ld, std::size_t row0, std::size_t rows, std::size_t col0,
                        std::size_t cols) {
  Block b;
  b.rows = rows, b.cols = cols;
  if (!b.empty()) b.w = pack_weights(DenseF32(w + row0 * ld + col0, rows, cols, ld));
  return b;
}

// Rows [h0 hd, (h0 + h) hd) of each of W_q, W_k, W_v (stacked in wqkv [3d x d]), columns
// [col0, col0 + cols), as one [3 h hd x cols] block: Q, K, V side by side as attention reads them.
inline Block pack_qkv_heads(const float* wqkv, std::size_t d, std::size_t hd, std::size_t h0, std::size_t h,
                            std::size_t col0, std::size_t cols) {
  const std::size_t da = h * hd;
  std::vector<float> rows(3 * da * cols);
  for (std::size_t part = 0; part < 3; ++part) {
    for (std::size_t r = 0; r < da; ++r) {
      const float* src = wqkv + (part * d + h0 * hd + r) * d + col0;
      std::copy(src, src + cols, rows.begin() + static_cast<std::ptrdiff_t>((part * da + r) * cols));
    }
  }
  return pack_block(rows.data(), cols, 0, 3 * da, 0, cols);
}
inline std::vector<float> qkv_bias_heads(const std::vector<float>& bqkv, std::size_t d, std::size_t hd,
                                         std::size_t h0, std::size_t h) {
  std::vector<float> b;
  for (std::size_t part = 0; part < 3; ++part) {
    const auto at = bqkv.begin() + static_cast<std::ptrdiff_t>(part * d + h0 * hd);
    b.insert(b.end(), at, at + static_cast<std::ptrdiff_t>(h * hd));
  }
  return b;
}

inline std::size_t prefix(const std::vector<std::size_t>& v, std::size_t i) {
  std::size_t s = 0;
  for (std::size_t k = 0; k < i; ++k) s += v[k];
  return s;
}

}  // namespace dist_detail
}  // namespace stile
