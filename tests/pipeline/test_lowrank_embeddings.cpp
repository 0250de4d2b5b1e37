// Clustered low-rank word embeddings (quant/lowrank_factorize.hpp, quant/lowrank_table.hpp, the
// store's format version 2 and the engine's word rows): every reconstructed row against U[row] V
// computed naively from the factors; full-rank clusters exact; a store whose clusters are all full
// gives the engine the same output as the dense store; the rank search under its budget; bad
// ranks, truncated factors and mismatched shapes refused with the file named.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "stile/engine.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/pipeline/word_rows.hpp"
#include "stile/quant/lowrank_factorize.hpp"
#include "stile/quant/lowrank_table.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/store/shard_store.hpp"
#include "support/error_of.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using stile::quant::LowRankWordTable;
using stile::quant::WordRowCodec;

namespace {

constexpr std::size_t kHidden = 32, kVocab = 200;

void write_checkpoint(const fs::path& dir) {
  stile_test::Rng rng{2121};
  const auto unit = [&] { return static_cast<float>(rng()); };
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.05f, .embeddings = 0.05f, .matrices = 0.05f, .biases = 0.05f, .layer_norm = 0.05f};
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";  // the engine's tokenizer needs these
  for (std::size_t i = 5; i < kVocab; ++i) vocab += "tok" + std::to_string(i) + "\n";
  stile_test::write_random_bert(
      dir, {kHidden, 2, 4, 64, kVocab, 64}, scales, [&] { return unit() + unit() + unit(); },
      [](const fs::path&, bool written) { REQUIRE(written); }, vocab);
}

// Token counts that favour low ids (a Zipf-like corpus), some tokens unseen.
std::vector<double> counts() {
  std::vector<double> c(kVocab, 0.0);
  for (std::size_t i = 0; i < kVocab; ++i) c[i] = i % 7 == 3 ? 0.0 : 1000.0 / double(i + 1);
  return c;
}

std::vector<float> random_table(std::size_t rows, std::size_t d, std::uint64_t seed) {
  stile_test::Rng rng{seed};
  std::vector<float> t(rows * d);
  for (float& x : t) x = rng.unit();
  return t;
}

// Every cluster full (rank d, fp32): the table exactly.
LowRankWordTable all_full(std::span<const float> table, std::size_t rows, std::size_t d) {
  LowRankWordTable t;
  t.rows = rows;
  t.cols = d;
  const std::vector<std::size_t> ends = {0, 10, 60, rows};
  for (std::size_t i = 0; i + 1 < ends.size(); ++i) {
    stile::quant::LowRankCluster c;
    c.rank = d;
    for (std::size_t id = ends[i]; id < ends[i + 1]; ++id) {
      // Rows in reverse order inside the cluster, so the token map is not the identity.
      const std::size_t tok = ends[i + 1] - 1 - (id - ends[i]);
      c.tokens.push_back(static_cast<std::int32_t>(tok));
      c.u.insert(c.u.end(), table.begin() + std::ptrdiff_t(tok * d), table.begin() + std::ptrdiff_t((tok + 1) * d));
    }
    t.clusters.push_back(std::move(c));
  }
  return t;
}

struct Stores {
  stile_test::TempDir dir{"lowrank"};
  fs::path dense, full, lowrank, lowrank_f32;
  LowRankWordTable lowrank_table, lowrank_f32_table;
  std::vector<float> word;  // the checkpoint's table

