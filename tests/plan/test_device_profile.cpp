// The device profile (plan/device_profile.hpp): its lookups and their errors, its JSON round trip
// through a file, every kind of bad profile refused with a message naming the file, and a real
// (small) measurement on a tiny random BERT converted into a shard store on the spot, checked for
// structure only (timings on a shared machine prove nothing about each other).
#include "stile/plan/device_profile.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "stile/io/read_backend.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/calibrate/device_profiler.hpp"
#include "stile/pipeline/layer_reader.hpp"
#include "support/converted_store.hpp"
#include "support/error_of.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"
#include "support/temp_dir.hpp"

using Catch::Contains;
using stile::DeviceProfile;
namespace fs = std::filesystem;

namespace {

using stile_test::error_of;
using stile_test::TempDir;

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

// A tiny random BERT checkpoint: hidden 32, 2 layers, 4 heads, FFN 64, 50 tokens, 64 positions.
void write_checkpoint(const fs::path& dir) {
  stile_test::Rng rng{12345};
  const auto unit = [&] { return static_cast<float>(rng()); };  // [-1, 1)
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.05f, .embeddings = 0.05f, .matrices = 0.05f, .biases = 0.05f, .layer_norm = 0.05f};
  stile_test::write_random_bert(
      dir, {32, 2, 4, 64, 50, 64}, scales, [&] { return unit() + unit() + unit(); },
      [](const fs::path&, bool written) { REQUIRE(written); });
}

