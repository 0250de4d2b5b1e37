#pragma once
// The elastic engine: a shard store streamed through the layer pipeline. Per request it plans a
// submodel with the two-stage planner (plan/planner.hpp; needs a device profile) or takes the
// caller's, reads the word-embedding rows of the request's tokens, then
// runs the layers with IO of layer k+1 overlapping compute of layer k (pipeline/), the GEMMs
// decoding the quantized shards panel by panel. Shards in the preload buffer are not read again.
//
//   Engine engine("model.stile", {.storage = "emmc", .preload_bytes = 1 << 20}, DeviceProfile::load(p));
//   engine.set_target_ms(30);
//   EngineResult r = engine.run("a charming and moving film");  // r.embedding, r.plan, r.timeline
//   engine.set_heads(HeadsFile::load("model.stile.heads.json"));  // then r.label, by the plan's shape
//   std::ofstream("trace.json") << to_chrome_trace(r.timeline);
//
// Memory between requests: the store's metadata, the resident parameters (biases, LayerNorms,
// position and token-type embeddings), the tokenizer's vocabulary, the preload buffer and the
// word-row cache (pipeline/word_row_cache.hpp; each request is planned for the rows it still reads). During a
// request, also the working buffer: `slots` layers' compressed shards, the word rows read, the
// activations and the layer's workspace (released after the request unless keep_working_buffer).
//
// Thread safety: requests and setters may come from any thread; they take turns (a setter called
// during a request takes effect when that request ends).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/arena.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/io/storage_emulator.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/model/sharded_bert.hpp"
#include "stile/model/submodel.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/pipeline/executor.hpp"
#include "stile/pipeline/layer_pipeline.hpp"
#include "stile/pipeline/preload_buffer.hpp"
#include "stile/pipeline/timeline.hpp"
#include "stile/pipeline/word_row_cache.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/pipeline_estimate.hpp"
#include "stile/plan/planner.hpp"

namespace stile {

struct EngineOptions {
  ReadBackendOptions backend{};      // io_uring with O_DIRECT by default (falls back, see backend_note())
  std::string storage = "none";      // storage emulator profile: emmc, sd, nvme, none
  double target_ms = 0;              // the planner's latency target; <= 0: none (highest bitwidth)
  ShardRanking ranking{};            // shard importance per layer (plan/importance); empty: shard order
  ImportanceOrder importance{};      // the global importance order (plan/importance); empty: by rank
  unsigned min_bits = 0;             // the planner's bitwidth floor (PlannerOptions::min_bits)
  double target_headroom = 0.05;     // share of the target the planner keeps free (PlannerOptions::headroom)
  std::size_t preload_bytes = 0;     // the preload buffer's budget
  std::size_t word_cache_bytes = 0;  // the word-row cache's budget (rows kept between requests)
  std::size_t threads = 0;           // compute threads (0: one per core)
  LayerTiles tiles{};                // {0, 0}: the untiled layer; else the tiled one
  std::size_t layers_in_flight = 2;  // working-buffer slots: IO runs at most this many layers ahead
  PipelineMode mode = PipelineMode::pipelined;
  bool keep_working_buffer = false;  // keep it allocated between requests (no allocation per request)
  std::size_t max_tokens = 256;      // the tokenizer's truncation ([CLS] and [SEP] included)
  Pooling pooling = Pooling::kMean;  // all-MiniLM-L6-v2: mean pooling, then L2 normalization
  bool normalize = true;
};

struct EngineResult {
  std::vector<float> embedding;      // [hidden] pooled (and normalized) sentence embedding
  std::vector<float> logits;         // [classes] when a head is set (for this plan's shape)
  std::optional<std::size_t> label;  // argmax of the logits when a head is set
  std::string head;                  // the heads file's key of the head used ("" for set_head's)
  std::size_t tokens = 0;
  SubmodelPlan plan;
  Timeline timeline;
  std::string plan_note;             // the planner's account of the plan (empty for a given plan)
  double estimated_ms = 0;           // the planner's estimate of the layers' time (0: given plan)
  std::size_t working_buffer_bytes = 0;  // the working buffer's size during this request
  std::size_t preload_held_bytes = 0;    // the preload buffer after this request
  std::size_t word_cache_held_bytes = 0; // the word-row cache after this request
};

// How many read requests `versions` of layer `layer` take when, as the engine reads them, versions
// that follow each other in the file (each rounded up to `alignment`) go in one request. On a
// store from the reference writer (a layer's versions grouped by bitwidth, docs/format.md) a
// layer read whole at one bitwidth is one request.
inline std::size_t contiguous_reads(const ShardStore& store, std::size_t layer, std::span<const ShardChoice> versions,
                                    std::size_t alignment) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // offset, rounded size
  for (const ShardChoice& c : versions) {
    const ShardVersionInfo& info = store.version_info(layer, c.shard, c.bits);
    spans.emplace_back(info.offset, (info.size + alignment - 1) / alignment * alignment);
  }
  std::sort(spans.begin(), spans.end());
  std::size_t runs = 0;
  for (std::size_t i = 0; i < spans.size(); ++i) runs += i == 0 || spans[i - 1].first + spans[i - 1].second != spans[i].first;
  return runs;
}

