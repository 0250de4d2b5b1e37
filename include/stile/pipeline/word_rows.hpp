#pragma once
// The first stage of a request: the word-embedding rows of its tokens, from the word-row cache
// (pipeline/word_row_cache.hpp) or read through the backend, one read per distinct token not held
// (of the row's aligned block when the backend needs alignment), checked, and then cached.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/pipeline/timeline.hpp"
#include "stile/pipeline/word_row_cache.hpp"
#include "stile/store/shard_store.hpp"

namespace stile {

class WordRowReader {
 public:
  using Buffer = AlignedBuffer<std::byte, 4096>;

  // Keeps references to store and backend, which must outlive it.
  WordRowReader(const ShardStore& store, ReadBackend& backend, std::size_t cache_budget_bytes)
      : store_(store), backend_(backend), cache_(cache_budget_bytes, store.config().hidden) {}

  WordRowCache& cache() noexcept { return cache_; }
  const WordRowCache& cache() const noexcept { return cache_; }

  // The word rows of `ids` into hidden ([ids.size() x hidden]); `scratch` receives the reads (the
  // working buffer's). The cache is used in sorted id order (held rows touched, then the rows read
  // inserted), so a caller can replay its state from the ids alone. Records the bytes read, the
  // rows read and the rows served from the cache in `timeline`. A failed or short read, or a row
  // that fails its checksum, throws stile::Error naming the store; nothing of it is cached.
  void read(std::span<const std::int32_t> ids, float* hidden, Buffer& scratch, Timeline& timeline) {
    store_.check_word_ids(ids);
    const std::size_t d = store_.config().hidden;
    const std::size_t row_bytes = d * sizeof(float);
    const std::size_t a = backend_.alignment();
    const std::vector<std::int32_t> distinct = WordRowCache::distinct_ids(ids);
    // Valid until the first insert below: rows are copied out before anything is cached.
    std::vector<std::span<const float>> held(distinct.size());
    for (std::size_t q = 0; q < distinct.size(); ++q) held[q] = cache_.find(distinct[q]);
    const auto block_of = [&](std::int32_t id) {
      const std::uint64_t offset = store_.word_row_offset(static_cast<std::size_t>(id));
      const std::uint64_t start = offset / a * a;
      return std::pair{start, static_cast<std::size_t>((offset + row_bytes - start + a - 1) / a * a)};
    };
    std::size_t bytes = 0;
    for (std::size_t q = 0; q < distinct.size(); ++q) bytes += held[q].empty() ? block_of(distinct[q]).second : 0;
    scratch.resize(bytes);
    std::vector<ReadRequest> requests;
    std::vector<std::size_t> request_of(distinct.size(), 0);  // for the rows not held
    for (std::size_t q = 0, at = 0; q < distinct.size(); ++q) {
      if (!held[q].empty()) continue;
      const auto [start, size] = block_of(distinct[q]);
      request_of[q] = requests.size();
      requests.push_back({start, scratch.span().subspan(at, size)});
      at += size;
    }
    std::vector<std::size_t> got(requests.size(), 0);
    try {
      backend_.read(requests, got);
    } catch (const std::system_error& e) {
      fail_in_file(store_.name(), "reading ", requests.size(), " word-embedding rows: ", e.code().message());
    }
    std::vector<std::size_t> first_token(distinct.size(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto id = static_cast<std::size_t>(ids[i]);
      const auto q =
          static_cast<std::size_t>(std::lower_bound(distinct.begin(), distinct.end(), ids[i]) - distinct.begin());
      first_token[q] = std::min(first_token[q], i);
      if (!held[q].empty()) {
        std::memcpy(hidden + i * d, held[q].data(), row_bytes);
        continue;
      }
      const ReadRequest& r = requests[request_of[q]];
      const auto skip = static_cast<std::size_t>(store_.word_row_offset(id) - r.offset);
      if (got[request_of[q]] < skip + row_bytes) {
        fail_in_file(store_.name(), "reading word-embedding row ", id,
                     ": the file ended early (truncated after it was opened?)");
      }
      const std::span<const std::byte> row = r.out.subspan(skip, row_bytes);
      store_.check_word_row(id, row);
      std::memcpy(hidden + i * d, row.data(), row_bytes);
    }
    for (std::size_t q = 0; q < distinct.size(); ++q) {
      if (held[q].empty()) cache_.insert(distinct[q], std::span<const float>(hidden + first_token[q] * d, d));
    }
    for (const ReadRequest& q : requests) timeline.embed_bytes_read += q.out.size();
    timeline.word_rows_read = requests.size();
    timeline.word_rows_cached = distinct.size() - requests.size();
  }

 private:
  const ShardStore& store_;
  ReadBackend& backend_;
  WordRowCache cache_;
};

}  // namespace stile