  Stores() {
    write_checkpoint(dir.path);
    dense = dir.path / "dense.stile";
    full = dir.path / "full.stile";
    lowrank = dir.path / "lowrank.stile";
    lowrank_f32 = dir.path / "lowrank_f32.stile";
    stile::ConvertOptions o;
    o.bits = {4, 32};
    stile::convert_checkpoint(dir.path, dense, o);
    o.word_table = [&](std::span<const float> t, std::size_t rows, std::size_t d) {
      word.assign(t.begin(), t.end());
      return all_full(t, rows, d);
    };
    stile::convert_checkpoint(dir.path, full, o);
    for (const WordRowCodec codec : {WordRowCodec::kInt8, WordRowCodec::kF32}) {
      o.word_table = [&, codec](std::span<const float> t, std::size_t rows, std::size_t d) {
        stile::quant::LowRankOptions lr;
        lr.cluster_ends = {8, 50, 120};
        lr.budget = 0.5;
        lr.codec = codec;
        LowRankWordTable table = stile::quant::factorize_word_table(t, rows, d, counts(), lr);
        (codec == WordRowCodec::kInt8 ? lowrank_table : lowrank_f32_table) = table;
        return table;
      };
      stile::convert_checkpoint(dir.path, codec == WordRowCodec::kInt8 ? lowrank : lowrank_f32, o);
    }
  }
};

const Stores& stores() {
  static const Stores s;
  return s;
}

std::vector<float> all_rows(const stile::ShardStore& store) {
  std::vector<std::int32_t> ids(store.config().vocab_size);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> out(ids.size() * store.config().hidden);
  store.read_word_rows(ids, out.data());
  return out;
}

// Row `id` of the table as U[row] V computed here, in double, from the converter's factors (U
// decoded from its stored code first: the int8 rounding is the format's, not an error).
std::vector<double> naive_row(const LowRankWordTable& t, std::int32_t id) {
  for (const stile::quant::LowRankCluster& c : t.clusters) {
    const auto it = std::find(c.tokens.begin(), c.tokens.end(), id);
    if (it == c.tokens.end()) continue;
    const auto row = static_cast<std::size_t>(it - c.tokens.begin());
    std::vector<std::byte> coded(stile::quant::word_row_bytes(c.codec, c.rank));
    std::vector<float> u(c.rank);
    stile::quant::encode_word_row(c.codec, std::span(c.u).subspan(row * c.rank, c.rank), coded);
    stile::quant::decode_word_row(c.codec, coded, u);
    std::vector<double> out(t.cols, 0.0);
    for (std::size_t j = 0; j < t.cols; ++j) {
      if (c.full(t.cols)) {
        out[j] = u[j];
        continue;
      }
      for (std::size_t k = 0; k < c.rank; ++k) out[j] += double(u[k]) * double(c.v[k * t.cols + j]);
    }
    return out;
  }
  FAIL("token " << id << " is in no cluster");
  return {};
}

double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

stile::Encoding tokens(std::initializer_list<std::int32_t> ids) {
  stile::Encoding e;
  for (const std::int32_t id : ids) {
    e.input_ids.push_back(id);
    e.token_type_ids.push_back(0);
    e.attention_mask.push_back(1);
  }
  return e;
}

// The store's bytes with its manifest edited (and the checksums fixed), opened from memory.
template <class Edit>
std::string error_with_manifest(const fs::path& path, Edit edit) {
  std::vector<std::byte> bytes(fs::file_size(path));
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
  }
  namespace detail = stile::shard_store_detail;
  stile::ShardStoreHeader h = detail::parse_header(std::span(bytes).first(4096), bytes.size(), "x");
  const auto* text = reinterpret_cast<const char*>(bytes.data() + h.manifest_offset);
  nlohmann::json m = nlohmann::json::parse(text, text + h.manifest_size);
  edit(m, h);
  const std::string out_text = m.dump();
  bytes.resize(static_cast<std::size_t>(h.manifest_offset));
  h.manifest_size = out_text.size();
  h.file_size = bytes.size() + out_text.size();
  h.manifest_checksum = detail::xxh3(std::as_bytes(std::span(out_text)));
  const std::vector<std::byte> header = detail::encode_header(h);
  std::copy(header.begin(), header.end(), bytes.begin());
  const auto* p = reinterpret_cast<const std::byte*>(out_text.data());
  bytes.insert(bytes.end(), p, p + out_text.size());
  return stile_test::error_or_none([&] { (void)stile::ShardStore::from_memory(bytes, "lowrank.stile"); });
}

}  // namespace

