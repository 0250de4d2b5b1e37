// The mapped forward (hetero/mapped_forward.hpp): operator-to-processor mappings executed on two
// CPU clusters against the same formats on one processor and against the CPU engine (BertModel),
// processors' failures, refused mappings; and the same mappings behind the shard-store engine
// (hetero/mapped_layer_compute.hpp) against the default engine and the mapped forward.
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/calibrate/device_profiler.hpp"
#include "stile/calibrate/request_cost_profiler.hpp"
#include "stile/calibrate/traced_op_profiler.hpp"
#include "stile/hetero/cpu_cluster.hpp"
#include "stile/engine.hpp"
#include "stile/hetero/mapped_forward.hpp"
#include "stile/hetero/mapped_layer_compute.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/io/fault_injection.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/model/bert_model.hpp"
#include "support/converted_store.hpp"
#include "support/error_of.hpp"
#include "support/row_cosine.hpp"
#include "support/temp_dir.hpp"
#include "support/tiny_bert.hpp"

namespace {

using Catch::Matchers::Contains;
using stile::NumberFormat;
using stile_test::error_of;

const std::vector<stile::Encoding>& requests() {
  static const std::vector<stile::Encoding> batch{stile_test::tiny_tokens(12), stile_test::tiny_tokens(7, 3)};
  return batch;
}

// Two CPU clusters of one unpinned worker each, on their own dispatcher threads.
struct TwoClusters {
  stile::CpuCluster a{"cpu:a", {}, stile::LinearFormat::kF32};
  stile::CpuCluster b{"cpu:b", {}, stile::LinearFormat::kInt8};
  std::vector<stile::Processor*> both() { return {&a, &b}; }
};

std::vector<float> run_mapped(const std::filesystem::path& dir, const stile::OpMapping& m,
                              std::vector<stile::Processor*> procs) {
  const stile::EncoderConfig c = stile::read_encoder_config((dir / "config.json").string());
  const stile::OpGraph g = stile::op_graph_of(c);
  stile::MappedForward f(stile::BertWeights::load(dir, stile::mapped_weights_precision(g, m.format)), m,
                         std::move(procs));
  std::vector<float> hidden;
  f.encode(requests(), hidden);
  return hidden;
}

std::vector<float> run_model(const stile::BertModel& model) {
  std::vector<float> hidden;
  stile::ThreadPool pool(1);
  model.encode(requests(), hidden, &pool);
  return hidden;
}

// Any format each node kind has, drawn per node (heads of one layer in different formats too).
std::vector<NumberFormat> random_formats(const stile::OpGraph& g, std::mt19937_64& rng) {
  std::vector<NumberFormat> f;
  for (const stile::OpNode& n : g.nodes) {
    const std::vector<NumberFormat> fs = stile::formats_of(n.kind);
    f.push_back(fs[rng() % fs.size()]);
  }
  return f;
}

// Random formats, then a random one of two processors per node.
stile::OpMapping random_spread_mapping(const stile::OpGraph& g, std::mt19937_64& rng) {
  stile::OpMapping m;
  m.format = random_formats(g, rng);
  for (std::size_t n = 0; n < g.size(); ++n) m.processor.push_back(static_cast<std::uint8_t>(rng() % 2));
  return m;
}

// A processor that forwards to another and, when armed, hands its next linear call channels past
// the layer's end: the wrapped cluster fails that call as any failing call.
class FailingProcessor final : public stile::Processor {
 public:
  explicit FailingProcessor(stile::Processor& inner) : inner_(inner) {}
  const std::string& name() const override { return inner_.name(); }
  stile::LinearFormat format() const override { return inner_.format(); }
  std::size_t channel_granule() const override { return inner_.channel_granule(); }
  bool runs_any_format() const override { return inner_.runs_any_format(); }
  void enqueue(const stile::OpCall& call) override {
    if (const auto* l = std::get_if<stile::LinearCall>(&call); l != nullptr && armed_) {
      armed_ = false;
      stile::LinearCall bad = *l;
      bad.n1 = bad.w.rows() + 1;
      return inner_.enqueue(bad);
    }
    inner_.enqueue(call);
  }
  void wait() override { inner_.wait(); }
  void arm() { armed_ = true; }

 private:
  stile::Processor& inner_;
  bool armed_ = false;
};

}  // namespace

