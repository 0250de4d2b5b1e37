// The device profile (plan/device_profile.hpp): its lookups and their errors, its JSON round trip
// through a file, every kind of bad profile refused with a message naming the file, and a real
// (small) measurement on a tiny random BERT converted into a shard store on the spot, checked for
// structure only (timings on a shared machine prove nothing about each other).
#include "stile/plan/device_profile.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "stile/io/read_backend.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/calibrate/device_profiler.hpp"

using Catch::Contains;
using stile::DeviceProfile;
namespace fs = std::filesystem;

namespace {

// A directory in the temporary directory, removed when the test ends.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& stem) {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("stile_test_plan_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + stem);
    fs::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const stile::Error& e) {
    return e.what();
  }
  FAIL("expected a stile::Error");
  return {};
}

// 3 bitwidths, 3 length buckets, 4 shards; every value distinct so a lookup that picks the wrong
// cell is caught.
DeviceProfile sample_profile() {
  DeviceProfile p;
  p.machine = {{"cpu", "test"}, {"threads", 2}};
  p.bits = {2, 4, 32};
  p.io_ms = {0.25, 0.5, 3.0};
  p.shard_bytes = {1000.0, 2000.0, 16000.0};
  p.lengths = {16, 32, 64};
  p.shards_per_layer = 4;
  p.num_layers = 6;
  for (std::size_t b = 0; b < p.bits.size(); ++b) {
    auto& per_length = p.compute_ms.emplace_back();
    for (std::size_t i = 0; i < p.lengths.size(); ++i) {
      auto& per_m = per_length.emplace_back();
      for (std::size_t m = 1; m <= p.shards_per_layer; ++m) per_m.push_back(double(100 * b + 10 * i + m) / 7.0);
    }
  }
  return p;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// --- a tiny random BERT checkpoint (config.json, vocab.txt, model.safetensors) -----------------

struct TinySpec {
  std::size_t hidden = 32, layers = 2, heads = 4, intermediate = 64, vocab = 50, max_pos = 64, types = 2;
};

void write_checkpoint(const fs::path& dir, const TinySpec& s) {
  write_text(dir / "config.json", nlohmann::json{{"architectures", {"BertModel"}},
                                                 {"hidden_act", "gelu"},
                                                 {"hidden_size", s.hidden},
                                                 {"num_hidden_layers", s.layers},
                                                 {"num_attention_heads", s.heads},
                                                 {"intermediate_size", s.intermediate},
                                                 {"vocab_size", s.vocab},
                                                 {"max_position_embeddings", s.max_pos},
                                                 {"type_vocab_size", s.types},
                                                 {"layer_norm_eps", 1e-12},
                                                 {"model_type", "bert"}}
                                      .dump(2));
  std::string vocab;
  for (std::size_t i = 0; i < s.vocab; ++i) vocab += "tok" + std::to_string(i) + "\n";
  write_text(dir / "vocab.txt", vocab);

  std::uint64_t state = 12345;
  auto unit = [&] {  // splitmix64 -> [-1, 1)
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return float(double((z ^ (z >> 31)) >> 11) * 0x1p-52 - 1.0);
  };
  nlohmann::json header = nlohmann::json::object();
  std::vector<float> data;
  auto add = [&](const std::string& name, std::vector<std::size_t> shape, float scale, float offset) {
    std::size_t n = 1;
    for (const std::size_t x : shape) n *= x;
    const std::size_t begin = data.size() * sizeof(float);
    for (std::size_t i = 0; i < n; ++i) data.push_back(offset + scale * (unit() + unit() + unit()));
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size() * sizeof(float)}}};
  };
  const std::size_t d = s.hidden, ff = s.intermediate;
  add("embeddings.word_embeddings.weight", {s.vocab, d}, 0.05f, 0.0f);
  add("embeddings.position_embeddings.weight", {s.max_pos, d}, 0.05f, 0.0f);
  add("embeddings.token_type_embeddings.weight", {s.types, d}, 0.05f, 0.0f);
  add("embeddings.LayerNorm.weight", {d}, 0.05f, 1.0f);
  add("embeddings.LayerNorm.bias", {d}, 0.05f, 0.0f);
  for (std::size_t l = 0; l < s.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      add(p + "attention.self." + qkv + ".weight", {d, d}, 0.05f, 0.0f);
      add(p + "attention.self." + qkv + ".bias", {d}, 0.05f, 0.0f);
    }
    add(p + "attention.output.dense.weight", {d, d}, 0.05f, 0.0f);
    add(p + "attention.output.dense.bias", {d}, 0.05f, 0.0f);
    add(p + "attention.output.LayerNorm.weight", {d}, 0.05f, 1.0f);
    add(p + "attention.output.LayerNorm.bias", {d}, 0.05f, 0.0f);
    add(p + "intermediate.dense.weight", {ff, d}, 0.05f, 0.0f);
    add(p + "intermediate.dense.bias", {ff}, 0.05f, 0.0f);
    add(p + "output.dense.weight", {d, ff}, 0.05f, 0.0f);
    add(p + "output.dense.bias", {d}, 0.05f, 0.0f);
    add(p + "output.LayerNorm.weight", {d}, 0.05f, 1.0f);
    add(p + "output.LayerNorm.bias", {d}, 0.05f, 0.0f);
  }
  std::string head = header.dump();
  while (head.size() % 8 != 0) head += ' ';
  std::ofstream out(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  const std::uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << head;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  REQUIRE(out.good());
}

