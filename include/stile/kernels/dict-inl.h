// Per-target panel decoders for quantized (dictionary) weights: DictMatrix and StackedDict
// (codec.hpp), stored in the group-slab layout of quant/packed_layout.hpp. The GEMM asks for one
// KC x NR panel at a time; it is decoded straight from the k-bit indices into the packed buffer
// the micro-kernel reads (L1-resident), so no layer is ever held in fp32.
//
// A panel row k is one slab (16 rows of one column) or part of one (NR = 4, 8) or several
// side by side (NR = 32, 64). Each vector of L float lanes covers L consecutive rows of a group
// starting at a multiple of L, and is decoded per k with:
//   1. the plane words of its lanes broadcast, shifted per lane by a variable shift (a multiply
//      and a constant shift on SSE4/SSSE3; the per-lane vectors made once, outside the k loop)
//      and masked: the k-bit index of each lane;
//   2. the centroid of each index: a tree of in-register table lookups (TableLookupLanes over
//      L-entry slices of the dictionary, then selects on the higher index bits, which are moved
//      to the sign bit straight from the planes) or a gather, whichever measured faster for that
//      bitwidth and vector width (DictAutoLookup below); on AVX-512, 32- and 64-entry tables are
//      looked up two 16-entry slices at a time (vpermt2ps);
// then the outliers of the panel are patched over it (a binary search in the sorted keys).
// Whole groups at 3..6 bits on AVX2 and SSE4 (6 bits there for fp16 dictionaries only) and at
// 2..6 bits on NEON take the byte-plane decoder of dict_bytes-inl.h instead (DictLookup::kBytes):
// byte shuffles over the centroids' bytes; on the AVX3 targets, where the CPU has VBMI, the
// 64-entry byte lookups of dict_vbmi-inl.h.
// Vectors that start off a vector boundary (stacked blocks of odd row counts) and the scalar
// target take a plain scalar loop over quant::slab_index.
#if defined(STILE_KERNELS_DICT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STILE_KERNELS_DICT_INL_H_
#undef STILE_KERNELS_DICT_INL_H_
#else
#define STILE_KERNELS_DICT_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

#include "stile/core/aligned_buffer.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/dict_bytes-inl.h"
#include "stile/kernels/dict_vbmi-inl.h"
#include "stile/kernels/pack-inl.h"
#include "stile/quant/packed_layout.hpp"

HWY_BEFORE_NAMESPACE();
namespace stile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#ifndef STILE_DICT_UNROLL2
#if defined(__clang__)
#define STILE_DICT_UNROLL2 _Pragma("unroll 2")
#elif defined(__GNUC__)
#define STILE_DICT_UNROLL2 _Pragma("GCC unroll 2")
#else
#define STILE_DICT_UNROLL2
#endif
#endif

// The planes are little-endian bit fields, read here as native 16/32-bit words.
static_assert(std::endian::native == std::endian::little, "the dictionary decoder assumes a little-endian host");

// Float lanes per decoded vector for an kNR-wide panel: at most one group (16 rows), at most the
// panel, at most the target's vectors. Below 4 lanes (NR = 1, 2, or the scalar target) the
// decoder takes its scalar path.
template <std::size_t kNR>
constexpr std::size_t DictLanes() {
  constexpr std::size_t full = hn::MaxLanes(hn::ScalableTag<float>());
  constexpr std::size_t cap = kNR < quant::kGroupRows ? kNR : quant::kGroupRows;
  return cap < full ? cap : full;
}
template <std::size_t kNR>
constexpr bool DictSimd() {
  return HWY_TARGET != HWY_SCALAR && DictLanes<kNR>() >= 4;
}

