// Per-target byte-plane decoder for dictionary weights (kernels/dict-inl.h, DictLookup::kBytes):
// the 2^k centroids split into their four bytes, each byte a 16-entry table that one byte
// shuffle (pshufb / vpshufb / tbl) looks up for 16 indices at once; 32 and 64 entries take two
// and four shuffles and one and three byte blends on index bits 4 and 5. Four such byte planes
// are zipped back into 16 floats. A 128-bit block decodes one whole slab (16 indices of one k),
// so a 256-bit vector decodes two k at once. Per 16 decoded weights at 6 bits that is 16
// shuffles + 12 blends + 8 zips + the index (about 9 ops), where the 8-lane table tree of
// dict-inl.h spends 2 x (8 vpermps + 7 blends + 5 index ops).
//
// The index bytes come straight from the slab's planes (quant/packed_layout.hpp): the low
// plane's 16 nibbles by one interleave of the bytes with themselves shifted by 4; the high plane's
// bits as byte masks (each lane's byte of the plane broadcast by a shuffle, then tested against
// the lane's bit). A slab is 2k bytes: it is loaded 16 bytes at a time where 16 bytes are inside
// the matrix, else through a zeroed copy of its own bytes (never a read past the matrix).
//
// Used for whole groups only: a panel of at least 8 columns (one or more halves of groups),
// starting on a group; a last group with fewer valid rows takes dict-inl.h's other paths.
//
// Dictionaries whose centroids are all fp16 values (the converter rounds them so:
// quant/dictionary.hpp) take half of that on the targets with an fp16 -> fp32 conversion (x86
// with 256-bit vectors, all of which have F16C; AArch64's NEON; SSE4 without it): two byte planes
// (the fp16 bits), one zip level, then the conversion, which is exact (every fp16 value is a
// float). Whether a dictionary qualifies is checked where its planes are made, by the conversion
// the decode uses (fp16 bits -> fp32 giving back every centroid's bits), so a decoded weight is
// its centroid bit for bit either way; other dictionaries (stores converted before the rounding)
// take the four planes.
#if defined(STILE_KERNELS_DICT_BYTES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_DICT_BYTES_INL_H_
#undef STILE_KERNELS_DICT_BYTES_INL_H_
#else
#define STILE_KERNELS_DICT_BYTES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "stile/kernels/codec.hpp"
#include "stile/quant/packed_layout.hpp"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Which bitwidths and panel widths the byte-plane decoder can take on this target: k = 2..6,
// panels of 8 (half a group) or a multiple of 16 columns, any SIMD target with byte shuffles.
// (Whether the GEMM uses it is DictAutoLookup's choice, dict-inl.h.)
template <std::size_t kNR, unsigned kBits>
constexpr bool DictBytesSupported() {
  return HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128 && kBits >= 2 && kBits <= 6 &&
         (kNR == 8 || kNR % quant::kGroupRows == 0);
}

// Whether this target has the two-plane fp16 path: x86 with 256-bit vectors (AVX2 and the AVX3
// targets; every such CPU has F16C, which Highway's PromoteTo uses there), AArch64's NEON
// (fcvtl, always there) and SSE4 (a conversion of its own: DictHalvesToFloats). A macro, set
// again for each target this file is compiled for, since the path's code is compiled only there.
#undef STILE_DICT_HALF_PLANES
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || \
    (HWY_TARGET == HWY_NEON && HWY_ARCH_ARM_A64) || HWY_TARGET == HWY_SSE4
#define STILE_DICT_HALF_PLANES 1
#else
#define STILE_DICT_HALF_PLANES 0
#endif
// Whether the decoder works on 256-bit vectors (two slabs at once): AVX2 and AVX-512.
#undef STILE_DICT_BYTES_256
#if HWY_TARGET != HWY_SSE4 && HWY_TARGET != HWY_SSSE3 && HWY_TARGET != HWY_NEON
#define STILE_DICT_BYTES_256 1
#else
#define STILE_DICT_BYTES_256 0
#endif