// One converted store for the whole program.
struct TinyStore {
  TempDir dir{"store"};
  fs::path path = dir.path / "tiny.stile";
  TinyStore() {
    write_checkpoint(dir.path, TinySpec{});
    stile::ConvertOptions options;
    options.bits = {2, 3, 4, 5, 6, 32};
    stile::convert_checkpoint(dir.path, path, options);
  }
};

const TinyStore& tiny_store() {
  static const TinyStore s;
  return s;
}

}  // namespace

TEST_CASE("device profile: length buckets and lookups", "[plan][device_profile]") {
  const DeviceProfile p = sample_profile();
  CHECK(p.length_bucket(0) == 16);
  CHECK(p.length_bucket(1) == 16);
  CHECK(p.length_bucket(16) == 16);
  CHECK(p.length_bucket(17) == 32);
  CHECK(p.length_bucket(32) == 32);
  CHECK(p.length_bucket(33) == 64);
  CHECK(p.length_bucket(64) == 64);
  CHECK(p.length_bucket(65) == 64);  // past the largest: the largest
  CHECK(p.length_bucket(100000) == 64);

  CHECK(p.io_ms_at(2) == 0.25);
  CHECK(p.io_ms_at(32) == 3.0);
  CHECK(p.compute_ms_at(4, 20, 3) == p.compute_ms[1][1][2]);
  CHECK(p.compute_ms_at(32, 0, 1) == p.compute_ms[2][0][0]);
  CHECK(p.compute_ms_at(2, 500, 4) == p.compute_ms[0][2][3]);

  CHECK_THAT(error_of([&] { (void)p.io_ms_at(3); }), Contains("no measurements at 3 bits (it has [2, 4, 32])"));
  CHECK_THAT(error_of([&] { (void)p.compute_ms_at(5, 16, 1); }), Contains("no measurements at 5 bits"));
  CHECK_THAT(error_of([&] { (void)p.compute_ms_at(4, 16, 0); }), Contains("m = 0 shards is outside 1..4"));
  CHECK_THAT(error_of([&] { (void)p.compute_ms_at(4, 16, 5); }), Contains("m = 5 shards is outside 1..4"));
  CHECK_THAT(error_of([] { (void)DeviceProfile{}.length_bucket(3); }), Contains("no length buckets"));
}

TEST_CASE("device profile: save and load round trip, no temporary file left", "[plan][device_profile]") {
  TempDir dir("roundtrip");
  const fs::path path = dir.path / "dev.profile.json";
  const DeviceProfile p = sample_profile();
  p.save(path);
  const DeviceProfile q = DeviceProfile::load(path);
  CHECK(q.to_json() == p.to_json());
  CHECK(q.bits == p.bits);
  CHECK(q.io_ms == p.io_ms);  // bit for bit: doubles survive the JSON text exactly
  CHECK(q.shard_bytes == p.shard_bytes);
  CHECK(q.lengths == p.lengths);
  CHECK(q.compute_ms == p.compute_ms);
  CHECK(q.shards_per_layer == 4);
  CHECK(q.num_layers == 6);
  CHECK(q.machine == p.machine);
  // The keys in the documented order, one line per array of numbers.
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.starts_with("{\n  \"format\": \"stile-device-profile\",\n  \"version\": 1,\n  \"machine\": {"));
  CHECK_THAT(text, Contains("\n  \"bits\": [2,4,32],\n"));
  CHECK(nlohmann::json::parse(text) == p.to_json());
  // Saving again replaces the file; nothing but the profile is in the directory.
  p.save(path);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);

  const fs::path nowhere = dir.path / "no" / "such" / "dir" / "p.json";
  CHECK_THAT(error_of([&] { p.save(nowhere); }), Contains(nowhere.string()));
  CHECK_THAT(error_of([&] { (void)DeviceProfile::load(dir.path / "missing.json"); }),
             Contains("missing.json") && Contains("cannot read the device profile"));
}

