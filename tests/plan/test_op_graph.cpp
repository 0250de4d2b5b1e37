// The operator graph (plan/op_graph.hpp) against hand counts, the op latency profile's file
// (plan/op_latency_profile.hpp: lookups, round trip, bad files refused with the file named), the
// schedule emulator (plan/schedule_emulator.hpp) on hand-made graphs whose schedules are worked
// out below, and the mapping <-> ModelPrecision conversion (plan/mapping_precision.hpp).
#include <cstddef>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "stile/plan/mapping_precision.hpp"
#include "stile/plan/op_graph.hpp"
#include "stile/plan/op_latency_profile.hpp"
#include "stile/plan/schedule_emulator.hpp"
#include "support/error_of.hpp"
#include "support/temp_dir.hpp"

using Catch::Contains;
using stile_test::error_of;
using stile_test::TempDir;
using stile::NumberFormat;
using stile::OpNodeKind;

namespace {

const stile::OpNode& node(const stile::OpGraph& g, const std::string& name) {
  for (const auto& n : g.nodes) {
    if (n.name == name) return n;
  }
  FAIL("no node " << name);
  return g.nodes.front();
}

std::size_t index_of(const stile::OpGraph& g, const std::string& name) {
  return static_cast<std::size_t>(&node(g, name) - g.nodes.data());
}

// A hand-made graph: node i reads `inputs[i]` (producer, bytes); nodes listed in `branch` form one
// branch group.
stile::OpGraph hand_graph(const std::vector<std::vector<stile::OpEdge>>& inputs, std::vector<std::size_t> branch = {}) {
  stile::OpGraph g;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    stile::OpNode n;
    n.kind = OpNodeKind::kQkv;
    n.name = std::to_string(i);
    n.name.insert(0, 1, 'n');
    n.inputs = inputs[i];
    g.nodes.push_back(n);
  }
  if (!branch.empty()) {
    g.groups = 1;
    for (const std::size_t b : branch) {
      g.nodes[b].branch_group = 0;
      g.nodes[b].parallelism = branch.size();
    }
  }
  g.check();
  return g;
}

stile::OpCostTable costs_of(const std::vector<double>& us, std::size_t procs) {
  stile::OpCostTable t = stile::OpCostTable::constant(us.size(), procs, 0);
  for (std::size_t n = 0; n < us.size(); ++n) {
    for (std::size_t p = 0; p < procs; ++p) t.node_us[n][p].fill(us[n]);
  }
  return t;
}

stile::OpLatencyProfile small_profile() {
  stile::OpGraphShape shape{.layers = 1, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 0, .classes = 2};
  stile::OpLatencyProfile p = stile::OpLatencyProfile::empty(shape, {10, 20}, {"cpu:0", "cpu:1"});
  for (std::size_t q = 0; q < 2; ++q) {
    for (std::size_t k = 0; k < stile::kOpNodeKinds; ++k) {
      for (const NumberFormat f : stile::formats_of(static_cast<OpNodeKind>(k))) {
        p.entry(q, static_cast<OpNodeKind>(k), f) = {double(10 * (q + 1)), double(30 * (q + 1))};
      }
    }
  }
  p.transfer[0][1] = {2.0, 0.5};
  p.transfer[1][0] = {3.0, 0.25};
  return p;
}

}  // namespace

