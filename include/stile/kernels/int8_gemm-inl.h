// Per-target int8 GEMM (kernels/int8_gemm.hpp): u8 activations x s8 weights packed in panels
// [Kp/4][NR][4] (quant/int8_weights.hpp) -> an MR x NR int32 tile in registers -> fp32 epilogue.
// Highway 1.0.3 has no int8 dot product, so each target's micro-kernel uses its intrinsics behind
// one contract (Tile below); the activation quantization and the epilogue are Highway code.
//
// Blocking: the whole of K per tile (no KC split: a panel is NR * Kp bytes, 96 KiB at K = 3072
// on AVX-512, streamed from L2; the int32 accumulators never leave registers), rows of A in MC
// blocks that fit L2, then panels, then MR-row tiles. N is split across threads first.
#if defined(STILE_KERNELS_INT8_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_INT8_GEMM_INL_H_
#undef STILE_KERNELS_INT8_GEMM_INL_H_
#else
#define STILE_KERNELS_INT8_GEMM_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include <hwy/highway.h>

#include "stile/core/aligned_buffer.hpp"
#include "stile/kernels/activation-inl.h"
#include "stile/kernels/epilogue.hpp"
#include "stile/kernels/gemm_split.hpp"
#include "stile/kernels/int8_gemm.hpp"

#if HWY_ARCH_X86
#include <cpuid.h>
#include <immintrin.h>
#elif HWY_ARCH_ARM_A64
#include <arm_neon.h>
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#ifndef STILE_I8_UNROLL
#if defined(__clang__)
#define STILE_I8_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define STILE_I8_UNROLL _Pragma("GCC unroll 64")
#else
#define STILE_I8_UNROLL
#endif
#endif