TEST_CASE("low-rank word table: every stored row is U[row] V of its cluster", "[lowrank]") {
  const Stores& s = stores();
  const std::vector<std::pair<fs::path, const LowRankWordTable*>> cases = {{s.lowrank, &s.lowrank_table},
                                                                           {s.lowrank_f32, &s.lowrank_f32_table}};
  for (const auto& [path, table] : cases) {
    const stile::ShardStore store = stile::ShardStore::open(path);
    REQUIRE(store.word_table_lowrank());
    CHECK(store.header().version == 2);
    const std::vector<float> rows = all_rows(store);
    for (std::int32_t id = 0; id < std::int32_t(kVocab); ++id) {
      const std::vector<double> want = naive_row(*table, id);
      for (std::size_t j = 0; j < kHidden; ++j) {
        REQUIRE(rows[std::size_t(id) * kHidden + j] == Approx(want[j]).margin(1e-5));
      }
    }
    // The stored size is the table's, and below the budget (half the dense table).
    CHECK(store.word_table_bytes() == table->bytes());
    CHECK(store.word_table_params() == table->params());
    CHECK(double(store.word_table_bytes()) <= 0.5 * kVocab * kHidden * 4);
    CHECK(table->reconstruct() == rows);
  }
}

TEST_CASE("low-rank word table: the rank search spends its budget where the weighted error falls most",
          "[lowrank]") {
  const std::vector<float> table = random_table(kVocab, kHidden, 5);
  stile::quant::LowRankOptions lr;
  lr.cluster_ends = {8, 50, 120};
  lr.codec = WordRowCodec::kF32;
  double last_error = 1e300;
  for (const double budget : {0.2, 0.4, 0.6, 0.9}) {
    lr.budget = budget;
    const LowRankWordTable t = stile::quant::factorize_word_table(table, kVocab, kHidden, counts(), lr);
    CHECK(double(t.bytes()) <= budget * kVocab * kHidden * 4);
    REQUIRE(t.clusters.size() == 4);
    CHECK(t.clusters[0].full(kHidden));
    // Cluster 0: the 8 most frequent tokens (ids 0..8, skipping the unseen 3), exact.
    CHECK(t.clusters[0].tokens == std::vector<std::int32_t>{0, 1, 2, 4, 5, 6, 7, 8});
    const std::vector<float> rec = t.reconstruct();
    double error = 0;
    const std::vector<double> c = counts();
    for (std::size_t id = 0; id < kVocab; ++id) {
      for (std::size_t j = 0; j < kHidden; ++j) {
        const double e = double(rec[id * kHidden + j]) - table[id * kHidden + j];
        error += (c[id] + 1) * e * e;
      }
    }
    for (const std::size_t id : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{8}}) {
      CHECK(std::equal(rec.begin() + std::ptrdiff_t(id * kHidden), rec.begin() + std::ptrdiff_t((id + 1) * kHidden),
                       table.begin() + std::ptrdiff_t(id * kHidden)));
    }
    CHECK(error < last_error);  // more budget, less weighted error
    last_error = error;
  }
  // A table of rank 3 in every cluster is found exactly with a budget for rank >= 3.
  std::vector<float> low(kVocab * kHidden, 0.0f);
  const std::vector<float> basis = random_table(3, kHidden, 9), coef = random_table(kVocab, 3, 10);
  for (std::size_t i = 0; i < kVocab; ++i)
    for (std::size_t k = 0; k < 3; ++k)
      for (std::size_t j = 0; j < kHidden; ++j) low[i * kHidden + j] += coef[i * 3 + k] * basis[k * kHidden + j];
  lr.budget = 0.5;
  const LowRankWordTable t = stile::quant::factorize_word_table(low, kVocab, kHidden, counts(), lr);
  const std::vector<float> rec = t.reconstruct();
  for (std::size_t i = 0; i < rec.size(); ++i) REQUIRE(rec[i] == Approx(low[i]).margin(1e-4));
  // The search stops where nothing is left to remove: no rank above what each cluster needs.
  for (std::size_t i = 1; i < t.clusters.size(); ++i) CHECK(t.clusters[i].rank >= 3);

  lr.budget = 0.01;
  CHECK_THAT(stile_test::error_or_none([&] { (void)stile::quant::factorize_word_table(table, kVocab, kHidden, counts(), lr); }),
             Contains("below the smallest table"));
  lr.budget = 0.5;
  lr.cluster_ends = {50, 8};
  CHECK_THAT(stile_test::error_or_none([&] { (void)stile::quant::factorize_word_table(table, kVocab, kHidden, counts(), lr); }),
             Contains("increase strictly"));
}

