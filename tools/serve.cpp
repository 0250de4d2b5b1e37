// stile-serve: an HTTP server over stile's encoders, for a board or a laptop.
//
//   stile-serve --model all-MiniLM-L6-v2                     # embeddings
//   stile-serve --task-model ms-marco-MiniLM-L6-v2 --port 8081  # rerank / classify
//   stile-serve --store minilm.stile --storage emmc --target-ms 40   # the elastic engine
//
// Endpoints (docs/serving.md has the request and response shapes, the status codes and limits):
//   POST /v1/embeddings  OpenAI's embeddings API (input a text or a list; encoding_format float or
//                        base64; dimensions; usage)
//   POST /embed          text-embeddings-inference's embed
//   POST /rerank         text-embeddings-inference's rerank (a cross-encoder)
//   POST /classify       text-embeddings-inference's predict (a sequence classifier)
//   GET  /health, /metrics (Prometheus), /v1/models, /info
//
// In-memory models batch the requests queued at once by a token budget (the encoder packs the
// sequences: no padding is computed); the elastic engine runs one request at a time under the
// latency target the request names (field target_ms or header X-Stile-Target-Ms). SIGTERM or
// SIGINT: stop accepting, answer what was accepted, exit 0.
//
// Exit status: 0 after a signal, 1 a runtime error (a bad model, the port taken), 2 a usage error.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "cli.hpp"
#include "serve/api_requests.hpp"
#include "serve/batch_queue.hpp"
#include "serve/metrics.hpp"
#include "serve/responses.hpp"
#include "sidecar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/engine.hpp"
#include "stile/model/checkpoint_head.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/model/task_model.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/importance.hpp"