// The lookup each bitwidth uses with L-lane vectors where the byte-plane decoder does not apply
// (a group's last rows, blocks off a group boundary, k < 4), chosen by bench_dequant (a): figures
// in docs/design-notes.md (dictionary-quantized shards).
//   8 lanes (AVX2): the tree costs one 8-entry vpermps per 8 centroids plus the selects; the
//     hardware gather costs the same at any size, which on a Zen 3 core beat the tree at 6 bits.
//   4 lanes (SSE4, NEON): four-entry lookups make the tree deep; the gather is emulated with
//     scalar loads and still wins from 4 bits.
//   16 lanes (AVX-512): the tree, with 32-entry two-table lookups (vpermt2ps).
template <unsigned kBits, std::size_t kLanes>
constexpr DictLookup DictVectorLookup() {
  if constexpr (kLanes >= 16) return DictLookup::kTree;
  if constexpr (kLanes == 8) return kBits <= 5 ? DictLookup::kTree : DictLookup::kGather;
  return kBits <= 3 ? DictLookup::kTree : DictLookup::kGather;
}
// The byte-plane decoder (dict_bytes-inl.h) where it applies, as measured (docs/design-notes.md,
// docs/benchmarks/dictionary-gemm.md): faster than the above at 4..6 bits on AVX2 (5 and 6 bits most), and on SSE4 at 4 and 5
// bits (its 8-column panels keep half of each decoded slab, which at 6 bits loses to the gather);
// on NEON tbl looks up 32 or 64 bytes in one instruction (compared by instruction count: qemu's
// time means nothing). AVX-512 keeps its two-table tree, faster than bytes at 256 bits. On AVX2
// also at 3 bits, where the fp16 planes (dict_bytes-inl.h) decode faster than the tree (docs/design-notes.md,
// the fp16 planes, on an Intel Xeon); on SSE4 at 3 bits (either planes beat the tree on that
// Xeon) and at 6 bits, but there only for dictionaries that take the fp16 planes (DictBytesHalfOnly);
// on NEON from 2 bits (with either planes fewer instructions than the four-lane tree: docs/design-notes.md,
// the fp16 planes on NEON and SSE4).
template <std::size_t kNR, unsigned kBits, std::size_t kLanes>
constexpr DictLookup DictAutoLookup() {
  constexpr unsigned kFirst = HWY_TARGET == HWY_NEON ? 2 : HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_SSE4 ? 3 : 4;
  constexpr bool kSsse3Six = HWY_TARGET == HWY_SSSE3 && kBits == 6;
  if constexpr (kLanes <= 8 && kBits >= kFirst && DictBytesSupported<kNR, kBits>() && !kSsse3Six) {
    return DictLookup::kBytes;
  }
  return DictVectorLookup<kBits, kLanes>();
}
// Where the automatic choice takes the byte decoder only if the dictionary takes the fp16 planes,
// the other lookup otherwise: SSE4 at 6 bits, where the four planes lose to the emulated gather
// and the fp16 planes beat it (docs/design-notes.md, fp16 planes on NEON and SSE4).
template <unsigned kBits>
constexpr bool DictBytesHalfOnly() {
  return HWY_TARGET == HWY_SSE4 && kBits == 6;
}

#ifdef STILE_DICT_VBMI
// Where the AVX3 targets' automatic choice takes the VBMI byte decoder over the two-table tree:
// where it decoded faster (bench_dequant (a), docs/design-notes.md). It costs the
// same at every bitwidth (36-38 GB/s there), the tree 61, 34, 44, 29 and 24 GB/s at 2..6 bits.
constexpr bool DictVbmiAuto(unsigned bits) { return bits == 3 || bits == 5 || bits == 6; }
#endif

// The centroids, copied once per block decode into an aligned table that the lookups load
// whole vectors from, zero-padded to at least one vector of any target (16 floats).
template <unsigned kBits>
struct DictTable {
  static constexpr std::size_t kEntries = kBits == 32 ? 0 : std::size_t{1} << kBits;
  static constexpr std::size_t kSize = kEntries > 16 ? kEntries : 16;
  HWY_ALIGN float values[kSize];
  explicit DictTable(const DictMatrix& m) {
    if constexpr (kEntries != 0) std::memcpy(values, m.centroids, kEntries * sizeof(float));
    std::fill(values + kEntries, values + kSize, 0.0f);
  }
};

