#pragma once
// The shard store: one file holding every shard version of an elastic BERT (N layers x M shards x
// K bitwidths, docs/shards.md), with the embeddings, the per-layer resident blocks and the
// vocabulary. The byte format is specified in docs/format.md; in short:
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
// ShardStoreWriter streams a store to a temporary file (one layer in memory at a time) and
// renames it into place in finish(), so the destination is either the complete store or
// untouched. ShardStore reads one: open() validates the whole header and manifest (checksums,
// every section inside the file, aligned and not overlapping, every size against the config and
// the shard layout) before anything is handed out; each read then verifies the checksum of what
// it read. Every failure is a stile::Error "stile: <file>: <problem>"; per-version problems name
// "layer L shard S at B bits".
//
// Reads go through a ShardStoreSource (pread on a file descriptor, or bytes in memory), the one
// place a later io_uring / O_DIRECT backend plugs in. All reads are positional, so a ShardStore
// may be read from several threads at once.
#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

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

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/io/bert_config.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/store/shard_layout.hpp"
#include "stile/store/shard_view.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile {

// The store keeps floats and integers in the host's byte order and hands shard bytes to the GEMM
// in place; every machine stile targets (x86-64, aarch64) is little-endian, as the format is.
static_assert(std::endian::native == std::endian::little, "the shard store format is little-endian");

inline constexpr std::size_t kShardStoreAlign = 4096;          // every section starts at a multiple
inline constexpr std::size_t kShardStoreHeaderBytes = 4096;    // the fixed header
inline constexpr std::uint32_t kShardStoreFormatVersion = 1;   // the version this code reads and writes
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

