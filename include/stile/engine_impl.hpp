#pragma once
// The elastic engine's implementation: the request stages wired together (see engine.hpp for
// the API and the stages). Compiled once, in the stile::compiled library (src/stile_engine.cpp):
// include it nowhere else (it defines Engine's members; a second definition is an ODR error).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/core/ticket_mutex.hpp"
#include "stile/io/fault_injection.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/io/storage_emulator.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/model/classifier.hpp"
#include "stile/model/checkpoint_head.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/model/sharded_bert.hpp"
#include "stile/model/store_encoder.hpp"
#include "stile/model/submodel.hpp"
#include "stile/pipeline/executor.hpp"
#include "stile/ops/layer_compute.hpp"
#include "stile/pipeline/layer_pipeline.hpp"
#include "stile/pipeline/layer_reader.hpp"
#include "stile/pipeline/preload_buffer.hpp"
#include "stile/pipeline/timeline.hpp"
#include "stile/pipeline/word_rows.hpp"
#include "stile/pipeline/working_buffer.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/load_tracker.hpp"
#include "stile/plan/pipeline_estimate.hpp"
#include "stile/plan/planner.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"

#include "stile/engine.hpp"

namespace stile::detail {

class EngineCore {
 public:
  EngineCore(const std::filesystem::path& store_path, EngineOptions options, std::optional<DeviceProfile> profile)
      : options_(std::move(options)),
        store_(ShardStore::open(store_path)),
        backend_(open_backend(store_path, options_, backend_note_)),
        layer_reader_(store_, *backend_),
        word_rows_(store_, *backend_, options_.word_cache_bytes),
        residents_(store_),
        tokenizer_(Vocab::parse(store_.read_vocab(), store_.name()),
                   WordPieceOptions{.max_length = std::min(options_.max_tokens, config().max_position_embeddings)}),
        pool_(options_.threads, /*cpu_bound_workers=*/true),
        preload_(options_.preload_bytes),
        compute_(std::make_unique<CpuLayerCompute>(pool_, options_.tiles, working_.workspace, working_.arena,
                                                   options_.ops, options_.shard_linear)) {
    require(options_.layers_in_flight >= 1, "engine: layers_in_flight must be at least 1");
    if (profile) {
      check_profile(*profile);
      PlannerOptions planner = planner_options(*profile);
      if (options_.reprofile) base_profile_ = *profile;
      planner_.emplace(std::move(*profile), options_.ranking, std::move(planner));
    }
  }

  const ShardStore& store() const noexcept { return store_; }
  const EncoderConfig& config() const noexcept { return store_.config(); }
  const EngineOptions& options() const noexcept { return options_; }
  const WordPieceTokenizer& tokenizer() const noexcept { return tokenizer_; }
  std::string backend_description() const { return backend_->describe(); }
  // The backend's buffer and offset alignment (4096 with O_DIRECT, 1 for buffered reads).
  std::size_t read_alignment() const noexcept { return backend_->alignment(); }
  // Why the backend is not the one asked for (io_uring or O_DIRECT unavailable); empty if it is.
  const std::string& backend_note() const noexcept { return backend_note_; }
  // The device profile the planner uses; null when the engine has none.
  // (As measured: with reprofile the planner's own is a scaled copy, replaced as the load changes.)
  const DeviceProfile* profile() const noexcept {
    if (base_profile_) return &*base_profile_;
    return planner_ ? &planner_->profile() : nullptr;
  }

