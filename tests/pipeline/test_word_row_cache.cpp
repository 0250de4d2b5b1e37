// The word-row cache (pipeline/word_row_cache.hpp): least recently used out first, the budget,
// the rows a request still reads, and record() replaying what the engine does to it.
#include "stile/pipeline/word_row_cache.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

namespace {

// A stored row of 4 floats whose first value is the id.
std::vector<std::byte> row_of(std::int32_t id) {
  const float v[4] = {static_cast<float>(id), 0.5f, -1.0f, 2.0f};
  const auto* b = reinterpret_cast<const std::byte*>(v);
  return {b, b + sizeof v};
}
float first_value(std::span<const std::byte> row) {
  float f = 0;
  std::memcpy(&f, row.data(), sizeof f);
  return f;
}

}  // namespace

TEST_CASE("word-row cache: least recently used rows are evicted first, within the budget", "[pipeline][word_cache]") {
  const std::size_t row_bytes = 4 * sizeof(float);
  auto cache = stile::WordRowCache::fixed_rows(3 * row_bytes, row_bytes);
  for (const std::int32_t id : {10, 20, 30}) cache.insert(id, row_of(id));
  CHECK(cache.size() == 3);
  CHECK(cache.held_bytes() == 3 * row_bytes);
  REQUIRE(cache.find(10).size() == row_bytes);  // 10 is now the most recently used: 20 goes first
  CHECK(first_value(cache.find(10)) == 10.0f);
  cache.insert(40, row_of(40));
  CHECK(!cache.contains(20));
  CHECK(cache.contains(10));
  CHECK(cache.contains(30));
  CHECK(first_value(cache.find(40)) == 40.0f);
  CHECK(cache.find(20).empty());

  const std::vector<std::int32_t> request{10, 99, 99, 40, 7};
  CHECK(cache.missing(request) == 2);  // 99 (twice: one read) and 7

  cache.set_budget(row_bytes);  // keeps the most recently used: 40
  CHECK(cache.size() == 1);
  CHECK(cache.contains(40));
  cache.set_budget(row_bytes / 2);  // no row fits: nothing is held, nothing is kept
  CHECK(cache.size() == 0);
  cache.insert(1, row_of(1));
  CHECK(cache.size() == 0);

  auto wrong_size = stile::WordRowCache::fixed_rows(4 * row_bytes, row_bytes);
  wrong_size.insert(1, std::vector<std::byte>(row_bytes - 1));
  CHECK(wrong_size.size() == 0);
}

TEST_CASE("word-row cache: record() replays a request as the engine serves it", "[pipeline][word_cache]") {
  const std::size_t row_bytes = 2 * sizeof(float);
  auto cache = stile::WordRowCache::fixed_rows(3 * row_bytes, row_bytes);
  const std::vector<std::int32_t> first{5, 3, 5, 8};
  CHECK(cache.missing(first) == 3);
  cache.record(first);
  CHECK(cache.missing(first) == 0);
  // Held rows are touched in sorted id order, then the new ones inserted in sorted order: after
  // {8, 1} the use order is 1, 8, 5 (3 was the least recently used and is evicted).
  cache.record(std::vector<std::int32_t>{8, 1});
  CHECK(cache.contains(1));
  CHECK(cache.contains(8));
  CHECK(cache.contains(5));
  CHECK(!cache.contains(3));
  CHECK(cache.find(1).size() == row_bytes);
  CHECK(first_value(cache.find(1)) == 0.0f);  // zeros stand in for a recorded row
}

TEST_CASE("word-row cache: rows of different sizes (a low-rank table) share one byte budget", "[pipeline][word_cache]") {
  // Token t's stored row is 4 + t bytes (an int8 row of rank t).
  stile::WordRowCache cache(30, [](std::int32_t id) { return std::size_t(4 + id); });
  cache.insert(2, std::vector<std::byte>(6));
  cache.insert(10, std::vector<std::byte>(14));
  CHECK(cache.held_bytes() == 20);
  cache.insert(3, std::vector<std::byte>(8));  // wrong size for token 3 (7 bytes): not kept
  CHECK(!cache.contains(3));
  cache.insert(12, std::vector<std::byte>(16));  // 36 > 30: the least recently used (2) goes
  CHECK(!cache.contains(2));
  CHECK(cache.held_bytes() == 30);
  cache.record(std::vector<std::int32_t>{1});  // 5 more: 10 goes
  CHECK(cache.contains(1));
  CHECK(!cache.contains(10));
  CHECK(cache.held_bytes() == 21);
  CHECK(cache.missing_ids(std::vector<std::int32_t>{12, 1, 7, 7}) == std::vector<std::int32_t>{7});
}
