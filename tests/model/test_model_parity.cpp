// The fp32 BERT encoder and the sentence-transformers pipeline (SentenceEncoder) against the
// reference (PyTorch transformers + sentence-transformers, fp32) on all-MiniLM-L6-v2: the goldens
// in tests/model/data (format and tolerances in data/README.md). Plus the errors a bad model
// directory must give. Without the model the tests warn and skip; they never pass silently.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "goldens.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "support/error_of.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using stile::BertModel;
using stile::Encoding;
using stile::Pooling;
using stile::SentenceEncoder;
using stile_test::GoldenCase;
using stile_test::ModelGoldens;

namespace {

// data/README.md: a float32 implementation that sums in another order lands within these of the
// reference (whose own batch-vs-single noise is about 2e-6 on hidden, 2e-7 on embeddings).
constexpr double kHiddenTolerance = 1e-4;     // max |d| on last hidden states (values reach ~6.3)
constexpr double kEmbeddingTolerance = 1e-5;  // max |d| on normalized embeddings
constexpr double kMinCosine = 0.99999;
// Padding rows are dropped before any compute, so a padded batch must give what the same batch
// unpadded gives, up to nothing more than a different summation order.
constexpr double kPaddingTolerance = 1e-6;

// The model directory ($STILE_MODEL_DIR, else the one CMake found), or "" after a warning saying
// why the test is skipped.
fs::path model_dir_or_warn() {
  const char* env = std::getenv("STILE_MODEL_DIR");
  const fs::path dir = env != nullptr && *env != '\0' ? env : STILE_MODEL_DIR;
  for (const char* file : {"config.json", "model.safetensors", "vocab.txt"}) {
    if (!fs::exists(dir / file)) {
      WARN("SKIPPED: the default model is not in " << dir.string() << " (no " << file << "; run scripts/fetch-model)");
      return {};
    }
  }
  return dir;
}

const ModelGoldens& goldens() {
  static const ModelGoldens loaded = ModelGoldens::load(STILE_TEST_DATA_DIR);
  return loaded;
}

// The default model's pipeline, loaded once for all tests; null (after a warning) without it.
const SentenceEncoder* default_encoder() {
  const fs::path dir = model_dir_or_warn();
  if (dir.empty()) return nullptr;
  static const SentenceEncoder encoder = SentenceEncoder::load(dir);
  return &encoder;
}

// STILE_TEST_QUICK=1: set for the aarch64 tests under qemu, where a full run takes minutes.
bool quick_run() {
  const char* quick = std::getenv("STILE_TEST_QUICK");
  return quick != nullptr && std::string_view(quick) == "1";
}

// The cases the model runs on: all of them, or in a quick run the golden batch's 8 and the
// 128-token case.
std::vector<std::size_t> cases_to_run(const ModelGoldens& g) {
  std::vector<std::size_t> ids;
  if (quick_run()) {
    ids = g.batch_rows();
    for (const GoldenCase& c : g.cases()) {
      if (c.category == "len128") ids.push_back(c.id);
    }
    WARN("STILE_TEST_QUICK=1: the model runs on " << ids.size() << " of the " << g.cases().size() << " cases");
  } else {
    for (const GoldenCase& c : g.cases()) ids.push_back(c.id);
  }
  return ids;
}

std::string describe(const GoldenCase& c) { return "case " + std::to_string(c.id) + " (" + c.category + ")"; }

// What the reference ran: the golden ids, one segment, no padding.
Encoding encoding_of(const std::vector<std::int32_t>& ids) {
  Encoding e;
  e.input_ids = ids;
  e.token_type_ids.assign(ids.size(), 0);
  e.attention_mask.assign(ids.size(), 1);
  return e;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    if (!(d <= worst)) worst = d;  // NaN sticks
  }
  return worst;
}

double cosine(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return -2.0;
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::max(std::sqrt(aa * bb), 1e-300);
}

// The worst value of a figure over many comparisons, and where it was seen.
struct Worst {
  double value;
  std::string where;
  bool higher_is_worse = true;

