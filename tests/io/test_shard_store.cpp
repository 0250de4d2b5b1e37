// The shard store (store/shard_store.hpp): a small synthetic store written with ShardStoreWriter
// reads back byte for byte (shard versions at every bitwidth, dictionaries, outlier counts,
// residents, embeddings, word rows, vocabulary), and every kind of damage is refused with a
// stile::Error naming the file and the problem; the writer never leaves a partial file.
//
// The fuzz seeds of fuzz_shard_store (tests/io/fuzz_seeds_store/) are written by a hidden test of
// this program:  test_shard_store "[make-fuzz-seeds]"  (deterministic: the same bytes every run).
#include "stile/store/shard_store.hpp"
#include "stile/store/shard_writer.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support/error_of.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"
#include "support/temp_dir.hpp"

using Catch::Contains;
using stile::ShardStore;
using stile::ShardStoreWriter;
namespace fs = std::filesystem;
namespace detail = stile::shard_store_detail;

namespace {

using stile_test::error_or_none;
// splitmix64: deterministic on every platform (the fuzz seed must not depend on the library).
using stile_test::Rng;
using stile_test::TempDir;

struct Spec {
  std::size_t hidden, layers, heads, intermediate, vocab, max_pos, types, shards;
  std::vector<unsigned> bits;
};

// The store the tests use: hidden 32, 2 layers, 4 heads, FFN 64, vocab 50, 16 positions, 2 types.
const Spec kSpec{32, 2, 4, 64, 50, 16, 2, 4, {2, 3, 4, 5, 6, 32}};
// The fuzz seed: as small as a store gets (< 64 KB).
const Spec kSeedSpec{8, 1, 2, 8, 8, 4, 2, 2, {3, 32}};

std::string config_text(const Spec& s) {
  nlohmann::json config =
      stile_test::random_bert_config({s.hidden, s.layers, s.heads, s.intermediate, s.vocab, s.max_pos, s.types});
  config["position_embedding_type"] = "absolute";
  return config.dump(2);
}

// A shard version of random bytes made structurally valid: outlier keys ascending and inside
// their matrix, as ShardView::parse requires; random dictionary.
ShardStoreWriter::Version make_version(const stile::ShardShape& shape, unsigned bits, Rng& rng) {
  ShardStoreWriter::Version v;
  v.bits = bits;
  if (bits != 32) {
    for (std::size_t m = 0; m < stile::kShardMatrices; ++m) v.outliers[m] = static_cast<std::uint32_t>(rng.below(6));
    v.dictionary.resize(std::size_t{1} << bits);
    for (float& c : v.dictionary) c = rng.any_finite();
  }
  const stile::ShardVersionLayout layout = stile::shard_version_layout(shape, bits, v.outliers);
  stile::AlignedBuffer<std::byte> bytes(layout.total);
  for (std::size_t i = 0; i < layout.total; ++i) bytes[i] = static_cast<std::byte>(rng.next());
  for (std::size_t m = 0; m < stile::kShardMatrices; ++m) {
    const auto which = static_cast<stile::ShardMatrix>(m);
    const std::size_t rows = shape.rows(which), cols = shape.cols(which);
    std::set<std::size_t> cells;
    while (cells.size() < v.outliers[m]) cells.insert(rng.below(rows * cols));
    std::vector<std::uint32_t> keys;
    for (const std::size_t cell : cells) keys.push_back(stile::quant::outlier_key(cell / cols, cell % cols, cols));
    std::sort(keys.begin(), keys.end());
    std::memcpy(bytes.data() + layout.outlier_keys[m].offset, keys.data(), keys.size() * sizeof(std::uint32_t));
  }
  v.blob = std::move(bytes);
  return v;
}

// Everything a store holds, kept to compare what is read back.
struct Model {
  Spec spec;
  std::string config;
  stile::ShardShape shape;
  nlohmann::json quantizer;
  std::string vocab;
  std::vector<float> word, position, token_type, ln_gamma, ln_beta;
  struct Layer {
    std::array<std::vector<float>, stile::kLayerResidentParts> resident;
    std::vector<std::vector<ShardStoreWriter::Version>> shards;
    nlohmann::json stats;
  };
  std::vector<Layer> layers;
};

Model make_model(const Spec& spec, std::uint64_t seed) {
  Rng rng{seed};
  Model m;
  m.spec = spec;
  m.config = config_text(spec);
  m.shape = stile::ShardShape::of(stile::parse_encoder_config(m.config, "test"), spec.shards);
  m.quantizer = {{"method", "test"}, {"threshold", -4.0}, {"nested", {{"list", {1, 2, 3}}}}};
  for (std::size_t i = 0; i < spec.vocab; ++i) {
    m.vocab += "tok";
    m.vocab += std::to_string(i);
    m.vocab += '\n';
  }
  auto fill = [&](std::vector<float>& v, std::size_t n) {
    v.resize(n);
    for (float& x : v) x = rng.unit();
  };
  const std::size_t d = spec.hidden;
  fill(m.word, spec.vocab * d);
  fill(m.position, spec.max_pos * d);
  fill(m.token_type, spec.types * d);
  fill(m.ln_gamma, d);
  fill(m.ln_beta, d);
  for (std::size_t l = 0; l < spec.layers; ++l) {
    Model::Layer layer;
    for (auto& part : layer.resident) fill(part, d);
    layer.shards.resize(spec.shards);
    for (auto& shard : layer.shards) {
      for (const unsigned b : spec.bits) shard.push_back(make_version(m.shape, b, rng));
    }
    layer.stats = {{"layer", l}, {"gaussian_std", 0.04}};
    m.layers.push_back(std::move(layer));
  }
  // Floats whose decimal forms are hard: they must survive the JSON manifest bit for bit.
  const std::vector<float> tricky = {0.1f,
                                     1.0f / 3.0f,
                                     -0.0f,
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::max(),
                                     -std::numeric_limits<float>::min(),
                                     16777217.0f,
                                     3.4e-38f};
  auto& dict = m.layers[0].shards[0][spec.bits.size() > 1 ? 1 : 0].dictionary;
  for (std::size_t i = 0; i < tricky.size() && i < dict.size(); ++i) dict[i] = tricky[i];
  return m;
}

void write_model(const Model& m, const fs::path& path) {
  ShardStoreWriter writer(path, m.config, m.spec.shards, m.spec.bits, m.quantizer);
  writer.add_vocab(m.vocab);
  writer.add_embeddings(m.word, m.position, m.token_type, m.ln_gamma, m.ln_beta);
  for (const Model::Layer& layer : m.layers) writer.add_layer(layer.resident, layer.shards, layer.stats);
  writer.finish();
}

std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

void write_bytes(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}
template <class T>
bool same_values(std::span<const T> a, std::span<const T> b) {
  return same_bytes(std::as_bytes(a), std::as_bytes(b));
}

// The model of the tests and its store, written once per program run.
struct Written {
  TempDir dir;
  Model model = make_model(kSpec, 42);
  fs::path store = dir.path / "model.stile";
  std::vector<std::byte> bytes;
  Written() {
    write_model(model, store);
    bytes = read_bytes(store);
  }
};
const Written& written() {
  static const Written w;
  return w;
}

// A store split into its body (everything before the manifest) and its manifest, and put back
// together with correct checksums: lets a test change the manifest and reach the checks behind
// the checksum.
struct Opened {
  stile::ShardStoreHeader header;
  nlohmann::json manifest;
  std::vector<std::byte> body;
};
Opened split(std::span<const std::byte> bytes) {
  Opened o;
  o.header = detail::parse_header(bytes.first(stile::kShardStoreHeaderBytes), bytes.size(), "split");
  const auto* text = reinterpret_cast<const char*>(bytes.data() + o.header.manifest_offset);
  o.manifest = nlohmann::json::parse(text, text + o.header.manifest_size);
  o.body.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(o.header.manifest_offset));
  return o;
}
std::vector<std::byte> reseal(const Opened& o) {
  const std::string text = o.manifest.dump();
  std::vector<std::byte> out = o.body;
  stile::ShardStoreHeader h = o.header;
  h.manifest_offset = out.size();
  h.manifest_size = text.size();
  h.file_size = out.size() + text.size();
  h.manifest_checksum = detail::xxh3(std::as_bytes(std::span(text)));
  const std::vector<std::byte> header = detail::encode_header(h);
  std::copy(header.begin(), header.end(), out.begin());
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  out.insert(out.end(), p, p + text.size());
  return out;
}