  void set_target_ms(double target_ms) {
    std::lock_guard<TicketMutex> lock(mutex_);
    if (planner_) planner_->set_target_ms(target_ms);
    options_.target_ms = target_ms;
  }
  double target_ms() const {
    std::lock_guard<TicketMutex> lock(mutex_);
    return options_.target_ms;
  }
  // Shrinking evicts at once, from the top layers down; growing is filled by the next requests'
  // reads (or preload_now()).
  void set_preload_budget(std::size_t bytes) {
    std::lock_guard<TicketMutex> lock(mutex_);
    options_.preload_bytes = bytes;
    if (planner_) planner_->set_preload_budget(bytes);
    preload_.set_budget(bytes);
  }
  // One head for every plan (set_heads' per-shape heads take precedence when both are set).
  void set_head(LinearHead head) {
    head.check(config().hidden);
    std::lock_guard<TicketMutex> lock(mutex_);
    classifier_.set_head(std::move(head));
  }
  // A head per submodel shape (tools/train_heads): each request is classified by the head of
  // its plan's shape (none, no label: a plan of uneven widths, or a shape the file lacks), and the
  // planner's shrink compares shapes by the heads' calibration accuracies. The heads must be for
  // this store and must keep the shards the engine's importance ranking keeps.
  void set_heads(HeadsFile heads) {
    ShardRanking ranking = options_.ranking;
    if (const DeviceProfile* p = profile()) ranking = checked_importance(*p, options_.ranking, options_.importance).ranking;
    Classifier::check_heads(heads, store_.num_layers(), store_.shards_per_layer(), config().hidden, ranking);
    std::lock_guard<TicketMutex> lock(mutex_);
    shape_accuracy_ = heads.shape_accuracy();
    if (planner_) planner_->set_shape_accuracy(shape_accuracy_);
    classifier_.set_heads(std::move(heads));
  }
  void set_task_head(CheckpointHead head) {
    require(head.task != HeadTask::kMaskedLm,
            "engine: a masked-LM head is not run by the engine (its decoder is a vocabulary-wide matrix to keep resident; "
            "sequence and token classification heads are)");
    require(!head.head.layers.empty() && head.head.layers.front().in == config().hidden,
            "engine: the checkpoint head reads another hidden size than the store's");
    std::lock_guard<TicketMutex> lock(mutex_);
    task_head_ = std::move(head);
  }
  // Replaces where each layer's compute runs (the CPU thread pool by default): a layer split
  // between processors or devices. It runs on the engine's compute executor, one layer at a time.
  void set_layer_compute(std::unique_ptr<LayerCompute> compute) {
    require(compute != nullptr, "engine: set_layer_compute needs a layer compute");
    std::lock_guard<TicketMutex> lock(mutex_);
    compute_ = std::move(compute);
  }
  void set_word_cache_budget(std::size_t bytes) {
    std::lock_guard<TicketMutex> lock(mutex_);
    options_.word_cache_bytes = bytes;
    word_rows_.cache().set_budget(bytes);
  }
  std::size_t word_cache_held_bytes() const {
    std::lock_guard<TicketMutex> lock(mutex_);
    return word_rows_.cache().held_bytes();
  }
  // The word rows a request of these tokens would read now (its distinct tokens not cached).
  std::size_t word_rows_to_read(const Encoding& tokens) const {
    std::lock_guard<TicketMutex> lock(mutex_);
    return word_rows_.cache().missing(tokens.input_ids);
  }
  std::size_t word_row_reads(const Encoding& tokens) const {
    std::lock_guard<TicketMutex> lock(mutex_);
    const std::size_t len = checked_sequence_length(tokens, 0, config().max_position_embeddings);
    return word_rows_.reads_needed(std::span(tokens.input_ids).first(len));
  }
  std::vector<ShardKey> preloaded() const {
    std::lock_guard<TicketMutex> lock(mutex_);
    return preload_.keys();
  }
  std::size_t preload_held_bytes() const {
    std::lock_guard<TicketMutex> lock(mutex_);
    return preload_.held_bytes();
  }
  // Bytes held for good besides the two buffers: the store's metadata (manifest, dictionaries, row
  // checksums), the resident parameters (biases, LayerNorms), the position and token-type
  // embeddings, and the vocabulary (counted at its text size).
  std::size_t resident_bytes() const {
    return store_.resident_bytes() + residents_.bytes() + static_cast<std::size_t>(store_.manifest().vocab.size);
  }

  // Bytes the working buffer holds now (zero between requests unless keep_working_buffer).
  std::size_t working_buffer_bytes() const {
    std::lock_guard<TicketMutex> lock(mutex_);
    return working_.bytes();
  }

  // The plan for a request of `tokens` tokens reading `word_rows` word-embedding rows (unknown:
  // the length bucket's): the two-stage planner's (cached per bucket and rows; replanned when the
  // target or the preload budget changes). Without a device profile: the whole model at the
  // highest stored bitwidth (a latency target then is an error).
  ElasticPlan plan_for(std::size_t tokens, std::optional<std::size_t> word_rows = {}) {
    std::lock_guard<TicketMutex> lock(mutex_);
    return plan_locked(tokens, word_rows);
  }

