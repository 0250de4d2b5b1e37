#pragma once
// Where the default model lives: $STILE_MODEL_DIR if set, else ~/.cache/stile/all-MiniLM-L6-v2,
// the directory scripts/fetch-model fills. One definition for every program that opens it.
#include <cstdlib>
#include <filesystem>

namespace stile {

inline std::filesystem::path default_model_dir() {
  if (const char* env = std::getenv("STILE_MODEL_DIR"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : ".") / ".cache/stile/all-MiniLM-L6-v2";
}

}  // namespace stile
