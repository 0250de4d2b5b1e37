#pragma once
// The files the tools write beside a shard store STORE, and read from there by default:
// STORE.profile.json (tools/profile), STORE.heads.json (tools/train_heads) and
// STORE.importance.json (tools/importance). The heads and importance names are the library's
// (heads_path_for, importance_path_for); the library has no such function for the device profile,
// so its name is spelled here, once.
#include <filesystem>
#include <optional>

#include "stile/model/heads_file.hpp"
#include "stile/plan/importance.hpp"

namespace stile_cli {

enum class Sidecar { profile, heads, importance };

inline std::filesystem::path sidecar_path(const std::filesystem::path& store, Sidecar which) {
  switch (which) {
    case Sidecar::heads: return stile::heads_path_for(store);
    case Sidecar::importance: return stile::importance_path_for(store);
    case Sidecar::profile: break;
  }
  std::filesystem::path p = store;
  p += ".profile.json";
  return p;
}

// The sidecar's path when that file exists.
inline std::optional<std::filesystem::path> existing_sidecar(const std::filesystem::path& store, Sidecar which) {
  std::filesystem::path p = sidecar_path(store, which);
  if (!std::filesystem::exists(p)) return std::nullopt;
  return p;
}

}  // namespace stile_cli
