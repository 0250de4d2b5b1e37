// The encoder families stile runs (BERT, DistilBERT, RoBERTa, XLM-RoBERTa, CamemBERT, ELECTRA, MPNet,
// ModernBERT, DeBERTa-v2/v3)
// against transformers: small random-weight models and their last hidden states in
// data/families/<family> (scripts/make_family_goldens.py), loaded as a user loads a model directory
// (BertModel::load, the tokenizer.json beside it, SentenceEncoder::load), in fp32 and in each
// number-format preset. Then what a bad description or checkpoint must give: an error naming the
// file and the field.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/dist/dense_layer.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/quantized_checkpoint.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/ops/position_terms.hpp"
#include "stile/ops/precision.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/text/tokenizer.hpp"
#include "support/error_of.hpp"
#include "support/row_cosine.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

const fs::path kFamilies = fs::path(STILE_TEST_DATA_DIR) / "families";
const std::vector<std::string> kFamilyDirs = {"bert",        "distilbert", "electra", "roberta", "camembert",
                                              "xlm-roberta", "mpnet",      "modernbert", "deberta-v2"};

// A float32 forward that sums in another order than PyTorch's: max |d| within this times the
// larger of 1 and the golden's largest value.
constexpr double kRelativeTolerance = 1e-5;

struct GoldenCase {
  std::string text;
  std::vector<std::int32_t> ids, type_ids;
  std::size_t first_row = 0;
};

struct Golden {
  std::string family;
  std::size_t hidden = 0;
  std::vector<GoldenCase> cases;
  std::vector<float> rows;  // [all cases' tokens x hidden]
  double max_abs = 0;

  static Golden load(const fs::path& dir) {
    std::ifstream in(dir / "golden.json", std::ios::binary);
    REQUIRE(in);
    const nlohmann::json j = nlohmann::json::parse(in);
    Golden g;
    g.family = j.at("family").get<std::string>();
    g.hidden = j.at("hidden").get<std::size_t>();
    const std::size_t n_rows = j.at("rows").get<std::size_t>();
    for (const nlohmann::json& c : j.at("cases")) {
      g.cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<std::int32_t>>(),
                         c.at("type_ids").get<std::vector<std::int32_t>>(), c.at("first_row").get<std::size_t>()});
    }
    std::ifstream bin(dir / "golden.f32", std::ios::binary);
    REQUIRE(bin);
    g.rows.resize(n_rows * g.hidden);
    bin.read(reinterpret_cast<char*>(g.rows.data()), static_cast<std::streamsize>(g.rows.size() * sizeof(float)));
    REQUIRE(bin.gcount() == static_cast<std::streamsize>(g.rows.size() * sizeof(float)));
    REQUIRE(bin.peek() == std::char_traits<char>::eof());
    for (float v : g.rows) g.max_abs = std::max(g.max_abs, static_cast<double>(std::abs(v)));
    return g;
  }
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// The golden cases tokenized by the directory's tokenizer.json (ids and types checked against the
// reference's).
std::vector<stile::Encoding> tokenize(const fs::path& dir, const Golden& g) {
  const stile::Tokenizer tokenizer = stile::Tokenizer::from_file(dir / "tokenizer.json");
  std::vector<stile::Encoding> batch;
  for (const GoldenCase& c : g.cases) {
    stile::Encoding e = tokenizer.encode(c.text);
    INFO(g.family << ": " << c.text);
    REQUIRE(e.input_ids == c.ids);
    REQUIRE(e.token_type_ids == c.type_ids);
    batch.push_back(std::move(e));
  }
  return batch;
}

void print_figure(const std::string& family, const std::string& preset, double diff, double cosine) {
  std::printf("families: %-11s %-5s max |d| %.3g, min row cosine %.7f\n", family.c_str(), preset.c_str(), diff, cosine);
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
}

