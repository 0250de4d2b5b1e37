#pragma once
// The default model (all-MiniLM-L6-v2 in STILE_MODEL_DIR, fetched by scripts/fetch-model), and
// REQUIRE_MODEL(): a test that needs it is skipped with a warning when it is missing, never passed
// silently.
#include <filesystem>

#include <catch2/catch.hpp>

namespace stile_test {

inline std::filesystem::path model_dir() { return STILE_MODEL_DIR; }
inline bool have_model() { return std::filesystem::exists(model_dir() / "model.safetensors"); }

}  // namespace stile_test

#define REQUIRE_MODEL()                                                                                   \
  if (!stile_test::have_model()) {                                                                        \
    WARN("skipped: the default model is not in " << stile_test::model_dir() << " (scripts/fetch-model)"); \
    return;                                                                                               \
  }