TEST_CASE("random mappings over two CPU clusters equal the same formats on one processor, bit for bit") {
  stile_test::TempDir dir;
  stile_test::write_tiny_bert(dir.path, 2);
  const stile::OpGraph g = stile::op_graph_of(stile::read_encoder_config((dir.path / "config.json").string()));
  TwoClusters p;
  std::mt19937_64 rng(19);
  for (int k = 0; k < 6; ++k) {
    const stile::OpMapping m = random_spread_mapping(g, rng);
    const std::vector<float> spread = run_mapped(dir.path, m, p.both());
    stile::OpMapping one = m;
    one.processor.assign(g.size(), 0);
    const std::vector<float> alone = run_mapped(dir.path, one, p.both());
    REQUIRE(spread.size() == 19 * 32);
    CHECK(spread == alone);
    // Where the engine can express the formats, it computes the same.
    if (stile::expressible_as_model_precision(g, m.format)) {
      CHECK(spread == run_model(stile::BertModel::load(dir.path, stile::to_model_precision(g, m.format))));
    }
  }
  // Heads alternating between the clusters, each layer's heads in one format: the CPU engine's
  // model of those formats, bit for bit.
  for (int k = 0; k < 3; ++k) {
    stile::OpMapping m;
    m.format = stile::random_expressible_formats(g, [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); });
    for (std::size_t n = 0; n < g.size(); ++n) m.processor.push_back(static_cast<std::uint8_t>((n + k) % 2));
    CHECK(run_mapped(dir.path, m, p.both()) ==
          run_model(stile::BertModel::load(dir.path, stile::to_model_precision(g, m.format))));
  }
}

TEST_CASE("all-fp32 mapped over two clusters is the fp32 model; other formats stay close to it") {
  stile_test::TempDir dir;
  stile_test::write_tiny_bert(dir.path, 2);
  const stile::BertModel fp32 = stile::BertModel::load(dir.path);
  const std::vector<float> want = run_model(fp32);
  const stile::OpGraph g = stile::op_graph_of(fp32.config());
  TwoClusters p;
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 0; n < g.size(); n += 2) m.processor[n] = 1;
  CHECK(run_mapped(dir.path, m, p.both()) == want);
  // Random formats: within the ibert cosine floor of tests/model/test_precision.cpp (the loosest
  // format any node takes), and not fp32 itself.
  std::mt19937_64 rng(7);
  for (int k = 0; k < 3; ++k) {
    m.format = random_formats(g, rng);
    const std::vector<float> got = run_mapped(dir.path, m, p.both());
    CHECK(stile_test::min_row_cosine(got, want, fp32.config().hidden) > 0.99);
    CHECK(got != want);
  }
}

TEST_CASE("a failing processor fails the request by name; the next request succeeds") {
  stile_test::TempDir dir;
  stile_test::write_tiny_bert(dir.path, 2);
  const stile::EncoderConfig c = stile::read_encoder_config((dir.path / "config.json").string());
  const stile::OpGraph g = stile::op_graph_of(c);
  TwoClusters p;
  FailingProcessor flaky(p.b);
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0, NumberFormat::kInt8);
  for (std::size_t n = 0; n < g.size(); ++n) {
    if (!stile::has_format(g.nodes[n].kind, NumberFormat::kInt8)) m.format[n] = NumberFormat::kF32;
    if (n % 3 == 1) m.processor[n] = 1;  // layer0.qkv on cpu:b, and nodes after it
  }
  stile::MappedForward f(stile::BertWeights::load(dir.path, stile::mapped_weights_precision(g, m.format)), m,
                         {&p.a, &flaky});
  std::vector<float> first, hidden;
  f.encode(requests(), first);
  flaky.arm();
  const std::string e = error_of([&] { f.encode(requests(), hidden); });
  CHECK_THAT(e, Contains("processor 'cpu:b'") && Contains("linear q channels"));
  f.encode(requests(), hidden);
  CHECK(hidden == first);
  // Again: every processor is usable after a failure.
  flaky.arm();
  CHECK_THAT(error_of([&] { f.encode(requests(), hidden); }), Contains("processor 'cpu:b'"));
  f.encode(requests(), hidden);
  CHECK(hidden == first);
}

