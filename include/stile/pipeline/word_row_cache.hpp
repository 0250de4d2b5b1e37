#pragma once
// Word-embedding rows kept between requests, least recently used first out, under a byte budget.
//
// Why: a request reads one row per distinct token before any layer can start, each a separate
// storage request (0.35-0.45 ms on emulated eMMC: ~7 ms of a 40 ms target for a 20-token
// sentence). The function words and punctuation of a language recur in almost every sentence, so
// a small cache takes a large share of those reads away: per byte held it saves more time than
// preloading shards does (a 1.5 KB row saves a ~0.4 ms read; a 4-bit MiniLM shard of 81 KB saves
// 1.4 ms). The engine plans each request for the rows it still has to read.
//
// Rows are copied in after the engine has checked them against the store's checksums. Not
// thread-safe: the engine uses it under its own lock.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace stile {

class WordRowCache {
 public:
  WordRowCache(std::size_t budget_bytes, std::size_t row_floats)
      : budget_(budget_bytes), row_bytes_(row_floats * sizeof(float)) {}

  std::size_t budget_bytes() const noexcept { return budget_; }
  // The rows' bytes, which the budget bounds (the bookkeeping, ~100 bytes a row, is not counted).
  std::size_t held_bytes() const noexcept { return rows_.size() * row_bytes_; }
  std::size_t size() const noexcept { return rows_.size(); }
  bool contains(std::int32_t id) const { return rows_.count(id) != 0; }

  // The held row of `id` (now the most recently used), or an empty span.
  std::span<const float> find(std::int32_t id) {
    const auto it = rows_.find(id);
    if (it == rows_.end()) return {};
    use_order_.splice(use_order_.begin(), use_order_, it->second.use);
    return it->second.values;
  }

  // Keeps a copy of `row` as the most recently used, evicting the least recently used rows to fit.
  // Nothing is kept when the budget holds no row, or when `row` is not a whole row.
  void insert(std::int32_t id, std::span<const float> row) {
    if (row.size_bytes() != row_bytes_ || row_bytes_ > budget_) return;
    if (const auto it = rows_.find(id); it != rows_.end()) {
      use_order_.splice(use_order_.begin(), use_order_, it->second.use);
      return;
    }
    while (held_bytes() + row_bytes_ > budget_) evict_one();
    use_order_.push_front(id);
    rows_.emplace(id, Row{std::vector<float>(row.begin(), row.end()), use_order_.begin()});
  }

  // Sets the budget, evicting the least recently used rows until what is held fits.
  void set_budget(std::size_t budget_bytes) {
    budget_ = budget_bytes;
    while (held_bytes() > budget_) evict_one();
  }

  // How many of `ids` (each counted once) are not held: the rows a request still reads.
  std::size_t missing(std::span<const std::int32_t> ids) const {
    const std::vector<std::int32_t> distinct = distinct_ids(ids);
    return static_cast<std::size_t>(
        std::count_if(distinct.begin(), distinct.end(), [this](std::int32_t id) { return !contains(id); }));
  }

  // What a request of `ids` does to the cache, without its rows (zeros stand in): the held rows
  // touched, then the others inserted, both in sorted id order, as the engine does. For replaying
  // a sequence of requests ahead of time (bench/eval_sst2 plans each dev sentence this way).
  void record(std::span<const std::int32_t> ids) {
    const std::vector<std::int32_t> distinct = distinct_ids(ids);
    std::vector<std::int32_t> read;
    for (const std::int32_t id : distinct) {
      if (find(id).empty()) read.push_back(id);
    }
    const std::vector<float> zeros(row_bytes_ / sizeof(float), 0.0f);
    for (const std::int32_t id : read) insert(id, zeros);
  }

  // The distinct ids, sorted: one word row each.
  static std::vector<std::int32_t> distinct_ids(std::span<const std::int32_t> ids) {
    std::vector<std::int32_t> distinct(ids.begin(), ids.end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    return distinct;
  }

 private:
  struct Row {
    std::vector<float> values;
    std::list<std::int32_t>::iterator use;
  };

  void evict_one() {
    rows_.erase(use_order_.back());
    use_order_.pop_back();
  }

  std::size_t budget_;
  std::size_t row_bytes_;
  std::list<std::int32_t> use_order_;  // most recently used first
  std::unordered_map<std::int32_t, Row> rows_;
};

}  // namespace stile