  EngineResult run(std::string_view text) { return run(tokenizer_.encode(text)); }
  EngineResult run(const Encoding& tokens) {
    std::lock_guard<TicketMutex> lock(mutex_);
    const std::size_t len = checked_sequence_length(tokens, 0, config().max_position_embeddings);
    // Planned for the word-row reads it issues (rows not cached; nearby rows share a read) and the
    // preload versions held now (the first request, or the first after the budget grew, is planned
    // for what the buffer holds; its reads fill it).
    const ElasticPlan planned = plan_locked(len, word_rows_.reads_needed(std::span(tokens.input_ids).first(len)),
                                            [this](const ShardKey& k) { return preload_.contains(k); });
    EngineResult r = run_locked(tokens, planned.submodel, planned.preload);
    r.plan_note = planned.explain;
    r.estimated_ms = planned.estimated_ms;
    r.estimated_compute_ms = planned.estimated_compute_ms;
    report_deadline(r, options_.target_ms);
    r.io_scale = load_scale_.io;
    r.compute_scale = load_scale_.compute;
    if (planner_ && options_.reprofile) track_load(r.timeline, planned.estimated_compute_ms / load_scale_.compute);
    return r;
  }
  // Runs the caller's plan; the preload buffer keeps its first shards in layer order that fit.
  EngineResult run(const Encoding& tokens, const SubmodelPlan& plan) {
    std::lock_guard<TicketMutex> lock(mutex_);
    check_submodel_plan(store_, plan);
    EngineResult r = run_locked(tokens, plan, preload_set(plan, preload_.budget_bytes(), version_bytes_fn()));
    report_deadline(r, options_.target_ms);
    return r;
  }

  // Reads what the preload buffer should hold and is missing, now (before the first request, say),
  // through the same backend: for the planner's plan of a `tokens`-token request (reading
  // `word_rows` word rows; unknown: the bucket's length), or for `plan`.
  void preload_now(std::size_t tokens, std::optional<std::size_t> word_rows = {}) {
    std::lock_guard<TicketMutex> lock(mutex_);
    const ElasticPlan planned = plan_locked(tokens, word_rows);
    fill_preload(planned.submodel, planned.preload);
  }
  void preload_now(const SubmodelPlan& plan) {
    std::lock_guard<TicketMutex> lock(mutex_);
    check_submodel_plan(store_, plan);
    fill_preload(plan, preload_set(plan, preload_.budget_bytes(), version_bytes_fn()));
  }

 private:
  using Clock = std::chrono::steady_clock;

  static std::unique_ptr<ReadBackend> open_backend(const std::filesystem::path& path, const EngineOptions& o,
                                                   std::string& note) {
    std::unique_ptr<ReadBackend> backend = open_read_backend(path, o.backend, &note);
    return inject_faults(emulate_storage(std::move(backend), storage_profile(o.storage), o.storage_device), o.faults);
  }

  // A request slower than its target says so, and what held it up: the word rows, or the layer
  // whose read kept compute waiting longest (a late read shows there), or compute itself.
  static void report_deadline(EngineResult& r, double target_ms) {
    r.target_ms = target_ms > 0 ? target_ms : 0;
    const Timeline& t = r.timeline;
    if (target_ms <= 0 || t.total_ms <= target_ms) return;
    r.deadline_missed = true;
    r.deadline_note = concat("took ", float_text(static_cast<float>(t.total_ms)), " ms, over the target of ",
                             float_text(static_cast<float>(target_ms)), " ms (estimated ",
                             float_text(static_cast<float>(r.estimated_ms)), " ms for the layers)");
    std::size_t worst = 0;
    for (std::size_t l = 1; l < t.layers.size(); ++l) {
      if (t.layers[l].stall_ms > t.layers[worst].stall_ms) worst = l;
    }
    const double embed_ms = t.embed_end_ms - t.embed_start_ms;
    const double stall_ms = t.layers.empty() ? 0 : t.layers[worst].stall_ms;
    if (stall_ms > 0 && stall_ms >= embed_ms) {
      r.stalled_layer = worst;
      const LayerTimes& x = t.layers[worst];
      r.deadline_note += concat(": layer ", worst, " stalled compute ", float_text(static_cast<float>(stall_ms)),
                                " ms waiting for its read (", float_text(static_cast<float>(x.read_end_ms - x.io_start_ms)),
                                " ms for ", x.bytes_read, " bytes)");
    } else if (embed_ms > 0 && embed_ms >= stall_ms) {
      r.deadline_note += concat(": the word rows took ", float_text(static_cast<float>(embed_ms)), " ms (",
                                t.word_rows_read, " read)");
    }
    if (r.stalled_layer.has_value() == false && stall_ms <= 0) {
      r.deadline_note += concat("; compute took ", float_text(static_cast<float>(t.compute_ms())), " ms");
    }
  }