// yes where the sign bit of `sign` is set, else no. (Highway 1.0.3's IfNegativeThenElse on SSSE3
// feeds the raw sign vector to an and/andnot blend, right only for all-ones masks, so SSSE3
// broadcasts the sign bit first; an integer selector keeps EMU128, whose float version compares
// with < 0, right for the -0.0f and NaN bit patterns.)
template <class DI, class VF>
HWY_INLINE VF DictSelectSign(DI di, hn::Vec<DI> sign, VF yes, VF no) {
  const hn::RebindToFloat<DI> df;
#if HWY_TARGET == HWY_SSSE3
  return hn::IfThenElse(hn::MaskFromVec(hn::BitCast(df, hn::BroadcastSignBit(sign))), yes, no);
#else
  return hn::BitCast(df, hn::IfNegativeThenElse(sign, hn::BitCast(di, yes), hn::BitCast(di, no)));
#endif
}

// The lookup tree: halves kN candidate vectors by one index bit per level (sign[0] first, the
// lowest bit above those the table lookups used), down to v[0].
template <std::size_t kN, class DU, class VF>
HWY_INLINE void DictSelectTree(DU du, const hn::Vec<DU>* sign, VF* v) {
  const hn::RebindToSigned<DU> di;
  for (std::size_t t = 0; t < kN / 2; ++t) v[t] = DictSelectSign(di, hn::BitCast(di, sign[0]), v[2 * t + 1], v[2 * t]);
  if constexpr (kN / 2 > 1) DictSelectTree<kN / 2>(du, sign + 1, v);
}

// The fields of lanes o .. o + L - 1 (o a multiple of L) of a plane of kW-bit fields (kW in 1,
// 2, 4). The plane's 16 fields fit one 16-bit word (kW = 1), one 32-bit word (kW = 2) or two
// (kW = 4: lanes 0..7 in the first); only the plane's own bytes are read. Words() broadcasts the
// word of each lane; Fields() moves each lane's field down to bit 0 by a per-lane shift (its
// vector made once, outside the k loop); Sign() moves bit b of each lane's field to bit 31.
template <unsigned kW, class DU>
struct DictPlane {
  static constexpr std::size_t kLanes = hn::MaxLanes(DU());
#if HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  // No variable shifts on SSE4/SSSE3 (Highway emulates one with two multiplies and shuffles):
  // a multiply moves each field to the top bits, a constant shift brings exactly it down.
  static constexpr bool kMulShift = true;
#else
  static constexpr bool kMulShift = false;
#endif
  static constexpr bool kExact = kMulShift;  // Fields() has no bits above the field
  hn::Vec<DU> down;                          // per lane: right shift (or multiplier) of Fields()
  hn::Vec<DU> sign[2];                       // per lane: left shift (or multiplier) of Sign(b)
  std::size_t offset;                        // byte offset of the word (or word pair) in the slab

  DictPlane(DU du, std::size_t plane_offset, std::size_t o) {
    offset = plane_offset;
    // 4-bit fields of lanes 8..15 are in the second word; L <= 8 lanes all sit in one.
    if constexpr (kW == 4 && kLanes <= 8) offset += kW * o / 32 * 4;
    HWY_ALIGN std::uint32_t d[kLanes], s0[kLanes], s1[kLanes];
    for (std::size_t i = 0; i < kLanes; ++i) {
      const unsigned bit = static_cast<unsigned>(kW * (o + i) % 32);  // of lane i's field in its word
      d[i] = kMulShift ? 1u << (32 - kW - bit) : bit;
      s0[i] = kMulShift ? 1u << (31 - bit) : 31 - bit;
      s1[i] = bit >= 31 ? 0u : kMulShift ? 1u << (30 - bit) : 30 - bit;
    }
    down = hn::Load(du, d);
    sign[0] = hn::Load(du, s0);
    sign[1] = hn::Load(du, s1);
  }

  HWY_INLINE hn::Vec<DU> Words(DU du, const std::uint8_t* HWY_RESTRICT slab) const {
    if constexpr (kW == 1) {
      std::uint16_t w;
      std::memcpy(&w, slab + offset, sizeof(w));
      return hn::Set(du, w);
    } else if constexpr (kW == 4 && kLanes == 16) {
      std::uint32_t w[2];
      std::memcpy(w, slab + offset, sizeof(w));
      return hn::IfThenElse(hn::FirstN(du, 8), hn::Set(du, w[0]), hn::Set(du, w[1]));
    } else {
      std::uint32_t w;
      std::memcpy(&w, slab + offset, sizeof(w));
      return hn::Set(du, w);
    }
  }
  HWY_INLINE hn::Vec<DU> Fields(DU du, const std::uint8_t* HWY_RESTRICT slab) const {
    if constexpr (kMulShift) return hn::ShiftRight<32 - kW>(hn::Mul(Words(du, slab), down));
    return hn::Shr(Words(du, slab), down);
  }
  HWY_INLINE hn::Vec<DU> Sign(hn::Vec<DU> words, int b) const {
    if constexpr (kMulShift) return hn::Mul(words, sign[b]);
    return hn::Shl(words, sign[b]);
  }
};