#if STILE_DICT_HALF_PLANES
// The 8 fp16 bit patterns in h as floats, into out[0..7] (aligned): exact. The decoder's only
// conversion, also the one that decides whether a dictionary takes the fp16 planes.
HWY_INLINE void DictHalvesToFloats(hn::Vec128<std::uint16_t> h, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_NEON
  const float16x8_t f16 = vreinterpretq_f16_u16(h.raw);
  vst1q_f32(out, vcvt_f32_f16(vget_low_f16(f16)));
  vst1q_f32(out + 4, vcvt_high_f32_f16(f16));
#elif HWY_TARGET == HWY_SSE4
  // No F16C, and Highway 1.0.3's emulated PromoteTo (13 ops per 4 lanes) made the two planes
  // slower than four (docs/design-notes.md, fp16 byte planes on NEON and SSE4). 3 ops per 4 lanes instead:
  // h << 16 shifted right by 3 (arithmetic) and masked is the sign at bit 31 and fp16's exponent
  // and mantissa where fp32 has them, a float 2^-112 times the value (a denormal for fp16's
  // subnormals); times 2^112 gives the value exactly. fp16's Inf and NaN come out finite, which
  // MakeHalf then turns away, as it would any difference (a CPU flushing denormals, too).
  const hn::Full128<float> df4;
  const hn::Full128<std::int32_t> di32;
  const hn::Full128<std::uint16_t> du16;
  const auto mask = hn::Set(di32, static_cast<std::int32_t>(0x8FFFE000u));
  const auto scale = hn::Set(df4, 0x1p112f);
  const auto convert = [&](hn::Vec128<std::uint32_t> h32) {  // h << 16 in each lane
    return hn::BitCast(df4, hn::And(hn::ShiftRight<3>(hn::BitCast(di32, h32)), mask)) * scale;
  };
  const hn::Full128<std::uint32_t> du32;
  hn::Store(convert(hn::ZipLower(du32, hn::Zero(du16), h)), df4, out);
  hn::Store(convert(hn::ZipUpper(du32, hn::Zero(du16), h)), df4, out + 4);
#else
  const hn::CappedTag<float, 8> df8;
  const hn::Rebind<hwy::float16_t, decltype(df8)> dh8;
  hn::Store(hn::PromoteTo(df8, hn::BitCast(dh8, h)), df8, out);
#endif
}
#endif

// The centroids as four 64-entry byte tables: planes[b][i] = byte b (little-endian) of
// centroid i; entries past 2^k are zero. half: every centroid is an fp16 value (on the
// STILE_DICT_HALF_PLANES targets only: MakeHalf is false elsewhere); then planes[0] and [1] hold
// the bytes of the fp16 bits, [2] and [3] are unset.
template <unsigned kBits>
struct DictBytePlanes {
  static constexpr std::size_t kEntries = std::size_t{1} << kBits;
  static constexpr std::size_t kSize = kEntries > 16 ? kEntries : 16;
  HWY_ALIGN std::uint8_t planes[4][kSize];
  bool half;
  explicit DictBytePlanes(const float* centroids) : half(MakeHalf(centroids)) {
    const std::size_t n_planes = half ? 2 : 4;
    for (std::size_t b = 0; b < n_planes; ++b) {
      for (std::size_t i = kEntries; i < kSize; ++i) planes[b][i] = 0;
    }
    if (half) return;
    for (std::size_t i = 0; i < kEntries; ++i) {
      std::uint32_t u;
      std::memcpy(&u, &centroids[i], sizeof(u));
      for (std::size_t b = 0; b < 4; ++b) planes[b][i] = static_cast<std::uint8_t>(u >> (8 * b));
    }
  }

