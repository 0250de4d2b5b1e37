// The engine under injected read faults (io/fault_injection.hpp) on a tiny random BERT: each kind
// of fault (EIO, a short read, corrupted bytes) on the word rows or on a layer's shards fails
// exactly the request that met it, with an error naming the store, the layer, the shards and
// their bitwidths; the next request gives the fault-free engine's output; the preload buffer and
// the word-row cache keep nothing of the failed read. A late read is no failure: the request
// reports its deadline miss and the layer that stalled.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "stile/engine.hpp"
#include "stile/io/fault_injection.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "support/converted_store.hpp"
#include "support/error_of.hpp"
#include "support/tiny_bert.hpp"

using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const stile_test::ConvertedStore& store() {
  static const stile_test::ConvertedStore s(
      "faults.stile", [](const fs::path& dir) { stile_test::write_tiny_bert(dir, 3); }, {4, 32});
  return s;
}

// Uneven widths and two bitwidths, so that the errors must say which versions.
stile::SubmodelPlan plan() {
  stile::SubmodelPlan p;
  p.layers = {{{0, 4}, {1, 4}, {2, 4}, {3, 4}}, {{0, 4}, {1, 32}, {3, 4}}, {{2, 4}, {3, 32}}};
  return p;
}

stile::EngineOptions options(std::shared_ptr<stile::FaultInjector> faults = {}) {
  stile::EngineOptions o;
  o.threads = 1;                      // one summation order: outputs compare bit for bit
  o.preload_bytes = 64u << 20;        // everything: a failed read must still not enter it
  o.word_cache_bytes = 64u << 20;
  o.faults = std::move(faults);
  return o;
}

// Where in a fresh engine's first request each stage's reads fall (1-based read numbers), from a
// fault-free run of the same request.
struct ReadMap {
  std::size_t first_word_read = 1;
  std::vector<std::size_t> first_layer_read;
};
ReadMap read_map(const stile::EngineResult& r) {
  ReadMap m;
  std::size_t next = 1 + r.timeline.word_row_requests;  // nearby rows share a read
  for (const stile::LayerTimes& t : r.timeline.layers) {
    m.first_layer_read.push_back(next);
    next += t.reads;
  }
  return m;
}

bool holds_layer(const std::vector<stile::ShardKey>& keys, std::size_t layer) {
  return std::any_of(keys.begin(), keys.end(), [&](const stile::ShardKey& k) { return k.layer == layer; });
}

}  // namespace

TEST_CASE("fault scripts parse, and bad ones are refused naming the item", "[faults]") {
  const stile::FaultScript s = stile::parse_fault_script(" seed=7; eio@n=12; short@p=0.5 ;late@p=0.02,x=10-100;"
                                                          "corrupt@n=40; late@n=3,ms=50,x=20");
  CHECK(s.seed == 7);
  REQUIRE(s.rules.size() == 5);
  CHECK(s.rules[0].kind == stile::FaultKind::eio);
  CHECK(s.rules[0].nth == 12);
  CHECK(s.rules[1].kind == stile::FaultKind::short_read);
  CHECK(s.rules[1].probability == 0.5);
  CHECK(s.rules[2].factor_lo == 10);
  CHECK(s.rules[2].factor_hi == 100);
  CHECK(s.rules[3].kind == stile::FaultKind::corrupt);
  CHECK(s.rules[4].min_delay_ms == 50);
  CHECK(s.rules[4].factor_lo == 20);
  CHECK(s.rules[4].factor_hi == 20);
  CHECK(stile::parse_fault_script("").rules.empty());
  using stile_test::error_of;
  CHECK_THAT(error_of([] { stile::parse_fault_script("eio"); }), Contains("'eio'") && Contains("KIND@PARAMS"));
  CHECK_THAT(error_of([] { stile::parse_fault_script("fire@n=1"); }), Contains("unknown fault kind"));
  CHECK_THAT(error_of([] { stile::parse_fault_script("eio@n=0"); }), Contains("from 1"));
  CHECK_THAT(error_of([] { stile::parse_fault_script("eio@n=1,p=0.5"); }), Contains("exactly one of n= and p="));
  CHECK_THAT(error_of([] { stile::parse_fault_script("eio@p=1.5"); }), Contains("p= must be in"));
  CHECK_THAT(error_of([] { stile::parse_fault_script("eio@n=1,x=5"); }), Contains("unknown parameter 'x=5'"));
  CHECK_THAT(error_of([] { stile::parse_fault_script("late@n=1,x=50-10"); }), Contains("LO <= HI"));
  CHECK_THAT(error_of([] { stile::parse_fault_script("seed=abc"); }), Contains("whole number"));
}