// sign[b - kBit] = index bit b in the sign bit, for b in [kBit, kEnd): bits below kLo from
// `low` (the index, or the low plane's fields at bit 0), the others from the high plane's words
// (hi.Sign), which saves assembling the index.
template <int kBit, int kEnd, int kLo, class VU, class Plane>
HWY_INLINE void DictSigns(VU low, VU hi_words, const Plane& hi, VU* sign) {
  if constexpr (kBit < kEnd) {
    if constexpr (kBit < kLo) {
      sign[0] = hn::ShiftLeft<31 - kBit>(low);
    } else {
      sign[0] = hi.Sign(hi_words, kBit - kLo);
    }
    DictSigns<kBit + 1, kEnd, kLo>(low, hi_words, hi, sign + 1);
  }
}

// Decodes one vector column of a panel: lanes o .. o + L - 1 of the slabs slab, slab + kSlab,
// ... (kc of them, one per k) into out[k * kNR], L floats each, aligned. kTail: only the first
// `valid` lanes are rows of the block; the others come out as 0.
template <std::size_t kNR, unsigned kBits, DictLookup kLookup, bool kTail, class D>
HWY_INLINE void DictDecodeVectors(D d, const float* HWY_RESTRICT table, const std::uint8_t* HWY_RESTRICT slab,
                                  std::size_t o, std::size_t kc, std::size_t valid, float* HWY_RESTRICT out) {
  constexpr std::size_t kLanes = hn::MaxLanes(d);
  constexpr std::size_t kSlab = quant::slab_bytes(kBits);
  (void)valid;
  if constexpr (kBits == 32) {
    const float* HWY_RESTRICT src = reinterpret_cast<const float*>(slab) + o;
    STILE_DICT_UNROLL2
    for (std::size_t k = 0; k < kc; ++k) {
      auto v = hn::LoadU(d, src + k * quant::kGroupRows);
      if constexpr (kTail) v = hn::IfThenElseZero(hn::FirstN(d, valid), v);
      hn::Store(v, d, out + k * kNR);
    }
  } else {
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    using VU = hn::Vec<decltype(du)>;
    constexpr int kLo = static_cast<int>(quant::low_plane_bits(kBits));
    constexpr int kHi = static_cast<int>(quant::high_plane_bits(kBits));
    constexpr std::size_t kEntries = std::size_t{1} << kBits;
    constexpr std::size_t kTables = kEntries > kLanes ? kEntries / kLanes : 1;
    constexpr int kLaneBits = std::countr_zero(kLanes);
    constexpr int kLevels = std::countr_zero(kTables);
    // A tree whose in-vector index bits all lie in the low plane takes them from its fields and
    // the higher bits straight from the planes (DictSigns); a gather, a single lookup or a low
    // plane narrower than the in-vector index needs the index assembled.
    constexpr bool kSplit = kLookup == DictLookup::kTree && kLevels > 0 && kLo >= kLaneBits;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    // AVX-512 looks up two 16-entry tables in one vpermt2ps (index bit 4 picks the table), which
    // Highway 1.0.3 does not expose: 32 entries (k = 5) in one instruction, 64 (k = 6) in two and
    // one select, instead of a tree of two or four lookups and one or three selects.
    constexpr bool kPairs = kLookup == DictLookup::kTree && kLanes == 16 && (kTables == 2 || kTables == 4);
#endif
    using Lo = DictPlane<kLo, decltype(du)>;
    using Hi = DictPlane<kHi == 0 ? 1 : kHi, decltype(du)>;  // (a dummy when there is none)
    const Lo lo(du, 0, o);
    const Hi hi(du, quant::plane_bytes(kLo), o);
    hn::Vec<D> tables[kTables];
    for (std::size_t t = 0; t < kTables; ++t) tables[t] = hn::Load(d, table + t * kLanes);
    STILE_DICT_UNROLL2
    for (std::size_t k = 0; k < kc; ++k) {
      const std::uint8_t* HWY_RESTRICT p = slab + k * kSlab;
      hn::Vec<D> v;
      // An if-else chain split by #if, which the formatter would misindent:
      // clang-format off
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
      if constexpr (kPairs) {
        VU idx = lo.Fields(du, p);
        if constexpr (!Lo::kExact) idx = hn::And(idx, hn::Set(du, (1u << kLo) - 1));
        VU high = hi.Fields(du, p);
        if constexpr (!Hi::kExact) high = hn::And(high, hn::Set(du, (1u << kHi) - 1));
        idx = hn::Or(idx, hn::ShiftLeft<kLo>(high));
        const __m512i perm = hn::BitCast(di, idx).raw;
        v = hn::Vec<D>{_mm512_permutex2var_ps(tables[0].raw, perm, tables[1].raw)};
        if constexpr (kTables == 4) {
          const hn::Vec<D> upper{_mm512_permutex2var_ps(tables[2].raw, perm, tables[3].raw)};
          v = DictSelectSign(di, hn::BitCast(di, hn::ShiftLeft<31 - 5>(idx)), upper, v);  // index bit 5
        }
      } else
#endif
      if constexpr (kSplit) {
        const VU fields = lo.Fields(du, p);
        const auto perm = hn::IndicesFromVec(d, hn::And(fields, hn::Set(du, kLanes - 1)));
        hn::Vec<D> cand[kTables];
        for (std::size_t t = 0; t < kTables; ++t) cand[t] = hn::TableLookupLanes(tables[t], perm);
        VU sign[kLevels];
        VU hi_words = fields;
        if constexpr (kHi != 0) hi_words = hi.Words(du, p);
        DictSigns<kLaneBits, static_cast<int>(kBits), kLo>(fields, hi_words, hi, sign);
        DictSelectTree<kTables>(du, sign, cand);
        v = cand[0];
      } else {
        VU idx = lo.Fields(du, p);
        if constexpr (!Lo::kExact) idx = hn::And(idx, hn::Set(du, (1u << kLo) - 1));
        if constexpr (kHi != 0) {
          VU high = hi.Fields(du, p);
          if constexpr (!Hi::kExact) high = hn::And(high, hn::Set(du, (1u << kHi) - 1));
          idx = hn::Or(idx, hn::ShiftLeft<kLo>(high));
        }
        if constexpr (kLookup == DictLookup::kGather) {
          v = hn::GatherIndex(d, table, hn::BitCast(di, idx));
        } else if constexpr (kTables == 1) {
          v = hn::TableLookupLanes(tables[0], hn::IndicesFromVec(d, idx));
        } else {
          const auto perm = hn::IndicesFromVec(d, hn::And(idx, hn::Set(du, kLanes - 1)));
          hn::Vec<D> cand[kTables];
          for (std::size_t t = 0; t < kTables; ++t) cand[t] = hn::TableLookupLanes(tables[t], perm);
          VU sign[kLevels];
          DictSigns<kLaneBits, static_cast<int>(kBits), static_cast<int>(kBits)>(idx, idx, hi, sign);
          DictSelectTree<kTables>(du, sign, cand);
          v = cand[0];
        }
      }
      if constexpr (kTail) v = hn::IfThenElseZero(hn::FirstN(d, valid), v);
      hn::Store(v, d, out + k * kNR);
    }
    // clang-format on
  }
}

