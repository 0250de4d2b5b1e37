// Task heads from the checkpoint against the reference pipelines: the directories under data/heads
// (scripts/make_head_goldens.py) are small random-weight models of each family with a sequence
// classification head (every problem type, ModernBERT's cls and mean pooling), cross-encoders,
// token classifiers and SPLADE models, saved by transformers / sentence-transformers, and the
// outputs of transformers' text- and token-classification pipelines, CrossEncoder.predict / rank
// and SparseEncoder.encode. Each is loaded as a user's model directory (TaskModel::load). Then the
// aggregation strategies on a hand-made case, and a bad head's errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/engine.hpp"
#include "stile/io/safetensors_writer.hpp"
#include "stile/model/checkpoint_head.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/model/task_model.hpp"
#include "stile/model/token_entities.hpp"
#include "support/error_of.hpp"
#include "support/json_files.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using stile::Aggregation;
using stile::Entity;
using stile::TaskModel;
using stile_test::error_of;
using stile_test::read_json;
using stile_test::write_file;
using stile_test::TempDir;

namespace {

const fs::path kData = STILE_TEST_DATA_DIR;
const fs::path kHeads = kData / "heads";
// The encoders agree with transformers within 1.4e-6 (test_families); a head adds a few roundings.
constexpr double kTolerance = 1e-5;

// The model directories whose golden.json is of `task`.
std::vector<std::string> cases_of(const std::string& task) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kHeads)) {
    if (entry.is_directory() && read_json(entry.path() / "golden.json").at("task") == task) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Python's str index of a byte offset of UTF-8 text.
std::size_t char_index(const std::string& text, std::size_t byte) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) n += (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
  return n;
}

std::vector<std::int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<std::int32_t>>(); }

void check_entities(const std::vector<Entity>& got, const nlohmann::json& want, const std::string& text,
                    Aggregation aggregation) {
  INFO("aggregation " << stile::to_string(aggregation));
  REQUIRE(got.size() == want.size());
  const char* label_key = aggregation == Aggregation::kNone ? "entity" : "entity_group";
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("entity " << i << ": " << want[i].dump());
    CHECK(got[i].label == want[i].at(label_key).get<std::string>());
    CHECK(std::abs(got[i].score - want[i].at("score").get<double>()) <= kTolerance);
    CHECK(char_index(text, got[i].begin) == want[i].at("start").get<std::size_t>());
    CHECK(char_index(text, got[i].end) == want[i].at("end").get<std::size_t>());
    if (aggregation == Aggregation::kNone) CHECK(got[i].index == want[i].at("index").get<std::size_t>());
  }
}

}  // namespace

TEST_CASE("task heads: sequence classification equals transformers' text-classification pipeline", "[heads]") {
  const std::vector<std::string> names = cases_of("sequence-classification");
  REQUIRE(names.size() >= 9);
  double worst = 0.0;
  for (const std::string& name : names) {
    INFO("model " << name);
    const nlohmann::json golden = read_json(kHeads / name / "golden.json");
    const TaskModel model = TaskModel::load(kHeads / name);
    REQUIRE(model.task() == stile::HeadTask::kSequenceClassification);
    for (const nlohmann::json& c : golden.at("cases")) {
      const std::string text = c.at("text");
      std::optional<std::string> pair;
      if (!c.at("text_pair").is_null()) pair = c.at("text_pair").get<std::string>();
      INFO("text " << text << (pair ? " | " + *pair : std::string()));
      const stile::Encoding e = pair ? model.tokenizer().encode_pair(text, *pair) : model.tokenizer().encode(text);
      CHECK(e.input_ids == ids_of(c.at("ids")));
      const stile::TextClassification got =
          model.classify(text, pair ? std::optional<std::string_view>(*pair) : std::nullopt);
      const auto logits = c.at("logits").get<std::vector<double>>();
      REQUIRE(got.logits.size() == logits.size());
      for (std::size_t k = 0; k < logits.size(); ++k) {
        worst = std::max(worst, std::abs(got.logits[k] - logits[k]));
        CHECK(std::abs(got.logits[k] - logits[k]) <= kTolerance);
      }
      // The pipeline lists every label by descending score.
      const nlohmann::json& pipeline = c.at("pipeline");
      REQUIRE(pipeline.size() == model.labels().size());
      for (const nlohmann::json& entry : pipeline) {
        const auto it = std::find(model.labels().begin(), model.labels().end(), entry.at("label").get<std::string>());
        REQUIRE(it != model.labels().end());
        const double score = got.scores[static_cast<std::size_t>(it - model.labels().begin())];
        CHECK(std::abs(score - entry.at("score").get<double>()) <= kTolerance);
      }
      CHECK(model.labels()[got.top()] == pipeline[0].at("label").get<std::string>());
    }
  }
  WARN("sequence classification: max |logit - transformers'| = " << worst);
}