namespace {

using stile_serve::Api;
using stile_serve::ApiError;

struct Options {
  std::optional<std::filesystem::path> model, task_model, store;
  std::string served_name;
  std::string host = "127.0.0.1";
  std::size_t port = 8080;
  std::size_t threads = 0;
  std::size_t http_threads = 48;  // more than max_queue, so the queue, not the threads, is what fills
  std::string precision = "fp32";
  std::size_t max_body_bytes = 2 << 20;
  stile_serve::Limits limits;
  std::size_t max_batch_tokens = 16384;
  std::size_t max_queue = 32;
  double queue_timeout_s = 30;
  double read_timeout_s = 5;
  double write_timeout_s = 5;
  bool auto_truncate = false;
  stile::EngineOptions engine;
  std::size_t preload_kb = 0;
};

Options parse_options(int argc, char** argv) {
  Options o;
  stile_cli::Parser cli("stile-serve", "[options]",
                        "Serves stile's encoders over HTTP: OpenAI's /v1/embeddings, text-embeddings-inference's "
                        "/embed, /rerank and /predict (as /classify), /health and Prometheus /metrics. Give "
                        "--model, --task-model, or both, or --store.");
  cli.flag("--model", "DIR", "a sentence-transformers model directory: /v1/embeddings and /embed", o.model);
  cli.flag("--task-model", "DIR",
           "a checkpoint with a sequence-classification head: /classify, and /rerank when it is a cross-encoder "
           "(one output)",
           o.task_model);
  cli.flag("--store", "STORE",
           "a shard store (convert): the elastic engine, with STORE.profile.json, STORE.importance.json and "
           "STORE.head.safetensors when they exist: /v1/embeddings, /embed, and /classify with a head",
           o.store);
  cli.flag("--served-model-name", "NAME", "the model name in answers (default: the directory's name)", o.served_name);
  cli.flag("--host", "ADDR", "the address to listen on (0.0.0.0: every interface)", o.host);
  cli.flag("--port", "N", "the port (0: any free one, printed at start)", o.port).range(0, 65535);
  cli.threads(o.threads, "threads the encoder computes with (0: one per core)");
  cli.flag("--http-threads", "N", "connections served at once (each kept-alive connection holds one)", o.http_threads)
      .range(1, 4096);
  cli.precision(o.precision);
  cli.simd_target();
  cli.flag("--max-body-bytes", "B", "the largest request body (larger: 413)", o.max_body_bytes).at_least(1);
  cli.flag("--max-texts", "N", "texts per request (more: 413)", o.limits.max_texts).at_least(1);
  cli.toggle("--auto-truncate",
             "cut a text longer than the model takes to its length (default: answer 413, unless the request "
             "says truncate: true)",
             o.auto_truncate);
  cli.flag("--max-batch-tokens", "N", "tokens the encoder runs at once across requests", o.max_batch_tokens)
      .at_least(1);
  cli.flag("--max-queue", "N", "requests waiting for the encoder (more: 503)", o.max_queue).at_least(1);
  cli.flag("--queue-timeout-s", "S", "longest wait for the encoder before 503", o.queue_timeout_s).range(0.001, 3600);
  cli.flag("--read-timeout-s", "S", "longest wait for a client's next bytes (then the connection is closed)",
           o.read_timeout_s)
      .range(0.001, 3600);
  cli.flag("--write-timeout-s", "S", "longest wait to send to a client", o.write_timeout_s).range(0.001, 3600);
  cli.flag("--target-ms", "T", "--store: the latency target of a request that names none (default: none)",
           o.engine.target_ms);
  cli.flag("--preload-kb", "K", "--store: the preload buffer's budget in KiB", o.preload_kb);
  cli.storage(o.engine.storage);
  cli.example("stile-serve --model all-MiniLM-L6-v2 --port 8080");
  cli.example(
      "curl -s localhost:8080/v1/embeddings -H 'Content-Type: application/json' -d '{\"input\": [\"a "
      "charming film\"], \"model\": \"all-MiniLM-L6-v2\"}'");
  if (!cli.parse(argc, argv).empty()) cli.fail("stile-serve takes no positional arguments");
  if (!o.model && !o.task_model && !o.store) cli.fail("give --model, --task-model or --store");
  if (o.store && (o.model || o.task_model)) cli.fail("--store serves alone: give it without --model and --task-model");
  if (o.served_name.empty()) {
    const std::filesystem::path& p = o.model ? *o.model : o.task_model ? *o.task_model : *o.store;
    o.served_name = std::filesystem::path(p).lexically_normal().filename().string();
    if (o.served_name.empty())
      o.served_name = std::filesystem::path(p).lexically_normal().parent_path().filename().string();
  }
  o.engine.preload_bytes = o.preload_kb * 1024;
  o.engine.threads = o.threads;
  return o;
}

// What a request asks the encoder for; jobs of one kind (and one prompt) batch together.
enum class Kind { kEmbed, kClassify, kPairScores };

struct EngineAccount {
  std::size_t tokens = 0;
  double estimated_ms = 0, total_ms = 0, target_ms = 0;
  bool deadline_missed = false;
};

struct Job : stile_serve::QueuedJob {
  Kind kind = Kind::kEmbed;
  std::vector<stile::Encoding> inputs;
  std::size_t prompt_tokens = 0;
  double target_ms = 0;  // the engine's target for this request (0: none)
  // Filled by the run: per input, the embedding (kEmbed) or the logits, the scores and the engine's account.
  std::vector<std::vector<float>> rows;
  std::vector<std::vector<double>> scores;
  std::vector<EngineAccount> accounts;
};

class Server {
 public:
  explicit Server(Options options) : o_(std::move(options)) {
    const stile::ModelPrecision precision = stile::precision_preset(o_.precision);
    if (o_.model) embedder_.emplace(stile::SentenceEncoder::load(*o_.model, precision));
    if (o_.task_model) {
      task_.emplace(stile::TaskModel::load(*o_.task_model, precision));
      if (task_->task() != stile::HeadTask::kSequenceClassification) {
        throw stile::Error(stile::concat("stile: ", o_.task_model->string(), ": the model's head is ",
                                         stile::to_string(task_->task()),
                                         "; stile-serve serves sequence classifiers and cross-encoders"));
      }
    }
    if (o_.store) open_engine(*o_.store);
    pool_ = std::make_unique<stile::ThreadPool>(o_.threads);
    // The engine plans one request at a time for its target: one job per run.
    const std::size_t jobs_per_batch = engine_ ? 1 : o_.max_queue + 1;
    queue_ = std::make_unique<stile_serve::BatchQueue<Job>>(o_.max_queue, o_.max_batch_tokens, jobs_per_batch,
                                                            [this](std::span<Job* const> jobs) { run_batch(jobs); });
    routes();
  }

