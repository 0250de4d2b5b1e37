// The safetensors reader: values round-trip for every float dtype it converts, and every kind of
// damaged file is refused with a stile::Error naming the file and the problem.
#include "stile/io/safetensors.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "safetensors_test_util.hpp"
#include "support/error_of.hpp"

using Catch::Contains;
using stile::DType;
using stile::SafetensorsFile;
using stile_test::append_le;
using stile_test::error_of;
using stile_test::make_raw_safetensors;
using stile_test::make_safetensors;
using stile_test::TempFile;

static_assert(!std::is_copy_constructible_v<SafetensorsFile> && !std::is_copy_assignable_v<SafetensorsFile>,
              "SafetensorsFile owns a mapping: move-only");
static_assert(std::is_nothrow_move_constructible_v<SafetensorsFile> &&
              std::is_nothrow_move_assignable_v<SafetensorsFile>);

namespace {

// The same float in all three formats, written as bit patterns, with the value decoded by hand.
struct F16Case {
  std::uint16_t bits;
  float value;
};
const std::vector<F16Case> kF16Cases = {
    {0x3C00, 1.0f},     {0xC000, -2.0f},           {0x3800, 0.5f},
    {0x7BFF, 65504.0f}, {0x0001, 0x1p-24f},        {0x03FF, 0x1.ff8p-15f},
    {0x8000, -0.0f},    {0x3555, 0.333251953125f}, {0x7C00, std::numeric_limits<float>::infinity()},
};
struct Bf16Case {
  std::uint16_t bits;
  float value;
};
const std::vector<Bf16Case> kBf16Cases = {
    {0x3F80, 1.0f}, {0xC060, -3.5f}, {0x3E20, 0.15625f}, {0x7F7F, 0x1.fep127f}, {0x0001, 0x1p-133f},
};
const std::vector<float> kF32Values = {0.0f, 1.5f, -2.25f, 3.0e-38f, 1.0e30f, -7.0f};

// A file with one tensor of each float dtype, an I64 tensor, a scalar, an empty tensor and
// metadata; tensor c (BF16) comes first in the data section although it sorts last.
std::vector<std::byte> mixed_file() {
  std::vector<std::byte> data;
  for (const Bf16Case& c : kBf16Cases) append_le(data, c.bits);  // [0, 10)
  data.resize(16);                                               // a gap is allowed
  for (const float v : kF32Values) append_le(data, v);           // [16, 40)
  for (const F16Case& c : kF16Cases) append_le(data, c.bits);    // [40, 58)
  data.resize(64);
  for (std::int64_t i = 0; i < 3; ++i) append_le(data, i);  // [64, 88)
  append_le(data, 42.0f);                                   // [88, 92)
  const std::string header = R"({
    "__metadata__": {"format": "pt", "note": "test"},
    "a_f32": {"dtype": "F32", "shape": [2, 3], "data_offsets": [16, 40]},
    "b_f16": {"dtype": "F16", "shape": [9], "data_offsets": [40, 58]},
    "c_bf16": {"dtype": "BF16", "shape": [5, 1], "data_offsets": [0, 10]},
    "d_i64": {"dtype": "I64", "shape": [1, 3], "data_offsets": [64, 88]},
    "e_scalar": {"dtype": "F32", "shape": [], "data_offsets": [88, 92]},
    "f_empty": {"dtype": "F32", "shape": [0, 384], "data_offsets": [92, 92]}
  })";
  return make_safetensors(header, data);
}

