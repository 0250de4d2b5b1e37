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
#include <functional>
#include <list>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stile {

// The rows held are the rows as stored (ShardStore::word_row_extent): 4 hidden bytes of fp32 for a
// dense table, the coded U row of a low-rank one (4 + r bytes at int8), so the same budget holds
// several times more tokens of a compressed table; the reader reconstructs a held row on use.
class WordRowCache {
 public:
  // row_bytes(id): the stored size of token id's row (what insert() accepts and record() holds).
  using RowBytes = std::function<std::size_t(std::int32_t)>;

  WordRowCache(std::size_t budget_bytes, RowBytes row_bytes) : budget_(budget_bytes), row_bytes_(std::move(row_bytes)) {}
  // Every row `row_bytes` bytes (a dense table).
  static WordRowCache fixed_rows(std::size_t budget_bytes, std::size_t row_bytes) {
    return WordRowCache(budget_bytes, [row_bytes](std::int32_t) { return row_bytes; });
  }

  std::size_t budget_bytes() const noexcept { return budget_; }
  // The rows' bytes, which the budget bounds (the bookkeeping, ~100 bytes a row, is not counted).
  std::size_t held_bytes() const noexcept { return held_; }
  std::size_t size() const noexcept { return rows_.size(); }
  bool contains(std::int32_t id) const { return rows_.count(id) != 0; }

  // The held row of `id` (now the most recently used), or an empty span.
  std::span<const std::byte> find(std::int32_t id) {
    const auto it = rows_.find(id);
    if (it == rows_.end()) return {};
    use_order_.splice(use_order_.begin(), use_order_, it->second.use);
    return it->second.bytes;
  }

  // Keeps a copy of `row` as the most recently used, evicting the least recently used rows to fit.
  // Nothing is kept when the row is larger than the budget, or when `row` is not id's whole row.
  void insert(std::int32_t id, std::span<const std::byte> row) {
    if (row.empty() || row.size() != row_bytes_(id) || row.size() > budget_) return;
    if (const auto it = rows_.find(id); it != rows_.end()) {
      use_order_.splice(use_order_.begin(), use_order_, it->second.use);
      return;
    }
    while (held_ + row.size() > budget_) evict_one();
    use_order_.push_front(id);
    rows_.emplace(id, Row{std::vector<std::byte>(row.begin(), row.end()), use_order_.begin()});
    held_ += row.size();
  }

  // Sets the budget, evicting the least recently used rows until what is held fits.
  void set_budget(std::size_t budget_bytes) {
    budget_ = budget_bytes;
    while (held_ > budget_) evict_one();
  }

  // How many of `ids` (each counted once) are not held: the rows a request still reads.
  std::size_t missing(std::span<const std::int32_t> ids) const {
    const std::vector<std::int32_t> distinct = distinct_ids(ids);
    return static_cast<std::size_t>(
        std::count_if(distinct.begin(), distinct.end(), [this](std::int32_t id) { return !contains(id); }));
  }
  // The distinct ids of `ids` not held, sorted.
  std::vector<std::int32_t> missing_ids(std::span<const std::int32_t> ids) const {
    std::vector<std::int32_t> distinct = distinct_ids(ids);
    std::erase_if(distinct, [this](std::int32_t id) { return contains(id); });
    return distinct;
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
    std::vector<std::byte> zeros;
    for (const std::int32_t id : read) {
      zeros.assign(row_bytes_(id), std::byte{0});
      insert(id, zeros);
    }
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
    std::vector<std::byte> bytes;
    std::list<std::int32_t>::iterator use;
  };

  void evict_one() {
    const auto it = rows_.find(use_order_.back());
    held_ -= it->second.bytes.size();
    rows_.erase(it);
    use_order_.pop_back();
  }

  std::size_t budget_;
  RowBytes row_bytes_;
  std::size_t held_ = 0;
  std::list<std::int32_t> use_order_;  // most recently used first
  std::unordered_map<std::int32_t, Row> rows_;
};

}  // namespace stile