  // Binds and prints the address; then serves until stop().
  int listen() {
    const int port = o_.port == 0
                         ? http_.bind_to_any_port(o_.host)
                         : (http_.bind_to_port(o_.host, static_cast<int>(o_.port)) ? static_cast<int>(o_.port) : -1);
    if (port < 0) {
      fmt::print(stderr, "stile-serve: cannot listen on {}:{}\n", o_.host, o_.port);
      return 1;
    }
    fmt::print("stile-serve: serving {} on http://{}:{}/ ({})\n", o_.served_name, o_.host, port, describe());
    std::fflush(stdout);
    http_.listen_after_bind();
    queue_->stop();
    return 0;
  }

  // Graceful: no new connections or jobs; what was accepted is answered.
  void stop() {
    stopping_ = true;
    http_.stop();
  }
  [[nodiscard]] bool stopping() const { return stopping_; }

 private:
  void open_engine(const std::filesystem::path& store) {
    stile::EngineOptions options = o_.engine;
    if (const auto p = stile_cli::existing_sidecar(store, stile_cli::Sidecar::importance)) {
      stile::ShardImportance importance = stile::load_importance(*p);
      options.ranking = std::move(importance.ranking);
      options.importance = std::move(importance.order);
    }
    std::optional<stile::DeviceProfile> profile;
    if (const auto p = stile_cli::existing_sidecar(store, stile_cli::Sidecar::profile)) {
      profile = stile::DeviceProfile::load(*p);
    }
    engine_ = std::make_unique<stile::Engine>(store, options, std::move(profile));
    if (const std::filesystem::path head = stile::head_path_for(store); std::filesystem::exists(head)) {
      stile::CheckpointHead h = stile::load_head_sidecar(head, engine_->config());
      if (h.task == stile::HeadTask::kSequenceClassification) {
        engine_labels_ = h.labels;
        engine_->set_task_head(std::move(h));
      }
    }
  }

  [[nodiscard]] std::string describe() const {
    std::vector<std::string> parts;
    if (embedder_) parts.push_back(fmt::format("embeddings of {} dimensions", embedder_->dim()));
    if (task_) {
      parts.push_back(
          fmt::format("{} labels{}", task_->labels().size(), task_->head().outputs() == 1 ? ", a cross-encoder" : ""));
    }
    if (engine_) {
      parts.push_back(fmt::format("the elastic engine, {}, target {}", engine_->backend_description(),
                                  o_.engine.target_ms > 0 ? fmt::format("{} ms", o_.engine.target_ms) : "none"));
    }
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
    return out;
  }

  // ---- tokenizing, on the HTTP threads ----