  // Online re-profiling: the request's times against the unscaled profile; a new planner on the
  // scaled profile when they have drifted (its plan cache starts empty).
  void track_load(const Timeline& t, double profiled_compute_ms) {
    load_.observe(*base_profile_, t, profiled_compute_ms);
    if (!load_.should_replan(load_scale_)) return;
    load_scale_ = load_.measured();
    DeviceProfile scaled = LoadTracker::scaled(*base_profile_, load_scale_);
    PlannerOptions planner = planner_options(scaled);
    planner_.emplace(std::move(scaled), options_.ranking, std::move(planner));
    if (shape_accuracy_) planner_->set_shape_accuracy(shape_accuracy_);
  }

  // The planner's view of this engine: the store's version sizes, its reads as the layer reader
  // issues them, and the word rows' reads (one aligned block each).
  PlannerOptions planner_options(const DeviceProfile& profile) const {
    PlannerOptions planner;
    planner.target_ms = options_.target_ms;
    planner.preload_budget_bytes = options_.preload_bytes;
    planner.slots = pipeline_slots(options_, store_.num_layers());
    planner.min_bits = options_.min_bits;
    planner.headroom = options_.target_headroom;
    planner.importance = options_.importance;
    planner.version_bytes = version_bytes_fn();
    planner.layer_io = layer_io_model(
        profile, [this](std::size_t l, std::span<const ShardChoice> v) { return layer_reader_.read_count(l, v); });
    const std::size_t a = backend_->alignment();
    planner.row_read_ms =
        estimated_row_read_ms(profile, static_cast<double>(a > 1 ? a : store_.max_word_row_bytes()));
    return planner;
  }

  std::function<std::size_t(const ShardKey&)> version_bytes_fn() const {
    return [this](const ShardKey& k) {
      return static_cast<std::size_t>(store_.version_info(k.layer, k.shard, k.bits).size);
    };
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
    require(options_.target_ms <= 0, "engine: a latency target needs a device profile (tools/profile makes one)");
    ElasticPlan whole;
    whole.submodel =
        SubmodelPlan::uniform(store_.num_layers(), store_.shards_per_layer(), store_.bits().back(), options_.ranking);
    whole.preload = preload_set(whole.submodel, preload_.budget_bytes(), version_bytes_fn());
    whole.valid = whole.meets_target = true;
    whole.explain = "no device profile: the whole model at " + std::to_string(store_.bits().back()) + " bits";
    return whole;
  }

  // The versions of layer l of `plan` that the preload buffer does not hold.
  std::vector<ShardChoice> missing_of(std::size_t l, const SubmodelPlan& plan) const {
    std::vector<ShardChoice> missing;
    for (const ShardChoice& c : plan.layers[l]) {
      if (!preload_.contains({l, c.shard, c.bits})) missing.push_back(c);
    }
    return missing;
  }

  void keep_preloaded(std::size_t l, const ShardChoice& c, std::span<const std::byte> bytes) {
    preload_.insert({l, c.shard, c.bits}, bytes,
                    [&](std::span<const std::byte> copy) { return store_.view_version(l, c.shard, c.bits, copy); });
  }

  void fill_preload(const SubmodelPlan& plan, const std::set<ShardKey>& wanted) {
    preload_.retain_only(wanted);
    for (std::size_t l = 0; l < plan.layers.size(); ++l) {
      std::vector<ShardChoice> missing;
      for (const ShardChoice& c : plan.layers[l]) {
        if (wanted.count({l, c.shard, c.bits}) != 0 && !preload_.contains({l, c.shard, c.bits})) missing.push_back(c);
      }
      if (missing.empty()) continue;
      WorkingBuffer::Bytes buffer(layer_reader_.buffer_bytes(l, missing));
      LayerTimes ignored;
      const std::vector<ReadVersion> read = layer_reader_.read(l, missing, buffer.span(), ignored, Clock::now());
      for (std::size_t i = 0; i < missing.size(); ++i) keep_preloaded(l, missing[i], read[i].bytes);
    }
  }