// A copy of a family's directory whose config.json has `edit` applied.
template <class Edit>
void copy_with_config(const std::string& family, const fs::path& to, Edit edit) {
  fs::copy(kFamilies / family, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  nlohmann::json config = nlohmann::json::parse(read_text(to / "config.json"));
  edit(config);
  write_text(to / "config.json", config.dump(1));
}

}  // namespace

TEST_CASE("families: each family's last hidden states equal transformers' (fp32)", "[model][families]") {
  for (const std::string& family : kFamilyDirs) {
    DYNAMIC_SECTION(family) {
      const fs::path dir = kFamilies / family;
      const Golden g = Golden::load(dir);
      const stile::BertModel model = stile::BertModel::load(dir);
      CHECK(model.config().hidden == g.hidden);
      const std::vector<stile::Encoding> batch = tokenize(dir, g);
      // All cases in one packed batch, and each alone: both equal the reference's single runs.
      std::vector<float> hidden;
      const std::vector<std::size_t> lengths = model.encode(batch, hidden);
      REQUIRE(lengths.size() == g.cases.size());
      const double tolerance = kRelativeTolerance * std::max(1.0, g.max_abs);
      const double diff = max_abs_diff(hidden, g.rows);
      print_figure(family, "fp32", diff, stile_test::min_row_cosine(hidden, g.rows, g.hidden));
      CHECK(diff <= tolerance);
      for (std::size_t i = 0; i < batch.size(); ++i) {
        std::vector<float> one;
        model.encode(std::span(&batch[i], 1), one);
        const std::vector<float> want(
            g.rows.begin() + static_cast<std::ptrdiff_t>(g.cases[i].first_row * g.hidden),
            g.rows.begin() + static_cast<std::ptrdiff_t>(g.cases[i].first_row * g.hidden + one.size()));
        INFO(g.cases[i].text);
        CHECK(max_abs_diff(one, want) <= tolerance);
      }
    }
  }
}

TEST_CASE("families: a padded batch gives the unpadded batch's hidden states", "[model][families]") {
  for (const std::string& family :
       {std::string("roberta"), std::string("distilbert"), std::string("mpnet"), std::string("modernbert"),
        std::string("deberta-v2")}) {
    DYNAMIC_SECTION(family) {
      const fs::path dir = kFamilies / family;
      const Golden g = Golden::load(dir);
      const stile::BertModel model = stile::BertModel::load(dir);
      std::vector<stile::Encoding> batch = tokenize(dir, g);
      std::vector<float> want, got;
      model.encode(batch, want);
      std::size_t longest = 0;
      for (const stile::Encoding& e : batch) longest = std::max(longest, e.input_ids.size());
      // The padding token a tokenizer appends: [PAD] 0 of bert_wordpiece and deberta_v3, <pad> 1 of
      // roberta_bpe.
      const std::int32_t pad = family == "roberta" || family == "mpnet" ? 1 : 0;
      for (stile::Encoding& e : batch) {
        e.attention_mask.assign(e.input_ids.size(), 1);
        e.attention_mask.resize(longest, 0);
        e.input_ids.resize(longest, pad);
        e.token_type_ids.resize(longest, 0);
      }
      model.encode(batch, got);
      CHECK(max_abs_diff(got, want) <= 1e-6);
    }
  }
}