TEST_CASE("op graph: FLOPs and bytes of a tiny BERT against hand counts") {
  // layers 1, hidden 4, heads 2 (head_dim 2), ffn 8, tokens 3, classes 2.
  const stile::OpGraph g = stile::bert_op_graph({.layers = 1, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 3, .classes = 2});
  REQUIRE(g.size() == 11);  // embedding, qkv, 2 heads, attn_out, ln1, ffn_in, ffn_out, ln2, pooling, classifier
  struct Want {
    const char* name;
    double flops;
    std::size_t in, out;
  };
  // Worked by hand with the convention of op_graph.hpp (t = 3 tokens, fp32 = 4 bytes):
  //   embedding: 3*4*(2 + 8) = 120; reads 3 rows of 3 tables: 3*3*4*4 = 144; writes 3*4*4 = 48
  //   qkv: 3*12*(2*4 + 1) = 324; 48 -> 3*12*4 = 144
  //   head: 3*3*(4*2 + 1 + 5) = 126; its Q, K, V: 3*6*4 = 72 -> 3*2*4 = 24
  //   attn_out: 3*4*(2*4 + 1 + 1) = 120; 2 heads * 24 + residual 48 = 96 -> 48
  //   ln: 3*4*8 = 96; 48 -> 48
  //   ffn_in: 3*8*(2*4 + 1 + 8) = 408; 48 -> 96
  //   ffn_out: 3*4*(2*8 + 1 + 1) = 216; 96 + residual 48 = 144 -> 48
  //   pooling: 3*4 + 4 = 16; 48 -> 16;  classifier: 2*(2*4 + 1) = 18; 16 -> 8
  const std::vector<Want> want{{"embedding", 120, 144, 48},      {"layer0.qkv", 324, 48, 144},
                               {"layer0.head0", 126, 72, 24},    {"layer0.head1", 126, 72, 24},
                               {"layer0.attn_out", 120, 96, 48}, {"layer0.ln1", 96, 48, 48},
                               {"layer0.ffn_in", 408, 48, 96},   {"layer0.ffn_out", 216, 144, 48},
                               {"layer0.ln2", 96, 48, 48},       {"pooling", 16, 48, 16},
                               {"classifier", 18, 16, 8}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].name);
    CHECK(g.nodes[i].name == want[i].name);
    CHECK(g.nodes[i].flops == want[i].flops);
    CHECK(g.nodes[i].bytes_in == want[i].in);
    CHECK(g.nodes[i].bytes_out == want[i].out);
  }
  CHECK(g.total_flops() == 1666);
  // The heads are the one branch group; everything else is sequential.
  CHECK(node(g, "layer0.head0").branch_group == node(g, "layer0.head1").branch_group);
  CHECK(node(g, "layer0.head1").parallelism == 2);
  CHECK(node(g, "layer0.qkv").parallelism == 1);
  // Edges: attn_out reads both heads and the embedding (residual); ffn_out reads ffn_in and ln1.
  const auto& ao = node(g, "layer0.attn_out");
  REQUIRE(ao.inputs.size() == 3);
  CHECK(ao.inputs[0].from == 2);
  CHECK(ao.inputs[1].from == 3);
  CHECK(ao.inputs[2].from == 0);
  const auto& fo = node(g, "layer0.ffn_out");
  REQUIRE(fo.inputs.size() == 2);
  CHECK(fo.inputs[0].from == 6);
  CHECK(fo.inputs[1].from == 5);
}

TEST_CASE("op graph: MiniLM's GEMM FLOPs are the textbook 2 * tokens * parameters") {
  // all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads, ffn 1536; 128 tokens. Per layer the four
  // GEMMs hold 4 d^2 + 2 d ff weights: 2 * 128 * (4 * 384^2 + 2 * 384 * 1536) = 452,984,832 FLOPs.
  const stile::OpGraph g =
      stile::bert_op_graph({.layers = 6, .hidden = 384, .heads = 12, .ffn = 1536, .tokens = 128, .classes = 2});
  CHECK(g.size() == 1 + 6 * (1 + 12 + 5) + 2);
  CHECK(g.groups == 6);
  double weights = 0;
  for (const auto& n : g.layer_nodes[0]) {
    const auto& nd = g.nodes[n];
    if (nd.kind == OpNodeKind::kQkv) weights += 384.0 * 1152;
    if (nd.kind == OpNodeKind::kAttnOut) weights += 384.0 * 384;
    if (nd.kind == OpNodeKind::kFfnIn || nd.kind == OpNodeKind::kFfnOut) weights += 384.0 * 1536;
  }
  CHECK(2 * 128 * weights == 452984832.0);
  // The nodes' FLOPs exceed the GEMMs' by exactly their element-wise terms (bias 1, residual 1,
  // GELU 8 per output element).
  double layer_linear = 0;
  for (const auto& n : g.layer_nodes[0]) {
    const auto& nd = g.nodes[n];
    if (nd.kind == OpNodeKind::kQkv || nd.kind == OpNodeKind::kAttnOut || nd.kind == OpNodeKind::kFfnIn ||
        nd.kind == OpNodeKind::kFfnOut) {
      layer_linear += nd.flops;
    }
  }
  const double elementwise = 128.0 * (1152 * 1 + 384 * 2 + 1536 * (1 + 8) + 384 * 2);
  CHECK(layer_linear == 452984832.0 + elementwise);
  // Every layer has the same slots (what the GA's gene reuse copies between).
  for (const auto& l : g.layer_nodes) {
    for (std::size_t s = 0; s < l.size(); ++s) CHECK(g.nodes[l[s]].kind == g.nodes[g.layer_nodes[0][s]].kind);
  }
}

