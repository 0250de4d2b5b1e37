#pragma once
// What a request did when: per layer, its IO job (read, then checksum and structure check) and its
// compute job (the GEMMs decode the quantized panels as they go, so decoding is inside compute),
// and how long compute waited for IO. Times are milliseconds from the request's start on the
// steady clock. Exported as Chrome trace JSON (chrome://tracing, Perfetto): one lane for IO, one
// for compute.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stile {

struct LayerTimes {
  double io_start_ms = 0, read_end_ms = 0, io_end_ms = 0;  // read: [io_start, read_end); verify: [read_end, io_end)
  double compute_start_ms = 0, compute_end_ms = 0;
  double stall_ms = 0;               // compute was free but this layer's shards were not in memory yet
  double convert_ms = 0;             // of compute: weights converted and kept for later requests
  std::size_t shards_read = 0;       // shard versions read from storage by this request
  std::size_t shards_preloaded = 0;  // found in the preload buffer
  std::size_t reads = 0;             // read requests (one per contiguous run of versions)
  std::size_t bytes_read = 0;        // as read from storage (runs rounded to the backend's alignment)
};

struct Timeline {
  std::string storage;                                   // the read backend (and emulator) that served the request
  bool emulated = false;                                 // IO delays came from a storage emulator
  std::string mode;                                      // "pipelined" or "load-then-execute"
  double embed_start_ms = 0, embed_end_ms = 0;           // word rows read, embeddings summed and normalized
  std::size_t embed_bytes_read = 0;                      // the word rows' reads (aligned blocks)
  std::size_t word_rows_read = 0, word_rows_cached = 0;  // distinct tokens' rows: read, or in the cache
  std::size_t word_row_requests = 0;                     // the reads they took (nearby rows share one)
  std::vector<LayerTimes> layers;
  double head_start_ms = 0, head_end_ms = 0;  // pooling and the head, after the last layer
  double total_ms = 0;  // end of the request (pooling and head included)

  double stall_ms() const {
    double s = 0;
    for (const LayerTimes& l : layers) s += l.stall_ms;
    return s;
  }
  double compute_ms() const {
    double s = 0;
    for (const LayerTimes& l : layers) s += l.compute_end_ms - l.compute_start_ms;
    return s;
  }
  double conversion_ms() const {
    double s = 0;
    for (const LayerTimes& l : layers) s += l.convert_ms;
    return s;
  }
  double io_ms() const {
    double s = 0;
    for (const LayerTimes& l : layers) s += l.io_end_ms - l.io_start_ms;
    return s;
  }
  std::size_t bytes_read() const {
    std::size_t s = 0;
    for (const LayerTimes& l : layers) s += l.bytes_read;
    return s;
  }
  std::size_t shards_read() const {
    std::size_t s = 0;
    for (const LayerTimes& l : layers) s += l.shards_read;
    return s;
  }
};

// Chrome trace event format ("X" complete events, microseconds): lane 1 IO, lane 2 compute.
inline nlohmann::json to_chrome_trace(const Timeline& t) {
  using nlohmann::json;
  json events = json::array();
  auto lane_name = [&](int tid, const char* name) {
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}});
  };
  lane_name(1, "io");
  lane_name(2, "compute");
  auto span = [&](int tid, const std::string& name, double start_ms, double end_ms, json args) {
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"pid", 1},
                      {"tid", tid},
                      {"ts", start_ms * 1e3},
                      {"dur", std::max(0.0, end_ms - start_ms) * 1e3},
                      {"args", std::move(args)}});
  };
  span(2, "embeddings", t.embed_start_ms, t.embed_end_ms, json::object());
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    const LayerTimes& x = t.layers[l];
    const std::string layer = "layer " + std::to_string(l);
    if (x.shards_read > 0) {
      span(1, "read " + layer, x.io_start_ms, x.read_end_ms,
           {{"bytes", x.bytes_read}, {"shards", x.shards_read}, {"reads", x.reads}});
      span(1, "verify " + layer, x.read_end_ms, x.io_end_ms, json::object());
    }
    if (x.stall_ms > 0) span(2, "stall " + layer, x.compute_start_ms - x.stall_ms, x.compute_start_ms, json::object());
    span(2, "compute " + layer, x.compute_start_ms, x.compute_end_ms,
         {{"shards_preloaded", x.shards_preloaded}, {"shards_read", x.shards_read}});
  }
  if (t.head_end_ms > t.head_start_ms) span(2, "pooling and head", t.head_start_ms, t.head_end_ms, json::object());
  return {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"storage", t.storage}, {"emulated", t.emulated}, {"mode", t.mode}, {"total_ms", t.total_ms}}}};
}

}  // namespace stile