TEST_CASE("a family whose layer is not BERT's is refused by name") {
  // The encoder families' small models (tests/model/data/families): the mapped forward runs BERT's
  // layer only, and names what the others add.
  const std::filesystem::path families =
      std::filesystem::path(STILE_TEST_DATA_DIR).parent_path().parent_path() / "model" / "data" / "families";
  TwoClusters p;
  for (const auto& [family, what] : {std::pair{"mpnet", "a relative position bias in attention"},
                                     std::pair{"modernbert", "pre-LayerNorm, rotary positions"},
                                     std::pair{"deberta-v2", "disentangled attention"}}) {
    const stile::EncoderConfig c = stile::read_encoder_config((families / family / "config.json").string());
    const stile::OpMapping m = stile::OpMapping::uniform(stile::op_graph_of(c).size(), 0);
    CHECK_THAT(error_of([&] { stile::MappedForward(stile::BertWeights::load(families / family), m, p.both()); }),
               Contains("mapped forward: ") && Contains(std::string(family) + "'s layer has ") && Contains(what) &&
                   Contains("does not run"));
  }
}

TEST_CASE("mappings the processors or weights cannot run are refused") {
  stile_test::TempDir dir;
  stile_test::write_tiny_bert(dir.path, 1);
  const stile::EncoderConfig c = stile::read_encoder_config((dir.path / "config.json").string());
  const stile::OpGraph g = stile::op_graph_of(c);
  TwoClusters p;
  const auto refused = [&](const stile::OpMapping& m, std::vector<stile::Processor*> procs,
                           const stile::ModelPrecision& load = {}) {
    return error_of([&] { stile::MappedForward(stile::BertWeights::load(dir.path, load), m, std::move(procs)); });
  };
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  CHECK_THAT(refused(stile::OpMapping::uniform(g.size() - 1, 0), p.both()), Contains("the model's graph"));
  m.processor[3] = 2;
  CHECK_THAT(refused(m, p.both()), Contains("layer0.head1 is mapped to processor 2 of 2"));
  m.processor[3] = 0;
  m.format[1] = NumberFormat::kInt8;  // layer0.qkv
  CHECK_THAT(refused(m, p.both()), Contains("layer0.qkv is mapped to int8 but its weights are fp32"));
  m.format[1] = NumberFormat::kInteger;
  CHECK_THAT(refused(m, p.both()), Contains("layer0.qkv has no integer format"));
  m.format[1] = NumberFormat::kF32;
  CHECK_THAT(refused(m, {&p.a, &p.a}), Contains("are the same"));
  // Processors the machine lacks, by the mapping file's names.
  const auto opened = [&](std::vector<std::string> names) {
    return error_of([&] { stile::open_mapping_processors(names, g, stile::OpMapping::uniform(g.size(), 0), "m.json"); });
  };
  CHECK_THAT(opened({"cpu:4000"}), Contains("m.json") && Contains("processor 'cpu:4000'") && Contains("has no core 4000"));
  CHECK_THAT(opened({"gpu:0"}), Contains("processor 'gpu:0'") && Contains("unknown processor"));
  CHECK_THAT(opened({"cpu:x"}), Contains("not cpu:N"));
  CHECK_THAT(opened({"opencl:"}), Contains("not opencl:N"));
  if (!stile::opencl_available()) CHECK_THAT(opened({"opencl:0"}), Contains("processor 'opencl:0'") && Contains("absent"));
  CHECK(stile::open_mapping_processors({"cpu:0"}, g, stile::OpMapping::uniform(g.size(), 0), "m.json").owned.size() == 1);
}

