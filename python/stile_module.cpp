// stile._stile: the nanobind module under the Python package (python/stile/__init__.py holds the
// Python-side API, shaped like sentence-transformers'). Every call releases the GIL while C++
// computes; stile::Error becomes stile.StileError (a RuntimeError) with stile's message; results
// are numpy arrays that own stile's buffers (no copy).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "stile/calibrate/device_profiler.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/engine.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/io/read_backend.hpp"
#include "stile/io/storage_emulator.hpp"
#include "stile/model/checkpoint_head.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/model/task_model.hpp"
#include "stile/ops/precision.hpp"
#include "stile/pipeline/timeline.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/importance.hpp"
#include "stile/store/shard_converter.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <class T>
using Array = nb::ndarray<nb::numpy, T>;

// A numpy array over `values` (moved into the array's owner), of the given shape.
template <class T>
Array<T> to_numpy(std::vector<T>&& values, std::vector<std::size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return Array<T>(owned->data(), shape.size(), shape.data(), owner);
}

std::unique_ptr<stile::ThreadPool> make_pool(std::size_t threads) {
  return threads == 0 ? nullptr : std::make_unique<stile::ThreadPool>(threads);
}

struct SentenceEncoder {
  SentenceEncoder(const std::string& path, const std::string& precision, std::size_t threads)
      : encoder(stile::SentenceEncoder::load(path, stile::precision_preset(precision))), pool(make_pool(threads)) {}

