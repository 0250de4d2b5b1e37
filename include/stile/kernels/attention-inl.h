// Per-target fused attention of one head over a range of queries (kernels/attention.hpp).
// Per call, K_h is transposed into k-major panels of NR keys ([head_dim x NR] each, as the GEMM
// packs weights) and V_h copied into panels of NR columns (or read in place: it is k-major
// already); then per block of 4 MR queries:
//   scores[block x keys] = Q K^T   micro-kernel with k = head_dim, panel-outer (a panel of keys
//                                  read into L1 once for the block's register tiles)
//   position terms (a callback), then e = exp(scale (x - row max)) and the row sums, in place
//   ctx = (e V) / row sum          micro-kernel with k over the keys, 128 at a time (a chunk of V
//                                  read into L1 once for the block); the division on block x
//                                  head_dim outputs instead of block x keys probabilities
// The block's scores (32 x 512 floats, 64 KiB, at 512 keys on AVX-512) stay in L2 between the
// three steps, as do the packed K and V for every block. The low-memory mode packs no whole head.
#if defined(STILE_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_ATTENTION_INL_H_
#undef STILE_KERNELS_ATTENTION_INL_H_
#else
#define STILE_KERNELS_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <hwy/highway.h>

#include "stile/core/aligned_buffer.hpp"
#include "stile/kernels/attention.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/epilogue.hpp"
#include "stile/kernels/gemm-inl.h"
#include "stile/kernels/pack-inl.h"
#include "stile/kernels/rowwise-inl.h"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class Tiles>
struct AttentionRows {
  using Shape = typename Tiles::template For<HWY_TARGET>;
  static constexpr std::size_t MR = Shape::MR, NR = Shape::NR;
  // Queries per block: the block's tiles share each panel of K and each chunk of V read into L1
  // (KC x NR floats: 16 KiB at NR = 32), while the block's scores stay in L2.
  static constexpr std::size_t kBlockRows = 4 * MR, kKeyChunk = 128;

  static std::size_t RoundUp(std::size_t n) { return (n + NR - 1) / NR * NR; }
  // Packed K (RoundUp(keys) x head_dim) and V (keys x RoundUp(head_dim)), or in low-memory mode
  // one panel of K (head_dim x NR) and one chunk of V (KC x NR); and a block of scores.
  static std::size_t WorkspaceFloats(std::size_t keys, std::size_t head_dim, bool low_memory) {
    const std::size_t kv =
        low_memory ? head_dim * NR + kKeyChunk * NR : RoundUp(keys) * head_dim + keys * RoundUp(head_dim);
    return kv + kBlockRows * RoundUp(keys);
  }