  void see(double v, const std::string& at) {
    const bool worse = higher_is_worse ? !(v <= value) : !(v >= value);
    if (worse) {
      value = v;
      where = at;
    }
  }
};
Worst worst_max() { return {0.0, "-", true}; }
Worst worst_min() { return {1.0, "-", false}; }

// Enough digits to tell a cosine of 0.9999999 from 1.
std::ostream& operator<<(std::ostream& out, const Worst& w) {
  const auto precision = out.precision(10);
  out << w.value << " (" << w.where << ")";
  out.precision(precision);
  return out;
}

// Max |d| and cosine of an embedding against the golden one, checked and recorded.
void check_embedding(std::span<const float> got, std::span<const float> want, const std::string& where, Worst& diff,
                     Worst& cos) {
  const double d = max_abs_diff(got, want);
  const double c = cosine(got, want);
  CHECK(d <= kEmbeddingTolerance);
  CHECK(c >= kMinCosine);
  diff.see(d, where);
  cos.see(c, where);
}

using stile_test::error_of;
using stile_test::TempDir;

// The files of a sentence-transformers model directory that SentenceEncoder reads.
const std::vector<std::string>& model_files() {
  static const std::vector<std::string> files = {
      "config.json",           "model.safetensors",    "vocab.txt", "modules.json", "sentence_bert_config.json",
      "tokenizer_config.json", "1_Pooling/config.json"};
  return files;
}

// Links the model's files (those that exist) into dir, except the ones listed: a model
// directory to break one file of without copying 90 MB.
void link_model_files(const fs::path& model, const fs::path& dir, const std::vector<std::string>& except = {}) {
  for (const std::string& file : model_files()) {
    if (std::find(except.begin(), except.end(), file) != except.end() || !fs::exists(model / file)) continue;
    fs::create_directories((dir / file).parent_path());
    fs::create_symlink(fs::absolute(model / file), dir / file);
  }
}

void write_file(const fs::path& file, const std::string& contents) {
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << contents;
  REQUIRE(out.good());
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The first `bytes` bytes of file.
std::string read_prefix(const fs::path& file, std::size_t bytes) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in.good());
  std::string out(bytes, '\0');
  in.read(out.data(), static_cast<std::streamsize>(bytes));
  REQUIRE(static_cast<std::size_t>(in.gcount()) == bytes);
  return out;
}

}  // namespace

TEST_CASE("model goldens: the index and data file are intact", "[model][golden]") {
  const ModelGoldens& g = goldens();  // checks size and CRC-32 of goldens.bin, array bounds
  CHECK(g.hidden() == 384);
  CHECK(g.max_seq_length() == 256);
  CHECK(g.cases().size() == 62);
  CHECK(g.batch_rows().size() == 8);
  for (const GoldenCase& c : g.cases()) {
    INFO(describe(c));
    CHECK(g.i32(std::to_string(c.id), "ids").size() == c.n_tokens);
    CHECK(g.shape(std::to_string(c.id), "hidden") == std::vector<std::size_t>{c.n_tokens, g.hidden()});
  }
}

TEST_CASE(
    "SentenceEncoder reads all-MiniLM-L6-v2's pipeline and tokenizes every golden case to "
    "the reference's ids",
    "[model][golden]") {
  const SentenceEncoder* encoder = default_encoder();
  if (encoder == nullptr) return;
  const ModelGoldens& g = goldens();
  CHECK(encoder->dim() == g.hidden());
  CHECK(encoder->config().max_seq_length == 256);
  CHECK(encoder->config().modules.pooling.modes == std::vector{Pooling::kMean});
  CHECK(encoder->config().modules.normalize);
  REQUIRE(encoder->tokenizer().truncation().has_value());
  CHECK(encoder->tokenizer().truncation()->max_length == 256);
  CHECK(encoder->tokenizer().encode("A Guitar").input_ids == encoder->tokenizer().encode("a guitar").input_ids);

  std::size_t mismatches = 0;
  for (const GoldenCase& c : g.cases()) {
    INFO(describe(c));
    const Encoding e = encoder->tokenizer().encode(g.text(c.id));
    const std::vector<std::int32_t> want = g.i32(std::to_string(c.id), "ids");
    CHECK(e.input_ids == want);
    if (e.input_ids != want) ++mismatches;
  }
  WARN("token ids of " << g.cases().size() << " golden cases: " << mismatches << " mismatches");
}

