#pragma once
// The shard store's reader (the format: store/format.hpp, store/manifest.hpp, docs/format.md).
// ShardStore::open() validates the whole header and manifest (checksums, every section inside the
// file, aligned and not overlapping, every size against the config and the shard layout) before
// anything is handed out; each read then verifies the checksum of what it read. Every failure is
// a stile::Error "stile: <file>: <problem>"; per-version problems name "layer L shard S at B bits".
//
// Reads go through a ShardStoreSource (pread on a file descriptor, through io/read_backend.hpp's
// pread_fully, or bytes in memory), the one place a later io_uring / O_DIRECT backend plugs in.
// All reads are positional, so a ShardStore may be read from several threads at once. The writer
// is store/shard_writer.hpp.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/quant/lowrank_table.hpp"
#include "stile/store/format.hpp"
#include "stile/store/manifest.hpp"
#include "stile/store/shard_layout.hpp"
#include "stile/store/shard_view.hpp"

namespace stile {

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

// pread (pread_fully) on a file descriptor the source owns.
class FdSource final : public ShardStoreSource {
 public:
  FdSource(int fd, std::uint64_t size) noexcept : fd_(fd), size_(size) {}
  FdSource(const FdSource&) = delete;
  FdSource& operator=(const FdSource&) = delete;
  ~FdSource() override { ::close(fd_); }

