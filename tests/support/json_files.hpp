#pragma once
// Reading a test's JSON files and writing the files a test changes (a model directory's
// config.json with one field altered, say).
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace stile_test {

inline nlohmann::json read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// Writes `contents` to `file` (its folder made when missing), replacing what was there.
inline void write_file(const std::filesystem::path& file, const std::string& contents) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << contents;
  REQUIRE(out.good());
}

}  // namespace stile_test