 private:
  // The fp16 planes, if converting every centroid to fp16 and back gives its exact bits.
  bool MakeHalf(const float* centroids) {
#if STILE_DICT_HALF_PLANES
    // Candidate bits: Highway's DemoteTo of |c|, c's sign put back (Highway 1.0.3's emulated
    // DemoteTo, on SSE4, drops the sign of -0); they count only if the decoder's conversion gives
    // c back.
    const hn::CappedTag<float, 4> df;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const hn::RebindToUnsigned<decltype(dh)> duh;
    HWY_ALIGN std::uint16_t bits[kSize] = {};
    HWY_ALIGN float back[kSize];
    for (std::size_t i = 0; i < kEntries; i += 4) {
      hn::StoreU(hn::BitCast(duh, hn::DemoteTo(dh, hn::Abs(hn::LoadU(df, centroids + i)))), duh, bits + i);
    }
    for (std::size_t i = 0; i < kEntries; ++i) {
      std::uint32_t u;
      std::memcpy(&u, &centroids[i], sizeof(u));
      bits[i] = static_cast<std::uint16_t>(bits[i] | ((u >> 16) & 0x8000u));
    }
    const hn::Full128<std::uint16_t> du16;
    for (std::size_t i = 0; i < kEntries; i += 8) DictHalvesToFloats(hn::Load(du16, bits + i), back + i);
    if (std::memcmp(back, centroids, kEntries * sizeof(float)) != 0) return false;
    for (std::size_t i = 0; i < kEntries; ++i) {
      planes[0][i] = static_cast<std::uint8_t>(bits[i]);
      planes[1][i] = static_cast<std::uint8_t>(bits[i] >> 8);
    }
    return true;
#else
    (void)centroids;
    return false;
#endif
  }
};

#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128

// 16 bytes of the slab at p into a 128-bit vector: bytes past the slab's 2k are don't-care, but
// are only read from memory where they are still inside the matrix (p + 16 <= end).
template <unsigned kBits, class D16>
HWY_INLINE hn::Vec<D16> DictLoadSlab(D16 d16, const std::uint8_t* HWY_RESTRICT p, const std::uint8_t* end) {
  if (HWY_LIKELY(end - p >= 16)) return hn::LoadU(d16, p);
  HWY_ALIGN std::uint8_t copy[16] = {};
  std::memcpy(copy, p, quant::slab_bytes(kBits));
  return hn::Load(d16, copy);
}

// The index of each lane of the slabs in `raw` (one per 128-bit block): its low nibble in idx,
// index bits 4 and 5 as masks (k = 5, 6).
template <unsigned kBits, class DU8>
struct DictBytesIndex {
  hn::Vec<DU8> idx;
  hn::Mask<DU8> bit4, bit5;
  HWY_INLINE DictBytesIndex(DU8 du8, hn::Vec<DU8> raw) : bit4(hn::FirstN(du8, 0)), bit5(bit4) {
    const hn::Repartition<std::uint16_t, DU8> du16;
    using V8 = hn::Vec<DU8>;
    // Low nibbles: byte j of the low plane holds lanes 2j (bits 0..3) and 2j + 1 (bits 4..7).
    const V8 shifted = hn::BitCast(du8, hn::ShiftRight<4>(hn::BitCast(du16, raw)));
    idx = hn::And(hn::InterleaveLower(du8, raw, shifted), hn::Set(du8, 0x0F));
    if constexpr (kBits <= 3) {
      // A 2-bit low plane: byte j of it held lanes 4j .. 4j + 3, so after the nibble split byte m
      // holds lanes 2m (bits 0..1) and 2m + 1 (bits 2..3): split once more.
      const V8 pairs = hn::BitCast(du8, hn::ShiftRight<2>(hn::BitCast(du16, idx)));
      idx = hn::And(hn::InterleaveLower(du8, idx, pairs), hn::Set(du8, 0x03));
    }
    // The high plane's bits as masks: bit 4 (k = 5: lane j at bit j of bytes 8..9; k = 6: lane j
    // at bit 2 (j % 4) of bytes 8..11) and bit 5 (k = 6: the bit above).
    if constexpr (kBits == 3) {
      // Index bit 2 (lane j at bit j of bytes 4..5) goes straight into the index.
      alignas(16) static constexpr std::uint8_t kSpread[16] = {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5};
      alignas(16) static constexpr std::uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
      const V8 hb = hn::TableLookupBytes(raw, hn::LoadDup128(du8, kSpread));
      idx = hn::Or(idx, hn::And(hn::VecFromMask(du8, hn::TestBit(hb, hn::LoadDup128(du8, kBit))), hn::Set(du8, 4)));
    } else if constexpr (kBits == 5) {
      alignas(16) static constexpr std::uint8_t kSpread[16] = {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9};
      alignas(16) static constexpr std::uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
      const V8 hb = hn::TableLookupBytes(raw, hn::LoadDup128(du8, kSpread));
      bit4 = hn::TestBit(hb, hn::LoadDup128(du8, kBit));
    } else if constexpr (kBits == 6) {
      alignas(16) static constexpr std::uint8_t kSpread[16] = {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11};
      alignas(16) static constexpr std::uint8_t kBit0[16] = {1, 4, 16, 64, 1, 4, 16, 64, 1, 4, 16, 64, 1, 4, 16, 64};
      alignas(16) static constexpr std::uint8_t kBit1[16] = {2, 8, 32, 128, 2, 8, 32, 128, 2, 8, 32, 128, 2, 8, 32, 128};
      const V8 hb = hn::TableLookupBytes(raw, hn::LoadDup128(du8, kSpread));
      bit4 = hn::TestBit(hb, hn::LoadDup128(du8, kBit0));
      bit5 = hn::TestBit(hb, hn::LoadDup128(du8, kBit1));
    }
  }
};