// Four bytes of A (one k-group of one row) as a 32-bit lane.
HWY_INLINE std::int32_t LoadGroup(const std::uint8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels. The contract, for kRows <= MR rows and kg k-groups:
//   c[r * NR + j] = sum_{k < 4 kg} a[r * lda + k] * b[((k / 4) * NR + j) * 4 + k % 4]
// exactly (int32): a u8 (row r at a + r * lda, 4 kg bytes readable), b one packed panel.
// col_sums: the panel's NR column sums (for kernels that bias the activations, NEON's sdot).

// Plain loops: HWY_SCALAR / HWY_EMU128, and NEON without the dot-product extension.
template <std::size_t kMR, std::size_t kNR>
struct GenericInt8Kernel {
  static constexpr std::size_t MR = kMR, NR = kNR;
  static constexpr std::int32_t kWeightMax = 127;  // exact int32 products: no saturation
  template <std::size_t kRows>
  static HWY_NOINLINE void Tile(std::size_t kg, const std::uint8_t* HWY_RESTRICT a, std::size_t lda,
                                const std::int8_t* HWY_RESTRICT b, const std::int32_t*, std::int32_t* HWY_RESTRICT c) {
    std::int32_t acc[kRows][NR] = {};
    for (std::size_t g = 0; g < kg; ++g) {
      const std::int8_t* bg = b + g * NR * 4;
      for (std::size_t r = 0; r < kRows; ++r) {
        const std::uint8_t* ar = a + r * lda + g * 4;
        for (std::size_t j = 0; j < NR; ++j) {
          acc[r][j] += ar[0] * bg[j * 4] + ar[1] * bg[j * 4 + 1] + ar[2] * bg[j * 4 + 2] + ar[3] * bg[j * 4 + 3];
        }
      }
    }
    for (std::size_t r = 0; r < kRows; ++r) std::memcpy(c + r * NR, acc[r], sizeof(acc[r]));
  }
};

#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
// x86 without a dot product, on the vectors of V (MaddOps128 / 256 / 512: V::kBytes each; a row's
// NR = V::kBytes / 2 int32 columns are two vectors): per k-group, vpmaddubsw (pairs of u8 x s8 into
// saturating s16; exact for 7-bit weights) then vpmaddwd with ones (pairs of s16 into s32), for
// any u8 activations; or, kPairGroups, on gemm_int8's own activations quantized to 7 bits
// (0..127), two k-groups' vpmaddubsw results added in 16 bits before one vpmaddwd. Exact:
// |a0 w0 + a1 w1| <= 2 * 127 * 63 = 16002, and two of them 32004 < 32767. Per row and 8 k values:
// 4 vpmaddubsw + 2 vpmaddwd on the multiply ports instead of 4 + 4 (the per-group kernel's cap is
// the fp32 FMA's rate times 2). Registers (16 on AVX2 and SSE4): 2 MR accumulators, 2 broadcasts,
// the constant and the products leave no room for all 4 panel vectors of a pair at MR = 4: g++ 12
// takes two of them as memory operands and keeps one accumulator on the stack; a 3-row tile,
// which spills nothing, measured the same on AVX2 (docs/design-notes.md).
template <class V, std::size_t kMR, bool kPairGroups>
struct MaddKernel {
  static constexpr std::size_t MR = kMR, NR = V::kBytes / 2;
  static constexpr std::int32_t kWeightMax = 63, kActivationMax = kPairGroups ? 127 : 255;
  template <std::size_t kRows>
  static HWY_NOINLINE void Tile(std::size_t kg, const std::uint8_t* HWY_RESTRICT a, std::size_t lda,
                                const std::int8_t* HWY_RESTRICT b, const std::int32_t*, std::int32_t* HWY_RESTRICT c) {
    using T = typename V::T;
    constexpr std::size_t kVec = V::kBytes;  // a k-group of the panel is 2 vectors
    const T ones = V::Ones16();
    T acc[kRows][2];
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = V::Zero();
    std::size_t g = 0;
    if constexpr (kPairGroups) {
      for (; g + 2 <= kg; g += 2) {  // groups g and g + 1: 4 vectors of the panel
        const std::int8_t* bg = b + g * 2 * kVec;
        const T b0 = V::Load(bg), b1 = V::Load(bg + kVec), b2 = V::Load(bg + 2 * kVec), b3 = V::Load(bg + 3 * kVec);
        STILE_I8_UNROLL
        for (std::size_t r = 0; r < kRows; ++r) {
          const T a0 = V::Broadcast32(LoadGroup(a + r * lda + g * 4));
          const T a1 = V::Broadcast32(LoadGroup(a + r * lda + g * 4 + 4));
          const T lo = V::Add16(V::Maddubs(a0, b0), V::Maddubs(a1, b2));
          const T hi = V::Add16(V::Maddubs(a0, b1), V::Maddubs(a1, b3));
          acc[r][0] = V::Add32(acc[r][0], V::Madd(lo, ones));
          acc[r][1] = V::Add32(acc[r][1], V::Madd(hi, ones));
        }
      }
    }
    for (; g < kg; ++g) {  // every group, or an odd last one
      const T b0 = V::Load(b + g * 2 * kVec), b1 = V::Load(b + g * 2 * kVec + kVec);
      STILE_I8_UNROLL
      for (std::size_t r = 0; r < kRows; ++r) {
        const T av = V::Broadcast32(LoadGroup(a + r * lda + g * 4));
        acc[r][0] = V::Add32(acc[r][0], V::Madd(V::Maddubs(av, b0), ones));
        acc[r][1] = V::Add32(acc[r][1], V::Madd(V::Maddubs(av, b1), ones));
      }
    }
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) {
      V::Store(c + r * NR, acc[r][0]);
      V::Store(c + r * NR + NR / 2, acc[r][1]);
    }
  }
};
#endif

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// 8 x 32 on 512-bit vectors: 16 accumulators + 2 panel vectors + 1 broadcast of 32 registers
// (the maddubs path adds a constant and two temporaries).
inline constexpr std::size_t kInt8NR = 32;
#undef STILE_I8_VNNI_ATTR
#if defined(__clang__)
// clang replaces the target's features (Highway's pragma) with the attribute's, and then refuses
// to inline the target's HWY_ATTR helpers (pclmul, ...): name them all.
#define STILE_I8_VNNI_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#else
#define STILE_I8_VNNI_ATTR __attribute__((target("avx512f,avx512bw,avx512vnni")))
#endif

struct Vnni512Kernel {
  static constexpr std::size_t MR = 8, NR = 32;
  static constexpr std::int32_t kWeightMax = 127;
  template <std::size_t kRows>
  static STILE_I8_VNNI_ATTR HWY_NOINLINE void Tile(std::size_t kg, const std::uint8_t* HWY_RESTRICT a, std::size_t lda,
                                                   const std::int8_t* HWY_RESTRICT b, const std::int32_t*,
                                                   std::int32_t* HWY_RESTRICT c) {
    __m512i acc[kRows][2];
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    for (std::size_t g = 0; g < kg; ++g) {
      const __m512i b0 = _mm512_loadu_si512(b + g * 128), b1 = _mm512_loadu_si512(b + g * 128 + 64);
      STILE_I8_UNROLL
      for (std::size_t r = 0; r < kRows; ++r) {
        const __m512i av = _mm512_set1_epi32(LoadGroup(a + r * lda + g * 4));
        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
      }
    }
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) {
      _mm512_storeu_si512(c + r * NR, acc[r][0]);
      _mm512_storeu_si512(c + r * NR + 16, acc[r][1]);
    }
  }
};