  static void Run(const AttentionRowsArgs& a) {
    using Epi = epilogue::None;
    const std::size_t s = a.keys, dh = a.head_dim, ld_s = RoundUp(s), dh_panels = RoundUp(dh) / NR;
    static thread_local AlignedBuffer<float> own;
    float* work = a.workspace;
    if (work == nullptr) {
      own.resize(WorkspaceFloats(s, dh, a.low_memory));
      work = own.data();
    }
    // K transposed into panels and V copied into panels once per call (they stream better from
    // L2 than V's rows a whole QKV row apart: 7% faster at 512 keys than in place; V is read in
    // place when one chunk holds every key, 10% faster at 64 keys). In low-memory mode, each panel
    // of K is decoded when a block needs it and V read in place (a chunk copied when head_dim is
    // not a multiple of NR): 6-12% slower at 512 keys, 0-2% at 128 (measured).
    const bool pack = !a.low_memory;
    const bool pack_v = pack && !(dh % NR == 0 && s <= kKeyChunk);
    float* HWY_RESTRICT keys = work;
    float* HWY_RESTRICT values = keys + (pack ? ld_s * dh : dh * NR);
    float* HWY_RESTRICT scores = values + (pack ? s * dh_panels * NR : kKeyChunk * NR);
    const DenseF32 k_rows(a.k, s, dh, a.ld_kv);
    const DenseF32Transposed v_cols(a.v, dh, s, a.ld_kv);
    if (pack) {
      for (std::size_t j = 0; j < s; j += NR) {
        PanelDecoder<DenseF32>::template Decode<NR>(k_rows, j, std::min(NR, s - j), 0, dh, keys + j * dh);
      }
    }
    if (pack_v) {
      for (std::size_t p = 0; p < dh_panels; ++p) {
        PanelDecoder<DenseF32Transposed>::template Decode<NR>(v_cols, p * NR, std::min(NR, dh - p * NR), 0, s,
                                                              values + p * s * NR);
      }
    }

    for (std::size_t q0 = 0; q0 < a.rows; q0 += kBlockRows) {
      const std::size_t block_rows = std::min(kBlockRows, a.rows - q0);
      const std::size_t first = a.first_query + q0, last = first + block_rows - 1;
      // The keys any of the block's queries sees: all, or the union of their windows.
      std::size_t lo = 0, hi = s;
      if (a.window != 0) {
        lo = first > a.window ? first - a.window : 0;
        hi = std::min(s, last + a.window + 1);
      }
      // Scores, panel-outer: each panel of keys is read into L1 once for the block's tiles.
      const float* q = a.q + q0 * a.ld_q;
      for (std::size_t j = lo / NR * NR; j < hi; j += NR) {
        const float* k = keys + j * dh;
        if (!pack) {
          PanelDecoder<DenseF32>::template Decode<NR>(k_rows, j, std::min(NR, s - j), 0, dh, keys);
          k = keys;
        }
        for (std::size_t t = 0; t < block_rows; t += MR) {
          WithRows<MR>(std::min(MR, block_rows - t), [&](auto r) {
            MicroKernel<r, Shape, Epi>(dh, q + t * a.ld_q, a.ld_q, k, NR, scores + t * ld_s + j, ld_s, false, true,
                                       nullptr, nullptr, 0);
          });
        }
      }
      if (a.terms != nullptr) a.terms(a.terms_context, scores, ld_s, first, block_rows, lo, hi);

      // Each row's softmax over its keys; the keys of the block's range outside a row's window
      // get probability 0, as the reference's masked scores do.
      float inv_sum[kBlockRows];
      for (std::size_t r = 0; r < block_rows; ++r) {
        float* row = scores + r * ld_s;
        std::size_t row_lo = lo, row_hi = hi;
        if (a.window != 0) {
          const std::size_t i = first + r;
          row_lo = i > a.window ? i - a.window : 0;
          row_hi = std::min(s, i + a.window + 1);
          std::fill(row + lo, row + row_lo, 0.0f);
          std::fill(row + row_hi, row + hi, 0.0f);
        }
        if (a.softmax != nullptr) {
          a.softmax(row + row_lo, 1, row_hi - row_lo, ld_s, a.scale);
          inv_sum[r] = 1.0f;
        } else {
          inv_sum[r] = 1.0f / ExpShiftedRow(row + row_lo, row_hi - row_lo, a.scale);
        }
      }

      // ctx = e V / sum over the keys [lo, hi), per panel of NR columns of V, KC keys at a time
      // (a KC x NR chunk of V read into L1 once for the block's tiles), into an accumulator
      // tile; the division on block x head_dim outputs instead of block x keys probabilities.
      float* ctx = a.ctx + q0 * a.ld_ctx;
      for (std::size_t p = 0; p < dh_panels; ++p) {
        const std::size_t n = p * NR, nr = std::min(NR, dh - n);
        HWY_ALIGN float acc[kBlockRows * NR];
        for (std::size_t c0 = lo; c0 < hi; c0 += kKeyChunk) {
          const std::size_t kc = std::min(kKeyChunk, hi - c0);
          const float* v = values + (p * s + c0) * NR;
          std::size_t ld_v = NR;
          if (!pack_v && nr == NR) {
            v = a.v + c0 * a.ld_kv + n;
            ld_v = a.ld_kv;
          } else if (!pack_v) {
            PanelDecoder<DenseF32Transposed>::template Decode<NR>(v_cols, n, nr, c0, kc, values);
            v = values;
          }
          for (std::size_t t = 0; t < block_rows; t += MR) {
            WithRows<MR>(std::min(MR, block_rows - t), [&](auto r) {
              MicroKernel<r, Shape, Epi>(kc, scores + t * ld_s + c0, ld_s, v, ld_v, acc + t * NR, NR, c0 > lo, true,
                                         nullptr, nullptr, 0);
            });
          }
        }
        for (std::size_t r = 0; r < block_rows; ++r) {
          float* dst = ctx + r * a.ld_ctx + n;
          const float* src = acc + r * NR;
          for (std::size_t c = 0; c < nr; ++c) dst[c] = src[c] * inv_sum[r];
        }
      }
    }
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