  // The model's tokens for a text (or a pair); a text longer than the model takes is cut when
  // truncating, else refused with 413.
  [[nodiscard]] stile::Encoding encode(const std::string& text, const std::optional<std::string>& pair,
                                       const std::optional<std::string>& prompt, std::optional<bool> truncate,
                                       std::string_view field, const stile::Tokenizer* tokenizer) const {
    const bool cut = truncate.value_or(o_.auto_truncate);
    stile::Encoding e;
    std::size_t limit = 0;
    bool too_long = false;
    try {
      if (engine_) {
        const stile::WordPieceTokenizer& t = engine_->tokenizer();
        limit = t.options().max_length;
        e = t.encode(text, stile::kNoTruncation);
        too_long = e.size() > limit;
        if (too_long && cut) e = t.encode(text);
      } else {
        e = tokenizer != nullptr ? (pair ? tokenizer->encode_pair(text, *pair) : tokenizer->encode(text))
                                 : embedder_->encode(text, prompt);
        limit = tokenizer != nullptr ? task_->max_length() : embedder_->config().max_seq_length;
        too_long = !e.overflowing.empty();
        e.overflowing.clear();
      }
    } catch (const stile::Error& error) {
      throw ApiError{400, std::string(stile::without_prefix(error.what())), std::string(field)};
    }
    if (too_long && !cut) {
      throw ApiError{
          413,
          fmt::format("'{}' has a text longer than the model's {} tokens; send truncate: true to cut it", field, limit),
          std::string(field)};
    }
    return e;
  }

  // Queues the job and waits for it; the queue's refusals become 503s.
  void run(Job& job) {
    for (const stile::Encoding& e : job.inputs) job.tokens += e.size();
    job.batch_key = static_cast<int>(job.kind) + 4 * static_cast<int>(job.prompt_tokens);
    const auto timeout = std::chrono::milliseconds(static_cast<long long>(o_.queue_timeout_s * 1000));
    switch (queue_->submit(job, timeout)) {
      case stile_serve::SubmitResult::kDone: break;
      case stile_serve::SubmitResult::kQueueFull:
        throw ApiError{503, fmt::format("the server is busy: {} requests are waiting; retry later", o_.max_queue), ""};
      case stile_serve::SubmitResult::kTimedOut:
        throw ApiError{503, fmt::format("the request waited {} s for the encoder; retry later", o_.queue_timeout_s),
                       ""};
      case stile_serve::SubmitResult::kStopped: throw ApiError{503, "the server is shutting down", ""};
    }
    if (job.error) std::rethrow_exception(job.error);
  }

  // ---- computing, on the queue's worker ----

  // One batch of jobs of one kind. Each job's inputs are moved into the batch (left empty); its
  // tokens were counted at submit.
  void run_batch(std::span<Job* const> jobs) {
    const Kind kind = jobs.front()->kind;
    if (engine_) {
      for (Job* job : jobs) run_on_engine(*job);
      return;
    }
    std::vector<stile::Encoding> all;
    std::size_t tokens = 0;
    for (Job* job : jobs) {
      tokens += job->tokens;
      for (stile::Encoding& e : job->inputs) all.push_back(std::move(e));
    }
    std::size_t next = 0;
    if (kind == Kind::kEmbed) {
      std::vector<std::vector<float>> rows = embedder_->embed_encoded(all, pool_.get(), jobs.front()->prompt_tokens);
      for (Job* job : jobs) {
        for (std::size_t i = 0; i < job->inputs.size(); ++i) job->rows.push_back(std::move(rows[next++]));
      }
    } else {
      const stile::CheckpointHead& head = task_->config().head;
      std::vector<stile::TextClassification> results = task_->classify_encoded(
          all, kind == Kind::kPairScores ? head.pair_scores : head.classify_scores, pool_.get());
      for (Job* job : jobs) {
        for (std::size_t i = 0; i < job->inputs.size(); ++i, ++next) {
          job->rows.push_back(std::move(results[next].logits));
          job->scores.push_back(std::move(results[next].scores));
        }
      }
    }
    metrics_.record_batch(all.size(), tokens);
  }

  void run_on_engine(Job& job) {
    engine_->set_target_ms(job.target_ms);
    for (const stile::Encoding& e : job.inputs) {
      stile::EngineResult r = engine_->run(e);
      job.rows.push_back(job.kind == Kind::kEmbed ? std::move(r.embedding) : std::move(r.logits));
      job.scores.push_back(std::move(r.scores));
      job.accounts.push_back({r.tokens, r.estimated_ms, r.timeline.total_ms, r.target_ms, r.deadline_missed});
      if (r.deadline_missed) metrics_.record_deadline_miss();
      metrics_.record_batch(1, e.size());
    }
  }

