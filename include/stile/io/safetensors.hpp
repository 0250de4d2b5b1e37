#pragma once
// Reader for safetensors files (the Hugging Face checkpoint format):
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data section]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
// being relative to the start of the data section; an optional "__metadata__" entry maps strings
// to strings. The file is memory-mapped, so opening a 90 MB checkpoint costs one header parse and
// tensors are read in place (bytes(), f32_span()) or converted on demand (to_f32()).
//
// Every byte of the file is outside input: open() validates the whole header (lengths, JSON,
// dtypes, shapes against byte sizes with overflow checks, offsets inside the data section, no two
// tensors overlapping) before any tensor is handed out, and every failure is a stile::Error whose
// message names the file and what is wrong with it.
//
// All safetensors dtypes are accepted when parsing, because real checkpoints mix them (BERT
// checkpoints carry an I64 "embeddings.position_ids" buffer next to F32 weights); conversion to
// float (to_f32) supports F32, F16 and BF16 and names the tensor and dtype for anything else.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/strict_json.hpp"

namespace stile {

// Element types of the safetensors format (the names are the format's own spelling).
enum class DType : std::uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

inline constexpr std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::BOOL:
    case DType::U8:
    case DType::I8:
    case DType::F8_E5M2:
    case DType::F8_E4M3: return 1;
    case DType::I16:
    case DType::U16:
    case DType::F16:
    case DType::BF16: return 2;
    case DType::I32:
    case DType::U32:
    case DType::F32: return 4;
    case DType::I64:
    case DType::U64:
    case DType::F64: return 8;
  }
  return 0;
}

inline constexpr std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::BOOL: return "BOOL";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::F8_E5M2: return "F8_E5M2";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::I16: return "I16";
    case DType::U16: return "U16";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::U32: return "U32";
    case DType::F32: return "F32";
    case DType::I64: return "I64";
    case DType::U64: return "U64";
    case DType::F64: return "F64";
  }
  return "?";
}

inline std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (auto d = static_cast<std::uint8_t>(DType::BOOL); d <= static_cast<std::uint8_t>(DType::F64); ++d) {
    if (dtype_name(static_cast<DType>(d)) == name) return static_cast<DType>(d);
  }
  return std::nullopt;
}

// The dtypes to_f32() converts: the float formats checkpoints store weights in.
inline constexpr bool dtype_converts_to_f32(DType dtype) noexcept {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16;
}