  // [texts x dim] float32: the pipeline's embeddings (normalized when the model normalizes).
  Array<float> embed(const std::vector<std::string>& texts, std::optional<std::string> prompt_name,
                     std::optional<std::size_t> stride) const {
    std::vector<float> flat;
    const std::size_t dim = encoder.dim();
    {
      nb::gil_scoped_release release;
      const auto start = std::chrono::steady_clock::now();
      const std::optional<std::string_view> prompt =
          prompt_name ? std::optional<std::string_view>(*prompt_name) : std::nullopt;
      flat.reserve(texts.size() * dim);
      if (stride) {
        for (const std::string& t : texts) {
          const std::vector<float> e = encoder.embed_long(t, *stride, pool.get(), prompt);
          flat.insert(flat.end(), e.begin(), e.end());
        }
      } else {
        for (const std::vector<float>& e : encoder.embed_batch(texts, pool.get(), prompt)) {
          flat.insert(flat.end(), e.begin(), e.end());
        }
      }
      last_embed_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return to_numpy(std::move(flat), {texts.size(), dim});
  }

  // Seconds of each of `repeats` C++ calls of embed(text) back to back, with no Python between
  // them: the reference bench/python_overhead.py subtracts from a Python encode call's time.
  std::vector<double> embed_call_seconds(const std::string& text, std::size_t repeats) const {
    nb::gil_scoped_release release;
    std::vector<double> seconds;
    seconds.reserve(repeats);
    for (std::size_t i = 0; i < repeats; ++i) {
      const auto start = std::chrono::steady_clock::now();
      static_cast<void>(encoder.embed(text, pool.get()));
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return seconds;
  }

  // input_ids, token_type_ids, attention_mask of each text, as embed tokenizes it.
  std::vector<std::tuple<std::vector<std::int32_t>, std::vector<std::int32_t>, std::vector<std::int32_t>>> tokenize(
      const std::vector<std::string>& texts, std::optional<std::string> prompt_name) const {
    std::vector<std::tuple<std::vector<std::int32_t>, std::vector<std::int32_t>, std::vector<std::int32_t>>> out;
    for (const std::string& t : texts) {
      stile::Encoding e = encoder.encode(t, prompt_name ? std::optional<std::string_view>(*prompt_name) : std::nullopt);
      out.emplace_back(std::move(e.input_ids), std::move(e.token_type_ids), std::move(e.attention_mask));
    }
    return out;
  }

  stile::SentenceEncoder encoder;
  std::unique_ptr<stile::ThreadPool> pool;
  // The time the last embed call (on any thread) spent in C++ without the GIL: what
  // bench/python_overhead.py subtracts from the Python call around it.
  mutable std::atomic<double> last_embed_seconds{0};
};

struct TaskModel {
  TaskModel(const std::string& path, const std::string& precision, std::size_t threads)
      : model(stile::TaskModel::load(path, stile::precision_preset(precision))), pool(make_pool(threads)) {}

  // (logits [texts x labels] float32, scores [texts x labels] float64) of texts, or of pairs.
  std::tuple<Array<float>, Array<double>> classify(const std::vector<std::string>& texts,
                                                   std::optional<std::vector<std::string>> pairs) const {
    if (pairs && pairs->size() != texts.size()) {
      throw stile::Error("stile: classify: one text_pair per text is needed");
    }
    std::vector<float> logits;
    std::vector<double> scores;
    {
      nb::gil_scoped_release release;
      std::vector<stile::TextClassification> results;
      if (pairs) {
        for (std::size_t i = 0; i < texts.size(); ++i)
          results.push_back(model.classify(texts[i], (*pairs)[i], pool.get()));
      } else {
        results = model.classify_batch(texts, pool.get());
      }
      for (const stile::TextClassification& c : results) {
        logits.insert(logits.end(), c.logits.begin(), c.logits.end());
        scores.insert(scores.end(), c.scores.begin(), c.scores.end());
      }
    }
    const std::size_t labels = model.labels().size();
    return {to_numpy(std::move(logits), {texts.size(), labels}), to_numpy(std::move(scores), {texts.size(), labels})};
  }

  Array<double> score_pairs(const std::string& query, const std::vector<std::string>& passages) const {
    std::vector<double> scores;
    {
      nb::gil_scoped_release release;
      scores = model.score_pairs(query, passages, pool.get());
    }
    return to_numpy(std::move(scores), {passages.size()});
  }

  // (label, score, byte begin, byte end, token index) per entity.
  std::vector<std::tuple<std::string, double, std::size_t, std::size_t, std::size_t>> entities(
      const std::string& text, const std::string& aggregation, std::optional<std::size_t> stride) const {
    std::vector<stile::Entity> found;
    {
      nb::gil_scoped_release release;
      found = model.entities(text, stile::aggregation_from_string(aggregation), stride, pool.get());
    }
    std::vector<std::tuple<std::string, double, std::size_t, std::size_t, std::size_t>> out;
    for (stile::Entity& e : found) out.emplace_back(std::move(e.label), e.score, e.begin, e.end, e.index);
    return out;
  }

  // (vocabulary ids int32, weights float32), ids ascending.
  std::tuple<Array<std::int32_t>, Array<float>> sparse(const std::string& text) const {
    stile::SparseVector v;
    {
      nb::gil_scoped_release release;
      v = model.sparse(text, pool.get());
    }
    const std::size_t n = v.ids.size();
    return {to_numpy(std::move(v.ids), {n}), to_numpy(std::move(v.weights), {n})};
  }

  stile::TaskModel model;
  std::unique_ptr<stile::ThreadPool> pool;
};

// The elastic engine over a shard store, with the files beside it when they exist: the device
// profile (STORE.profile.json: the planner), the importance (STORE.importance.json) and a
// checkpoint's head (STORE.head.safetensors).
struct Engine {
  static stile::Engine open(const std::filesystem::path& store, const std::string& storage, double target_ms,
                            double preload_kb, std::size_t threads) {
    stile::EngineOptions options;
    options.storage = storage;
    options.target_ms = target_ms;
    options.preload_bytes = static_cast<std::size_t>(preload_kb * 1024);
    options.threads = threads;
    if (const std::filesystem::path p = stile::importance_path_for(store); std::filesystem::exists(p)) {
      stile::ShardImportance importance = stile::load_importance(p);
      options.ranking = std::move(importance.ranking);
      options.importance = std::move(importance.order);
    }
    std::filesystem::path profile = store;
    profile += ".profile.json";
    std::optional<stile::DeviceProfile> loaded;
    if (std::filesystem::exists(profile)) loaded = stile::DeviceProfile::load(profile);
    stile::Engine engine(store, options, std::move(loaded));
    if (const std::filesystem::path head = stile::head_path_for(store); std::filesystem::exists(head)) {
      engine.set_task_head(stile::load_head_sidecar(head, engine.config()));
    }
    return engine;
  }

  Engine(const std::filesystem::path& store, const std::string& storage, double target_ms, double preload_kb,
         std::size_t threads)
      : engine(open(store, storage, target_ms, preload_kb, threads)) {}

  // The request's answer and account, as a dict (Engine.run in __init__.py says what is in it).
  nb::dict run(const std::string& text, std::optional<double> target_ms) {
    stile::EngineResult r;
    std::string trace;
    {
      nb::gil_scoped_release release;
      // The target and the request under one lock: another thread's target cannot slip between.
      std::lock_guard lock(mutex);
      if (target_ms) engine.set_target_ms(*target_ms);
      r = engine.run(text);
      trace = stile::to_chrome_trace(r.timeline).dump();
    }
    nb::dict out;
    const std::size_t dim = r.embedding.size();
    out["embedding"] = to_numpy(std::move(r.embedding), {dim});
    out["logits"] = r.logits;
    out["label"] = r.label ? nb::cast(*r.label) : nb::none();
    out["label_name"] = r.label_name;
    out["scores"] = r.scores;
    out["tokens"] = r.tokens;
    std::vector<std::vector<std::tuple<std::size_t, unsigned>>> plan;
    for (const auto& layer : r.plan.layers) {
      plan.emplace_back();
      for (const stile::ShardChoice& c : layer) plan.back().emplace_back(c.shard, c.bits);
    }
    out["plan"] = plan;
    out["plan_note"] = r.plan_note;
    out["estimated_ms"] = r.estimated_ms;
    out["target_ms"] = r.target_ms;
    out["deadline_missed"] = r.deadline_missed;
    out["deadline_note"] = r.deadline_note;
    const stile::Timeline& t = r.timeline;
    nb::dict timeline;
    timeline["total_ms"] = t.total_ms;
    timeline["embeddings_ms"] = t.embed_end_ms - t.embed_start_ms;
    timeline["io_ms"] = t.io_ms();
    timeline["stall_ms"] = t.stall_ms();
    timeline["compute_ms"] = t.compute_ms();
    timeline["head_ms"] = t.head_end_ms - t.head_start_ms;
    timeline["bytes_read"] = t.bytes_read() + t.embed_bytes_read;
    timeline["storage"] = t.storage;
    timeline["emulated"] = t.emulated;
    out["timeline"] = timeline;
    out["trace"] = trace;
    out["preload_held_bytes"] = r.preload_held_bytes;
    out["word_cache_held_bytes"] = r.word_cache_held_bytes;
    out["working_buffer_bytes"] = r.working_buffer_bytes;
    return out;
  }

  stile::Engine engine;
  std::mutex mutex;
};

// A checkpoint as a shard store (tools/convert's default path), with its head's sidecar when the
// checkpoint has a classification head; the converter's report as a dict.
nb::dict convert(const std::filesystem::path& model_dir, const std::filesystem::path& store,
                 const std::vector<unsigned>& bits, std::size_t shards) {
  stile::ConvertOptions options;
  options.bits = bits;
  options.shards = shards;
  stile::ConvertReport r;
  bool head = false;
  {
    nb::gil_scoped_release release;
    stile::ProgressBar bar("converting");
    options.progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
    r = stile::convert_checkpoint(model_dir, store, options);
    head = stile::save_head_sidecar(model_dir, store);
  }
  nb::dict out;
  out["store"] = store.string();
  out["file_bytes"] = static_cast<std::uint64_t>(r.file_bytes);
  out["shards"] = r.shards;
  nb::dict per_bits;
  for (const auto& [b, stats] : r.bits) {
    nb::dict d;
    d["bytes"] = stats.bytes;
    d["mean_abs_error"] = stats.mean_abs_error;
    d["relative_rmse"] = stats.relative_rmse;
    per_bits[nb::int_(b)] = d;
  }
  out["bits"] = per_bits;
  out["head_sidecar"] = head ? nb::cast(stile::head_path_for(store).string()) : nb::none();
  return out;
}

// The device profile of a store on this machine (tools/profile's default path): written beside
// the store, where Engine reads it; its path is returned.
std::string profile(const std::filesystem::path& store_path, const std::string& storage, std::size_t repeats,
                    const std::vector<std::size_t>& lengths, std::size_t threads) {
  std::filesystem::path out = store_path;
  out += ".profile.json";
  nb::gil_scoped_release release;
  stile::ProfileOptions options;
  options.storage_name = storage;
  options.repeats = repeats;
  options.lengths = lengths;
  const std::unique_ptr<stile::ThreadPool> pool = make_pool(threads);
  options.pool = pool.get();
  const stile::ShardStore store = stile::ShardStore::open(store_path);
  std::unique_ptr<stile::ReadBackend> backend =
      stile::emulate_storage(stile::open_read_backend(store_path, {}, nullptr), stile::storage_profile(storage));
  stile::ProgressBar bar("profiling");
  stile::measure_device_profile(store, *backend, options, &bar).save(out);
  return out.string();
}

const char* task_name(stile::HeadTask t) {
  switch (t) {
    case stile::HeadTask::kSequenceClassification: return "sequence-classification";
    case stile::HeadTask::kTokenClassification: return "token-classification";
    case stile::HeadTask::kMaskedLm: return "masked-lm";
  }
  return "?";
}

}  // namespace

NB_MODULE(_stile, m) {
  m.doc() = "stile's encoders: the C++ side of the stile package (use the classes of stile itself)";
  nb::exception<stile::Error>(m, "StileError", PyExc_RuntimeError);

  m.def("convert", &convert, "model_dir"_a, "store"_a, "bits"_a, "shards"_a);
  m.def(
      "set_simd_target", [](const std::string& name) { stile::set_simd_target(name); }, "name"_a);
  m.def("profile", &profile, "store"_a, "storage"_a, "repeats"_a, "lengths"_a, "threads"_a);

  nb::class_<SentenceEncoder>(m, "SentenceEncoder")
      .def(nb::init<const std::string&, const std::string&, std::size_t>(), "path"_a, "precision"_a, "threads"_a)
      .def("embed", &SentenceEncoder::embed, "texts"_a, "prompt_name"_a = nb::none(), "stride"_a = nb::none())
      .def("tokenize", &SentenceEncoder::tokenize, "texts"_a, "prompt_name"_a = nb::none())
      .def("embed_call_seconds", &SentenceEncoder::embed_call_seconds, "text"_a, "repeats"_a)
      .def_prop_ro("last_embed_seconds", [](const SentenceEncoder& s) { return s.last_embed_seconds.load(); })
      .def_prop_ro("dim", [](const SentenceEncoder& s) { return s.encoder.dim(); })
      .def_prop_ro("max_seq_length", [](const SentenceEncoder& s) { return s.encoder.config().max_seq_length; })
      .def_prop_ro("similarity_fn_name", [](const SentenceEncoder& s) { return s.encoder.config().similarity; })
      .def_prop_ro("normalizes", [](const SentenceEncoder& s) { return s.encoder.config().modules.normalize; })
      .def_prop_ro("prompts", [](const SentenceEncoder& s) {
        std::vector<std::tuple<std::string, std::string>> out;
        for (const auto& [name, text] : s.encoder.config().prompts.texts) out.emplace_back(name, text);
        return out;
      });

  nb::class_<Engine>(m, "Engine")
      .def(nb::init<const std::filesystem::path&, const std::string&, double, double, std::size_t>(), "store"_a,
           "storage"_a, "target_ms"_a, "preload_kb"_a, "threads"_a)
      .def("run", &Engine::run, "text"_a, "target_ms"_a = nb::none())
      .def_prop_ro("resident_bytes", [](const Engine& e) { return e.engine.resident_bytes(); })
      .def_prop_ro("backend", [](const Engine& e) { return e.engine.backend_description(); });

  nb::class_<TaskModel>(m, "TaskModel")
      .def(nb::init<const std::string&, const std::string&, std::size_t>(), "path"_a, "precision"_a, "threads"_a)
      .def("classify", &TaskModel::classify, "texts"_a, "pairs"_a = nb::none())
      .def("score_pairs", &TaskModel::score_pairs, "query"_a, "passages"_a)
      .def("entities", &TaskModel::entities, "text"_a, "aggregation"_a, "stride"_a = nb::none())
      .def("sparse", &TaskModel::sparse, "text"_a)
      .def("token", [](const TaskModel& t,
                       std::int32_t id) { return std::string(t.model.tokenizer().id_to_token(id).value_or("")); })
      .def_prop_ro("task", [](const TaskModel& t) { return std::string(task_name(t.model.task())); })
      .def_prop_ro("labels", [](const TaskModel& t) { return t.model.labels(); })
      .def_prop_ro("max_length", [](const TaskModel& t) { return t.model.max_length(); });
}