void check_mixed(const SafetensorsFile& file) {
  CHECK(file.names() == std::vector<std::string>{"a_f32", "b_f16", "c_bf16", "d_i64", "e_scalar", "f_empty"});
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.metadata().size() == 2);

  const stile::TensorInfo& a = file.tensor("a_f32");
  CHECK(a.dtype == DType::F32);
  CHECK(a.shape == std::vector<std::int64_t>{2, 3});
  CHECK(a.num_elements() == 6);
  CHECK(file.bytes(a).size() == 24);
  CHECK(file.to_f32("a_f32") == kF32Values);
  const std::span<const float> in_place = file.f32_span("a_f32");
  CHECK(std::vector<float>(in_place.begin(), in_place.end()) == kF32Values);

  const std::vector<float> f16 = file.to_f32("b_f16");
  REQUIRE(f16.size() == kF16Cases.size());
  for (std::size_t i = 0; i < f16.size(); ++i) {
    INFO("F16 bits " << kF16Cases[i].bits);
    CHECK(f16[i] == kF16Cases[i].value);
    CHECK(std::signbit(f16[i]) == std::signbit(kF16Cases[i].value));
  }

  const stile::TensorInfo& c = file.tensor("c_bf16");
  CHECK(c.dtype == DType::BF16);
  CHECK(c.shape == std::vector<std::int64_t>{5, 1});
  const std::vector<float> bf16 = file.to_f32(c);
  REQUIRE(bf16.size() == kBf16Cases.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) CHECK(bf16[i] == kBf16Cases[i].value);

  // Integer tensors are readable as bytes, but not converted to float.
  const stile::TensorInfo& d = file.tensor("d_i64");
  CHECK(d.dtype == DType::I64);
  REQUIRE(file.bytes(d).size() == 24);
  CHECK(static_cast<int>(file.bytes(d)[8]) == 1);
  const std::string i64_error = error_of([&] { (void)file.to_f32("d_i64"); });
  CHECK_THAT(i64_error, Contains(file.path()) && Contains("d_i64") && Contains("I64"));

  CHECK(file.to_f32("e_scalar") == std::vector<float>{42.0f});
  CHECK(file.tensor("e_scalar").shape.empty());
  CHECK(file.to_f32("f_empty").empty());
  CHECK(file.tensor("f_empty").num_elements() == 0);

  CHECK(file.find("missing") == nullptr);
  CHECK(file.find("a_f3") == nullptr);
  CHECK(file.find("a_f32") == &a);
  CHECK_THAT(error_of([&] { (void)file.tensor("missing"); }), Contains(file.path()) && Contains("missing"));
  CHECK_THAT(error_of([&] { (void)file.f32_span("b_f16"); }),
             Contains(file.path()) && Contains("b_f16") && Contains("F16"));
}

}  // namespace

TEST_CASE("safetensors: F32, F16 and BF16 values round-trip from a file", "[io][safetensors]") {
  const TempFile tmp("mixed", mixed_file());
  const SafetensorsFile file = SafetensorsFile::open(tmp.path());
  CHECK(file.path() == tmp.path());
  check_mixed(file);
}

TEST_CASE("safetensors: the in-memory reader sees the same file", "[io][safetensors]") {
  const SafetensorsFile file = SafetensorsFile::from_memory(mixed_file(), "in-memory.safetensors");
  CHECK(file.path() == "in-memory.safetensors");
  check_mixed(file);
}

TEST_CASE("safetensors: a moved file keeps its mapping and tensors", "[io][safetensors]") {
  const TempFile tmp("moved", mixed_file());
  SafetensorsFile first = SafetensorsFile::open(tmp.path());
  SafetensorsFile second = std::move(first);
  check_mixed(second);
  SafetensorsFile third = SafetensorsFile::from_memory(mixed_file(), "other");
  third = std::move(second);  // unmaps nothing it still needs, frees the in-memory bytes
  check_mixed(third);
}

TEST_CASE("safetensors: a header with no tensors is a valid, empty file", "[io][safetensors]") {
  const SafetensorsFile file = SafetensorsFile::from_memory(make_safetensors("{}", {}), "empty-header");
  CHECK(file.tensors().empty());
  CHECK(file.names().empty());
}

TEST_CASE("f16_bits_to_f32 is exact for all 65536 inputs", "[io][safetensors]") {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    const float got = stile::f16_bits_to_f32(half);
    const int exponent = (bits >> 10) & 0x1F;
    const int mantissa = bits & 0x3FF;
    const bool negative = (bits & 0x8000) != 0;
    // The definition of binary16, evaluated in double.
    double expected;
    if (exponent == 0x1F) {
      expected = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
    } else if (exponent == 0) {
      expected = std::ldexp(mantissa, -24);
    } else {
      expected = std::ldexp(1024 + mantissa, exponent - 25);
    }
    if (negative) expected = -expected;
    if (std::isnan(expected)) {
      if (!std::isnan(got)) FAIL("F16 bits " << bits << " are NaN but decoded to " << got);
    } else if (static_cast<double>(got) != expected || std::signbit(got) != negative) {
      FAIL("F16 bits " << bits << " decoded to " << got << ", expected " << expected);
    }
  }
  SUCCEED("all F16 bit patterns decode exactly");
}

