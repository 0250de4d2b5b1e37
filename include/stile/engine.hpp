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
//   engine.set_task_head(load_head_sidecar("model.stile.head.safetensors", engine.config()));
//   std::ofstream("trace.json") << to_chrome_trace(r.timeline);
//
// Memory between requests: the store's metadata, the resident parameters (biases, LayerNorms,
// position and token-type embeddings; a low-rank word table's V matrices and token map), the
// tokenizer's vocabulary, the preload buffer and the word-row cache (pipeline/word_row_cache.hpp,
// rows as stored; each request is planned for the reads of the rows it still lacks). During a
// request, also the working buffer: `slots` layers' compressed shards, the word rows read, the
// activations and the layer's workspace (released after the request unless keep_working_buffer).
//
// The request stages (each in its own header; the engine wires them and takes the lock):
//   plan            plan/planner.hpp (two-stage planner) or the caller's plan
//   word rows       pipeline/word_rows.hpp (reads and the word-row cache)
//   embedding       model/store_encoder.hpp (residents, position and type rows, LayerNorm)
//   layer reads     pipeline/layer_reader.hpp (one coalescing rule for the cost and the reads)
//   layer compute   ops/layer_compute.hpp (one interface: CPU today; a split layer later)
//   IO | compute    pipeline/layer_pipeline.hpp (the coroutine pipeline over the working buffer,
//                   pipeline/working_buffer.hpp; the preload buffer, pipeline/preload_buffer.hpp)
//   pooling, head   model/pooling.hpp, model/classifier.hpp (or a checkpoint's head:
//                   model/checkpoint_head.hpp)
//
// Thread safety: any number of threads may call one engine. Requests (run, preload_now, plan_for)
// and the setters (set_target_ms, set_preload_budget, set_word_cache_budget, set_head, set_heads, set_task_head,
// set_layer_compute) take turns on one lock that admits callers in the order they arrived (a
// ticket lock, core/ticket_mutex.hpp): a setter called during a request waits for it and takes
// effect from the next request on; two requests never overlap, and each gives the result it would
// give run alone after the same calls before it. What runs concurrently: tokenizing
// run(string_view)'s text (before the lock), and inside a request its IO lane (the io executor)
// with its compute lane (the compute executor and the thread pool). The getters that report
// state (target_ms, preloaded, the held and working bytes, word_rows_to_read) take the same lock;
// store(), config(), tokenizer(), profile(), resident_bytes() and the backend's description are
// fixed at construction and need none. options() is the options as constructed and as the setters
// changed them: read it while no setter runs.
//
// Failures: a failed read (an I/O error, a short read, bytes that fail their checksum) throws
// stile::Error naming the store, the layer, the shards and their bitwidths (or the word rows); it
// fails only that request, and neither the preload buffer nor the word-row cache keeps anything
// of the read that failed. A request slower than its target is not an error: the result says so
// (deadline_missed, deadline_note: the measured latency and what stalled).
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stile/io/read_backend.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/submodel.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/pipeline/pipeline_mode.hpp"
#include "stile/pipeline/timeline.hpp"
#include "stile/plan/elastic_plan.hpp"