// The request cost fit (calibrate/request_cost_profiler.hpp): its mappings, its count of hand-offs
// on the critical path, and its least squares on samples with known costs.
TEST_CASE("request cost fit: mappings, critical hand-offs and the fitted costs") {
  const stile::OpGraph g = stile::bert_op_graph({.layers = 2, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 3});
  const std::vector<NumberFormat> f(g.size(), NumberFormat::kF32);
  const stile::OpMapping one = stile::layer_norms_moved(g, f, 0, 1, 1);
  std::size_t moved = 0;
  for (std::size_t n = 0; n < g.size(); ++n) {
    if (one.processor[n] == 1) {
      ++moved;
      CHECK(g.nodes[n].kind == stile::OpNodeKind::kLayerNorm);
      CHECK(g.nodes[n].layer == 0);
    }
  }
  CHECK(moved == 2);
  // Every node 1 us, free transfers. Each moved LayerNorm sits between two nodes of processor 0
  // on the critical path (attn_out -> ln1 -> ffn_in, ffn_out -> ln2 -> the next qkv or pooling):
  // two hand-offs each.
  const stile::OpCostTable c = stile::OpCostTable::constant(g.size(), 2, 1.0);
  CHECK(stile::critical_handoffs(g, c, one, 0, 1) == Approx(4));
  CHECK(stile::critical_handoffs(g, c, stile::layer_norms_moved(g, f, 1, 0, 2), 0, 1) == Approx(8));
  CHECK(stile::critical_handoffs(g, c, stile::OpMapping::uniform(g.size(), 0), 0, 1) == 0);

  // Samples made from a request cost of 10 us at 32 tokens and 30 at 128, hand-offs of 5 / 12 us
  // (pair 0) and 20 / 0 us (pair 1) at 32 / 128 tokens.
  std::vector<stile::RequestCostSample> s;
  auto add = [&](std::size_t tokens, std::size_t used, std::size_t pair, double nodes, double handoffs,
                 double measured) {
    stile::RequestCostSample x;
    x.tokens = tokens, x.processors_used = used, x.pair = pair, x.nodes_us = nodes, x.handoffs = handoffs;
    x.measured_us = measured;
    s.push_back(x);
  };
  add(128, 1, 0, 4000, 0, 4030);
  add(32, 1, 0, 1000, 0, 1009);  // residuals 9, 10, 40: the median is 10
  add(32, 1, 0, 2000, 0, 2010);
  add(32, 1, 0, 500, 0, 540);
  for (const double h : {4.0, 12.0, 24.0}) add(32, 2, 0, 3000, h, 3000 + 10 + 5 * h);
  for (const double h : {4.0, 24.0}) add(128, 2, 0, 9000, h, 9000 + 30 + 12 * h);
  for (const double h : {4.0, 8.0}) add(32, 2, 1, 3000, h, 3000 + 10 + 20 * h);
  for (const double h : {4.0, 8.0}) add(128, 2, 1, 9000, h, 9000 + 30 - 3 * h);  // below the request cost: 0
  const stile::RequestCostFit fit = stile::fit_request_model(s, 3);
  CHECK(fit.tokens == std::vector<std::size_t>{32, 128});
  CHECK(fit.request_us == std::vector<double>{10, 30});
  REQUIRE(fit.handoff_us.size() == 3);
  REQUIRE(fit.handoff_us[0].size() == 2);
  CHECK(fit.handoff_us[0][0] == Approx(5));
  CHECK(fit.handoff_us[0][1] == Approx(12));
  CHECK(fit.handoff_us[1] == std::vector<double>{20, 0});
  CHECK(fit.handoff_us[2].empty());  // no runs on pair 2
  // Residuals below the nodes are a negative request cost (the nodes over-predict the request).
  std::vector<stile::RequestCostSample> low{s[1]};
  low[0].measured_us = 900;
  CHECK(stile::fit_request_model(low, 0).request_us == std::vector<double>{-100});
  low.push_back(s[2]);  // residuals -100 and 10: an even count's median is the middle two's mean
  CHECK(stile::fit_request_model(low, 0).request_us == std::vector<double>{-45});
  // A pair with runs at one length only.
  std::vector<stile::RequestCostSample> partial(s.begin(), s.begin() + 7);
  CHECK_THAT(error_of([&] { stile::fit_request_model(partial, 1); }),
             Contains("processor pair 0 has no runs at 128 tokens"));
  // A length with two-processor runs but none on one processor.
  CHECK_THAT(error_of([&] { stile::fit_request_model({s[1], s.back()}, 2); }),
             Contains("no run on one processor at 128 tokens"));
  CHECK_THAT(error_of([] { stile::fit_request_model({}, 0); }), Contains("no run on one processor"));
}