TEST_CASE("bf16_bits_to_f32 keeps the upper half of the float", "[io][safetensors]") {
  for (const float f : {1.0f, -3.5f, 0.15625f, 0x1.fep127f, -0.0f}) {
    const auto upper = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16);
    CHECK(stile::bf16_bits_to_f32(upper) == f);
  }
  CHECK(std::isnan(stile::bf16_bits_to_f32(0x7FC0)));
}

TEST_CASE("safetensors: damaged files are refused with the file and the problem named", "[io][safetensors]") {
  std::vector<std::byte> eight_floats;
  for (int i = 0; i < 8; ++i) append_le(eight_floats, static_cast<float>(i));
  const auto one_tensor = [](const std::string& entry) { return "{\"t\": " + entry + "}"; };

  struct BadCase {
    const char* label;
    std::vector<std::byte> bytes;
    std::vector<std::string> words;  // each must appear in the message
  };
  const std::string good_header = one_tensor(R"({"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]})");
  std::vector<std::byte> whole = make_safetensors(good_header, eight_floats);
  std::vector<std::byte> cut = whole;
  cut.resize(cut.size() - 4);

  const std::vector<BadCase> cases = {
      {"empty", {}, {"truncated"}},
      {"five-bytes", std::vector<std::byte>(5), {"truncated", "5 bytes"}},
      {"data-cut-short", cut, {"out of range", "truncated"}},
      {"oversized-header-length",
       make_raw_safetensors(std::uint64_t{1} << 40, "{}", {}),
       {"header length", "exceeds the limit"}},
      {"huge-header-length", make_raw_safetensors(~std::uint64_t{0}, "{}", {}), {"header length", "exceeds"}},
      {"header-past-eof", make_raw_safetensors(1000, "{}", {}), {"header length 1000", "past the end"}},
      {"invalid-json", make_safetensors(R"({"t": {"dtype": "F32", )", {}), {"not valid JSON"}},
      {"json-not-object", make_safetensors("[1, 2, 3]", {}), {"not an object", "array"}},
      {"duplicate-tensor",
       make_safetensors(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                            "t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                        eight_floats),
       {"duplicate", "'t'"}},
      {"deep-nesting", make_safetensors("[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]", {}), {"nests deeper"}},
      {"unknown-dtype",
       make_safetensors(one_tensor(R"({"dtype": "Q4", "shape": [8], "data_offsets": [0, 4]})"), eight_floats),
       {"'t'", "dtype 'Q4'", "not a safetensors dtype"}},
      {"dtype-not-string",
       make_safetensors(one_tensor(R"({"dtype": 32, "shape": [8], "data_offsets": [0, 32]})"), eight_floats),
       {"'t'", "dtype"}},
      {"entry-not-object", make_safetensors(one_tensor("[1, 2]"), eight_floats), {"'t'", "not a JSON object"}},
      {"size-mismatch",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 32]})"), eight_floats),
       {"'t'", "size mismatch", "[3, 4]", "48 bytes"}},
      {"i64-size-mismatch",
       make_safetensors(one_tensor(R"({"dtype": "I64", "shape": [8], "data_offsets": [0, 32]})"), eight_floats),
       {"'t'", "size mismatch", "I64"}},
      {"negative-dimension",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [-2, 4], "data_offsets": [0, 32]})"), eight_floats),
       {"'t'", "non-negative", "-2"}},
      {"fractional-dimension",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [2.0, 4], "data_offsets": [0, 32]})"), eight_floats),
       {"'t'", "non-negative integer"}},
      {"missing-shape",
       make_safetensors(one_tensor(R"({"dtype": "F32", "data_offsets": [0, 32]})"), eight_floats),
       {"'t'", "missing shape"}},
      {"element-count-overflow",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [4294967296, 4294967296, 0], "data_offsets": [0, 0]})"),
                        {}),
       {"'t'", "overflow"}},
      {"byte-count-overflow",
       make_safetensors(one_tensor(R"({"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 0]})"), {}),
       {"'t'", "overflow"}},
      {"offsets-out-of-range",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [8], "data_offsets": [4, 36]})"), eight_floats),
       {"'t'", "out of range", "32 bytes"}},
      {"offsets-far-out-of-range",
       make_safetensors(
           one_tensor(R"({"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551614, 18446744073709551615]})"),
           eight_floats),
       {"'t'", "out of range"}},
      {"offsets-reversed",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [0], "data_offsets": [8, 4]})"), eight_floats),
       {"'t'", "end before they begin"}},
      {"offsets-negative",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})"), eight_floats),
       {"'t'", "data_offsets", "non-negative"}},
      {"offsets-missing",
       make_safetensors(one_tensor(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"), eight_floats),
       {"'t'", "missing data_offsets"}},
      {"overlapping-tensors",
       make_safetensors(R"({"first": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                            "second": {"dtype": "F32", "shape": [4], "data_offsets": [12, 28]}})",
                        eight_floats),
       {"'first'", "'second'", "overlap"}},
      {"tensor-inside-another",
       make_safetensors(R"({"big": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
                            "small": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
                            "tail": {"dtype": "F32", "shape": [1], "data_offsets": [28, 32]}})",
                        eight_floats),
       {"'big'", "overlap"}},
      {"metadata-not-object", make_safetensors(R"({"__metadata__": "pt"})", {}), {"__metadata__", "not a JSON object"}},
      {"metadata-not-string",
       make_safetensors(R"({"__metadata__": {"format": 1}})", {}),
       {"__metadata__", "'format'", "not a string"}},
  };

  for (const BadCase& c : cases) {
    SECTION(c.label) {
      const TempFile tmp(c.label, c.bytes);
      const std::string message = error_of([&] { (void)SafetensorsFile::open(tmp.path()); });
      INFO(message);
      CHECK_THAT(message, Contains(tmp.path()));
      for (const std::string& word : c.words) CHECK_THAT(message, Contains(word));
      // The in-memory reader gives the same verdict under the name it was given.
      const std::string from_memory = error_of([&] { (void)SafetensorsFile::from_memory(c.bytes, "buffer.st"); });
      CHECK_THAT(from_memory, Contains("buffer.st"));
      for (const std::string& word : c.words) CHECK_THAT(from_memory, Contains(word));
    }
  }
}