TEST_CASE("each fault kind fails exactly the request that met it; the next one is right", "[engine][faults]") {
  const stile::Encoding first = stile_test::tiny_tokens(12, 0);
  const stile::Encoding second = stile_test::tiny_tokens(20, 1);
  const std::string name = store().store.filename().string();

  for (const stile::FaultKind kind : {stile::FaultKind::eio, stile::FaultKind::short_read, stile::FaultKind::corrupt}) {
    for (const std::size_t where : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}}) {  // 0: word rows
      INFO(to_string(kind) << (where == 0 ? " on the word rows" : " on layer " + std::to_string(where - 1)));
      stile::Engine reference(store().store, options());
      const stile::EngineResult expected_first = reference.run(first, plan());
      const ReadMap reads = read_map(expected_first);
      const std::vector<stile::ShardKey> reference_preload = reference.preloaded();
      const std::size_t reference_rows = reference.word_cache_held_bytes();
      const stile::EngineResult expected_second = reference.run(second, plan());

      auto faults = std::make_shared<stile::FaultInjector>();
      stile::Engine engine(store().store, options(faults));
      const std::size_t n = where == 0 ? reads.first_word_read : reads.first_layer_read[where - 1];
      faults->add({.kind = kind, .nth = n});
      const std::string error = stile_test::error_of([&] { engine.run(first, plan()); });
      REQUIRE(faults->log().size() == 1);
      CHECK(faults->log()[0].read == n);
      CHECK_THAT(error, Contains(name));
      if (where == 0) {
        CHECK_THAT(error, Contains("word-embedding row"));
        CHECK(engine.word_cache_held_bytes() == 0);  // not one row of the failed read
        CHECK(engine.preloaded().empty());           // no layer ran
      } else {
        const std::size_t layer = where - 1;
        CHECK_THAT(error, Contains("layer " + std::to_string(layer)));
        // The versions named: at least one of the layer's shards, with its bitwidth.
        CHECK_THAT(error, Contains("shard " + std::to_string(plan().layers[layer][0].shard)) &&
                              Contains(std::to_string(plan().layers[layer][0].bits) + " bits"));
        CHECK(engine.word_cache_held_bytes() == reference_rows);  // the word rows' read succeeded
        for (std::size_t l = layer; l < plan().layers.size(); ++l) CHECK_FALSE(holds_layer(engine.preloaded(), l));
      }
      if (kind == stile::FaultKind::eio) CHECK_THAT(error, Contains("Input/output error"));
      if (kind == stile::FaultKind::short_read) CHECK_THAT(error, Contains("ended early"));
      if (kind == stile::FaultKind::corrupt) CHECK_THAT(error, Contains("checksum mismatch"));

      // The same request again, then another: the fault-free engine's outputs, and its buffers.
      const stile::EngineResult again = engine.run(first, plan());
      CHECK(again.embedding == expected_first.embedding);
      CHECK(engine.preloaded() == reference_preload);
      CHECK(engine.word_cache_held_bytes() == reference_rows);
      CHECK(engine.run(second, plan()).embedding == expected_second.embedding);
      CHECK(faults->log().size() == 1);
    }
  }
}

