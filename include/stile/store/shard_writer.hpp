#pragma once
// The shard store's writer (the format: store/format.hpp, store/manifest.hpp, docs/format.md).
// ShardStoreWriter streams a store to a temporary file (one layer in memory at a time) and
// renames it into place in finish(), so the destination is either the complete store or
// untouched. It checks what it is given as the reader (store/shard_store.hpp) will.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
#include "stile/core/file_error.hpp"
#include "stile/io/checkpoint_names.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/quant/lowrank_table.hpp"
#include "stile/quant/packed_layout.hpp"
#include "stile/store/format.hpp"
#include "stile/store/manifest.hpp"
#include "stile/store/shard_layout.hpp"
#include "stile/store/shard_view.hpp"

namespace stile {

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
    ShardBlob blob;                 // exactly shard_version_layout(shape, bits, outliers).total bytes
    std::vector<float> dictionary;  // 2^bits finite centroids; empty at 32 bits
    std::array<std::uint32_t, kShardMatrices> outliers{};
  };

  // config_json: the model's config.json text (kept verbatim in the manifest); bits: strictly
  // increasing supported bitwidths, one version of every shard at each; quantizer: kept as is.
  ShardStoreWriter(std::filesystem::path path, std::string_view config_json, std::size_t shards_per_layer,
                   std::vector<unsigned> bits, nlohmann::json quantizer = nlohmann::json::object())
      : path_(std::move(path)), name_(path_.string()) {
    using shard_store_detail::fail;
    try {
      m_.config = parse_encoder_config(config_json, concat(name_, ": config.json"));
      m_.config_json = nlohmann::json::parse(config_json.begin(), config_json.end());
    } catch (const nlohmann::json::exception& e) {
      fail(name_, "config.json: ", e.what());
    }
    require_bert_family(m_.config, concat(name_, ": config.json"), "the shard store");
    const EncoderConfig& c = m_.config;
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
      const EncoderConfig& c = m_.config;
      const std::size_t d = c.hidden;
      check_count(word.size(), c.vocab_size * d, "the word embeddings", "vocab_size x hidden_size");
      check_other_embeddings(position, token_type, ln_gamma, ln_beta);
      std::vector<std::uint32_t> row_checksums(c.vocab_size);
      for (std::size_t r = 0; r < c.vocab_size; ++r) {
        row_checksums[r] = shard_store_detail::row_checksum(std::as_bytes(word.subspan(r * d, d)));
      }
      const ShardStoreSection table = write_section(std::as_bytes(word));
      m_.word.offset = table.offset;
      m_.word.rows = c.vocab_size;
      m_.word.cols = d;
      m_.word.row_checksums = write_section(std::as_bytes(std::span<const std::uint32_t>(row_checksums)));
      write_other_embeddings(position, token_type, ln_gamma, ln_beta);
    });
  }

  // The same with a clustered low-rank word table (quant/lowrank_table.hpp; format version 2):
  // every token in exactly one cluster, ranks 1..d, U and V of the cluster's shape.
  void add_embeddings(const quant::LowRankWordTable& word, std::span<const float> position,
                      std::span<const float> token_type, std::span<const float> ln_gamma,
                      std::span<const float> ln_beta) {
    guarded([&] {
      if (have_embeddings_) fail("add_embeddings was called twice");
      const EncoderConfig& c = m_.config;
      const std::size_t d = c.hidden;
      if (word.rows != c.vocab_size || word.cols != d) {
        fail("the low-rank word table is ", word.rows, " x ", word.cols, ", the config needs ", c.vocab_size, " x ", d);
      }
      check_other_embeddings(position, token_type, ln_gamma, ln_beta);
      const std::size_t n = word.clusters.size();
      if (n == 0 || n > shard_store_detail::kMaxWordClusters) {
        fail("the low-rank word table has ", n, " clusters (1 to ", shard_store_detail::kMaxWordClusters, ")");
      }
      constexpr std::uint32_t kUnset = 0xffffffffu;
      std::vector<std::uint32_t> token_map(c.vocab_size, kUnset), row_checksums(c.vocab_size, 0);
      m_.word.rows = c.vocab_size;
      m_.word.cols = d;
      m_.word.lowrank = true;
      m_.word.clusters.clear();
      std::vector<std::byte> coded;
      for (std::size_t i = 0; i < n; ++i) {
        const quant::LowRankCluster& cl = word.clusters[i];
        const std::size_t rows = cl.tokens.size(), r = cl.rank;
        if (rows == 0) fail("word-embedding cluster ", i, " has no tokens");
        if (r == 0 || r > d) fail("word-embedding cluster ", i, ": bad rank ", r, " (1 to hidden_size = ", d, ")");
        if (cl.u.size() != rows * r) fail("word-embedding cluster ", i, ": U has ", cl.u.size(), " values, ", rows, " x ", r, " needed");
        const std::size_t v_values = r == d ? 0 : r * d;
        if (cl.v.size() != v_values) fail("word-embedding cluster ", i, ": V has ", cl.v.size(), " values, ", v_values, " needed");
        const std::size_t row_bytes = quant::word_row_bytes(cl.codec, r);
        coded.assign(rows * row_bytes, std::byte{0});
        for (std::size_t t = 0; t < rows; ++t) {
          const std::int32_t id = cl.tokens[t];
          if (id < 0 || static_cast<std::size_t>(id) >= c.vocab_size || token_map[std::size_t(id)] != kUnset) {
            fail("word-embedding cluster ", i, ": token ", id, " is outside the vocabulary or in two clusters");
          }
          const std::span<std::byte> row = std::span(coded).subspan(t * row_bytes, row_bytes);
          quant::encode_word_row(cl.codec, std::span(cl.u).subspan(t * r, r), row);
          token_map[std::size_t(id)] = static_cast<std::uint32_t>(i << shard_store_detail::kTokenMapIndexBits | t);
          row_checksums[std::size_t(id)] = shard_store_detail::row_checksum(row);
        }
        ShardStoreManifest::WordCluster mc;
        mc.rows = rows;
        mc.rank = r;
        mc.codec = cl.codec;
        mc.u_offset = write_section(coded).offset;
        if (v_values != 0) mc.v = write_section(std::as_bytes(std::span(cl.v)));
        m_.word.clusters.push_back(mc);
      }
      for (std::size_t id = 0; id < c.vocab_size; ++id) {
        if (token_map[id] == kUnset) fail("the low-rank word table has no row for token ", id);
      }
      m_.word.token_map = write_section(std::as_bytes(std::span<const std::uint32_t>(token_map)));
      m_.word.row_checksums = write_section(std::as_bytes(std::span<const std::uint32_t>(row_checksums)));
      write_other_embeddings(position, token_type, ln_gamma, ln_beta);
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
        manifest = shard_store_detail::manifest_json(m_, shard_store_detail::format_version_for(m_)).dump();
      } catch (const nlohmann::json::exception& e) {
        fail("cannot write the manifest: ", e.what());
      }
      pad();
      ShardStoreHeader h;
      h.version = shard_store_detail::format_version_for(m_);
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
      const ssize_t n =
          ::write(fd_, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30));
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

  void check_other_embeddings(std::span<const float> position, std::span<const float> token_type,
                              std::span<const float> ln_gamma, std::span<const float> ln_beta) const {
    const EncoderConfig& c = m_.config;
    const std::size_t d = c.hidden;
    check_count(position.size(), c.max_position_embeddings * d, "the position embeddings",
                "max_position_embeddings x hidden_size");
    check_count(token_type.size(), c.type_vocab_size * d, "the token-type embeddings", "type_vocab_size x hidden_size");
    check_count(ln_gamma.size(), d, "the embedding LayerNorm gamma", "hidden_size");
    check_count(ln_beta.size(), d, "the embedding LayerNorm beta", "hidden_size");
  }

  void write_other_embeddings(std::span<const float> position, std::span<const float> token_type,
                              std::span<const float> ln_gamma, std::span<const float> ln_beta) {
    m_.position = write_section(std::as_bytes(position));
    m_.token_type = write_section(std::as_bytes(token_type));
    std::vector<float> ln(ln_gamma.begin(), ln_gamma.end());
    ln.insert(ln.end(), ln_beta.begin(), ln_beta.end());
    m_.ln = write_section(std::as_bytes(std::span<const float>(ln)));
    have_embeddings_ = true;
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
    const std::string what = shard_version_name(layer, shard, want);
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