// What the manifest says about one shard version.
struct ShardVersionInfo {
  unsigned bits = 32;
  std::uint64_t offset = 0;   // in the file, a multiple of 4096
  std::uint64_t size = 0;     // shard_version_layout(shape, bits, outliers).total
  std::uint64_t checksum = 0; // XXH3-64 of the version's bytes
  std::vector<float> dictionary;  // 2^bits centroids; empty at 32 bits
  std::array<std::uint32_t, kShardMatrices> outliers{};  // per matrix, in ShardMatrix order
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

// A validated manifest: what ShardStore keeps in memory, and what ShardStoreWriter writes.
struct ShardStoreManifest {
  nlohmann::json config_json;  // the model's config.json object, verbatim
  BertConfig config;
  std::size_t shards_per_layer = 0;
  ShardShape shape;
  std::vector<unsigned> bits;  // strictly increasing
  nlohmann::json quantizer;    // opaque, as the converter wrote it
  ShardStoreSection vocab;
  struct WordTable {
    std::uint64_t offset = 0;  // row r at offset + r * cols * 4
    std::uint64_t rows = 0;    // vocab_size
    std::uint64_t cols = 0;    // hidden
    ShardStoreSection row_checksums;  // u32 per row: low 32 bits of XXH3-64 of the row's bytes
  } word;
  ShardStoreSection position;    // [max_position_embeddings x d] fp32
  ShardStoreSection token_type;  // [type_vocab_size x d] fp32
  ShardStoreSection ln;          // embedding LayerNorm: gamma [d] then beta [d], fp32
  struct Layer {
    ShardStoreSection resident;  // kLayerResidentParts x d fp32
    std::vector<std::vector<ShardVersionInfo>> shards;  // [shard][index of its bits in `bits`]
    nlohmann::json stats;        // opaque; null when the manifest has none
  };
  std::vector<Layer> layers;
};

// Where a store's bytes come from. read_at is positional and must be safe to call from several
// threads at once.
class ShardStoreSource {
 public:
  virtual ~ShardStoreSource() = default;
  // The size of the data when it was opened.
  virtual std::uint64_t size() const noexcept = 0;
  // Reads up to out.size() bytes at offset; returns how many were read, fewer only at the end of
  // the data. Throws std::system_error on an I/O error.
  virtual std::size_t read_at(std::uint64_t offset, std::span<std::byte> out) const = 0;
};

namespace shard_store_detail {


template <class... Parts>
[[noreturn]] void fail(std::string_view file, const Parts&... parts) {
  fail_in_file(file, parts...);
}

// The manifest's own structure nests 6 levels; the opaque "quantizer" and "stats" may nest a
// little. Deeper input is refused before it costs stack or memory.
inline constexpr int kMaxJsonDepth = 64;

// Byte offsets of the header's fields.
inline constexpr std::size_t kVersionAt = 8, kHeaderSizeAt = 12, kManifestOffsetAt = 16, kManifestSizeAt = 24,
                             kFileSizeAt = 32, kManifestChecksumAt = 40, kHeaderChecksumAt = 48,
                             kHeaderFieldsEnd = 56;

inline std::uint64_t xxh3(std::span<const std::byte> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}
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


inline std::string version_name(std::size_t layer, std::size_t shard, unsigned bits) {
  return concat("layer ", layer, " shard ", shard, " at ", bits, " bits");
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
  if (h.version != kShardStoreFormatVersion) {
    fail(file, "format version ", h.version, " is not supported (this reader supports version ",
         kShardStoreFormatVersion, h.version > kShardStoreFormatVersion ? "; the store was written by a newer stile)"
                                                                        : ")");
  }
  h.header_size = static_cast<std::uint32_t>(load_le(prefix.data() + kHeaderSizeAt, 4));
  if (h.header_size != kShardStoreHeaderBytes) {
    fail(file, "the header declares ", h.header_size, " bytes; format version 1 has a ", kShardStoreHeaderBytes,
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
    fail(file, "the manifest (", h.manifest_size, " bytes at byte ", h.manifest_offset,
         ") does not end the file (", file_size, " bytes)");
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


// Field readers: `where` says which part of the manifest is being read.
inline const nlohmann::json& member(const nlohmann::json& obj, const char* key, std::string_view where,
                                    const std::string& file) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(file, where, ": missing \"", key, "\"");
  return *it;
}

inline const nlohmann::json& object_member(const nlohmann::json& obj, const char* key, std::string_view where,
                                           const std::string& file) {
  const nlohmann::json& v = member(obj, key, where, file);
  if (!v.is_object()) fail(file, where, ": \"", key, "\" must be a JSON object, got ", json_excerpt(v));
  return v;
}

inline const nlohmann::json& array_member(const nlohmann::json& obj, const char* key, std::string_view where,
                                          const std::string& file) {
  const nlohmann::json& v = member(obj, key, where, file);
  if (!v.is_array()) fail(file, where, ": \"", key, "\" must be a JSON array, got ", json_excerpt(v));
  return v;
}

inline std::uint64_t u64_value(const nlohmann::json& v, std::string_view name, std::string_view where,
                               const std::string& file) {
  if (!v.is_number_unsigned()) fail(file, where, ": ", name, " must be a non-negative integer, got ", json_excerpt(v));
  return v.get<std::uint64_t>();
}

inline std::uint64_t u64_member(const nlohmann::json& obj, const char* key, std::string_view where,
                                const std::string& file) {
  return u64_value(member(obj, key, where, file), concat("\"", key, "\""), where, file);
}

inline std::uint64_t checksum_member(const nlohmann::json& obj, std::string_view where, const std::string& file) {
  const nlohmann::json& v = member(obj, "checksum", where, file);
  const std::optional<std::uint64_t> c =
      v.is_string() ? parse_hex64(v.get_ref<const std::string&>()) : std::nullopt;
  if (!c) fail(file, where, ": \"checksum\" must be 16 lowercase hex digits (XXH3-64), got ", json_excerpt(v));
  return *c;
}

inline ShardStoreSection section_value(const nlohmann::json& v, std::string_view where, const std::string& file) {
  if (!v.is_object()) fail(file, where, ": must be a JSON object {offset, size, checksum}, got ", json_excerpt(v));
  return {u64_member(v, "offset", where, file), u64_member(v, "size", where, file), checksum_member(v, where, file)};
}

// A byte range of the file found in the manifest, for the overlap check.
struct Extent {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::string what;
};

// Checks that [offset, offset + size) lies between the header and the manifest and starts aligned.
inline void check_range(std::uint64_t offset, std::uint64_t size, const std::string& what, std::string_view noun,
                        const ShardStoreHeader& h, const std::string& file, std::vector<Extent>& extents) {
  std::uint64_t end = 0;
  if (__builtin_add_overflow(offset, size, &end)) {
    fail(file, what, ": ", noun, " (", size, " bytes at byte ", offset, ") ends past the end of the file (",
         h.file_size, " bytes)");
  }
  if (end > h.file_size) {
    fail(file, what, ": ", noun, " ends at byte ", end, ", past the end of the file (", h.file_size, " bytes)");
  }
  if (offset < h.header_size) {
    fail(file, what, ": ", noun, " starts at byte ", offset, ", inside the ", h.header_size, "-byte header");
  }
  if (offset % kShardStoreAlign != 0) {
    fail(file, what, ": ", noun, " starts at byte ", offset, ", which is not a multiple of ", kShardStoreAlign);
  }
  if (end > h.manifest_offset) {
    fail(file, what, ": ", noun, " (bytes [", offset, ", ", end, ")) runs into the manifest, which starts at byte ",
         h.manifest_offset);
  }
  if (size != 0) extents.push_back({offset, end, what});
}

inline void check_size(std::uint64_t size, std::uint64_t expected, const std::string& what, std::string_view detail,
                       const std::string& file) {
  if (size != expected) {
    fail(file, what, ": the manifest says ", size, " bytes, the config needs ", expected, " (", detail, ")");
  }
}

inline void check_no_overlap(std::vector<Extent>& extents, const std::string& file) {
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  const Extent* furthest = nullptr;
  for (const Extent& e : extents) {
    if (furthest != nullptr && e.begin < furthest->end) {
      fail(file, furthest->what, " (bytes [", furthest->begin, ", ", furthest->end, ")) and ", e.what, " (bytes [",
           e.begin, ", ", e.end, ")) overlap");
    }
    if (furthest == nullptr || e.end > furthest->end) furthest = &e;
  }
}

inline ShardVersionInfo parse_version(const nlohmann::json& v, std::size_t layer, std::size_t shard, std::size_t index,
                                      const ShardStoreManifest& m, const ShardStoreHeader& h,
                                      const std::string& file, std::vector<Extent>& extents) {
  const unsigned expected_bits = m.bits[index];
  const std::string where = version_name(layer, shard, expected_bits);
  if (!v.is_object()) fail(file, where, ": the version entry is not a JSON object");
  const std::uint64_t bits = u64_member(v, "bits", where, file);
  if (bits != expected_bits) {
    fail(file, concat("layer ", layer, " shard ", shard), ": version ", index, " is at ", bits, " bits, expected ",
         expected_bits, " (one version per entry of \"bits\" ", bits_to_string(m.bits), ", in that order)");
  }
  ShardVersionInfo info;
  info.bits = expected_bits;
  info.offset = u64_member(v, "offset", where, file);
  info.size = u64_member(v, "size", where, file);
  info.checksum = checksum_member(v, where, file);

  const nlohmann::json& dict = array_member(v, "dictionary", where, file);
  const std::size_t centroids = expected_bits == 32 ? 0 : std::size_t{1} << expected_bits;
  if (dict.size() != centroids) {
    fail(file, where, ": the dictionary has ", dict.size(), " entries, expected ", centroids);
  }
  info.dictionary.reserve(centroids);
  for (const nlohmann::json& x : dict) {
    const float f = x.is_number() ? static_cast<float>(x.get<double>()) : std::numeric_limits<float>::quiet_NaN();
    if (!std::isfinite(f)) fail(file, where, ": dictionary entry ", json_excerpt(x), " is not a finite float");
    info.dictionary.push_back(f);
  }

  const nlohmann::json& outliers = array_member(v, "outliers", where, file);
  if (outliers.size() != kShardMatrices) {
    fail(file, where, ": \"outliers\" has ", outliers.size(), " counts, expected ", kShardMatrices,
         " (one per matrix)");
  }
  for (std::size_t i = 0; i < kShardMatrices; ++i) {
    const std::uint64_t count = u64_value(outliers[i], concat("outlier count ", i), where, file);
    const auto which = static_cast<ShardMatrix>(i);
    const std::uint64_t cells = std::uint64_t{m.shape.rows(which)} * m.shape.cols(which);
    if (count > cells || (expected_bits == 32 && count != 0)) {
      fail(file, where, ": impossible outlier count ", count, " for ", kShardMatrixNames[i], " (",
           m.shape.rows(which), " x ", m.shape.cols(which), expected_bits == 32 ? ", 32-bit versions have none)" : ")");
    }
    info.outliers[i] = static_cast<std::uint32_t>(count);
  }
  const std::size_t expected_size = shard_version_layout(m.shape, expected_bits, info.outliers).total;
  if (info.size != expected_size) {
    fail(file, where, ": the version is ", info.size, " bytes, its layout (shape, bits and outlier counts) needs ",
         expected_size);
  }
  check_range(info.offset, info.size, where, "the version", h, file, extents);
  return info;
}

// Validates a manifest against its header (offsets and sizes inside the file, the config, the
// shard layout). The manifest checksum is not checked here: ShardStore does that first; fuzzers
// call this directly to get past it.
inline ShardStoreManifest parse_manifest(std::string_view text, const ShardStoreHeader& h, const std::string& file) {
  const nlohmann::json root = parse_strict_json(text, kMaxJsonDepth, file, "the manifest");
  if (!root.is_object()) fail(file, "the manifest is not a JSON object");
  const std::string top = "manifest";

  const nlohmann::json& format = member(root, "format", top, file);
  if (!format.is_string() || format.get_ref<const std::string&>() != kShardStoreFormatName) {
    fail(file, "the manifest's \"format\" is ", json_excerpt(format), ", not \"", kShardStoreFormatName, "\"");
  }
  const std::uint64_t version = u64_member(root, "version", top, file);
  if (version != h.version) {
    fail(file, "the manifest says format version ", version, " but the header says ", h.version);
  }

  ShardStoreManifest m;
  m.config_json = object_member(root, "config", top, file);
  // The config must be one parse_bert_config accepts: every dimension present, positive and below
  // its limit (so no size computed from them overflows), heads dividing the hidden size.
  m.config = parse_bert_config(m.config_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                               concat(file, ": manifest \"config\""));
  const BertConfig& c = m.config;

  const std::uint64_t shards = u64_member(root, "shards_per_layer", top, file);
  if (shards == 0 || shards > c.num_heads || c.num_heads % shards != 0 || c.intermediate % shards != 0) {
    fail(file, "\"shards_per_layer\" is ", shards, ", which does not divide the model's ", c.num_heads,
         " attention heads and ", c.intermediate, " FFN neurons evenly");
  }
  m.shards_per_layer = static_cast<std::size_t>(shards);
  m.shape = ShardShape::of(c, m.shards_per_layer);

  const nlohmann::json& bits = array_member(root, "bits", top, file);
  if (bits.empty()) fail(file, "the manifest's \"bits\" is empty");
  for (const nlohmann::json& b : bits) {
    const std::uint64_t raw = b.is_number_unsigned() ? b.get<std::uint64_t>() : 0;
    if (raw > 32 || !quant::is_supported_bits(static_cast<unsigned>(raw))) {
      fail(file, "the manifest's \"bits\" holds ", json_excerpt(b), ", not a supported bitwidth (2..6 or 32)");
    }
    const auto value = static_cast<unsigned>(raw);
    if (!m.bits.empty() && value <= m.bits.back()) {
      fail(file, "the manifest's \"bits\" ", json_excerpt(bits), " is not strictly increasing");
    }
    m.bits.push_back(value);
  }
  const auto q = root.find("quantizer");
  if (q != root.end()) m.quantizer = *q;

  std::vector<Extent> extents;
  const std::uint64_t d = c.hidden;
  const std::uint64_t f32 = sizeof(float);

  m.vocab = section_value(member(root, "vocab", top, file), "manifest \"vocab\"", file);
  check_range(m.vocab.offset, m.vocab.size, "the vocabulary", "the section", h, file, extents);

  const nlohmann::json& emb = object_member(root, "embeddings", top, file);
  {
    const std::string where = "the word embeddings";
    const nlohmann::json& word = object_member(emb, "word", "manifest \"embeddings\"", file);
    m.word.offset = u64_member(word, "offset", where, file);
    m.word.rows = u64_member(word, "rows", where, file);
    m.word.cols = u64_member(word, "cols", where, file);
    if (m.word.rows != c.vocab_size || m.word.cols != d) {
      fail(file, where, ": the table is ", m.word.rows, " x ", m.word.cols, ", the config needs vocab_size x hidden_size = ",
           c.vocab_size, " x ", d);
    }
    check_range(m.word.offset, m.word.rows * m.word.cols * f32, where, "the table", h, file, extents);
    const std::string checks = "the word-embedding row checksums";
    m.word.row_checksums = section_value(member(word, "row_checksums", where, file), checks, file);
    check_size(m.word.row_checksums.size, m.word.rows * 4, checks, "one u32 per row", file);
    check_range(m.word.row_checksums.offset, m.word.row_checksums.size, checks, "the section", h, file, extents);
  }
  m.position = section_value(member(emb, "position", "manifest \"embeddings\"", file), "the position embeddings", file);
  check_size(m.position.size, c.max_position_embeddings * d * f32, "the position embeddings",
             "max_position_embeddings x hidden_size floats", file);
  check_range(m.position.offset, m.position.size, "the position embeddings", "the section", h, file, extents);
  m.token_type =
      section_value(member(emb, "token_type", "manifest \"embeddings\"", file), "the token-type embeddings", file);
  check_size(m.token_type.size, c.type_vocab_size * d * f32, "the token-type embeddings",
             "type_vocab_size x hidden_size floats", file);
  check_range(m.token_type.offset, m.token_type.size, "the token-type embeddings", "the section", h, file, extents);
  m.ln = section_value(member(emb, "ln", "manifest \"embeddings\"", file), "the embedding LayerNorm", file);
  check_size(m.ln.size, 2 * d * f32, "the embedding LayerNorm", "gamma and beta, hidden_size floats each", file);
  check_range(m.ln.offset, m.ln.size, "the embedding LayerNorm", "the section", h, file, extents);

  const nlohmann::json& layers = array_member(root, "layers", top, file);
  if (layers.size() != c.num_layers) {
    fail(file, "the manifest lists ", layers.size(), " layers, the config has num_hidden_layers = ", c.num_layers);
  }
  m.layers.reserve(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const nlohmann::json& lj = layers[l];
    const std::string where = concat("layer ", l);
    if (!lj.is_object()) fail(file, where, ": the layer entry is not a JSON object");
    ShardStoreManifest::Layer layer;
    const std::string resident = concat("layer ", l, " resident block");
    layer.resident = section_value(member(lj, "resident", where, file), resident, file);
    check_size(layer.resident.size, kLayerResidentParts * d * f32, resident, "6 x hidden_size floats", file);
    check_range(layer.resident.offset, layer.resident.size, resident, "the section", h, file, extents);
    const nlohmann::json& shard_list = array_member(lj, "shards", where, file);
    if (shard_list.size() != m.shards_per_layer) {
      fail(file, where, " lists ", shard_list.size(), " shards, \"shards_per_layer\" is ", m.shards_per_layer);
    }
    layer.shards.resize(m.shards_per_layer);
    for (std::size_t s = 0; s < shard_list.size(); ++s) {
      const std::string shard_where = concat("layer ", l, " shard ", s);
      if (!shard_list[s].is_object()) fail(file, shard_where, ": the shard entry is not a JSON object");
      const nlohmann::json& versions = array_member(shard_list[s], "versions", shard_where, file);
      if (versions.size() != m.bits.size()) {
        fail(file, shard_where, " has ", versions.size(), " versions, expected one per entry of \"bits\" ",
             bits_to_string(m.bits));
      }
      layer.shards[s].reserve(versions.size());
      for (std::size_t i = 0; i < versions.size(); ++i) {
        layer.shards[s].push_back(parse_version(versions[i], l, s, i, m, h, file, extents));
      }
    }
    const auto stats = lj.find("stats");
    if (stats != lj.end()) layer.stats = *stats;
    m.layers.push_back(std::move(layer));
  }
  check_no_overlap(extents, file);
  return m;
}

inline nlohmann::json section_json(const ShardStoreSection& s) {
  return {{"offset", s.offset}, {"size", s.size}, {"checksum", hex64(s.checksum)}};
}

// The manifest's JSON (the inverse of parse_manifest).
inline nlohmann::json manifest_json(const ShardStoreManifest& m, std::uint32_t version = kShardStoreFormatVersion) {
  nlohmann::json root = nlohmann::json::object();
  root["format"] = kShardStoreFormatName;
  root["version"] = version;
  root["config"] = m.config_json;
  root["shards_per_layer"] = m.shards_per_layer;
  root["bits"] = m.bits;
  root["quantizer"] = m.quantizer;
  root["vocab"] = section_json(m.vocab);
  root["embeddings"] = {
      {"word",
       {{"offset", m.word.offset}, {"rows", m.word.rows}, {"cols", m.word.cols},
        {"row_checksums", section_json(m.word.row_checksums)}}},
      {"position", section_json(m.position)},
      {"token_type", section_json(m.token_type)},
      {"ln", section_json(m.ln)}};
  nlohmann::json layers = nlohmann::json::array();
  for (const ShardStoreManifest::Layer& layer : m.layers) {
    nlohmann::json lj = nlohmann::json::object();
    lj["resident"] = section_json(layer.resident);
    nlohmann::json shards = nlohmann::json::array();
    for (const auto& versions : layer.shards) {
      nlohmann::json vs = nlohmann::json::array();
      for (const ShardVersionInfo& v : versions) {
        nlohmann::json dict = nlohmann::json::array();
        // float -> double is exact, and nlohmann writes doubles with round-trip precision, so the
        // centroids read back bit for bit.
        for (const float x : v.dictionary) dict.push_back(static_cast<double>(x));
        vs.push_back({{"bits", v.bits},
                      {"offset", v.offset},
                      {"size", v.size},
                      {"checksum", hex64(v.checksum)},
                      {"dictionary", std::move(dict)},
                      {"outliers", v.outliers}});
      }
      shards.push_back({{"versions", std::move(vs)}});
    }
    lj["shards"] = std::move(shards);
    if (!layer.stats.is_null()) lj["stats"] = layer.stats;
    layers.push_back(std::move(lj));
  }
  root["layers"] = std::move(layers);
  return root;
}

// pread on a file descriptor the source owns.
class FdSource final : public ShardStoreSource {
 public:
  FdSource(int fd, std::uint64_t size) noexcept : fd_(fd), size_(size) {}
  FdSource(const FdSource&) = delete;
  FdSource& operator=(const FdSource&) = delete;
  ~FdSource() override { ::close(fd_); }

  std::uint64_t size() const noexcept override { return size_; }
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> out) const override {
    std::size_t done = 0;
    while (done < out.size()) {
      if (offset + done > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) break;
      const std::size_t chunk = std::min<std::size_t>(out.size() - done, std::size_t{1} << 30);
      const ssize_t n = ::pread(fd_, out.data() + done, chunk, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::system_error(errno, std::system_category());
      }
      if (n == 0) break;  // end of file
      done += static_cast<std::size_t>(n);
    }
    return done;
  }

 private:
  int fd_;
  std::uint64_t size_;
};

// Bytes in memory (a copy the source owns).
class MemorySource final : public ShardStoreSource {
 public:
  explicit MemorySource(std::span<const std::byte> bytes) : bytes_(bytes.begin(), bytes.end()) {}
  std::uint64_t size() const noexcept override { return bytes_.size(); }
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> out) const override {
    if (offset >= bytes_.size()) return 0;
    const std::size_t n = std::min<std::size_t>(out.size(), bytes_.size() - static_cast<std::size_t>(offset));
    if (n != 0) std::memcpy(out.data(), bytes_.data() + offset, n);
    return n;
  }

 private:
  std::vector<std::byte> bytes_;
};

}  // namespace shard_store_detail

struct ShardStoreOptions {
  // Compare checksums (header, manifest, every section as it is read, every word row). Turning
  // this off is for fuzzing and for inspecting a damaged store: every offset and size is still
  // checked, so reads stay inside the file, but damaged bytes are not noticed.
  bool verify_checksums = true;
};

// One shard version read from the store: its bytes (4096-aligned), its dictionary, and the view
// the GEMM runs on (validated by ShardView::parse). Move-only; moving keeps the view valid.
class ShardBuffer {
 public:
  const ShardView& view() const noexcept { return view_; }
  std::span<const std::byte> bytes() const noexcept { return bytes_.span(); }
  std::span<const float> dictionary() const noexcept { return dictionary_; }
  unsigned bits() const noexcept { return view_.bits; }