TEST_CASE("device profile: from_json refuses every kind of bad profile, naming the file", "[plan][device_profile]") {
  const nlohmann::json good = sample_profile().to_json();
  const std::string file = "dev.profile.json";
  auto error_with = [&](const std::function<void(nlohmann::json&)>& damage) {
    nlohmann::json j = good;
    damage(j);
    return error_of([&] { (void)DeviceProfile::from_json(j, file); });
  };
  CHECK_NOTHROW(DeviceProfile::from_json(good, file));
  const auto names_file = Contains("stile: dev.profile.json: device profile: ");

  SECTION("not an object, wrong format or version, unknown key") {
    CHECK_THAT(error_of([&] { (void)DeviceProfile::from_json(nlohmann::json::array(), file); }),
               names_file && Contains("must be a JSON object"));
    CHECK_THAT(error_with([](auto& j) { j["format"] = "stile-shards"; }),
               names_file && Contains("expected \"stile-device-profile\" (not a device profile)"));
    CHECK_THAT(error_with([](auto& j) { j["version"] = 2; }), names_file && Contains("version 2 is not supported"));
    CHECK_THAT(error_with([](auto& j) { j["io_msec"] = 1; }), names_file && Contains("unknown key \"io_msec\""));
    CHECK_THAT(error_with([](auto& j) { j["machine"] = "laptop"; }),
               names_file && Contains("\"machine\" must be a JSON object"));
  }
  SECTION("missing keys") {
    for (const char* key : {"format", "version", "machine", "bits", "io_ms", "shard_bytes", "lengths",
                            "shards_per_layer", "num_layers", "compute_ms"}) {
      INFO(key);
      CHECK_THAT(error_with([&](auto& j) { j.erase(key); }),
                 names_file && Contains(std::string("missing \"") + key + "\""));
    }
  }
  SECTION("sizes that do not match") {
    CHECK_THAT(error_with([](auto& j) { j["io_ms"].erase(0); }),
               names_file && Contains("\"io_ms\" has 2 entries, expected 3 (one per bitwidth)"));
    CHECK_THAT(error_with([](auto& j) { j["shard_bytes"].push_back(1.0); }),
               names_file && Contains("\"shard_bytes\" has 4 entries, expected 3"));
    CHECK_THAT(error_with([](auto& j) { j["compute_ms"].erase(2); }),
               names_file && Contains("\"compute_ms\" has 2 entries, expected 3"));
    CHECK_THAT(error_with([](auto& j) { j["compute_ms"][1].erase(0); }),
               names_file && Contains("\"compute_ms\"[1] has 2 entries, expected 3 (one per length bucket)"));
    CHECK_THAT(error_with([](auto& j) { j["compute_ms"][2][1].push_back(1.0); }),
               names_file && Contains("\"compute_ms\"[2][1] has 5 entries, expected 4"));
    CHECK_THAT(error_with([](auto& j) { j["shards_per_layer"] = 3; }),
               names_file && Contains("\"compute_ms\"[0][0] has 4 entries, expected 3"));
    CHECK_THAT(error_with([](auto& j) { j["shards_per_layer"] = 0; }), names_file && Contains("outside 1..4096"));
    CHECK_THAT(error_with([](auto& j) { j["num_layers"] = -1; }),
               names_file && Contains("\"num_layers\" must be a whole number"));
    CHECK_THAT(error_with([](auto& j) { j["io_ms"] = 0.5; }), names_file && Contains("\"io_ms\" must be an array"));
  }
  SECTION("values that are negative, NaN, infinite or not numbers") {
    CHECK_THAT(error_with([](auto& j) { j["io_ms"][1] = -0.5; }),
               names_file && Contains("\"io_ms\"[1] must be a finite number >= 0, got -0.5"));
    CHECK_THAT(error_with([](auto& j) { j["shard_bytes"][0] = std::numeric_limits<double>::quiet_NaN(); }),
               names_file && Contains("\"shard_bytes\"[0] must be a finite number >= 0"));
    CHECK_THAT(error_with([](auto& j) { j["compute_ms"][1][2][3] = std::numeric_limits<double>::infinity(); }),
               names_file && Contains("\"compute_ms\"[1][2][3] must be a finite number >= 0"));
    // NaN written to a file comes back as null.
    CHECK_THAT(error_with([](auto& j) { j["compute_ms"][0][0][0] = nullptr; }),
               names_file && Contains("\"compute_ms\"[0][0][0] must be a finite number >= 0, got null"));
    CHECK_THAT(error_with([](auto& j) { j["io_ms"][0] = "fast"; }), names_file && Contains("\"io_ms\"[0] must be"));
  }
  SECTION("bits and lengths not strictly increasing, or out of range") {
    CHECK_THAT(error_with([](auto& j) { j["bits"] = {4, 2, 32}; }),
               names_file && Contains("\"bits\" must be strictly increasing"));
    CHECK_THAT(error_with([](auto& j) { j["bits"] = {2, 2, 32}; }), names_file && Contains("strictly increasing"));
    CHECK_THAT(error_with([](auto& j) { j["bits"] = {2, 4, 64}; }), names_file && Contains("\"bits\"[2] = 64 is outside 1..32"));
    CHECK_THAT(error_with([](auto& j) { j["bits"] = {2, 4.5, 32}; }), names_file && Contains("\"bits\"[1] must be a whole number"));
    CHECK_THAT(error_with([](auto& j) { j["bits"] = nlohmann::json::array(); }),
               names_file && Contains("\"bits\" must be a non-empty array"));
    CHECK_THAT(error_with([](auto& j) { j["lengths"] = {16, 64, 32}; }),
               names_file && Contains("\"lengths\" must be strictly increasing"));
    CHECK_THAT(error_with([](auto& j) { j["lengths"] = {0, 32, 64}; }), names_file && Contains("\"lengths\"[0] = 0 is outside"));
  }
}