class Engine {
 public:
  Engine(const std::filesystem::path& store_path, EngineOptions options = {},
         std::optional<DeviceProfile> profile = std::nullopt)
      : options_(std::move(options)),
        store_(ShardStore::open(store_path)),
        backend_(open_backend(store_path, options_, backend_note_)),
        embeddings_(store_.read_embeddings()),
        tokenizer_(Vocab::parse(store_.read_vocab(), store_.name()),
                   WordPieceOptions{.max_length = std::min(options_.max_tokens, config().max_position_embeddings)}),
        pool_(options_.threads, /*cpu_bound_workers=*/true),
        preload_(options_.preload_bytes),
        word_cache_(options_.word_cache_bytes, store_.config().hidden) {
    require(options_.layers_in_flight >= 1, "engine: layers_in_flight must be at least 1");
    for (std::size_t l = 0; l < store_.num_layers(); ++l) residents_.push_back(store_.read_resident(l));
    if (profile) {
      check_profile(*profile);
      PlannerOptions planner;
      planner.target_ms = options_.target_ms;
      planner.preload_budget_bytes = options_.preload_bytes;
      planner.slots = slots_for(store_.num_layers());
      planner.min_bits = options_.min_bits;
      planner.headroom = options_.target_headroom;
      planner.importance = options_.importance;
      planner.version_bytes = [this](const ShardKey& k) { return version_bytes(k); };
      planner.layer_io = layer_io_model(*profile, [this](std::size_t l, std::span<const ShardChoice> v) {
        return contiguous_reads(store_, l, v, read_alignment());
      });
      // A request first reads its distinct tokens' word-embedding rows: one aligned block each.
      planner.row_read_ms = estimated_row_read_ms(*profile, static_cast<double>(backend_->alignment() > 1
                                                                                     ? backend_->alignment()
                                                                                     : config().hidden * sizeof(float)));
      planner_.emplace(std::move(*profile), options_.ranking, planner);
    }
  }

  const ShardStore& store() const noexcept { return store_; }
  const BertConfig& config() const noexcept { return store_.config(); }
  const EngineOptions& options() const noexcept { return options_; }
  const WordPieceTokenizer& tokenizer() const noexcept { return tokenizer_; }
  std::string backend_description() const { return backend_->describe(); }
  // The backend's buffer and offset alignment (4096 with O_DIRECT, 1 for buffered reads).
  std::size_t read_alignment() const noexcept { return backend_->alignment(); }
  // Why the backend is not the one asked for (io_uring or O_DIRECT unavailable); empty if it is.
  const std::string& backend_note() const noexcept { return backend_note_; }
  // The device profile the planner uses; null when the engine has none.
  const DeviceProfile* profile() const noexcept { return planner_ ? &planner_->profile() : nullptr; }