 private:
  friend class ShardStore;
  ShardBuffer() = default;
  AlignedBuffer<std::byte, kShardStoreAlign> bytes_;
  std::vector<float> dictionary_;
  ShardView view_;
};

// A layer's resident block (fp32, d floats each).
struct LayerResident {
  std::vector<float> attn_out_bias, ln1_gamma, ln1_beta, ffn_out_bias, ln2_gamma, ln2_beta;
};

// The embedding tables that stay in memory (all but the word embeddings).
struct EmbeddingResident {
  std::vector<float> position;    // [max_position_embeddings x d]
  std::vector<float> token_type;  // [type_vocab_size x d]
  std::vector<float> ln_gamma;    // [d]
  std::vector<float> ln_beta;     // [d]
};

class ShardStore {
 public:
  // Opens and validates the store at path (read with pread through a file descriptor).
  static ShardStore open(const std::filesystem::path& path, ShardStoreOptions options = {}) {
    const std::string name = path.string();
    const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) shard_store_detail::fail(name, "cannot open: ", std::system_category().message(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      shard_store_detail::fail(name, "cannot stat: ", std::system_category().message(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      shard_store_detail::fail(name, "is not a regular file");
    }
    auto source = std::make_shared<shard_store_detail::FdSource>(fd, static_cast<std::uint64_t>(st.st_size));
    return ShardStore(std::move(source), name, options);
  }

  // The same reader over bytes in memory (copied); name stands in for the path in errors.
  static ShardStore from_memory(std::span<const std::byte> bytes, std::string name, ShardStoreOptions options = {}) {
    return ShardStore(std::make_shared<shard_store_detail::MemorySource>(bytes), std::move(name), options);
  }

  // Any other byte source (an io_uring or O_DIRECT backend).
  static ShardStore from_source(std::shared_ptr<const ShardStoreSource> source, std::string name,
                                ShardStoreOptions options = {}) {
    require(source != nullptr, "ShardStore::from_source: no source");
    return ShardStore(std::move(source), std::move(name), options);
  }

  const std::string& name() const noexcept { return name_; }
  std::uint64_t file_size() const noexcept { return header_.file_size; }
  const ShardStoreHeader& header() const noexcept { return header_; }
  const ShardStoreManifest& manifest() const noexcept { return m_; }

  const BertConfig& config() const noexcept { return m_.config; }
  const nlohmann::json& config_json() const noexcept { return m_.config_json; }
  std::size_t num_layers() const noexcept { return m_.layers.size(); }
  std::size_t shards_per_layer() const noexcept { return m_.shards_per_layer; }
  const ShardShape& shard_shape() const noexcept { return m_.shape; }
  const std::vector<unsigned>& bits() const noexcept { return m_.bits; }
  bool has_bits(unsigned bits) const noexcept { return std::find(m_.bits.begin(), m_.bits.end(), bits) != m_.bits.end(); }
  const nlohmann::json& quantizer() const noexcept { return m_.quantizer; }
  // The converter's statistics of a layer; null when it wrote none.
  const nlohmann::json& layer_stats(std::size_t layer) const { return m_.layers[check_layer(layer)].stats; }

  // The manifest's record of one shard version.
  const ShardVersionInfo& version_info(std::size_t layer, std::size_t shard, unsigned bits) const {
    check_layer(layer);
    if (shard >= m_.shards_per_layer) {
      shard_store_detail::fail(name_, "shard ", shard, " of layer ", layer, " does not exist (", m_.shards_per_layer,
                               " shards per layer)");
    }
    const auto it = std::find(m_.bits.begin(), m_.bits.end(), bits);
    if (it == m_.bits.end()) {
      shard_store_detail::fail(name_, shard_store_detail::version_name(layer, shard, bits),
                               ": the store has no versions at ", bits, " bits (it has ",
                               shard_store_detail::bits_to_string(m_.bits), ")");
    }
    return m_.layers[layer].shards[shard][static_cast<std::size_t>(it - m_.bits.begin())];
  }

  // The largest shard version, for sizing a working buffer for read_shard_into.
  std::uint64_t max_version_bytes() const noexcept {
    std::uint64_t most = 0;
    for (const auto& layer : m_.layers) {
      for (const auto& shard : layer.shards) {
        for (const ShardVersionInfo& v : shard) most = std::max(most, v.size);
      }
    }
    return most;
  }

  // Reads one shard version into its own 4096-aligned buffer, verifies its checksum and its inner
  // structure.
  ShardBuffer read_shard(std::size_t layer, std::size_t shard, unsigned bits) const {
    const ShardVersionInfo& info = version_info(layer, shard, bits);
    const std::string what = shard_store_detail::version_name(layer, shard, bits);
    ShardBuffer buffer;
    buffer.bytes_.resize(static_cast<std::size_t>(info.size));
    read_checked(info.offset, buffer.bytes_.span(), info.checksum, what);
    buffer.dictionary_ = info.dictionary;
    buffer.view_ = ShardView::parse(buffer.bytes_.span(), m_.shape, bits, buffer.dictionary_, info.outliers,
                                    concat(name_, ": ", what));
    return buffer;
  }

  // Reads one shard version into the caller's buffer (at least version_info(...).size bytes,
  // 64-byte aligned), verifies it and returns its view. The view points into `out` and into this
  // store's copy of the dictionary: it is valid while both live.
  ShardView read_shard_into(std::size_t layer, std::size_t shard, unsigned bits, std::span<std::byte> out) const {
    const ShardVersionInfo& info = version_info(layer, shard, bits);
    const std::string what = shard_store_detail::version_name(layer, shard, bits);
    if (out.size() < info.size) {
      shard_store_detail::fail(name_, what, ": the buffer holds ", out.size(), " bytes, the version needs ", info.size);
    }
    if (reinterpret_cast<std::uintptr_t>(out.data()) % kShardSectionAlign != 0) {
      shard_store_detail::fail(name_, what, ": the buffer is not ", kShardSectionAlign, "-byte aligned");
    }
    const std::span<std::byte> bytes = out.first(static_cast<std::size_t>(info.size));
    read_exact(info.offset, bytes, what);
    return view_version(layer, shard, bits, bytes);
  }

  // The view of one shard version whose bytes the caller read itself (the pipeline's read
  // backends): checks their checksum (when checking is on) and inner structure. bytes.size() must
  // be version_info(...).size; the view points into `bytes` and this store's dictionary copy.
  ShardView view_version(std::size_t layer, std::size_t shard, unsigned bits, std::span<const std::byte> bytes) const {
    const ShardVersionInfo& info = version_info(layer, shard, bits);
    const std::string what = shard_store_detail::version_name(layer, shard, bits);
    if (bytes.size() != info.size) {
      shard_store_detail::fail(name_, what, ": ", bytes.size(), " bytes given, the version has ", info.size);
    }
    check_sum(bytes, info.checksum, what);
    return ShardView::parse(bytes, m_.shape, bits, info.dictionary, info.outliers,
                            concat(name_, ": ", what));
  }

  LayerResident read_resident(std::size_t layer) const {
    check_layer(layer);
    const ShardStoreSection& s = m_.layers[layer].resident;
    std::vector<float> all(static_cast<std::size_t>(s.size / sizeof(float)));
    read_checked(s.offset, std::as_writable_bytes(std::span(all)), s.checksum,
                 concat("layer ", layer, " resident block"));
    const std::size_t d = m_.config.hidden;
    auto part = [&](std::size_t i) {
      return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(i * d),
                                all.begin() + static_cast<std::ptrdiff_t>((i + 1) * d));
    };
    return {part(0), part(1), part(2), part(3), part(4), part(5)};
  }

  EmbeddingResident read_embeddings() const {
    EmbeddingResident e;
    e.position = read_floats(m_.position, "the position embeddings");
    e.token_type = read_floats(m_.token_type, "the token-type embeddings");
    const std::vector<float> ln = read_floats(m_.ln, "the embedding LayerNorm");
    const auto d = static_cast<std::ptrdiff_t>(m_.config.hidden);
    e.ln_gamma.assign(ln.begin(), ln.begin() + d);
    e.ln_beta.assign(ln.begin() + d, ln.end());
    return e;
  }

  // The vocabulary (vocab.txt's content).
  std::string read_vocab() const {
    std::string text(static_cast<std::size_t>(m_.vocab.size), '\0');
    read_checked(m_.vocab.offset, std::as_writable_bytes(std::span(text)), m_.vocab.checksum, "the vocabulary");
    return text;
  }

  // Reads the word-embedding rows of ids into out ([ids.size() x hidden] floats), one pread per
  // row, each checked against the row checksum table.
  void read_word_rows(std::span<const std::int32_t> ids, float* out) const {
    check_word_ids(ids);
    const std::size_t d = m_.config.hidden;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto id = static_cast<std::size_t>(ids[i]);
      const std::span<std::byte> row = std::as_writable_bytes(std::span(out + i * d, d));
      read_exact(word_row_offset(id), row, concat("word-embedding row ", id));
      check_word_row(id, row);
    }
  }