TEST_CASE("single-sequence runs match the reference's hidden states, pooled vectors and embeddings",
          "[model][golden]") {
  const SentenceEncoder* encoder = default_encoder();
  if (encoder == nullptr) return;
  const ModelGoldens& g = goldens();
  const std::size_t dim = encoder->dim();
  REQUIRE(dim == g.hidden());

  Worst hidden_diff = worst_max(), mean_diff = worst_max(), cls_diff = worst_max();
  Worst embedding_diff = worst_max(), embedding_cos = worst_min();
  const std::vector<std::size_t> run = cases_to_run(g);
  for (const std::size_t id : run) {
    const GoldenCase& c = g.cases().at(id);
    const std::string key = std::to_string(c.id);
    INFO(describe(c));
    const std::vector<std::int32_t> ids = g.i32(key, "ids");
    const Encoding input = encoding_of(ids);
    std::vector<float> hidden;
    const std::vector<std::size_t> lengths = encoder->model().encode(std::span(&input, 1), hidden);
    REQUIRE(lengths == std::vector<std::size_t>{ids.size()});
    REQUIRE(hidden.size() == ids.size() * dim);
    if (c.has_hidden) {
      const double d = max_abs_diff(hidden, g.f32(key, "hidden"));
      CHECK(d <= kHiddenTolerance);
      hidden_diff.see(d, describe(c));
    }

    std::vector<float> mean(dim), cls(dim);
    stile::pool_tokens(hidden, ids.size(), dim, Pooling::kMean, mean);
    const double dm = max_abs_diff(mean, g.f32(key, "mean"));
    CHECK(dm <= kHiddenTolerance);
    mean_diff.see(dm, describe(c));

    stile::pool_tokens(hidden, ids.size(), dim, Pooling::kCls, cls);
    CHECK(std::equal(cls.begin(), cls.end(), hidden.begin()));  // CLS is row 0, as is
    const double dc = max_abs_diff(cls, g.f32(key, "cls"));
    CHECK(dc <= kHiddenTolerance);
    cls_diff.see(dc, describe(c));

    // The embedding sentence-transformers returns: mean-pooled, normalized.
    std::vector<float> embedding = mean;
    stile::l2_normalize(embedding);
    check_embedding(embedding, g.f32(key, "embedding"), describe(c), embedding_diff, embedding_cos);
  }
  WARN("single runs of " << run.size() << " cases vs reference: hidden max|d| " << hidden_diff << "; mean max|d| "
                         << mean_diff << "; cls max|d| " << cls_diff << "; embedding max|d| " << embedding_diff
                         << "; embedding min cosine " << embedding_cos);
}

TEST_CASE("embed(text) is the reference's SentenceTransformer.encode(text)", "[model][golden]") {
  const SentenceEncoder* encoder = default_encoder();
  if (encoder == nullptr) return;
  const ModelGoldens& g = goldens();
  // A plain sentence, the empty text ([CLS] [SEP] only), and a text the pipeline must truncate
  // to max_seq_length (256 of its ~400 tokens; skipped in quick mode, as cases_to_run).
  std::vector<std::string> categories = {"sst2", "empty"};
  if (!quick_run()) categories.push_back("truncated_256");
  Worst diff = worst_max(), cos = worst_min();
  for (const std::string& category : categories) {
    const auto c =
        std::find_if(g.cases().begin(), g.cases().end(), [&](const GoldenCase& gc) { return gc.category == category; });
    REQUIRE(c != g.cases().end());
    INFO(describe(*c));
    const std::vector<float> embedding = encoder->embed(g.text(c->id));
    REQUIRE(embedding.size() == encoder->dim());
    check_embedding(embedding, g.f32(std::to_string(c->id), "embedding"), describe(*c), diff, cos);
  }
  WARN("embed(text) on " << categories.size() << " cases: embedding max|d| " << diff << "; min cosine " << cos);
}