// W[r0 + i][k0 + k] for i < cnt, k < kc into out[k * kNR + col + i] (out: the panel). Writes
// through SIMD vectors when r0 and col are multiples of the vector lanes: the last vector then
// also writes zeros past row r0 + cnt, up to its end, into the panel columns that follow (the
// next block of a stack overwrites them; the caller zeroes the columns past the panel's rows).
// Otherwise (the scalar target, NR < 4, a stack block starting off a vector boundary) one value
// at a time. Outliers are patched in last.
template <std::size_t kNR, unsigned kBits, DictLookup kLookup>
HWY_NOINLINE void DictDecodeBlock(const DictMatrix& m, std::size_t r0, std::size_t cnt, std::size_t k0, std::size_t kc,
                                  float* HWY_RESTRICT out, std::size_t col) {
  constexpr std::size_t kSlab = quant::slab_bytes(kBits);
  const std::size_t group_stride = m.n_cols * kSlab;
  float* HWY_RESTRICT dst = out + col;
  bool done = false;
  if constexpr (DictSimd<kNR>()) {
    const hn::CappedTag<float, DictLanes<kNR>()> d;
    constexpr std::size_t kLanes = hn::MaxLanes(d);
    constexpr DictLookup kAsked = kLookup == DictLookup::kAuto ? DictAutoLookup<kNR, kBits, kLanes>() : kLookup;
    constexpr bool kBytes = kAsked == DictLookup::kBytes && DictBytesSupported<kNR, kBits>();
    // (kBytes asked where it does not apply: the automatic choice among the others.)
    constexpr DictLookup kUse = kAsked != DictLookup::kBytes ? kAsked : DictVectorLookup<kBits, kLanes>();
    std::size_t first = 0;  // rows [0, first) done by the byte-plane decoder
#ifdef STILE_DICT_VBMI
    // AVX-512 with VBMI: whole groups by 64-entry byte lookups (dict_vbmi-inl.h), where asked
    // (kBytes) or chosen (kAuto: DictVbmiAuto).
    if constexpr (kBits <= 6 && kNR % quant::kGroupRows == 0 &&
                  (kLookup == DictLookup::kBytes || (kLookup == DictLookup::kAuto && DictVbmiAuto(kBits)))) {
      if (CpuHasVbmi() && r0 % quant::kGroupRows == 0 && col % quant::kGroupRows == 0 && cnt >= quant::kGroupRows) {
        for (; first + quant::kGroupRows <= cnt; first += quant::kGroupRows) {
          const std::size_t r = r0 + first;
          const std::uint8_t* slab = m.packed + (r / quant::kGroupRows) * group_stride + k0 * kSlab;
          DictDecodeVbmi<kBits>(m.centroids, slab, kc, dst + first, kNR);
        }
      }
    }
#endif
    if constexpr (kBytes) {
      // Whole groups (or halves of groups, kNR = 8) that start on a group (half) boundary.
      constexpr std::size_t kW = kNR < quant::kGroupRows ? kNR : quant::kGroupRows;
      constexpr bool kHalfOnly = kLookup == DictLookup::kAuto && DictBytesHalfOnly<kBits>();
      if (r0 % kW == 0 && col % kW == 0 && cnt >= kW) {
        const DictBytePlanes<kBits> planes(m.centroids);
        const std::uint8_t* end = m.packed + quant::packed_bytes(m.n_rows, m.n_cols, kBits);
        // Otherwise (kHalfOnly, four planes) every group takes the vector lookup below.
        if (planes.half || !kHalfOnly) {
          for (; first + kW <= cnt; first += kW) {
            const std::size_t r = r0 + first;
            const std::uint8_t* slab = m.packed + (r / quant::kGroupRows) * group_stride + k0 * kSlab;
            DictDecodeBytes<kNR, kBits>(planes, slab, end, r % quant::kGroupRows, kc, dst + first);
          }
        }
      }
    }
    if (first < cnt && (r0 + first) % kLanes == 0 && (col + first) % kLanes == 0) {
      const DictTable<kBits> table(m);
      for (std::size_t i = first; i < cnt; i += kLanes) {
        const std::size_t r = r0 + i;
        const std::uint8_t* slab = m.packed + (r / quant::kGroupRows) * group_stride + k0 * kSlab;
        const std::size_t o = r % quant::kGroupRows;
        if (i + kLanes <= cnt) {
          DictDecodeVectors<kNR, kBits, kUse, false>(d, table.values, slab, o, kc, kLanes, dst + i);
        } else {
          DictDecodeVectors<kNR, kBits, kUse, true>(d, table.values, slab, o, kc, cnt - i, dst + i);
        }
      }
    }
    done = first == cnt || ((r0 + first) % kLanes == 0 && (col + first) % kLanes == 0);
  }
  if (!done) {
    const DictTable<kBits> table(m);
    for (std::size_t i = 0; i < cnt; ++i) {
      const std::size_t r = r0 + i, j = r % quant::kGroupRows;
      const std::uint8_t* slab = m.packed + (r / quant::kGroupRows) * group_stride + k0 * kSlab;
      for (std::size_t k = 0; k < kc; ++k) {
        const std::uint8_t* p = slab + k * kSlab;
        float w;
        if constexpr (kBits == 32) {
          std::memcpy(&w, p + j * sizeof(float), sizeof(float));
        } else {
          w = table.values[quant::slab_index(kBits, p, j)];
        }
        dst[k * kNR + i] = w;
      }
    }
  }
  if constexpr (kBits != 32) {
    // Keys in slab order: those of group g and columns [k0, k0 + kc) are one sorted run.
    if (m.n_outliers == 0 || cnt == 0) return;
    const std::uint32_t* keys = m.outlier_keys;
    const std::uint32_t* keys_end = keys + m.n_outliers;
    const auto before = [](std::uint32_t key, std::size_t bound) { return key < bound; };
    for (std::size_t g = r0 / quant::kGroupRows; g <= (r0 + cnt - 1) / quant::kGroupRows; ++g) {
      const std::size_t first = (g * m.n_cols + k0) * quant::kGroupRows;
      const std::size_t last = (g * m.n_cols + k0 + kc) * quant::kGroupRows;
      for (const std::uint32_t* it = std::lower_bound(keys, keys_end, first, before); it != keys_end && *it < last;
           ++it) {
        const std::size_t r = g * quant::kGroupRows + *it % quant::kGroupRows;
        if (r < r0 || r >= r0 + cnt) continue;
        const std::size_t k = *it / quant::kGroupRows - g * m.n_cols - k0;
        dst[k * kNR + (r - r0)] = m.outlier_values[it - keys];
      }
    }
  }
}

