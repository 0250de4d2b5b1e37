#pragma once
// Reader of the model goldens in tests/model/data (goldens.idx + goldens.bin, written by
// scripts/make_model_goldens.py; format in data/README.md). It checks what it reads (the bin's
// size and CRC-32, every array inside the bin with the size its dtype and shape say), so a
// damaged golden fails loudly instead of comparing against garbage.
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stile_test {

// zlib's CRC-32 (IEEE, reflected polynomial 0xEDB88320), as Python's zlib.crc32.
inline std::uint32_t crc32(const std::vector<char>& bytes) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const char b : bytes) crc = table[(crc ^ static_cast<std::uint8_t>(b)) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

struct GoldenCase {
  std::size_t id = 0;
  std::string category;  // "sst2" or the hard case's name
  std::size_t n_tokens = 0;
  bool truncated = false;
  bool has_hidden = false;  // the "hidden" array is stored (all cases now)
};

class ModelGoldens {
 public:
  static ModelGoldens load(const std::filesystem::path& dir) {
    static_assert(std::endian::native == std::endian::little, "goldens.bin is little-endian");
    ModelGoldens g;
    const std::filesystem::path idx_file = dir / "goldens.idx";
    std::ifstream idx(idx_file, std::ios::binary);
    if (!idx) throw std::runtime_error("cannot open " + idx_file.string());
    std::string bin_name;
    std::size_t bin_size = 0;
    std::string crc_hex;
    std::size_t declared_cases = 0;
    bool ended = false;
    bool first = true;
    for (std::string line; std::getline(idx, line);) {
      if (line.empty() || line.starts_with('#')) continue;
      std::istringstream in(line);
      std::string tag;
      in >> tag;
      if (first) {
        int version = 0;
        in >> version;
        if (tag != "stile-goldens" || version != 1) throw g.bad(idx_file, "not a stile-goldens 1 index");
        first = false;
        continue;
      }
      if (tag == "model") {  // model <name> then key value pairs
        std::string model_name;
        in >> model_name;
        for (std::string key, value; in >> key >> value;) {
          if (key == "hidden") g.hidden_ = std::stoul(value);
          if (key == "max_seq_length") g.max_seq_length_ = std::stoul(value);
        }
        in.clear();  // the pairs run to the end of the line
      } else if (tag == "data") {
        std::string crc_word;
        in >> bin_name >> bin_size >> crc_word >> crc_hex;
        if (crc_word != "crc32") throw g.bad(idx_file, "data record without crc32");
      } else if (tag == "noise") {
        std::string name;
        double value = 0;
        in >> name >> value;
        g.noise_[name] = value;
      } else if (tag == "cases") {
        in >> declared_cases;
      } else if (tag == "case") {
        GoldenCase c;
        int truncated = 0;
        int has_hidden = 0;
        in >> c.id >> c.category >> c.n_tokens >> truncated >> has_hidden;
        c.truncated = truncated != 0;
        c.has_hidden = has_hidden != 0;
        if (c.id != g.cases_.size()) throw g.bad(idx_file, "case ids are not 0..N-1 in order");
        g.cases_.push_back(std::move(c));
      } else if (tag == "batch") {
        std::size_t rows = 0;
        in >> rows >> g.batch_padded_length_;
        g.batch_rows_.resize(rows);
        for (std::size_t& id : g.batch_rows_) in >> id;
      } else if (tag == "array") {
        std::string key, name;
        Array a;
        std::size_t ndim = 0;
        in >> key >> name >> a.dtype >> a.offset >> ndim;
        a.dims.resize(ndim);
        for (std::size_t& d : a.dims) in >> d;
        g.arrays_[{key, name}] = a;
      } else if (tag == "end") {
        ended = true;
      }
      if (in.fail()) throw g.bad(idx_file, "cannot parse the line \"" + line + "\"");
    }
    if (!ended) throw g.bad(idx_file, "has no \"end\" record (truncated?)");
    if (g.cases_.size() != declared_cases) throw g.bad(idx_file, "case count differs from the cases record");
    if (g.hidden_ == 0 || bin_name.empty()) throw g.bad(idx_file, "has no model or data record");

    const std::filesystem::path bin_file = dir / bin_name;
    std::ifstream bin(bin_file, std::ios::binary);
    if (!bin) throw std::runtime_error("cannot open " + bin_file.string());
    g.bin_.assign(std::istreambuf_iterator<char>(bin), std::istreambuf_iterator<char>());
    if (g.bin_.size() != bin_size) {
      throw g.bad(bin_file,
                  "has " + std::to_string(g.bin_.size()) + " bytes, the index says " + std::to_string(bin_size));
    }
    const std::uint32_t want_crc = static_cast<std::uint32_t>(std::stoul(crc_hex, nullptr, 16));
    if (crc32(g.bin_) != want_crc) throw g.bad(bin_file, "CRC-32 differs from the index's " + crc_hex);
    for (const auto& [key, a] : g.arrays_) {
      if (a.dtype != "f32" && a.dtype != "i32" && a.dtype != "u8") throw g.bad(idx_file, "unknown dtype " + a.dtype);
      if (a.offset > g.bin_.size() || a.bytes() > g.bin_.size() - a.offset) {
        throw g.bad(idx_file, "array " + key.first + " " + key.second + " lies outside " + bin_name);
      }
    }
    return g;
  }

  std::size_t hidden() const { return hidden_; }
  std::size_t max_seq_length() const { return max_seq_length_; }
  const std::vector<GoldenCase>& cases() const { return cases_; }
  // The case ids of the golden batch's rows, and the length it was padded to.
  const std::vector<std::size_t>& batch_rows() const { return batch_rows_; }
  std::size_t batch_padded_length() const { return batch_padded_length_; }
  // The reference's distance from itself (informational), by name; 0 when absent.
  double noise(const std::string& name) const {
    const auto it = noise_.find(name);
    return it == noise_.end() ? 0.0 : it->second;
  }

  // Arrays by key ("0".."61", "batch", "batch.0"...) and name ("text", "ids", "hidden", ...).
  std::string text(std::size_t id) const {
    const Array& a = array(std::to_string(id), "text", "u8");
    return std::string(bin_.data() + a.offset, a.bytes());
  }
  std::vector<std::int32_t> i32(const std::string& key, const std::string& name) const {
    return values<std::int32_t>(array(key, name, "i32"));
  }
  std::vector<float> f32(const std::string& key, const std::string& name) const {
    return values<float>(array(key, name, "f32"));
  }
  std::vector<std::size_t> shape(const std::string& key, const std::string& name) const {
    return array(key, name, nullptr).dims;
  }

 private:
  struct Array {
    std::string dtype;
    std::size_t offset = 0;
    std::vector<std::size_t> dims;
    std::size_t count() const {
      std::size_t n = 1;
      for (const std::size_t d : dims) n *= d;
      return n;
    }
    std::size_t bytes() const { return count() * (dtype == "u8" ? 1 : 4); }
  };

  static std::runtime_error bad(const std::filesystem::path& file, const std::string& what) {
    return std::runtime_error(file.string() + ": " + what);
  }

  const Array& array(const std::string& key, const std::string& name, const char* dtype) const {
    const auto it = arrays_.find({key, name});
    if (it == arrays_.end()) throw std::runtime_error("goldens: no array " + key + " " + name);
    if (dtype != nullptr && it->second.dtype != dtype) {
      throw std::runtime_error("goldens: array " + key + " " + name + " is " + it->second.dtype + ", not " + dtype);
    }
    return it->second;
  }

  template <class T>
  std::vector<T> values(const Array& a) const {
    std::vector<T> out(a.count());
    if (!out.empty()) std::memcpy(out.data(), bin_.data() + a.offset, a.bytes());  // offsets are checked at load
    return out;
  }

  std::size_t hidden_ = 0;
  std::size_t max_seq_length_ = 0;
  std::vector<GoldenCase> cases_;
  std::vector<std::size_t> batch_rows_;
  std::size_t batch_padded_length_ = 0;
  std::map<std::string, double> noise_;
  std::map<std::pair<std::string, std::string>, Array> arrays_;
  std::vector<char> bin_;
};

}  // namespace stile_test