TEST_CASE("families: each number-format preset within its tolerance of transformers", "[model][families]") {
  // The floors of test_precision.cpp's presets (fp16 weights round at 2^-11; int8 at about 1/127
  // of a channel's largest weight; I-BERT's integer operators add their own rounding). The
  // checkpoints hold fp16-exact weights, so fp16 here is the fp32 model read through the fp16 GEMM.
  const std::vector<std::pair<std::string, double>> floors{{"fp16", 0.99999}, {"int8", 0.995}, {"ibert", 0.99}};
  for (const std::string& family : kFamilyDirs) {
    for (const auto& [preset, floor] : floors) {
      DYNAMIC_SECTION(family << " " << preset) {
        const fs::path dir = kFamilies / family;
        if (family == "modernbert" && preset == "ibert") {
          // GEGLU has no integer-only form: the integer GELU is refused for it by name.
          REQUIRE_THROWS_WITH(stile::BertModel::load(dir, stile::precision_preset(preset)),
                              Contains((dir / "model.safetensors").string()) && Contains("model_type \"modernbert\"") &&
                                  Contains("gated FFN (GEGLU) has no integer-only form") && Contains("ibert"));
          continue;
        }
        const Golden g = Golden::load(dir);
        const stile::BertModel model = stile::BertModel::load(dir, stile::precision_preset(preset));
        std::vector<float> hidden;
        model.encode(tokenize(dir, g), hidden);
        const double cosine = stile_test::min_row_cosine(hidden, g.rows, g.hidden);
        print_figure(family, preset, max_abs_diff(hidden, g.rows), cosine);
        CHECK(cosine > floor);
      }
    }
  }
}

TEST_CASE("families: SentenceEncoder::load runs each family's directory (mean pooling)", "[model][families]") {
  for (const std::string& family : kFamilyDirs) {
    DYNAMIC_SECTION(family) {
      const fs::path dir = kFamilies / family;
      const Golden g = Golden::load(dir);
      const stile::SentenceEncoder encoder = stile::SentenceEncoder::load(dir);
      const stile::EncoderConfig& c = encoder.model().config();
      // The usable positions: RoBERTa's and MPNet's tables start after their padding index.
      CHECK(encoder.config().max_seq_length == c.max_positions());
      const bool long_family = family == "mpnet" || family == "modernbert" || family == "deberta-v2";
      CHECK(c.max_positions() == (long_family ? 256 : 128));
      const double tolerance = kRelativeTolerance * std::max(1.0, g.max_abs);
      for (const GoldenCase& gc : g.cases) {
        const std::vector<float> got = encoder.embed(gc.text);
        std::vector<double> mean(g.hidden, 0.0);
        for (std::size_t t = 0; t < gc.ids.size(); ++t) {
          for (std::size_t k = 0; k < g.hidden; ++k) mean[k] += g.rows[(gc.first_row + t) * g.hidden + k];
        }
        double diff = 0;
        for (std::size_t k = 0; k < g.hidden; ++k) {
          diff = std::max(diff, std::abs(got[k] - mean[k] / static_cast<double>(gc.ids.size())));
        }
        INFO(gc.text);
        CHECK(diff <= tolerance);
      }
    }
  }
}

