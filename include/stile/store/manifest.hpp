#pragma once
// The shard store's manifest (docs/format.md): the JSON at the end of the file that describes
// every section (offset, size, checksum) and every shard version (bits, dictionary, outlier
// counts), plus the model's config.json. Its types, its JSON coding, and the checks a reader
// makes before it trusts it: every section inside the file, aligned and not overlapping, every
// size against the config and the shard layout. Errors are "stile: <file>: <problem>".
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"
#include "stile/io/checkpoint_names.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/json_fields.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/quant/lowrank_table.hpp"
#include "stile/quant/packed_layout.hpp"
#include "stile/store/format.hpp"
#include "stile/store/shard_layout.hpp"

namespace stile {

// What the manifest says about one shard version.
struct ShardVersionInfo {
  unsigned bits = 32;
  std::uint64_t offset = 0;                              // in the file, a multiple of 4096
  std::uint64_t size = 0;                                // shard_version_layout(shape, bits, outliers).total
  std::uint64_t checksum = 0;                            // XXH3-64 of the version's bytes
  std::vector<float> dictionary;                         // 2^bits centroids; empty at 32 bits
  std::array<std::uint32_t, kShardMatrices> outliers{};  // per matrix, in ShardMatrix order
};

// A validated manifest: what ShardStore keeps in memory, and what ShardStoreWriter writes.
struct ShardStoreManifest {
  nlohmann::json config_json;  // the model's config.json object, verbatim
  EncoderConfig config;
  std::size_t shards_per_layer = 0;
  ShardShape shape;
  std::vector<unsigned> bits;  // strictly increasing
  nlohmann::json quantizer;    // opaque, as the converter wrote it
  ShardStoreSection vocab;
  // A low-rank table's cluster (format version 2): `rows` tokens, each stored as one coded row of
  // `rank` values at u_offset + index * row bytes; V [rank x cols] fp32 in `v`, absent (size 0)
  // when rank == cols (a full cluster: its U rows are the table's rows).
  struct WordCluster {
    std::uint64_t rows = 0;
    std::uint64_t rank = 0;
    quant::WordRowCodec codec = quant::WordRowCodec::kF32;
    std::uint64_t u_offset = 0;
    ShardStoreSection v;
    std::uint64_t row_bytes() const noexcept { return quant::word_row_bytes(codec, static_cast<std::size_t>(rank)); }
  };
  struct WordTable {
    std::uint64_t offset = 0;         // dense: row r at offset + r * cols * 4
    std::uint64_t rows = 0;           // vocab_size
    std::uint64_t cols = 0;           // hidden
    ShardStoreSection row_checksums;  // u32 per row: low 32 bits of XXH3-64 of the row's stored bytes
    bool lowrank = false;             // "encoding": "lowrank" (format version 2)
    ShardStoreSection token_map;      // lowrank: u32 per token, cluster << 24 | row in the cluster
    std::vector<WordCluster> clusters;
  } word;
  ShardStoreSection position;    // [max_position_embeddings x d] fp32
  ShardStoreSection token_type;  // [type_vocab_size x d] fp32
  ShardStoreSection ln;          // embedding LayerNorm: gamma [d] then beta [d], fp32
  struct Layer {
    ShardStoreSection resident;                         // kLayerResidentParts x d fp32
    std::vector<std::vector<ShardVersionInfo>> shards;  // [shard][index of its bits in `bits`]
    nlohmann::json stats;                               // opaque; null when the manifest has none
  };
  std::vector<Layer> layers;
};

namespace shard_store_detail {

// The manifest's own structure nests 6 levels; the opaque "quantizer" and "stats" may nest a
// little. Deeper input is refused before it costs stack or memory.
inline constexpr int kMaxJsonDepth = 64;

// Field readers (io/json_fields.hpp): `where` says which part of the manifest is being read.
// A member that must be an unsigned integer, named "\"<key>\"" in errors.
inline std::uint64_t u64_member(const nlohmann::json& obj, const char* key, std::string_view where,
                                const std::string& file) {
  return json_unsigned(json_member(obj, key, where, file), concat("\"", key, "\""), where, file);
}

inline std::uint64_t checksum_member(const nlohmann::json& obj, std::string_view where, const std::string& file) {
  const nlohmann::json& v = json_member(obj, "checksum", where, file);
  const std::optional<std::uint64_t> c = v.is_string() ? parse_hex64(v.get_ref<const std::string&>()) : std::nullopt;
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
                                      const ShardStoreManifest& m, const ShardStoreHeader& h, const std::string& file,
                                      std::vector<Extent>& extents) {
  const unsigned expected_bits = m.bits[index];
  const std::string where = shard_version_name(layer, shard, expected_bits);
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

  const nlohmann::json& dict = json_array_member(v, "dictionary", where, file);
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

  const nlohmann::json& outliers = json_array_member(v, "outliers", where, file);
  if (outliers.size() != kShardMatrices) {
    fail(file, where, ": \"outliers\" has ", outliers.size(), " counts, expected ", kShardMatrices,
         " (one per matrix)");
  }
  for (std::size_t i = 0; i < kShardMatrices; ++i) {
    const std::uint64_t count = json_unsigned(outliers[i], concat("outlier count ", i), where, file);
    const auto which = static_cast<ShardMatrix>(i);
    const std::uint64_t cells = std::uint64_t{m.shape.rows(which)} * m.shape.cols(which);
    if (count > cells || (expected_bits == 32 && count != 0)) {
      fail(file, where, ": impossible outlier count ", count, " for ", kShardMatrixNames[i], " (", m.shape.rows(which),
           " x ", m.shape.cols(which), expected_bits == 32 ? ", 32-bit versions have none)" : ")");
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

// Low-rank tables: at most this many clusters (the token map keeps the cluster in 8 bits).
inline constexpr std::size_t kMaxWordClusters = 255;
inline constexpr unsigned kTokenMapIndexBits = 24;  // vocab_size <= 2^24 (parse_encoder_config's limit)

// "embeddings"."word": dense (version 1 and 2), or clustered low-rank (version 2 only).
inline void parse_word_table(const nlohmann::json& word, ShardStoreManifest& m, const ShardStoreHeader& h,
                             const std::string& file, std::vector<Extent>& extents) {
  const std::string where = "the word embeddings";
  const EncoderConfig& c = m.config;
  m.word.rows = u64_member(word, "rows", where, file);
  m.word.cols = u64_member(word, "cols", where, file);
  if (m.word.rows != c.vocab_size || m.word.cols != c.hidden) {
    fail(file, where, ": the table is ", m.word.rows, " x ", m.word.cols,
         ", the config needs vocab_size x hidden_size = ", c.vocab_size, " x ", c.hidden);
  }
  const std::string checks = "the word-embedding row checksums";
  m.word.row_checksums = section_value(json_member(word, "row_checksums", where, file), checks, file);
  check_size(m.word.row_checksums.size, m.word.rows * 4, checks, "one u32 per row", file);
  check_range(m.word.row_checksums.offset, m.word.row_checksums.size, checks, "the section", h, file, extents);

  std::string encoding = "dense";
  if (const auto e = word.find("encoding"); e != word.end()) {
    if (!e->is_string()) fail(file, where, ": \"encoding\" must be \"dense\" or \"lowrank\", got ", json_excerpt(*e));
    encoding = e->get<std::string>();
  }
  if (encoding == "dense") {
    m.word.offset = u64_member(word, "offset", where, file);
    check_range(m.word.offset, m.word.rows * m.word.cols * sizeof(float), where, "the table", h, file, extents);
    return;
  }
  if (encoding != "lowrank") fail(file, where, ": \"encoding\" is \"", encoding, "\", not \"dense\" or \"lowrank\"");
  if (h.version < 2) {
    fail(file, where, ": a low-rank table needs format version 2, the store says version ", h.version,
         " (damaged, or convert it again)");
  }
  m.word.lowrank = true;
  const std::string map = "the word-embedding token map";
  m.word.token_map = section_value(json_member(word, "token_map", where, file), map, file);
  check_size(m.word.token_map.size, m.word.rows * 4, map, "one u32 per token", file);
  check_range(m.word.token_map.offset, m.word.token_map.size, map, "the section", h, file, extents);
  const nlohmann::json& clusters = json_array_member(word, "clusters", where, file);
  if (clusters.empty() || clusters.size() > kMaxWordClusters) {
    fail(file, where, ": ", clusters.size(), " clusters; a low-rank table has 1 to ", kMaxWordClusters);
  }
  std::uint64_t tokens = 0;
  for (std::size_t i = 0; i < clusters.size(); ++i) {
    const std::string cw = concat("word-embedding cluster ", i);
    const nlohmann::json& cj = clusters[i];
    if (!cj.is_object()) fail(file, cw, ": the cluster entry is not a JSON object");
    ShardStoreManifest::WordCluster cl;
    cl.rows = u64_member(cj, "rows", cw, file);
    cl.rank = u64_member(cj, "rank", cw, file);
    const std::string& codec = json_string_member(cj, "codec", cw, file);
    const std::optional<quant::WordRowCodec> parsed = quant::parse_word_row_codec(codec);
    if (!parsed) fail(file, cw, ": \"codec\" is \"", codec, "\", not \"f32\" or \"int8\"");
    cl.codec = *parsed;
    if (cl.rows == 0 || cl.rows > m.word.rows - tokens) {
      fail(file, cw, ": ", cl.rows, " tokens; the clusters must share the ", m.word.rows,
           " tokens of the vocabulary, each at least one");
    }
    tokens += cl.rows;
    if (cl.rank == 0 || cl.rank > m.word.cols) {
      fail(file, cw, ": bad rank ", cl.rank, " (a rank is 1 to hidden_size = ", m.word.cols, ")");
    }
    cl.u_offset = u64_member(cj, "u_offset", cw, file);
    check_range(cl.u_offset, cl.rows * cl.row_bytes(), cw, "U", h, file, extents);
    const auto v = cj.find("v");
    const std::uint64_t v_size = cl.rank == m.word.cols ? 0 : cl.rank * m.word.cols * sizeof(float);
    if (v_size == 0) {
      if (v != cj.end()) fail(file, cw, ": a full cluster (rank = hidden_size) has no \"v\"");
    } else {
      if (v == cj.end()) fail(file, cw, ": missing \"v\" (rank ", cl.rank, " < hidden_size)");
      cl.v = section_value(*v, concat(cw, " V"), file);
      check_size(cl.v.size, v_size, concat(cw, " V"), concat("rank x hidden_size = ", cl.rank, " x ", m.word.cols, " floats"), file);
      check_range(cl.v.offset, cl.v.size, concat(cw, " V"), "the section", h, file, extents);
    }
    m.word.clusters.push_back(cl);
  }
  if (tokens != m.word.rows) {
    fail(file, where, ": the clusters hold ", tokens, " tokens, the vocabulary has ", m.word.rows);
  }
}

// Validates a manifest against its header (offsets and sizes inside the file, the config, the
// shard layout). The manifest checksum is not checked here: ShardStore does that first; fuzzers
// call this directly to get past it.
inline ShardStoreManifest parse_manifest(std::string_view text, const ShardStoreHeader& h, const std::string& file) {
  const nlohmann::json root = parse_strict_json(text, kMaxJsonDepth, file, "the manifest");
  if (!root.is_object()) fail(file, "the manifest is not a JSON object");
  const std::string top = "manifest";

  const nlohmann::json& format = json_member(root, "format", top, file);
  if (!format.is_string() || format.get_ref<const std::string&>() != kShardStoreFormatName) {
    fail(file, "the manifest's \"format\" is ", json_excerpt(format), ", not \"", kShardStoreFormatName, "\"");
  }
  const std::uint64_t version = u64_member(root, "version", top, file);
  if (version != h.version) {
    fail(file, "the manifest says format version ", version, " but the header says ", h.version);
  }

  ShardStoreManifest m;
  m.config_json = json_object_member(root, "config", top, file);
  // The config must be one parse_encoder_config accepts: every dimension present, positive and below
  // its limit (so no size computed from them overflows), heads dividing the hidden size.
  m.config = parse_encoder_config(m.config_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                               concat(file, ": manifest \"config\""));
  require_bert_family(m.config, concat(file, ": manifest \"config\""), "the shard store");
  const EncoderConfig& c = m.config;

  const std::uint64_t shards = u64_member(root, "shards_per_layer", top, file);
  if (shards == 0 || shards > c.num_heads || c.num_heads % shards != 0 || c.intermediate % shards != 0) {
    fail(file, "\"shards_per_layer\" is ", shards, ", which does not divide the model's ", c.num_heads,
         " attention heads and ", c.intermediate, " FFN neurons evenly");
  }
  m.shards_per_layer = static_cast<std::size_t>(shards);
  m.shape = ShardShape::of(c, m.shards_per_layer);

  const nlohmann::json& bits = json_array_member(root, "bits", top, file);
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

  m.vocab = section_value(json_member(root, "vocab", top, file), "manifest \"vocab\"", file);
  check_range(m.vocab.offset, m.vocab.size, "the vocabulary", "the section", h, file, extents);

  const nlohmann::json& emb = json_object_member(root, "embeddings", top, file);
  parse_word_table(json_object_member(emb, "word", "manifest \"embeddings\"", file), m, h, file, extents);
  m.position =
      section_value(json_member(emb, "position", "manifest \"embeddings\"", file), "the position embeddings", file);
  check_size(m.position.size, c.max_position_embeddings * d * f32, "the position embeddings",
             "max_position_embeddings x hidden_size floats", file);
  check_range(m.position.offset, m.position.size, "the position embeddings", "the section", h, file, extents);
  m.token_type =
      section_value(json_member(emb, "token_type", "manifest \"embeddings\"", file), "the token-type embeddings", file);
  check_size(m.token_type.size, c.type_vocab_size * d * f32, "the token-type embeddings",
             "type_vocab_size x hidden_size floats", file);
  check_range(m.token_type.offset, m.token_type.size, "the token-type embeddings", "the section", h, file, extents);
  m.ln = section_value(json_member(emb, "ln", "manifest \"embeddings\"", file), "the embedding LayerNorm", file);
  check_size(m.ln.size, 2 * d * f32, "the embedding LayerNorm", "gamma and beta, hidden_size floats each", file);
  check_range(m.ln.offset, m.ln.size, "the embedding LayerNorm", "the section", h, file, extents);

  const nlohmann::json& layers = json_array_member(root, "layers", top, file);
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
    layer.resident = section_value(json_member(lj, "resident", where, file), resident, file);
    check_size(layer.resident.size, kLayerResidentParts * d * f32, resident, "6 x hidden_size floats", file);
    check_range(layer.resident.offset, layer.resident.size, resident, "the section", h, file, extents);
    const nlohmann::json& shard_list = json_array_member(lj, "shards", where, file);
    if (shard_list.size() != m.shards_per_layer) {
      fail(file, where, " lists ", shard_list.size(), " shards, \"shards_per_layer\" is ", m.shards_per_layer);
    }
    layer.shards.resize(m.shards_per_layer);
    for (std::size_t s = 0; s < shard_list.size(); ++s) {
      const std::string shard_where = concat("layer ", l, " shard ", s);
      if (!shard_list[s].is_object()) fail(file, shard_where, ": the shard entry is not a JSON object");
      const nlohmann::json& versions = json_array_member(shard_list[s], "versions", shard_where, file);
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
// The format version a manifest needs: 2 for a low-rank word table, else 1 (readable by older readers).
inline std::uint32_t format_version_for(const ShardStoreManifest& m) noexcept { return m.word.lowrank ? 2 : 1; }

inline nlohmann::json manifest_json(const ShardStoreManifest& m, std::uint32_t version) {
  nlohmann::json root = nlohmann::json::object();
  root["format"] = kShardStoreFormatName;
  root["version"] = version;
  root["config"] = m.config_json;
  root["shards_per_layer"] = m.shards_per_layer;
  root["bits"] = m.bits;
  root["quantizer"] = m.quantizer;
  root["vocab"] = section_json(m.vocab);
  nlohmann::json word = {{"rows", m.word.rows},
                         {"cols", m.word.cols},
                         {"row_checksums", section_json(m.word.row_checksums)}};
  if (m.word.lowrank) {
    word["encoding"] = "lowrank";
    word["token_map"] = section_json(m.word.token_map);
    nlohmann::json clusters = nlohmann::json::array();
    for (const ShardStoreManifest::WordCluster& cl : m.word.clusters) {
      nlohmann::json cj = {{"rows", cl.rows},
                           {"rank", cl.rank},
                           {"codec", quant::word_row_codec_name(cl.codec)},
                           {"u_offset", cl.u_offset}};
      if (cl.rank != m.word.cols) cj["v"] = section_json(cl.v);
      clusters.push_back(std::move(cj));
    }
    word["clusters"] = std::move(clusters);
  } else {
    word["offset"] = m.word.offset;
  }
  root["embeddings"] = {{"word", std::move(word)},
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

}  // namespace shard_store_detail

}  // namespace stile