// The error of opening the test store with its manifest changed by `edit`.
template <class Edit>
std::string error_with_manifest(Edit edit) {
  Opened o = split(written().bytes);
  edit(o.manifest);
  const std::vector<std::byte> bytes = reseal(o);
  return error_or_none([&] { (void)ShardStore::from_memory(bytes, "model.stile"); });
}

void check_everything(const ShardStore& store, const Model& m) {
  const stile::EncoderConfig& c = store.config();
  CHECK(c.hidden == m.spec.hidden);
  CHECK(c.num_layers == m.spec.layers);
  CHECK(c.num_heads == m.spec.heads);
  CHECK(c.intermediate == m.spec.intermediate);
  CHECK(c.vocab_size == m.spec.vocab);
  CHECK(store.config_json() == nlohmann::json::parse(m.config));
  CHECK(store.num_layers() == m.spec.layers);
  CHECK(store.shards_per_layer() == m.spec.shards);
  CHECK(store.shard_shape().attn_rows == m.shape.attn_rows);
  CHECK(store.shard_shape().ffn_rows == m.shape.ffn_rows);
  CHECK(store.bits() == m.spec.bits);
  CHECK(store.quantizer() == m.quantizer);

  stile::AlignedBuffer<std::byte, stile::kShardStoreAlign> work(static_cast<std::size_t>(store.max_version_bytes()));
  std::uint64_t previous_end = 0;  // the writer's order: layer by layer, bits increasing, shard by shard
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    for (const unsigned bits : m.spec.bits) {
      for (std::size_t s = 0; s < m.spec.shards; ++s) {
        const stile::ShardVersionInfo& info = store.version_info(l, s, bits);
        INFO("layer " << l << " shard " << s << " bits " << bits);
        CHECK(info.offset >= previous_end);
        previous_end = info.offset + info.size;
      }
    }
  }
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    CHECK(store.layer_stats(l) == m.layers[l].stats);
    for (std::size_t s = 0; s < m.spec.shards; ++s) {
      for (std::size_t i = 0; i < m.spec.bits.size(); ++i) {
        const unsigned bits = m.spec.bits[i];
        const ShardStoreWriter::Version& want = m.layers[l].shards[s][i];
        INFO("layer " << l << " shard " << s << " bits " << bits);
        const stile::ShardVersionInfo& info = store.version_info(l, s, bits);
        CHECK(info.bits == bits);
        CHECK(info.offset % stile::kShardStoreAlign == 0);
        CHECK(info.size == want.blob.bytes().size());
        CHECK(info.outliers == want.outliers);
        CHECK(same_values<float>(info.dictionary, want.dictionary));

        const stile::ShardBuffer buffer = store.read_shard(l, s, bits);
        CHECK(reinterpret_cast<std::uintptr_t>(buffer.bytes().data()) % stile::kShardStoreAlign == 0);
        CHECK(same_bytes(buffer.bytes(), want.blob.bytes()));
        CHECK(same_values<float>(buffer.dictionary(), want.dictionary));
        const stile::ShardView& view = buffer.view();
        CHECK(view.bits == bits);
        CHECK(view.matrix(stile::ShardMatrix::kFfnOut).n_outliers == want.outliers[5]);
        CHECK(view.matrix(stile::ShardMatrix::kQuery).n_rows == m.shape.attn_rows);
        if (bits != 32) CHECK(view.matrix(stile::ShardMatrix::kKey).centroids == buffer.dictionary().data());

        const stile::ShardView into = store.read_shard_into(l, s, bits, work.span());
        CHECK(same_bytes(std::span(work.data(), info.size), want.blob.bytes()));
        CHECK(reinterpret_cast<const std::byte*>(into.matrix(stile::ShardMatrix::kQuery).packed) == work.data());
      }
    }
    const stile::LayerResident r = store.read_resident(l);
    const auto& want = m.layers[l].resident;
    CHECK(same_values<float>(r.attn_out_bias, want[0]));
    CHECK(same_values<float>(r.ln1_gamma, want[1]));
    CHECK(same_values<float>(r.ln1_beta, want[2]));
    CHECK(same_values<float>(r.ffn_out_bias, want[3]));
    CHECK(same_values<float>(r.ln2_gamma, want[4]));
    CHECK(same_values<float>(r.ln2_beta, want[5]));
  }

  const stile::EmbeddingResident e = store.read_embeddings();
  CHECK(same_values<float>(e.position, m.position));
  CHECK(same_values<float>(e.token_type, m.token_type));
  CHECK(same_values<float>(e.ln_gamma, m.ln_gamma));
  CHECK(same_values<float>(e.ln_beta, m.ln_beta));
  CHECK(store.read_vocab() == m.vocab);

  const std::size_t d = m.spec.hidden;
  const std::vector<std::int32_t> ids = {0, 7, 7, static_cast<std::int32_t>(m.spec.vocab - 1), 3};
  std::vector<float> rows(ids.size() * d);
  store.read_word_rows(ids, rows.data());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::span<const float> want(m.word.data() + static_cast<std::size_t>(ids[i]) * d, d);
    CHECK(same_values<float>(std::span<const float>(rows).subspan(i * d, d), want));
  }
  std::vector<std::int32_t> all(m.spec.vocab);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int32_t>(i);
  std::vector<float> table(all.size() * d);
  store.read_word_rows(all, table.data());
  CHECK(same_values<float>(table, m.word));

  // Resident: metadata and the row checksum table, not the tables themselves.
  CHECK(store.resident_bytes() >= m.spec.vocab * sizeof(std::uint32_t));
  CHECK(store.resident_bytes() < store.file_size());
}

}  // namespace