  // One request: word rows, embedding, the layer pipeline, pooling, head. `wanted`: the versions
  // the preload buffer should hold after it. `plan` has passed check_submodel_plan (the callers
  // check a given plan; the planner's are valid by construction).
  EngineResult run_locked(const Encoding& tokens, const SubmodelPlan& plan, const std::set<ShardKey>& wanted) {
    const Clock::time_point start = Clock::now();
    const auto ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); };
    const EncoderConfig& c = config();
    const std::size_t d = c.hidden;
    const TokenBatch packed = pack_tokens(std::span(&tokens, 1), c);
    const std::size_t len = packed.tokens();
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
      EngineCore& e;
      ~Release() {
        if (!e.options_.keep_working_buffer) e.working_.release();
      }
    } release{*this};

    timeline.embed_start_ms = ms();
    std::vector<float>& hidden = working_.hidden;
    hidden.resize(len * d);
    word_rows_.read(packed.ids, hidden.data(), working_.word_rows, timeline);
    residents_.embed(std::span(&tokens, 1), packed, c, hidden.data(), options_.embedding_layer_norm);
    timeline.embed_end_ms = ms();

    const std::size_t n = plan.layers.size();
    const std::size_t slots = pipeline_slots(options_, n);
    std::set<ShardKey> in_use;
    for (std::size_t l = 0; l < n; ++l) {
      for (const ShardChoice& ch : plan.layers[l]) in_use.insert({l, ch.shard, ch.bits});
    }
    preload_.begin_request(wanted, in_use);
    struct EndRequest {  // also when the request fails: the buffer then holds only checked versions
      PreloadBuffer& buffer;
      const std::set<ShardKey>& wanted;
      ~EndRequest() { buffer.end_request(wanted); }
    } end_request{preload_, wanted};
    // What each layer reads: the preload buffer only gains versions of the layer being loaded
    // during the request (insert never evicts), so this stays true until that layer's load.
    std::vector<std::vector<ShardChoice>> missing(n);
    std::size_t slot_bytes = 0;
    for (std::size_t l = 0; l < n; ++l) {
      missing[l] = missing_of(l, plan);
      slot_bytes = std::max(slot_bytes, layer_reader_.buffer_bytes(l, missing[l]));
    }
    working_.reserve_slots(slots, slot_bytes);
    std::vector<std::vector<ShardView>> views(slots);

    LayerJobs jobs;
    jobs.load = [&](std::size_t l, std::size_t slot, LayerTimes& t) {
      t.shards_preloaded = plan.layers[l].size() - missing[l].size();
      std::vector<ReadVersion> read;
      if (!missing[l].empty()) {
        read = layer_reader_.read(l, missing[l], working_.slots[slot].span(), t, start);
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
    // A layer compute may still run a layer after run() returns (hetero/mapped_layer_compute.hpp):
    // the last layer's job waits for them (its compute span holds the wait), and a request that
    // fails before that waits here, so that nothing writes `hidden` after the request.
    jobs.compute = [&](std::size_t l, std::size_t slot) {
      const double converted = compute_->conversion_ms();
      compute_->run(c, l, store_.shard_shape(), views[slot], residents_.layer(l), hidden.data(), packed.offsets);
      timeline.layers[l].convert_ms = compute_->conversion_ms() - converted;
      if (l + 1 == n) compute_->finish();
    };
    struct FinishCompute {
      LayerCompute& compute;
      ~FinishCompute() {
        try {
          compute.finish();  // after a failure: the request's error is already on its way
        } catch (...) {
        }
      }
    } finish_compute{*compute_};
    LayerPipeline(io_, compute_executor_).run(n, slots, options_.mode, jobs, start, timeline.layers);
    preload_.end_request(wanted);

    timeline.head_start_ms = ms();
    result.embedding.resize(d);
    pool_tokens(hidden, len, d, options_.pooling, result.embedding);
    if (options_.normalize) l2_normalize(result.embedding);
    if (task_head_) {
      task_head_->head.apply(hidden.data(), len, d, result.logits, &pool_);
      result.head = "checkpoint";
      if (task_head_->head.pooling) {  // a classifier's label; a token classifier's logits are the answer
        result.scores = class_scores(task_head_->scores(), result.logits);
        result.label = static_cast<std::size_t>(std::max_element(result.scores.begin(), result.scores.end()) -
                                                result.scores.begin());
        result.label_name = task_head_->labels[*result.label];
      }
    } else {
      Classification classified = classifier_.classify(plan, result.embedding);
      result.logits = std::move(classified.logits);
      result.label = classified.label;
      result.head = std::move(classified.head);
    }
    timeline.head_end_ms = ms();
    result.working_buffer_bytes = working_.bytes();
    result.preload_held_bytes = preload_.held_bytes();
    result.word_cache_held_bytes = word_rows_.cache().held_bytes();
    timeline.total_ms = ms();
    return result;
  }

  EngineOptions options_;
  ShardStore store_;
  std::string backend_note_;
  std::unique_ptr<ReadBackend> backend_;
  LayerReader layer_reader_;
  WordRowReader word_rows_;
  StoreResidents residents_;
  std::optional<Planner> planner_;  // with a device profile
  std::optional<DeviceProfile> base_profile_;  // reprofile: the profile as measured (planner_'s is scaled)
  LoadTracker load_;
  LoadScale load_scale_;  // the scaling planner_'s profile has
  std::function<double(std::size_t, std::size_t)> shape_accuracy_;  // the heads' (set_heads), for a new planner
  WordPieceTokenizer tokenizer_;
  Classifier classifier_;
  std::optional<CheckpointHead> task_head_;  // set_task_head's, in place of classifier_
  ThreadPool pool_;
  PreloadBuffer preload_;
  WorkingBuffer working_;
  std::unique_ptr<LayerCompute> compute_;
  mutable TicketMutex mutex_;  // one request at a time, in order of arrival; setters wait for it

  // Last: the executors' threads stop before anything they might touch is destroyed.
  Executor io_{"io"};
  Executor compute_executor_{"compute", mark_thread_cpu_bound};
};

}  // namespace stile::detail