  // ---- endpoints ----

  // The request's latency target: the field, else the header, else --target-ms. A target needs
  // the store's device profile (the planner's input).
  [[nodiscard]] double target_ms(std::optional<double> field, const httplib::Request& req) const {
    const double t = requested_target_ms(field, req);
    if (t > 0 && engine_ && engine_->profile() == nullptr) {
      throw ApiError{400, "a latency target needs the store's device profile (STORE.profile.json: run profile)",
                     field ? "target_ms" : "X-Stile-Target-Ms"};
    }
    return t;
  }

  [[nodiscard]] double requested_target_ms(std::optional<double> field, const httplib::Request& req) const {
    if (field) return *field;
    if (req.has_header("X-Stile-Target-Ms")) {
      const std::string v = req.get_header_value("X-Stile-Target-Ms");
      try {
        const double t = stile_cli::parse_number(v, "X-Stile-Target-Ms");
        if (t > 0) return t;
      } catch (const stile_cli::UsageError&) {
      }
      throw ApiError{400,
                     fmt::format("the header X-Stile-Target-Ms must be a number above 0, not '{}'", v.substr(0, 32)),
                     "X-Stile-Target-Ms"};
    }
    return o_.engine.target_ms;
  }

  // The engine's account of each text, as a JSON field after the API's own.
  [[nodiscard]] static std::string engine_fields(const Job& job) {
    if (job.accounts.empty()) return "";
    std::string out = R"(,"stile":[)";
    for (std::size_t i = 0; i < job.accounts.size(); ++i) {
      const EngineAccount& a = job.accounts[i];
      out += fmt::format(R"({}{{"tokens":{},"target_ms":{},"estimated_ms":{},"total_ms":{},"deadline_missed":{}}})",
                         i > 0 ? "," : "", a.tokens, a.target_ms, a.estimated_ms, a.total_ms, a.deadline_missed);
    }
    out += ']';
    return out;
  }

  std::string embed(const stile_serve::EmbedRequest& r, const httplib::Request& req, Api api) {
    if (!embedder_ && !engine_) {
      throw ApiError{400, "this server has no embedding model: start it with --model or --store", ""};
    }
    const std::string_view field = api == Api::kOpenAi ? "input" : "inputs";
    if (engine_ && r.prompt_name) {
      throw ApiError{400, "prompt_name is not supported by the elastic engine", "prompt_name"};
    }
    Job job;
    job.kind = Kind::kEmbed;
    job.target_ms = target_ms(r.target_ms, req);
    for (const std::string& t : r.texts)
      job.inputs.push_back(encode(t, std::nullopt, r.prompt_name, r.truncate, field, nullptr));
    if (embedder_) job.prompt_tokens = embedder_->prompt_tokens(r.prompt_name);
    const std::size_t dim = embedder_ ? embedder_->dim() : engine_->config().hidden;
    const bool normalizes = embedder_ ? embedder_->config().modules.normalize : true;
    if (r.dimensions && *r.dimensions > dim) {
      throw ApiError{400, fmt::format("'dimensions' is {}; the model's embeddings have {}", *r.dimensions, dim),
                     "dimensions"};
    }
    if (r.normalize == false && normalizes) {
      throw ApiError{400, "normalize false: this model's pipeline normalizes its embeddings", "normalize"};
    }
    run(job);
    for (std::vector<float>& row : job.rows) {
      // OpenAI's dimensions: the first N values, normalized again when the model's are.
      if (r.dimensions && *r.dimensions < row.size()) {
        row.resize(*r.dimensions);
        if (normalizes) stile::l2_normalize(row);
      }
      if (r.normalize == true && !normalizes) stile::l2_normalize(row);
    }
    return api == Api::kOpenAi
               ? stile_serve::openai_embeddings(job.rows, r.base64, o_.served_name, job.tokens, engine_fields(job))
               : stile_serve::tei_embeddings(job.rows);
  }