// plane[index] for every lane: plane is a 2^k-entry byte table (at least 16 entries, aligned).
template <unsigned kBits, class DU8>
HWY_INLINE hn::Vec<DU8> DictBytesLookup(DU8 du8, const std::uint8_t* HWY_RESTRICT plane,
                                        const DictBytesIndex<kBits, DU8>& x) {
#if HWY_TARGET == HWY_NEON && HWY_ARCH_ARM_A64
  // AArch64's tbl looks up 32 or 64 bytes in one instruction (two or four table registers): the
  // index assembled whole (bits 4 and 5 from the masks) replaces the shuffles and blends.
  if constexpr (kBits >= 5) {
    auto full = hn::Or(x.idx, hn::And(hn::VecFromMask(du8, x.bit4), hn::Set(du8, 0x10)));
    if constexpr (kBits == 6) full = hn::Or(full, hn::And(hn::VecFromMask(du8, x.bit5), hn::Set(du8, 0x20)));
    // (One multi-register load: built from four loads, the table was copied into consecutive
    // registers on every call, 16 moves per slab at 6 bits.)
    if constexpr (kBits == 5) {
      return hn::Vec<DU8>(vqtbl2q_u8(vld1q_u8_x2(plane), full.raw));
    } else {
      return hn::Vec<DU8>(vqtbl4q_u8(vld1q_u8_x4(plane), full.raw));
    }
  }
#endif
  const auto v0 = hn::TableLookupBytes(hn::LoadDup128(du8, plane), x.idx);
  if constexpr (kBits <= 4) return v0;
  const auto v1 = hn::TableLookupBytes(hn::LoadDup128(du8, plane + 16), x.idx);
  const auto lo = hn::IfThenElse(x.bit4, v1, v0);
  if constexpr (kBits == 5) return lo;
  const auto v2 = hn::TableLookupBytes(hn::LoadDup128(du8, plane + 32), x.idx);
  const auto v3 = hn::TableLookupBytes(hn::LoadDup128(du8, plane + 48), x.idx);
  return hn::IfThenElse(x.bit5, hn::IfThenElse(x.bit4, v3, v2), lo);
}

