// The word-row cache (pipeline/word_row_cache.hpp): least recently used out first, the budget,
// the rows a request still reads, and record() replaying what the engine does to it.
#include "stile/pipeline/word_row_cache.hpp"

#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

namespace {

std::vector<float> row_of(std::int32_t id) { return {static_cast<float>(id), 0.5f, -1.0f, 2.0f}; }

}  // namespace

TEST_CASE("word-row cache: least recently used rows are evicted first, within the budget", "[pipeline][word_cache]") {
  const std::size_t row_bytes = 4 * sizeof(float);
  stile::WordRowCache cache(3 * row_bytes, 4);
  for (const std::int32_t id : {10, 20, 30}) cache.insert(id, row_of(id));
  CHECK(cache.size() == 3);
  CHECK(cache.held_bytes() == 3 * row_bytes);
  REQUIRE(cache.find(10).size() == 4);  // 10 is now the most recently used: 20 goes first
  CHECK(cache.find(10)[0] == 10.0f);
  cache.insert(40, row_of(40));
  CHECK(!cache.contains(20));
  CHECK(cache.contains(10));
  CHECK(cache.contains(30));
  CHECK(cache.find(40)[0] == 40.0f);
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

  stile::WordRowCache wrong_size(4 * row_bytes, 4);
  wrong_size.insert(1, std::vector<float>(3, 0.0f));
  CHECK(wrong_size.size() == 0);
}

TEST_CASE("word-row cache: record() replays a request as the engine serves it", "[pipeline][word_cache]") {
  const std::size_t row_bytes = 2 * sizeof(float);
  stile::WordRowCache cache(3 * row_bytes, 2);
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
  CHECK(cache.find(1).size() == 2);
  CHECK(cache.find(1)[0] == 0.0f);  // zeros stand in for a recorded row
}