  std::uint64_t size() const noexcept override { return size_; }
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> out) const override {
    return pread_fully(fd_, offset, out);
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

  const EncoderConfig& config() const noexcept { return m_.config; }
  const nlohmann::json& config_json() const noexcept { return m_.config_json; }
  std::size_t num_layers() const noexcept { return m_.layers.size(); }
  std::size_t shards_per_layer() const noexcept { return m_.shards_per_layer; }
  const ShardShape& shard_shape() const noexcept { return m_.shape; }
  const std::vector<unsigned>& bits() const noexcept { return m_.bits; }
  bool has_bits(unsigned bits) const noexcept {
    return std::find(m_.bits.begin(), m_.bits.end(), bits) != m_.bits.end();
  }
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
      shard_store_detail::fail(name_, shard_version_name(layer, shard, bits), ": the store has no versions at ", bits,
                               " bits (it has ", shard_store_detail::bits_to_string(m_.bits), ")");
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
    const std::string what = shard_version_name(layer, shard, bits);
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
    const std::string what = shard_version_name(layer, shard, bits);
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
    const std::string what = shard_version_name(layer, shard, bits);
    if (bytes.size() != info.size) {
      shard_store_detail::fail(name_, what, ": ", bytes.size(), " bytes given, the version has ", info.size);
    }
    check_sum(bytes, info.checksum, what);
    return ShardView::parse(bytes, m_.shape, bits, info.dictionary, info.outliers, concat(name_, ": ", what));
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
  // row, each checked against the row checksum table (and reconstructed, for a low-rank table).
  void read_word_rows(std::span<const std::int32_t> ids, float* out) const {
    check_word_ids(ids);
    const std::size_t d = m_.config.hidden;
    std::vector<std::byte> stored;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto id = static_cast<std::size_t>(ids[i]);
      const WordRowExtent e = word_row_extent(id);
      stored.resize(e.size);
      read_exact(e.offset, stored, concat("word-embedding row ", id));
      check_word_row(id, stored);
      decode_word_row(id, stored, out + i * d);
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

  // Where the stored bytes of row `id` are: 4 hidden bytes of fp32 in a dense table; the token's
  // coded U row (word_row_bytes(codec, rank)) in a low-rank one. id must have passed check_word_ids.
  struct WordRowExtent {
    std::uint64_t offset = 0;
    std::size_t size = 0;
  };
  WordRowExtent word_row_extent(std::size_t id) const noexcept {
    if (!m_.word.lowrank) {
      const std::size_t row_bytes = m_.config.hidden * sizeof(float);
      return {m_.word.offset + static_cast<std::uint64_t>(id) * row_bytes, row_bytes};
    }
    const std::uint32_t entry = token_map_[id];
    const ShardStoreManifest::WordCluster& cl = m_.word.clusters[entry >> shard_store_detail::kTokenMapIndexBits];
    const std::uint64_t index = entry & ((std::uint32_t{1} << shard_store_detail::kTokenMapIndexBits) - 1);
    return {cl.u_offset + index * cl.row_bytes(), static_cast<std::size_t>(cl.row_bytes())};
  }
  // The largest stored row (what one row's read needs at most).
  std::size_t max_word_row_bytes() const noexcept {
    if (!m_.word.lowrank) return m_.config.hidden * sizeof(float);
    std::uint64_t most = 0;
    for (const auto& cl : m_.word.clusters) most = std::max(most, cl.row_bytes());
    return static_cast<std::size_t>(most);
  }
  bool word_table_lowrank() const noexcept { return m_.word.lowrank; }
  // The word table as stored: bytes (dense rows, or coded U rows plus V) and parameters.
  std::uint64_t word_table_bytes() const noexcept {
    if (!m_.word.lowrank) return m_.word.rows * m_.word.cols * sizeof(float);
    std::uint64_t bytes = 0;
    for (const auto& cl : m_.word.clusters) bytes += cl.rows * cl.row_bytes() + cl.v.size;
    return bytes;
  }
  std::uint64_t word_table_params() const noexcept {
    if (!m_.word.lowrank) return m_.word.rows * m_.word.cols;
    std::uint64_t params = 0;
    for (const auto& cl : m_.word.clusters) params += cl.rows * cl.rank + cl.v.size / sizeof(float);
    return params;
  }

  // Compares a row's stored bytes with the row checksum table (when checking is on).
  void check_word_row(std::size_t id, std::span<const std::byte> row) const {
    if (!options_.verify_checksums) return;
    const std::uint32_t expected = row_checksums_[id];
    const std::uint32_t actual = shard_store_detail::row_checksum(row);
    if (actual != expected) {
      shard_store_detail::fail(name_, "word-embedding row ", id, ": checksum mismatch (the table says ", expected,
                               ", the row hashes to ", actual, "): the file is damaged");
    }
  }

  // The word row of `id` (hidden floats) from its stored bytes (word_row_extent(id).size of them):
  // a copy for a dense table or a full cluster; for a low-rank cluster the coded U row decoded and
  // multiplied by the cluster's V (resident), one GEMV of rank x hidden.
  void decode_word_row(std::size_t id, std::span<const std::byte> stored, float* out) const {
    const std::size_t d = m_.config.hidden;
    if (!m_.word.lowrank) {
      std::memcpy(out, stored.data(), d * sizeof(float));
      return;
    }
    const std::size_t cluster = token_map_[id] >> shard_store_detail::kTokenMapIndexBits;
    const ShardStoreManifest::WordCluster& cl = m_.word.clusters[cluster];
    const auto rank = static_cast<std::size_t>(cl.rank);
    if (rank == d) {
      quant::decode_word_row(cl.codec, stored, std::span(out, d));
      return;
    }
    float u[kMaxStackRank];
    std::vector<float> heap;
    float* up = u;
    if (rank > kMaxStackRank) {
      heap.resize(rank);
      up = heap.data();
    }
    quant::decode_word_row(cl.codec, stored, std::span(up, rank));
    quant::reconstruct_word_row(std::span<const float>(up, rank), word_v_[cluster].data(), d, out);
  }

  // Bytes this reader keeps in memory: the manifest's metadata (dictionaries, offsets, the config,
  // quantizer and stats JSON, estimated by their text size) and the row checksum table. The word
  // table, shard versions and residents stay on disk until read. (A from_memory store's own copy
  // of the bytes is not counted.)
  std::size_t resident_bytes() const {
    std::size_t bytes = sizeof(*this) + row_checksums_.capacity() * sizeof(std::uint32_t) +
                        token_map_.capacity() * sizeof(std::uint32_t) +
                        m_.bits.capacity() * sizeof(unsigned) + name_.capacity();
    auto json_bytes = [](const nlohmann::json& j) { return j.is_null() ? 0 : j.dump().size(); };
    bytes += json_bytes(m_.config_json) + json_bytes(m_.quantizer);
    for (const auto& v : word_v_) bytes += v.capacity() * sizeof(float);
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
    if (m_.word.lowrank) load_lowrank_word_table();
  }

  // The token map and every cluster's V, kept resident; the map must send every token to its own
  // row of a cluster (each row used once), so that no read leaves its cluster's U.
  void load_lowrank_word_table() {
    using namespace shard_store_detail;
    token_map_.resize(static_cast<std::size_t>(m_.word.rows));
    read_checked(m_.word.token_map.offset, std::as_writable_bytes(std::span(token_map_)), m_.word.token_map.checksum,
                 "the word-embedding token map");
    std::vector<std::vector<bool>> used(m_.word.clusters.size());
    for (std::size_t i = 0; i < used.size(); ++i) used[i].resize(static_cast<std::size_t>(m_.word.clusters[i].rows));
    for (std::size_t id = 0; id < token_map_.size(); ++id) {
      const std::size_t cluster = token_map_[id] >> kTokenMapIndexBits;
      const std::size_t index = token_map_[id] & ((std::uint32_t{1} << kTokenMapIndexBits) - 1);
      if (cluster >= used.size() || index >= used[cluster].size()) {
        fail(name_, "the word-embedding token map sends token ", id, " to row ", index, " of cluster ", cluster,
             ", which does not exist (", used.size(), " clusters)");
      }
      if (used[cluster][index]) {
        fail(name_, "the word-embedding token map sends two tokens to row ", index, " of cluster ", cluster,
             " (token ", id, " is the second)");
      }
      used[cluster][index] = true;
    }
    word_v_.resize(m_.word.clusters.size());
    for (std::size_t i = 0; i < m_.word.clusters.size(); ++i) {
      const ShardStoreManifest::WordCluster& cl = m_.word.clusters[i];
      if (cl.v.size != 0) word_v_[i] = read_floats(cl.v, concat("word-embedding cluster ", i, " V"));
    }
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
      shard_store_detail::fail(name_, "reading ", what, ": got only ", got, " of the ", out.size(), " bytes at byte ",
                               offset, ": the file ended early (truncated after it was opened?)");
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
      shard_store_detail::fail(name_, what, ": checksum mismatch (the manifest says ",
                               shard_store_detail::hex64(checksum), ", the bytes hash to ",
                               shard_store_detail::hex64(actual), "): the file is damaged");
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
  std::vector<std::uint32_t> token_map_;    // low-rank table: cluster << 24 | row, per token
  std::vector<std::vector<float>> word_v_;  // low-rank table: each cluster's V (empty when full)
  static constexpr std::size_t kMaxStackRank = 1024;
};

}  // namespace stile