TEST_CASE("families: the description read from each config.json", "[model][families][config]") {
  const auto config = [](const std::string& family) {
    return stile::read_encoder_config((kFamilies / family / "config.json").string());
  };
  const stile::EncoderConfig bert = config("bert");
  CHECK(bert.family == stile::EncoderFamily::kBert);
  CHECK(bert.position_offset == 0);
  CHECK(bert.type_vocab_size == 2);
  CHECK(bert.embedding_dim() == 64);
  const stile::EncoderConfig distil = config("distilbert");
  CHECK(distil.family == stile::EncoderFamily::kDistilBert);
  CHECK((distil.hidden == 64 && distil.num_layers == 2 && distil.num_heads == 4 && distil.intermediate == 128));
  CHECK(distil.type_vocab_size == 0);
  CHECK(distil.layer_norm_eps == 1e-12f);
  for (const std::string family : {"roberta", "camembert", "xlm-roberta"}) {
    const stile::EncoderConfig c = config(family);
    CHECK(c.family == stile::EncoderFamily::kRoberta);
    CHECK(c.model_type == family);
    CHECK(c.position_offset == 2);  // pad_token_id 1, + 1
    CHECK(c.max_positions() == c.max_position_embeddings - 2);
  }
  const stile::EncoderConfig electra = config("electra");
  CHECK(electra.family == stile::EncoderFamily::kElectra);
  CHECK(electra.embedding_dim() == 32);
  CHECK(electra.hidden == 64);
  const stile::EncoderConfig mpnet = config("mpnet");
  CHECK(mpnet.family == stile::EncoderFamily::kMpnet);
  CHECK(mpnet.position_offset == 2);  // padding index 1, fixed in MPNetEmbeddings
  CHECK(mpnet.type_vocab_size == 0);
  CHECK(mpnet.relative_attention_buckets == 32);
  CHECK(mpnet.max_positions() == 256);
  const stile::EncoderConfig modern = config("modernbert");
  CHECK(modern.family == stile::EncoderFamily::kModernBert);
  CHECK((modern.num_layers == 3 && modern.pre_norm && modern.gated_ffn && !modern.position_table));
  CHECK((!modern.norm_bias && !modern.attention_bias && !modern.mlp_bias));
  CHECK(modern.layer_norm_eps == 1e-5f);
  CHECK(modern.local_layers == std::vector<bool>{false, true, false});
  CHECK(modern.local_attention == 16);
  CHECK((modern.rope_theta_global == 160000.0f && modern.rope_theta_local == 10000.0f));
  CHECK(modern.max_positions() == 256);
  // The Hub's form (no layer_types, no rope_parameters) reads the same.
  nlohmann::json hub = nlohmann::json::parse(read_text(kFamilies / "modernbert" / "config.json"));
  hub.erase("layer_types");
  hub.erase("rope_parameters");
  hub["global_rope_theta"] = 160000.0;
  hub["local_rope_theta"] = 10000.0;
  const stile::EncoderConfig from_hub = stile::parse_encoder_config(hub.dump(), "x/config.json");
  CHECK(from_hub.local_layers == modern.local_layers);
  CHECK((from_hub.rope_theta_global == 160000.0f && from_hub.rope_theta_local == 10000.0f));
  const stile::EncoderConfig deberta = config("deberta-v2");
  CHECK(deberta.family == stile::EncoderFamily::kDebertaV2);
  CHECK((deberta.c2p && deberta.p2c && deberta.norm_relative_embeddings && !deberta.position_table));
  CHECK((deberta.relative_span == 32 && deberta.position_buckets == 32 && deberta.max_relative_positions == 64));
  CHECK(deberta.score_terms() == 3);
  CHECK(deberta.type_vocab_size == 0);
  CHECK(deberta.layer_norm_eps == 1e-7f);
  // The older string form of pos_att_type reads the same.
  nlohmann::json old = nlohmann::json::parse(read_text(kFamilies / "deberta-v2" / "config.json"));
  old["pos_att_type"] = "p2c|c2p";
  const stile::EncoderConfig from_string = stile::parse_encoder_config(old.dump(), "x/config.json");
  CHECK((from_string.c2p && from_string.p2c));

  // Without model_type, the class in "architectures" names the family; without both, BERT.
  nlohmann::json j = nlohmann::json::parse(read_text(kFamilies / "roberta" / "config.json"));
  j.erase("model_type");
  j["architectures"] = {"XLMRobertaForMaskedLM"};
  CHECK(stile::parse_encoder_config(j.dump(), "x/config.json").family == stile::EncoderFamily::kRoberta);
  j["architectures"] = {"RobertaPreLayerNormForMaskedLM"};
  CHECK_THAT(stile_test::error_of([&] { (void)stile::parse_encoder_config(j.dump(), "x/config.json"); }),
             Contains("x/config.json") && Contains("RobertaPreLayerNormForMaskedLM") && Contains("architectures"));
  j.erase("architectures");
  CHECK(stile::parse_encoder_config(j.dump(), "x/config.json").family == stile::EncoderFamily::kBert);
}