// The traced op profiler (calibrate/traced_op_profiler.hpp) on a CPU core: every kind it fills, in
// the formats it says, from the trace's calls; nothing else. (What it measures is not checked:
// timing gates no test.)
TEST_CASE("traced op profiler: the whole model on one processor fills its kinds from the trace") {
  if (!stile::core_available(0)) {
    WARN("SKIPPED: core 0 is not available to this process");
    return;
  }
  stile_test::TempDir dir;
  stile_test::write_tiny_bert(dir.path, 2);
  const stile::EncoderConfig c = stile::read_encoder_config((dir.path / "config.json").string());
  const stile::OpGraphShape shape{.layers = c.num_layers, .hidden = c.hidden, .heads = c.num_heads,
                                  .ffn = c.intermediate, .tokens = 0, .classes = 2};
  stile::OpLatencyProfile p = stile::OpLatencyProfile::empty(shape, {4, 8}, {"cpu:0"});
  const std::size_t q = 0;
  p.entry(0, stile::OpNodeKind::kPooling, NumberFormat::kF32) = {3.0, 5.0};  // the host's
  p.entry(0, stile::OpNodeKind::kClassifier, NumberFormat::kF32) = {1.0, 2.0};
  stile::measure_traced_op_latency(p, q, 0, dir.path, {NumberFormat::kF32, NumberFormat::kInt8}, 2);
  using K = stile::OpNodeKind;
  for (const K k : {K::kQkv, K::kAttnOut, K::kFfnIn, K::kFfnOut}) {
    CHECK(p.has(q, k, NumberFormat::kF32));
    CHECK(p.has(q, k, NumberFormat::kInt8));
    CHECK_FALSE(p.has(q, k, NumberFormat::kF16));
    CHECK(p.latency_us(q, k, NumberFormat::kF32, 8) > 0);
  }
  for (const K k : {K::kEmbedding, K::kAttentionHead, K::kLayerNorm}) {
    CHECK(p.has(q, k, NumberFormat::kF32));
    CHECK_FALSE(p.has(q, k, NumberFormat::kInteger));
    CHECK(p.latency_us(q, k, NumberFormat::kF32, 4) > 0);
  }
  CHECK(p.latency_us(q, K::kPooling, NumberFormat::kF32, 8) == 5.0);
  CHECK(p.latency_us(q, K::kClassifier, NumberFormat::kF32, 4) == 1.0);
  CHECK(p.settings["traced"].contains("cpu:0"));
}

// The mapped layer behind the shard-store engine (hetero/mapped_layer_compute.hpp): a mapping
// file's processors and formats executed over the store's shards, layer by layer.
namespace {

const stile_test::ConvertedStore& mapped_store() {
  static const stile_test::ConvertedStore s(
      "mapped_engine.stile", [](const std::filesystem::path& dir) { stile_test::write_tiny_bert(dir, 2, 4242); },
      {4, 32});
  return s;
}

const stile::OpGraph& mapped_graph() {
  static const stile::OpGraph g =
      stile::op_graph_of(stile::read_encoder_config((mapped_store().dir.path / "config.json").string()));
  return g;
}

// The engine's embedding of `e` under plan `plan` with mapping `m` on `procs` (the embedding
// LayerNorm in the embedding node's format, as run --mapping sets it).
std::vector<float> run_mapped_engine(const stile::OpMapping& m, std::vector<stile::Processor*> procs,
                                     const stile::Encoding& e, const stile::SubmodelPlan& plan, int requests = 1) {
  stile::EngineOptions options;
  options.embedding_layer_norm = stile::mapped_embedding_norm(mapped_graph(), m.format);
  stile::Engine engine(mapped_store().store, options);
  engine.set_layer_compute(std::make_unique<stile::MappedLayerCompute>(engine.store().config(), m, std::move(procs)));
  std::vector<float> out;
  for (int r = 0; r < requests; ++r) out = engine.run(e, plan).embedding;  // later ones: converted layers kept
  return out;
}

double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("an all-fp32 mapping behind the engine gives the default engine's embedding, whole and partial") {
  const stile::Encoding e = stile_test::tiny_tokens(11);
  const stile::OpGraph& g = mapped_graph();
  REQUIRE(g.nodes.front().kind == stile::OpNodeKind::kEmbedding);
  TwoClusters p;
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 0; n < g.size(); n += 2) m.processor[n] = 1;
  for (const unsigned bits : {4u, 32u}) {
    for (const std::size_t shards : {4u, 3u}) {  // all heads, and a layer of 3 of 4 shards
      const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, shards, bits);
      const std::vector<float> want = stile::Engine(mapped_store().store).run(e, plan).embedding;
      INFO("bits " << bits << ", shards " << shards);
      CHECK(worst_difference(run_mapped_engine(m, p.both(), e, plan, 2), want) <= 1e-5);
    }
  }
}

