#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>

#include "stile/core/aligned_buffer.hpp"

TEST_CASE("aligned buffer is aligned, grows, and moves", "[core]") {
  stile::AlignedBuffer<float> a(10);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % stile::kCacheLineBytes == 0);
  a.zero();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == 0.0f);
  a[3] = 1.5f;
  const float* before = a.data();
  a.resize(5);  // shrinking keeps the storage
  CHECK(a.data() == before);
  CHECK(a.size() == 5);
  a.resize(1000);
  CHECK(a.size() == 1000);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % stile::kCacheLineBytes == 0);
  stile::AlignedBuffer<float> b(std::move(a));
  CHECK(b.size() == 1000);
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  a.resize(3);  // a moved-from buffer is usable again
  CHECK(a.size() == 3);
  stile::AlignedBuffer<float, 4096> page(1);
  CHECK(reinterpret_cast<std::uintptr_t>(page.data()) % 4096 == 0);
}