TEST_CASE("low-rank word table: full-rank clusters round-trip exactly, and the engine's output is the dense store's",
          "[lowrank][engine]") {
  const Stores& s = stores();
  const stile::ShardStore dense = stile::ShardStore::open(s.dense);
  const stile::ShardStore full = stile::ShardStore::open(s.full);
  CHECK(dense.header().version == 1);  // a dense table stays readable by version-1 readers
  REQUIRE(full.word_table_lowrank());
  CHECK(all_rows(full) == all_rows(dense));
  CHECK(all_rows(full) == s.word);

  stile::EngineOptions options;
  options.word_cache_bytes = 16 * kHidden * 4;
  stile::Engine a(s.dense, options), b(s.full, options), c(s.lowrank, options);
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 4, 32);
  for (const stile::Encoding& e : {tokens({2, 7, 7, 150, 3}), tokens({2, 199, 7, 3}), tokens({2, 7, 3})}) {
    const stile::EngineResult ra = a.run(e, plan), rb = b.run(e, plan), rc = c.run(e, plan);
    CHECK(ra.embedding == rb.embedding);
    CHECK(rb.timeline.word_rows_read == ra.timeline.word_rows_read);
    CHECK(cosine(ra.embedding, rc.embedding) > 0.9);
  }
}

TEST_CASE("low-rank word table: the word-row cache holds rows as stored, and nearby rows share a read",
          "[lowrank][engine]") {
  const Stores& s = stores();
  const stile::ShardStore store = stile::ShardStore::open(s.lowrank);
  stile::EngineOptions options;
  options.word_cache_bytes = 4096;
  stile::Engine engine(s.lowrank, options);
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 4, 32);
  const stile::Encoding e = tokens({2, 60, 61, 62, 190, 3});
  const stile::EngineResult cold = engine.run(e, plan);
  std::size_t stored = 0;
  for (const std::int32_t id : {2, 3, 60, 61, 62, 190}) stored += store.word_row_extent(std::size_t(id)).size;
  CHECK(cold.word_cache_held_bytes == stored);  // coded rows, not d floats each
  CHECK(cold.timeline.word_rows_read == 6);
  // The backend reads 4 KiB blocks or exact rows; either way rows a few bytes apart share reads.
  CHECK(cold.timeline.word_row_requests >= 1);
  CHECK(cold.timeline.word_row_requests < 6);
  // Rows 60, 61, 62 are in one cluster, a few bytes apart: one read, with or without alignment.
  for (const std::size_t alignment : {std::size_t{1}, std::size_t{4096}}) {
    const std::vector<stile::WordRowRead> reads =
        stile::plan_word_row_reads(store, alignment, std::vector<std::int32_t>{60, 61, 62});
    REQUIRE(reads.size() == 1);
    CHECK(reads[0].ids.size() == 3);
  }
  const stile::EngineResult warm = engine.run(e, plan);
  CHECK(warm.timeline.word_rows_read == 0);
  CHECK(warm.timeline.embed_bytes_read == 0);
  CHECK(warm.embedding == cold.embedding);  // rebuilt from the cached coded rows, the same
}