TEST_CASE("families: an unsupported model_type is refused naming the file and the field", "[model][families]") {
  const stile_test::TempDir tmp("families_type");
  for (const std::string type : {"deberta", "albert", "roberta-prelayernorm"}) {
    DYNAMIC_SECTION(type) {
      const fs::path dir = tmp.path / type;
      copy_with_config("bert", dir, [&](nlohmann::json& c) { c["model_type"] = type; });
      REQUIRE_THROWS_WITH(stile::BertModel::load(dir),
                          Contains((dir / "config.json").string()) &&
                              Contains("model_type \"" + type +
                                       "\" is not supported (supported: bert, distilbert, roberta, xlm-roberta, "
                                       "camembert, electra, mpnet, modernbert, deberta-v2)"));
    }
  }
}

TEST_CASE("families: a RoBERTa position table shorter than its offset + 1 is refused", "[model][families]") {
  const stile_test::TempDir tmp("families_positions");
  const fs::path dir = tmp.path / "short";
  copy_with_config("roberta", dir, [](nlohmann::json& c) { c["max_position_embeddings"] = 2; });
  REQUIRE_THROWS_WITH(stile::BertModel::load(dir), Contains((dir / "config.json").string()) &&
                                                       Contains("max_position_embeddings 2 leaves no position") &&
                                                       Contains("pad_token_id + 1 = 2"));
  // One row past the offset is a model of one token; longer sequences are refused by name.
  const fs::path one = tmp.path / "one";
  copy_with_config("roberta", one, [](nlohmann::json& c) { c["max_position_embeddings"] = 3; });
  CHECK_THAT(stile_test::error_of([&] { stile::BertModel::load(one); }),
             Contains("position_embeddings.weight") && Contains("wrong shape"));
}

TEST_CASE("families: a missing tensor is refused naming the file and the tensor", "[model][families]") {
  const stile_test::TempDir tmp("families_tensor");
  const fs::path dir = tmp.path / "distilbert";
  copy_with_config("distilbert", dir, [](nlohmann::json&) {});
  // Rename one tensor in the header (same length, so the file stays valid).
  std::string bytes = read_text(dir / "model.safetensors");
  const std::string name = "distilbert.transformer.layer.1.ffn.lin2.weight";
  const std::size_t at = bytes.find(name);
  REQUIRE(at != std::string::npos);
  bytes.replace(at, name.size(), "distilbert.transformer.layer.1.ffn.lin2.WEIGHT");
  write_text(dir / "model.safetensors", bytes);
  REQUIRE_THROWS_WITH(stile::BertModel::load(dir),
                      Contains((dir / "model.safetensors").string()) && Contains("has no tensor") && Contains(name));

  // ELECTRA without its embeddings_project.
  const fs::path electra = tmp.path / "electra";
  copy_with_config("electra", electra, [](nlohmann::json&) {});
  bytes = read_text(electra / "model.safetensors");
  const std::string project = "electra.embeddings_project.weight";
  REQUIRE(bytes.find(project) != std::string::npos);
  bytes.replace(bytes.find(project), project.size(), "electra.embeddings_PROJECT.weight");
  write_text(electra / "model.safetensors", bytes);
  REQUIRE_THROWS_WITH(stile::BertModel::load(electra), Contains("has no tensor") && Contains(project));
}

TEST_CASE("families: DistilBERT given token types is refused naming the field", "[model][families]") {
  const fs::path dir = kFamilies / "distilbert";
  const stile::BertModel model = stile::BertModel::load(dir);
  stile::Encoding e = stile::Tokenizer::from_file(dir / "tokenizer.json").encode_pair("a film", "about films");
  REQUIRE(std::find(e.token_type_ids.begin(), e.token_type_ids.end(), 1) != e.token_type_ids.end());
  std::vector<float> hidden;
  REQUIRE_THROWS_WITH(model.encode(std::span(&e, 1), hidden),
                      Contains("token_type_ids") && Contains("distilbert has no token types"));
  // Type 0 everywhere (what a tokenizer writes for one text) is what DistilBERT reads.
  std::fill(e.token_type_ids.begin(), e.token_type_ids.end(), 0);
  CHECK_NOTHROW(model.encode(std::span(&e, 1), hidden));
}