namespace stile {

// Declared here, defined in their own headers (include those to make or read one): this header
// stays light for a host that only runs a model (engine_impl.hpp holds the engine itself).
struct EncoderConfig;      // io/encoder_config.hpp
struct DeviceProfile;      // plan/device_profile.hpp
struct Encoding;           // text/wordpiece.hpp
struct HeadsFile;          // model/heads_file.hpp
struct LinearHead;         // model/linear_head.hpp
struct CheckpointHead;     // model/checkpoint_head.hpp
class LayerCompute;        // ops/layer_compute.hpp
class ShardStore;          // store/shard_store.hpp
class FaultInjector;       // io/fault_injection.hpp
class EmulatedDevice;      // io/storage_emulator.hpp
class WordPieceTokenizer;  // text/wordpiece.hpp
namespace detail {
class EngineCore;
}

struct EngineOptions {
  ReadBackendOptions backend{};      // io_uring with O_DIRECT by default (falls back, see backend_note())
  std::string storage = "none";      // storage emulator profile: emmc, sd, nvme, none
  // The emulated device the reads queue on (io/storage_emulator.hpp), shared with another reader
  // of the same board's flash; null: a device of the engine's own.
  std::shared_ptr<EmulatedDevice> storage_device{};
  double target_ms = 0;              // the planner's latency target; <= 0: none (highest bitwidth)
  ShardRanking ranking{};            // shard importance per layer (plan/importance); empty: shard order
  ImportanceOrder importance{};      // the global importance order (plan/importance); empty: by rank
  unsigned min_bits = 0;             // the planner's bitwidth floor (PlannerOptions::min_bits)
  double target_headroom = 0.05;     // share of the target the planner keeps free (PlannerOptions::headroom)
  std::size_t preload_bytes = 0;     // the preload buffer's budget
  std::size_t word_cache_bytes = 0;  // the word-row cache's budget (rows kept between requests)
  std::size_t threads = 0;           // compute threads (0: one per core)
  LayerTiles tiles{};                // {0, 0}: the untiled layer; else the tiled one
  OpFormats ops{};                   // LayerNorm, GELU, softmax formats (GEMMs: the shards' codec)
  NormFormat embedding_layer_norm = NormFormat::kF32;  // the embedding LayerNorm's format
  // The linear layers: kF32 dequantizes the shards inside the fp32 GEMM; kInt8 decodes them to
  // int8 and runs the int8 GEMM (ops/sharded_layer.hpp). The device profile's T_comp is the
  // format it was measured in.
  LinearFormat shard_linear = LinearFormat::kF32;
  std::size_t layers_in_flight = 2;  // working-buffer slots: IO runs at most this many layers ahead
  PipelineMode mode = PipelineMode::pipelined;
  bool keep_working_buffer = false;  // keep it allocated between requests (no allocation per request)
  std::size_t max_tokens = 256;      // the tokenizer's truncation ([CLS] and [SEP] included)
  Pooling pooling = Pooling::kMean;  // all-MiniLM-L6-v2: mean pooling, then L2 normalization
  bool normalize = true;
  // Faults injected into the reads (io/fault_injection.hpp; outside the storage emulator, so a
  // late read's spike is a multiple of the emulated time); null: none. For tests and soaks.
  std::shared_ptr<FaultInjector> faults{};
  // Online re-profiling (plan/load_tracker.hpp; needs a device profile): after each planned
  // request, compare its measured compute and IO with the profile's, keep the 90% quantile of
  // each ratio over the last 15 requests, and re-plan with the profile scaled by them when one
  // moves by more than 5%
  // (a device busier than when it was profiled gets smaller plans; one that is idle again, the
  // profiled ones).
  bool reprofile = false;
};

// The working-buffer slots a request of `layers` layers runs with under `o`: one per layer when
// loading then executing, else layers_in_flight (at least 1, at most the layers).
inline std::size_t pipeline_slots(const EngineOptions& o, std::size_t layers) {
  if (o.mode == PipelineMode::load_then_execute) return std::max<std::size_t>(layers, 1);
  return std::clamp<std::size_t>(o.layers_in_flight, 1, std::max<std::size_t>(layers, 1));
}

struct EngineResult {
  std::vector<float> embedding;      // [hidden] pooled (and normalized) sentence embedding
  std::vector<float> logits;         // [classes] when a head is set (for this plan's shape); a token
                                     // classifier's (set_task_head): [tokens x labels], for scored_tokens
  std::optional<std::size_t> label;  // argmax of the logits when a head is set
  std::string head;                  // the heads file's key of the head used ("" for set_head's,
                                     // "checkpoint" for set_task_head's)
  std::vector<double> scores;        // set_task_head's: each label's score (CheckpointHead::scores(): a
                                     // cross-encoder's relevance for a pair, run(Encoding) of encode_pair)
  std::string label_name;            // set_task_head's: the label's name (config.json's id2label)
  std::size_t tokens = 0;
  SubmodelPlan plan;
  Timeline timeline;
  std::string plan_note;                  // the planner's account of the plan (empty for a given plan)
  double estimated_ms = 0;                // the planner's estimate of the layers' time (0: given plan)
  double estimated_compute_ms = 0;        // its part for the layers' compute (0: given plan)
  std::size_t working_buffer_bytes = 0;   // the working buffer's size during this request
  std::size_t preload_held_bytes = 0;     // the preload buffer after this request
  std::size_t word_cache_held_bytes = 0;  // the word-row cache after this request
  double target_ms = 0;                   // the target this request ran under (0: none)
  bool deadline_missed = false;           // timeline.total_ms > target_ms > 0
  std::string deadline_note;              // when missed: the latency, the target and what stalled
  std::optional<std::size_t> stalled_layer;  // when missed: the layer whose read stalled compute longest
  double io_scale = 1, compute_scale = 1;  // reprofile: the profile's scaling this request was planned with
};

class Engine {
 public:
  // Opens the store and its backend; with a device profile (tools/profile), the two-stage
  // planner plans each request for the target, else every request runs the whole model at the
  // highest stored bitwidth. Throws stile::Error naming the file on a bad store or profile.
  explicit Engine(const std::filesystem::path& store_path, EngineOptions options = {});
  Engine(const std::filesystem::path& store_path, EngineOptions options, std::optional<DeviceProfile> profile);
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  const ShardStore& store() const noexcept;
  const EncoderConfig& config() const noexcept;
  const EngineOptions& options() const noexcept;
  const WordPieceTokenizer& tokenizer() const noexcept;
  std::string backend_description() const;
  // The backend's buffer and offset alignment (4096 with O_DIRECT, 1 for buffered reads).
  std::size_t read_alignment() const noexcept;
  // Why the backend is not the one asked for (io_uring or O_DIRECT unavailable); empty if it is.
  const std::string& backend_note() const noexcept;
  // The device profile the planner uses; null when the engine has none.
  const DeviceProfile* profile() const noexcept;