TEST_CASE("behind the engine, a request that converts its layers records the conversion per layer") {
  const stile::Encoding e = stile_test::tiny_tokens(9);
  TwoClusters p;
  const stile::OpGraph& g = mapped_graph();
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 0; n < g.size(); ++n) {
    m.processor[n] = static_cast<std::uint8_t>(n % 2);
    if (stile::is_linear(g.nodes[n].kind)) m.format[n] = NumberFormat::kInt8;
  }
  stile::Engine engine(mapped_store().store);
  auto compute = std::make_unique<stile::MappedLayerCompute>(engine.store().config(), m, p.both());
  const stile::MappedLayerCompute& mapped = *compute;
  engine.set_layer_compute(std::move(compute));
  const auto converted_per_layer = [](const stile::Timeline& t) {
    std::vector<double> ms;
    for (const stile::LayerTimes& l : t.layers) ms.push_back(l.convert_ms);
    return ms;
  };
  // First request at 4 bits: both layers converted, within their compute spans.
  const stile::Timeline first = engine.run(e, stile::SubmodelPlan::uniform(2, 4, 4)).timeline;
  REQUIRE(first.layers.size() == 2);
  for (const stile::LayerTimes& l : first.layers) {
    CHECK(l.convert_ms > 0);
    CHECK(l.convert_ms <= l.compute_end_ms - l.compute_start_ms);
  }
  CHECK(first.conversion_ms() == Approx(mapped.conversion_ms()));
  // The same versions again: nothing converted. Other bitwidths: converted again.
  const stile::Timeline again = engine.run(e, stile::SubmodelPlan::uniform(2, 4, 4)).timeline;
  CHECK(converted_per_layer(again) == std::vector<double>{0.0, 0.0});
  const double before = mapped.conversion_ms();
  const stile::Timeline other = engine.run(e, stile::SubmodelPlan::uniform(2, 3, 32)).timeline;
  for (const stile::LayerTimes& l : other.layers) CHECK(l.convert_ms > 0);
  CHECK(mapped.conversion_ms() == Approx(before + other.conversion_ms()));
}

TEST_CASE("random mappings behind the engine: the mapped forward's embedding at 32 bits, one processor's when spread") {
  const stile::Encoding e = stile_test::tiny_tokens(12);
  const std::filesystem::path model = mapped_store().dir.path;
  const stile::EncoderConfig c = stile::read_encoder_config((model / "config.json").string());
  const stile::OpGraph g = stile::op_graph_of(c);
  const std::vector<float> fp32 =
      stile::Engine(mapped_store().store).run(e, stile::SubmodelPlan::uniform(2, 4, 32)).embedding;
  TwoClusters p;
  std::mt19937_64 rng(23);
  for (int k = 0; k < 4; ++k) {
    const stile::OpMapping m = random_spread_mapping(g, rng);
    INFO("mapping " << k);
    // 32-bit shards hold the checkpoint's fp32 weights: the in-memory mapped forward of the same
    // mapping, pooled as the engine pools (mean, then L2).
    const std::vector<float> got = run_mapped_engine(m, p.both(), e, stile::SubmodelPlan::uniform(2, 4, 32));
    std::vector<float> hidden, want(c.hidden);
    stile::MappedForward f(stile::BertWeights::load(model, stile::mapped_weights_precision(g, m.format)), m, p.both());
    f.encode(std::span(&e, 1), hidden);
    stile::pool_tokens(hidden, hidden.size() / c.hidden, c.hidden, stile::Pooling::kMean, want);
    stile::l2_normalize(want);
    CHECK(worst_difference(got, want) <= 1e-6);
    CHECK(worst_difference(got, fp32) > 1e-4);  // the formats were used
    // A partial model at 4 bits: spread over the two clusters is the same mapping on one, bit for bit.
    const stile::SubmodelPlan partial = stile::SubmodelPlan::uniform(2, 3, 4);
    stile::OpMapping one = m;
    one.processor.assign(g.size(), 0);
    CHECK(run_mapped_engine(m, p.both(), e, partial) == run_mapped_engine(one, p.both(), e, partial));
  }
}