  // For readers that fetch word rows themselves: every id must be a row of the table.
  void check_word_ids(std::span<const std::int32_t> ids) const {
    const std::uint64_t rows = m_.word.rows;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || static_cast<std::uint64_t>(ids[i]) >= rows) {
        shard_store_detail::fail(name_, "word embeddings: token id ", ids[i], " (at position ", i,
                                 ") is outside the vocabulary of ", rows, " rows");
      }
    }
  }
  // Where row `id` (hidden floats) starts in the file; id must have passed check_word_ids.
  std::uint64_t word_row_offset(std::size_t id) const noexcept {
    return m_.word.offset + static_cast<std::uint64_t>(id) * m_.config.hidden * sizeof(float);
  }
  // Compares a row's bytes with the row checksum table (when checking is on).
  void check_word_row(std::size_t id, std::span<const std::byte> row) const {
    if (!options_.verify_checksums) return;
    const std::uint32_t expected = row_checksums_[id];
    const std::uint32_t actual = shard_store_detail::row_checksum(row);
    if (actual != expected) {
      shard_store_detail::fail(name_, "word-embedding row ", id, ": checksum mismatch (the table says ", expected,
                               ", the row hashes to ", actual, "): the file is damaged");
    }
  }

  // Bytes this reader keeps in memory: the manifest's metadata (dictionaries, offsets, the config,
  // quantizer and stats JSON, estimated by their text size) and the row checksum table. The word
  // table, shard versions and residents stay on disk until read. (A from_memory store's own copy
  // of the bytes is not counted.)
  std::size_t resident_bytes() const {
    std::size_t bytes = sizeof(*this) + row_checksums_.capacity() * sizeof(std::uint32_t) +
                        m_.bits.capacity() * sizeof(unsigned) + name_.capacity();
    auto json_bytes = [](const nlohmann::json& j) { return j.is_null() ? 0 : j.dump().size(); };
    bytes += json_bytes(m_.config_json) + json_bytes(m_.quantizer);
    for (const auto& layer : m_.layers) {
      bytes += sizeof(layer) + json_bytes(layer.stats) + layer.shards.capacity() * sizeof(layer.shards[0]);
      for (const auto& shard : layer.shards) {
        bytes += shard.capacity() * sizeof(ShardVersionInfo);
        for (const ShardVersionInfo& v : shard) bytes += v.dictionary.capacity() * sizeof(float);
      }
    }
    return bytes;
  }

 private:
  ShardStore(std::shared_ptr<const ShardStoreSource> source, std::string name, ShardStoreOptions options)
      : source_(std::move(source)), name_(std::move(name)), options_(options) {
    using namespace shard_store_detail;
    const std::uint64_t size = source_->size();
    std::vector<std::byte> prefix(static_cast<std::size_t>(std::min<std::uint64_t>(size, kShardStoreHeaderBytes)));
    read_exact(0, prefix, "the header");
    header_ = parse_header(prefix, size, name_, options_.verify_checksums);
    std::string manifest(static_cast<std::size_t>(header_.manifest_size), '\0');
    read_exact(header_.manifest_offset, std::as_writable_bytes(std::span(manifest)), "the manifest");
    if (options_.verify_checksums) {
      const std::uint64_t actual = xxh3(std::as_bytes(std::span(manifest)));
      if (actual != header_.manifest_checksum) {
        fail(name_, "manifest checksum mismatch (the header says ", hex64(header_.manifest_checksum),
             ", the manifest hashes to ", hex64(actual), "): the file is damaged");
      }
    }
    m_ = parse_manifest(manifest, header_, name_);
    row_checksums_.resize(static_cast<std::size_t>(m_.word.rows));
    read_checked(m_.word.row_checksums.offset, std::as_writable_bytes(std::span(row_checksums_)),
                 m_.word.row_checksums.checksum, "the word-embedding row checksums");
  }

  std::size_t check_layer(std::size_t layer) const {
    if (layer >= m_.layers.size()) {
      shard_store_detail::fail(name_, "layer ", layer, " does not exist (the store has ", m_.layers.size(), " layers)");
    }
    return layer;
  }

  void read_exact(std::uint64_t offset, std::span<std::byte> out, std::string_view what) const {
    std::size_t got = 0;
    try {
      got = source_->read_at(offset, out);
    } catch (const std::system_error& e) {
      shard_store_detail::fail(name_, "reading ", what, ": ", e.code().message());
    }
    if (got != out.size()) {
      shard_store_detail::fail(name_, "reading ", what, ": got only ", got, " of the ", out.size(),
                               " bytes at byte ", offset, ": the file ended early (truncated after it was opened?)");
    }
  }

  void read_checked(std::uint64_t offset, std::span<std::byte> out, std::uint64_t checksum,
                    std::string_view what) const {
    read_exact(offset, out, what);
    check_sum(out, checksum, what);
  }

  void check_sum(std::span<const std::byte> bytes, std::uint64_t checksum, std::string_view what) const {
    if (!options_.verify_checksums) return;
    const std::uint64_t actual = shard_store_detail::xxh3(bytes);
    if (actual != checksum) {
      shard_store_detail::fail(name_, what, ": checksum mismatch (the manifest says ", shard_store_detail::hex64(checksum),
                               ", the bytes hash to ", shard_store_detail::hex64(actual), "): the file is damaged");
    }
  }

  std::vector<float> read_floats(const ShardStoreSection& s, std::string_view what) const {
    std::vector<float> v(static_cast<std::size_t>(s.size / sizeof(float)));
    read_checked(s.offset, std::as_writable_bytes(std::span(v)), s.checksum, what);
    return v;
  }

  std::shared_ptr<const ShardStoreSource> source_;
  std::string name_;
  ShardStoreOptions options_;
  ShardStoreHeader header_;
  ShardStoreManifest m_;
  std::vector<std::uint32_t> row_checksums_;
};

