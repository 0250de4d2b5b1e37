#pragma once
// The shard store's byte format (docs/format.md): the format constants, the fixed header and its
// encoding, and how sections are laid out. In short:
//
//   [0, 4096)   fixed header: magic "STILESHD", format version, header size, where the manifest
//               is, the file size, XXH3-64 checksums of the manifest and of the header itself
//   ...         sections, each starting at a multiple of 4096 (O_DIRECT reads) and padded to it:
//               the vocabulary text, the word-embedding table (fp32, row-addressable) and its
//               per-row checksum table, the other embeddings, then layer by layer the shard
//               versions (bits increasing, and within a bitwidth shard by shard: a layer at
//               one bitwidth is one contiguous read) and the layer's resident block
//   [m, end)    the manifest: JSON describing every section (offset, size, checksum) and every
//               shard version (bits, dictionary, outlier counts), plus the model's config.json
//
// The manifest is store/manifest.hpp, the reader store/shard_store.hpp, the writer
// store/shard_writer.hpp. Every failure is a stile::Error "stile: <file>: <problem>"; per-version
// problems name "layer L shard S at B bits" (shard_version_name).
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// xxHash, header-only (Debian's libxxhash-dev): nothing to link.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#define STILE_SHARD_STORE_UNDEF_XXH_INLINE_ALL
#endif
#include <xxhash.h>
#ifdef STILE_SHARD_STORE_UNDEF_XXH_INLINE_ALL
#undef XXH_INLINE_ALL
#undef STILE_SHARD_STORE_UNDEF_XXH_INLINE_ALL
#endif

#include "stile/core/file_error.hpp"