TEST_CASE("device profile: load refuses files that are not strict JSON, naming them", "[plan][device_profile]") {
  TempDir dir("load");
  const fs::path bad = dir.path / "bad.json";
  write_text(bad, "{\"format\": \"stile-device-profile\",");
  CHECK_THAT(error_of([&] { (void)DeviceProfile::load(bad); }), Contains(bad.string()) && Contains("not valid JSON"));
  write_text(bad, "{\"version\": 1, \"version\": 1}");
  CHECK_THAT(error_of([&] { (void)DeviceProfile::load(bad); }), Contains(bad.string()) && Contains("duplicate key"));
  nlohmann::json j = sample_profile().to_json();
  j["io_ms"][2] = -1.0;
  write_text(bad, j.dump());
  CHECK_THAT(error_of([&] { (void)DeviceProfile::load(bad); }),
             Contains(bad.string()) && Contains("\"io_ms\"[2] must be a finite number >= 0"));
}

TEST_CASE("device profile: a real measurement of a tiny store has the right structure", "[plan][device_profile]") {
  const stile::ShardStore store = stile::ShardStore::open(tiny_store().path);
  stile::ReadBackendOptions backend_options;
  backend_options.kind = stile::ReadBackendKind::pread;
  backend_options.pread_threads = 2;
  std::string note;
  const std::unique_ptr<stile::ReadBackend> backend = stile::open_read_backend(tiny_store().path, backend_options, &note);
  stile::ThreadPool pool(2);
  stile::ProfileOptions options;
  options.lengths = {32, 16};  // sorted by the measurement
  options.repeats = 2;
  options.pool = &pool;
  const DeviceProfile p = stile::measure_device_profile(store, *backend, options, nullptr);

  const std::size_t M = store.shards_per_layer(), N = store.num_layers();
  REQUIRE(M == 4);
  REQUIRE(N == 2);
  CHECK(p.bits == store.bits());
  CHECK(p.shards_per_layer == M);
  CHECK(p.num_layers == N);
  CHECK(p.lengths == std::vector<std::size_t>{16, 32});
  REQUIRE(p.io_ms.size() == p.bits.size());
  REQUIRE(p.shard_bytes.size() == p.bits.size());
  REQUIRE(p.compute_ms.size() == p.bits.size());
  for (std::size_t b = 0; b < p.bits.size(); ++b) {
    INFO("bits " << p.bits[b]);
    CHECK(std::isfinite(p.io_ms[b]));
    CHECK(p.io_ms[b] > 0);
    double bytes = 0;
    for (std::size_t l = 0; l < N; ++l) {
      for (std::size_t s = 0; s < M; ++s) bytes += double(store.version_info(l, s, p.bits[b]).size);
    }
    CHECK(p.shard_bytes[b] == Approx(bytes / double(N * M)));
    REQUIRE(p.compute_ms[b].size() == 2);
    for (const auto& per_m : p.compute_ms[b]) {
      REQUIRE(per_m.size() == M);
      for (const double ms : per_m) {
        CHECK(std::isfinite(ms));
        CHECK(ms > 0);
      }
    }
  }
  // Fewer bits, fewer bytes.
  for (std::size_t b = 1; b < p.bits.size(); ++b) CHECK(p.shard_bytes[b] > p.shard_bytes[b - 1]);

  const nlohmann::json& m = p.machine;
  for (const char* key : {"cpu", "cores", "threads", "simd_target", "compiler", "read_backend", "storage", "emulated",
                          "page_cache_bypassed", "store", "store_bytes", "date", "repeats"}) {
    INFO(key);
    CHECK(m.contains(key));
  }
  CHECK(m["threads"] == 2);
  CHECK(m["repeats"] == 2);
  CHECK(m["storage"] == "none");
  CHECK(m["emulated"] == false);
  CHECK(m["store"] == "tiny.stile");
  CHECK(m["store_bytes"] == store.file_size());
  CHECK(m["read_backend"] == backend->describe());
  CHECK(m["date"].get<std::string>().size() == 20);  // 2024-01-02T03:04:05Z

  // What it measured survives the file, and lookups work on it.
  TempDir dir("measured");
  p.save(dir.path / "tiny.profile.json");
  const DeviceProfile q = DeviceProfile::load(dir.path / "tiny.profile.json");
  CHECK(q.to_json() == p.to_json());
  CHECK(q.compute_ms_at(4, 20, M) == p.compute_ms[2][1][M - 1]);
}