TEST_CASE("families: a directory with only pytorch_model.bin says only safetensors is read", "[model][families]") {
  const stile_test::TempDir tmp("families_bin");
  const fs::path dir = tmp.path / "bin";
  copy_with_config("bert", dir, [](nlohmann::json&) {});
  fs::rename(dir / "model.safetensors", dir / "pytorch_model.bin");
  REQUIRE_THROWS_WITH(stile::BertModel::load(dir),
                      Contains((dir / "pytorch_model.bin").string()) && Contains("only model.safetensors is read"));
}

TEST_CASE("families: the shard store refuses a family other than BERT by name", "[model][families]") {
  const stile_test::TempDir tmp("families_store");
  for (const std::string family : {"roberta", "distilbert", "electra", "mpnet", "modernbert", "deberta-v2"}) {
    DYNAMIC_SECTION(family) {
      REQUIRE_THROWS_WITH(stile::convert_checkpoint(kFamilies / family, tmp.path / (family + ".stile"), {}),
                          Contains((kFamilies / family / "config.json").string()) &&
                              Contains("is not supported by convert (the shard store)"));
      CHECK(!fs::exists(tmp.path / (family + ".stile")));
    }
  }
}

TEST_CASE("families: MPNet's relative position buckets are the reference's", "[model][families][mpnet]") {
  // transformers' MPNetEncoder.relative_position_bucket (key - query -> bucket) at and around the
  // boundaries of its log-spaced buckets (16, 32, 64, 128), both directions.
  const std::vector<std::tuple<std::ptrdiff_t, std::size_t, std::size_t>> want{
      {0, 0, 0},     {1, 17, 1},    {7, 23, 7},    {8, 24, 8},    {15, 25, 9},   {16, 26, 10},
      {17, 26, 10},  {31, 27, 11},  {32, 28, 12},  {33, 28, 12},  {63, 29, 13},  {64, 30, 14},
      {65, 30, 14},  {127, 31, 15}, {128, 31, 15}, {600, 31, 15}};
  for (const auto& [r, after, before] : want) {
    INFO("key - query = " << r);
    CHECK(stile::mpnet_relative_bucket(r) == after);
    CHECK(stile::mpnet_relative_bucket(-r) == before);
  }
}

TEST_CASE("families: an MPNet description or checkpoint it cannot run is refused by name", "[model][families][mpnet]") {
  const stile_test::TempDir tmp("families_mpnet");
  // Fewer buckets than the 32 its relative positions fall in.
  const fs::path few = tmp.path / "few";
  copy_with_config("mpnet", few, [](nlohmann::json& c) { c["relative_attention_num_buckets"] = 16; });
  REQUIRE_THROWS_WITH(stile::BertModel::load(few), Contains((few / "config.json").string()) &&
                                                       Contains("relative_attention_num_buckets 16 is below the 32"));
  // Without its relative position table.
  const fs::path bare = tmp.path / "bare";
  copy_with_config("mpnet", bare, [](nlohmann::json&) {});
  std::string bytes = read_text(bare / "model.safetensors");
  const std::string name = "mpnet.encoder.relative_attention_bias.weight";
  REQUIRE(bytes.find(name) != std::string::npos);
  bytes.replace(bytes.find(name), name.size(), "mpnet.encoder.relative_attention_BIAS.weight");
  write_text(bare / "model.safetensors", bytes);
  REQUIRE_THROWS_WITH(stile::BertModel::load(bare),
                      Contains((bare / "model.safetensors").string()) && Contains("has no tensor") && Contains(name));
  // The multi-device layer runs BERT's layer only: it names what MPNet's and ModernBERT's add.
  for (const auto& [family, what] : {std::pair{"mpnet", "a relative position bias in attention"},
                                     std::pair{"modernbert", "pre-LayerNorm, rotary positions"},
                                     std::pair{"deberta-v2", "disentangled attention"}}) {
    const stile::BertWeights w = stile::BertWeights::load(kFamilies / family);
    REQUIRE_THROWS_WITH(stile::DenseLayer::from_checkpoint(w.file, w.config, 0),
                        Contains("model.safetensors") && Contains(std::string("model_type \"") + family + "\"") &&
                            Contains(what) && Contains("does not run"));
  }
}

