// Per-target fp32 GEMM: C[M x N] = epilogue(A[M x K] * W^T), W stored [N x K] in any codec.
// BLIS structure (docs/gemm.md): loops jc (NC) > pc (KC, decode a KC x NC block of W into packed
// NR-wide panels) > ic (MC) > jr (NR) > ir (MR) > micro-kernel. A is read in place (its MR rows
// are broadcast one k at a time, so unpacked rows stream as well as a packed sliver would).
#if defined(STILE_KERNELS_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_GEMM_INL_H_
#undef STILE_KERNELS_GEMM_INL_H_
#else
#define STILE_KERNELS_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/tile_shape.hpp"
#include "stile/kernels/activation-inl.h"
#include "stile/kernels/epilogue.hpp"
#include "stile/kernels/gemm_args.hpp"
#include "stile/kernels/gemm_split.hpp"
#include "stile/kernels/pack-inl.h"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Full unrolling of the register-tile loops (constant trip counts), so the accumulator arrays
// below become plain registers. (Lambdas over index_sequence were not inlined by GCC 12.)
// The k loop is unrolled by 4 (not fully): enough for the scheduler to overlap the loads of the
// next k with the FMAs of this one, measured +1.5% on AVX2 at M = 128.
#if defined(__clang__)
#define STILE_UNROLL _Pragma("unroll")
#define STILE_UNROLL4 _Pragma("unroll 4")
#elif defined(__GNUC__)
#define STILE_UNROLL _Pragma("GCC unroll 64")
#define STILE_UNROLL4 _Pragma("GCC unroll 4")
#else
#define STILE_UNROLL
#define STILE_UNROLL4
#endif

// Calls f(integral_constant<rows>) for a runtime rows in [1, kMax]: one instantiation per count.
template <std::size_t kMax, class F>
HWY_INLINE void WithRows(std::size_t rows, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((rows == I + 1 ? (f(std::integral_constant<std::size_t, I + 1>{}), 0) : 0), ...);
  }
  (std::make_index_sequence<kMax>{});
}

// Float lanes per vector for an NR-wide tile on this target: a full vector, or NR when the
// target's vectors are wider than the tile (an 8-wide tile on AVX-512 uses 256-bit vectors).
template <std::size_t kNR>
constexpr std::size_t TileLanes() {
  constexpr std::size_t full = hn::MaxLanes(hn::ScalableTag<float>());
  return kNR < full ? kNR : full;
}