namespace {

// Runs one encode() over the cases (unpadded) and checks every row's hidden states and
// mean-pooled, normalized embedding against the single-run goldens.
void check_batch_against_singles(const SentenceEncoder& encoder, const std::vector<std::size_t>& case_ids,
                                 stile::ThreadPool* pool, const std::string& what) {
  const ModelGoldens& g = goldens();
  const std::size_t dim = encoder.dim();
  std::vector<Encoding> batch;
  for (const std::size_t id : case_ids) batch.push_back(encoding_of(g.i32(std::to_string(id), "ids")));
  std::vector<float> hidden;
  const std::vector<std::size_t> lengths = encoder.model().encode(batch, hidden, pool);
  REQUIRE(lengths.size() == batch.size());

  Worst hidden_diff = worst_max(), embedding_diff = worst_max(), embedding_cos = worst_min();
  std::size_t first_row = 0;
  for (std::size_t row = 0; row < batch.size(); ++row) {
    const GoldenCase& c = g.cases().at(case_ids[row]);
    const std::string key = std::to_string(c.id);
    const std::string where = "row " + std::to_string(row) + ", " + describe(c);
    INFO(what << ": " << where);
    REQUIRE(lengths[row] == batch[row].size());
    REQUIRE(hidden.size() >= (first_row + lengths[row]) * dim);
    const std::span<const float> rows = std::span<const float>(hidden).subspan(first_row * dim, lengths[row] * dim);
    if (c.has_hidden) {
      const double d = max_abs_diff(rows, g.f32(key, "hidden"));
      CHECK(d <= kHiddenTolerance);
      hidden_diff.see(d, where);
    }
    std::vector<float> embedding(dim);
    stile::pool_tokens(rows, lengths[row], dim, Pooling::kMean, embedding);
    stile::l2_normalize(embedding);
    check_embedding(embedding, g.f32(key, "embedding"), where, embedding_diff, embedding_cos);
    first_row += lengths[row];
  }
  CHECK(hidden.size() == first_row * dim);
  WARN(what << " (" << batch.size() << " sequences, " << first_row << " tokens, one encode call) vs single-run "
            << "reference: hidden max|d| " << hidden_diff << "; embedding max|d| " << embedding_diff << "; min cosine "
            << embedding_cos);
}

}  // namespace

TEST_CASE("one encode() call over a batch of different lengths matches the single runs", "[model][golden]") {
  const SentenceEncoder* encoder = default_encoder();
  if (encoder == nullptr) return;
  const ModelGoldens& g = goldens();

  SECTION("the reference's batch of 8") {
    check_batch_against_singles(*encoder, g.batch_rows(), nullptr, "golden batch of 8");

    // The same through the text API: embed_batch tokenizes, runs once, pools and normalizes.
    std::vector<std::string> texts;
    for (const std::size_t id : g.batch_rows()) texts.push_back(g.text(id));
    const std::vector<std::vector<float>> embeddings = encoder->embed_batch(texts);
    REQUIRE(embeddings.size() == texts.size());
    Worst diff = worst_max(), cos = worst_min();
    for (std::size_t row = 0; row < texts.size(); ++row) {
      const GoldenCase& c = g.cases().at(g.batch_rows()[row]);
      INFO("embed_batch row " << row << ", " << describe(c));
      check_embedding(embeddings[row], g.f32(std::to_string(c.id), "embedding"), describe(c), diff, cos);
    }
    WARN("embed_batch of the golden batch of 8: embedding max|d| " << diff << "; min cosine " << cos);
  }

  SECTION("all 62 cases at once, on an explicit 2-thread pool") {
    stile::ThreadPool pool(2);
    check_batch_against_singles(*encoder, cases_to_run(g), &pool, "all cases in one batch");
  }

  SECTION("an empty batch gives nothing") {
    std::vector<float> hidden{1.0f};
    CHECK(encoder->model().encode({}, hidden).empty());
    CHECK(hidden.empty());
    CHECK(encoder->embed_batch({}).empty());
  }
}