// Without VNNI: MaddKernel on 512-bit vectors, 8 x 32 (25 of 32 registers with pairs of groups).
struct MaddOps512 {
  using T = __m512i;
  static constexpr std::size_t kBytes = 64;
  static HWY_INLINE T Zero() { return _mm512_setzero_si512(); }
  static HWY_INLINE T Ones16() { return _mm512_set1_epi16(1); }
  static HWY_INLINE T Load(const std::int8_t* p) { return _mm512_loadu_si512(p); }
  static HWY_INLINE void Store(std::int32_t* p, T v) { _mm512_storeu_si512(p, v); }
  static HWY_INLINE T Broadcast32(std::int32_t v) { return _mm512_set1_epi32(v); }
  static HWY_INLINE T Maddubs(T a, T b) { return _mm512_maddubs_epi16(a, b); }
  static HWY_INLINE T Madd(T a, T b) { return _mm512_madd_epi16(a, b); }
  static HWY_INLINE T Add16(T a, T b) { return _mm512_add_epi16(a, b); }
  static HWY_INLINE T Add32(T a, T b) { return _mm512_add_epi32(a, b); }
};

inline bool CpuHasInt8Dot() {
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
}
using Int8DotKernel = Vnni512Kernel;
using Int8FallbackKernel = MaddKernel<MaddOps512, 8, false>;
using Int8FallbackU7Kernel = MaddKernel<MaddOps512, 8, true>;

#elif HWY_TARGET == HWY_AVX2
// 16 of 16 registers: VNNI 6 x 16 = 12 accumulators + 2 panel vectors + 1 broadcast; the maddubs
// path needs a constant and two temporaries more, so 4 x 16.
inline constexpr std::size_t kInt8NR = 16;
#undef STILE_I8_VNNI_ATTR
#if defined(__clang__)
#define STILE_I8_VNNI_ATTR __attribute__((target(HWY_TARGET_STR ",avxvnni")))
#else
#define STILE_I8_VNNI_ATTR __attribute__((target("avx2,avxvnni")))
#endif

struct Vnni256Kernel {
  static constexpr std::size_t MR = 6, NR = 16;
  static constexpr std::int32_t kWeightMax = 127;
  template <std::size_t kRows>
  static STILE_I8_VNNI_ATTR HWY_NOINLINE void Tile(std::size_t kg, const std::uint8_t* HWY_RESTRICT a, std::size_t lda,
                                                   const std::int8_t* HWY_RESTRICT b, const std::int32_t*,
                                                   std::int32_t* HWY_RESTRICT c) {
    __m256i acc[kRows][2];
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (std::size_t g = 0; g < kg; ++g) {
      const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64));
      const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64 + 32));
      STILE_I8_UNROLL
      for (std::size_t r = 0; r < kRows; ++r) {
        const __m256i av = _mm256_set1_epi32(LoadGroup(a + r * lda + g * 4));
        acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], av, b0);
        acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], av, b1);
      }
    }
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * NR), acc[r][0]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * NR + 8), acc[r][1]);
    }
  }
};