TEST_CASE("safetensors: a tensor with no bytes overlaps nothing", "[io][safetensors]") {
  std::vector<std::byte> data;
  for (int i = 0; i < 4; ++i) append_le(data, static_cast<float>(i));
  const SafetensorsFile file =
      SafetensorsFile::from_memory(make_safetensors(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                           "none": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}})",
                                                    data),
                                   "empty-inside");
  CHECK(file.to_f32("w") == std::vector<float>{0.0f, 1.0f, 2.0f, 3.0f});
  CHECK(file.to_f32("none").empty());
}

TEST_CASE("safetensors: missing paths and directories are refused by name", "[io][safetensors]") {
  const std::string missing =
      (std::filesystem::temp_directory_path() / "stile_test_io_no_such_file.safetensors").string();
  CHECK_THAT(error_of([&] { (void)SafetensorsFile::open(missing); }), Contains(missing) && Contains("cannot open"));
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THAT(error_of([&] { (void)SafetensorsFile::open(dir); }), Contains(dir) && Contains("not a regular file"));
}

TEST_CASE("safetensors: bytes() refuses a range from another file", "[io][safetensors]") {
  const SafetensorsFile file = SafetensorsFile::from_memory(make_safetensors("{}", {}), "small");
  stile::TensorInfo foreign;
  foreign.name = "foreign";
  foreign.end = 4096;
  CHECK_THAT(error_of([&] { (void)file.bytes(foreign); }),
             Contains("small") && Contains("'foreign'") && Contains("outside"));
}

TEST_CASE("safetensors: the fuzzer's seed files are valid", "[io][safetensors]") {
  // The seeds should reach past validation; a seed that is refused would waste the fuzzer's time.
  const std::filesystem::path seeds = std::filesystem::path(STILE_TEST_DATA_DIR).parent_path() / "fuzz_seeds";
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(seeds)) {
    INFO(entry.path().string());
    const SafetensorsFile file = SafetensorsFile::open(entry.path().string());
    for (const stile::TensorInfo& t : file.tensors()) {
      if (stile::dtype_converts_to_f32(t.dtype)) CHECK(file.to_f32(t).size() == t.num_elements());
    }
    ++count;
  }
  CHECK(count >= 4);
}