TEST_CASE("a padded batch gives what the same batch unpadded gives", "[model][golden]") {
  const SentenceEncoder* encoder = default_encoder();
  if (encoder == nullptr) return;
  const ModelGoldens& g = goldens();
  const std::size_t dim = encoder->dim();

  std::vector<std::string> texts;
  for (const std::size_t id : g.batch_rows()) texts.push_back(g.text(id));
  std::vector<Encoding> unpadded;
  for (const std::string& text : texts) unpadded.push_back(encoder->tokenizer().encode(text));
  std::vector<Encoding> padded = unpadded;
  encoder->tokenizer().pad_to_longest(padded);

  // The padded batch is the reference's: same ids and mask, [PAD] = 0 and mask 0 on the padding.
  const std::vector<std::int32_t> golden_ids = g.i32("batch", "ids");
  const std::vector<std::int32_t> golden_mask = g.i32("batch", "mask");
  const std::size_t padded_length = g.batch_padded_length();
  REQUIRE(golden_ids.size() == padded.size() * padded_length);
  for (std::size_t row = 0; row < padded.size(); ++row) {
    INFO("row " << row);
    REQUIRE(padded[row].size() == padded_length);
    CHECK(std::equal(padded[row].input_ids.begin(), padded[row].input_ids.end(),
                     golden_ids.begin() + static_cast<std::ptrdiff_t>(row * padded_length)));
    CHECK(std::equal(padded[row].attention_mask.begin(), padded[row].attention_mask.end(),
                     golden_mask.begin() + static_cast<std::ptrdiff_t>(row * padded_length)));
  }

  std::vector<float> hidden_unpadded, hidden_padded;
  const std::vector<std::size_t> lengths_unpadded = encoder->model().encode(unpadded, hidden_unpadded);
  const std::vector<std::size_t> lengths_padded = encoder->model().encode(padded, hidden_padded);
  CHECK(lengths_padded == lengths_unpadded);
  REQUIRE(hidden_padded.size() == hidden_unpadded.size());
  const double d = max_abs_diff(hidden_padded, hidden_unpadded);
  CHECK(d <= kPaddingTolerance);

  // ... and matches the reference's own padded run, row by row (batch.j: the real rows only).
  Worst reference_diff = worst_max();
  std::size_t first_row = 0;
  for (std::size_t row = 0; row < padded.size(); ++row) {
    INFO("row " << row);
    const std::span<const float> rows =
        std::span<const float>(hidden_padded).subspan(first_row * dim, lengths_padded[row] * dim);
    const double dr = max_abs_diff(rows, g.f32("batch." + std::to_string(row), "hidden"));
    CHECK(dr <= kHiddenTolerance);
    reference_diff.see(dr, "row " + std::to_string(row));
    first_row += lengths_padded[row];
  }

  // SentenceEncoder pools only the real rows of padded encodings (mean, then normalize here).
  REQUIRE(encoder->config().modules.pooling.modes == std::vector{Pooling::kMean});
  REQUIRE(encoder->config().modules.normalize);
  const std::vector<std::vector<float>> embeddings_padded = encoder->embed_encoded(padded);
  REQUIRE(embeddings_padded.size() == padded.size());
  double embedding_d = 0.0;
  first_row = 0;
  for (std::size_t row = 0; row < padded.size(); ++row) {
    std::vector<float> unpadded_embedding(dim);
    stile::pool_tokens(std::span<const float>(hidden_unpadded).subspan(first_row * dim, lengths_unpadded[row] * dim),
                       lengths_unpadded[row], dim, Pooling::kMean, unpadded_embedding);
    stile::l2_normalize(unpadded_embedding);
    embedding_d = std::max(embedding_d, max_abs_diff(embeddings_padded[row], unpadded_embedding));
    first_row += lengths_unpadded[row];
  }
  CHECK(embedding_d <= kPaddingTolerance);
  WARN("padded batch of 8 (padded to " << padded_length << "): hidden max|d| vs unpadded " << d
                                       << ", embedding max|d| vs unpadded " << embedding_d
                                       << "; hidden max|d| vs the reference's padded run " << reference_diff);

  SECTION("a mask that is not 1...1 0...0 is an error, not a silent wrong answer") {
    std::vector<Encoding> holes = {unpadded[0]};
    holes[0].attention_mask[1] = 0;
    std::vector<float> hidden;
    CHECK_THAT(error_of([&] { (void)encoder->model().encode(holes, hidden); }),
               Catch::Matchers::Contains("attention_mask"));
  }
}