TEST_CASE("device profile: length buckets are clamped to the position table; bad options refused",
          "[plan][device_profile]") {
  const stile::ShardStore store = stile::ShardStore::open(tiny_store().path);
  stile::ReadBackendOptions backend_options;
  backend_options.kind = stile::ReadBackendKind::pread;
  const std::unique_ptr<stile::ReadBackend> backend = stile::open_read_backend(tiny_store().path, backend_options);
  stile::ThreadPool pool(1);
  stile::ProfileOptions options;
  options.lengths = {8, 500, 64};  // max_position_embeddings is 64
  options.repeats = 1;
  options.pool = &pool;
  const DeviceProfile p = stile::measure_device_profile(store, *backend, options, nullptr);
  CHECK(p.lengths == std::vector<std::size_t>{8, 64});
  CHECK(p.length_bucket(9) == 64);

  options.repeats = 0;
  CHECK_THAT(error_of([&] { (void)stile::measure_device_profile(store, *backend, options, nullptr); }),
             Contains("repeats must be at least 1"));
  options.repeats = 1;
  options.lengths = {};
  CHECK_THAT(error_of([&] { (void)stile::measure_device_profile(store, *backend, options, nullptr); }),
             Contains("no length buckets"));

  // A backend on another file is refused before anything is measured.
  TempDir dir("other");
  write_text(dir.path / "other.bin", std::string(4096, 'x'));
  const std::unique_ptr<stile::ReadBackend> other = stile::open_read_backend(dir.path / "other.bin", backend_options);
  options.lengths = {16};
  CHECK_THAT(error_of([&] { (void)stile::measure_device_profile(store, *other, options, nullptr); }),
             Contains("tiny.stile") && Contains("the backend must read the store's own file"));
}