namespace stile {

Engine::Engine(const std::filesystem::path& store_path, EngineOptions options)
    : core_(std::make_unique<detail::EngineCore>(store_path, std::move(options), std::nullopt)) {}
Engine::Engine(const std::filesystem::path& store_path, EngineOptions options, std::optional<DeviceProfile> profile)
    : core_(std::make_unique<detail::EngineCore>(store_path, std::move(options), std::move(profile))) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const ShardStore& Engine::store() const noexcept { return core_->store(); }
const EncoderConfig& Engine::config() const noexcept { return core_->config(); }
const EngineOptions& Engine::options() const noexcept { return core_->options(); }
const WordPieceTokenizer& Engine::tokenizer() const noexcept { return core_->tokenizer(); }
std::string Engine::backend_description() const { return core_->backend_description(); }
std::size_t Engine::read_alignment() const noexcept { return core_->read_alignment(); }
const std::string& Engine::backend_note() const noexcept { return core_->backend_note(); }
const DeviceProfile* Engine::profile() const noexcept { return core_->profile(); }
void Engine::set_target_ms(double target_ms) { core_->set_target_ms(target_ms); }
double Engine::target_ms() const { return core_->target_ms(); }
void Engine::set_preload_budget(std::size_t bytes) { core_->set_preload_budget(bytes); }
void Engine::set_head(LinearHead head) { core_->set_head(std::move(head)); }
void Engine::set_heads(HeadsFile heads) { core_->set_heads(std::move(heads)); }
void Engine::set_task_head(CheckpointHead head) { core_->set_task_head(std::move(head)); }
void Engine::set_layer_compute(std::unique_ptr<LayerCompute> compute) { core_->set_layer_compute(std::move(compute)); }
void Engine::set_word_cache_budget(std::size_t bytes) { core_->set_word_cache_budget(bytes); }
std::size_t Engine::word_cache_held_bytes() const { return core_->word_cache_held_bytes(); }
std::size_t Engine::word_rows_to_read(const Encoding& tokens) const { return core_->word_rows_to_read(tokens); }
std::size_t Engine::word_row_reads(const Encoding& tokens) const { return core_->word_row_reads(tokens); }
std::vector<ShardKey> Engine::preloaded() const { return core_->preloaded(); }
std::size_t Engine::preload_held_bytes() const { return core_->preload_held_bytes(); }
std::size_t Engine::resident_bytes() const { return core_->resident_bytes(); }
std::size_t Engine::working_buffer_bytes() const { return core_->working_buffer_bytes(); }
ElasticPlan Engine::plan_for(std::size_t tokens, std::optional<std::size_t> word_rows) {
  return core_->plan_for(tokens, word_rows);
}
EngineResult Engine::run(std::string_view text) { return core_->run(text); }
EngineResult Engine::run(const Encoding& tokens) { return core_->run(tokens); }
EngineResult Engine::run(const Encoding& tokens, const SubmodelPlan& plan) { return core_->run(tokens, plan); }
void Engine::preload_now(std::size_t tokens, std::optional<std::size_t> word_rows) {
  core_->preload_now(tokens, word_rows);
}
void Engine::preload_now(const SubmodelPlan& plan) { core_->preload_now(plan); }

}  // namespace stile
