#pragma once
// A fresh directory under the system's temporary directory, removed with everything in it when the
// TempDir goes. The name holds the process id and a counter, so parallel test programs and several
// TempDirs of one program never collide.
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <iterator>
#include <string>
#include <system_error>

namespace stile_test {

struct TempDir {
  std::filesystem::path path;

  explicit TempDir(const std::string& stem = "dir") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("stile_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + stem);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }

  // How many entries the directory holds.
  std::size_t count_files() const {
    return static_cast<std::size_t>(
        std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator()));
  }
};

}  // namespace stile_test