TEST_CASE("shard store: everything written reads back byte for byte", "[io][shard_store]") {
  const Written& w = written();
  CHECK(w.bytes.size() % stile::kShardStoreAlign != 0);  // the manifest ends the file unpadded
  CHECK(w.dir.count_files() == 1);                       // no temporary file left behind
  SECTION("from a file") { check_everything(ShardStore::open(w.store), w.model); }
  SECTION("from memory") { check_everything(ShardStore::from_memory(w.bytes, "model.stile"), w.model); }
  SECTION("the same bytes from the same input") {
    TempDir dir;
    write_model(make_model(kSpec, 42), dir.path / "again.stile");
    CHECK(same_bytes(read_bytes(dir.path / "again.stile"), w.bytes));
  }
}

TEST_CASE("shard store: the header and manifest are what docs/format.md says", "[io][shard_store]") {
  const std::vector<std::byte>& bytes = written().bytes;
  REQUIRE(bytes.size() > stile::kShardStoreHeaderBytes);
  CHECK(std::memcmp(bytes.data(), "STILESHD", 8) == 0);
  CHECK(detail::load_le(bytes.data() + 8, 4) == 1);
  CHECK(detail::load_le(bytes.data() + 12, 4) == 4096);
  CHECK(detail::load_le(bytes.data() + 32, 8) == bytes.size());
  for (std::size_t i = 56; i < 4096; ++i) REQUIRE(bytes[i] == std::byte{0});
  const Opened o = split(bytes);
  CHECK(o.header.manifest_offset % 4096 == 0);
  CHECK(o.header.manifest_offset + o.header.manifest_size == bytes.size());
  CHECK(o.header.manifest_checksum ==
        detail::xxh3(std::span(bytes).subspan(o.header.manifest_offset, o.header.manifest_size)));
  const nlohmann::json& m = o.manifest;
  CHECK(m.at("format") == "stile-shards");
  CHECK(m.at("version") == 1);
  CHECK(m.at("config") == nlohmann::json::parse(written().model.config));
  CHECK(m.at("shards_per_layer") == kSpec.shards);
  CHECK(m.at("bits") == nlohmann::json(kSpec.bits));
  CHECK(m.at("layers").size() == kSpec.layers);
  const nlohmann::json& v = m.at("layers")[1].at("shards")[2].at("versions")[3];
  CHECK(v.at("bits") == kSpec.bits[3]);
  CHECK(v.at("checksum").get<std::string>().size() == 16);
  CHECK(v.at("dictionary").size() == (std::size_t{1} << kSpec.bits[3]));
  CHECK(v.at("outliers").size() == 6);
  const nlohmann::json& word = m.at("embeddings").at("word");
  CHECK(word.at("rows") == kSpec.vocab);
  CHECK(word.at("cols") == kSpec.hidden);
  // The row checksum of row 5: low 32 bits of XXH3-64 of its bytes.
  const std::uint64_t row5 = word.at("offset").get<std::uint64_t>() + 5 * kSpec.hidden * 4;
  const std::uint64_t table = word.at("row_checksums").at("offset").get<std::uint64_t>();
  CHECK(detail::load_le(bytes.data() + table + 5 * 4, 4) ==
        static_cast<std::uint32_t>(detail::xxh3(std::span(bytes).subspan(row5, kSpec.hidden * 4))));
}