TEST_CASE("a bad model directory is a stile::Error naming the file", "[model][errors]") {
  if (quick_run()) {
    WARN("STILE_TEST_QUICK=1: the file errors (portable code, tested natively) are skipped");
    return;
  }
  const fs::path model = model_dir_or_warn();
  if (model.empty()) return;
  const TempDir temp;
  const fs::path& dir = temp.path;
  using Catch::Matchers::Contains;

  SECTION("no config.json") {
    link_model_files(model, dir, {"config.json"});
    const std::string config = (dir / "config.json").string();
    CHECK_THAT(error_of([&] { (void)SentenceEncoder::load(dir); }), Contains(config));
    CHECK_THAT(error_of([&] { (void)BertModel::load(dir); }), Contains(config));
  }

  SECTION("config.json with bad values") {
    const nlohmann::json good = nlohmann::json::parse(read_file(model / "config.json"));
    struct Bad {
      const char* key;
      nlohmann::json value;
      const char* file;  // the file the error must name
    };
    const std::vector<Bad> bads = {
        {"num_attention_heads", 7, "config.json"},         // does not divide hidden_size 384
        {"hidden_size", "big", "config.json"},             // not a number
        {"vocab_size", 0, "config.json"},                  // not positive
        {"hidden_act", "relu", "config.json"},             // not implemented
        {"intermediate_size", 1024, "model.safetensors"},  // valid, but not what the weights are
    };
    link_model_files(model, dir, {"config.json"});
    for (const Bad& bad : bads) {
      nlohmann::json config = good;
      config[bad.key] = bad.value;
      write_file(dir / "config.json", config.dump(2));
      const std::string message = error_of([&] { (void)SentenceEncoder::load(dir); });
      INFO(bad.key << " = " << bad.value.dump() << ": " << message);
      CHECK_THAT(message, Contains((dir / bad.file).string()));
      CHECK_THAT(message, Contains(bad.key) || Contains("intermediate"));
    }
  }

  SECTION("a truncated model.safetensors") {
    link_model_files(model, dir, {"model.safetensors"});
    const fs::path weights = dir / "model.safetensors";
    // The header length (first 8 bytes, little-endian) says where the tensor data starts.
    const std::string head = read_prefix(model / "model.safetensors", 8);
    std::uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i)
      header_bytes = (header_bytes << 8) | static_cast<unsigned char>(head[static_cast<std::size_t>(i)]);
    REQUIRE(header_bytes < 1'000'000);
    for (const std::size_t cut :
         {std::size_t{4}, std::size_t{100}, static_cast<std::size_t>(8 + header_bytes + 4096)}) {
      write_file(weights, read_prefix(model / "model.safetensors", cut));
      const std::string message = error_of([&] { (void)SentenceEncoder::load(dir); });
      INFO("cut after " << cut << " bytes: " << message);
      CHECK_THAT(message, Contains(weights.string()));
    }
  }

  SECTION("sentence-transformers files with bad or unsupported contents") {
    struct Bad {
      const char* file;
      const char* contents;
    };
    const std::vector<Bad> bads = {
        {"modules.json", "{\"not\": \"a list\"}"},
        {"modules.json",
         R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
             {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
             {"idx":2,"name":"2","path":"2_LayerNorm","type":"sentence_transformers.models.LayerNorm"}])"},
        {"modules.json",
         R"([{"idx":0,"name":"0","path":"../elsewhere","type":"sentence_transformers.models.Transformer"}])"},
        {"1_Pooling/config.json", R"({"word_embedding_dimension": 384, "pooling_mode_median_tokens": true})"},
        {"1_Pooling/config.json", R"({"word_embedding_dimension": 384, "pooling_mode_mean_tokens": "yes"})"},
        {"1_Pooling/config.json", R"({"word_embedding_dimension": 768, "pooling_mode_mean_tokens": true})"},
        {"1_Pooling/config.json", R"({"pooling_mode": "median"})"},
        {"1_Pooling/config.json", R"({"pooling_mode": []})"},
        {"1_Pooling/config.json", R"({"pooling_mode": "mean", "include_prompt": 0})"},
        {"config_sentence_transformers.json", R"({"prompts": {"query": 3}})"},
        {"config_sentence_transformers.json", R"({"prompts": {"query": "query: "}, "default_prompt_name": "q"})"},
        {"config_sentence_transformers.json", R"({"similarity_fn_name": "jaccard"})"},
        {"sentence_bert_config.json", R"({"transformer_task": "fill-mask"})"},
        {"sentence_bert_config.json", R"({"max_seq_length": 1024})"},
        {"sentence_bert_config.json", R"({"max_seq_length": "long"})"},
        {"sentence_bert_config.json", R"({"max_seq_length": 256,)"},
        {"tokenizer_config.json", R"({"tokenizer_class": "RobertaTokenizer"})"},
        {"tokenizer_config.json", R"({"do_lower_case": "yes"})"},
    };
    for (const Bad& bad : bads) {
      TempDir one;
      link_model_files(model, one.path, {bad.file});
      write_file(one.path / bad.file, bad.contents);
      const std::string message = error_of([&] { (void)SentenceEncoder::load(one.path); });
      INFO(bad.file << ": " << bad.contents << "\n-> " << message);
      CHECK_THAT(message, Contains((one.path / bad.file).string()));
    }
  }
}

