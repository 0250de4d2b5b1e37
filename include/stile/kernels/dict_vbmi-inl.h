// Per-target byte-plane decoder for dictionary weights on AVX-512 cores with VBMI (Ice Lake and
// later, Zen 4 and later): the AVX3 targets' choice at 2..6 bits where the CPU has it (a cached
// cpuid check, like the int8 GEMM's VNNI kernels; Highway's dispatch is unchanged). Four
// consecutive slabs of one group (four k, 64 indices) are decoded at once:
//   1. the slabs' bytes (one masked 64-byte load, so never a read past them) are placed by one
//      vpermb so that each qword holds the low- and high-plane bits of 8 of its lanes, and two
//      vpmultishiftqb pull each lane's low and high bits into its byte, which one vpternlogd joins:
//      the 64 indices, bits above k left as they are;
//   2. one vpermb per byte of the centroids looks up all 64 indices in a 64-entry byte table
//      (byte b of centroid i mod 2^k, so the index bits above k are ignored); the four tables are
//      made in registers from the centroids once per call (one or two vpermt2b each);
//   3. two levels of unpacks put the four bytes back together. The lanes are placed in step 1 so
//      that the unpacks, which work within 128-bit blocks, leave slab q whole in vector q.
// Per 64 weights: 1 load, 9 shuffles, 1 logic op, 4 stores, against the table tree's 4 x (2 field
// extractions, 1 or 2 vpermt2ps and a select) at 6 bits.
#if defined(STILE_KERNELS_DICT_VBMI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_DICT_VBMI_INL_H_
#undef STILE_KERNELS_DICT_VBMI_INL_H_
#else
#define STILE_KERNELS_DICT_VBMI_INL_H_
#endif

#include <array>
#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "stile/quant/packed_layout.hpp"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {

#undef STILE_DICT_VBMI  // (defined below for the AVX3 targets only: this file is included once per target)
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define STILE_DICT_VBMI 1

#undef STILE_DICT_VBMI_ATTR
#if defined(__clang__)
// (clang replaces the target's features with the attribute's: name them all, as int8_gemm-inl.h.)
#define STILE_DICT_VBMI_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vbmi")))
#else
#define STILE_DICT_VBMI_ATTR __attribute__((target("avx512f,avx512bw,avx512vbmi")))
#endif

inline bool CpuHasVbmi() {
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has;
}

// The three byte-control vectors of step 1 for k bits. Output byte p = 16 L + 4 q + i is lane
// j = 4 L + i of slab q; its qword (p / 8) holds, from vpermb: bytes 0..3 the low-plane bits of
// lanes 4L..4L+3 of slabs q0 = 2 ((p / 8) % 2) and q0 + 1 (two bytes each at 4-bit fields, one
// byte each at 2-bit fields), bytes 4 and 5 their high-plane byte.
template <unsigned kBits>
struct DictVbmiControls {
  std::array<std::uint8_t, 64> gather{}, lo{}, hi{};
  constexpr DictVbmiControls() {
    constexpr unsigned kLo = quant::low_plane_bits(kBits), kHi = quant::high_plane_bits(kBits);
    constexpr unsigned kSlab = quant::slab_bytes(kBits), kLoBytes = quant::plane_bytes(kLo);
    for (unsigned p = 0; p < 64; ++p) {
      const unsigned q_word = p / 8, b = p % 8, L = q_word / 2, q0 = 2 * (q_word % 2);
      // gather: which loaded byte goes to byte b of the qword.
      unsigned src = 0;
      if (kLo == 4 && b < 4) src = (q0 + b / 2) * kSlab + 2 * L + b % 2;
      if (kLo == 2 && b < 2) src = (q0 + b) * kSlab + L;
      if (kHi != 0 && (b == 4 || b == 5)) src = (q0 + b - 4) * kSlab + kLoBytes + (kHi == 2 ? L : L / 2);
      gather[p] = static_cast<std::uint8_t>(src);
      // lo, hi: the bit offsets (within the qword) of output byte p's fields.
      const unsigned q = (p % 16) / 4, i = p % 4, dq = q - q0;
      lo[p] = static_cast<std::uint8_t>((kLo == 4 ? 16 * dq : 8 * dq) + kLo * i);
      const unsigned hi_bit = 32 + 8 * dq + (kHi == 2 ? 2 * i : 4 * (L % 2) + i);
      hi[p] = static_cast<std::uint8_t>((hi_bit + 64 - kLo) % 64);  // lands at bit kLo of the byte
    }
  }
};