// Without VNNI: MaddKernel on 256-bit vectors, 4 x 16.
struct MaddOps256 {
  using T = __m256i;
  static constexpr std::size_t kBytes = 32;
  static HWY_INLINE T Zero() { return _mm256_setzero_si256(); }
  static HWY_INLINE T Ones16() { return _mm256_set1_epi16(1); }
  static HWY_INLINE T Load(const std::int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static HWY_INLINE void Store(std::int32_t* p, T v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static HWY_INLINE T Broadcast32(std::int32_t v) { return _mm256_set1_epi32(v); }
  static HWY_INLINE T Maddubs(T a, T b) { return _mm256_maddubs_epi16(a, b); }
  static HWY_INLINE T Madd(T a, T b) { return _mm256_madd_epi16(a, b); }
  static HWY_INLINE T Add16(T a, T b) { return _mm256_add_epi16(a, b); }
  static HWY_INLINE T Add32(T a, T b) { return _mm256_add_epi32(a, b); }
};

inline bool CpuHasInt8Dot() {
#if defined(__clang__) && __clang_major__ < 16
  // clang before 16 has no "avxvnni" for __builtin_cpu_supports: AVX-VNNI is CPUID.(7, 1):EAX[4]
  // (the OS's AVX state support is implied: this is the AVX2 target, chosen at run time).
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && ((a >> 4) & 1u) != 0;
  }();
#else
  static const bool has = __builtin_cpu_supports("avxvnni");
#endif
  return has;
}
using Int8DotKernel = Vnni256Kernel;
using Int8FallbackKernel = MaddKernel<MaddOps256, 4, false>;
using Int8FallbackU7Kernel = MaddKernel<MaddOps256, 4, true>;

#elif HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
// No dot product: MaddKernel on 128-bit vectors (pmaddubsw is SSSE3), 4 x 8.
inline constexpr std::size_t kInt8NR = 8;

struct MaddOps128 {
  using T = __m128i;
  static constexpr std::size_t kBytes = 16;
  static HWY_INLINE T Zero() { return _mm_setzero_si128(); }
  static HWY_INLINE T Ones16() { return _mm_set1_epi16(1); }
  static HWY_INLINE T Load(const std::int8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
  static HWY_INLINE void Store(std::int32_t* p, T v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
  static HWY_INLINE T Broadcast32(std::int32_t v) { return _mm_set1_epi32(v); }
  static HWY_INLINE T Maddubs(T a, T b) { return _mm_maddubs_epi16(a, b); }
  static HWY_INLINE T Madd(T a, T b) { return _mm_madd_epi16(a, b); }
  static HWY_INLINE T Add16(T a, T b) { return _mm_add_epi16(a, b); }
  static HWY_INLINE T Add32(T a, T b) { return _mm_add_epi32(a, b); }
};

inline bool CpuHasInt8Dot() { return false; }
using Int8FallbackKernel = MaddKernel<MaddOps128, 4, false>;
using Int8FallbackU7Kernel = MaddKernel<MaddOps128, 4, true>;
using Int8DotKernel = Int8FallbackKernel;  // never chosen: no dot product on these targets

#elif HWY_TARGET == HWY_NEON
// sdot is s8 x s8: the kernel feeds a - 128 (a XOR 0x80) as s8 and adds back 128 * colsum(w).
// 4 x 16: 16 accumulators + 4 panel vectors + 1 broadcast of 32 registers.
inline constexpr std::size_t kInt8NR = 16;
#undef STILE_I8_DOT_ATTR
#define STILE_I8_DOT_ATTR __attribute__((target("arch=armv8.2-a+dotprod")))

struct SdotKernel {
  static constexpr std::size_t MR = 4, NR = 16;
  static constexpr std::int32_t kWeightMax = 127;
  template <std::size_t kRows>
  static STILE_I8_DOT_ATTR HWY_NOINLINE void Tile(std::size_t kg, const std::uint8_t* HWY_RESTRICT a, std::size_t lda,
                                                  const std::int8_t* HWY_RESTRICT b, const std::int32_t* col_sums,
                                                  std::int32_t* HWY_RESTRICT c) {
    int32x4_t acc[kRows][4];
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) {
      STILE_I8_UNROLL
      for (std::size_t v = 0; v < 4; ++v) acc[r][v] = vdupq_n_s32(0);
    }
    const uint32x4_t flip = vdupq_n_u32(0x80808080u);
    for (std::size_t g = 0; g < kg; ++g) {
      int8x16_t bv[4];
      STILE_I8_UNROLL
      for (std::size_t v = 0; v < 4; ++v) bv[v] = vld1q_s8(b + g * 64 + v * 16);
      STILE_I8_UNROLL
      for (std::size_t r = 0; r < kRows; ++r) {
        std::uint32_t group;  // (not LoadGroup: no always_inline call across the target attribute)
        std::memcpy(&group, a + r * lda + g * 4, 4);
        const uint32x4_t a32 = vdupq_n_u32(group);
        const int8x16_t av = vreinterpretq_s8_u32(veorq_u32(a32, flip));
        STILE_I8_UNROLL
        for (std::size_t v = 0; v < 4; ++v) acc[r][v] = vdotq_s32(acc[r][v], av, bv[v]);
      }
    }
    STILE_I8_UNROLL
    for (std::size_t v = 0; v < 4; ++v) {
      const int32x4_t corr = vshlq_n_s32(vld1q_s32(col_sums + v * 4), 7);  // + 128 * colsum
      STILE_I8_UNROLL
      for (std::size_t r = 0; r < kRows; ++r) vst1q_s32(c + r * NR + v * 4, vaddq_s32(acc[r][v], corr));
    }
  }
};

// Without the dot product (Cortex-A53/A72/A73): widening multiplies of a - 128 by w (s8 x s8 ->
// s16, never saturating: |product| <= 16384) then pairwise add-accumulate into s32 (vpadal). A
// 16-byte panel vector (4 columns x 4 k) gives two accumulators of [column, k pair] lanes, folded
// to 4 columns at the end. 2 x 16: 16 accumulators + 4 panel vectors + the broadcast + 2 products.
struct WideningKernel {
  static constexpr std::size_t MR = 2, NR = 16;
  static constexpr std::int32_t kWeightMax = 127;
  template <std::size_t kRows>
  static HWY_NOINLINE void Tile(std::size_t kg, const std::uint8_t* HWY_RESTRICT a, std::size_t lda,
                                const std::int8_t* HWY_RESTRICT b, const std::int32_t* col_sums,
                                std::int32_t* HWY_RESTRICT c) {
    int32x4_t acc[kRows][4][2];
    STILE_I8_UNROLL
    for (std::size_t r = 0; r < kRows; ++r) {
      STILE_I8_UNROLL
      for (std::size_t v = 0; v < 4; ++v) acc[r][v][0] = acc[r][v][1] = vdupq_n_s32(0);
    }
    const uint32x4_t flip = vdupq_n_u32(0x80808080u);
    for (std::size_t g = 0; g < kg; ++g) {
      int8x16_t bv[4];
      STILE_I8_UNROLL
      for (std::size_t v = 0; v < 4; ++v) bv[v] = vld1q_s8(b + g * 64 + v * 16);
      STILE_I8_UNROLL
      for (std::size_t r = 0; r < kRows; ++r) {
        const uint32x4_t a32 = vdupq_n_u32(static_cast<std::uint32_t>(LoadGroup(a + r * lda + g * 4)));
        const int8x16_t av = vreinterpretq_s8_u32(veorq_u32(a32, flip));
        STILE_I8_UNROLL
        for (std::size_t v = 0; v < 4; ++v) {
          acc[r][v][0] = vpadalq_s16(acc[r][v][0], vmull_s8(vget_low_s8(av), vget_low_s8(bv[v])));
          acc[r][v][1] = vpadalq_s16(acc[r][v][1], vmull_high_s8(av, bv[v]));
        }
      }
    }
    STILE_I8_UNROLL
    for (std::size_t v = 0; v < 4; ++v) {
      const int32x4_t corr = vshlq_n_s32(vld1q_s32(col_sums + v * 4), 7);  // + 128 * colsum
      STILE_I8_UNROLL
      for (std::size_t r = 0; r < kRows; ++r) {
        // [c0 k01, c0 k23, c1 k01, c1 k23] and the same for c2, c3: pairwise sums are the columns.
        vst1q_s32(c + r * NR + v * 4, vaddq_s32(vpaddq_s32(acc[r][v][0], acc[r][v][1]), corr));
      }
    }
  }
};

inline bool CpuHasInt8Dot() {
  static const bool has = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  return has;
}
using Int8DotKernel = SdotKernel;
using Int8FallbackKernel = WideningKernel;

#else
inline constexpr std::size_t kInt8NR = 8;
inline bool CpuHasInt8Dot() { return false; }
using Int8DotKernel = GenericInt8Kernel<4, 8>;
using Int8FallbackKernel = GenericInt8Kernel<4, 8>;
#endif

// Kernels: Int8DotKernel where the CPU has a dot product; else Int8FallbackKernel for any u8
// (gemm_u8s8_i32), and Int8FallbackU7Kernel for gemm_int8's own activations, which it quantizes
// to the kernel's kActivationMax (255 unless a kernel says less).
#if !HWY_ARCH_X86 || HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
using Int8FallbackU7Kernel = Int8FallbackKernel;
#endif
template <class Kernel>
constexpr std::int32_t ActivationMaxOf() {
  if constexpr (requires { Kernel::kActivationMax; }) {
    return Kernel::kActivationMax;
  } else {
    return 255;
  }
}

inline bool UseInt8Dot() { return CpuHasInt8Dot() && !detail::int8_dot_disabled().load(std::memory_order_relaxed); }

inline Int8Packing Int8PackingOnTarget() {
  return UseInt8Dot() ? Int8Packing{kInt8NR, Int8DotKernel::kWeightMax, ActivationMaxOf<Int8DotKernel>()}
                      : Int8Packing{kInt8NR, Int8FallbackKernel::kWeightMax, ActivationMaxOf<Int8FallbackU7Kernel>()};
}

// ---------------------------------------------------------------------------------------------
// Dynamic quantization of activations: q = clamp(nearest(x * (1 / scale)) + zp, 0, qmax), qmax
// = 255 or the kernel's 127, the rounding half to even both here and in any scalar reference
// (std::nearbyint).

// Scale and zero point of the range [min(lo, 0), max(hi, 0)] on codes 0..qmax: 0 is exact; a zero
// range gets scale 1 (no division by zero), a tiny one the smallest normal scale (its reciprocal
// stays finite).
HWY_INLINE void ActivationParams(float lo, float hi, std::int32_t qmax, float& scale, std::int32_t& zp) {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  if (!(hi > lo)) {
    scale = 1.0f;
    zp = 0;
    return;
  }
  scale = std::max((hi - lo) / static_cast<float>(qmax), std::numeric_limits<float>::min());
  zp = std::clamp(static_cast<std::int32_t>(std::nearbyint(-lo / scale)), 0, qmax);
}

HWY_INLINE void RowMinMax(const float* HWY_RESTRICT x, std::size_t K, float& lo, float& hi) {
  const hn::ScalableTag<float> d;
  const std::size_t N = hn::Lanes(d);
  auto vlo = hn::Set(d, 0.0f), vhi = hn::Set(d, 0.0f);
  std::size_t k = 0;
  for (; k + N <= K; k += N) {
    const auto v = hn::LoadU(d, x + k);
    vlo = hn::Min(vlo, v);
    vhi = hn::Max(vhi, v);
  }
  lo = std::min(lo, hn::GetLane(hn::MinOfLanes(d, vlo)));
  hi = std::max(hi, hn::GetLane(hn::MaxOfLanes(d, vhi)));
  for (; k < K; ++k) {
    lo = std::min(lo, x[k]);
    hi = std::max(hi, x[k]);
  }
}

// Quantizes one row into q[0, Kp) (zeros past K); returns the sum of q.
HWY_INLINE std::int32_t QuantizeRow(const float* HWY_RESTRICT x, std::size_t K, std::size_t Kp, float inv,
                                    std::int32_t zp, std::int32_t qmax, std::uint8_t* HWY_RESTRICT q) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint8_t, decltype(df)> d8;
  const std::size_t N = hn::Lanes(df);
  const auto vinv = hn::Set(df, inv);
  const auto vzp = hn::Set(di, zp), v0 = hn::Zero(di), vmax = hn::Set(di, qmax);
  auto vsum = hn::Zero(di);
  std::size_t k = 0;
  for (; k + N <= K; k += N) {
    auto qi = hn::Add(hn::NearestInt(hn::Mul(hn::LoadU(df, x + k), vinv)), vzp);
    qi = hn::Min(hn::Max(qi, v0), vmax);
    vsum = hn::Add(vsum, qi);
    hn::StoreU(hn::DemoteTo(d8, qi), d8, q + k);
  }
  std::int32_t sum = hn::GetLane(hn::SumOfLanes(di, vsum));
  for (; k < K; ++k) {
    const std::int32_t v = std::clamp(static_cast<std::int32_t>(std::nearbyint(x[k] * inv)) + zp, 0, qmax);
    q[k] = static_cast<std::uint8_t>(v);
    sum += v;
  }
  for (; k < Kp; ++k) q[k] = 0;
  return sum;
}

// qmax: the top code of the kernel that will read them.
inline void QuantizeActivations(std::size_t M, const float* A, std::size_t lda, std::size_t K, ActivationQuant aq,
                                std::int32_t qmax, QuantizedActivations& out, ThreadPool* pool) {
  const std::size_t Kp = int8_padded_k(K);
  out.ld = Kp;
  out.data.resize(M * Kp);
  out.scale.resize(M);
  out.zero_point.resize(M);
  out.row_sum.resize(M);
  float tensor_scale = 1.0f;
  std::int32_t tensor_zp = 0;
  if (aq == ActivationQuant::kPerTensor) {
    float lo = 0.0f, hi = 0.0f;
    for (std::size_t m = 0; m < M; ++m) RowMinMax(A + m * lda, K, lo, hi);
    ActivationParams(lo, hi, qmax, tensor_scale, tensor_zp);
  }
  // Rows in chunks of 8 (a few cache lines of output each), spread over the pool.
  const std::size_t chunk = 8, tasks = (M + chunk - 1) / chunk;
  pool->run(tasks, [&](std::size_t t, std::size_t) {
    for (std::size_t m = t * chunk; m < std::min(M, t * chunk + chunk); ++m) {
      const float* x = A + m * lda;
      float scale = tensor_scale;
      std::int32_t zp = tensor_zp;
      if (aq == ActivationQuant::kPerRow) {
        float lo = 0.0f, hi = 0.0f;
        RowMinMax(x, K, lo, hi);
        ActivationParams(lo, hi, qmax, scale, zp);
      }
      out.scale[m] = scale;
      out.zero_point[m] = zp;
      out.row_sum[m] = QuantizeRow(x, K, Kp, 1.0f / scale, zp, qmax, out.data.data() + m * Kp);
    }
  });
}

// quantize_activations: as gemm_int8 quantizes them on this target now.
inline void QuantizeActivationsOnTarget(std::size_t M, const float* A, std::size_t lda, std::size_t K,
                                        ActivationQuant aq, QuantizedActivations& out, ThreadPool* pool) {
  QuantizeActivations(M, A, lda, K, aq, Int8PackingOnTarget().activation_max, out, pool);
}

// ---------------------------------------------------------------------------------------------
// The epilogue on one int32 tile (rows x nr at C(m, n)), vectorized over columns:
//   C = act(sa[r] * sw[n] * (acc - za[r] colsum[n] - (zw' rowsum[r] - K za[r] zw')) + bias) + residual
// The integer correction wraps modulo 2^32 like the accumulation; the exact result fits in int32
// (K <= 32768, checked by validate()).
template <class Epi>
struct Int8Epilogue {
  template <class DF, class DI>
  static HWY_INLINE hn::Vec<DF> Apply(DF df, DI di, hn::Vec<DI> acc, std::int32_t za, std::int32_t row_corr, float sa,
                                      const std::int32_t* col_sums, const float* scales, const float* bias,
                                      const float* residual) {
    const auto corr = hn::Add(hn::Mul(hn::Set(di, za), hn::LoadU(di, col_sums)), hn::Set(di, row_corr));
    auto x = hn::Mul(hn::ConvertTo(df, hn::Sub(acc, corr)), hn::Mul(hn::LoadU(df, scales), hn::Set(df, sa)));
    if constexpr (Epi::has_bias) x = hn::Add(x, hn::LoadU(df, bias));
    if constexpr (Epi::activation == Activation::kGelu) x = Gelu(df, x);
    if constexpr (Epi::activation == Activation::kGeluErfApprox) x = GeluErfApprox(df, x);
    if constexpr (Epi::has_residual) x = hn::Add(x, hn::LoadU(df, residual));
    return x;
  }
};

// The calling thread's quantized activations, kept between calls (a fresh buffer per call would
// cost page faults) and shared by every configuration of this target.
inline QuantizedActivations& Int8Scratch() {
  static thread_local QuantizedActivations scratch;
  return scratch;
}

template <class Kernel, class Epi>
struct Int8Driver {
  static constexpr std::size_t MR = Kernel::MR, NR = Kernel::NR;
  static constexpr bool kInt32Out = std::is_same_v<Epi, void>;
  using E = std::conditional_t<kInt32Out, epilogue::None, Epi>;
  using Args = detail::Int8GemmArgs<E>;