  std::string rerank(const stile_serve::RerankRequest& r) {
    if (!task_ || task_->head().outputs() != 1) {
      throw ApiError{400, "this server has no cross-encoder: start it with --task-model and a model of one output", ""};
    }
    Job job;
    job.kind = Kind::kPairScores;
    for (const std::string& t : r.texts)
      job.inputs.push_back(encode(r.query, t, std::nullopt, r.truncate, "texts", &task_->tokenizer()));
    run(job);
    std::vector<double> scores;
    for (std::size_t i = 0; i < job.rows.size(); ++i)
      scores.push_back(r.raw_scores ? job.rows[i][0] : job.scores[i][0]);
    return stile_serve::tei_rerank(scores, r.texts, r.return_text);
  }

  std::string classify(const stile_serve::ClassifyRequest& r, const httplib::Request& req) {
    const std::vector<std::string>* labels = task_                    ? &task_->labels()
                                             : engine_labels_.empty() ? nullptr
                                                                      : &engine_labels_;
    if (labels == nullptr) {
      throw ApiError{400, "this server has no classifier: start it with --task-model, or --store with a head sidecar",
                     ""};
    }
    Job job;
    job.kind = Kind::kClassify;
    job.target_ms = target_ms(r.target_ms, req);
    for (const auto& [text, pair] : r.inputs) {
      if (pair && engine_) throw ApiError{400, "the elastic engine classifies single texts, not pairs", "inputs"};
      job.inputs.push_back(
          encode(text, pair, std::nullopt, r.truncate, "inputs", task_ ? &task_->tokenizer() : nullptr));
    }
    run(job);
    if (r.raw_scores) {
      for (std::size_t i = 0; i < job.rows.size(); ++i) job.scores[i].assign(job.rows[i].begin(), job.rows[i].end());
    }
    return stile_serve::tei_predictions(job.scores, *labels, r.single);
  }

  std::string info() const {
    std::string out =
        fmt::format(R"({{"model_id":{},"version":"stile","max_batch_tokens":{},"max_client_batch_size":{})",
                    stile_serve::json_string(o_.served_name), o_.max_batch_tokens, o_.limits.max_texts);
    if (embedder_)
      out += fmt::format(R"(,"embedding_dim":{},"max_input_length":{})", embedder_->dim(),
                         embedder_->config().max_seq_length);
    if (task_)
      out +=
          fmt::format(R"(,"task_labels":{},"task_max_input_length":{})", task_->labels().size(), task_->max_length());
    if (engine_) out += fmt::format(R"(,"engine_target_ms":{})", o_.engine.target_ms);
    return out + "}";
  }