// IEEE 754 binary16 to float; exact for every input (float has more range and precision).
inline float f16_bits_to_f32(std::uint16_t half) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float; the sign bit is then set by hand.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
  }
  if (exponent == 0x1f) {  // infinity or NaN (payload kept)
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// bfloat16 is the upper half of a float.
inline float bf16_bits_to_f32(std::uint16_t bf16) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bf16) << 16);
}

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;  // empty for a scalar
  std::size_t begin = 0;            // byte range [begin, end) within the data section
  std::size_t end = 0;

  // Safe for the tensors a SafetensorsFile hands out: their shapes were overflow-checked.
  std::size_t num_elements() const noexcept {
    std::size_t n = 1;
    for (const std::int64_t d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
  std::size_t num_bytes() const noexcept { return end - begin; }
};

// What a validated header says: where the data section starts in the file, the tensors (sorted
// by name) and the free-form metadata.
struct SafetensorsHeader {
  std::size_t data_offset = 0;
  std::size_t data_size = 0;
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

// Headers larger than this are refused before parsing, so a corrupt length cannot make us parse
// (and allocate for) gigabytes of JSON. The reference implementation uses the same limit; real
// headers are tens of kilobytes.
inline constexpr std::size_t kMaxSafetensorsHeaderBytes = 100'000'000;

namespace safetensors_detail {

// Real headers nest three levels deep (root, tensor, shape); anything much deeper is not a
// safetensors header and is refused before it costs memory.
inline constexpr int kMaxJsonDepth = 8;

template <class... Parts>
[[noreturn]] void fail(std::string_view file, const Parts&... parts) {
  fail_in_file(file, parts...);
}

// A name for an error message, quoted and cut short (names come from the file).
inline std::string quote_name(std::string_view s) {
  constexpr std::size_t kMaxChars = 200;
  if (s.size() > kMaxChars) return concat("'", s.substr(0, kMaxChars), "...'");
  return concat("'", s, "'");
}

inline std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "]";
  return s;
}

inline std::string range_to_string(std::size_t begin, std::size_t end) { return concat("[", begin, ", ", end, "]"); }

inline std::uint64_t read_u64_le(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

// Reads a non-negative JSON integer; nullopt for anything else (negative, fractional, a string).
inline std::optional<std::uint64_t> as_count(const nlohmann::json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<std::uint64_t>();
}

inline TensorInfo parse_tensor_entry(const std::string& name, const nlohmann::json& entry, std::size_t data_size,
                                     const std::string& file) {
  const std::string what = concat("tensor ", quote_name(name));
  if (!entry.is_object()) fail(file, what, ": its header entry is not a JSON object");

  TensorInfo info;
  info.name = name;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    fail(file, what, ": missing dtype (a string such as \"F32\")");
  }
  const auto& dtype_text = dtype_it->get_ref<const std::string&>();
  const std::optional<DType> dtype = parse_dtype(dtype_text);
  if (!dtype) fail(file, what, " has dtype ", quote_name(dtype_text), ", which is not a safetensors dtype");
  info.dtype = *dtype;

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    fail(file, what, ": missing shape (an array of non-negative integers)");
  }
  // Element count, overflow-checked: every intermediate product must stay representable.
  std::uint64_t elements = 1;
  bool overflow = false;
  for (const auto& dim_json : *shape_it) {
    const std::optional<std::uint64_t> dim = as_count(dim_json);
    if (!dim || *dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail(file, what, ": shape ", json_excerpt(*shape_it),
           " has a dimension that is not a non-negative integer: ", json_excerpt(dim_json));
    }
    info.shape.push_back(static_cast<std::int64_t>(*dim));
    if (__builtin_mul_overflow(elements, *dim, &elements)) overflow = true;
  }
  // A zero dimension makes the count 0 even if an earlier product overflowed, but such a shape is
  // still nonsense; refuse it the same way.
  std::uint64_t expected_bytes = 0;
  if (overflow || __builtin_mul_overflow(elements, std::uint64_t{dtype_size(info.dtype)}, &expected_bytes)) {
    fail(file, what, ": shape ", shape_to_string(info.shape), " has too many elements (size overflow)");
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    fail(file, what, ": missing data_offsets (an array [begin, end])");
  }
  const std::optional<std::uint64_t> begin = as_count((*offsets_it)[0]);
  const std::optional<std::uint64_t> end = as_count((*offsets_it)[1]);
  if (!begin || !end) {
    fail(file, what, ": data_offsets ", json_excerpt(*offsets_it), " are not non-negative integers");
  }
  if (*begin > *end) {
    fail(file, what, ": data_offsets ", json_excerpt(*offsets_it), " end before they begin");
  }
  if (*end > data_size) {
    fail(file, what, ": data_offsets ", json_excerpt(*offsets_it), " are out of range: the data section is ", data_size,
         " bytes (truncated file?)");
  }
  // From here on begin and end fit in size_t (they are at most data_size).
  info.begin = static_cast<std::size_t>(*begin);
  info.end = static_cast<std::size_t>(*end);
  if (expected_bytes != *end - *begin) {
    fail(file, what, ": size mismatch: shape ", shape_to_string(info.shape), " of ", dtype_name(info.dtype), " needs ",
         expected_bytes, " bytes but data_offsets ", json_excerpt(*offsets_it), " hold ", *end - *begin);
  }
  return info;
}

inline std::map<std::string, std::string> parse_metadata(const nlohmann::json& entry, const std::string& file) {
  if (!entry.is_object()) fail(file, "__metadata__ is not a JSON object of strings");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      fail(file, "__metadata__ entry ", quote_name(key), " is not a string");
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// Tensors may leave gaps between them but must not share bytes: a write through one would
// silently change the other, and it is always a sign of a corrupt or hostile header.
inline void check_no_overlap(const std::vector<TensorInfo>& tensors, const std::string& file) {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const TensorInfo& t : tensors) {
    if (t.begin != t.end) by_offset.push_back(&t);  // an empty tensor occupies no bytes
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  const TensorInfo* furthest = nullptr;  // the tensor reaching furthest so far
  for (const TensorInfo* t : by_offset) {
    if (furthest != nullptr && t->begin < furthest->end) {
      fail(file, "tensors ", quote_name(furthest->name), " ", range_to_string(furthest->begin, furthest->end), " and ",
           quote_name(t->name), " ", range_to_string(t->begin, t->end), " overlap");
    }
    if (furthest == nullptr || t->end > furthest->end) furthest = t;
  }
}

}  // namespace safetensors_detail

// Validates a whole safetensors file given as bytes (the header and the data section sizes; the
// tensor bytes themselves are not read). display_name is what error messages call the file.
inline SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file_bytes,
                                                  const std::string& display_name) {
  using namespace safetensors_detail;
  const std::size_t file_size = file_bytes.size();
  if (file_size < 8) {
    fail(display_name, "truncated: the file is ", file_size, " bytes, too short for the 8-byte header length");
  }
  const std::uint64_t header_len = read_u64_le(file_bytes.data());
  if (header_len > kMaxSafetensorsHeaderBytes) {
    fail(display_name, "header length ", header_len, " exceeds the limit of ", kMaxSafetensorsHeaderBytes,
         " bytes (corrupt file?)");
  }
  if (header_len > file_size - 8) {
    fail(display_name, "header length ", header_len, " runs past the end of the file (", file_size,
         " bytes): truncated or corrupt");
  }

  SafetensorsHeader header;
  header.data_offset = 8 + static_cast<std::size_t>(header_len);
  header.data_size = file_size - header.data_offset;

  const std::string_view text(reinterpret_cast<const char*>(file_bytes.data() + 8),
                              static_cast<std::size_t>(header_len));
  const nlohmann::json root = parse_strict_json(text, kMaxJsonDepth, display_name, "the header");
  if (!root.is_object()) {
    fail(display_name, "header JSON is not an object (it is ", root.type_name(), ")");
  }

  header.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      header.metadata = parse_metadata(entry, display_name);
    } else {
      header.tensors.push_back(parse_tensor_entry(name, entry, header.data_size, display_name));
    }
  }
  // nlohmann's object is a sorted map, so the tensors already come sorted by name; sort anyway
  // so lookups do not depend on that detail.
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  check_no_overlap(header.tensors, display_name);
  return header;
}