TEST_CASE("shard store: float dictionaries survive JSON exactly", "[io][shard_store]") {
  Rng rng{7};
  for (int i = 0; i < 100000; ++i) {
    const float f = i < 4 ? std::array<float, 4>{0.1f, -0.0f, std::numeric_limits<float>::denorm_min(),
                                                 std::numeric_limits<float>::max()}[static_cast<std::size_t>(i)]
                          : rng.any_finite();
    const std::string text = nlohmann::json(static_cast<double>(f)).dump();
    const float back = static_cast<float>(nlohmann::json::parse(text).get<double>());
    REQUIRE(std::bit_cast<std::uint32_t>(back) == std::bit_cast<std::uint32_t>(f));
  }
}

TEST_CASE("shard store: damaged headers are refused", "[io][shard_store]") {
  const std::vector<std::byte>& good = written().bytes;
  auto open_bytes = [](const std::vector<std::byte>& bytes) {
    return error_or_none([&] { (void)ShardStore::from_memory(bytes, "model.stile"); });
  };

  SECTION("bad magic") {
    std::vector<std::byte> bytes = good;
    bytes[3] = std::byte{'X'};
    const std::string e = open_bytes(bytes);
    CHECK_THAT(e, Contains("stile: model.stile:") && Contains("bad magic"));
    CHECK_THAT(open_bytes({}), Contains("bad magic"));
  }
  SECTION("unknown format version") {
    std::vector<std::byte> bytes = good;
    detail::store_le(bytes.data() + 8, 3, 4);
    CHECK_THAT(open_bytes(bytes), Contains("model.stile") && Contains("format version 3 is not supported") &&
                                      Contains("supports versions 1 to 2") && Contains("convert it again"));
  }
  SECTION("truncated store") {
    TempDir dir;
    const fs::path cut = dir.path / "cut.stile";
    for (const std::size_t size : {good.size() / 2, good.size() - 1, std::size_t{4096}, std::size_t{100}}) {
      write_bytes(cut, std::span(good).first(size));
      INFO("cut to " << size << " bytes");
      REQUIRE_THROWS_WITH(ShardStore::open(cut), Contains("cut.stile") && Contains("truncated"));
    }
  }
  SECTION("header checksum") {
    std::vector<std::byte> bytes = good;
    bytes[17] ^= std::byte{1};  // inside the manifest offset
    CHECK_THAT(open_bytes(bytes), Contains("header checksum mismatch"));
  }
  SECTION("reserved header bytes") {
    std::vector<std::byte> bytes = good;
    bytes[1000] = std::byte{1};
    CHECK_THAT(open_bytes(bytes), Contains("byte 1000 of the header is not zero"));
  }
  SECTION("manifest checksum") {
    std::vector<std::byte> bytes = good;
    bytes[bytes.size() - 10] ^= std::byte{0x20};
    CHECK_THAT(open_bytes(bytes), Contains("manifest checksum mismatch"));
  }
  SECTION("appended bytes") {
    std::vector<std::byte> bytes = good;
    bytes.push_back(std::byte{0});
    CHECK_THAT(open_bytes(bytes), Contains("the header says the file is"));
  }
  SECTION("checksums can be skipped, bounds cannot") {
    std::vector<std::byte> bytes = good;
    bytes[bytes.size() - 10] ^= std::byte{0x20};  // inside the manifest: still valid JSON?
    stile::ShardStoreOptions lax;
    lax.verify_checksums = false;
    // Either it still parses (a digit changed) or it is refused; it never reads outside the file.
    try {
      const ShardStore s = ShardStore::from_memory(bytes, "model.stile", lax);
      (void)s.read_vocab();
    } catch (const stile::Error&) {
    }
  }
}

