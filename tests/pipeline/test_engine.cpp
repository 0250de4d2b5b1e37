// The engine on all-MiniLM-L6-v2 converted on the spot (4 and 32 bits): a plan run through the
// pipeline against the same submodel run in memory (ShardedBert), the timeline's overlap under
// the eMMC emulator, the preload buffer's eviction and refill, and failed reads (a damaged shard,
// a file truncated while the engine is open) that fail one request and not the next. Skipped with
// a warning when the default model is not in its cache.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "stile/engine.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/pipeline/layer_reader.hpp"
#include "stile/pipeline/preload_buffer.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/model/sharded_bert.hpp"
#include "support/converted_store.hpp"
#include "support/default_model.hpp"

namespace fs = std::filesystem;

namespace {

// One conversion for the whole test program, into a temporary directory removed at exit.
const stile_test::ConvertedStore& converted() {
  static const stile_test::ConvertedStore c("minilm.stile", stile_test::model_dir(), {4, 32});
  return c;
}

// The reference: the same submodel run in memory, pooled and normalized as the engine does.
std::vector<float> in_memory(const stile::Encoding& e, const stile::SubmodelPlan& plan,
                             const stile::EncodeOptions& options = {}) {
  static const stile::ShardedBert bert = stile::ShardedBert::open(converted().store);
  std::vector<float> hidden;
  const std::vector<std::size_t> lengths = bert.encode(std::span(&e, 1), hidden, plan, options);
  std::vector<float> out(bert.config().hidden);
  stile::pool_tokens(hidden, lengths[0], out.size(), stile::Pooling::kMean, out);
  stile::l2_normalize(out);
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float most = 0;
  for (std::size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

// A request of exactly `tokens` tokens ([CLS] ... [SEP]).
stile::Encoding tokens_of(const stile::Engine& engine, std::size_t tokens) {
  std::string text;
  while (engine.tokenizer().encode(text).size() < tokens)
    text += "the film is a charming and often affecting journey . ";
  stile::Encoding e = engine.tokenizer().encode(text, tokens);
  REQUIRE(e.size() == tokens);
  return e;
}

stile::SubmodelPlan mixed_plan() {
  stile::SubmodelPlan plan;
  plan.layers = {{{3, 4}, {0, 32}, {7, 4}}, {{1, 4}, {2, 4}}, {{5, 32}, {11, 4}, {6, 4}, {0, 4}}, {{9, 4}}};
  return plan;
}

}  // namespace

TEST_CASE("a plan run through the pipeline equals the same submodel run in memory", "[engine]") {
  REQUIRE_MODEL();
  for (const stile::ReadBackendKind kind : {stile::ReadBackendKind::automatic, stile::ReadBackendKind::pread}) {
    for (const bool tiled : {false, true}) {
      stile::EngineOptions options;
      options.backend.kind = kind;
      if (tiled) options.tiles = {16, 64};
      stile::Engine engine(converted().store, options);
      INFO(engine.backend_description() << (tiled ? ", tiled" : ", untiled"));
      const stile::Encoding e = engine.tokenizer().encode("A man is playing a guitar on a quiet street.");
      for (const stile::SubmodelPlan& plan : {stile::SubmodelPlan::uniform(6, 12, 4), mixed_plan()}) {
        const stile::EngineResult r = engine.run(e, plan);
        CHECK(max_abs_diff(r.embedding, in_memory(e, plan)) <= 1e-6f);
        CHECK(r.timeline.layers.size() == plan.layers.size());
        CHECK(r.working_buffer_bytes > 0);
      }
      CHECK(engine.working_buffer_bytes() == 0);  // released after each request
    }
  }
}

TEST_CASE("the engine with its shards in int8 equals the in-memory int8 run and stays near the fp32 path",
          "[engine][int8]") {
  REQUIRE_MODEL();
  for (const bool tiled : {false, true}) {
    stile::EngineOptions options;
    options.shard_linear = stile::LinearFormat::kInt8;
    if (tiled) options.tiles = {16, 64};
    stile::Engine engine(converted().store, options);
    const stile::Encoding e = engine.tokenizer().encode("A man is playing a guitar on a quiet street.");
    stile::EncodeOptions int8;
    int8.linear = stile::LinearFormat::kInt8;
    for (const stile::SubmodelPlan& plan : {stile::SubmodelPlan::uniform(6, 12, 4), mixed_plan()}) {
      const stile::EngineResult r = engine.run(e, plan);
      INFO((tiled ? "tiled, " : "untiled, ") << plan.layers.size() << " layers");
      CHECK(max_abs_diff(r.embedding, in_memory(e, plan, int8)) <= 1e-6f);
      const double cosine = stile::cosine_similarity(r.embedding, in_memory(e, plan));
      INFO("cosine to the fp32 path " << cosine);
      CHECK(cosine >= 0.995);
      CHECK(cosine < 1.0 - 1e-7);  // it did run in int8
    }
  }
}

TEST_CASE("the word-row cache serves repeated tokens without reads, with the same output", "[engine]") {
  REQUIRE_MODEL();
  stile::EngineOptions options;
  options.word_cache_bytes = 64 * 384 * sizeof(float);  // 64 rows of all-MiniLM-L6-v2
  stile::Engine engine(converted().store, options);
  const stile::Encoding e = engine.tokenizer().encode("the film is a charming , funny and moving story .");
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 12, 4);
  const std::size_t rows = engine.word_rows_to_read(e);
  CHECK(rows == e.size());  // no token repeats
  const stile::EngineResult cold = engine.run(e, plan);
  CHECK(cold.timeline.word_rows_read == rows);
  CHECK(cold.timeline.word_rows_cached == 0);
  CHECK(cold.word_cache_held_bytes == rows * 384 * sizeof(float));
  CHECK(engine.word_rows_to_read(e) == 0);

  const stile::EngineResult warm = engine.run(e, plan);
  CHECK(warm.timeline.word_rows_read == 0);
  CHECK(warm.timeline.word_rows_cached == rows);
  CHECK(warm.timeline.embed_bytes_read == 0);
  CHECK(warm.embedding == cold.embedding);
  CHECK(max_abs_diff(warm.embedding, in_memory(e, plan)) <= 1e-6f);

  // Another sentence: only its new tokens are read ("the", "film", "a", "." and the specials are held).
  const stile::Encoding other = engine.tokenizer().encode("a dull film .");
  CHECK(engine.word_rows_to_read(other) == 1);
  const stile::EngineResult r = engine.run(other, plan);
  CHECK(r.timeline.word_rows_read == 1);
  CHECK(max_abs_diff(r.embedding, in_memory(other, plan)) <= 1e-6f);

  engine.set_word_cache_budget(0);
  CHECK(engine.word_cache_held_bytes() == 0);
  CHECK(engine.word_rows_to_read(e) == rows);
}

TEST_CASE("with storage slowed to eMMC speed, IO of layer k+1 overlaps compute of layer k", "[engine]") {
  REQUIRE_MODEL();
  stile::EngineOptions options;
  options.storage = "emmc";
  stile::Engine engine(converted().store, options);
  const stile::Encoding e = tokens_of(engine, 128);
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(6, 12, 4);
  const stile::EngineResult r = engine.run(e, plan);
  const auto& t = r.timeline.layers;
  CHECK(r.timeline.emulated);
  CHECK(r.timeline.storage.find("emmc") != std::string::npos);
  for (std::size_t k = 0; k < t.size(); ++k) {
    INFO("layer " << k);
    CHECK(t[k].shards_read == 12);
    CHECK(t[k].io_end_ms <= t[k].compute_start_ms);
    if (k + 1 < t.size()) CHECK(t[k + 1].io_start_ms < t[k].compute_end_ms);
  }
  CHECK(r.timeline.stall_ms() > 0);  // at eMMC speed IO is the bottleneck
  CHECK(max_abs_diff(r.embedding, in_memory(e, plan)) <= 1e-6f);

  const nlohmann::json trace = stile::to_chrome_trace(r.timeline);
  std::size_t computes = 0, reads = 0;
  for (const auto& ev : trace["traceEvents"]) {
    const std::string name = ev["name"];
    computes += name.rfind("compute layer", 0) == 0;
    reads += name.rfind("read layer", 0) == 0;
  }
  CHECK(computes == 6);
  CHECK(reads == 6);

  stile::EngineOptions sequential = options;
  sequential.mode = stile::PipelineMode::load_then_execute;
  stile::Engine baseline(converted().store, sequential);
  const stile::EngineResult b = baseline.run(e, plan);
  for (const stile::LayerTimes& l : b.timeline.layers) CHECK(b.timeline.layers.back().io_end_ms <= l.compute_start_ms);
  CHECK(max_abs_diff(b.embedding, r.embedding) == 0.0f);
}

TEST_CASE("the preload buffer keeps the first shards, evicts from the top down, and requests read only what is missing",
          "[engine]") {
  REQUIRE_MODEL();
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(6, 12, 4);
  const stile::ShardStore store = stile::ShardStore::open(converted().store);
  std::size_t layer_bytes = 0;
  for (std::size_t s = 0; s < 12; ++s) layer_bytes += store.version_info(0, s, 4).size;
  stile::EngineOptions options;
  options.preload_bytes = layer_bytes * 5 / 2;  // two and a half layers
  stile::Engine engine(converted().store, options);
  const stile::Encoding e = engine.tokenizer().encode("unflinchingly bleak and desperate");
  const std::vector<float> expected = in_memory(e, plan);

  const stile::EngineResult cold = engine.run(e, plan);
  CHECK(cold.timeline.shards_read() == 72);
  const std::vector<stile::ShardKey> held = engine.preloaded();
  CHECK(held.size() >= 24);
  CHECK(held.size() < 36);
  CHECK(engine.preload_held_bytes() <= options.preload_bytes);

  const stile::EngineResult warm = engine.run(e, plan);
  CHECK(warm.timeline.shards_read() == 72 - held.size());
  CHECK(warm.timeline.layers[0].shards_read == 0);
  CHECK(warm.timeline.layers[0].shards_preloaded == 12);
  CHECK(max_abs_diff(warm.embedding, expected) <= 1e-6f);

  // A request of another plan, with the buffer full of this one's versions, leaves the buffer
  // holding its own preload set, so that the next such request reads only the rest.
  stile::SubmodelPlan other = plan;
  other.layers[0].resize(6);  // half of layer 0: the buffer's other half of it is not used, so goes
  const std::set<stile::ShardKey> other_set = stile::preload_set(
      other, engine.options().preload_bytes,
      [&](const stile::ShardKey& k) { return static_cast<std::size_t>(store.version_info(k.layer, k.shard, k.bits).size); });
  const std::set<stile::ShardKey> held_set(held.begin(), held.end());
  REQUIRE(std::any_of(other_set.begin(), other_set.end(),  // more of layer 2 than the buffer holds
                      [&](const stile::ShardKey& k) { return held_set.count(k) == 0; }));
  engine.run(e, other);
  const std::vector<stile::ShardKey> now = engine.preloaded();
  CHECK(std::set<stile::ShardKey>(now.begin(), now.end()) == other_set);
  CHECK(engine.preload_held_bytes() <= engine.options().preload_bytes);
  CHECK(engine.run(e, other).timeline.shards_read() == 66 - other_set.size());  // 6 + 5 x 12 versions

  engine.run(e, plan);  // back to the first plan's buffer

  engine.set_preload_budget(layer_bytes);  // one layer: the top layers go first
  const std::vector<stile::ShardKey> kept = engine.preloaded();
  REQUIRE(!kept.empty());
  CHECK(kept.size() <= 12);
  for (const stile::ShardKey& k : kept) CHECK(k.layer == 0);
  CHECK(std::equal(kept.begin(), kept.end(), held.begin()));  // a prefix of what was held

  const stile::EngineResult after = engine.run(e, plan);
  CHECK(after.timeline.shards_read() == 72 - kept.size());
  CHECK(after.timeline.layers[0].shards_read == 12 - kept.size());
  CHECK(after.timeline.layers[1].shards_read == 12);

  engine.set_preload_budget(0);
  CHECK(engine.preloaded().empty());
  engine.set_preload_budget(layer_bytes * 2);
  engine.preload_now(plan);
  CHECK(engine.preloaded().size() == 24);
  CHECK(engine.run(e, plan).timeline.shards_read() == 48);
}

TEST_CASE("a failed read fails that request with a clear error, and the next request on an intact store succeeds",
          "[engine]") {
  REQUIRE_MODEL();
  const fs::path copy = converted().dir.path / "damaged.stile";
  fs::copy_file(converted().store, copy, fs::copy_options::overwrite_existing);
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(6, 12, 4);
  stile::Engine engine(copy);
  const stile::Encoding e = engine.tokenizer().encode("it 's a charming and often affecting journey .");
  const std::vector<float> expected = in_memory(e, plan);
  const std::uint64_t at = engine.store().version_info(2, 1, 4).offset + 100;

  auto poke = [&](char value) {
    std::fstream f(copy, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(value);
  };
  char original = 0;
  {
    std::ifstream f(copy, std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    f.get(original);
  }
  poke(static_cast<char>(original ^ 0x5a));
  CHECK_THROWS_WITH(engine.run(e, plan), Catch::Contains("damaged.stile") && Catch::Contains("layer 2 shard 1") &&
                                             Catch::Contains("checksum mismatch"));
  poke(original);
  CHECK(max_abs_diff(engine.run(e, plan).embedding, expected) <= 1e-6f);

  fs::resize_file(copy, engine.store().version_info(3, 0, 4).offset);
  CHECK_THROWS_WITH(engine.run(e, plan),
                    Catch::Contains("damaged.stile") && Catch::Contains("layer 3") && Catch::Contains("ended early"));
  fs::copy_file(converted().store, copy, fs::copy_options::overwrite_existing);
  CHECK(max_abs_diff(engine.run(e, plan).embedding, expected) <= 1e-6f);
}

TEST_CASE("the engine's plans and settings", "[engine]") {
  REQUIRE_MODEL();
  stile::Engine engine(converted().store);
  const stile::SubmodelPlan whole = engine.plan_for(10).submodel;
  CHECK(whole.layers.size() == 6);
  for (const auto& layer : whole.layers) {
    CHECK(layer.size() == 12);
    for (const stile::ShardChoice& c : layer) CHECK(c.bits == 32);
  }
  engine.set_target_ms(20);
  CHECK_THROWS_WITH(engine.plan_for(10), Catch::Contains("needs a device profile"));
  engine.set_target_ms(0);
  // The reference writer groups a layer's versions by bitwidth: a layer at one bitwidth is one
  // O_DIRECT request; a gap or another bitwidth starts another.
  const std::size_t a = stile::read_backend_detail::kDirectAlignment;
  const std::vector<stile::ShardChoice> all_at_4 = stile::SubmodelPlan::uniform(1, 12, 4).layers[0];
  CHECK(stile::contiguous_reads(engine.store(), 3, all_at_4, a) == 1);
  CHECK(stile::contiguous_reads(engine.store(), 3, std::vector<stile::ShardChoice>{{5, 4}, {4, 4}}, a) == 1);
  CHECK(stile::contiguous_reads(engine.store(), 3, std::vector<stile::ShardChoice>{{0, 4}, {2, 4}}, a) == 2);
  CHECK(stile::contiguous_reads(engine.store(), 3, std::vector<stile::ShardChoice>{{0, 4}, {1, 32}, {1, 4}}, a) == 2);
  CHECK(stile::contiguous_reads(engine.store(), 3, std::vector<stile::ShardChoice>{{11, 4}, {0, 32}}, a) == 1);
  const stile::EngineResult whole_layer =
      engine.run(engine.tokenizer().encode("x"), stile::SubmodelPlan::uniform(1, 12, 4));
  CHECK(whole_layer.timeline.layers[0].reads ==
        stile::contiguous_reads(engine.store(), 0, all_at_4, engine.read_alignment()));
  if (engine.read_alignment() == a) CHECK(whole_layer.timeline.layers[0].reads == 1);

  stile::SubmodelPlan bad = stile::SubmodelPlan::uniform(2, 2, 5);
  CHECK_THROWS_WITH(engine.run(engine.tokenizer().encode("x"), bad), Catch::Contains("5 bits is not in the store"));

  stile::EngineOptions keep;
  keep.keep_working_buffer = true;
  stile::Engine kept(converted().store, keep);
  const stile::EngineResult r = kept.run("a dull , lifeless movie");
  CHECK(kept.working_buffer_bytes() == r.working_buffer_bytes);
  CHECK(r.working_buffer_bytes > 0);

  stile::LinearHead head{{"negative", "positive"}, std::vector<float>(2 * 384, 0.0f), {0.0f, 0.0f}};
  for (std::size_t i = 0; i < 384; ++i) head.weight[384 + i] = r.embedding[i];  // "positive" = this sentence
  kept.set_head(head);
  const stile::EngineResult c = kept.run("a dull , lifeless movie");
  REQUIRE(c.label.has_value());
  CHECK(*c.label == 1);
  CHECK(c.logits[1] == Approx(1.0f).margin(1e-5));
}

TEST_CASE("with a device profile the engine runs the two-stage planner's plans and replans on new settings",
          "[engine]") {
  REQUIRE_MODEL();
  // A profile made by hand for this store (measured profiles are plan/device_profile's business):
  // reading a 4-bit shard takes as long as computing a 12-shard layer, so a tight target forces
  // a smaller submodel or lower bits.
  const stile::ShardStore store = stile::ShardStore::open(converted().store);
  stile::DeviceProfile profile;
  profile.bits = store.bits();  // {4, 32}
  profile.num_layers = 6;
  profile.shards_per_layer = 12;
  profile.lengths = {16, 128};
  profile.io_ms = {1.0, 5.0};
  for (const unsigned b : profile.bits)
    profile.shard_bytes.push_back(static_cast<double>(store.version_info(0, 0, b).size));
  profile.compute_ms.assign(2, std::vector<std::vector<double>>(2, std::vector<double>(12)));
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t m = 1; m <= 12; ++m) {
      profile.compute_ms[b][0][m - 1] = 0.1 * static_cast<double>(m);
      profile.compute_ms[b][1][m - 1] = 1.0 * static_cast<double>(m);
    }
  }
  stile::EngineOptions options;
  options.target_ms = 30;
  stile::Engine engine(converted().store, options, profile);
  const stile::Encoding e = engine.tokenizer().encode("a gorgeous , witty , seductive movie .");
  // A request is planned for the word rows it reads: its distinct tokens (',' twice: one read).
  const std::size_t rows = engine.word_rows_to_read(e);
  CHECK(rows == e.size() - 1);
  // ... in the reads they take: rows within 4 KiB of each other in the file share one.
  const std::size_t reads = engine.word_row_reads(e);
  CHECK(reads >= 1);
  CHECK(reads <= rows);
  const stile::ElasticPlan planned = engine.plan_for(e.size(), reads);
  CHECK(planned.word_rows == reads);
  CHECK(engine.plan_for(e.size()).word_rows == 16);  // unknown: the bucket's length
  CHECK(planned.meets_target);
  CHECK(planned.estimated_ms <= 30.0 + 1e-9);
  const stile::EngineResult r = engine.run(e);
  CHECK(r.plan == planned.submodel);
  CHECK(!r.plan_note.empty());
  CHECK(max_abs_diff(r.embedding, in_memory(e, r.plan)) <= 1e-6f);

  engine.set_target_ms(200);  // looser: a bigger or wider plan
  const stile::ElasticPlan loose = engine.plan_for(e.size(), reads);
  std::size_t tight_bits = 0, loose_bits = 0;
  for (const auto& layer : planned.submodel.layers)
    for (const auto& c : layer) tight_bits += c.bits;
  for (const auto& layer : loose.submodel.layers)
    for (const auto& c : layer) loose_bits += c.bits;
  CHECK(loose_bits > tight_bits);

  engine.set_preload_budget(static_cast<std::size_t>(profile.shard_bytes[0]) * 6 + 4096);
  const stile::ElasticPlan with_preload = engine.plan_for(e.size(), reads);
  CHECK(!with_preload.preload.empty());
  // The buffer is empty: the request is planned for reading everything, and its reads fill it.
  const stile::EngineResult cold = engine.run(e);
  CHECK_THAT(cold.plan_note, Catch::Contains("(0 held now)"));
  CHECK(cold.estimated_ms <= 200.0);
  CHECK(engine.preloaded().size() == with_preload.preload.size());
  CHECK(engine.run(e).plan == with_preload.submodel);  // full: the cached plan
  engine.set_preload_budget(0);                        // empties it; preload_now fills it without a request
  engine.set_preload_budget(static_cast<std::size_t>(profile.shard_bytes[0]) * 6 + 4096);
  engine.preload_now(e.size(), reads);
  CHECK(engine.preloaded().size() == with_preload.preload.size());
  const stile::EngineResult warm = engine.run(e);
  CHECK(warm.timeline.layers[0].shards_preloaded > 0);

  SECTION("with heads per shape: the shrink picks the most accurate shape, whose head classifies") {
    // At 30 ms even one layer of twelve 4-bit shards reads for 12 ms; six take 72. Without heads
    // the planner drops shards one at a time (uneven widths: no head fits); with them it takes
    // the most accurate shape that is valid. "6x12" scores best but cannot be read in time.
    engine.set_target_ms(30);
    engine.set_preload_budget(0);
    const auto zeros = [] { return std::vector<float>(2 * 384, 0.0f); };
    stile::HeadsFile heads;
    heads.num_layers = 6;
    heads.shards_per_layer = 12;
    heads.heads["6x12"] = {stile::LinearHead{{"negative", "positive"}, zeros(), {1.0f, 0.0f}}, 0.9, 0.9, {}};
    heads.heads["1x12"] = {stile::LinearHead{{"negative", "positive"}, zeros(), {0.0f, 1.0f}}, 0.8, 0.8, {}};
    heads.heads["2x1"] = {stile::LinearHead{{"negative", "positive"}, zeros(), {1.0f, 0.0f}}, 0.7, 0.7, {}};
    const stile::SubmodelPlan before = engine.plan_for(e.size(), reads).submodel;
    CHECK(heads.find_for(before) == nullptr);  // dropped shard by shard: uneven widths
    engine.set_heads(heads);
    const stile::ElasticPlan shaped = engine.plan_for(e.size(), reads);
    REQUIRE(shaped.layers() == 1);  // 1 x 12 (pass 2 may raise some of its shards to 32 bits)
    CHECK(shaped.submodel.layers[0].size() == 12);
    CHECK(shaped.meets_target);
    const stile::EngineResult c = engine.run(e);
    CHECK(c.head == "1x12");
    REQUIRE(c.label.has_value());
    CHECK(*c.label == 1);
    const stile::EngineResult none = engine.run(e, stile::SubmodelPlan::uniform(3, 2, 4));
    CHECK(none.head.empty());  // no "3x2" head: no label
    CHECK_FALSE(none.label.has_value());

    heads.heads["2x1"].ranking.assign(6, std::vector<std::size_t>{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
    CHECK_THROWS_WITH(engine.set_heads(heads), Catch::Contains("head \"2x1\" keeps other shards of layer 0"));
    heads.num_layers = 4;
    CHECK_THROWS_WITH(engine.set_heads(heads), Catch::Contains("the heads are for a 4 x 12 store"));
  }
}