  void set_target_ms(double target_ms);
  double target_ms() const;
  // Shrinking evicts at once, from the top layers down; growing is filled by the next requests'
  // reads (or preload_now()).
  void set_preload_budget(std::size_t bytes);
  // One head for every plan (set_heads' per-shape heads take precedence when both are set).
  void set_head(LinearHead head);
  // A head per submodel shape (tools/train_heads): each request is classified by the head of
  // its plan's shape (none, no label: a plan of uneven widths, or a shape the file lacks), and the
  // planner's shrink compares shapes by the heads' calibration accuracies. The heads must be for
  // this store and must keep the shards the engine's importance ranking keeps.
  void set_heads(HeadsFile heads);
  // A fine-tuned checkpoint's own head (load_head_sidecar: the store's STORE.head.safetensors,
  // written by convert), kept resident. A sequence classifier's (or cross-encoder's) classifies
  // every request from the last hidden states, in place of set_head's and set_heads' heads (label,
  // label_name, scores); a token classifier's gives each token's logits, which scored_tokens and
  // window_entities (model/task_model.hpp, model/token_entities.hpp) turn into entities for a
  // request run(Encoding) tokenized with offsets.
  void set_task_head(CheckpointHead head);
  // Replaces where each layer's compute runs (the CPU thread pool by default): a layer split
  // between processors or devices. It runs on the engine's compute executor, one layer at a time.
  void set_layer_compute(std::unique_ptr<LayerCompute> compute);
  void set_word_cache_budget(std::size_t bytes);
  std::size_t word_cache_held_bytes() const;
  // The word rows a request of these tokens would read now (its distinct tokens not cached).
  std::size_t word_rows_to_read(const Encoding& tokens) const;
  // The read requests those rows take (rows near each other in the file share one): what the
  // request is planned for.
  std::size_t word_row_reads(const Encoding& tokens) const;
  std::vector<ShardKey> preloaded() const;
  std::size_t preload_held_bytes() const;
  // Bytes held for good besides the two buffers: the store's metadata (manifest, dictionaries, row
  // checksums), the resident parameters (biases, LayerNorms), the position and token-type
  // embeddings, and the vocabulary (counted at its text size).
  std::size_t resident_bytes() const;
  // Bytes the working buffer holds now (zero between requests unless keep_working_buffer).
  std::size_t working_buffer_bytes() const;

  // The plan for a request of `tokens` tokens reading `word_rows` word-embedding rows (unknown:
  // the length bucket's): the two-stage planner's (cached per bucket and rows; replanned when the
  // target or the preload budget changes). Without a device profile: the whole model at the
  // highest stored bitwidth (a latency target then is an error).
  ElasticPlan plan_for(std::size_t tokens, std::optional<std::size_t> word_rows = {});

  // A request: tokenized (or the caller's tokens), planned for the word rows it reads and the
  // preload versions held now, run. Throws stile::Error on a failed read or bad input; the next
  // request is unaffected.
  EngineResult run(std::string_view text);
  EngineResult run(const Encoding& tokens);
  // Runs the caller's plan; the preload buffer keeps its first shards in layer order that fit.
  EngineResult run(const Encoding& tokens, const SubmodelPlan& plan);

  // Reads what the preload buffer should hold and is missing, now (before the first request, say),
  // through the same backend: for the planner's plan of a `tokens`-token request (reading
  // `word_rows` word rows; unknown: the bucket's length), or for `plan`.
  void preload_now(std::size_t tokens, std::optional<std::size_t> word_rows = {});
  void preload_now(const SubmodelPlan& plan);

 private:
  std::unique_ptr<detail::EngineCore> core_;
};

}  // namespace stile