// The MR x NR micro-kernel (kRows <= MR rows at the M edge): acc = A[kRows x kc] * Bpacked[kc x NR]
// in registers, then C = epilogue(acc (+ C if accumulate)) on the last K block (finish).
//   a: row r at a + r * lda, k contiguous. b: panel, b[k * ldb + j]: packed (ldb = NR) or read in
//   place from weights already k-major (DenseF32Transposed, ldb = its row stride).
//   bias: NR values at this tile's columns. residual: row r at residual + r * ldr (or null).
//   kStreamB: b is read in place from weights packed at load (PackedF32), not from a panel just
//   decoded into L1. A layer's weights are read once per forward and a small model's outgrow the
//   L3 (MiniLM: 42 MB of fp32 weights), so at short sequences the GEMM streams B from DRAM at a
//   few rows of A per weight; the hardware prefetcher alone kept too few lines in flight.
//   Prefetching kPrefetchBytes ahead (the next rows of the panel, then the next panel) hides it.
template <std::size_t kRows, class Shape, class Epi, bool kStreamB = false>
HWY_INLINE void MicroKernel(std::size_t kc, const float* HWY_RESTRICT a, std::size_t lda, const float* HWY_RESTRICT b,
                            std::size_t ldb, float* c, std::size_t ldc, bool accumulate, bool finish, const float* bias,
                            const float* residual, std::size_t ldr) {
  constexpr std::size_t kNR = Shape::NR;
  const hn::CappedTag<float, TileLanes<kNR>()> d;
  constexpr std::size_t kLanes = hn::MaxLanes(d);
  constexpr std::size_t kVectors = kNR / kLanes;
  static_assert(kVectors * kLanes == kNR, "NR must be a whole number of vectors");
  using V = hn::Vec<decltype(d)>;
  constexpr std::size_t kPrefetchBytes = 4096;
  constexpr std::size_t kPrefetchRows = kPrefetchBytes / (kNR * sizeof(float));
  constexpr std::size_t kLineFloats = 64 / sizeof(float);

  V acc[kRows][kVectors];
  STILE_UNROLL
  for (std::size_t r = 0; r < kRows; ++r) {
    STILE_UNROLL
    for (std::size_t v = 0; v < kVectors; ++v) acc[r][v] = hn::Zero(d);
  }

  STILE_UNROLL4
  for (std::size_t k = 0; k < kc; ++k) {
    if constexpr (kStreamB) {
      // (A prefetch past the end of the weights is harmless: it never faults.)
      for (std::size_t j = 0; j < kNR; j += kLineFloats) hwy::Prefetch(b + (k + kPrefetchRows) * ldb + j);
    }
    V bk[kVectors];
    STILE_UNROLL
    for (std::size_t v = 0; v < kVectors; ++v) bk[v] = hn::LoadU(d, b + k * ldb + v * kLanes);
    STILE_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) {
      const V ar = hn::Set(d, a[r * lda + k]);
      STILE_UNROLL
      for (std::size_t v = 0; v < kVectors; ++v) acc[r][v] = hn::MulAdd(ar, bk[v], acc[r][v]);
    }
  }

  V bias_v[kVectors];
  STILE_UNROLL
  for (std::size_t v = 0; v < kVectors; ++v) {
    bias_v[v] = Epi::has_bias ? hn::LoadU(d, bias + v * kLanes) : hn::Zero(d);
  }
  constexpr bool kGelu = Epi::activation == Activation::kGelu;
  STILE_UNROLL
  for (std::size_t r = 0; r < kRows; ++r) {
    STILE_UNROLL
    for (std::size_t v = 0; v < kVectors; ++v) {
      float* cp = c + r * ldc + v * kLanes;
      V x = acc[r][v];
      if (accumulate) x = hn::Add(x, hn::LoadU(d, cp));
      if (finish) {
        if constexpr (Epi::has_bias) x = hn::Add(x, bias_v[v]);
        if constexpr (Epi::has_residual && !kGelu) {
          if (residual != nullptr) x = hn::Add(x, hn::LoadU(d, residual + r * ldr + v * kLanes));
        }
      }
      hn::StoreU(x, d, cp);
    }
  }
  // GELU runs as a second pass over the tile, now in L1: with the accumulators no longer live,
  // its polynomial chains get all the registers (applied to the live accumulators it spilled:
  // 155 us instead of 86 us of GELU in a 128 x 1536 x 384 GEMM on AVX2).
  if constexpr (kGelu) {
    if (finish) {
      for (std::size_t r = 0; r < kRows; ++r) {
        STILE_UNROLL
        for (std::size_t v = 0; v < kVectors; ++v) {
          float* cp = c + r * ldc + v * kLanes;
          V x = Gelu(d, hn::LoadU(d, cp));
          if constexpr (Epi::has_residual) {
            if (residual != nullptr) x = hn::Add(x, hn::LoadU(d, residual + r * ldr + v * kLanes));
          }
          hn::StoreU(x, d, cp);
        }
      }
    }
  }
}

template <class Cfg>
struct GemmDriver {
  using Shape = typename Cfg::Tiles::template For<HWY_TARGET>;
  using Weights = typename Cfg::Weights;
  using Epi = typename Cfg::Epi;
  using Args = GemmArgs<Weights, Epi>;
  static constexpr std::size_t MR = Shape::MR, NR = Shape::NR, KC = Shape::KC, MC = Shape::MC, NC = Shape::NC;
  // Weights already in panel layout (PackedF32) are read in place, not decoded.
  static constexpr bool kInPlace = requires { PanelDecoder<Weights>::kInPlace; };
  // Weights already k-major with a row stride (DenseF32Transposed: attention's V) are read in
  // place for full-width panels; only an edge panel narrower than NR is copied (zero padding).
  static constexpr bool kStridedInPlace = requires { PanelDecoder<Weights>::kStridedInPlace; };

  static std::size_t PanelWidth() { return NR; }

