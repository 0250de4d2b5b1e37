// Quantized checkpoints (`convert --checkpoint`, model/quantized_checkpoint.hpp; docs/quantized_checkpoint.md):
// what the converter writes, that loading one computes what loading the fp32 checkpoint in the same
// format computes, the errors of a bad quantized weight (each naming the file and the tensor), the
// atomic write, and on the default model the int8 checkpoint's sentence embeddings against fp32's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "stile/io/safetensors.hpp"
#include "stile/io/safetensors_writer.hpp"
#include "stile/kernels/int8_gemm.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/quantized_checkpoint.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/ops/precision.hpp"
#include "support/default_model.hpp"
#include "support/error_of.hpp"
#include "support/row_cosine.hpp"
#include "support/random_bert.hpp"
#include "support/rng.hpp"
#include "support/temp_dir.hpp"
#include "support/token_rows.hpp"

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kHidden = 64;
const std::string kFfn1 = "encoder.layer.1.intermediate.dense.weight";

// A tiny random BERT: hidden 64, 2 layers, 4 heads (head_dim 16: Q's 1/sqrt(16) is a power of two,
// so pre-scaling commutes with rounding), FFN 128, 60 tokens, 64 positions. No weight is smaller
// than 0.004 in magnitude, so none of the query weights lands among fp16's subnormals once
// pre-scaled (where rounding the scaled value twice could differ from rounding it once).
void write_tiny(const fs::path& dir, const std::function<void(std::vector<float>&)>& = {}) {
  stile_test::Rng rng{777};
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.5f, .embeddings = 0.1f, .matrices = 0.08f, .biases = 0.05f, .layer_norm = 0.05f};
  stile_test::write_random_bert(
      dir, {kHidden, 2, 4, 128, 60, 64}, scales,
      [&] {
        const float u = rng.unit();
        return u + (u < 0 ? -0.05f : 0.05f);
      },
      [](const fs::path&, bool ok) { REQUIRE(ok); });
}

const fs::path& tiny_model() {
  static const stile_test::TempDir dir("qckpt_model");
  static const bool written = (write_tiny(dir.path), true);
  (void)written;
  return dir.path;
}

// The converted checkpoints, made once: "fp16", "int8" (per channel), "int8-per-tensor".
const fs::path& converted(const std::string& kind) {
  static const stile_test::TempDir root("qckpt_out");
  static std::map<std::string, fs::path> made;
  if (auto it = made.find(kind); it != made.end()) return it->second;
  const fs::path out = root.path / kind;
  const stile::LinearFormat format = kind == "fp16" ? stile::LinearFormat::kF16 : stile::LinearFormat::kInt8;
  const stile::Int8Scheme scheme =
      kind == "int8-per-tensor" ? stile::Int8Scheme::kAsymmetricPerTensor : stile::Int8Scheme::kSymmetricPerChannel;
  const stile::QuantizedCheckpointReport r = stile::write_quantized_checkpoint(tiny_model(), out, format, scheme);
  CHECK(r.converted == 12);
  CHECK(r.file_bytes < r.source_bytes);
  return made[kind] = out;
}

stile::Encoding tokens(std::size_t n, std::size_t salt) { return stile_test::spread_tokens(n, salt, 60); }

std::vector<float> encode(const fs::path& dir, const stile::ModelPrecision& precision) {
  const stile::BertModel m = stile::BertModel::load(dir, precision);
  const std::vector<stile::Encoding> batch{tokens(9, 1), tokens(23, 2), tokens(1, 3)};
  std::vector<float> hidden;
  m.encode(batch, hidden);
  return hidden;
}

double min_row_cosine(const std::vector<float>& a, const std::vector<float>& b) {
  return stile_test::min_row_cosine(a, b, kHidden);
}

// The tensors of dir's model.safetensors, to be changed and written back.
std::vector<stile::TensorToWrite> read_all(const fs::path& dir) {
  const stile::SafetensorsFile f = stile::SafetensorsFile::open((dir / "model.safetensors").string());
  std::vector<stile::TensorToWrite> out;
  for (const stile::TensorInfo& t : f.tensors()) {
    const auto raw = f.bytes(t);
    out.push_back({t.name, t.dtype, t.shape, std::vector<std::byte>(raw.begin(), raw.end())});
  }
  return out;
}