TEST_CASE("task heads: cross-encoder scores and ranks equal sentence-transformers' CrossEncoder", "[heads]") {
  const std::vector<std::string> names = cases_of("cross-encoder");
  REQUIRE(names.size() >= 2);
  for (const std::string& name : names) {
    INFO("model " << name);
    const nlohmann::json golden = read_json(kHeads / name / "golden.json");
    const TaskModel model = TaskModel::load(kHeads / name);
    for (const nlohmann::json& c : golden.at("cases")) {
      const std::string query = c.at("query");
      const auto passages = c.at("passages").get<std::vector<std::string>>();
      INFO("query " << query);
      for (std::size_t p = 0; p < passages.size(); ++p) {
        CHECK(model.tokenizer().encode_pair(query, passages[p]).input_ids == ids_of(c.at("ids")[p]));
      }
      const std::vector<double> scores = model.score_pairs(query, passages);
      const auto want = c.at("scores").get<std::vector<double>>();
      REQUIRE(scores.size() == want.size());
      for (std::size_t p = 0; p < want.size(); ++p) CHECK(std::abs(scores[p] - want[p]) <= kTolerance);
      const std::vector<std::size_t> order = TaskModel::rank(scores);
      const nlohmann::json& rank = c.at("rank");
      REQUIRE(order.size() == rank.size());
      for (std::size_t r = 0; r < order.size(); ++r) CHECK(order[r] == rank[r].at("corpus_id").get<std::size_t>());
    }
  }
}