TEST_CASE("low-rank word table: bad ranks, truncated factors and mismatched shapes are refused", "[lowrank]") {
  const Stores& s = stores();
  const auto cluster = [](nlohmann::json& m, std::size_t i) -> nlohmann::json& {
    return m["embeddings"]["word"]["clusters"][i];
  };
  using H = stile::ShardStoreHeader;
  CHECK(error_with_manifest(s.lowrank, [](nlohmann::json&, H&) {}) == "(no error)");
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 1)["rank"] = 0; }),
             Contains("lowrank.stile: word-embedding cluster 1: bad rank 0"));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 1)["rank"] = kHidden + 1; }),
             Contains("bad rank 33"));
  CHECK_THAT(error_with_manifest(s.lowrank,
                                 [&](nlohmann::json& m, H&) {
                                   cluster(m, 2)["rank"] = cluster(m, 2)["rank"].get<int>() + 1;
                                 }),
             Contains("word-embedding cluster 2 V: the manifest says"));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 1)["v"]["size"] = 64; }),
             Contains("cluster 1 V: the manifest says 64 bytes"));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 1).erase("v"); }),
             Contains("cluster 1: missing \"v\""));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 0)["v"] = cluster(m, 1)["v"]; }),
             Contains("a full cluster (rank = hidden_size) has no \"v\""));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 1)["rows"] = 3; }),
             Contains("the clusters hold"));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 3)["rows"] = 1000; }),
             Contains("cluster 3: 1000 tokens"));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { cluster(m, 1)["codec"] = "int4"; }),
             Contains("\"codec\" is \"int4\""));
  CHECK_THAT(error_with_manifest(s.lowrank,
                                 [&](nlohmann::json& m, H&) { cluster(m, 3)["u_offset"] = 1ull << 40; }),
             Contains("cluster 3: U ends at byte"));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { m["embeddings"]["word"]["clusters"] = nlohmann::json::array(); }),
             Contains("0 clusters"));
  CHECK_THAT(error_with_manifest(s.lowrank, [&](nlohmann::json& m, H&) { m["embeddings"]["word"]["encoding"] = "pq"; }),
             Contains("\"encoding\" is \"pq\""));
  // A low-rank table in a version-1 store: the header and manifest say 1, the table needs 2.
  CHECK_THAT(error_with_manifest(s.lowrank,
                                 [&](nlohmann::json& m, H& h) {
                                   m["version"] = 1;
                                   h.version = 1;
                                 }),
             Contains("a low-rank table needs format version 2"));
  // A token map that sends two tokens to one row (its checksum made right): refused at open.
  {
    std::vector<std::byte> bytes(fs::file_size(s.lowrank));
    std::FILE* f = std::fopen(s.lowrank.c_str(), "rb");
    REQUIRE(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
    const stile::ShardStore store = stile::ShardStore::open(s.lowrank);
    const stile::ShardStoreSection map = store.manifest().word.token_map;
    std::memcpy(bytes.data() + map.offset + 4, bytes.data() + map.offset, 4);  // token 1 = token 0's row
    stile::ShardStoreOptions no_checks;
    no_checks.verify_checksums = false;
    CHECK_THAT(stile_test::error_or_none([&] { (void)stile::ShardStore::from_memory(bytes, "lowrank.stile", no_checks); }),
               Contains("lowrank.stile: the word-embedding token map sends two tokens to row"));
    CHECK_THAT(stile_test::error_or_none([&] { (void)stile::ShardStore::from_memory(bytes, "lowrank.stile"); }),
               Contains("the word-embedding token map: checksum mismatch"));
    // A truncated file: refused at open (its header names the size it should have).
    bytes.resize(bytes.size() - 100);
    CHECK_THAT(stile_test::error_or_none([&] { (void)stile::ShardStore::from_memory(bytes, "lowrank.stile"); }),
               Contains("truncated"));
  }
  // The writer refuses factors of the wrong shape before writing anything.
  stile_test::TempDir dir("lowrank_writer");
  stile::ConvertOptions o;
  o.bits = {32};
  const auto convert_with = [&](auto mutate) {
    o.word_table = [&](std::span<const float> t, std::size_t rows, std::size_t d) {
      LowRankWordTable table = all_full(t, rows, d);
      mutate(table);
      return table;
    };
    return stile_test::error_or_none([&] { stile::convert_checkpoint(s.dir.path, dir.path / "bad.stile", o); });
  };
  CHECK_THAT(convert_with([](LowRankWordTable& t) { t.clusters[1].u.pop_back(); }),
             Contains("bad.stile: word-embedding cluster 1: U has"));
  CHECK_THAT(convert_with([](LowRankWordTable& t) { t.clusters[1].rank = 0; }), Contains("bad rank 0"));
  CHECK_THAT(convert_with([](LowRankWordTable& t) { t.clusters[2].v.resize(3); }), Contains("V has 3 values"));
  CHECK_THAT(convert_with([](LowRankWordTable& t) { t.clusters[2].tokens.pop_back(); t.clusters[2].u.resize(t.clusters[2].u.size() - kHidden); }),
             Contains("has no row for token"));
  CHECK_THAT(convert_with([](LowRankWordTable& t) { t.clusters[1].tokens[0] = t.clusters[0].tokens[0]; }),
             Contains("in two clusters"));
  CHECK(!fs::exists(dir.path / "bad.stile"));
}