// The bytes of one shard version handed to the writer: either a view of the caller's bytes (which
// must stay alive until add_layer returns) or bytes the blob owns (an AlignedBuffer or a vector
// moved in). Copies share the owned bytes.
class ShardBlob {
 public:
  ShardBlob() = default;
  ShardBlob(std::span<const std::byte> view) noexcept : bytes_(view) {}  // NOLINT: implicit on purpose
  template <std::size_t Alignment>
  ShardBlob(AlignedBuffer<std::byte, Alignment>&& owned)  // NOLINT
      : owner_(std::make_shared<AlignedBuffer<std::byte, Alignment>>(std::move(owned))) {
    bytes_ = static_cast<const AlignedBuffer<std::byte, Alignment>*>(owner_.get())->span();
  }
  ShardBlob(std::vector<std::byte>&& owned)  // NOLINT
      : owner_(std::make_shared<std::vector<std::byte>>(std::move(owned))) {
    bytes_ = *static_cast<const std::vector<std::byte>*>(owner_.get());
  }
  std::span<const std::byte> bytes() const noexcept { return bytes_; }

 private:
  std::shared_ptr<const void> owner_;
  std::span<const std::byte> bytes_;
};

// Streams a shard store to `path`: the constructor creates a temporary file beside it, the add_*
// calls append sections (vocabulary and embeddings once each, then the layers in order), finish()
// writes the manifest and header and renames the file into place. If finish() is never reached, or
// anything throws, the temporary file is removed and `path` is left untouched; after an error the
// writer refuses further calls.
class ShardStoreWriter {
 public:
  struct Version {
    unsigned bits = 32;
    ShardBlob blob;                  // exactly shard_version_layout(shape, bits, outliers).total bytes
    std::vector<float> dictionary;   // 2^bits finite centroids; empty at 32 bits
    std::array<std::uint32_t, kShardMatrices> outliers{};
  };