TEST_CASE("task heads: token classification equals transformers' token-classification pipeline", "[heads]") {
  const std::vector<std::string> names = cases_of("token-classification");
  REQUIRE(names.size() >= 8);
  std::size_t windowed = 0;
  for (const std::string& name : names) {
    INFO("model " << name);
    const nlohmann::json golden = read_json(kHeads / name / "golden.json");
    const TaskModel model = TaskModel::load(kHeads / name);
    for (const nlohmann::json& c : golden.at("cases")) {
      const std::string text = c.at("text");
      INFO("text " << text);
      std::optional<std::size_t> stride;
      if (!c.at("stride").is_null()) stride = c.at("stride").get<std::size_t>();
      const bool short_windows = !c.at("model_max_length").is_null();
      if (!stride && !short_windows) {
        CHECK(model.tokenizer().encode(text).input_ids == ids_of(c.at("ids")));
        const std::vector<float> logits = model.token_logits(text);
        const auto want = c.at("logits").get<std::vector<std::vector<double>>>();
        REQUIRE(logits.size() == want.size() * model.labels().size());
        for (std::size_t t = 0; t < want.size(); ++t) {
          for (std::size_t k = 0; k < want[t].size(); ++k) {
            CHECK(std::abs(logits[t * want[t].size() + k] - want[t][k]) <= kTolerance);
          }
        }
      }
      // The windows' length is the case's (the reference's tokenizer was given a short one).
      const TaskModel* run = &model;
      std::optional<TaskModel> short_model;
      if (short_windows) {
        const TempDir temp;
        fs::copy(kHeads / name, temp.path, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
        nlohmann::json tc = read_json(temp.path / "tokenizer_config.json");
        tc["model_max_length"] = c.at("model_max_length");
        write_file(temp.path / "tokenizer_config.json", tc.dump(2));
        short_model.emplace(TaskModel::load(temp.path));
        run = &*short_model;
        ++windowed;
      }
      for (const Aggregation a :
           {Aggregation::kNone, Aggregation::kSimple, Aggregation::kFirst, Aggregation::kMax, Aggregation::kAverage}) {
        const nlohmann::json& want = c.at("pipeline").at(stile::to_string(a));
        if (want.is_object() && want.contains("error")) {
          INFO("the reference refused: " << want.dump());
          (void)error_of([&] { (void)run->entities(text, a, stride); });
          continue;
        }
        check_entities(run->entities(text, a, stride), want, text, a);
      }
    }
  }
  CHECK(windowed >= names.size());
}

TEST_CASE("task heads: SPLADE vectors equal sentence-transformers' SparseEncoder", "[heads]") {
  const std::vector<std::string> names = cases_of("splade");
  REQUIRE(names.size() >= 2);
  for (const std::string& name : names) {
    INFO("model " << name);
    const nlohmann::json golden = read_json(kHeads / name / "golden.json");
    const TaskModel model = TaskModel::load(kHeads / name);
    for (const nlohmann::json& c : golden.at("cases")) {
      const std::string text = c.at("text");
      INFO("text " << text);
      CHECK(model.tokenizer().encode(text).input_ids == ids_of(c.at("ids")));
      const stile::SparseVector v = model.sparse(text);
      const auto ids = c.at("indices").get<std::vector<std::int32_t>>();
      const auto values = c.at("values").get<std::vector<double>>();
      // Weights within the tolerance of zero may fall either side of it.
      std::map<std::int32_t, double> want, got;
      for (std::size_t i = 0; i < ids.size(); ++i) want[ids[i]] = values[i];
      for (std::size_t i = 0; i < v.ids.size(); ++i) got[v.ids[i]] = v.weights[i];
      for (const auto& [id, w] : want) CHECK(std::abs((got.contains(id) ? got[id] : 0.0) - w) <= kTolerance);
      for (const auto& [id, w] : got) CHECK(std::abs((want.contains(id) ? want[id] : 0.0) - w) <= kTolerance);
      CHECK(std::is_sorted(v.ids.begin(), v.ids.end()));
    }
  }
}

TEST_CASE("token entities: each aggregation on a hand-made case", "[heads]") {
  // "New York is big": New [B-LOC .6], York [I-LOC .7], is: "i" [O .9] + "##s" [B-PER .5 sub-word], big [O .8]
  const std::vector<std::string> labels = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"};
  const auto scores = [](std::size_t label, double top) {
    std::vector<double> s(5, (1.0 - top) / 4.0);
    s[label] = top;
    return s;
  };
  const std::vector<stile::ScoredToken> tokens = {{1, scores(3, 0.6), 0, 3, false},
                                                  {2, scores(4, 0.7), 4, 8, false},
                                                  {3, scores(0, 0.9), 9, 10, false},
                                                  {4, scores(1, 0.5), 10, 11, true},
                                                  {5, scores(0, 0.8), 12, 15, false}};
  const auto none = stile::window_entities(tokens, labels, Aggregation::kNone);
  REQUIRE(none.size() == 3);
  CHECK(none[0].label == "B-LOC");
  CHECK(none[2].label == "B-PER");
  CHECK(none[2].index == 4);
  const auto simple = stile::window_entities(tokens, labels, Aggregation::kSimple);
  REQUIRE(simple.size() == 2);
  CHECK(simple[0].label == "LOC");
  CHECK(simple[0].begin == 0);
  CHECK(simple[0].end == 8);
  CHECK(std::abs(simple[0].score - 0.65) < 1e-12);
  CHECK(simple[1].label == "PER");
  // "is" is one word: first takes "i" (O), max its highest (O .9), average (O (.9 + .125) / 2).
  for (const Aggregation a : {Aggregation::kFirst, Aggregation::kMax, Aggregation::kAverage}) {
    const auto words = stile::window_entities(tokens, labels, a);
    REQUIRE(words.size() == 1);
    CHECK(words[0].label == "LOC");
  }
  // Two windows that overlap: the longer entity stays; equal length, the higher score.
  const std::vector<Entity> merged = stile::merge_window_entities(
      {{"LOC", 0.9, 10, 14}, {"LOC", 0.5, 0, 8}, {"PER", 0.4, 4, 12}, {"PER", 0.6, 10, 14}});
  REQUIRE(merged.size() == 2);
  CHECK(merged[0].begin == 0);
  CHECK(merged[0].end == 8);
  CHECK(merged[1].score == 0.9);
  CHECK(stile::aggregation_from_string("average") == Aggregation::kAverage);
  CHECK_THAT(error_of([] { (void)stile::aggregation_from_string("mean"); }), Contains("aggregation \"mean\""));
}

TEST_CASE("task heads: a bad head or config is refused naming the file and the field", "[heads]") {
  struct Bad {
    const char* model;
    const char* what;
    const char* says;
  };
  const Bad cases[] = {
      {"bert_seqcls", "id2label names 2 of the 3 classes", "id2label"},
      {"bert_seqcls", "num_labels disagrees with the classifier", "num_labels"},
      {"bert_seqcls", "architectures names no head", "architectures"},
      {"bert_seqcls", "problem_type unknown", "problem_type"},
      {"bert_seqcls", "classifier.bias removed", "classifier.bias"},
      {"modernbert_mean", "classifier_pooling unknown", "classifier_pooling"},
      {"deberta-v2_seqcls", "pooler_hidden_act unknown", "pooler_hidden_act"},
      {"bert_crossencoder", "activation_fn not torch's", "activation_fn"},
  };
  for (const Bad& bad : cases) {
    INFO(bad.model << ": " << bad.what);
    const TempDir temp;
    fs::copy(kHeads / bad.model, temp.path, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    const fs::path config_file = temp.path / "config.json";
    nlohmann::json config = read_json(config_file);
    const std::string what = bad.what;
    if (what.starts_with("id2label")) config["id2label"] = {{"0", "a"}, {"1", "b"}};
    if (what.starts_with("num_labels")) config["num_labels"] = 5;
    if (what.starts_with("architectures")) config["architectures"] = {"BertModel"};
    if (what.starts_with("problem_type")) config["problem_type"] = "ranking";
    if (what.starts_with("classifier_pooling")) config["classifier_pooling"] = "max";
    if (what.starts_with("pooler_hidden_act")) config["pooler_hidden_act"] = "mish";
    write_file(config_file, config.dump(2));
    if (what.starts_with("activation_fn")) {
      nlohmann::json st = read_json(temp.path / "config_sentence_transformers.json");
      st["activation_fn"] = "mymodule.Scale";
      write_file(temp.path / "config_sentence_transformers.json", st.dump(2));
    }
    if (what.starts_with("classifier.bias")) {
      const fs::path weights = temp.path / "model.safetensors";
      std::vector<stile::TensorToWrite> kept;
      {
        const stile::SafetensorsFile f = stile::SafetensorsFile::open(weights.string());
        for (const stile::TensorInfo& t : f.tensors()) {
          if (t.name == "classifier.bias") continue;
          const std::span<const std::byte> bytes = f.bytes(t);
          kept.push_back({t.name, t.dtype, t.shape, {bytes.begin(), bytes.end()}});
        }
      }
      stile::write_file_bytes(weights.string(), stile::safetensors_bytes(std::move(kept)));
    }
    const std::string message = error_of([&] { (void)TaskModel::load(temp.path); });
    INFO("-> " << message);
    CHECK_THAT(message, Contains(bad.says));
    CHECK_THAT(message, Contains(temp.path.string()));
  }
  // A model asked for another task's answer.
  const TaskModel classifier = TaskModel::load(kHeads / "bert_seqcls");
  CHECK_THAT(error_of([&] { (void)classifier.entities("a text", Aggregation::kSimple); }),
             Contains("the model's head is sequence classification, not token classification"));
  CHECK_THAT(error_of([&] { (void)classifier.score_pairs("q", std::vector<std::string>{"p"}); }),
             Contains("one output"));
  const TaskModel tagger = TaskModel::load(kHeads / "bert_ner");
  CHECK_THAT(error_of([&] { (void)tagger.entities("a text", Aggregation::kNone, 2); }), Contains("aggregation"));
  CHECK_THAT(error_of([&] { (void)tagger.entities("a text", Aggregation::kSimple, 1000); }), Contains("stride 1000"));
}

namespace {

// The head golden `name` converted into a shard store of fp32 shards (the engine's layers are then
// the in-memory model's), with its head sidecar; the vocab.txt convert reads is the tokenizer's
// vocabulary in id order.
fs::path convert_with_head(const std::string& name, const TaskModel& model, const fs::path& dir) {
  const fs::path checkpoint = dir / name;
  fs::copy(kHeads / name, checkpoint, fs::copy_options::recursive);
  {
    std::ofstream vocab(checkpoint / "vocab.txt");
    for (std::size_t id = 0; id < model.tokenizer().vocab_size(); ++id) {
      vocab << model.tokenizer().id_to_token(static_cast<std::int32_t>(id)).value() << "\n";
    }
  }
  const fs::path store = dir / (name + ".stile");
  stile::ConvertOptions options;
  options.bits = {32};
  (void)stile::convert_checkpoint(checkpoint, store, options);
  REQUIRE(stile::save_head_sidecar(checkpoint, store));
  return store;
}

}  // namespace

TEST_CASE("task heads: the elastic engine runs a converted store's head sidecar: classify, rerank, tag", "[heads]") {
  const TempDir temp;
  const TaskModel model = TaskModel::load(kHeads / "bert_seqcls");
  const fs::path store = convert_with_head("bert_seqcls", model, temp.path);
  stile::Engine engine(store);
  engine.set_task_head(stile::load_head_sidecar(stile::head_path_for(store), engine.config()));
  const nlohmann::json golden = read_json(kHeads / "bert_seqcls" / "golden.json");
  std::size_t checked = 0;
  for (const nlohmann::json& c : golden.at("cases")) {
    if (!c.at("text_pair").is_null()) continue;
    const std::string text = c.at("text");
    INFO("text " << text);
    const stile::EngineResult r = engine.run(model.tokenizer().encode(text));
    const stile::TextClassification want = model.classify(text);
    REQUIRE(r.logits.size() == want.logits.size());
    for (std::size_t k = 0; k < want.logits.size(); ++k) CHECK(std::abs(r.logits[k] - want.logits[k]) <= kTolerance);
    for (std::size_t k = 0; k < want.scores.size(); ++k) CHECK(std::abs(r.scores[k] - want.scores[k]) <= kTolerance);
    REQUIRE(r.label);
    CHECK(*r.label == want.top());
    CHECK(r.label_name == model.labels()[want.top()]);
    CHECK(r.head == "checkpoint");
    CHECK(r.timeline.head_end_ms >= r.timeline.head_start_ms);
    ++checked;
  }
  CHECK(checked >= 5);
  // A cross-encoder: a (query, passage) pair's relevance through the CrossEncoder's activation.
  const TaskModel reranker = TaskModel::load(kHeads / "bert_crossencoder");
  const fs::path reranker_store = convert_with_head("bert_crossencoder", reranker, temp.path);
  stile::Engine pairs(reranker_store);
  pairs.set_task_head(stile::load_head_sidecar(stile::head_path_for(reranker_store), pairs.config()));
  const nlohmann::json rerank_golden = read_json(kHeads / "bert_crossencoder" / "golden.json");
  const nlohmann::json& rerank = rerank_golden.at("cases").at(0);
  const std::string query = rerank.at("query");
  const auto passages = rerank.at("passages").get<std::vector<std::string>>();
  const std::vector<double> relevance = reranker.score_pairs(query, passages);
  for (std::size_t p = 0; p < passages.size(); ++p) {
    const stile::EngineResult r = pairs.run(reranker.tokenizer().encode_pair(query, passages[p]));
    REQUIRE(r.scores.size() == 1);
    CHECK(std::abs(r.scores[0] - relevance[p]) <= kTolerance);
  }
  // A token classifier: each token's logits, made into the entities TaskModel gives.
  const TaskModel tagger = TaskModel::load(kHeads / "bert_ner");
  const fs::path tagger_store = convert_with_head("bert_ner", tagger, temp.path);
  stile::Engine tags(tagger_store);
  tags.set_task_head(stile::load_head_sidecar(stile::head_path_for(tagger_store), tags.config()));
  const nlohmann::json ner_golden = read_json(kHeads / "bert_ner" / "golden.json");
  for (const nlohmann::json& c : ner_golden.at("cases")) {
    if (!c.at("stride").is_null()) continue;
    const std::string text = c.at("text");
    INFO("text " << text);
    const stile::Encoding e = tagger.tokenizer().encode(text);
    const stile::EngineResult r = tags.run(e);
    CHECK(r.logits.size() == e.size() * tagger.labels().size());
    CHECK_FALSE(r.label);
    const auto tokens = stile::scored_tokens(text, e, r.logits, tagger.labels().size(), tagger.tokenizer());
    const std::vector<Entity> got = stile::window_entities(tokens, tagger.labels(), Aggregation::kSimple);
    const std::vector<Entity> want = tagger.entities(text, Aggregation::kSimple);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].label == want[i].label);
      CHECK(got[i].begin == want[i].begin);
      CHECK(got[i].end == want[i].end);
      CHECK(std::abs(got[i].score - want[i].score) <= kTolerance);
    }
  }
  // A plain encoder's checkpoint has no head to keep; a masked-LM head is not the engine's.
  CHECK_FALSE(stile::save_head_sidecar(kData / "families" / "bert", temp.path / "plain.stile"));
  stile::CheckpointHead splade = stile::load_checkpoint_head(kHeads / "bert_splade", engine.config());
  CHECK_THAT(error_of([&] { engine.set_task_head(std::move(splade)); }), Contains("masked-LM head"));
}
