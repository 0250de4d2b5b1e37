// The search's files: the accuracy model (plan/op_accuracy_model.hpp) and the mapping file
// (plan/mapping_file.hpp) round-trip and refuse bad input naming the file; and a mapping executed
// on the CPU engine (one processor, as a ModelPrecision) gives the all-fp32 model's output within
// the formats' tolerance, the same output as the preset it spells, and multi-processor mappings
// are refused with the reason.
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "stile/calibrate/op_accuracy.hpp"
#include "stile/calibrate/op_latency_profiler.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/plan/mapping_file.hpp"
#include "support/error_of.hpp"
#include "support/row_cosine.hpp"
#include "support/temp_dir.hpp"
#include "support/tiny_bert.hpp"

using Catch::Contains;
using stile::NumberFormat;
using stile_test::error_of;
using stile_test::TempDir;

namespace {

using stile_test::min_row_cosine;

constexpr stile::OpGraphShape kSmall{.layers = 2, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 5, .classes = 2};

stile::OpAccuracyModel small_accuracy() {
  const stile::OpGraph g = stile::bert_op_graph(kSmall);
  stile::OpAccuracyModel m;
  m.shape = kSmall;
  m.shape.tokens = 0;
  m.metric = "test";
  m.loss.assign(g.size(), {});
  for (std::size_t n = 0; n < g.size(); ++n) {
    for (const NumberFormat f : stile::formats_of(g.nodes[n].kind)) {
      if (f != NumberFormat::kF32) m.loss[n][static_cast<std::size_t>(f)] = 0.001 * double(n + 1);
    }
  }
  return m;
}

stile::OpMappingFile small_mapping() {
  const stile::OpGraph g = stile::bert_op_graph(kSmall);
  stile::OpMappingFile m;
  m.shape = kSmall;
  m.processors = {"cpu:0", "cpu:1"};
  m.mapping = stile::OpMapping::uniform(g.size(), 0);
  m.mapping.processor[2] = 1;
  m.mapping.format[1] = NumberFormat::kInt8;
  return m;
}

std::vector<float> encode(const stile::BertModel& m) {
  const std::vector<stile::Encoding> batch{stile_test::tiny_tokens(12), stile_test::tiny_tokens(7, 3)};
  std::vector<float> hidden;
  stile::ThreadPool pool(1);
  m.encode(batch, hidden, &pool);
  return hidden;
}

}  // namespace

TEST_CASE("op accuracy model file: round trip, predictions, bad files refused") {
  const stile::OpAccuracyModel m = small_accuracy();
  TempDir dir;
  m.save(dir.path / "a.json");
  const stile::OpAccuracyModel back = stile::OpAccuracyModel::load(dir.path / "a.json");
  CHECK(back.to_json() == m.to_json());
  const stile::OpGraph g = stile::bert_op_graph(kSmall);
  std::vector<NumberFormat> f(g.size(), NumberFormat::kF32);
  CHECK(back.predict(f) == 0);
  f[1] = NumberFormat::kInt8;  // layer0.qkv, node 1: 0.002
  f[2] = NumberFormat::kInteger;  // layer0.head0: 0.003
  CHECK(back.predict(f) == Approx(0.005));
  const nlohmann::json good = m.to_json();
  auto refused = [](const nlohmann::json& j) { return error_of([&] { stile::OpAccuracyModel::from_json(j, "a.json"); }); };
  nlohmann::json j = good;
  j["loss"].erase(0);
  CHECK_THAT(refused(j), Contains("a.json") && Contains("expected"));
  j = good;
  j["loss"][0]["node"] = "layer9.qkv";
  CHECK_THAT(refused(j), Contains("no node \"layer9.qkv\""));
  j = good;
  j["loss"][0]["format"] = "fp32";
  CHECK_THAT(refused(j), Contains("has no fp32 format with a loss"));
  j = good;
  j["loss"][1] = j["loss"][0];
  CHECK_THAT(refused(j), Contains("a second entry"));
  j = good;
  j["loss"][0]["loss"] = -1;
  CHECK_THAT(refused(j), Contains(">= 0"));
  j = good;
  j["shape"]["layers"] = 5000;
  CHECK_THAT(refused(j), Contains("outside 1..1024"));
}