class SafetensorsFile {
 public:
  // Maps the file read-only and validates its header. The mapping lives as long as the object.
  static SafetensorsFile open(const std::string& path) {
    using safetensors_detail::fail;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, "cannot open: ", std::system_category().message(errno));
    struct FdCloser {
      int fd;
      ~FdCloser() { ::close(fd); }
    } closer{fd};

    struct stat st {};
    if (::fstat(fd, &st) != 0) fail(path, "cannot stat: ", std::system_category().message(errno));
    if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file");
    if (static_cast<std::uint64_t>(st.st_size) > std::numeric_limits<std::size_t>::max()) {
      fail(path, "is too large to map on this machine");
    }
    const auto size = static_cast<std::size_t>(st.st_size);

    SafetensorsFile file;
    file.path_ = path;
    if (size != 0) {  // mmap refuses length 0; the header check below reports the empty file
      void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (map == MAP_FAILED) fail(path, "cannot mmap: ", std::system_category().message(errno));
      file.mapping_ = map;
      file.mapping_size_ = size;
      file.bytes_ = static_cast<const std::byte*>(map);
    }
    file.size_ = size;
    file.header_ = parse_safetensors_header(std::span(file.bytes_, file.size_), path);
    return file;
  }

  // The same reader over bytes already in memory (a fuzzer's input, an embedded test file);
  // display_name stands in for the path in error messages.
  static SafetensorsFile from_memory(std::vector<std::byte> bytes, std::string display_name) {
    SafetensorsFile file;
    file.path_ = std::move(display_name);
    file.owned_ = std::move(bytes);
    file.bytes_ = file.owned_.data();
    file.size_ = file.owned_.size();
    file.header_ = parse_safetensors_header(std::span(file.bytes_, file.size_), file.path_);
    return file;
  }

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  SafetensorsFile(SafetensorsFile&& other) noexcept { take(other); }
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept {
    if (this != &other) {
      unmap();
      take(other);
    }
    return *this;
  }
  ~SafetensorsFile() { unmap(); }

  const std::string& path() const noexcept { return path_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return header_.metadata; }
  // All tensors, sorted by name.
  const std::vector<TensorInfo>& tensors() const noexcept { return header_.tensors; }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(header_.tensors.size());
    for (const TensorInfo& t : header_.tensors) out.push_back(t.name);
    return out;
  }

  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const noexcept {
    const auto it =
        std::lower_bound(header_.tensors.begin(), header_.tensors.end(), name,
                         [](const TensorInfo& t, std::string_view n) { return std::string_view(t.name) < n; });
    return it != header_.tensors.end() && it->name == name ? &*it : nullptr;
  }

  const TensorInfo& tensor(std::string_view name) const {
    const TensorInfo* t = find(name);
    if (t == nullptr) {
      safetensors_detail::fail(path_, "has no tensor ", safetensors_detail::quote_name(name));
    }
    return *t;
  }

  // The tensor's raw little-endian bytes, in place (no copy).
  std::span<const std::byte> bytes(const TensorInfo& t) const {
    // The range was validated for this file's tensors; re-check so that a TensorInfo from another
    // file (or built by hand) cannot read outside the mapping.
    if (t.begin > t.end || t.end > header_.data_size) {
      safetensors_detail::fail(path_, "tensor ", safetensors_detail::quote_name(t.name), " range ",
                               safetensors_detail::range_to_string(t.begin, t.end),
                               " is outside this file's data section");
    }
    return {bytes_ + header_.data_offset + t.begin, t.end - t.begin};
  }
  std::span<const std::byte> bytes(std::string_view name) const { return bytes(tensor(name)); }

  // The tensor's values as floats, converted from F32, F16 or BF16.
  std::vector<float> to_f32(const TensorInfo& t) const {
    if (!dtype_converts_to_f32(t.dtype)) {
      safetensors_detail::fail(path_, "tensor ", safetensors_detail::quote_name(t.name), " has dtype ",
                               dtype_name(t.dtype), ", which cannot be converted to float (only F32, F16, BF16)");
    }
    const std::span<const std::byte> raw = bytes(t);
    const std::size_t count = raw.size() / dtype_size(t.dtype);
    std::vector<float> out(count);
    const auto* b = reinterpret_cast<const unsigned char*>(raw.data());
    switch (t.dtype) {
      case DType::F32:
        if constexpr (std::endian::native == std::endian::little) {
          if (count != 0) std::memcpy(out.data(), b, count * sizeof(float));
        } else {
          for (std::size_t i = 0; i < count; ++i) {
            const std::uint32_t bits = std::uint32_t{b[4 * i]} | std::uint32_t{b[4 * i + 1]} << 8 |
                                       std::uint32_t{b[4 * i + 2]} << 16 | std::uint32_t{b[4 * i + 3]} << 24;
            out[i] = std::bit_cast<float>(bits);
          }
        }
        break;
      case DType::F16:
        for (std::size_t i = 0; i < count; ++i) out[i] = f16_bits_to_f32(load_u16_le(b + 2 * i));
        break;
      case DType::BF16:
        for (std::size_t i = 0; i < count; ++i) out[i] = bf16_bits_to_f32(load_u16_le(b + 2 * i));
        break;
      default: break;  // excluded above
    }
    return out;
  }
  std::vector<float> to_f32(std::string_view name) const { return to_f32(tensor(name)); }

  // An F32 tensor's values in place, without a copy (the big weight matrices). Requires the
  // dtype F32, a little-endian machine and 4-byte alignment of the data in the file (true for
  // files written by the reference implementation, which aligns the data section).
  std::span<const float> f32_span(std::string_view name) const {
    const TensorInfo& t = tensor(name);
    const std::string what = concat("tensor ", safetensors_detail::quote_name(t.name));
    if (t.dtype != DType::F32) {
      safetensors_detail::fail(path_, what, " has dtype ", dtype_name(t.dtype),
                               ", not F32; use to_f32() to convert it");
    }
    if constexpr (std::endian::native != std::endian::little) {
      safetensors_detail::fail(path_, what, ": in-place float access needs a little-endian machine");
    }
    const std::span<const std::byte> raw = bytes(t);
    if (reinterpret_cast<std::uintptr_t>(raw.data()) % alignof(float) != 0) {
      safetensors_detail::fail(path_, what, " is not 4-byte aligned in the file; use to_f32()");
    }
    return {reinterpret_cast<const float*>(raw.data()), raw.size() / sizeof(float)};
  }

 private:
  SafetensorsFile() = default;

  static std::uint16_t load_u16_le(const unsigned char* p) noexcept {
    return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
  }

  void take(SafetensorsFile& other) noexcept {
    path_ = std::move(other.path_);
    header_ = std::move(other.header_);
    // A moved vector keeps its heap buffer, so bytes_ stays valid for in-memory files.
    owned_ = std::move(other.owned_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    bytes_ = std::exchange(other.bytes_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }

  void unmap() noexcept {
    if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
    mapping_ = nullptr;
    mapping_size_ = 0;
    bytes_ = nullptr;
    size_ = 0;
  }

  std::string path_;
  SafetensorsHeader header_;
  std::vector<std::byte> owned_;  // the bytes of a from_memory() file
  void* mapping_ = nullptr;       // the mmap of an open() file
  std::size_t mapping_size_ = 0;
  const std::byte* bytes_ = nullptr;  // the whole file, from either source
  std::size_t size_ = 0;
};

}  // namespace stile