  void set_target_ms(double target_ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (planner_) planner_->set_target_ms(target_ms);
    options_.target_ms = target_ms;
  }
  double target_ms() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return options_.target_ms;
  }
  // Shrinking evicts at once, from the top layers down; growing is filled by the next requests'
  // reads (or preload_now()).
  void set_preload_budget(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    options_.preload_bytes = bytes;
    if (planner_) planner_->set_preload_budget(bytes);
    preload_.set_budget(bytes);
  }
  // One head for every plan (set_heads' per-shape heads take precedence when both are set).
  void set_head(LinearHead head) {
    head.check(config().hidden);
    std::lock_guard<std::mutex> lock(mutex_);
    head_ = std::move(head);
  }
  // A head per submodel shape (examples/train_heads): each request is classified by the head of
  // its plan's shape (none, no label: a plan of uneven widths, or a shape the file lacks), and the
  // planner's shrink compares shapes by the heads' calibration accuracies. The heads must be for
  // this store and must keep the shards the engine's importance ranking keeps.
  void set_heads(HeadsFile heads) {
    const std::size_t N = store_.num_layers(), M = store_.shards_per_layer();
    require(heads.num_layers == N && heads.shards_per_layer == M,
            concat("engine: the heads are for a ", heads.num_layers, " x ", heads.shards_per_layer,
                              " store, this one is ", N, " x ", M));
    ShardRanking ranking = options_.ranking;
    if (planner_) ranking = checked_importance(planner_->profile(), options_.ranking, options_.importance).ranking;
    for (const auto& [key, h] : heads.heads) {
      h.head.check(config().hidden);
      std::size_t n = 0, m = 0;
      if (!parse_shape_key(key, n, m) || m == M) continue;  // whole layers: nothing was chosen
      for (std::size_t l = 0; l < n; ++l) {
        require(top_shards(h.ranking, l, m) == top_shards(ranking, l, m),
                concat("engine: head \"", key, "\" keeps other shards of layer ", l,
                                  " than the engine's importance ranking (train the heads with the same importance "
                                  "file)"));
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (planner_) planner_->set_shape_accuracy(heads.shape_accuracy());
    heads_ = std::move(heads);
  }
  void set_word_cache_budget(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    options_.word_cache_bytes = bytes;
    word_cache_.set_budget(bytes);
  }
  std::size_t word_cache_held_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return word_cache_.held_bytes();
  }
  // The word rows a request of these tokens would read now (its distinct tokens not cached).
  std::size_t word_rows_to_read(const Encoding& tokens) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return word_cache_.missing(tokens.input_ids);
  }
  std::vector<ShardKey> preloaded() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return preload_.keys();
  }
  std::size_t preload_held_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return preload_.held_bytes();
  }
  // Bytes held for good besides the two buffers: the store's metadata (manifest, dictionaries, row
  // checksums), the resident parameters (biases, LayerNorms), the position and token-type
  // embeddings, and the vocabulary (counted at its text size).
  std::size_t resident_bytes() const {
    std::size_t floats = embeddings_.position.size() + embeddings_.token_type.size() + embeddings_.ln_gamma.size() +
                         embeddings_.ln_beta.size();
    for (const LayerResident& r : residents_) {
      floats += r.attn_out_bias.size() + r.ln1_gamma.size() + r.ln1_beta.size() + r.ffn_out_bias.size() +
                r.ln2_gamma.size() + r.ln2_beta.size();
    }
    return store_.resident_bytes() + floats * sizeof(float) + static_cast<std::size_t>(store_.manifest().vocab.size);
  }

  // Bytes the working buffer holds now (zero between requests unless keep_working_buffer).
  std::size_t working_buffer_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return working_bytes();
  }

  // The plan for a request of `tokens` tokens reading `word_rows` word-embedding rows (unknown:
  // the length bucket's): the two-stage planner's (cached per bucket and rows; replanned when the
  // target or the preload budget changes). Without a device profile: the whole model at the
  // highest stored bitwidth (a latency target then is an error).
  ElasticPlan plan_for(std::size_t tokens, std::optional<std::size_t> word_rows = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    return plan_locked(tokens, word_rows);
  }

  EngineResult run(std::string_view text) { return run(tokenizer_.encode(text)); }
  EngineResult run(const Encoding& tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t len = checked_sequence_length(tokens, 0, config().max_position_embeddings);
    // Planned for the word rows it reads and the preload versions held now (the first request,
    // or the first after the budget grew, is planned for what the buffer holds; its reads fill it).
    const ElasticPlan planned =
        plan_locked(len, word_cache_.missing(std::span(tokens.input_ids).first(len)),
                    [this](const ShardKey& k) { return preload_.contains(k); });
    EngineResult r = run_locked(tokens, planned.submodel, planned.preload);
    r.plan_note = planned.explain;
    r.estimated_ms = planned.estimated_ms;
    return r;
  }
  // Runs the caller's plan; the preload buffer keeps its first shards in layer order that fit.
  EngineResult run(const Encoding& tokens, const SubmodelPlan& plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    check_submodel_plan(store_, plan);
    return run_locked(tokens, plan, preload_set(plan, preload_.budget_bytes(), [this](const ShardKey& k) {
                        return version_bytes(k);
                      }));
  }

  // Reads what the preload buffer should hold and is missing, now (before the first request, say),
  // through the same backend: for the planner's plan of a `tokens`-token request (reading
  // `word_rows` word rows; unknown: the bucket's length), or for `plan`.
  void preload_now(std::size_t tokens, std::optional<std::size_t> word_rows = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    const ElasticPlan planned = plan_locked(tokens, word_rows);
    fill_preload(planned.submodel, planned.preload);
  }
  void preload_now(const SubmodelPlan& plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    check_submodel_plan(store_, plan);
    fill_preload(plan, preload_set(plan, preload_.budget_bytes(), [this](const ShardKey& k) { return version_bytes(k); }));
  }

 private:
  using Clock = std::chrono::steady_clock;
  using SlotBuffer = AlignedBuffer<std::byte, 4096>;

  void fill_preload(const SubmodelPlan& plan, const std::set<ShardKey>& wanted) {
    preload_.retain_only(wanted);
    for (std::size_t l = 0; l < plan.layers.size(); ++l) {
      std::vector<ShardChoice> missing;
      for (const ShardChoice& c : plan.layers[l]) {
        if (wanted.count({l, c.shard, c.bits}) != 0 && !preload_.contains({l, c.shard, c.bits})) missing.push_back(c);
      }
      if (missing.empty()) continue;
      SlotBuffer buffer(layer_read_bytes(l, missing));
      LayerTimes ignored;
      const std::vector<ReadVersion> read = read_versions(l, missing, buffer.span(), ignored, Clock::now());
      for (std::size_t i = 0; i < missing.size(); ++i) keep_preloaded(l, missing[i], read[i].bytes);
    }
  }

  static std::unique_ptr<ReadBackend> open_backend(const std::filesystem::path& path, const EngineOptions& o,
                                                   std::string& note) {
    std::unique_ptr<ReadBackend> backend = open_read_backend(path, o.backend, &note);
    return emulate_storage(std::move(backend), storage_profile(o.storage));
  }

  void check_profile(const DeviceProfile& p) const {
    const std::string where = "engine: the device profile (made on " + p.machine.value("store", std::string("?")) + ")";
    require(p.num_layers == store_.num_layers() && p.shards_per_layer == store_.shards_per_layer(),
            where + " is for " + std::to_string(p.num_layers) + " layers x " + std::to_string(p.shards_per_layer) +
                " shards, the store " + store_.name() + " has " + std::to_string(store_.num_layers()) + " x " +
                std::to_string(store_.shards_per_layer()));
    require(p.bits == store_.bits(), where + " has other bitwidths than the store " + store_.name());
  }

  ElasticPlan plan_locked(std::size_t tokens, std::optional<std::size_t> word_rows = {},
                          const std::function<bool(const ShardKey&)>& held = {}) {
    if (planner_) return planner_->plan(tokens, word_rows, held);
    require(options_.target_ms <= 0, "engine: a latency target needs a device profile (examples/profile makes one)");
    ElasticPlan whole;
    whole.submodel = SubmodelPlan::uniform(store_.num_layers(), store_.shards_per_layer(), store_.bits().back(),
                                           options_.ranking);
    whole.preload = preload_set(whole.submodel, preload_.budget_bytes(), [this](const ShardKey& k) { return version_bytes(k); });
    whole.valid = whole.meets_target = true;
    whole.explain = "no device profile: the whole model at " + std::to_string(store_.bits().back()) + " bits";
    return whole;
  }

  std::size_t version_bytes(const ShardKey& k) const {
    return static_cast<std::size_t>(store_.version_info(k.layer, k.shard, k.bits).size);
  }

  std::size_t slots_for(std::size_t layers) const {
    if (options_.mode == PipelineMode::load_then_execute) return std::max<std::size_t>(layers, 1);
    return std::clamp<std::size_t>(options_.layers_in_flight, 1, std::max<std::size_t>(layers, 1));
  }


  // Bytes a read of these versions of layer l takes in a buffer (each rounded to the backend's
  // alignment, so every version starts aligned for O_DIRECT).
  std::size_t layer_read_bytes(std::size_t l, std::span<const ShardChoice> choices) const {
    std::size_t bytes = 0;
    for (const ShardChoice& c : choices) bytes += round_to_alignment(store_.version_info(l, c.shard, c.bits).size);
    return bytes;
  }
  std::size_t round_to_alignment(std::uint64_t bytes) const {
    const std::size_t a = backend_->alignment();
    return static_cast<std::size_t>((bytes + a - 1) / a * a);
  }

  struct ReadVersion {
    ShardView view;
    std::span<const std::byte> bytes;  // in the buffer it was read into
  };

  // Reads `choices` of layer l into `buffer` (in file order, one read per contiguous run), then
  // checks each version; returns them in the order of `choices`. Stamps times.read_end_ms (ms
  // from `start`) between reading and checking.
  std::vector<ReadVersion> read_versions(std::size_t l, std::span<const ShardChoice> choices,
                                         std::span<std::byte> buffer, LayerTimes& times,
                                         Clock::time_point start) const {
    struct Version {
      std::size_t choice;
      std::uint64_t offset;
      std::size_t size, rounded, at;  // at: its place in `buffer`
    };
    std::vector<Version> order;
    for (std::size_t i = 0; i < choices.size(); ++i) {
      const ShardVersionInfo& info = store_.version_info(l, choices[i].shard, choices[i].bits);
      order.push_back({i, info.offset, static_cast<std::size_t>(info.size), round_to_alignment(info.size), 0});
    }
    std::sort(order.begin(), order.end(), [](const Version& a, const Version& b) { return a.offset < b.offset; });
    std::vector<ReadRequest> runs;
    std::vector<std::size_t> run_needs;  // bytes of each run that hold versions (the rest is padding)
    std::size_t at = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      Version& v = order[i];
      v.at = at;
      const bool continues = i > 0 && order[i - 1].offset + order[i - 1].rounded == v.offset;  // as contiguous_reads
      if (continues) {
        runs.back().out = buffer.subspan(runs.back().out.data() - buffer.data(), runs.back().out.size() + v.rounded);
        run_needs.back() = v.at + v.size - static_cast<std::size_t>(runs.back().out.data() - buffer.data());
      } else {
        runs.push_back({v.offset, buffer.subspan(at, v.rounded)});
        run_needs.push_back(v.size);
      }
      at += v.rounded;
    }
    std::vector<std::size_t> got(runs.size(), 0);
    try {
      backend_->read(runs, got);
    } catch (const std::system_error& e) {
      fail_in_file(store_.name(), "reading the shards of layer ", l, ": ", e.code().message());
    }
    for (std::size_t r = 0; r < runs.size(); ++r) {
      if (got[r] < run_needs[r]) {
        fail_in_file(store_.name(), "reading the shards of layer ", l, ": got only ", got[r], " of the ",
                                run_needs[r], " bytes at byte ", runs[r].offset,
                                ": the file ended early (truncated after it was opened?)");
      }
      times.bytes_read += runs[r].out.size();
    }
    times.reads += runs.size();
    times.shards_read += choices.size();
    times.read_end_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::vector<ReadVersion> read(choices.size());
    for (const Version& v : order) {
      const ShardChoice& c = choices[v.choice];
      read[v.choice].bytes = buffer.subspan(v.at, v.size);
      read[v.choice].view = store_.view_version(l, c.shard, c.bits, read[v.choice].bytes);
    }
    return read;
  }

  void keep_preloaded(std::size_t l, const ShardChoice& c, std::span<const std::byte> bytes) {
    preload_.insert({l, c.shard, c.bits}, bytes, [&](std::span<const std::byte> copy) {
      return store_.view_version(l, c.shard, c.bits, copy);
    });
  }

  // The word-embedding rows of `ids` into hidden: from the word-row cache, or read through the
  // backend, one read per distinct token (of the row's aligned block when the backend needs
  // alignment), checked, and then cached. The cache is used in sorted id order (held rows
  // touched, then the rows read inserted), so a caller can replay its state from the ids alone.
  void read_word_rows(std::span<const std::int32_t> ids, float* hidden, Timeline& timeline) {
    store_.check_word_ids(ids);
    const std::size_t d = config().hidden;
    const std::size_t row_bytes = d * sizeof(float);
    const std::size_t a = backend_->alignment();
    const std::vector<std::int32_t> distinct = WordRowCache::distinct_ids(ids);
    // Valid until the first insert below: rows are copied out before anything is cached.
    std::vector<std::span<const float>> held(distinct.size());
    for (std::size_t q = 0; q < distinct.size(); ++q) held[q] = word_cache_.find(distinct[q]);
    const auto block_of = [&](std::int32_t id) {
      const std::uint64_t offset = store_.word_row_offset(static_cast<std::size_t>(id));
      const std::uint64_t start = offset / a * a;
      return std::pair{start, round_to_alignment(offset + row_bytes - start)};
    };
    std::size_t bytes = 0;
    for (std::size_t q = 0; q < distinct.size(); ++q) bytes += held[q].empty() ? block_of(distinct[q]).second : 0;
    word_rows_.resize(bytes);
    std::vector<ReadRequest> requests;
    std::vector<std::size_t> request_of(distinct.size(), 0);  // for the rows not held
    for (std::size_t q = 0, at = 0; q < distinct.size(); ++q) {
      if (!held[q].empty()) continue;
      const auto [start, size] = block_of(distinct[q]);
      request_of[q] = requests.size();
      requests.push_back({start, word_rows_.span().subspan(at, size)});
      at += size;
    }
    std::vector<std::size_t> got(requests.size(), 0);
    try {
      backend_->read(requests, got);
    } catch (const std::system_error& e) {
      fail_in_file(store_.name(), "reading word-embedding rows: ", e.code().message());
    }
    std::vector<std::size_t> first_token(distinct.size(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto id = static_cast<std::size_t>(ids[i]);
      const auto q = static_cast<std::size_t>(std::lower_bound(distinct.begin(), distinct.end(), ids[i]) - distinct.begin());
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
      if (held[q].empty()) word_cache_.insert(distinct[q], std::span<const float>(hidden + first_token[q] * d, d));
    }
    for (const ReadRequest& q : requests) timeline.embed_bytes_read += q.out.size();
    timeline.word_rows_read = requests.size();
    timeline.word_rows_cached = distinct.size() - requests.size();
  }

  // `wanted`: the versions the preload buffer should hold after this request.
  // `plan` has passed check_submodel_plan (the callers check a given plan; the planner's are valid
  // by construction).
  EngineResult run_locked(const Encoding& tokens, const SubmodelPlan& plan, const std::set<ShardKey>& wanted) {
    const Clock::time_point start = Clock::now();
    const auto ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); };
    const BertConfig& c = config();
    const std::size_t d = c.hidden;
    const std::size_t len = checked_sequence_length(tokens, 0, c.max_position_embeddings);
    check_token_ids(tokens, len, c);
    require(len > 0, "engine: a request without tokens has no embedding");

    EngineResult result;
    result.plan = plan;
    result.tokens = len;
    Timeline& timeline = result.timeline;
    timeline.storage = backend_->describe();
    timeline.emulated = backend_->emulated();
    timeline.mode = to_string(options_.mode);

    // A failed request leaves the preload buffer holding only checked versions, and the working
    // buffer released (unless kept).
    struct Release {
      Engine& e;
      ~Release() {
        if (!e.options_.keep_working_buffer) e.release_working_buffer();
      }
    } release{*this};

    timeline.embed_start_ms = ms();
    hidden_.resize(len * d);
    read_word_rows(std::span(tokens.input_ids).first(len), hidden_.data(), timeline);
    add_position_and_type(tokens, len, c, embeddings_.position.data(), embeddings_.token_type.data(), hidden_.data());
    layer_norm_rows(hidden_.data(), len, d, d, embeddings_.ln_gamma.data(), embeddings_.ln_beta.data(),
                    c.layer_norm_eps);
    timeline.embed_end_ms = ms();

    const std::size_t n = plan.layers.size();
    const std::size_t slots = slots_for(n);
    std::size_t slot_bytes = 0;
    for (std::size_t l = 0; l < n; ++l) slot_bytes = std::max(slot_bytes, layer_read_bytes(l, missing_of(l, plan)));
    slots_.resize(slots);
    for (SlotBuffer& s : slots_) {
      if (s.size() < slot_bytes) s.resize(slot_bytes);
    }
    std::vector<std::vector<ShardView>> views(slots);
    const std::size_t offsets[2] = {0, len};

    LayerJobs jobs;
    jobs.load = [&](std::size_t l, std::size_t slot, LayerTimes& t) {
      const std::vector<ShardChoice> missing = missing_of(l, plan);
      t.shards_preloaded = plan.layers[l].size() - missing.size();
      std::vector<ReadVersion> read;
      if (!missing.empty()) {
        read = read_versions(l, missing, slots_[slot].span(), t, start);
      } else {
        t.read_end_ms = ms();
      }
      std::vector<ShardView>& v = views[slot];
      v.clear();
      std::size_t next = 0;
      for (const ShardChoice& choice : plan.layers[l]) {
        const ShardKey key{l, choice.shard, choice.bits};
        if (const ShardView* held = preload_.find(key)) {
          v.push_back(*held);
        } else {
          const ReadVersion& r = read[next++];
          v.push_back(r.view);
          if (wanted.count(key) != 0) keep_preloaded(l, choice, r.bytes);
        }
      }
    };
    jobs.compute = [&](std::size_t l, std::size_t slot) {
      const ShardedLayer layer(store_.shard_shape(), views[slot], resident_view(residents_[l]));
      if (options_.tiles.query == 0) {
        layer.run(c, hidden_.data(), offsets, ws_, pool_);
      } else {
        layer.run(c, hidden_.data(), offsets, options_.tiles, arena_, pool_);
      }
    };
    LayerPipeline(io_, compute_).run(n, slots, options_.mode, jobs, start, timeline.layers);
    preload_.retain_only(wanted);

    result.embedding.resize(d);
    pool_tokens(hidden_, len, d, options_.pooling, result.embedding);
    if (options_.normalize) l2_normalize(result.embedding);
    const LinearHead* head = head_ ? &*head_ : nullptr;
    if (heads_) {
      const StoredHead* stored = heads_->find_for(plan, &result.head);
      head = stored ? &stored->head : nullptr;
    }
    if (head) {
      const std::vector<double> logits = head->logits(result.embedding);
      result.logits.assign(logits.begin(), logits.end());
      result.label = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    result.working_buffer_bytes = working_bytes();
    result.preload_held_bytes = preload_.held_bytes();
    result.word_cache_held_bytes = word_cache_.held_bytes();
    timeline.total_ms = ms();
    return result;
  }

  // The m shards a ranking keeps in layer l, sorted (empty ranking: 0..m-1).
  static std::vector<std::size_t> top_shards(const ShardRanking& ranking, std::size_t l, std::size_t m) {
    std::vector<std::size_t> top;
    for (std::size_t r = 0; r < m; ++r) top.push_back(ranking.empty() ? r : ranking[l][r]);
    std::sort(top.begin(), top.end());
    return top;
  }

  std::vector<ShardChoice> missing_of(std::size_t l, const SubmodelPlan& plan) const {
    std::vector<ShardChoice> missing;
    for (const ShardChoice& c : plan.layers[l]) {
      if (!preload_.contains({l, c.shard, c.bits})) missing.push_back(c);
    }
    return missing;
  }
  std::size_t working_bytes() const {
    std::size_t bytes = word_rows_.size() + hidden_.capacity() * sizeof(float) + arena_.capacity_bytes() +
                        (ws_.qkv.size() + ws_.ctx.size() + ws_.ffn.size()) * sizeof(float);
    for (const SlotBuffer& s : slots_) bytes += s.size();
    return bytes;
  }

  void release_working_buffer() {
    slots_.clear();
    slots_.shrink_to_fit();
    word_rows_ = SlotBuffer();
    std::vector<float>().swap(hidden_);
    ws_ = EncoderWorkspace();
    arena_ = Arena();
  }

  EngineOptions options_;
  ShardStore store_;
  std::string backend_note_;
  std::unique_ptr<ReadBackend> backend_;
  std::optional<Planner> planner_;  // with a device profile
  EmbeddingResident embeddings_;
  std::vector<LayerResident> residents_;
  WordPieceTokenizer tokenizer_;
  std::optional<LinearHead> head_;
  std::optional<HeadsFile> heads_;
  ThreadPool pool_;
  PreloadBuffer preload_;
  WordRowCache word_cache_;
  mutable std::mutex mutex_;  // one request at a time; setters wait for it

  // The working buffer.
  std::vector<SlotBuffer> slots_;
  SlotBuffer word_rows_;
  std::vector<float> hidden_;
  EncoderWorkspace ws_;
  Arena arena_;

  // Last: the executors' threads stop before anything they might touch is destroyed.
  Executor io_{"io"};
  Executor compute_{"compute", mark_thread_cpu_bound};
};

}  // namespace stile