  struct Rows {  // the quantized activations and their per-row parameters
    const std::uint8_t* a;
    std::size_t lda;
    const float* scale;
    const std::int32_t* zp;
    const std::int32_t* row_sum;
  };

  static HWY_INLINE void RunTile(std::size_t rows, std::size_t kg, const std::uint8_t* a, std::size_t lda,
                                 const std::int8_t* b, const std::int32_t* col_sums, std::int32_t* tile) {
    if (rows == MR) {
      Kernel::template Tile<MR>(kg, a, lda, b, col_sums, tile);
      return;
    }
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((rows == I + 1 ? (Kernel::template Tile<I + 1>(kg, a, lda, b, col_sums, tile), 0) : 0), ...);
    }
    (std::make_index_sequence<MR - 1>{});
  }

  // Writes the finished tile (rows x nr) at C(m, n).
  static HWY_INLINE void Finish(const Args& g, const Rows& q, std::size_t m, std::size_t n, std::size_t rows,
                                std::size_t nr, const std::int32_t* tile) {
    if constexpr (kInt32Out) {
      for (std::size_t r = 0; r < rows; ++r) std::memcpy(g.Ci + (m + r) * g.ldc + n, tile + r * NR, nr * 4);
    } else {
      const hn::ScalableTag<float> df0;
      const hn::CappedTag<float, std::min<std::size_t>(NR, hn::MaxLanes(df0))> df;
      const hn::RebindToSigned<decltype(df)> di;
      const std::size_t L = hn::Lanes(df);
      const Int8Matrix& W = *g.W;
      const std::int32_t zw = W.zero_point, K = static_cast<std::int32_t>(W.cols());
      const std::size_t ldr = g.epi.residual_ld;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::int32_t za = q.zp[m + r];
        // zw' rowsum - K za zw' (unsigned arithmetic: wraps like the vector lanes do).
        const auto row_corr = static_cast<std::int32_t>(
            static_cast<std::uint32_t>(zw) * static_cast<std::uint32_t>(q.row_sum[m + r]) -
            static_cast<std::uint32_t>(K) * static_cast<std::uint32_t>(za) * static_cast<std::uint32_t>(zw));
        const float sa = q.scale[m + r];
        float* c = g.C + (m + r) * g.ldc + n;
        const float* res = E::has_residual ? g.epi.residual + (m + r) * ldr + n : nullptr;
        const float* bias = E::has_bias ? g.epi.bias + n : nullptr;
        std::size_t j = 0;
        for (; j + L <= nr; j += L) {
          const auto x =
              Int8Epilogue<E>::Apply(df, di, hn::LoadU(di, tile + r * NR + j), za, row_corr, sa, W.col_sums + n + j,
                                     W.scales + n + j, bias ? bias + j : nullptr, res ? res + j : nullptr);
          hn::StoreU(x, df, c + j);
        }
        if (j < nr) {  // the N edge: through padded copies, reading and writing nothing past column N
          HWY_ALIGN float b_tail[hn::MaxLanes(df)] = {};
          HWY_ALIGN float r_tail[hn::MaxLanes(df)] = {};
          HWY_ALIGN float c_tail[hn::MaxLanes(df)];
          for (std::size_t t = 0; j + t < nr; ++t) {
            if (bias) b_tail[t] = bias[j + t];
            if (res) r_tail[t] = res[j + t];
          }
          const auto x = Int8Epilogue<E>::Apply(df, di, hn::LoadU(di, tile + r * NR + j), za, row_corr, sa,
                                                W.col_sums + n + j, W.scales + n + j, b_tail, r_tail);
          hn::Store(x, df, c_tail);
          for (std::size_t t = 0; j + t < nr; ++t) c[j + t] = c_tail[t];
        }
      }
    }
  }

  // Rows [m0, m1) x columns [n0, n1) of C (n0, n1 multiples of NR, or n1 = N).
  static void Block(const Args& g, const Rows& q, std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
    const Int8Matrix& W = *g.W;
    const std::size_t Kp = W.padded_cols(), kg = Kp / kInt8KGroup;
    // Rows of A per block: about 192 KiB of them, so they stay in L2 while every panel passes.
    const std::size_t MC = std::max<std::size_t>(MR, (192 * 1024 / Kp) / MR * MR);
    HWY_ALIGN std::int32_t tile[MR * NR];
    for (std::size_t ic = m0; ic < m1; ic += MC) {
      const std::size_t mc_end = std::min(m1, ic + MC);
      for (std::size_t n = n0; n < n1; n += NR) {
        const std::size_t nr = std::min(NR, n1 - n);
        const std::int8_t* panel = W.packed + (n / NR) * Kp * NR;
        for (std::size_t m = ic; m < mc_end; m += MR) {
          const std::size_t rows = std::min(MR, mc_end - m);
          RunTile(rows, kg, q.a + m * q.lda, q.lda, panel, W.col_sums + n, tile);
          Finish(g, q, m, n, rows, nr, tile);
        }
      }
    }
  }

  static void Run(const Args& g) {
    const std::size_t M = g.M, N = g.W->rows(), K = g.W->cols(), Kp = g.W->padded_cols();
    ThreadPool& pool = *g.pool;
    Rows q{};
    QuantizedActivations& qa = Int8Scratch();
    if constexpr (kInt32Out) {
      q.a = g.Aq;
      q.lda = g.lda;
      if (K % kInt8KGroup != 0) {  // the kernel reads whole k-groups: copy into zero-padded rows
        qa.data.resize(M * Kp);
        for (std::size_t m = 0; m < M; ++m) {
          std::memcpy(qa.data.data() + m * Kp, g.Aq + m * g.lda, K);
          std::memset(qa.data.data() + m * Kp + K, 0, Kp - K);
        }
        q.a = qa.data.data();
        q.lda = Kp;
      }
    } else {
      QuantizeActivations(M, g.A, g.lda, K, g.aq, ActivationMaxOf<Kernel>(), qa, &pool);
      q = Rows{qa.data.data(), qa.ld, qa.scale.data(), qa.zero_point.data(), qa.row_sum.data()};
    }
    detail::run_gemm_blocks(pool, M, N, MR, NR, [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
      Block(g, q, m0, m1, n0, n1);
    });
  }
};

// The entry points of the dispatch tables (kernels/int8_gemm_impl.hpp): the dot-product kernel
// where the CPU has it (a cached cpuid check), else the fallback.
template <class Epi>
HWY_NOINLINE void RunInt8Gemm(const detail::Int8GemmArgs<Epi>& args) {
  if (UseInt8Dot()) {
    Int8Driver<Int8DotKernel, Epi>::Run(args);
  } else {
    Int8Driver<Int8FallbackU7Kernel, Epi>::Run(args);
  }
}

HWY_NOINLINE inline void RunU8S8I32(const detail::Int8GemmArgs<epilogue::None>& args) {
  if (UseInt8Dot()) {
    Int8Driver<Int8DotKernel, void>::Run(args);
  } else {
    Int8Driver<Int8FallbackKernel, void>::Run(args);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