// DictDecodeBlock at the block's bitwidth. (Bitwidths are validated before any GEMM runs;
// an unsupported one here decodes as zeros.)
template <std::size_t kNR, DictLookup kLookup = DictLookup::kAuto>
HWY_INLINE void DictDecodeAnyBits(const DictMatrix& m, std::size_t r0, std::size_t cnt, std::size_t k0, std::size_t kc,
                                  float* HWY_RESTRICT out, std::size_t col) {
  switch (m.bits) {
    case 2: return DictDecodeBlock<kNR, 2, kLookup>(m, r0, cnt, k0, kc, out, col);
    case 3: return DictDecodeBlock<kNR, 3, kLookup>(m, r0, cnt, k0, kc, out, col);
    case 4: return DictDecodeBlock<kNR, 4, kLookup>(m, r0, cnt, k0, kc, out, col);
    case 5: return DictDecodeBlock<kNR, 5, kLookup>(m, r0, cnt, k0, kc, out, col);
    case 6: return DictDecodeBlock<kNR, 6, kLookup>(m, r0, cnt, k0, kc, out, col);
    case 32: return DictDecodeBlock<kNR, 32, DictLookup::kTree>(m, r0, cnt, k0, kc, out, col);
    default:
      for (std::size_t k = 0; k < kc; ++k) std::memset(out + k * kNR + col, 0, cnt * sizeof(float));
  }
}