TEST_CASE("op mapping file: round trip and bad files refused") {
  const stile::OpMappingFile m = small_mapping();
  TempDir dir;
  m.save(dir.path / "m.json");
  const stile::OpMappingFile back = stile::OpMappingFile::load(dir.path / "m.json");
  CHECK(back.to_json() == m.to_json());
  CHECK(back.mapping.processor == m.mapping.processor);
  CHECK(back.mapping.format == m.mapping.format);
  CHECK(back.single_processor() == static_cast<std::size_t>(-1));
  // The name a device profile records for it: the same for the same mapping, whatever its notes;
  // another for any node moved or in another format.
  CHECK(back.layer_compute_name() == m.layer_compute_name());
  CHECK_THAT(m.layer_compute_name(), Contains("mapping ") && Contains(" on cpu:0,cpu:1"));
  stile::OpMappingFile other = m;
  other.predicted = {{"latency_us", 1.0}};
  CHECK(other.layer_compute_name() == m.layer_compute_name());
  other.mapping.format[1] = other.mapping.format[1] == NumberFormat::kF32 ? NumberFormat::kInt8 : NumberFormat::kF32;
  CHECK(other.layer_compute_name() != m.layer_compute_name());
  other = m;
  other.mapping.processor[2] ^= 1;
  CHECK(other.layer_compute_name() != m.layer_compute_name());
  const nlohmann::json good = m.to_json();
  auto refused = [](const nlohmann::json& j) { return error_of([&] { stile::OpMappingFile::from_json(j, "m.json"); }); };
  nlohmann::json j = good;
  std::swap(j["nodes"][1], j["nodes"][2]);
  CHECK_THAT(refused(j), Contains("m.json") && Contains("expected \"layer0.qkv\" (graph order)"));
  j = good;
  j["nodes"][1]["processor"] = "gpu:0";
  CHECK_THAT(refused(j), Contains("names no listed processor"));
  j = good;
  j["nodes"][1]["format"] = "integer";
  CHECK_THAT(refused(j), Contains("layer0.qkv has no integer format"));
  j = good;
  j["nodes"].erase(3);
  CHECK_THAT(refused(j), Contains("the shape's graph"));
  j = good;
  j["shape"].erase("tokens");
  CHECK_THAT(refused(j), Contains("missing \"tokens\""));
  j = good;
  j["processors"] = {"cpu:0", "cpu:0"};
  CHECK_THAT(refused(j), Contains("listed twice"));
}

TEST_CASE("a mapping executed on the CPU engine matches all-fp32 within the formats' tolerance") {
  TempDir dir;
  stile_test::write_tiny_bert(dir.path, 2);
  const stile::BertModel fp32 = stile::BertModel::load(dir.path);
  const stile::EncoderConfig& c = fp32.config();
  const std::vector<float> want = encode(fp32);
  const stile::OpGraphShape shape{.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads,
                                  .ffn = c.intermediate, .tokens = 12, .classes = 2};
  const stile::OpGraph g = stile::bert_op_graph(shape);
  auto as_file = [&](const std::vector<NumberFormat>& formats, std::uint8_t proc) {
    stile::OpMappingFile m;
    m.shape = shape;
    m.processors = {"cpu:0", "cpu:1"};
    m.mapping.processor.assign(g.size(), proc);
    m.mapping.format = formats;
    m.save(dir.path / "mapping.json");
    return stile::OpMappingFile::load(dir.path / "mapping.json");
  };
  // A mapping that spells the int8 preset runs exactly as the preset.
  const stile::OpMappingFile int8 = as_file(stile::formats_of_precision(g, stile::precision_preset("int8")), 1);
  const std::vector<float> preset = encode(stile::BertModel::load(dir.path, stile::precision_preset("int8")));
  CHECK(encode(stile::BertModel::load(dir.path, stile::model_precision_of(int8, c, "mapping.json"))) == preset);
  // Random single-processor mappings: close to fp32 (the ibert floor of tests/model/test_precision.cpp,
  // the loosest format any node can take), and not fp32 itself.
  std::mt19937_64 rng(5);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  for (int k = 0; k < 4; ++k) {
    const std::vector<NumberFormat> formats = stile::random_expressible_formats(g, below);
    const stile::OpMappingFile m = as_file(formats, 0);
    const std::vector<float> got = encode(stile::BertModel::load(dir.path, stile::model_precision_of(m, c, "mapping.json")));
    CHECK(min_row_cosine(got, want, c.hidden) > 0.99);
    if (formats != std::vector<NumberFormat>(g.size(), NumberFormat::kF32)) CHECK(got != want);
  }
  // All fp32 is the fp32 model, bit for bit.
  const stile::OpMappingFile all32 = as_file(std::vector<NumberFormat>(g.size(), NumberFormat::kF32), 0);
  CHECK(encode(stile::BertModel::load(dir.path, stile::model_precision_of(all32, c, "mapping.json"))) == want);
  // Several processors: refused, naming the file and the missing runtime.
  stile::OpMappingFile spread = all32;
  spread.mapping.processor[3] = 1;
  CHECK_THAT(error_of([&] { stile::model_precision_of(spread, c, "mapping.json"); }),
             Contains("mapping.json") && Contains("processor runtime"));
  // A mapping for another shape: refused.
  stile::EncoderConfig other = c;
  other.num_layers = 3;
  CHECK_THAT(error_of([&] { stile::model_precision_of(all32, other, "mapping.json"); }), Contains("the model has 3 layers"));
}

