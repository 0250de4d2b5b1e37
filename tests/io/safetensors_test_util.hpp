#pragma once
// Test helpers: build safetensors bytes from a header written by hand (so a test can say exactly
// which field is wrong), and write them to a temporary file. (A stile::Error's message:
// support/error_of.hpp.)
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

namespace stile_test {

// Same layout with any declared header length (to test lengths that lie), no padding.
inline std::vector<std::byte> make_raw_safetensors(std::uint64_t declared_header_length, const std::string& header,
                                                   const std::vector<std::byte>& data) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(declared_header_length >> (8 * i)));
  for (const char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The 8-byte little-endian header length, the header (padded with spaces to a multiple of 8 like
// the reference writer, so F32 data stays 4-byte aligned), then the data.
inline std::vector<std::byte> make_safetensors(std::string header, const std::vector<std::byte>& data) {
  while (header.size() % 8 != 0) header += ' ';
  return make_raw_safetensors(header.size(), header, data);
}

template <class T>
void append_le(std::vector<std::byte>& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  using Bits = std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                  std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;
  const auto bits = std::bit_cast<Bits>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<std::byte>(bits >> (8 * i)));
}

// A file in the temporary directory, removed when the test ends. Its name is unique per process
// and call, so parallel test runs do not collide.
class TempFile {
 public:
  TempFile(const std::string& stem, const std::vector<std::byte>& bytes) {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() / ("stile_test_io_" + std::to_string(::getpid()) + "_" +
                                                       std::to_string(counter++) + "_" + stem + ".safetensors"))
                .string();
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace stile_test