TEST_CASE("shard store: a manifest that lies is refused even with a valid checksum", "[io][shard_store]") {
  auto version = [](nlohmann::json& m, std::size_t l, std::size_t s, std::size_t i) -> nlohmann::json& {
    return m["layers"][l]["shards"][s]["versions"][i];
  };
  const std::uint64_t file_size = written().bytes.size();

  SECTION("a version past the end of the file") {
    const std::string e = error_with_manifest(
        [&](nlohmann::json& m) { version(m, 1, 0, 2)["offset"] = (file_size + 4096) / 4096 * 4096; });
    CHECK_THAT(e, Contains("stile: model.stile: layer 1 shard 0 at 4 bits: the version ends at byte") &&
                      Contains("past the end of the file"));
  }
  SECTION("offset + size overflows") {
    const std::string e = error_with_manifest(
        [&](nlohmann::json& m) { version(m, 0, 1, 0)["offset"] = std::numeric_limits<std::uint64_t>::max() - 4095; });
    CHECK_THAT(e, Contains("layer 0 shard 1 at 2 bits") && Contains("past the end of the file"));
  }
  SECTION("a version inside the header") {
    const std::string e = error_with_manifest([&](nlohmann::json& m) { version(m, 0, 0, 0)["offset"] = 0; });
    CHECK_THAT(e, Contains("layer 0 shard 0 at 2 bits") && Contains("inside the 4096-byte header"));
  }
  SECTION("a version running into the manifest") {
    Opened o = split(written().bytes);
    const std::uint64_t manifest = o.header.manifest_offset;
    const std::string e = error_with_manifest([&](nlohmann::json& m) {
      version(m, 1, 3, 5)["offset"] = manifest - 4096;  // a 32-bit version is longer than 4096
    });
    CHECK_THAT(e, Contains("layer 1 shard 3 at 32 bits") && Contains("runs into the manifest"));
  }
  SECTION("an unaligned version") {
    const std::string e = error_with_manifest([&](nlohmann::json& m) {
      version(m, 0, 2, 1)["offset"] = version(m, 0, 2, 1)["offset"].get<std::uint64_t>() + 64;
    });
    CHECK_THAT(e, Contains("layer 0 shard 2 at 3 bits") && Contains("not a multiple of 4096"));
  }
  SECTION("two versions overlapping") {
    const std::string e =
        error_with_manifest([&](nlohmann::json& m) { version(m, 1, 1, 0)["offset"] = version(m, 1, 0, 0)["offset"]; });
    CHECK_THAT(e,
               Contains("layer 1 shard 0 at 2 bits") && Contains("layer 1 shard 1 at 2 bits") && Contains("overlap"));
  }
  SECTION("a size the layout does not give") {
    const std::string e = error_with_manifest([&](nlohmann::json& m) {
      version(m, 0, 0, 2)["size"] = version(m, 0, 0, 2)["size"].get<std::uint64_t>() + 64;
    });
    CHECK_THAT(e, Contains("layer 0 shard 0 at 4 bits") && Contains("its layout"));
  }
  SECTION("outlier counts that change the layout") {
    const std::string e = error_with_manifest([&](nlohmann::json& m) { version(m, 0, 3, 4)["outliers"][2] = 1000; });
    CHECK_THAT(e, Contains("layer 0 shard 3 at 6 bits") && Contains("impossible outlier count 1000 for value"));
    const std::string e32 = error_with_manifest([&](nlohmann::json& m) { version(m, 0, 3, 5)["outliers"][0] = 1; });
    CHECK_THAT(e32, Contains("layer 0 shard 3 at 32 bits") && Contains("32-bit versions have none"));
  }
  SECTION("a dictionary of the wrong size") {
    const std::string e = error_with_manifest([&](nlohmann::json& m) { version(m, 1, 2, 1)["dictionary"].erase(0); });
    CHECK_THAT(e, Contains("layer 1 shard 2 at 3 bits") && Contains("the dictionary has 7 entries, expected 8"));
  }
  SECTION("a version missing or out of order") {
    const std::string missing =
        error_with_manifest([&](nlohmann::json& m) { m["layers"][0]["shards"][1]["versions"].erase(3); });
    CHECK_THAT(missing, Contains("layer 0 shard 1 has 5 versions") && Contains("[2, 3, 4, 5, 6, 32]"));
    const std::string swapped =
        error_with_manifest([&](nlohmann::json& m) { std::swap(version(m, 0, 1, 0), version(m, 0, 1, 1)); });
    CHECK_THAT(swapped, Contains("layer 0 shard 1: version 0 is at 3 bits, expected 2"));
  }
  SECTION("bits not in the supported set, or not increasing") {
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["bits"][1] = 7; }), Contains("not a supported bitwidth"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { std::swap(m["bits"][0], m["bits"][1]); }),
               Contains("not strictly increasing"));
  }
  SECTION("layer and shard counts against the config") {
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["layers"].erase(1); }),
               Contains("lists 1 layers, the config has num_hidden_layers = 2"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["shards_per_layer"] = 3; }),
               Contains("\"shards_per_layer\" is 3, which does not divide"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["layers"][1]["shards"].erase(0); }),
               Contains("layer 1 lists 3 shards"));
  }
  SECTION("a config whose dimensions overflow or disagree") {
    CHECK_THAT(
        error_with_manifest([](nlohmann::json& m) { m["config"]["vocab_size"] = std::uint64_t{1} << 62; }),
        Contains("manifest \"config\"") && Contains("\"vocab_size\" is 4611686018427387904, larger than the limit"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["config"]["num_attention_heads"] = 5; }),
               Contains("not divisible by num_attention_heads 5"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["config"]["hidden_size"] = 64; }),
               Contains("the word embeddings: the table is 50 x 32"));
  }
  SECTION("resident sizes against the config") {
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["layers"][0]["resident"]["size"] = 4; }),
               Contains("layer 0 resident block: the manifest says 4 bytes, the config needs 768"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["embeddings"]["position"]["size"] = 4; }),
               Contains("the position embeddings: the manifest says 4 bytes"));
  }
  SECTION("malformed fields") {
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["format"] = "other"; }), Contains("\"format\""));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["version"] = 2; }),
               Contains("the manifest says format version 2 but the header says 1"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["vocab"]["checksum"] = 12; }),
               Contains("\"checksum\" must be 16 lowercase hex digits"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m["vocab"]["offset"] = -4096; }),
               Contains("\"offset\" must be a non-negative integer"));
    CHECK_THAT(error_with_manifest([](nlohmann::json& m) { m.erase("embeddings"); }),
               Contains("manifest: missing \"embeddings\""));
    CHECK_THAT(error_with_manifest([&](nlohmann::json& m) { version(m, 0, 0, 0)["dictionary"][0] = "x"; }),
               Contains("is not a finite float"));
  }
  SECTION("the unchanged manifest, resealed, still opens") {
    const std::string e = error_with_manifest([](nlohmann::json&) {});
    CHECK(e == "(no error)");
  }
}

