#pragma once
// FNV-1a, 64 bits: the hash of what is known by its bytes (cache keys, fingerprints, the name of
// a mapping). Not for untrusted input or security.
#include <cstddef>
#include <cstdint>

namespace stile {

inline constexpr std::uint64_t kFnv1aOffset = 1469598103934665603ull;

// h carried on over the `bytes` bytes at `data`.
inline std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t bytes) noexcept {
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace stile