stile::TensorToWrite& find(std::vector<stile::TensorToWrite>& ts, const std::string& name) {
  for (stile::TensorToWrite& t : ts) {
    if (t.name == name) return t;
  }
  FAIL("no tensor " << name);
  throw;
}

template <class T>
std::vector<std::byte> bytes_of(std::vector<T> v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A copy of the checkpoint `kind` with `change` applied to its tensors; the error loading it (in
// every precision the error must be the same: the file is validated as it is read).
std::string error_after(const std::string& kind,
                        const std::function<void(std::vector<stile::TensorToWrite>&)>& change) {
  const stile_test::TempDir dir("qckpt_bad");
  fs::copy(converted(kind), dir.path, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::vector<stile::TensorToWrite> ts = read_all(dir.path);
  change(ts);
  stile::write_file_bytes((dir.path / "model.safetensors").string(), stile::safetensors_bytes(std::move(ts)));
  const std::string e =
      stile_test::error_of([&] { stile::BertWeights::load(dir.path, stile::precision_preset("int8")); });
  CHECK(stile_test::error_of([&] { stile::BertWeights::load(dir.path, stile::precision_preset("fp32")); }) == e);
  // The message names the file.
  CHECK(e.find((dir.path / "model.safetensors").string()) != std::string::npos);
  return e;
}

void set_scale(std::vector<stile::TensorToWrite>& ts, std::size_t i, float value) {
  stile::TensorToWrite& s = find(ts, kFfn1 + "_scale");
  std::memcpy(s.data.data() + 4 * i, &value, 4);
}

}  // namespace

TEST_CASE("convert --checkpoint writes F16 / I8 GEMM weights with their scales, everything else as it was") {
  const stile::SafetensorsFile src = stile::SafetensorsFile::open((tiny_model() / "model.safetensors").string());
  for (const std::string kind : {"fp16", "int8", "int8-per-tensor"}) {
    DYNAMIC_SECTION(kind) {
      const fs::path dir = converted(kind);
      CHECK(fs::exists(dir / "config.json"));
      CHECK(fs::exists(dir / "vocab.txt"));
      const stile::SafetensorsFile f = stile::SafetensorsFile::open((dir / "model.safetensors").string());
      const stile::TensorInfo& w = f.tensor(kFfn1);
      CHECK(w.dtype == (kind == "fp16" ? stile::DType::F16 : stile::DType::I8));
      CHECK(w.shape == std::vector<std::int64_t>{128, 64});
      if (kind != "fp16") {
        CHECK(f.tensor(kFfn1 + "_scale").shape == std::vector<std::int64_t>{kind == "int8" ? 128 : 1});
        CHECK(f.tensor(kFfn1 + "_zero_point").dtype == stile::DType::I32);
        // Per tensor, K and V share one quantization (the loader stacks them into one GEMM).
        const std::string k = "encoder.layer.0.attention.self.key.weight",
                          v = "encoder.layer.0.attention.self.value.weight";
        if (kind == "int8-per-tensor") {
          CHECK(f.to_f32(k + "_scale") == f.to_f32(v + "_scale"));
        }
      } else {
        CHECK(f.find(kFfn1 + "_scale") == nullptr);
      }
      // Biases, LayerNorms, embeddings: the same bytes.
      for (const std::string name : {"encoder.layer.1.intermediate.dense.bias", "embeddings.word_embeddings.weight",
                                     "encoder.layer.0.output.LayerNorm.weight"}) {
        const auto a = src.bytes(name), b = f.bytes(name);
        CHECK(f.tensor(name).dtype == stile::DType::F32);
        CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
      }
    }
  }
}

TEST_CASE("a quantized checkpoint computes what the fp32 checkpoint computes in its format") {
  SECTION("fp16: bit-identical") {
    CHECK(encode(converted("fp16"), stile::precision_preset("fp16")) ==
          encode(tiny_model(), stile::precision_preset("fp16")));
  }
  for (const std::string kind : {"int8", "int8-per-tensor"}) {
    DYNAMIC_SECTION(kind << ": bit-identical where the target's weight range is the stored one (8 bits)") {
      stile::ModelPrecision p = stile::precision_preset("int8");
      p.int8_scheme =
          kind == "int8" ? stile::Int8Scheme::kSymmetricPerChannel : stile::Int8Scheme::kAsymmetricPerTensor;
      const std::vector<float> want = encode(tiny_model(), p);
      // The stored scheme wins over the precision's: ask for the other one.
      stile::ModelPrecision other = p;
      other.int8_scheme =
          kind == "int8" ? stile::Int8Scheme::kAsymmetricPerTensor : stile::Int8Scheme::kSymmetricPerChannel;
      const std::vector<float> got = encode(converted(kind), other);
      if (stile::int8_weight_max() == 127) {
        CHECK(got == want);
      } else {
        // 7-bit target: the stored 8-bit values are requantized to 7 bits.
        CHECK(min_row_cosine(got, want) > 0.995);
      }
    }
  }
  SECTION("a target with 7-bit weights requantizes the stored 8-bit values") {
    // Forbidding the dot-product instructions makes an x86 target the 7-bit one (Arm's fallback
    // widens exactly and keeps 8 bits: nothing to test there).
    struct Restore {
      ~Restore() { stile::detail::int8_dot_disabled() = false; }
    } restore;
    stile::detail::int8_dot_disabled() = true;
    if (stile::int8_weight_max() != 63) {
      WARN("skipped: this target has no 7-bit weights");
      return;
    }
    for (const std::string kind : {"int8", "int8-per-tensor"}) {
      stile::ModelPrecision p = stile::precision_preset("int8");
      p.int8_scheme =
          kind == "int8" ? stile::Int8Scheme::kSymmetricPerChannel : stile::Int8Scheme::kAsymmetricPerTensor;
      const stile::BertModel m = stile::BertModel::load(converted(kind), p);
      CHECK(m.weights().layers[1].ffn1.view().i8.weight_max == 63);
      CHECK(min_row_cosine(encode(converted(kind), p), encode(tiny_model(), p)) > 0.995);
    }
  }
  SECTION("another format than stored goes through fp32") {
    const std::vector<float> fp32 = encode(tiny_model(), {});
    CHECK(min_row_cosine(encode(converted("int8"), {}), fp32) > 0.995);
    CHECK(min_row_cosine(encode(converted("int8"), stile::precision_preset("fp16")), fp32) > 0.995);
    CHECK(min_row_cosine(encode(converted("fp16"), stile::precision_preset("int8")), fp32) > 0.995);
    // fp16 values are exact in fp32: the fp16 checkpoint in fp32 is the fp16-rounded model.
    CHECK(min_row_cosine(encode(converted("fp16"), {}), fp32) > 0.99999);
  }
}

TEST_CASE("a bad quantized weight is an error naming the file and the tensor") {
  const std::string scale = kFfn1 + "_scale", zp = kFfn1 + "_zero_point";
  struct Case {
    const char* what;
    std::string kind;
    std::function<void(std::vector<stile::TensorToWrite>&)> change;
    std::string tensor, message;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases{
      {"zero scale", "int8", [](auto& ts) { set_scale(ts, 3, 0.0f); }, scale, "scale[3] = 0 "},
      {"negative scale", "int8", [](auto& ts) { set_scale(ts, 5, -0.5f); }, scale, "scale[5] = -0.5 "},
      {"NaN scale", "int8", [&](auto& ts) { set_scale(ts, 0, nan); }, scale, "scale[0] = nan"},
      {"inf scale", "int8", [&](auto& ts) { set_scale(ts, 1, inf); }, scale, "scale[1] = inf"},
      {"subnormal scale", "int8", [](auto& ts) { set_scale(ts, 2, 1e-40f); }, scale, "scale[2] = "},
      {"scale out of range", "int8", [](auto& ts) { set_scale(ts, 7, 1e31f); }, scale, "out of range"},
      {"per-tensor scale zero", "int8-per-tensor", [](auto& ts) { set_scale(ts, 0, 0.0f); }, scale, "scale[0] = 0 "},
      {"scale count neither N nor 1", "int8",
       [&](auto& ts) {
         find(ts, scale).shape = {5};
         find(ts, scale).data.resize(20);
       },
       scale, "want [128] per channel or [1] per tensor"},
      {"scale of the wrong dtype", "int8", [&](auto& ts) { find(ts, scale).dtype = stile::DType::I32; }, scale,
       "dtype I32 (want F32)"},
      {"zero point above I8", "int8-per-tensor",
       [&](auto& ts) { find(ts, zp).data = bytes_of(std::vector<std::int32_t>{200}); }, zp,
       "zero point 200 is outside I8's range"},
      {"zero point below I8", "int8-per-tensor",
       [&](auto& ts) { find(ts, zp).data = bytes_of(std::vector<std::int32_t>{-129}); }, zp, "zero point -129"},
      {"per-channel zero point not 0", "int8",
       [&](auto& ts) { find(ts, zp).data = bytes_of(std::vector<std::int32_t>{3}); }, zp, "must be 0"},
      {"zero point of the wrong shape", "int8",
       [&](auto& ts) {
         find(ts, zp).shape = {2};
         find(ts, zp).data = bytes_of(std::vector<std::int32_t>{0, 0});
       },
       zp, "want [1]"},
      {"missing scale", "int8", [&](auto& ts) { std::erase_if(ts, [&](const auto& t) { return t.name == scale; }); },
       scale, "has no companion tensor"},
      {"missing zero point", "int8", [&](auto& ts) { std::erase_if(ts, [&](const auto& t) { return t.name == zp; }); },
       zp, "has no companion tensor"},
      {"weight of a dtype no weight has", "int8", [&](auto& ts) { find(ts, kFfn1).dtype = stile::DType::U8; }, kFfn1,
       "has dtype U8"},
      {"weight of the wrong shape", "int8",
       [&](auto& ts) {
         find(ts, kFfn1).shape = {64, 128};
       },
       kFfn1, "wrong shape [64, 128]"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.what) {
      const std::string e = error_after(c.kind, c.change);
      INFO(e);
      CHECK(e.find("'" + c.tensor + "'") != std::string::npos);
      CHECK(e.find(c.message) != std::string::npos);
    }
  }
}

TEST_CASE("convert --checkpoint writes atomically: a failure leaves nothing behind") {
  const stile_test::TempDir out("qckpt_atomic");
  SECTION("a weight int8 cannot quantize (NaN) and one fp16 cannot hold") {
    const stile_test::TempDir bad("qckpt_nan");
    write_tiny(bad.path);
    // Poison one weight of layer 1's FFN: rewrite the file with it changed.
    std::vector<stile::TensorToWrite> ts = read_all(bad.path);
    float poison = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(find(ts, kFfn1).data.data() + 4 * 70, &poison, 4);
    stile::write_file_bytes((bad.path / "model.safetensors").string(), stile::safetensors_bytes(ts));
    const std::string e = stile_test::error_of([&] {
      stile::write_quantized_checkpoint(bad.path, out.path / "ckpt", stile::LinearFormat::kInt8,
                                        stile::Int8Scheme::kSymmetricPerChannel);
    });
    CHECK(e.find((bad.path / "model.safetensors").string()) != std::string::npos);
    CHECK(e.find(kFfn1) != std::string::npos);
    CHECK(out.count_files() == 0);

    poison = 1e6f;
    std::memcpy(find(ts, kFfn1).data.data() + 4 * 70, &poison, 4);
    stile::write_file_bytes((bad.path / "model.safetensors").string(), stile::safetensors_bytes(ts));
    const std::string e16 = stile_test::error_of(
        [&] { stile::write_quantized_checkpoint(bad.path, out.path / "ckpt", stile::LinearFormat::kF16, {}); });
    CHECK(e16.find(kFfn1) != std::string::npos);
    CHECK(e16.find("does not fit fp16") != std::string::npos);
    CHECK(out.count_files() == 0);
  }
  SECTION("an existing output is refused and left as it was") {
    fs::create_directories(out.path / "ckpt");
    const std::string e = stile_test::error_of(
        [&] { stile::write_quantized_checkpoint(tiny_model(), out.path / "ckpt", stile::LinearFormat::kInt8, {}); });
    CHECK(e.find("already exists") != std::string::npos);
    CHECK(fs::is_empty(out.path / "ckpt"));
    CHECK(out.count_files() == 1);
  }
  SECTION("a missing source names its file") {
    const std::string e = stile_test::error_of([&] {
      stile::write_quantized_checkpoint(out.path / "nowhere", out.path / "ckpt", stile::LinearFormat::kF16, {});
    });
    CHECK(e.find("nowhere") != std::string::npos);
    CHECK(out.count_files() == 0);
  }
}

TEST_CASE("default model: the int8 checkpoint's sentence embeddings against fp32's") {
  REQUIRE_MODEL();
  const stile_test::TempDir out("qckpt_default");
  const stile::QuantizedCheckpointReport r = stile::write_quantized_checkpoint(
      stile_test::model_dir(), out.path / "int8", stile::LinearFormat::kInt8, stile::Int8Scheme::kSymmetricPerChannel);
  CHECK(r.converted == 36);
  const std::vector<std::string> sentences{
      "a gripping, beautifully shot film", "the plot is thin and the jokes fall flat",
      "it's not the best movie of the year, but it has its moments",
      "an utterly forgettable exercise in style over substance that left the audience cold"};
  const auto want = stile::SentenceEncoder::load(stile_test::model_dir()).embed_batch(sentences);
  const auto got =
      stile::SentenceEncoder::load(out.path / "int8", stile::precision_preset("int8")).embed_batch(sentences);
  for (std::size_t i = 0; i < sentences.size(); ++i) {
    double dot = 0;
    for (std::size_t k = 0; k < got[i].size(); ++k) dot += double(got[i][k]) * want[i][k];
    INFO(sentences[i]);
    CHECK(dot > 0.98);  // both are L2-normalized
  }
}

// Writes the seeds of fuzz_quantized_checkpoint (run by hand; the outputs are committed):
//   test_quantized_checkpoint "[make-fuzz-seeds]"
// A BERT of the fuzz target's fixed config (hidden 8, 1 layer, 2 heads, FFN 16, 10 tokens, 8
// positions): its fp32 model.safetensors and the fp16, int8 per-channel and per-tensor conversions.
TEST_CASE("write the fuzz seeds of fuzz_quantized_checkpoint", "[.make-fuzz-seeds]") {
  const fs::path seeds = fs::path(__FILE__).parent_path() / "fuzz_seeds_qckpt";
  fs::create_directories(seeds);
  const stile_test::TempDir dir("qckpt_seed");
  stile_test::Rng rng{99};
  const stile_test::RandomBertScales scales{
      .word_embeddings = 0.5f, .embeddings = 0.1f, .matrices = 0.3f, .biases = 0.05f, .layer_norm = 0.05f};
  stile_test::write_random_bert(
      dir.path / "fp32", {8, 1, 2, 16, 10, 8}, scales, [&] { return rng.unit(); },
      [](const fs::path&, bool ok) { REQUIRE(ok); });
  fs::copy_file(dir.path / "fp32" / "model.safetensors", seeds / "fp32.safetensors",
                fs::copy_options::overwrite_existing);
  const std::vector<std::tuple<std::string, stile::LinearFormat, stile::Int8Scheme>> kinds{
      {"fp16", stile::LinearFormat::kF16, stile::Int8Scheme::kSymmetricPerChannel},
      {"int8_per_channel", stile::LinearFormat::kInt8, stile::Int8Scheme::kSymmetricPerChannel},
      {"int8_per_tensor", stile::LinearFormat::kInt8, stile::Int8Scheme::kAsymmetricPerTensor}};
  for (const auto& [name, format, scheme] : kinds) {
    stile::write_quantized_checkpoint(dir.path / "fp32", dir.path / name, format, scheme);
    const fs::path seed = seeds / (name + ".safetensors");
    fs::copy_file(dir.path / name / "model.safetensors", seed, fs::copy_options::overwrite_existing);
    CHECK(fs::file_size(seed) < 20 * 1024);
    stile::BertWeights::load(dir.path / name, stile::precision_preset("int8"));
  }
}