TEST_CASE("preload_now that meets a fault keeps nothing of the failed read", "[engine][faults]") {
  stile::Engine reference(store().store, options());
  const stile::EngineResult r = reference.run(stile_test::tiny_tokens(12, 0), plan());
  const ReadMap reads = read_map(r);
  stile::Engine preloaded(store().store, options());
  preloaded.preload_now(plan());
  for (const std::size_t layer : {std::size_t{0}, std::size_t{2}}) {
    INFO("corrupted: layer " << layer);
    auto faults = std::make_shared<stile::FaultInjector>();
    stile::Engine engine(store().store, options(faults));
    // preload_now reads no word rows: the layers' reads come first.
    faults->add({.kind = stile::FaultKind::corrupt, .nth = reads.first_layer_read[layer] - r.timeline.word_row_requests});
    CHECK_THAT(stile_test::error_of([&] { engine.preload_now(plan()); }),
               Contains("layer " + std::to_string(layer)) && Contains("checksum mismatch"));
    for (const stile::ShardKey& k : engine.preloaded()) CHECK(k.layer < layer);  // the layers before it, whole
    CHECK(engine.preloaded().size() == (layer == 0 ? 0 : plan().layers[0].size() + plan().layers[1].size()));
    engine.preload_now(plan());  // no fault now: everything, as a fault-free engine holds
    CHECK(engine.preloaded() == preloaded.preloaded());
  }
}

TEST_CASE("faults by probability fail requests until the rule is gone", "[engine][faults]") {
  auto faults = std::make_shared<stile::FaultInjector>(stile::parse_fault_script("seed=3; eio@p=1"));
  stile::Engine engine(store().store, options(faults));
  const stile::Encoding e = stile_test::tiny_tokens(10, 2);
  for (int i = 0; i < 3; ++i) CHECK_THAT(stile_test::error_of([&] { engine.run(e, plan()); }), Contains("Input/output"));
  faults->clear();
  stile::Engine reference(store().store, options());
  CHECK(engine.run(e, plan()).embedding == reference.run(e, plan()).embedding);
}

TEST_CASE("a late read makes the request report its deadline miss and the layer that stalled", "[engine][faults]") {
  const stile::Encoding e = stile_test::tiny_tokens(12, 3);
  stile::Engine reference(store().store, options());
  const stile::EngineResult expected = reference.run(e, plan());
  const ReadMap reads = read_map(expected);

  auto faults = std::make_shared<stile::FaultInjector>();
  stile::Engine engine(store().store, options(faults));
  // 300 ms late against a 250 ms target: a lower bound on the time (the sleep), so the miss is
  // certain however fast or slow the machine; the faster requests are not timed.
  engine.set_target_ms(250);
  faults->add({.kind = stile::FaultKind::late, .nth = reads.first_layer_read[2], .factor_lo = 1, .factor_hi = 1,
               .min_delay_ms = 300});
  const stile::EngineResult late = engine.run(e, plan());
  CHECK(late.embedding == expected.embedding);  // late, not wrong
  CHECK(late.timeline.total_ms >= 300);
  CHECK(late.deadline_missed);
  CHECK(late.target_ms == 250);
  REQUIRE(late.stalled_layer.has_value());
  CHECK(*late.stalled_layer == 2);
  CHECK_THAT(late.deadline_note, Contains("layer 2 stalled") && Contains("over the target of 250 ms"));
  REQUIRE(faults->log().size() == 1);
  CHECK(faults->log()[0].delay_ms == 300);

  // On the word rows: the note names them.
  stile::Engine cold(store().store, options(faults));
  cold.set_target_ms(250);
  faults->add({.kind = stile::FaultKind::late, .nth = faults->reads() + 1, .factor_lo = 1, .factor_hi = 1,
               .min_delay_ms = 300});
  const stile::EngineResult slow_rows = cold.run(e, plan());
  CHECK(slow_rows.deadline_missed);
  CHECK_FALSE(slow_rows.stalled_layer.has_value());
  CHECK_THAT(slow_rows.deadline_note, Contains("the word rows took"));
  CHECK(slow_rows.embedding == expected.embedding);
}