// kc slabs of one group (slab, slab + kSlab, ...) into out[k * ld + i], i < 16. centroids: the
// 2^k centroids.
template <unsigned kBits>
STILE_DICT_VBMI_ATTR HWY_NOINLINE void DictDecodeVbmi(const float* HWY_RESTRICT centroids,
                                                      const std::uint8_t* HWY_RESTRICT slab, std::size_t kc,
                                                      float* HWY_RESTRICT out, std::size_t ld) {
  constexpr unsigned kLo = quant::low_plane_bits(kBits), kHi = quant::high_plane_bits(kBits);
  constexpr std::size_t kSlab = quant::slab_bytes(kBits);
  alignas(64) static constexpr DictVbmiControls<kBits> kCtl{};
  const __m512i gather = _mm512_load_si512(kCtl.gather.data());
  const __m512i ctl_lo = _mm512_load_si512(kCtl.lo.data());
  const __m512i ctl_hi = _mm512_load_si512(kCtl.hi.data());
  const __m512i lo_mask = _mm512_set1_epi8(static_cast<char>((1u << kLo) - 1));
  // (The zero-masked forms with every lane set: g++ 12 warns that the plain forms' undefined
  // pass-through vector "may be used uninitialized".)
  constexpr __mmask64 kAll = ~__mmask64{0};
  (void)ctl_hi;
  (void)lo_mask;
  // The byte tables: t[p][i] = byte p of centroid i mod 2^k, picked from the centroids' 256 bytes
  // (c[0]: centroids 0..15, ...; those past 2^k are not read) by byte 4 (i mod 2^k) + p.
  constexpr unsigned kEntries = 1u << kBits;
  __m512i c[4];
  for (unsigned v = 0; v < 4; ++v) {
    const unsigned n = v * 16 >= kEntries ? 0 : (kEntries - v * 16 >= 16 ? 16 : kEntries - v * 16);
    c[v] = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << n) - 1), centroids + v * 16);
  }
  alignas(64) static constexpr std::array<std::uint8_t, 64> kPick = [] {
    std::array<std::uint8_t, 64> pick{};
    for (unsigned i = 0; i < 64; ++i) pick[i] = static_cast<std::uint8_t>(4 * (i % kEntries));
    return pick;
  }();
  const __m512i pick = _mm512_load_si512(kPick.data());
  __m512i t[4];
  for (unsigned p = 0; p < 4; ++p) {
    const __m512i at = _mm512_add_epi8(pick, _mm512_set1_epi8(static_cast<char>(p)));
    t[p] = _mm512_permutex2var_epi8(c[0], at, c[1]);  // (vpermt2b: 7 bits of `at`, 128 table bytes)
    if constexpr (kEntries == 64) {
      // Entries 32..63 (bytes 128..255 of the centroids) from c[2], c[3].
      t[p] = _mm512_mask_blend_epi8(~__mmask64{0} << 32, t[p], _mm512_permutex2var_epi8(c[2], at, c[3]));
    }
  }
  for (std::size_t k = 0; k < kc; k += 4) {
    const std::size_t n = kc - k < 4 ? kc - k : 4;
    const __mmask64 bytes = n * kSlab >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n * kSlab)) - 1;
    const __m512i raw = _mm512_maskz_loadu_epi8(bytes, slab + k * kSlab);
    const __m512i words = _mm512_maskz_permutexvar_epi8(kAll, gather, raw);
    __m512i idx = _mm512_maskz_multishift_epi64_epi8(kAll, ctl_lo, words);
    if constexpr (kHi != 0) {
      // lo_mask ? low fields : high fields (vpternlogd 0xCA: bit select by the first operand).
      idx = _mm512_ternarylogic_epi32(lo_mask, idx, _mm512_maskz_multishift_epi64_epi8(kAll, ctl_hi, words), 0xCA);
    }
    __m512i b[4];
    for (std::size_t p = 0; p < 4; ++p) b[p] = _mm512_maskz_permutexvar_epi8(kAll, idx, t[p]);
    const __m512i h01lo = _mm512_unpacklo_epi8(b[0], b[1]), h01hi = _mm512_unpackhi_epi8(b[0], b[1]);
    const __m512i h23lo = _mm512_unpacklo_epi8(b[2], b[3]), h23hi = _mm512_unpackhi_epi8(b[2], b[3]);
    const __m512i f[4] = {_mm512_unpacklo_epi16(h01lo, h23lo), _mm512_unpackhi_epi16(h01lo, h23lo),
                          _mm512_unpacklo_epi16(h01hi, h23hi), _mm512_unpackhi_epi16(h01hi, h23hi)};
    for (std::size_t q = 0; q < n; ++q) _mm512_storeu_si512(out + (k + q) * ld, f[q]);
  }
}

#endif  // AVX3 targets

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