// Decodes the slabs in `raw` (one per 128-bit block) into F[q]: lanes 4q .. 4q + 3 of each block's
// slab as floats, bit for bit the centroids.
template <unsigned kBits, class DU8>
HWY_INLINE void DictBytesDecode(DU8 du8, const DictBytePlanes<kBits>& t, hn::Vec<DU8> raw,
                                hn::Vec<hn::Repartition<std::uint32_t, DU8>>* F) {
  const hn::Repartition<std::uint16_t, DU8> du16;
  const hn::Repartition<std::uint32_t, DU8> du32;
  const DictBytesIndex<kBits, DU8> x(du8, raw);
  hn::Vec<DU8> B[4];
  for (std::size_t b = 0; b < 4; ++b) B[b] = DictBytesLookup<kBits>(du8, t.planes[b], x);
  // Bytes back into floats: (b0, b1) and (b2, b3) into 16-bit halves, then halves into words.
  const auto h01lo = hn::ZipLower(du16, B[0], B[1]), h01hi = hn::ZipUpper(du16, B[0], B[1]);
  const auto h23lo = hn::ZipLower(du16, B[2], B[3]), h23hi = hn::ZipUpper(du16, B[2], B[3]);
  F[0] = hn::ZipLower(du32, h01lo, h23lo);
  F[1] = hn::ZipUpper(du32, h01lo, h23lo);
  F[2] = hn::ZipLower(du32, h01hi, h23hi);
  F[3] = hn::ZipUpper(du32, h01hi, h23hi);
}