// Zeroes panel columns [nr, kNR) of kc rows (an edge panel's padding).
template <std::size_t kNR>
HWY_INLINE void DictZeroColumns(std::size_t nr, std::size_t kc, float* HWY_RESTRICT out) {
  if (nr >= kNR) return;
  for (std::size_t k = 0; k < kc; ++k) std::memset(out + k * kNR + nr, 0, (kNR - nr) * sizeof(float));
}

// One DictMatrix with a given lookup (the GEMM uses kAuto; benchmarks compare the others).
template <DictLookup kLookup, std::size_t kNR>
HWY_INLINE void DictDecodePanel(const DictMatrix& w, std::size_t n0, std::size_t nr, std::size_t k0, std::size_t kc,
                                float* HWY_RESTRICT out) {
  DictDecodeAnyBits<kNR, kLookup>(w, n0, nr, k0, kc, out, 0);
  DictZeroColumns<kNR>(nr, kc, out);
}

template <>
struct PanelDecoder<DictMatrix> {
  template <std::size_t kNR>
  static HWY_INLINE void Decode(const DictMatrix& w, std::size_t n0, std::size_t nr, std::size_t k0, std::size_t kc,
                                float* HWY_RESTRICT out) {
    DictDecodePanel<DictLookup::kAuto, kNR>(w, n0, nr, k0, kc, out);
  }
};