TEST_CASE("shard store: damaged sections are caught when read", "[io][shard_store]") {
  const ShardStore good = ShardStore::open(written().store);

  SECTION("a flipped byte inside a shard version") {
    std::vector<std::byte> bytes = written().bytes;
    bytes[good.version_info(1, 2, 4).offset + 10] ^= std::byte{0x10};
    const ShardStore store = ShardStore::from_memory(bytes, "model.stile");  // the manifest is intact
    REQUIRE_THROWS_WITH(store.read_shard(1, 2, 4),
                        Contains("stile: model.stile: layer 1 shard 2 at 4 bits") && Contains("checksum mismatch"));
    CHECK_NOTHROW(store.read_shard(1, 2, 5));
    CHECK_NOTHROW(store.read_shard(1, 1, 4));
  }
  SECTION("a flipped byte in a word row, a resident block, the vocabulary") {
    std::vector<std::byte> bytes = written().bytes;
    const auto& m = good.manifest();
    bytes[m.word.offset + 7 * kSpec.hidden * 4 + 3] ^= std::byte{1};
    bytes[m.layers[1].resident.offset] ^= std::byte{1};
    bytes[m.vocab.offset] ^= std::byte{1};
    const ShardStore store = ShardStore::from_memory(bytes, "model.stile");
    std::vector<float> row(kSpec.hidden);
    const std::vector<std::int32_t> seven = {7}, six = {6};
    REQUIRE_THROWS_WITH(store.read_word_rows(seven, row.data()), Contains("word-embedding row 7: checksum mismatch"));
    CHECK_NOTHROW(store.read_word_rows(six, row.data()));
    REQUIRE_THROWS_WITH(store.read_resident(1), Contains("layer 1 resident block: checksum mismatch"));
    CHECK_NOTHROW(store.read_resident(0));
    REQUIRE_THROWS_WITH(store.read_vocab(), Contains("the vocabulary: checksum mismatch"));
  }
  SECTION("bad requests") {
    std::vector<float> row(2 * kSpec.hidden);
    const std::vector<std::int32_t> outside = {3, 50}, negative = {-1};
    REQUIRE_THROWS_WITH(good.read_word_rows(outside, row.data()),
                        Contains("token id 50 (at position 1) is outside the vocabulary of 50 rows"));
    REQUIRE_THROWS_WITH(good.read_word_rows(negative, row.data()), Contains("token id -1"));
    REQUIRE_THROWS_WITH(good.read_shard(2, 0, 4), Contains("layer 2 does not exist (the store has 2 layers)"));
    REQUIRE_THROWS_WITH(good.read_shard(0, 4, 4), Contains("shard 4 of layer 0 does not exist"));
    REQUIRE_THROWS_WITH(good.read_shard(0, 0, 7),
                        Contains("layer 0 shard 0 at 7 bits: the store has no versions at 7 bits"));
    std::vector<std::byte> small(64);
    REQUIRE_THROWS_WITH(good.read_shard_into(0, 0, 32, small),
                        Contains("layer 0 shard 0 at 32 bits: the buffer holds 64 bytes"));
  }
  SECTION("a store truncated after it was opened") {
    TempDir dir;
    const fs::path copy = dir.path / "shrinking.stile";
    fs::copy_file(written().store, copy);
    const ShardStore store = ShardStore::open(copy);
    fs::resize_file(copy, 8192);
    REQUIRE_THROWS_WITH(store.read_shard(1, 0, 32), Contains("shrinking.stile") &&
                                                        Contains("reading layer 1 shard 0 at 32 bits") &&
                                                        Contains("truncated after it was opened"));
    std::vector<float> row(kSpec.hidden);
    const std::vector<std::int32_t> last = {49};
    REQUIRE_THROWS_WITH(store.read_word_rows(last, row.data()), Contains("reading word-embedding row 49"));
    REQUIRE_THROWS_WITH(store.read_embeddings(), Contains("truncated after it was opened"));
    // Another store is not affected.
    const stile::ShardBuffer other = good.read_shard(1, 0, 32);
    CHECK(same_bytes(other.bytes(), written().model.layers[1].shards[0][5].blob.bytes()));
  }
  SECTION("not a file") {
    REQUIRE_THROWS_WITH(ShardStore::open("/nonexistent/dir/model.stile"),
                        Contains("/nonexistent/dir/model.stile: cannot open"));
    REQUIRE_THROWS_WITH(ShardStore::open(fs::temp_directory_path()), Contains("is not a regular file"));
  }
}