  // config_json: the model's config.json text (kept verbatim in the manifest); bits: strictly
  // increasing supported bitwidths, one version of every shard at each; quantizer: kept as is.
  ShardStoreWriter(std::filesystem::path path, std::string_view config_json, std::size_t shards_per_layer,
                   std::vector<unsigned> bits, nlohmann::json quantizer = nlohmann::json::object())
      : path_(std::move(path)), name_(path_.string()) {
    using shard_store_detail::fail;
    try {
      m_.config = parse_bert_config(config_json, concat(name_, ": config.json"));
      m_.config_json = nlohmann::json::parse(config_json.begin(), config_json.end());
    } catch (const nlohmann::json::exception& e) {
      fail(name_, "config.json: ", e.what());
    }
    const BertConfig& c = m_.config;
    if (shards_per_layer == 0 || c.num_heads % shards_per_layer != 0 || c.intermediate % shards_per_layer != 0) {
      fail(name_, shards_per_layer, " shards per layer do not divide the model's ", c.num_heads,
           " attention heads and ", c.intermediate, " FFN neurons evenly");
    }
    m_.shards_per_layer = shards_per_layer;
    m_.shape = ShardShape::of(c, shards_per_layer);
    if (bits.empty()) fail(name_, "no bitwidths given");
    for (std::size_t i = 0; i < bits.size(); ++i) {
      if (!quant::is_supported_bits(bits[i])) fail(name_, bits[i], " bits is not supported (2..6 or 32)");
      if (i > 0 && bits[i] <= bits[i - 1]) {
        fail(name_, "the bitwidths ", shard_store_detail::bits_to_string(bits), " are not strictly increasing");
      }
    }
    m_.bits = std::move(bits);
    m_.quantizer = std::move(quantizer);
    create_temp();
    try {
      const std::vector<std::byte> zeros(kShardStoreHeaderBytes, std::byte{0});  // the header, written last
      write(zeros);
    } catch (...) {
      abandon();
      throw;
    }
  }