TEST_CASE("op graph: bad shapes are refused") {
  CHECK_THAT(error_of([] { stile::bert_op_graph({.layers = 1, .hidden = 5, .heads = 2, .ffn = 8, .tokens = 3}); }),
             Contains("multiple of heads"));
  CHECK_THAT(error_of([] { stile::bert_op_graph({.layers = 0, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 3}); }),
             Contains(">= 1"));
}

TEST_CASE("schedule emulator: a chain on one processor is the sum of its nodes") {
  const stile::OpGraph g = hand_graph({{}, {{0, 8}}, {{1, 8}}});
  const stile::OpCostTable c = costs_of({1, 2, 3}, 2);
  const stile::OpSchedule s = stile::emulate_schedule(g, c, stile::OpMapping::uniform(3, 0));
  CHECK(s.makespan_us == 6);
  CHECK(s.start_us == std::vector<double>{0, 1, 3});
}

TEST_CASE("schedule emulator: parallel branches overlap on two processors, transfers delay the join") {
  // a -> {b, c} -> d; a 1 us, b and c 5 us, d 1 us.
  const stile::OpGraph g = hand_graph({{}, {{0, 100}}, {{0, 100}}, {{1, 10}, {2, 10}}}, {1, 2});
  stile::OpCostTable c = costs_of({1, 5, 5, 1}, 2);
  // One processor: 1 + 5 + 5 + 1.
  CHECK(stile::predict_latency_us(g, c, stile::OpMapping::uniform(4, 0)) == 12);
  // c on processor 1, free transfers: b [1, 6] on 0, c [1, 6] on 1, d [6, 7].
  stile::OpMapping m = stile::OpMapping::uniform(4, 0);
  m.processor[2] = 1;
  CHECK(stile::predict_latency_us(g, c, m) == 7);
  // Transfers 0 -> 1: 0.5 us + 0.01 us/byte (100 bytes: 1.5 us); 1 -> 0: 0.25 us + 0.1 us/byte (10
  // bytes: 1.25 us). c [2.5, 7.5] on 1; d waits for c: 7.5 + 1.25 = 8.75, ends 9.75.
  c.transfer[0][1] = {0.5, 0.01};
  c.transfer[1][0] = {0.25, 0.1};
  const stile::OpSchedule s = stile::emulate_schedule(g, c, m);
  CHECK(s.start_us[2] == Approx(2.5));
  CHECK(s.start_us[3] == Approx(8.75));
  CHECK(s.makespan_us == Approx(9.75));
  CHECK(s.busy_us[0] == 7);
  CHECK(s.busy_us[1] == 5);
  // Three branches on two processors: the third waits for a processor.
  const stile::OpGraph g3 = hand_graph({{}, {{0, 0}}, {{0, 0}}, {{0, 0}}, {{1, 0}, {2, 0}, {3, 0}}}, {1, 2, 3});
  stile::OpMapping m3 = stile::OpMapping::uniform(5, 0);
  m3.processor[2] = 1;
  CHECK(stile::predict_latency_us(g3, costs_of({1, 4, 4, 4, 1}, 2), m3) == 1 + 4 + 4 + 1);
}

TEST_CASE("schedule emulator: the request cost follows the number of processors used") {
  // a -> {b, c} -> d as above; request cost 10 us on one processor, 100 us on two.
  const stile::OpGraph g = hand_graph({{}, {{0, 100}}, {{0, 100}}, {{1, 10}, {2, 10}}}, {1, 2});
  stile::OpCostTable c = costs_of({1, 5, 5, 1}, 2);
  c.request_us = {10, 100};
  const stile::OpSchedule one = stile::emulate_schedule(g, c, stile::OpMapping::uniform(4, 1));
  CHECK(one.request_us == 10);
  CHECK(one.makespan_us == 12 + 10);
  CHECK(one.finish_us[3] == 12);  // the nodes' schedule is unchanged
  stile::OpMapping m = stile::OpMapping::uniform(4, 0);
  m.processor[2] = 1;
  CHECK(stile::emulate_schedule(g, c, m).request_us == 100);
  CHECK(stile::predict_latency_us(g, c, m) == 7 + 100);
  // Spreading now loses: 107 us against 22 on one processor. Without the term it won, 7 against 12.
  c.request_us.clear();
  CHECK(stile::predict_latency_us(g, c, m) == 7);
  // More processors than entries: the last entry.
  stile::OpCostTable c3 = costs_of({1, 5, 5, 1}, 3);
  c3.request_us = {10, 100};
  m.processor[1] = 2;
  CHECK(stile::emulate_schedule(g, c3, m).request_us == 100);
}