// Lanes o .. o + kW - 1 of the kc slabs of one group (slab, slab + kSlab, ...; kW = 16, or 8 for
// a half-group panel, o = 0 or 8) into out[k * kNR + i], i < kW. end: the end of the matrix's
// packed bytes.
template <std::size_t kNR, unsigned kBits>
HWY_INLINE void DictDecodeBytes(const DictBytePlanes<kBits>& t, const std::uint8_t* HWY_RESTRICT slab,
                                const std::uint8_t* end, std::size_t o, std::size_t kc, float* HWY_RESTRICT out) {
  constexpr std::size_t kSlab = quant::slab_bytes(kBits);
  constexpr std::size_t kW = kNR < quant::kGroupRows ? kNR : quant::kGroupRows;
  const hn::Full128<std::uint8_t> d16;
  const hn::Full128<float> df4;
  std::size_t k = 0;
#if STILE_DICT_HALF_PLANES
  if (t.half) {
    // fp16 planes: two lookups instead of four, one zip level instead of two, then the
    // conversion; with 256-bit vectors two slabs (k and k + 1) at once, a last odd k by itself
    // in a 128-bit vector as the 128-bit targets do every k.
    // Lanes 0..7 (lo) and 8..15 (hi) of each block's slab as fp16 bits, 16-bit lanes.
    const auto halves = [&](auto d, hn::Vec<decltype(d)> raw, auto* lo, auto* hi) {
      const hn::Repartition<std::uint16_t, decltype(d)> du16;
      const DictBytesIndex<kBits, decltype(d)> x(d, raw);
      const auto b0 = DictBytesLookup<kBits>(d, t.planes[0], x);
      const auto b1 = DictBytesLookup<kBits>(d, t.planes[1], x);
      *lo = hn::ZipLower(du16, b0, b1);
      *hi = hn::ZipUpper(du16, b0, b1);
    };
#if STILE_DICT_BYTES_256
    const hn::CappedTag<std::uint8_t, 32> d32;
    const hn::Half<hn::Repartition<std::uint16_t, decltype(d32)>> du16x8;  // one 128-bit block
    for (; k + 2 <= kc; k += 2) {
      const std::uint8_t* p = slab + k * kSlab;
      const auto raw = hn::Combine(d32, DictLoadSlab<kBits>(d16, p + kSlab, end), DictLoadSlab<kBits>(d16, p, end));
      hn::Vec<hn::Repartition<std::uint16_t, decltype(d32)>> lo, hi;
      halves(d32, raw, &lo, &hi);
      float* HWY_RESTRICT o0 = out + k * kNR;
      float* HWY_RESTRICT o1 = o0 + kNR;
      // Block 0 is k's lanes, block 1 is k + 1's.
      if constexpr (kW == 16) {
        DictHalvesToFloats(hn::LowerHalf(lo), o0);
        DictHalvesToFloats(hn::LowerHalf(hi), o0 + 8);
        DictHalvesToFloats(hn::UpperHalf(du16x8, lo), o1);
        DictHalvesToFloats(hn::UpperHalf(du16x8, hi), o1 + 8);
      } else {
        const auto h = o == 0 ? lo : hi;
        DictHalvesToFloats(hn::LowerHalf(h), o0);
        DictHalvesToFloats(hn::UpperHalf(du16x8, h), o1);
      }
    }
#endif
    for (; k < kc; ++k) {
      hn::Vec128<std::uint16_t> lo, hi;
      halves(d16, DictLoadSlab<kBits>(d16, slab + k * kSlab, end), &lo, &hi);
      float* HWY_RESTRICT o0 = out + k * kNR;
      if constexpr (kW == 16) {
        DictHalvesToFloats(lo, o0);
        DictHalvesToFloats(hi, o0 + 8);
      } else {
        DictHalvesToFloats(o == 0 ? lo : hi, o0);
      }
    }
    return;
  }
#endif
#if STILE_DICT_BYTES_256
  // 256-bit vectors (AVX2, and AVX-512 at 256 bits): two k per vector, block 1 the next slab.
  const hn::CappedTag<std::uint8_t, 32> d32;
  const hn::Repartition<float, decltype(d32)> df8;
  const hn::Repartition<std::uint32_t, decltype(d32)> du32;
  for (; k + 2 <= kc; k += 2) {
    const std::uint8_t* p = slab + k * kSlab;
    const auto raw = hn::Combine(d32, DictLoadSlab<kBits>(d16, p + kSlab, end), DictLoadSlab<kBits>(d16, p, end));
    hn::Vec<decltype(du32)> F[4];
    DictBytesDecode<kBits>(d32, t, raw, F);
    float* HWY_RESTRICT o0 = out + k * kNR;
    float* HWY_RESTRICT o1 = o0 + kNR;
    // F[q] block 0 is k's lanes 4q..4q+3, block 1 is k + 1's.
    if constexpr (kW == 16) {
      hn::Store(hn::BitCast(df8, hn::ConcatLowerLower(du32, F[1], F[0])), df8, o0);
      hn::Store(hn::BitCast(df8, hn::ConcatLowerLower(du32, F[3], F[2])), df8, o0 + 8);
      hn::Store(hn::BitCast(df8, hn::ConcatUpperUpper(du32, F[1], F[0])), df8, o1);
      hn::Store(hn::BitCast(df8, hn::ConcatUpperUpper(du32, F[3], F[2])), df8, o1 + 8);
    } else {
      const std::size_t q = o / 4;
      hn::Store(hn::BitCast(df8, hn::ConcatLowerLower(du32, F[q + 1], F[q])), df8, o0);
      hn::Store(hn::BitCast(df8, hn::ConcatUpperUpper(du32, F[q + 1], F[q])), df8, o1);
    }
  }
#endif
  for (; k < kc; ++k) {
    const std::uint8_t* p = slab + k * kSlab;
    hn::Vec<hn::Repartition<std::uint32_t, decltype(d16)>> F[4];
    DictBytesDecode<kBits>(d16, t, DictLoadSlab<kBits>(d16, p, end), F);
    float* HWY_RESTRICT o0 = out + k * kNR;
    if constexpr (kW == 16) {
      for (std::size_t q = 0; q < 4; ++q) hn::Store(hn::BitCast(df4, F[q]), df4, o0 + 4 * q);
    } else {
      const std::size_t q = o / 4;
      hn::Store(hn::BitCast(df4, F[q]), df4, o0);
      hn::Store(hn::BitCast(df4, F[q + 1]), df4, o0 + 4);
    }
  }
}

#else   // no byte shuffles: never called (DictBytesSupported is false)
template <std::size_t kNR, unsigned kBits>
HWY_INLINE void DictDecodeBytes(const DictBytePlanes<kBits>&, const std::uint8_t*, const std::uint8_t*, std::size_t,
                                std::size_t, float*) {}
#endif  // HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