  ShardStoreWriter(const ShardStoreWriter&) = delete;
  ShardStoreWriter& operator=(const ShardStoreWriter&) = delete;
  ~ShardStoreWriter() { abandon(); }

  // The temporary file being written (empty once finished or abandoned).
  const std::filesystem::path& temp_path() const noexcept { return temp_path_; }
  std::size_t layers_written() const noexcept { return m_.layers.size(); }

  void add_vocab(std::string_view text) {
    guarded([&] {
      if (have_vocab_) fail("add_vocab was called twice");
      m_.vocab = write_section(std::as_bytes(std::span(text.data(), text.size())));
      have_vocab_ = true;
    });
  }

  // word [vocab_size x d], position [max_position_embeddings x d], token_type [type_vocab_size x
  // d], ln_gamma and ln_beta [d], row-major fp32.
  void add_embeddings(std::span<const float> word, std::span<const float> position, std::span<const float> token_type,
                      std::span<const float> ln_gamma, std::span<const float> ln_beta) {
    guarded([&] {
      if (have_embeddings_) fail("add_embeddings was called twice");
      const BertConfig& c = m_.config;
      const std::size_t d = c.hidden;
      check_count(word.size(), c.vocab_size * d, "the word embeddings", "vocab_size x hidden_size");
      check_count(position.size(), c.max_position_embeddings * d, "the position embeddings",
                  "max_position_embeddings x hidden_size");
      check_count(token_type.size(), c.type_vocab_size * d, "the token-type embeddings",
                  "type_vocab_size x hidden_size");
      check_count(ln_gamma.size(), d, "the embedding LayerNorm gamma", "hidden_size");
      check_count(ln_beta.size(), d, "the embedding LayerNorm beta", "hidden_size");

      std::vector<std::uint32_t> row_checksums(c.vocab_size);
      for (std::size_t r = 0; r < c.vocab_size; ++r) {
        row_checksums[r] = shard_store_detail::row_checksum(std::as_bytes(word.subspan(r * d, d)));
      }
      const ShardStoreSection table = write_section(std::as_bytes(word));
      m_.word.offset = table.offset;
      m_.word.rows = c.vocab_size;
      m_.word.cols = d;
      m_.word.row_checksums = write_section(std::as_bytes(std::span<const std::uint32_t>(row_checksums)));
      m_.position = write_section(std::as_bytes(position));
      m_.token_type = write_section(std::as_bytes(token_type));
      std::vector<float> ln(ln_gamma.begin(), ln_gamma.end());
      ln.insert(ln.end(), ln_beta.begin(), ln_beta.end());
      m_.ln = write_section(std::as_bytes(std::span<const float>(ln)));
      have_embeddings_ = true;
    });
  }

  // The next layer: its resident block (attention-output bias, LN1 gamma, LN1 beta, FFN2 bias, LN2
  // gamma, LN2 beta; d floats each), for each of the M shards its versions (one per bitwidth, in
  // the order of the store's bits), and optional statistics kept in the manifest.
  void add_layer(const std::array<std::span<const float>, kLayerResidentParts>& resident,
                 std::span<const std::vector<Version>> shards, const nlohmann::json& stats = nullptr) {
    guarded([&] { add_layer_impl(resident, shards, stats); });
  }
  template <class Vector>
    requires std::convertible_to<const Vector&, std::span<const float>>
  void add_layer(const std::array<Vector, kLayerResidentParts>& resident, std::span<const std::vector<Version>> shards,
                 const nlohmann::json& stats = nullptr) {
    std::array<std::span<const float>, kLayerResidentParts> spans;
    for (std::size_t i = 0; i < kLayerResidentParts; ++i) spans[i] = resident[i];
    add_layer(spans, shards, stats);
  }