TEST_CASE("schedule emulator: formats pick their cost; a missing one or a bad mapping is an error") {
  const stile::OpGraph g = hand_graph({{}, {{0, 8}}});
  stile::OpCostTable c = costs_of({4, 4}, 1);
  c.node_us[1][0][static_cast<std::size_t>(NumberFormat::kInt8)] = 1;
  c.node_us[1][0][static_cast<std::size_t>(NumberFormat::kF16)] = stile::OpCostTable::kMissing;
  stile::OpMapping m = stile::OpMapping::uniform(2, 0);
  m.format[1] = NumberFormat::kInt8;
  CHECK(stile::predict_latency_us(g, c, m) == 5);
  m.format[1] = NumberFormat::kF16;
  CHECK_THAT(error_of([&] { stile::predict_latency_us(g, c, m); }), Contains("n1 has no cost in fp16"));
  m = stile::OpMapping::uniform(2, 1);
  CHECK_THAT(error_of([&] { stile::predict_latency_us(g, c, m); }), Contains("processor 1 of 1"));
  CHECK_THAT(error_of([&] { stile::predict_latency_us(g, c, stile::OpMapping::uniform(3, 0)); }),
             Contains("graph of 2 nodes"));
}

TEST_CASE("op latency profile: lookups interpolate; the file round-trips") {
  const stile::OpLatencyProfile p = small_profile();
  CHECK(p.latency_us(0, OpNodeKind::kQkv, NumberFormat::kF32, 10) == 10);
  CHECK(p.latency_us(0, OpNodeKind::kQkv, NumberFormat::kF32, 15) == 20);
  CHECK(p.latency_us(1, OpNodeKind::kQkv, NumberFormat::kF32, 30) == 100);  // extrapolated
  CHECK(p.latency_us(0, OpNodeKind::kQkv, NumberFormat::kF32, 1) == 0);     // never below 0
  CHECK(p.transfer_us(0, 1, 10, 16) == 7);
  CHECK(p.transfer_us(1, 1, 10, 16) == 0);
  CHECK_THAT(error_of([&] { p.latency_us(0, OpNodeKind::kQkv, NumberFormat::kInteger, 10); }),
             Contains("no latency of qkv in integer on cpu:0"));
  TempDir dir;
  p.save(dir.path / "p.json");
  const stile::OpLatencyProfile q = stile::OpLatencyProfile::load(dir.path / "p.json");
  CHECK(q.to_json() == p.to_json());
  // From the profile, a graph's cost table: every node of the tiny graph at 15 tokens.
  const stile::OpGraph g = stile::bert_op_graph({.layers = 1, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 15});
  const stile::OpCostTable c = stile::OpCostTable::from_profile(g, q);
  CHECK(stile::predict_latency_us(g, c, stile::OpMapping::uniform(g.size(), 1)) == 40.0 * 11);
  const stile::OpGraph other = stile::bert_op_graph({.layers = 2, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 15});
  CHECK_THAT(error_of([&] { stile::OpCostTable::from_profile(other, q); }), Contains("another model shape"));
}