TEST_CASE("behind the engine, a failing processor fails the request by name; the next request succeeds") {
  const stile::Encoding e = stile_test::tiny_tokens(9);
  const stile::OpGraph& g = mapped_graph();
  TwoClusters p;
  FailingProcessor flaky(p.b);
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 0; n < g.size(); ++n) m.processor[n] = static_cast<std::uint8_t>(n % 2);
  stile::Engine engine(mapped_store().store);
  engine.set_layer_compute(std::make_unique<stile::MappedLayerCompute>(engine.store().config(), m,
                                                                       std::vector<stile::Processor*>{&p.a, &flaky}));
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 4, 4);
  const std::vector<float> first = engine.run(e, plan).embedding;
  flaky.arm();
  CHECK_THAT(error_of([&] { engine.run(e, plan); }), Contains("processor 'cpu:b'") && Contains("channels"));
  CHECK(engine.run(e, plan).embedding == first);
}

TEST_CASE("behind the engine, a read failing while mapped layers run fails that request only") {
  const stile::Encoding e = stile_test::tiny_tokens(10);
  const stile::OpGraph& g = mapped_graph();
  TwoClusters p;
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 0; n < g.size(); ++n) m.processor[n] = static_cast<std::uint8_t>((n / 3) % 2);
  auto faults = std::make_shared<stile::FaultInjector>();
  stile::EngineOptions options;
  options.faults = faults;
  stile::Engine engine(mapped_store().store, options);
  engine.set_layer_compute(std::make_unique<stile::MappedLayerCompute>(engine.store().config(), m, p.both()));
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 4, 4);
  const std::vector<float> first = engine.run(e, plan).embedding;
  const std::uint64_t reads = faults->reads();
  REQUIRE(reads >= 3);  // the word rows, then each layer's shards
  // The second request's last read (the last layer's shards), while the first layer is queued.
  faults->add({.kind = stile::FaultKind::eio, .nth = 2 * reads});
  CHECK_THAT(error_of([&] { engine.run(e, plan); }), Contains("Input/output error"));
  REQUIRE(faults->log().size() == 1);
  CHECK(engine.run(e, plan).embedding == first);
}

TEST_CASE("a device profile timed on a mapping runs the mapped layer for every cell, and records the mapping") {
  const stile::OpGraph& g = mapped_graph();
  TwoClusters p;
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 0; n < g.size(); ++n) {
    m.processor[n] = static_cast<std::uint8_t>(n % 2);
    if (stile::is_linear(g.nodes[n].kind)) m.format[n] = NumberFormat::kInt8;
  }
  const stile::ShardStore store = stile::ShardStore::open(mapped_store().store);
  stile::ReadBackendOptions backend_options;
  backend_options.kind = stile::ReadBackendKind::pread;
  const std::unique_ptr<stile::ReadBackend> backend = stile::open_read_backend(mapped_store().store, backend_options);
  stile::MappedLayerCompute compute(store.config(), m, p.both());
  stile::ProfileOptions options;
  options.lengths = {8};
  options.repeats = 1;
  options.compute = &compute;
  options.compute_name = "mapping under test";
  const stile::DeviceProfile profile = stile::measure_device_profile(store, *backend, options, nullptr);
  CHECK(profile.layer_compute() == "mapping under test");
  REQUIRE(profile.compute_ms.size() == store.bits().size());
  for (const auto* table : {&profile.compute_ms, &profile.compute_after_read_ms}) {
    for (const auto& per_length : *table) {
      for (const double ms : per_length.at(0)) {
        CHECK(std::isfinite(ms));
        CHECK(ms > 0);
      }
    }
  }
  // It ran the mapping: the layers it timed were converted into the nodes' int8 and kept.
  CHECK(compute.converted_bytes() > 0);

  // A processor failing under the profiler fails the measurement by name.
  FailingProcessor flaky(p.b);
  stile::MappedLayerCompute failing(store.config(), m, {&p.a, &flaky});
  options.compute = &failing;
  flaky.arm();
  CHECK_THAT(error_of([&] { (void)stile::measure_device_profile(store, *backend, options, nullptr); }),
             Contains("processor 'cpu:b'"));
}