TEST_CASE("families: a ModernBERT description it cannot run is refused naming the file and the field",
          "[model][families][modernbert]") {
  const stile_test::TempDir tmp("families_modernbert");
  const auto refused = [&](const std::string& name, auto edit) {
    const fs::path dir = tmp.path / name;
    copy_with_config("modernbert", dir, edit);
    return stile_test::error_of([&] { stile::BertModel::load(dir); });
  };
  const std::string config = "config.json";
  // A window larger than the positions (the reference would attend globally on its local layers).
  CHECK_THAT(refused("window", [](nlohmann::json& c) { c["local_attention"] = 512; }),
             Contains(config) && Contains("local_attention 512 is larger than max_position_embeddings 256"));
  CHECK_THAT(refused("rope", [](nlohmann::json& c) { c["rope_parameters"]["sliding_attention"]["rope_type"] = "linear"; }),
             Contains(config) && Contains("rope_parameters.sliding_attention") && Contains("\"rope_type\" \"linear\""));
  CHECK_THAT(refused("scaling", [](nlohmann::json& c) { c["rope_scaling"] = {{"type", "dynamic"}}; }),
             Contains(config) && Contains("rope_scaling") && Contains("not supported"));
  CHECK_THAT(refused("types", [](nlohmann::json& c) { c["layer_types"][1] = "chunked_attention"; }),
             Contains(config) && Contains("layer_types[1] \"chunked_attention\" is not supported"));
  CHECK_THAT(refused("act", [](nlohmann::json& c) { c["hidden_activation"] = "gelu_pytorch_tanh"; }),
             Contains(config) && Contains("hidden_activation \"gelu_pytorch_tanh\" is not supported"));
  // A bias the config promises and the checkpoint lacks.
  CHECK_THAT(refused("bias", [](nlohmann::json& c) { c["attention_bias"] = true; }),
             Contains("model.safetensors") && Contains("has no tensor") && Contains("model.layers.0.attn.Wqkv.bias"));
  // A window of the whole sequence is global attention: every layer global gives the same numbers
  // as a window (128 each side) wider than every case but the long one, left out here.
  const fs::path global = tmp.path / "global";
  copy_with_config("modernbert", global, [](nlohmann::json& c) { c["layer_types"][1] = "full_attention"; });
  const fs::path wide = tmp.path / "wide";
  copy_with_config("modernbert", wide, [](nlohmann::json& c) {
    c["local_attention"] = 256;
    c["rope_parameters"]["sliding_attention"]["rope_theta"] = 160000.0;
  });
  const Golden g = Golden::load(kFamilies / "modernbert");
  std::vector<stile::Encoding> batch = tokenize(kFamilies / "modernbert", g);
  batch.pop_back();
  std::vector<float> a, b;
  stile::BertModel::load(global).encode(batch, a);
  stile::BertModel::load(wide).encode(batch, b);
  CHECK(max_abs_diff(a, b) == 0.0);
  const std::vector<float> want(g.rows.begin(), g.rows.begin() + static_cast<std::ptrdiff_t>(a.size()));
  CHECK(max_abs_diff(a, want) > 1e-3);  // the window and the local base matter
  // convert --checkpoint stores BERT-shaped tensors (separate Q, K, V; one FFN input): refused by name.
  CHECK_THAT(stile_test::error_of([&] {
               stile::write_quantized_checkpoint(kFamilies / "modernbert", tmp.path / "q", stile::LinearFormat::kInt8,
                                                 stile::Int8Scheme::kSymmetricPerChannel);
             }),
             Contains("model.safetensors") && Contains("not supported by convert --checkpoint"));
  CHECK(!fs::exists(tmp.path / "q"));
}