TEST_CASE("op latency profile: version 4 has signed request costs and hand-offs per token count; 3, 2, 1 still read") {
  stile::OpLatencyProfile p = small_profile();
  CHECK_FALSE(p.request_measured);
  CHECK(p.request_cost_us(1, 10) == 0);
  CHECK(p.to_json()["version"] == 1);  // nothing fitted: written as version 1, without request_us
  CHECK_FALSE(p.to_json().contains("request_us"));
  CHECK_THAT(p.request_cost_note(), Contains("no request cost (version 1)"));
  const stile::OpGraph g = stile::bert_op_graph({.layers = 1, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 10});
  CHECK(stile::OpCostTable::from_profile(g, p).request_us.empty());
  // Fitted at 8 and 16 tokens: 4 / 20 us on one processor, 100 / 200 on two.
  p.request_tokens = {8, 16};
  p.request_us = {{4, 20}, {100, 200}};
  p.request_measured = true;
  CHECK_THAT(p.request_cost_note(), Contains("one hand-off cost") && Contains("(version 3)"));
  CHECK(p.request_cost_us(1, 10) == 8);    // interpolated as the nodes are
  CHECK(p.request_cost_us(2, 12) == 150);
  CHECK(p.request_cost_us(1, 4) == 0);     // extrapolated, never below 0
  CHECK(p.request_cost_us(3, 16) == 200);  // more processors than rows: the last row
  const nlohmann::json j = p.to_json();
  CHECK(j["version"] == 3);
  CHECK(j["request_tokens"] == nlohmann::json({8, 16}));
  CHECK(j["request_us"] == nlohmann::json({{4.0, 20.0}, {100.0, 200.0}}));
  const stile::OpLatencyProfile q = stile::OpLatencyProfile::from_json(j, "x.json");
  CHECK(q.request_measured);
  CHECK(q.request_tokens == p.request_tokens);
  CHECK(q.request_us == p.request_us);
  CHECK(q.to_json() == j);
  // The emulator takes the cost at the graph's length. One processor: 11 nodes of 10 us + 8;
  // spread over both: + 125 (and its transfers).
  const stile::OpCostTable c = stile::OpCostTable::from_profile(g, q);
  CHECK(stile::predict_latency_us(g, c, stile::OpMapping::uniform(g.size(), 0)) == 110 + 8);
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  m.processor[g.size() - 1] = 1;  // the classifier: one transfer of its input (2.0 + 0.5 x bytes)
  CHECK(stile::emulate_schedule(g, c, m).request_us == 125);
  // A version 2 file: one request cost per processor count, the same at every length, with a note.
  nlohmann::json v2 = j;
  v2["version"] = 2;
  v2.erase("request_tokens");
  v2["request_us"] = {12.0, 150.0};
  const stile::OpLatencyProfile two = stile::OpLatencyProfile::from_json(v2, "v2.json");
  CHECK(two.request_measured);
  CHECK(two.request_tokens.empty());
  CHECK(two.request_cost_us(1, 4) == 12);
  CHECK(two.request_cost_us(2, 160) == 150);
  CHECK_THAT(two.request_cost_note(), Contains("one request cost for every sequence length (version 2)"));
  CHECK(two.to_json() == v2);
  CHECK(stile::emulate_schedule(g, stile::OpCostTable::from_profile(g, two), m).request_us == 150);
  // A version 1 file (before the request cost) is still read, and its request costs are 0.
  nlohmann::json v1 = v2;
  v1["version"] = 1;
  v1.erase("request_us");
  const stile::OpLatencyProfile old = stile::OpLatencyProfile::from_json(v1, "old.json");
  CHECK_FALSE(old.request_measured);
  CHECK(old.request_cost_us(2, 10) == 0);
  CHECK(old.to_json() == v1);
  auto refused = [](const nlohmann::json& bad) {
    return error_of([&] { stile::OpLatencyProfile::from_json(bad, "x.json"); });
  };
  nlohmann::json bad = v1;
  bad["request_us"] = {1.0, 2.0};
  CHECK_THAT(refused(bad), Contains("version 1 has no \"request_us\""));
  bad = v2;
  bad["request_tokens"] = {8, 16};
  CHECK_THAT(refused(bad), Contains("version 2 has no \"request_tokens\""));
  bad = v2;
  bad["request_us"] = {1.0};
  CHECK_THAT(refused(bad), Contains("one per processor count"));
  bad = v2;
  bad["request_us"] = {1.0, -1.0};
  CHECK_THAT(refused(bad), Contains(">= 0"));
  for (const char* key : {"request_us", "request_tokens"}) {
    bad = j;
    bad.erase(key);
    CHECK_THAT(refused(bad), Contains("x.json") && Contains(key));
  }
  bad = j;
  bad["request_tokens"] = {16, 8};
  CHECK_THAT(refused(bad), Contains("strictly increasing"));
  bad = j;
  bad["request_us"] = {{4.0, 20.0}};
  CHECK_THAT(refused(bad), Contains("one row per processor count"));
  bad = j;
  bad["request_us"][1] = {100.0};
  CHECK_THAT(refused(bad), Contains("\"request_us\"[1]") && Contains("one per request_tokens entry"));
  bad = j;
  bad["request_us"][0][0] = -1.0;  // negative: version 4 only
  CHECK_THAT(refused(bad), Contains("\"request_us\"[0][0] must be a finite number >= 0"));
  bad = j;
  bad["transfer"][0]["call_us"] = {1.0, 2.0};  // one per length: version 4 only
  CHECK_THAT(refused(bad), Contains("\"call_us\" must be a finite number >= 0"));

  // Version 4: request costs of either sign, never extrapolated below min(0, the row's lowest), and a
  // hand-off per length; the emulator takes both at the graph's length.
  p.request_us = {{-40, 20}, {-40, 20}};
  p.handoff_us[0][1] = p.handoff_us[1][0] = {10, 30};
  CHECK(p.request_cost_note().empty());
  CHECK(p.request_cost_us(1, 12) == -10);
  CHECK(p.request_cost_us(2, 4) == -40);  // extrapolated: -70, held at the row's lowest
  CHECK(p.transfer_at(0, 1, 12).call_us == 20);
  CHECK(p.transfer_at(1, 0, 2).call_us == 0);  // extrapolated: -5, never below 0
  CHECK(p.transfer_at(0, 1, 12).byte_us == 0.5);
  CHECK(p.transfer_us(0, 1, 2, 16) == 31);
  const nlohmann::json j4 = p.to_json();
  CHECK(j4["version"] == 4);
  CHECK(j4["request_us"] == nlohmann::json({{-40.0, 20.0}, {-40.0, 20.0}}));
  CHECK(j4["transfer"][0]["call_us"] == nlohmann::json({10.0, 30.0}));
  const stile::OpLatencyProfile four = stile::OpLatencyProfile::from_json(j4, "v4.json");
  CHECK(four.handoff_us == p.handoff_us);
  CHECK(four.request_us == p.request_us);
  CHECK(four.to_json() == j4);
  // At the graph's 10 tokens: one processor, 11 nodes of 10 us - 25; a transfer from processor 0 to
  // 1, a hand-off of 15 us + 0.5 us x its bytes.
  const stile::OpCostTable c4 = stile::OpCostTable::from_profile(g, four);
  CHECK(stile::predict_latency_us(g, c4, stile::OpMapping::uniform(g.size(), 0)) == 110 - 25);
  CHECK(c4.transfer[0][1].call_us == 15);
  CHECK(c4.transfer[0][1].byte_us == 0.5);
  // A request cost never makes a prediction negative.
  stile::OpLatencyProfile cheap = four;
  cheap.request_us = {{-1000, -1000}, {-1000, -1000}};
  CHECK(stile::predict_latency_us(g, stile::OpCostTable::from_profile(g, cheap),
                                  stile::OpMapping::uniform(g.size(), 0)) == 0);
  bad = j4;
  bad["transfer"][0]["call_us"] = {1.0};
  CHECK_THAT(refused(bad), Contains("\"call_us\" has 1 entries") && Contains("one per request_tokens entry"));
  bad = j4;
  bad["transfer"][0]["call_us"] = {1.0, -2.0};
  CHECK_THAT(refused(bad), Contains("\"call_us\"[1] must be a finite number >= 0"));
  bad = j4;
  bad["request_us"][1][0] = nullptr;  // what nlohmann writes for NaN
  CHECK_THAT(refused(bad), Contains("\"request_us\"[1][0] must be a finite number"));
  bad = j4;
  bad["version"] = 5;
  CHECK_THAT(refused(bad), Contains("version 5 is not supported") && Contains("version 4, 3, 2 or 1"));
}