// tests/io/fuzz_seeds_store/tiny_lowrank.stile (and its manifest alone): a store of format version
// 2 with a low-rank word table (a full cluster, an int8 and an f32 low-rank one) for
// fuzz_shard_store. Run by hand: test_lowrank_embeddings "[make-fuzz-seeds]" (the same bytes every run).
TEST_CASE("write the low-rank fuzz seeds of fuzz_shard_store", "[.make-fuzz-seeds]") {
  const fs::path dir = fs::path(STILE_TEST_DATA_DIR).parent_path().parent_path() / "io" / "fuzz_seeds_store";
  stile_test::TempDir tmp("lowrank_seed");
  stile_test::Rng rng{21};
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.5f, .embeddings = 0.05f, .matrices = 0.05f, .biases = 0.05f, .layer_norm = 0.05f};
  stile_test::write_random_bert(
      tmp.path, {8, 1, 2, 8, 16, 4}, scales, [&] { return static_cast<float>(rng()); },
      [](const fs::path&, bool written) { REQUIRE(written); });
  stile::ConvertOptions o;
  o.bits = {32};  // small: every section takes a 4 KiB block
  o.shards = 1;
  o.word_table = [](std::span<const float> t, std::size_t rows, std::size_t d) {
    std::vector<double> c(rows);
    for (std::size_t i = 0; i < rows; ++i) c[i] = double(rows - i);
    stile::quant::LowRankOptions lr;
    lr.cluster_ends = {2, 8};
    lr.budget = 0.9;
    LowRankWordTable table = stile::quant::factorize_word_table(t, rows, d, c, lr);
    table.clusters[2].codec = WordRowCodec::kF32;
    return table;
  };
  const fs::path out = dir / "tiny_lowrank.stile";
  stile::convert_checkpoint(tmp.path, out, o);
  REQUIRE(fs::file_size(out) < 64 * 1024);
  const stile::ShardStore store = stile::ShardStore::open(out);
  REQUIRE(store.word_table_lowrank());
  std::vector<std::byte> bytes(fs::file_size(out));
  std::FILE* f = std::fopen(out.c_str(), "rb");
  REQUIRE(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  const auto& h = store.header();
  std::FILE* m = std::fopen((dir / "tiny_lowrank_manifest.json").c_str(), "wb");
  std::fwrite(bytes.data() + h.manifest_offset, 1, static_cast<std::size_t>(h.manifest_size), m);
  std::fclose(m);
}

TEST_CASE("a version-1 store written before version 2 existed still opens and reads", "[lowrank]") {
  // tests/io/fuzz_seeds_store/tiny.stile is committed from before this change.
  const fs::path old = fs::path(STILE_TEST_DATA_DIR).parent_path().parent_path() / "io" / "fuzz_seeds_store" / "tiny.stile";
  const stile::ShardStore store = stile::ShardStore::open(old);
  CHECK(store.header().version == 1);
  CHECK(!store.word_table_lowrank());
  const std::vector<float> rows = all_rows(store);
  CHECK(rows.size() == store.config().vocab_size * store.config().hidden);
  CHECK(store.word_table_bytes() == rows.size() * sizeof(float));
}