namespace stile {

// The store keeps floats and integers in the host's byte order and hands shard bytes to the GEMM
// in place; every machine stile targets (x86-64, aarch64) is little-endian, as the format is.
static_assert(std::endian::native == std::endian::little, "the shard store format is little-endian");

inline constexpr std::size_t kShardStoreAlign = 4096;         // every section starts at a multiple
inline constexpr std::size_t kShardStoreHeaderBytes = 4096;   // the fixed header
// Versions this code reads: 1, and 2 (version 1 + a word table that may be clustered low-rank;
// docs/format.md "Versioning"). The writer writes 2 only for a low-rank table, so a dense store
// stays readable by a version-1 reader.
inline constexpr std::uint32_t kShardStoreFormatVersion = 2;     // the newest version
inline constexpr std::uint32_t kShardStoreMinFormatVersion = 1;  // the oldest version still read
inline constexpr std::string_view kShardStoreMagic = "STILESHD";
inline constexpr std::string_view kShardStoreFormatName = "stile-shards";  // the manifest's "format"
// A manifest larger than this is refused before it is read (a real one is a few MB at most: BERT
// large with 16 shards x 6 bitwidths is ~4 MB, mostly dictionaries).
inline constexpr std::uint64_t kMaxShardManifestBytes = std::uint64_t{256} << 20;
// The resident block of a layer: six fp32 vectors of d floats, in this order.
inline constexpr std::size_t kLayerResidentParts = 6;
inline constexpr std::array<const char*, kLayerResidentParts> kLayerResidentNames = {
    "attention-output bias", "LN1 gamma", "LN1 beta", "FFN2 bias", "LN2 gamma", "LN2 beta"};

// A byte range of the file with the XXH3-64 checksum of its bytes.
struct ShardStoreSection {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint64_t checksum = 0;
};

// The fixed header's fields.
struct ShardStoreHeader {
  std::uint32_t version = kShardStoreFormatVersion;
  std::uint32_t header_size = kShardStoreHeaderBytes;
  std::uint64_t manifest_offset = 0;
  std::uint64_t manifest_size = 0;
  std::uint64_t file_size = 0;
  std::uint64_t manifest_checksum = 0;
  std::uint64_t header_checksum = 0;
};

// "layer L shard S at B bits": how errors name one shard version.
inline std::string shard_version_name(std::size_t layer, std::size_t shard, unsigned bits) {
  return concat("layer ", layer, " shard ", shard, " at ", bits, " bits");
}

namespace shard_store_detail {

template <class... Parts>
[[noreturn]] void fail(std::string_view file, const Parts&... parts) {
  fail_in_file(file, parts...);
}

// Byte offsets of the header's fields.
inline constexpr std::size_t kVersionAt = 8, kHeaderSizeAt = 12, kManifestOffsetAt = 16, kManifestSizeAt = 24,
                             kFileSizeAt = 32, kManifestChecksumAt = 40, kHeaderChecksumAt = 48, kHeaderFieldsEnd = 56;

inline std::uint64_t xxh3(std::span<const std::byte> bytes) noexcept { return XXH3_64bits(bytes.data(), bytes.size()); }
inline std::uint32_t row_checksum(std::span<const std::byte> row) noexcept {
  return static_cast<std::uint32_t>(xxh3(row));
}
inline std::uint64_t load_le(const std::byte* p, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}
inline void store_le(std::byte* p, std::uint64_t v, int bytes) noexcept {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

inline constexpr std::uint64_t align_up(std::uint64_t v) noexcept {
  return (v + kShardStoreAlign - 1) / kShardStoreAlign * kShardStoreAlign;
}

// Checksums are written in the manifest as 16 lowercase hex digits (JSON numbers above 2^53 do
// not survive every JSON library).
inline std::string hex64(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = kDigits[v & 0xf];
  return s;
}
inline std::optional<std::uint64_t> parse_hex64(std::string_view s) noexcept {
  if (s.size() != 16) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    unsigned digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    v = (v << 4) | digit;
  }
  return v;
}

inline std::string bits_to_string(const std::vector<unsigned>& bits) {
  std::string s = "[";
  for (std::size_t i = 0; i < bits.size(); ++i) s += concat(i == 0 ? "" : ", ", bits[i]);
  return s + "]";
}

// The 4096 header bytes for h (its header_checksum is computed here).
inline std::vector<std::byte> encode_header(const ShardStoreHeader& h) {
  std::vector<std::byte> out(kShardStoreHeaderBytes, std::byte{0});
  std::memcpy(out.data(), kShardStoreMagic.data(), kShardStoreMagic.size());
  store_le(out.data() + kVersionAt, h.version, 4);
  store_le(out.data() + kHeaderSizeAt, h.header_size, 4);
  store_le(out.data() + kManifestOffsetAt, h.manifest_offset, 8);
  store_le(out.data() + kManifestSizeAt, h.manifest_size, 8);
  store_le(out.data() + kFileSizeAt, h.file_size, 8);
  store_le(out.data() + kManifestChecksumAt, h.manifest_checksum, 8);
  store_le(out.data() + kHeaderChecksumAt, xxh3(std::span(out).first(kHeaderChecksumAt)), 8);
  return out;
}

// Validates the header: `prefix` is the file's first min(file_size, 4096) bytes, file_size the
// file's actual size. With verify_checksum off the header checksum is not compared (fuzzing).
inline ShardStoreHeader parse_header(std::span<const std::byte> prefix, std::uint64_t file_size,
                                     const std::string& file, bool verify_checksum = true) {
  if (prefix.size() < kShardStoreMagic.size() ||
      std::memcmp(prefix.data(), kShardStoreMagic.data(), kShardStoreMagic.size()) != 0) {
    fail(file, "not a stile shard store: the file does not start with the magic \"STILESHD\" (bad magic)");
  }
  if (prefix.size() < kHeaderSizeAt + 4) {
    fail(file, "truncated: the file is ", file_size, " bytes, shorter than its ", kShardStoreHeaderBytes,
         "-byte header");
  }
  ShardStoreHeader h;
  // The version is checked before anything else, the checksum included: another version may lay
  // its header out differently.
  h.version = static_cast<std::uint32_t>(load_le(prefix.data() + kVersionAt, 4));
  if (h.version < kShardStoreMinFormatVersion || h.version > kShardStoreFormatVersion) {
    fail(file, "format version ", h.version, " is not supported (this reader supports versions ",
         kShardStoreMinFormatVersion, " to ", kShardStoreFormatVersion,
         h.version > kShardStoreFormatVersion ? "; the store was written by a newer stile: convert it again)" : ")");
  }
  h.header_size = static_cast<std::uint32_t>(load_le(prefix.data() + kHeaderSizeAt, 4));
  if (h.header_size != kShardStoreHeaderBytes) {
    fail(file, "the header declares ", h.header_size, " bytes; format version ", h.version, " has a ", kShardStoreHeaderBytes,
         "-byte header (damaged header)");
  }
  if (prefix.size() < kShardStoreHeaderBytes) {
    fail(file, "truncated: the file is ", file_size, " bytes, shorter than its ", kShardStoreHeaderBytes,
         "-byte header");
  }
  h.manifest_offset = load_le(prefix.data() + kManifestOffsetAt, 8);
  h.manifest_size = load_le(prefix.data() + kManifestSizeAt, 8);
  h.file_size = load_le(prefix.data() + kFileSizeAt, 8);
  h.manifest_checksum = load_le(prefix.data() + kManifestChecksumAt, 8);
  h.header_checksum = load_le(prefix.data() + kHeaderChecksumAt, 8);
  if (verify_checksum) {
    const std::uint64_t actual = xxh3(prefix.first(kHeaderChecksumAt));
    if (actual != h.header_checksum) {
      fail(file, "header checksum mismatch (the header says ", hex64(h.header_checksum), ", its bytes hash to ",
           hex64(actual), "): the header is damaged");
    }
  }
  for (std::size_t i = kHeaderFieldsEnd; i < kShardStoreHeaderBytes; ++i) {
    if (prefix[i] != std::byte{0}) {
      fail(file, "byte ", i, " of the header is not zero (bytes [", kHeaderFieldsEnd, ", ", kShardStoreHeaderBytes,
           ") are reserved): damaged header");
    }
  }
  if (h.file_size != file_size) {
    fail(file, "truncated or damaged: the header says the file is ", h.file_size, " bytes, but it is ", file_size,
         " bytes");
  }
  if (h.manifest_size == 0 || h.manifest_size > file_size || h.manifest_offset != file_size - h.manifest_size) {
    fail(file, "the manifest (", h.manifest_size, " bytes at byte ", h.manifest_offset, ") does not end the file (",
         file_size, " bytes)");
  }
  if (h.manifest_offset < kShardStoreHeaderBytes || h.manifest_offset % kShardStoreAlign != 0) {
    fail(file, "the manifest starts at byte ", h.manifest_offset, ", which is not a multiple of ", kShardStoreAlign,
         " after the header");
  }
  if (h.manifest_size > kMaxShardManifestBytes) {
    fail(file, "the manifest is ", h.manifest_size, " bytes, more than the limit of ", kMaxShardManifestBytes,
         " (damaged header?)");
  }
  return h;
}

}  // namespace shard_store_detail

}  // namespace stile
