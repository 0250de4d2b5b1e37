#pragma once
// The first stage of a request: the word-embedding rows of its tokens, from the word-row cache
// (pipeline/word_row_cache.hpp) or read through the backend, checked, cached as stored, and turned
// into rows (a copy for a dense table, a GEMV with the cluster's V for a low-rank one).
//
// Reads: the stored rows not held, in file order, each widened to the backend's alignment; rows
// whose blocks lie within kWordRowMergeGap bytes of each other go in one request (reading a gap of
// up to 4 KiB costs ~50 us on eMMC, a request ~300 us). On a dense table (1.5 KB rows for MiniLM)
// this rarely merges anything; on a low-rank table the frequent tokens' coded rows sit next to
// each other (clusters are in frequency order), so a sentence's common words share requests.
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

inline constexpr std::uint64_t kWordRowMergeGap = 4096;

// One read of word rows: [offset, offset + size), holding the stored rows of `ids`.
struct WordRowRead {
  std::uint64_t offset = 0;
  std::size_t size = 0;
  std::vector<std::int32_t> ids;
};

// The reads for the rows of `ids` (distinct, each a row of the store), with the backend's
// alignment `alignment` (1: none). merge = false: one read per row (stile before issue 21; for
// comparisons).
inline std::vector<WordRowRead> plan_word_row_reads(const ShardStore& store, std::size_t alignment,
                                                    std::span<const std::int32_t> ids, bool merge = true) {
  const std::uint64_t a = std::max<std::size_t>(alignment, 1);
  std::vector<std::pair<std::uint64_t, std::int32_t>> by_offset;
  by_offset.reserve(ids.size());
  for (const std::int32_t id : ids) by_offset.emplace_back(store.word_row_extent(static_cast<std::size_t>(id)).offset, id);
  std::sort(by_offset.begin(), by_offset.end());
  std::vector<WordRowRead> reads;
  std::uint64_t end = 0;
  for (const auto& [offset, id] : by_offset) {
    const std::uint64_t start = offset / a * a;
    const std::uint64_t stop = (offset + store.word_row_extent(static_cast<std::size_t>(id)).size + a - 1) / a * a;
    if (merge && !reads.empty() && start <= end + kWordRowMergeGap) {
      end = std::max(end, stop);
      reads.back().size = static_cast<std::size_t>(end - reads.back().offset);
      reads.back().ids.push_back(id);
      continue;
    }
    reads.push_back({start, static_cast<std::size_t>(stop - start), {id}});
    end = stop;
  }
  return reads;
}

class WordRowReader {
 public:
  using Buffer = AlignedBuffer<std::byte, 4096>;

  // Keeps references to store and backend, which must outlive it.
  // merge_reads = false: one read per row (for comparisons).
  WordRowReader(const ShardStore& store, ReadBackend& backend, std::size_t cache_budget_bytes, bool merge_reads = true)
      : store_(store),
        merge_(merge_reads),
        backend_(backend),
        cache_(cache_budget_bytes,
               [&store](std::int32_t id) { return store.word_row_extent(static_cast<std::size_t>(id)).size; }) {}

  WordRowCache& cache() noexcept { return cache_; }
  const WordRowCache& cache() const noexcept { return cache_; }

  // The read requests a request of `ids` would issue now (its rows not held, merged).
  std::size_t reads_needed(std::span<const std::int32_t> ids) const {
    store_.check_word_ids(ids);
    return plan_word_row_reads(store_, backend_.alignment(), cache_.missing_ids(ids), merge_).size();
  }

  // The word rows of `ids` into hidden ([ids.size() x hidden]); `scratch` receives the reads (the
  // working buffer's). The cache is used in sorted id order (held rows touched, then the rows read
  // inserted), so a caller can replay its state from the ids alone. Records the bytes read, the
  // rows read, the requests and the rows served from the cache in `timeline`. A failed or short
  // read, or a row that fails its checksum, throws stile::Error naming the store; nothing of it is
  // cached.
  void read(std::span<const std::int32_t> ids, float* hidden, Buffer& scratch, Timeline& timeline) {
    store_.check_word_ids(ids);
    const std::size_t d = store_.config().hidden;
    const std::vector<std::int32_t> distinct = WordRowCache::distinct_ids(ids);
    // Copied out at once: the inserts below may evict them.
    std::vector<std::vector<std::byte>> stored(distinct.size());
    std::vector<bool> held(distinct.size(), false);
    std::vector<std::int32_t> missing;
    for (std::size_t q = 0; q < distinct.size(); ++q) {
      const std::span<const std::byte> row = cache_.find(distinct[q]);
      if (row.empty()) {
        missing.push_back(distinct[q]);
      } else {
        stored[q].assign(row.begin(), row.end());
        held[q] = true;
      }
    }
    const std::vector<WordRowRead> reads = plan_word_row_reads(store_, backend_.alignment(), missing, merge_);
    std::size_t bytes = 0;
    for (const WordRowRead& r : reads) bytes += r.size;
    scratch.resize(bytes);
    std::vector<ReadRequest> requests;
    requests.reserve(reads.size());
    for (std::size_t i = 0, at = 0; i < reads.size(); ++i) {
      requests.push_back({reads[i].offset, scratch.span().subspan(at, reads[i].size)});
      at += reads[i].size;
    }
    std::vector<std::size_t> got(requests.size(), 0);
    try {
      backend_.read(requests, got);
    } catch (const std::system_error& e) {
      fail_in_file(store_.name(), "reading ", requests.size(), " word-embedding rows: ", e.code().message());
    }
    const auto index_of = [&](std::int32_t id) {
      return static_cast<std::size_t>(std::lower_bound(distinct.begin(), distinct.end(), id) - distinct.begin());
    };
    for (std::size_t i = 0; i < reads.size(); ++i) {
      for (const std::int32_t id : reads[i].ids) {
        const ShardStore::WordRowExtent e = store_.word_row_extent(static_cast<std::size_t>(id));
        const auto skip = static_cast<std::size_t>(e.offset - reads[i].offset);
        if (got[i] < skip + e.size) {
          fail_in_file(store_.name(), "reading word-embedding row ", id,
                       ": the file ended early (truncated after it was opened?)");
        }
        const std::span<const std::byte> row = requests[i].out.subspan(skip, e.size);
        store_.check_word_row(static_cast<std::size_t>(id), row);
        stored[index_of(id)].assign(row.begin(), row.end());
      }
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      store_.decode_word_row(static_cast<std::size_t>(ids[i]), stored[index_of(ids[i])], hidden + i * d);
    }
    for (const std::int32_t id : missing) cache_.insert(id, stored[index_of(id)]);
    for (const ReadRequest& q : requests) timeline.embed_bytes_read += q.out.size();
    timeline.word_rows_read = missing.size();
    timeline.word_row_requests = requests.size();
    timeline.word_rows_cached = distinct.size() - missing.size();
  }

 private:
  const ShardStore& store_;
  bool merge_;
  ReadBackend& backend_;
  WordRowCache cache_;
};

}  // namespace stile
