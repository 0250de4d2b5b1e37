#pragma once
// Where a request's shard reads are issued: the versions of one layer read from the store through
// a read backend into a buffer, then checked. One coalescing rule serves the planner's cost
// estimate (read_count) and the reads themselves (read), so what is costed is what is read:
// versions sorted by file offset, each rounded up to the backend's alignment, and versions that
// follow each other in the file (as the reference writer groups a layer's versions by bitwidth,
// docs/format.md) read in one request.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "stile/core/file_error.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/model/submodel.hpp"
#include "stile/pipeline/timeline.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/store/shard_view.hpp"

namespace stile {

// How versions of one layer are laid out in a read buffer and grouped into read requests.
struct LayerReadLayout {
  struct Version {
    std::size_t choice = 0;    // index into the caller's versions
    std::uint64_t offset = 0;  // in the file
    std::size_t size = 0, rounded = 0;
    std::size_t at = 0;  // its place in the buffer
  };
  struct Run {
    std::uint64_t offset = 0;       // in the file
    std::size_t at = 0, bytes = 0;  // in the buffer; bytes rounded to the alignment
    std::size_t needed = 0;         // bytes of the run that hold versions (the rest is padding)
  };
  std::vector<Version> versions;  // in file order
  std::vector<Run> runs;
  std::size_t buffer_bytes = 0;
};

// @pre every version exists in the store (ShardStore::version_info checks); alignment >= 1.
inline LayerReadLayout layout_layer_read(const ShardStore& store, std::size_t layer,
                                         std::span<const ShardChoice> versions, std::size_t alignment) {
  LayerReadLayout out;
  for (std::size_t i = 0; i < versions.size(); ++i) {
    const ShardVersionInfo& info = store.version_info(layer, versions[i].shard, versions[i].bits);
    const auto size = static_cast<std::size_t>(info.size);
    out.versions.push_back({i, info.offset, size, (size + alignment - 1) / alignment * alignment, 0});
  }
  std::sort(out.versions.begin(), out.versions.end(),
            [](const LayerReadLayout::Version& a, const LayerReadLayout::Version& b) { return a.offset < b.offset; });
  for (std::size_t i = 0; i < out.versions.size(); ++i) {
    LayerReadLayout::Version& v = out.versions[i];
    v.at = out.buffer_bytes;
    const LayerReadLayout::Version* prev = i > 0 ? &out.versions[i - 1] : nullptr;
    if (prev != nullptr && prev->offset + prev->rounded == v.offset) {
      LayerReadLayout::Run& run = out.runs.back();
      run.bytes += v.rounded;
      run.needed = v.at + v.size - run.at;
    } else {
      out.runs.push_back({v.offset, v.at, v.rounded, v.size});
    }
    out.buffer_bytes += v.rounded;
  }
  return out;
}

// How many read requests `versions` of layer `layer` take as the engine reads them.
inline std::size_t contiguous_reads(const ShardStore& store, std::size_t layer, std::span<const ShardChoice> versions,
                                    std::size_t alignment) {
  return layout_layer_read(store, layer, versions, alignment).runs.size();
}

// A version as read: its view and its bytes, in the buffer it was read into.
struct ReadVersion {
  ShardView view;
  std::span<const std::byte> bytes;
};

class LayerReader {
 public:
  // Keeps references to both, which must outlive it.
  LayerReader(const ShardStore& store, ReadBackend& backend) : store_(store), backend_(backend) {}

  std::size_t alignment() const noexcept { return backend_.alignment(); }
  std::size_t read_count(std::size_t layer, std::span<const ShardChoice> versions) const {
    return contiguous_reads(store_, layer, versions, alignment());
  }
  // The buffer bytes read() needs for these versions.
  // (Each version rounded up to the alignment, as layout_layer_read places them; no sort needed:
  // the engine asks this for every layer of every request, to size its read slots.)
  std::size_t buffer_bytes(std::size_t layer, std::span<const ShardChoice> versions) const {
    const std::size_t a = alignment();
    std::size_t bytes = 0;
    for (const ShardChoice& c : versions) {
      const auto size = static_cast<std::size_t>(store_.version_info(layer, c.shard, c.bits).size);
      bytes += (size + a - 1) / a * a;
    }
    return bytes;
  }

  // Reads `versions` of `layer` into `buffer` (at least buffer_bytes(), aligned for the backend),
  // one request per contiguous run, stamps times.read_end_ms (ms since `start`) between reading
  // and checking, then checks each version; returns them in the order of `versions`. A failed or
  // short read, or a version that fails its check, throws stile::Error naming the store.
  std::vector<ReadVersion> read(std::size_t layer, std::span<const ShardChoice> versions, std::span<std::byte> buffer,
                                LayerTimes& times, std::chrono::steady_clock::time_point start) const {
    const LayerReadLayout layout = layout_layer_read(store_, layer, versions, alignment());
    require(buffer.size() >= layout.buffer_bytes, "layer reader: the buffer is smaller than the layer's versions");
    std::vector<ReadRequest> requests;
    for (const LayerReadLayout::Run& r : layout.runs) requests.push_back({r.offset, buffer.subspan(r.at, r.bytes)});
    std::vector<std::size_t> got(requests.size(), 0);
    try {
      backend_.read(requests, got);
    } catch (const std::system_error& e) {
      fail_in_file(store_.name(), "reading layer ", layer, " (", versions_text(layout, versions, layout.runs.size()),
                   "): ", e.code().message());
    }
    for (std::size_t r = 0; r < requests.size(); ++r) {
      if (got[r] < layout.runs[r].needed) {
        fail_in_file(store_.name(), "reading layer ", layer, " (", versions_text(layout, versions, r), "): got only ",
                     got[r], " of the ", layout.runs[r].needed, " bytes at byte ", requests[r].offset,
                     ": the file ended early (truncated after it was opened?)");
      }
      times.bytes_read += requests[r].out.size();
    }
    times.reads += requests.size();
    times.shards_read += versions.size();
    times.read_end_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::vector<ReadVersion> read(versions.size());
    for (const LayerReadLayout::Version& v : layout.versions) {
      const ShardChoice& c = versions[v.choice];
      read[v.choice].bytes = buffer.subspan(v.at, v.size);
      read[v.choice].view = store_.view_version(layer, c.shard, c.bits, read[v.choice].bytes);
    }
    return read;
  }

 private:
  // "shard 3 at 4 bits, shard 5 at 32 bits": the versions of run `run` (of every run when `run`
  // is runs.size()), for an error that must say what could not be read.
  static std::string versions_text(const LayerReadLayout& layout, std::span<const ShardChoice> versions,
                                   std::size_t run) {
    std::string text;
    for (const LayerReadLayout::Version& v : layout.versions) {
      if (run < layout.runs.size()) {
        const LayerReadLayout::Run& r = layout.runs[run];
        if (v.at < r.at || v.at >= r.at + r.bytes) continue;
      }
      if (!text.empty()) text += ", ";
      text += concat("shard ", versions[v.choice].shard, " at ", versions[v.choice].bits, " bits");
    }
    return text;
  }

  const ShardStore& store_;
  ReadBackend& backend_;
};

}  // namespace stile