TEST_CASE("SentenceEncoder's defaults for missing optional files, and CLS pooling", "[model][golden]") {
  if (quick_run()) {
    WARN("STILE_TEST_QUICK=1: the defaults (portable code, tested natively) are skipped");
    return;
  }
  const fs::path model = model_dir_or_warn();
  if (model.empty()) return;
  const ModelGoldens& g = goldens();
  const TempDir temp;
  const fs::path& dir = temp.path;
  const GoldenCase& c = g.cases().at(0);
  const std::string key = std::to_string(c.id);

  SECTION("a plain Hugging Face checkpoint: mean pooling, no normalization, max_position_embeddings tokens") {
    link_model_files(model, dir,
                     {"modules.json", "sentence_bert_config.json", "tokenizer_config.json", "1_Pooling/config.json"});
    const SentenceEncoder encoder = SentenceEncoder::load(dir);
    CHECK(encoder.config().modules.pooling.modes == std::vector{Pooling::kMean});
    CHECK_FALSE(encoder.config().modules.normalize);
    CHECK(encoder.config().max_seq_length == 512);
    REQUIRE(encoder.tokenizer().truncation().has_value());
    CHECK(encoder.tokenizer().truncation()->max_length == 512);
    CHECK(encoder.tokenizer().encode("A Guitar").input_ids == encoder.tokenizer().encode("a guitar").input_ids);
    // Without Normalize the embedding is the plain mean of the hidden states.
    const double d = max_abs_diff(encoder.embed(g.text(c.id)), g.f32(key, "mean"));
    CHECK(d <= kHiddenTolerance);
    // The 256-token truncation is sentence-transformers', not the model's.
    const std::string long_text = g.text(g.cases().back().id);
    CHECK(encoder.tokenizer().encode(long_text).size() > 256);
  }

  SECTION("pooling_mode_cls_token, then Normalize") {
    link_model_files(model, dir, {"1_Pooling/config.json"});
    write_file(
        dir / "1_Pooling/config.json",
        R"({"word_embedding_dimension": 384, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false})");
    const SentenceEncoder encoder = SentenceEncoder::load(dir);
    CHECK(encoder.config().modules.pooling.modes == std::vector{Pooling::kCls});
    CHECK(encoder.config().modules.normalize);
    std::vector<float> want = g.f32(key, "cls");
    stile::l2_normalize(want);
    Worst diff = worst_max(), cos = worst_min();
    check_embedding(encoder.embed(g.text(c.id)), want, describe(c), diff, cos);
  }
}