template <>
struct PanelDecoder<StackedDict> {
  template <std::size_t kNR>
  static HWY_INLINE void Decode(const StackedDict& w, std::size_t n0, std::size_t nr, std::size_t k0, std::size_t kc,
                                float* HWY_RESTRICT out) {
    std::size_t start = 0;  // first row (kRows) or column (kCols) of the block
    if (w.axis == StackedDict::Axis::kRows) {
      // The panel's rows [n0, n0 + nr) from consecutive blocks, in order (see DictDecodeBlock:
      // a block's last vector may write zeros into the next block's columns before it is decoded).
      for (const DictMatrix& b : w.blocks) {
        const std::size_t end = start + b.n_rows;
        if (end > n0) {
          const std::size_t lo = std::max(n0, start), hi = std::min(n0 + nr, end);
          DictDecodeAnyBits<kNR>(b, lo - start, hi - lo, k0, kc, out, lo - n0);
        }
        if (end >= n0 + nr) break;
        start = end;
      }
    } else {
      // The panel's k range [k0, k0 + kc) from consecutive column blocks.
      for (const DictMatrix& b : w.blocks) {
        const std::size_t end = start + b.n_cols;
        if (end > k0) {
          const std::size_t lo = std::max(k0, start), hi = std::min(k0 + kc, end);
          DictDecodeAnyBits<kNR>(b, n0, nr, lo - start, hi - lo, out + (lo - k0) * kNR, 0);
        }
        if (end >= k0 + kc) break;
        start = end;
      }
    }
    DictZeroColumns<kNR>(nr, kc, out);
  }
};

// Every panel of W in the GEMM's panel layout for its target's NR (Cfg: a GemmConfig), each
// decoded over all of K at once: the decode-then-GEMM path (decode_to_packed in dict.hpp).
template <class Cfg>
struct DecodeToPacked {
  static void Run(const typename Cfg::Weights& w, float* out) {
    constexpr std::size_t NR = Cfg::Tiles::template For<HWY_TARGET>::NR;
    const std::size_t N = w.rows(), K = w.cols();
    for (std::size_t n0 = 0; n0 < N; n0 += NR) {
      PanelDecoder<typename Cfg::Weights>::template Decode<NR>(w, n0, std::min(NR, N - n0), 0, K, out + n0 * K);
    }
  }
};

// Decodes every KC x NR panel of a DictMatrix in the GEMM's order (NC blocks, then KC, then NR)
// into one reused KC x NR buffer, as the GEMM's just-in-time path does, without the arithmetic:
// the decoder's throughput for benchmarks. Cfg: Tiles and kLookup.
template <class Cfg>
struct DictDecodeSweep {
  static void Run(const DictMatrix& w) {
    using Shape = typename Cfg::Tiles::template For<HWY_TARGET>;
    static thread_local AlignedBuffer<float> panel;
    panel.resize(Shape::KC * Shape::NR);
    const std::size_t N = w.rows(), K = w.cols();
    for (std::size_t jc = 0; jc < N; jc += Shape::NC) {
      const std::size_t nc = std::min(Shape::NC, N - jc);
      for (std::size_t pc = 0; pc < K; pc += Shape::KC) {
        const std::size_t kc = std::min(Shape::KC, K - pc);
        for (std::size_t jr = 0; jr < nc; jr += Shape::NR) {
          DictDecodePanel<Cfg::kLookup, Shape::NR>(w, jc + jr, std::min(Shape::NR, nc - jr), pc, kc, panel.data());
        }
      }
    }
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace stile
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
