#pragma once
// Writer of safetensors files (the format io/safetensors.hpp reads): tensors given as raw
// little-endian bytes with their dtype and shape. The data section is contiguous, as the reference
// implementation requires (it refuses gaps), and every tensor is aligned to its element size: the
// tensors are laid out by decreasing element size (8-byte, then 4-, 2-, 1-byte), each group's total a
// multiple of its element size, after a header padded with spaces to a multiple of 8.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/safetensors.hpp"

namespace stile {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;  // little-endian, num_elements(shape) * dtype_size(dtype) bytes
};

// The whole file as bytes. A tensor whose data does not match its shape is a stile::Error.
inline std::vector<std::byte> safetensors_bytes(std::vector<TensorToWrite> tensors,
                                                const std::map<std::string, std::string>& metadata = {}) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
    return dtype_size(a.dtype) != dtype_size(b.dtype) ? dtype_size(a.dtype) > dtype_size(b.dtype) : a.name < b.name;
  });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    std::size_t n = 1;
    for (const std::int64_t d : t.shape) n *= static_cast<std::size_t>(d);
    require(n * dtype_size(t.dtype) == t.data.size(),
            concat("safetensors writer: tensor '", t.name, "' has ", t.data.size(), " bytes for its shape"));
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n * dtype_size(t.dtype)}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::vector<std::byte> out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(std::uint64_t{text.size()} >> (8 * i)));
  for (const char ch : text) out.push_back(static_cast<std::byte>(ch));
  for (const TensorToWrite& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

// Writes bytes to path (created or truncated) and closes it; a short write or a failed close is an
// error naming the file.
inline void write_file_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail_in_file(path, "cannot create: ", std::system_category().message(errno));
  const std::size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int err = written == bytes.size() ? 0 : errno;
  if (std::fclose(f) != 0 || written != bytes.size()) {
    fail_in_file(path, "cannot write: ", std::system_category().message(err != 0 ? err : errno));
  }
}

}  // namespace stile