TEST_CASE("shard store writer: validates its input and never leaves a partial file", "[io][shard_store]") {
  const Model& m = written().model;
  TempDir dir;
  const fs::path dest = dir.path / "out.stile";
  const std::string old = "the previous store";
  { std::ofstream(dest) << old; }
  auto dest_untouched = [&] {
    std::ifstream in(dest);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text == old && dir.count_files() == 1;
  };

  SECTION("dropped without finish") {
    {
      ShardStoreWriter writer(dest, m.config, m.spec.shards, m.spec.bits, m.quantizer);
      writer.add_vocab(m.vocab);
      writer.add_embeddings(m.word, m.position, m.token_type, m.ln_gamma, m.ln_beta);
      REQUIRE(fs::exists(writer.temp_path()));
      CHECK(writer.temp_path().parent_path() == dir.path);
      CHECK(dir.count_files() == 2);
    }
    CHECK(dest_untouched());
  }
  SECTION("a throwing call removes the temporary file, and the writer refuses more") {
    ShardStoreWriter writer(dest, m.config, m.spec.shards, m.spec.bits, m.quantizer);
    writer.add_vocab(m.vocab);
    writer.add_embeddings(m.word, m.position, m.token_type, m.ln_gamma, m.ln_beta);
    const fs::path temp = writer.temp_path();
    auto shards = m.layers[0].shards;
    shards[1][2].blob = std::span(shards[1][2].blob.bytes()).first(64);
    REQUIRE_THROWS_WITH(writer.add_layer(m.layers[0].resident, shards, nullptr),
                        Contains("out.stile: layer 0 shard 1 at 4 bits: the blob is 64 bytes"));
    CHECK_FALSE(fs::exists(temp));
    CHECK(dest_untouched());
    REQUIRE_THROWS_WITH(writer.add_layer(m.layers[0].resident, m.layers[0].shards, nullptr),
                        Contains("an earlier error abandoned this store"));
    REQUIRE_THROWS_WITH(writer.finish(), Contains("abandoned"));
    CHECK(dest_untouched());
  }
  SECTION("finish before every layer is added") {
    ShardStoreWriter writer(dest, m.config, m.spec.shards, m.spec.bits, m.quantizer);
    writer.add_vocab(m.vocab);
    writer.add_embeddings(m.word, m.position, m.token_type, m.ln_gamma, m.ln_beta);
    writer.add_layer(m.layers[0].resident, m.layers[0].shards, m.layers[0].stats);
    REQUIRE_THROWS_WITH(writer.finish(), Contains("finish: 1 of the model's 2 layers were added"));
    CHECK(dest_untouched());
  }
  SECTION("bad versions") {
    auto attempt = [&](auto edit) {
      ShardStoreWriter writer(dest, m.config, m.spec.shards, m.spec.bits, m.quantizer);
      auto shards = m.layers[0].shards;
      edit(shards);
      return error_or_none([&] { writer.add_layer(m.layers[0].resident, shards, nullptr); });
    };
    using Shards = std::vector<std::vector<ShardStoreWriter::Version>>;
    CHECK_THAT(attempt([](Shards& s) { s[0][1].dictionary.pop_back(); }),
               Contains("layer 0 shard 0 at 3 bits: the dictionary has 7 entries, expected 8"));
    CHECK_THAT(attempt([](Shards& s) { s[0][1].dictionary[0] = std::numeric_limits<float>::quiet_NaN(); }),
               Contains("not finite"));
    CHECK_THAT(attempt([](Shards& s) { std::swap(s[2][0], s[2][1]); }),
               Contains("layer 0 shard 2: version 0 is at 3 bits, expected 2"));
    CHECK_THAT(attempt([](Shards& s) { s[3].pop_back(); }), Contains("layer 0 shard 3: 5 versions given"));
    CHECK_THAT(attempt([](Shards& s) { s.pop_back(); }), Contains("layer 0: 3 shards given, the store has 4"));
    CHECK_THAT(attempt([](Shards& s) { s[0][5].outliers[0] = 1; }), Contains("impossible outlier count 1"));
    CHECK_THAT(attempt([&](Shards& s) {
                 // Outlier keys out of order: the structure ShardView::parse checks.
                 ShardStoreWriter::Version& v = s[1][0];
                 std::vector<std::byte> bytes(v.blob.bytes().begin(), v.blob.bytes().end());
                 v.outliers = {2, 0, 0, 0, 0, 0};
                 const auto layout = stile::shard_version_layout(m.shape, 2, v.outliers);
                 bytes.resize(layout.total);
                 const std::uint32_t keys[2] = {5, 3};
                 std::memcpy(bytes.data() + layout.outlier_keys[0].offset, keys, sizeof(keys));
                 v.blob = std::move(bytes);
               }),
               Contains("layer 0 shard 1 at 2 bits: outlier 1 of query has a bad position"));
    CHECK(dest_untouched());
  }
  SECTION("bad construction and embeddings") {
    CHECK_THAT(error_or_none([&] { ShardStoreWriter w(dest, m.config, 3, m.spec.bits); }),
               Contains("3 shards per layer do not divide"));
    CHECK_THAT(error_or_none([&] {
                 ShardStoreWriter w(dest, m.config, 4, {4, 2});
               }),
               Contains("not strictly increasing"));
    CHECK_THAT(error_or_none([&] { ShardStoreWriter w(dest, m.config, 4, {7}); }), Contains("7 bits is not supported"));
    CHECK_THAT(error_or_none([&] { ShardStoreWriter w(dest, "{", 4, {4}); }), Contains("out.stile: config.json"));
    CHECK_THAT(error_or_none([&] {
                 ShardStoreWriter w(dest, m.config, 4, {4});
                 w.add_embeddings(m.position, m.position, m.token_type, m.ln_gamma, m.ln_beta);
               }),
               Contains("the word embeddings: 512 floats given, the config needs vocab_size x hidden_size = 1600"));
    CHECK_THAT(error_or_none([&] { ShardStoreWriter w(dir.path / "no" / "such" / "dir.stile", m.config, 4, {4}); }),
               Contains("cannot create a temporary file"));
    CHECK(dest_untouched());
  }
  SECTION("a finished store replaces the old file") {
    write_model(m, dest);
    CHECK(dir.count_files() == 1);
    CHECK(same_bytes(read_bytes(dest), written().bytes));
  }
}

// Writes the fuzz seeds (run by hand; the outputs are committed): a complete small store, and
// its manifest alone (fuzz_shard_store reads input that does not start with the magic as a
// manifest, which skips the checksums).
TEST_CASE("write the fuzz seeds of fuzz_shard_store", "[.make-fuzz-seeds]") {
  const fs::path dir = fs::path(STILE_TEST_DATA_DIR).parent_path() / "fuzz_seeds_store";
  fs::create_directories(dir);
  const Model m = make_model(kSeedSpec, 1);
  write_model(m, dir / "tiny.stile");
  const std::vector<std::byte> bytes = read_bytes(dir / "tiny.stile");
  REQUIRE(bytes.size() < 64 * 1024);
  const Opened o = split(bytes);
  write_bytes(dir / "tiny_manifest.json", std::span(bytes).subspan(o.header.manifest_offset, o.header.manifest_size));
  check_everything(ShardStore::open(dir / "tiny.stile"), m);
}