TEST_CASE("op latency profile: a processor added later has no entries and free transfers") {
  stile::OpLatencyProfile p = small_profile();
  p.request_us = {{12}, {150}};
  p.request_measured = true;
  CHECK(p.add_processor("opencl:0") == 2);
  CHECK(p.processors.back() == "opencl:0");
  REQUIRE(p.transfer.size() == 3);
  for (const auto& row : p.transfer) CHECK(row.size() == 3);
  CHECK(p.transfer_us(0, 2, 100, 16) == 0);
  CHECK(p.transfer_us(0, 1, 10, 16) == 7);  // the others' are kept
  CHECK(p.request_us == std::vector<std::vector<double>>{{12}, {150}, {150}});
  CHECK_FALSE(p.has(2, OpNodeKind::kQkv, NumberFormat::kF32));
  p.entry(2, OpNodeKind::kQkv, NumberFormat::kF32) = {1, 2};
  CHECK(p.latency_us(2, OpNodeKind::kQkv, NumberFormat::kF32, 20) == 2);
}

TEST_CASE("op latency profile: bad files are refused with the file and the problem named") {
  const nlohmann::json good = small_profile().to_json();
  auto refused = [](const nlohmann::json& j) {
    return error_of([&] { stile::OpLatencyProfile::from_json(j, "x.json"); });
  };
  CHECK_NOTHROW(stile::OpLatencyProfile::from_json(good, "x.json"));
  nlohmann::json j = good;
  j["extra"] = 1;
  CHECK_THAT(refused(j), Contains("x.json") && Contains("unknown key \"extra\""));
  j = good;
  j["format"] = "stile-device-profile";
  CHECK_THAT(refused(j), Contains("expected \"stile-op-latency-profile\""));
  j = good;
  j["tokens"] = {20, 10};
  CHECK_THAT(refused(j), Contains("increasing"));
  j = good;
  j["latency_us"][0]["format"] = "fp16";  // embedding has no fp16
  CHECK_THAT(refused(j), Contains("embedding has no fp16 format"));
  j = good;
  j["latency_us"].push_back(good["latency_us"][0]);
  CHECK_THAT(refused(j), Contains("a second entry"));
  j = good;
  j["latency_us"][1]["us"] = {1.0};
  CHECK_THAT(refused(j), Contains("one per tokens entry"));
  j = good;
  j["latency_us"][1]["us"] = {1.0, -2.0};
  CHECK_THAT(refused(j), Contains(">= 0"));
  j = good;
  j["latency_us"][1]["processor"] = "gpu";
  CHECK_THAT(refused(j), Contains("names no listed processor"));
  j = good;
  j["transfer"].erase(1);
  CHECK_THAT(refused(j), Contains("no transfer cost from \"cpu:1\" to \"cpu:0\""));
  j = good;
  j["processors"] = {"cpu:0", "cpu:0"};
  CHECK_THAT(refused(j), Contains("listed twice"));
  j = good;
  j["shape"]["heads"] = 3;
  CHECK_THAT(refused(j), Contains("not a multiple of heads"));
  TempDir dir;
  CHECK_THAT(error_of([&] { stile::OpLatencyProfile::load(dir.path / "missing.json"); }), Contains("missing.json"));
}