TEST_CASE("families: DeBERTa's relative position buckets are the reference's", "[model][families][deberta]") {
  // transformers' make_log_bucket_position (query - key -> bucket), bucket_size 32 over 64 positions
  // (the test model's) and DeBERTa-v3's 256 over 512; it is odd: -r -> -bucket.
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> want{
      {0, 0, 0},     {15, 15, 15},  {16, 16, 16},  {17, 17, 17},  {20, 19, 20},  {40, 27, 40},
      {63, 31, 63},  {64, 32, 64},  {100, 37, 100}, {200, 44, 169}, {600, 56, 270}};
  for (const auto& [r, small, v3] : want) {
    INFO("query - key = " << r);
    CHECK(stile::deberta_relative_bucket(r, 32, 64) == small);
    CHECK(stile::deberta_relative_bucket(-r, 32, 64) == -small);
    CHECK(stile::deberta_relative_bucket(r, 256, 512) == v3);
  }
}

TEST_CASE("families: a DeBERTa description or checkpoint it cannot run is refused by name", "[model][families][deberta]") {
  const stile_test::TempDir tmp("families_deberta");
  const auto refused = [&](const std::string& name, auto edit) {
    const fs::path dir = tmp.path / name;
    copy_with_config("deberta-v2", dir, edit);
    return stile_test::error_of([&] { stile::BertModel::load(dir); });
  };
  // Without its relative embeddings: in the description, and in the checkpoint.
  CHECK_THAT(refused("norel", [](nlohmann::json& c) { c["relative_attention"] = false; }),
             Contains("config.json") && Contains("relative_attention is false") &&
                 Contains("without its relative embeddings"));
  CHECK_THAT(refused("absent", [](nlohmann::json& c) { c.erase("relative_attention"); }),
             Contains("config.json") && Contains("relative_attention is false or absent"));
  const fs::path bare = tmp.path / "bare";
  copy_with_config("deberta-v2", bare, [](nlohmann::json&) {});
  std::string bytes = read_text(bare / "model.safetensors");
  const std::string name = "deberta.encoder.rel_embeddings.weight";
  REQUIRE(bytes.find(name) != std::string::npos);
  bytes.replace(bytes.find(name), name.size(), "deberta.encoder.rel_EMBEDDINGS.weight");
  write_text(bare / "model.safetensors", bytes);
  CHECK_THAT(stile_test::error_of([&] { stile::BertModel::load(bare); }),
             Contains((bare / "model.safetensors").string()) && Contains("has no tensor") && Contains(name));
  // What the disentangled attention does not implement.
  CHECK_THAT(refused("p2p", [](nlohmann::json& c) { c["pos_att_type"] = {"p2c", "c2p", "p2p"}; }),
             Contains("config.json") && Contains("pos_att_type \"p2p\" is not supported"));
  CHECK_THAT(refused("share", [](nlohmann::json& c) { c["share_att_key"] = false; }),
             Contains("config.json") && Contains("share_att_key false"));
  CHECK_THAT(refused("conv", [](nlohmann::json& c) { c["conv_kernel_size"] = 3; }),
             Contains("config.json") && Contains("conv_kernel_size"));
  CHECK_THAT(refused("proj", [](nlohmann::json& c) { c["embedding_size"] = 32; }),
             Contains("config.json") && Contains("embedding_size"));
  CHECK_THAT(refused("norm", [](nlohmann::json& c) { c["norm_rel_ebd"] = "layer_norm|other"; }),
             Contains("config.json") && Contains("norm_rel_ebd"));
}