  // Writes the manifest and the header, flushes, and renames the file to the destination.
  void finish() {
    guarded([&] {
      if (!have_vocab_) fail("finish: add_vocab was never called");
      if (!have_embeddings_) fail("finish: add_embeddings was never called");
      if (m_.layers.size() != m_.config.num_layers) {
        fail("finish: ", m_.layers.size(), " of the model's ", m_.config.num_layers, " layers were added");
      }
      std::string manifest;
      try {
        manifest = shard_store_detail::manifest_json(m_).dump();
      } catch (const nlohmann::json::exception& e) {
        fail("cannot write the manifest: ", e.what());
      }
      pad();
      ShardStoreHeader h;
      h.manifest_offset = pos_;
      h.manifest_size = manifest.size();
      h.manifest_checksum = shard_store_detail::xxh3(std::as_bytes(std::span(manifest)));
      write(std::as_bytes(std::span(manifest)));
      h.file_size = pos_;
      const std::vector<std::byte> header = shard_store_detail::encode_header(h);
      pwrite_all(header, 0);
      if (::fsync(fd_) != 0) fail("cannot flush the temporary file ", temp_path_.string(), ": ", errno_text());
      const int fd = std::exchange(fd_, -1);
      if (::close(fd) != 0) fail("cannot close the temporary file ", temp_path_.string(), ": ", errno_text());
      if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
        fail("cannot rename the temporary file ", temp_path_.string(), " into place: ", errno_text());
      }
      temp_path_.clear();
      finished_ = true;
      // Make the rename itself durable (best effort: some file systems refuse fsync on a directory).
      const int dir = ::open(directory().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dir >= 0) {
        (void)::fsync(dir);
        ::close(dir);
      }
    });
  }

 private:
  using Section = ShardStoreSection;

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    fail_in_file(name_, parts...);
  }
  static std::string errno_text() { return std::system_category().message(errno); }

  std::filesystem::path directory() const {
    const std::filesystem::path dir = path_.parent_path();
    return dir.empty() ? std::filesystem::path(".") : dir;
  }

  void create_temp() {
    std::string leaf = ".";  // appended, not "." + ...: GCC 12's false -Wrestrict (file_error.hpp)
    leaf += path_.filename().string();
    leaf += ".tmp-XXXXXX";
    std::string tmpl = (directory() / leaf).string();
    const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd < 0) fail("cannot create a temporary file beside it (", tmpl, "): ", errno_text());
    fd_ = fd;
    temp_path_ = tmpl;
    ::fchmod(fd_, 0644);  // mkostemp creates 0600; a model file is for everyone to read
  }

  // Closes and removes the temporary file (idempotent; never throws).
  void abandon() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (!temp_path_.empty()) {
      ::unlink(temp_path_.c_str());
      temp_path_.clear();
    }
  }

  // Runs a public call; any error abandons the store.
  template <class F>
  void guarded(F&& body) {
    if (finished_) fail("the store was already finished");
    if (fd_ < 0) fail("an earlier error abandoned this store; nothing more can be added");
    try {
      body();
    } catch (const nlohmann::json::exception& e) {
      abandon();
      fail(e.what());
    } catch (...) {
      abandon();
      throw;
    }
  }

  void write(std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write the temporary file ", temp_path_.string(), ": ", errno_text());
      }
      done += static_cast<std::size_t>(n);
    }
    pos_ += bytes.size();
  }

  void pwrite_all(std::span<const std::byte> bytes, std::uint64_t offset) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write the temporary file ", temp_path_.string(), ": ", errno_text());
      }
      done += static_cast<std::size_t>(n);
    }
  }

  // Zeros up to the next multiple of 4096.
  void pad() {
    static const std::array<std::byte, kShardStoreAlign> kZeros{};
    const std::uint64_t target = shard_store_detail::align_up(pos_);
    write(std::span(kZeros).first(static_cast<std::size_t>(target - pos_)));
  }

  Section write_section(std::span<const std::byte> bytes) {
    pad();
    Section s{pos_, bytes.size(), shard_store_detail::xxh3(bytes)};
    write(bytes);
    return s;
  }

  void check_count(std::size_t got, std::size_t expected, const char* what, const char* shape) const {
    if (got != expected) fail(what, ": ", got, " floats given, the config needs ", shape, " = ", expected);
  }

  void check_version(const Version& v, std::size_t layer, std::size_t shard, std::size_t index) const {
    const unsigned want = m_.bits[index];
    if (v.bits != want) {
      fail("layer ", layer, " shard ", shard, ": version ", index, " is at ", v.bits, " bits, expected ", want,
           " (one version per bitwidth, in the order ", shard_store_detail::bits_to_string(m_.bits), ")");
    }
    const std::string what = shard_store_detail::version_name(layer, shard, want);
    const std::size_t centroids = want == 32 ? 0 : std::size_t{1} << want;
    if (v.dictionary.size() != centroids) {
      fail(what, ": the dictionary has ", v.dictionary.size(), " entries, expected ", centroids);
    }
    for (const float x : v.dictionary) {
      if (!std::isfinite(x)) fail(what, ": the dictionary holds a value that is not finite");
    }
    for (std::size_t i = 0; i < kShardMatrices; ++i) {
      const auto which = static_cast<ShardMatrix>(i);
      if (std::uint64_t{v.outliers[i]} > std::uint64_t{m_.shape.rows(which)} * m_.shape.cols(which) ||
          (want == 32 && v.outliers[i] != 0)) {
        fail(what, ": impossible outlier count ", v.outliers[i], " for ", kShardMatrixNames[i]);
      }
    }
    const std::size_t total = shard_version_layout(m_.shape, want, v.outliers).total;
    const std::span<const std::byte> bytes = v.blob.bytes();
    if (bytes.size() != total) fail(what, ": the blob is ", bytes.size(), " bytes, its layout needs ", total);
    // The inner structure (outlier keys ascending and in range), as the reader will check it.
    const std::string parse_what = concat(name_, ": ", what);
    if (reinterpret_cast<std::uintptr_t>(bytes.data()) % kShardSectionAlign == 0) {
      (void)ShardView::parse(bytes, m_.shape, want, v.dictionary, v.outliers, parse_what);
    } else {
      AlignedBuffer<std::byte> aligned(bytes.size());
      std::memcpy(aligned.data(), bytes.data(), bytes.size());
      (void)ShardView::parse(aligned.span(), m_.shape, want, v.dictionary, v.outliers, parse_what);
    }
  }

  void add_layer_impl(const std::array<std::span<const float>, kLayerResidentParts>& resident,
                      std::span<const std::vector<Version>> shards, const nlohmann::json& stats) {
    const std::size_t layer = m_.layers.size();
    if (layer >= m_.config.num_layers) {
      fail("add_layer: the model has ", m_.config.num_layers, " layers, all already added");
    }
    const std::size_t d = m_.config.hidden;
    for (std::size_t i = 0; i < kLayerResidentParts; ++i) {
      if (resident[i].size() != d) {
        fail("layer ", layer, " resident ", kLayerResidentNames[i], ": ", resident[i].size(),
             " floats given, hidden_size is ", d);
      }
    }
    if (shards.size() != m_.shards_per_layer) {
      fail("layer ", layer, ": ", shards.size(), " shards given, the store has ", m_.shards_per_layer, " per layer");
    }
    for (std::size_t s = 0; s < shards.size(); ++s) {
      if (shards[s].size() != m_.bits.size()) {
        fail("layer ", layer, " shard ", s, ": ", shards[s].size(), " versions given, expected one per bitwidth ",
             shard_store_detail::bits_to_string(m_.bits));
      }
      for (std::size_t i = 0; i < shards[s].size(); ++i) check_version(shards[s][i], layer, s, i);
    }
    // Everything is valid: write the layer's versions grouped by bitwidth (every shard at the
    // lowest bitwidth, shard order, then every shard at the next), then its resident block. A
    // layer streamed at one bitwidth is then one contiguous read (one request's latency instead
    // of one per shard: 0.3 ms each on eMMC).
    ShardStoreManifest::Layer entry;
    entry.shards.resize(shards.size(), std::vector<ShardVersionInfo>(m_.bits.size()));
    for (std::size_t i = 0; i < m_.bits.size(); ++i) {
      for (std::size_t s = 0; s < shards.size(); ++s) {
        const Version& v = shards[s][i];
        const Section sec = write_section(v.blob.bytes());
        entry.shards[s][i] = ShardVersionInfo{v.bits, sec.offset, sec.size, sec.checksum, v.dictionary, v.outliers};
      }
    }
    std::vector<float> block;
    block.reserve(kLayerResidentParts * d);
    for (const auto& part : resident) block.insert(block.end(), part.begin(), part.end());
    entry.resident = write_section(std::as_bytes(std::span<const float>(block)));
    entry.stats = stats;
    m_.layers.push_back(std::move(entry));
  }

  std::filesystem::path path_;
  std::string name_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  std::uint64_t pos_ = 0;
  bool have_vocab_ = false;
  bool have_embeddings_ = false;
  bool finished_ = false;
  ShardStoreManifest m_;
};

}  // namespace stile