  // One MR x NR tile (mr <= MR rows, nr <= NR columns) at C(m, n).
  static HWY_INLINE void Tile(const Args& g, std::size_t m, std::size_t n, std::size_t mr, std::size_t nr,
                              std::size_t k0, std::size_t kc, const float* HWY_RESTRICT b, std::size_t ldb,
                              bool accumulate, bool finish, const float* residual) {
    const float* a = g.A + m * g.lda + k0;
    const float* bias = Epi::has_bias ? g.epi.bias + n : nullptr;
    const std::size_t ldr = g.epi.residual_ld;
    const float* res = residual ? residual + m * ldr + n : nullptr;
    float* c = g.C + m * g.ldc + n;
    if (nr == NR) {
      if (mr == MR) {
        MicroKernel<MR, Shape, Epi, kInPlace>(kc, a, g.lda, b, ldb, c, g.ldc, accumulate, finish, bias, res, ldr);
      } else {
        WithRows<MR - 1>(mr, [&](auto rows) {
          MicroKernel<rows, Shape, Epi, kInPlace>(kc, a, g.lda, b, ldb, c, g.ldc, accumulate, finish, bias, res, ldr);
        });
      }
      return;
    }
    // N edge: run the full-width kernel on a padded copy, so nothing reads or writes past
    // column N of C, the bias or the residual.
    HWY_ALIGN float tile_c[MR * NR] = {};
    HWY_ALIGN float tile_res[MR * NR] = {};
    HWY_ALIGN float tile_bias[NR] = {};
    for (std::size_t r = 0; r < mr; ++r) {
      if (accumulate) std::memcpy(tile_c + r * NR, c + r * g.ldc, nr * sizeof(float));
      if (finish && res) std::memcpy(tile_res + r * NR, res + r * ldr, nr * sizeof(float));
    }
    if (finish && bias) std::memcpy(tile_bias, bias, nr * sizeof(float));
    WithRows<MR>(mr, [&](auto rows) {
      MicroKernel<rows, Shape, Epi, kInPlace>(kc, a, g.lda, b, ldb, tile_c, NR, accumulate, finish, tile_bias,
                                              res ? tile_res : nullptr, NR);
    });
    for (std::size_t r = 0; r < mr; ++r) std::memcpy(c + r * g.ldc, tile_c + r * NR, nr * sizeof(float));
  }

  // Rows [m0, m1) x columns [n0, n1) of C; called by one worker.
  static void Block(const Args& g, std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1,
                    bool residual_in_place) {
    // The packed B block is per thread and kept between calls: allocating it per call would
    // cost an mmap and page faults (it is larger than malloc's mmap threshold).
    static thread_local AlignedBuffer<float> packed;
    if constexpr (!kInPlace) packed.resize(KC * NC);
    const std::size_t K = g.W->cols();
    const float* residual = (Epi::has_residual && !residual_in_place) ? g.epi.residual : nullptr;
    for (std::size_t jc = n0; jc < n1; jc += NC) {
      const std::size_t nc = std::min(NC, n1 - jc);
      for (std::size_t pc = 0; pc < K; pc += KC) {
        const std::size_t kc = std::min(KC, K - pc);
        const bool accumulate = pc > 0 || residual_in_place;
        const bool finish = pc + kc == K;
        // All rows fit one MC block (BERT's usual case: M is a few hundred tokens at most): each
        // KC x NR panel is decoded right before its micro-kernels use it and stays in L1. With
        // more rows, the whole KC x NC block is decoded once and reused by every MC block.
        if constexpr (!kInPlace) {
          if (m1 - m0 <= MC) {
            for (std::size_t jr = 0; jr < nc; jr += NR) {
              const std::size_t nr = std::min(NR, nc - jr);
              const float* b = packed.data();
              std::size_t ldb = NR;
              if constexpr (kStridedInPlace) {
                if (nr == NR) {
                  b = PanelDecoder<Weights>::StridedPanel(*g.W, jc + jr, pc);
                  ldb = PanelDecoder<Weights>::Stride(*g.W);
                }
              }
              if (b == packed.data()) {
                PanelDecoder<Weights>::template Decode<NR>(*g.W, jc + jr, nr, pc, kc, packed.data());
              }
              for (std::size_t ir = m0; ir < m1; ir += MR) {
                Tile(g, ir, jc + jr, std::min(MR, m1 - ir), nr, pc, kc, b, ldb, accumulate, finish, residual);
              }
            }
            continue;
          }
          for (std::size_t jr = 0; jr < nc; jr += NR) {
            PanelDecoder<Weights>::template Decode<NR>(*g.W, jc + jr, std::min(NR, nc - jr), pc, kc,
                                                       packed.data() + jr * kc);
          }
        }
        for (std::size_t ic = m0; ic < m1; ic += MC) {
          const std::size_t mc = std::min(MC, m1 - ic);
          for (std::size_t jr = 0; jr < nc; jr += NR) {
            const std::size_t nr = std::min(NR, nc - jr);
            const float* b;
            if constexpr (kInPlace) {
              b = PanelDecoder<Weights>::template Panel<NR>(*g.W, jc + jr, pc);
            } else {
              b = packed.data() + jr * kc;
            }
            for (std::size_t ir = 0; ir < mc; ir += MR) {
              Tile(g, ic + ir, jc + jr, std::min(MR, mc - ir), nr, pc, kc, b, NR, accumulate, finish, residual);
            }
          }
        }
      }
    }
  }

  static void Run(const Args& g) {
    const std::size_t M = g.M, N = g.W->rows();
    const bool in_place = Epi::has_residual && g.epi.residual == g.C;
    detail::run_gemm_blocks(*g.pool, M, N, MR, NR, [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
      Block(g, m0, m1, n0, n1, in_place);
    });
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