// One converted store for the whole program.
const stile_test::ConvertedStore& tiny_store() {
  static const stile_test::ConvertedStore s("tiny.stile", write_checkpoint, {2, 3, 4, 5, 6, 32});
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

  // T_comp' (after a read): T_comp until measured, then its own table.
  DeviceProfile q = p;
  CHECK(q.compute_after_read_ms_at(4, 20, 3) == q.compute_ms[1][1][2]);
  q.compute_after_read_ms = q.compute_ms;
  q.compute_after_read_ms[1][1][2] = 99;
  CHECK(q.compute_after_read_ms_at(4, 20, 3) == 99);
  CHECK(q.compute_ms_at(4, 20, 3) == p.compute_ms[1][1][2]);
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
  CHECK_THAT(text, !Contains("compute_after_read_ms"));  // not measured: not written

  // With T_comp' (after a read): written after compute_ms, read back bit for bit.
  DeviceProfile r = p;
  r.compute_after_read_ms = p.compute_ms;
  r.compute_after_read_ms[2][1][3] = 1.0 / 3.0;
  r.save(path);
  const DeviceProfile s = DeviceProfile::load(path);
  CHECK(s.compute_after_read_ms == r.compute_after_read_ms);
  CHECK(s.to_json() == r.to_json());
  CHECK_THAT(text, !Contains("layer_io_ms"));
  // With layer reads: written after shard_bytes, read back bit for bit.
  r.layer_io_ms = {1.0 / 3.0, 2.5, 12.0};
  r.layer_bytes = {4000.0, 8000.0, 64000.0};
  r.layer_requests = {1, 2, 4};
  r.save(path);
  const DeviceProfile with_layers = DeviceProfile::load(path);
  CHECK(with_layers.layer_io_ms == r.layer_io_ms);
  CHECK(with_layers.layer_bytes == r.layer_bytes);
  CHECK(with_layers.layer_requests == r.layer_requests);
  CHECK(with_layers.to_json() == r.to_json());
  {
    std::ifstream again(path);
    const std::string t((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
    CHECK_THAT(t, Contains("\n  \"shard_bytes\": [1000.0,2000.0,16000.0],\n  \"layer_io_ms\": ["));
  }
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
    CHECK_THAT(error_with([](auto& j) {
                 j["compute_after_read_ms"] = j["compute_ms"];
                 j["compute_after_read_ms"][1][0].erase(0);
               }),
               names_file && Contains("\"compute_after_read_ms\"[1][0] has 3 entries, expected 4"));
    CHECK_THAT(error_with([](auto& j) {
                 j["compute_after_read_ms"] = j["compute_ms"];
                 j["compute_after_read_ms"][0][2][1] = -1.0;
               }),
               names_file && Contains("\"compute_after_read_ms\"[0][2][1] must be a finite number >= 0"));
    CHECK_THAT(error_with([](auto& j) { j["shards_per_layer"] = 0; }), names_file && Contains("outside 1..4096"));
    CHECK_THAT(error_with([](auto& j) { j["num_layers"] = -1; }),
               names_file && Contains("\"num_layers\" must be a whole number"));
    CHECK_THAT(error_with([](auto& j) { j["io_ms"] = 0.5; }), names_file && Contains("\"io_ms\" must be an array"));
  }
  SECTION("layer reads: all three keys or none, one entry per bitwidth, whole requests") {
    const auto with_layers = [](nlohmann::json& j) {
      j["layer_io_ms"] = {1.0, 2.0, 8.0};
      j["layer_bytes"] = {4000.0, 8000.0, 64000.0};
      j["layer_requests"] = {1, 1, 2};
    };
    nlohmann::json j = good;
    with_layers(j);
    CHECK(DeviceProfile::from_json(j, file).layer_requests == std::vector<double>{1, 1, 2});
    for (const char* key : {"layer_io_ms", "layer_bytes", "layer_requests"}) {
      INFO(key);
      CHECK_THAT(error_with([&](auto& k) {
                   with_layers(k);
                   k.erase(key);
                 }),
                 names_file && Contains("come together (some are missing)"));
    }
    CHECK_THAT(error_with([&](auto& k) {
                 with_layers(k);
                 k["layer_bytes"].erase(0);
               }),
               names_file && Contains("\"layer_bytes\" has 2 entries, expected 3 (one per bitwidth)"));
    CHECK_THAT(error_with([&](auto& k) {
                 with_layers(k);
                 k["layer_io_ms"][2] = -1.0;
               }),
               names_file && Contains("\"layer_io_ms\"[2] must be a finite number >= 0"));
    for (const double bad : {0.0, 1.5}) {
      CHECK_THAT(error_with([&](auto& k) {
                   with_layers(k);
                   k["layer_requests"][1] = bad;
                 }),
                 names_file && Contains("\"layer_requests\"[1] = ") && Contains("is not a whole number of requests"));
    }
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
    CHECK_THAT(error_with([](auto& j) {
                 j["bits"] = {4, 2, 32};
               }),
               names_file && Contains("\"bits\" must be strictly increasing"));
    CHECK_THAT(error_with([](auto& j) { j["bits"] = {2, 2, 32}; }), names_file && Contains("strictly increasing"));
    CHECK_THAT(error_with([](auto& j) {
                 j["bits"] = {2, 4, 64};
               }),
               names_file && Contains("\"bits\"[2] = 64 is outside 1..32"));
    CHECK_THAT(error_with([](auto& j) {
                 j["bits"] = {2, 4.5, 32};
               }),
               names_file && Contains("\"bits\"[1] must be a whole number"));
    CHECK_THAT(error_with([](auto& j) { j["bits"] = nlohmann::json::array(); }),
               names_file && Contains("\"bits\" must be a non-empty array"));
    CHECK_THAT(error_with([](auto& j) {
                 j["lengths"] = {16, 64, 32};
               }),
               names_file && Contains("\"lengths\" must be strictly increasing"));
    CHECK_THAT(error_with([](auto& j) {
                 j["lengths"] = {0, 32, 64};
               }),
               names_file && Contains("\"lengths\"[0] = 0 is outside"));
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
  const stile::ShardStore store = stile::ShardStore::open(tiny_store().store);
  stile::ReadBackendOptions backend_options;
  backend_options.kind = stile::ReadBackendKind::pread;
  backend_options.pread_threads = 2;
  std::string note;
  const std::unique_ptr<stile::ReadBackend> backend =
      stile::open_read_backend(tiny_store().store, backend_options, &note);
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
  REQUIRE(p.layer_io_ms.size() == p.bits.size());
  REQUIRE(p.layer_bytes.size() == p.bits.size());
  REQUIRE(p.layer_requests.size() == p.bits.size());
  for (std::size_t b = 0; b < p.bits.size(); ++b) {
    INFO("bits " << p.bits[b]);
    CHECK(std::isfinite(p.io_ms[b]));
    CHECK(p.io_ms[b] > 0);
    double bytes = 0;
    for (std::size_t l = 0; l < N; ++l) {
      for (std::size_t s = 0; s < M; ++s) bytes += double(store.version_info(l, s, p.bits[b]).size);
    }
    CHECK(p.shard_bytes[b] == Approx(bytes / double(N * M)));
    // Layer reads: every layer's M versions, as the layer reader issues them.
    CHECK(std::isfinite(p.layer_io_ms[b]));
    CHECK(p.layer_io_ms[b] > 0);
    CHECK(p.layer_bytes[b] == Approx(p.shard_bytes[b] * double(M)));
    std::vector<stile::ShardChoice> versions;
    for (std::size_t s = 0; s < M; ++s) versions.push_back({s, p.bits[b]});
    const std::size_t runs = stile::layout_layer_read(store, 0, versions, backend->alignment()).runs.size();
    CHECK(runs >= 1);
    CHECK(p.layer_requests[b] == double(runs));
    for (const auto* table : {&p.compute_ms, &p.compute_after_read_ms}) {  // T_comp and T_comp'
      REQUIRE(table->size() == p.bits.size());
      REQUIRE((*table)[b].size() == 2);
      for (const auto& per_m : (*table)[b]) {
        REQUIRE(per_m.size() == M);
        for (const double ms : per_m) {
          CHECK(std::isfinite(ms));
          CHECK(ms > 0);
        }
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
  CHECK(p.layer_compute() == stile::kCpuLayerCompute);

  // What it measured survives the file, and lookups work on it.
  TempDir dir("measured");
  p.save(dir.path / "tiny.profile.json");
  const DeviceProfile q = DeviceProfile::load(dir.path / "tiny.profile.json");
  CHECK(q.to_json() == p.to_json());
  CHECK(q.compute_ms_at(4, 20, M) == p.compute_ms[2][1][M - 1]);
}

TEST_CASE("device profile: length buckets are clamped to the position table; bad options refused",
          "[plan][device_profile]") {
  const stile::ShardStore store = stile::ShardStore::open(tiny_store().store);
  stile::ReadBackendOptions backend_options;
  backend_options.kind = stile::ReadBackendKind::pread;
  const std::unique_ptr<stile::ReadBackend> backend = stile::open_read_backend(tiny_store().store, backend_options);
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

namespace {

// A layer compute that records how the profiler drives it, computes nothing, and sleeps in
// finish(): the time a request waits for its layers.
class RecordingCompute final : public stile::LayerCompute {
 public:
  static constexpr int kFinishMs = 4;
  std::vector<std::size_t> layers, shards, tokens;  // per run() call
  std::size_t finishes = 0;
  std::size_t throw_at_call = std::size_t(-1);  // run() call index that throws

  void run(const stile::EncoderConfig&, std::size_t layer, const stile::ShardShape&,
           std::span<const stile::ShardView> views, const stile::LayerResidentView&, float*,
           std::span<const std::size_t> seq_offsets) override {
    if (layers.size() == throw_at_call) throw stile::Error("recording compute: failing on purpose");
    layers.push_back(layer);
    shards.push_back(views.size());
    tokens.push_back(seq_offsets.back());
  }
  void finish() override {
    ++finishes;
    std::this_thread::sleep_for(std::chrono::milliseconds(kFinishMs));
  }
};

}  // namespace

TEST_CASE("device profile: another layer compute is timed over requests of every layer, and named",
          "[plan][device_profile]") {
  const stile::ShardStore store = stile::ShardStore::open(tiny_store().store);
  stile::ReadBackendOptions backend_options;
  backend_options.kind = stile::ReadBackendKind::pread;
  const std::unique_ptr<stile::ReadBackend> backend = stile::open_read_backend(tiny_store().store, backend_options);
  RecordingCompute compute;
  stile::ProfileOptions options;
  options.lengths = {16, 32};
  options.repeats = 1;
  options.compute = &compute;
  options.compute_name = "mapping 0123 on cpu:0";
  const DeviceProfile p = stile::measure_device_profile(store, *backend, options, nullptr);

  const std::size_t M = store.shards_per_layer(), N = store.num_layers(), B = store.bits().size();
  // T_comp and T_comp', each bitwidth, length and m: repeats + 1 requests of layers 0..N-1.
  const std::size_t requests = 2 * B * 2 * M * (options.repeats + 1);
  REQUIRE(compute.layers.size() == requests * N);
  CHECK(compute.finishes == requests);
  for (std::size_t r = 0; r < requests; ++r) {
    INFO("request " << r);
    for (std::size_t l = 0; l < N; ++l) {
      CHECK(compute.layers[r * N + l] == l);
      CHECK(compute.shards[r * N + l] == compute.shards[r * N]);  // one request, one set of shards
    }
  }
  // m runs 1..M within each length, the length within each bitwidth.
  CHECK(compute.shards[0] == 1);
  CHECK(compute.shards[(options.repeats + 1) * N] == 2);
  CHECK(compute.tokens[0] == 16);
  CHECK(compute.tokens[M * (options.repeats + 1) * N] == 32);
  // finish() is inside the timed region: each layer's share of the request's wait at least.
  for (const auto* table : {&p.compute_ms, &p.compute_after_read_ms}) {
    for (const auto& per_length : *table) {
      for (const auto& per_m : per_length) {
        for (const double ms : per_m) CHECK(ms >= RecordingCompute::kFinishMs / double(N));
      }
    }
  }
  CHECK(p.machine["layer_compute"] == options.compute_name);
  TempDir dir("mapped");
  p.save(dir.path / "tiny.profile.json");
  CHECK(DeviceProfile::load(dir.path / "tiny.profile.json").layer_compute() == options.compute_name);

  // A layer that throws fails the measurement, and the request is still finished.
  RecordingCompute failing;
  failing.throw_at_call = 1;
  options.compute = &failing;
  CHECK_THAT(error_of([&] { (void)stile::measure_device_profile(store, *backend, options, nullptr); }),
             Contains("failing on purpose"));
  CHECK(failing.finishes == 1);
  // A compute must be named: the profile records what it timed.
  options.compute_name.clear();
  CHECK_THAT(error_of([&] { (void)stile::measure_device_profile(store, *backend, options, nullptr); }),
             Contains("needs a name"));
}