TEST_CASE("accuracy units: what the CPU engine sets together") {
  const stile::OpGraph g = stile::bert_op_graph(kSmall);
  const std::vector<stile::AccuracyUnit> units = stile::accuracy_units(g);
  // embedding + 2 layers x (qkv, heads, attn_out, layer_norms, ffn_in, ffn_out).
  REQUIRE(units.size() == 13);
  CHECK(units[0].name == "embedding");
  CHECK(units[2].name == "layer0.heads");
  CHECK(units[2].nodes.size() == 2);
  CHECK(units[4].name == "layer0.layer_norms");
  CHECK(units[4].nodes.size() == 2);
  // Fitting on a synthetic meter whose loss is additive recovers it exactly.
  const stile::OpAccuracyModel truth = small_accuracy();
  const stile::OpAccuracyModel fit =
      stile::fit_op_accuracy_model(g, [&](const std::vector<NumberFormat>& f) { return truth.predict(f); });
  std::mt19937_64 rng(3);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  for (int k = 0; k < 10; ++k) {
    const auto f = stile::random_expressible_formats(g, below);
    CHECK(fit.predict(f) == Approx(truth.predict(f)));
  }
}

TEST_CASE("op latency profiler: a small real measurement has every entry, and reads back") {
  // Structure only: timings on a shared machine prove nothing about each other.
  stile::EncoderConfig c;
  c.hidden = 16;
  c.num_layers = 2;
  c.num_heads = 2;
  c.intermediate = 32;
  stile::OpProfileSettings s;
  s.tokens = {4, 8};
  s.cpus = {0};
  s.repeats = 1;
  s.warmup = 0;
  if (std::thread::hardware_concurrency() >= 2) s.cpus = {0, 1};
  s.transfer_bytes = {0, 4096};
  s.transfer_repeats = 5;
  const stile::OpLatencyProfile p = stile::measure_op_latency_profile(c, s);
  REQUIRE(p.processors.size() == s.cpus.size());
  for (std::size_t q = 0; q < p.processors.size(); ++q) {
    for (std::size_t k = 0; k < stile::kOpNodeKinds; ++k) {
      const auto kind = static_cast<stile::OpNodeKind>(k);
      for (const NumberFormat f : stile::formats_of(kind)) {
        INFO(stile::to_string(kind) << " " << stile::to_string(f));
        REQUIRE(p.has(q, kind, f));
        CHECK(p.latency_us(q, kind, f, 8) >= 0);
      }
    }
  }
  const stile::OpLatencyProfile back = stile::OpLatencyProfile::from_json(p.to_json(), "p.json");
  CHECK(back.to_json() == p.to_json());
  const stile::OpGraph g = stile::bert_op_graph({.layers = 2, .hidden = 16, .heads = 2, .ffn = 32, .tokens = 6});
  CHECK(stile::predict_latency_us(g, stile::OpCostTable::from_profile(g, back), stile::OpMapping::uniform(g.size(), 0)) > 0);
  stile::OpProfileSettings bad = s;
  bad.cpus = {100000};
  CHECK_THAT(error_of([&] { stile::measure_op_latency_profile(c, bad); }), Contains("cpu 100000"));
  // A transfer whose consumer or producer cannot be pinned ends with the error, never hangs.
  using stile::op_profiler_detail::round_trip_us;
  CHECK_THAT(error_of([] { round_trip_us(0, 100000, 64, 5, false); }), Contains("cpu 100000"));
  CHECK_THAT(error_of([] { round_trip_us(100000, 0, 64, 5, false); }), Contains("cpu 100000"));
}