  // Every POST: the body read into its request, computed, answered; any refusal answered in the
  // endpoint's API's error shape; each answer counted.
  template <class Handle>
  void post(const char* path, Api api, Handle handle) {
    http_.Post(path, [this, path, api, handle](const httplib::Request& req, httplib::Response& res) {
      const auto start = std::chrono::steady_clock::now();
      try {
        if (stopping_) throw ApiError{503, "the server is shutting down", ""};
        res.status = 200;
        res.set_content(handle(req), "application/json");
      } catch (const ApiError& e) {
        res.status = e.status;
        if (e.status == 503) res.set_header("Retry-After", "1");
        res.set_content(stile_serve::error_body(api, e.status, e.message, e.param), "application/json");
      } catch (const std::exception& e) {
        res.status = 500;
        res.set_content(stile_serve::error_body(api, 500, e.what(), ""), "application/json");
      }
      metrics_.record_request(path, res.status,
                              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    });
  }

  void routes() {
    const stile_serve::Limits& limits = o_.limits;
    post("/v1/embeddings", Api::kOpenAi, [this, &limits](const httplib::Request& req) {
      return embed(stile_serve::parse_openai_embeddings(req.body, limits), req, Api::kOpenAi);
    });
    post("/embed", Api::kTei, [this, &limits](const httplib::Request& req) {
      return embed(stile_serve::parse_tei_embed(req.body, limits), req, Api::kTei);
    });
    post("/rerank", Api::kTei,
         [this, &limits](const httplib::Request& req) { return rerank(stile_serve::parse_rerank(req.body, limits)); });
    post("/classify", Api::kTei, [this, &limits](const httplib::Request& req) {
      return classify(stile_serve::parse_classify(req.body, limits), req);
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.status = stopping_ ? 503 : 200;
      res.set_content(stopping_ ? "shutting down\n" : "ok\n", "text/plain");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.render(queue_->queued()), "text/plain; version=0.0.4");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(fmt::format(R"({{"object":"list","data":[{{"id":{},"object":"model","owned_by":"stile"}}]}})",
                                  stile_serve::json_string(o_.served_name)),
                      "application/json");
    });
    http_.Get("/info",
              [this](const httplib::Request&, httplib::Response& res) { res.set_content(info(), "application/json"); });

    // The answers httplib gives itself (a body over the limit, a request it could not read, no such
    // route) get a body in the API's error shape too, and are counted.
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message;
      switch (res.status) {
        case 413:
          message = fmt::format("the request body is larger than this server takes ({} bytes)", o_.max_body_bytes);
          break;
        case 400:
          message = "the request could not be read: malformed HTTP, or the client paused longer than the read timeout";
          break;
        case 404: message = fmt::format("no endpoint {} {}", req.method, req.path.substr(0, 64)); break;
        default: message = fmt::format("HTTP status {}", res.status);
      }
      const Api api = req.path.starts_with("/v1/") ? Api::kOpenAi : Api::kTei;
      res.set_content(stile_serve::error_body(api, res.status, message, ""), "application/json");
      constexpr std::string_view kRoutes[] = {"/v1/embeddings", "/embed", "/rerank", "/classify"};
      const bool known = std::find(std::begin(kRoutes), std::end(kRoutes), req.path) != std::end(kRoutes);
      metrics_.record_request(known ? req.path : "other", res.status, 0);
    });
    const auto seconds = [](double s) { return std::chrono::microseconds(static_cast<long long>(s * 1e6)); };
    http_.set_payload_max_length(o_.max_body_bytes);
    http_.set_read_timeout(seconds(o_.read_timeout_s));
    http_.set_write_timeout(seconds(o_.write_timeout_s));
    // Without TCP_NODELAY a small answer written as headers then body waits for the client's
    // delayed ACK (Nagle's algorithm): 40 ms on Linux, many times the encoder's time for a sentence.
    http_.set_tcp_nodelay(true);
    http_.set_keep_alive_max_count(1000);
    http_.set_keep_alive_timeout(5);
    http_.new_task_queue = [n = o_.http_threads] { return new httplib::ThreadPool(n); };
  }

  Options o_;
  std::optional<stile::SentenceEncoder> embedder_;
  std::optional<stile::TaskModel> task_;
  std::unique_ptr<stile::Engine> engine_;
  std::vector<std::string> engine_labels_;
  std::unique_ptr<stile::ThreadPool> pool_;
  stile_serve::Metrics metrics_;
  std::unique_ptr<stile_serve::BatchQueue<Job>> queue_;
  httplib::Server http_;
  std::atomic<bool> stopping_{false};
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  // SIGTERM and SIGINT go to one thread that stops the server: blocked here, before any thread
  // starts, so every thread inherits the mask and none is interrupted mid-request.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  try {
    Server server(options);
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      fmt::print(stderr, "stile-serve: {}: finishing the requests accepted, then exiting\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT");
      server.stop();
    });
    const int status = server.listen();
    // Listening ended without a signal (the port was taken): wake the waiter to let it end.
    if (!server.stopping()) pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    return status;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