TEST_CASE("mapping precision: node formats to ModelPrecision and back") {
  const stile::OpGraph g = stile::bert_op_graph({.layers = 2, .hidden = 4, .heads = 2, .ffn = 8, .tokens = 3});
  for (const char* preset : {"fp32", "fp16", "int8", "ibert"}) {
    INFO(preset);
    stile::ModelPrecision p = stile::precision_preset(preset);
    const std::vector<NumberFormat> f = stile::formats_of_precision(g, p);
    const stile::ModelPrecision back = stile::to_model_precision(g, f);
    for (std::size_t l = 0; l < 2; ++l) CHECK(back.layer(l) == p.layer(l));
    CHECK(back.embedding_layer_norm == p.embedding_layer_norm);
  }
  std::vector<NumberFormat> f(g.size(), NumberFormat::kF32);
  f[index_of(g, "layer1.ffn_in")] = NumberFormat::kInteger;
  const stile::ModelPrecision p = stile::to_model_precision(g, f);
  CHECK(p.layer(1).ops.gelu == stile::GeluFormat::kInteger);
  CHECK(p.layer(1).format(stile::LinearOp::kFfnIn) == stile::LinearFormat::kInt8);
  CHECK(p.layer(0).ops.gelu == stile::GeluFormat::kExact);
  f.assign(g.size(), NumberFormat::kF32);
  f[2] = NumberFormat::kInteger;  // layer0.head0 only
  CHECK_THAT(error_of([&] { stile::to_model_precision(g, f); }), Contains("layer0.head1") && Contains("share"));
  f.assign(g.size(), NumberFormat::kF32);
  f[1] = NumberFormat::kInteger;  // qkv has no integer format
  CHECK_THAT(error_of([&] { stile::to_model_precision(g, f); }), Contains("layer0.qkv has no integer format"));
}
