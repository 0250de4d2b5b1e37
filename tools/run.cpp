// run: the elastic engine from the command line. Opens a shard store (tools/convert) with a
// device profile (tools/profile), runs each text as a request, cold (first request on an empty
// preload buffer) and then warm (the preload buffer filled by the cold run; --warm N: N times), and
// prints the embedding, the class (with the heads of tools/train_heads), the plan and a timeline
// summary.
//
//   run minilm.stile "a charming and moving film"
//   run --storage emmc --target-ms 40 --preload-kb 1024 --trace trace.json minilm.stile "text"
//   run --inject "seed=1; eio@n=30; late@p=0.1,x=10-100" minilm.stile "text"   (faults on purpose)
//   run --processors cpu:0,cpu:1 --split auto --processor-trace lanes.json minilm.stile "text"
//       (each layer split between two CPU clusters, int8 and fp16: hetero/split_layer_compute.hpp)
//   run --mapping mapping.json --bits 6 minilm.stile "text"
//       (each operator on the processor and in the format a mapping file gives: tools/search_mapping,
//        hetero/mapped_layer_compute.hpp)
//
// Exit status: 0 ok, 1 runtime error (bad store, failed read), 2 usage error.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.hpp"
#include "sidecar.hpp"
#include "stile/engine.hpp"
#include "stile/hetero/cpu_cluster.hpp"
#include "stile/hetero/mapped_layer_compute.hpp"
#include "stile/hetero/opencl_device.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/hetero/processor_trace.hpp"
#include "stile/hetero/split_layer_compute.hpp"
#include "stile/io/fault_injection.hpp"
#include "stile/io/json_file.hpp"
#include "stile/model/linear_head.hpp"
#include "stile/pipeline/layer_reader.hpp"
#include "stile/plan/device_profile.hpp"
#include "stile/plan/mapping_file.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/model/checkpoint_head.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/plan/importance.hpp"

namespace {

std::string plan_summary(const stile::SubmodelPlan& plan) {
  std::size_t widest = 0;
  std::map<unsigned, std::size_t> by_bits;
  for (const auto& layer : plan.layers) {
    widest = std::max(widest, layer.size());
    for (const stile::ShardChoice& c : layer) ++by_bits[c.bits];
  }
  std::string bits;
  for (const auto& [b, count] : by_bits) bits += fmt::format("{}{} at {} bits", bits.empty() ? "" : ", ", count, b);
  return fmt::format("{} layers x up to {} shards ({})", plan.layers.size(), widest, bits);
}

void print_result(const char* label, const stile::EngineResult& r, const stile::HeadsFile* heads, bool verbose) {
  const stile::Timeline& t = r.timeline;
  std::string head;
  for (std::size_t i = 0; i < 4 && i < r.embedding.size(); ++i) head += fmt::format("{:+.4f} ", r.embedding[i]);
  double norm = 0;
  for (const float x : r.embedding) norm += static_cast<double>(x) * x;
  fmt::print(
      "  {:<5} {:7.2f} ms  embeddings {:5.2f} ({} rows read, {} cached)  IO {:6.2f}  stall {:6.2f}  compute {:6.2f} ms"
      "  read {:5.2f} MB ({} shards)  held {:.2f} MB  working {:.2f} MB\n",
      label, t.total_ms, t.embed_end_ms - t.embed_start_ms, t.word_rows_read, t.word_rows_cached, t.io_ms(),
      t.stall_ms(), t.compute_ms(), static_cast<double>(t.bytes_read() + t.embed_bytes_read) / 1e6, t.shards_read(),
      static_cast<double>(r.preload_held_bytes + r.word_cache_held_bytes) / 1e6,
      static_cast<double>(r.working_buffer_bytes) / 1e6);
  fmt::print("        embedding [{}...] norm {:.4f}", head, std::sqrt(norm));
  if (r.label && !r.label_name.empty()) {
    fmt::print("  class {} ({:.4f}, the checkpoint's head)", r.label_name, r.scores.at(*r.label));
  } else if (r.label) {
    fmt::print("  class {} (head {})", heads->at(r.head).head.labels.at(*r.label), r.head);
  } else if (heads) {
    fmt::print("  no head for this plan's shape");
  }
  fmt::print("\n");
  if (!verbose) return;
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    const stile::LayerTimes& x = t.layers[l];
    fmt::print(
        "        layer {}: IO {:7.2f}-{:7.2f} ({} read, {} preloaded, {} reads)  compute {:7.2f}-{:7.2f}  stall "
        "{:6.2f}\n",
        l, x.io_start_ms, x.io_end_ms, x.shards_read, x.shards_preloaded, x.reads, x.compute_start_ms, x.compute_end_ms,
        x.stall_ms);
  }
}

// One processor of --processors: "cpu:CORES" (CORES: 0, 0-3, 0+2+4: '+' joins, as ',' separates
// processors) or "opencl:N".
struct ProcessorSpec {
  std::string name;
  std::vector<int> cores;
  bool opencl = false;
  std::size_t device = 0;
};

ProcessorSpec parse_processor(std::string_view item) {
  ProcessorSpec p;
  p.name = std::string(item);
  if (item.starts_with("cpu:")) {
    std::string cores(item.substr(4));
    for (char& ch : cores) ch = ch == '+' ? ',' : ch;
    try {
      p.cores = stile::parse_core_list(cores);
    } catch (const stile::Error& e) {
      throw stile_cli::UsageError(std::string("--processors: ") + e.what());
    }
    return p;
  }
  if (item.starts_with("opencl:")) {
    p.opencl = true;
    p.device = stile_cli::parse_whole(item.substr(7), "--processors opencl:N");
    return p;
  }
  throw stile_cli::UsageError("--processors: '" + std::string(item) + "' is not cpu:CORES or opencl:N");
}

}  // namespace

int main(int argc, char** argv) {
  using stile_cli::Sidecar;
  stile::EngineOptions options;
  std::optional<std::filesystem::path> profile_path, importance_path, heads_path;
  std::optional<unsigned> bits;
  std::optional<std::size_t> layers, shards;
  std::size_t preload_kb = 0, word_cache_kb = 0;
  std::string trace, inject;
  std::string precision = "fp32";
  bool verbose = false;
  std::vector<ProcessorSpec> processors;
  std::vector<stile::LinearFormat> processor_formats{stile::LinearFormat::kInt8, stile::LinearFormat::kF16};
  std::optional<double> split_p;
  bool split_auto = false;
  std::string split_profile_path, processor_trace;
  std::filesystem::path mapping_path;
  std::size_t warm_requests = 1;
  stile_cli::Parser cli("run", "[options] STORE TEXT...",
                        "Runs every TEXT through the elastic engine on the shard store STORE, cold then warm, and "
                        "prints the sentence embedding's first values and norm, its SST-2 class (when there are "
                        "heads), the plan (layers x shards, bitwidths) and where the time went (embeddings, IO, "
                        "stall, compute).");
  cli.flag("--profile", "FILE", "the device profile (default: STORE.profile.json when it exists)", profile_path);
  cli.flag("--importance", "FILE",
           "the shard importance (default: STORE.importance.json when it exists; without one, shards are kept and "
           "upgraded in shard order)",
           importance_path);
  cli.flag("--heads", "FILE",
           "SST-2 heads per submodel shape (default: STORE.heads.json when it exists): each request is classified by "
           "its plan's head, and the planner, when it must shrink the submodel, picks the shape whose head scores best",
           heads_path);
  std::optional<std::filesystem::path> task_head_path;
  cli.flag("--task-head", "FILE",
           "a fine-tuned checkpoint's own sequence-classification head (default: STORE.head.safetensors, which "
           "convert writes for a <Family>ForSequenceClassification checkpoint, when it exists): it classifies each "
           "request in place of --heads",
           task_head_path);
  cli.flag("--min-bits", "B", "the planner's bitwidth floor (default: the lowest stored)", options.min_bits);
  cli.flag("--target-ms", "T", "latency target for the planner (default: none: the highest bitwidth)",
           options.target_ms)
      .at_least(0);
  cli.flag("--preload-kb", "K", "the preload buffer's budget in KiB (0: shards are read for every request)",
           preload_kb);
  cli.flag("--word-cache-kb", "K", "the word-row cache's budget in KiB: rows kept between requests (0: no cache)",
           word_cache_kb);
  cli.storage(options.storage);
  cli.backend(options.backend);
  cli.threads(options.threads);
  cli.precision(precision).help +=
      "; the store's GEMMs stay in its dictionary codec (decoded panel by panel), the preset sets LayerNorm, GELU "
      "and softmax";
  cli.flag("--shard-gemm", "F",
           "the linear layers over the store's shards: fp32 (default: dequantized inside the fp32 GEMM) or int8 "
           "(decoded to int8, the int8 GEMM on u8 activations quantized per row)",
           [&](std::string_view v) {
             if (v == "fp32") {
               options.shard_linear = stile::LinearFormat::kF32;
             } else if (v == "int8") {
               options.shard_linear = stile::LinearFormat::kInt8;
             } else {
               cli.fail("--shard-gemm: '" + std::string(v) + "' is not fp32 or int8");
             }
           });
  cli.flag("--bits", "B", "run the whole model with every shard at B bits (instead of the planner)",
           [&](std::string_view v) { bits = stile_cli::parse_bitwidth(v, "--bits"); });
  cli.flag("--layers", "N", "with --bits: the first N layers (default all)",
           [&](std::string_view v) { layers = stile_cli::parse_whole(v, "--layers"); });
  cli.flag("--shards", "M", "with --bits: the first M shards of each layer (default all)",
           [&](std::string_view v) { shards = stile_cli::parse_whole(v, "--shards"); });
  cli.flag("--warm", "N", "warm requests per text after the cold one (default 1)", warm_requests).at_least(1);
  cli.toggle("--load-then-execute", "read every layer before computing (the baseline), not pipelined",
             [&] { options.mode = stile::PipelineMode::load_then_execute; });
  cli.flag("--trace", "FILE", "write the last request's timeline as Chrome trace JSON", trace);
  cli.toggle("--verbose", "print every layer of the timeline", verbose);
  cli.toggle("--reprofile",
             "online re-profiling: compare each request's measured IO and compute with the profile and re-plan "
             "when they drift (a device busier than when it was profiled)",
             options.reprofile);
  cli.flag("--inject", "SCRIPT",
           "inject read faults (io/fault_injection.hpp): items separated by ';', each KIND@n=N (the N-th read) or "
           "KIND@p=P (each read with chance P), KIND one of eio, short, late (x=LO-HI: 10-100x the read's time; "
           "ms=M: at least M ms), corrupt; and seed=S. A request that meets a fault fails and the next goes on",
           inject);
  cli.flag("--processors", "P0,P1",
           "split every layer between two processors (muLayer's cooperative layer, hetero/): cpu:CORES (a CPU "
           "cluster pinned to CORES: 0, 2-3, 0+2) or opencl:N; the first runs on the engine's compute thread",
           [&](std::string_view v) {
             processors = stile_cli::parse_list(v, "--processors", [](std::string_view i) { return parse_processor(i); });
             if (processors.size() != 2) throw stile_cli::UsageError("--processors takes exactly two processors");
           });
  cli.flag("--processor-formats", "F0,F1", "the processors' linear formats: fp32, fp16, int8 (default: int8,fp16)",
           [&](std::string_view v) {
             processor_formats = stile_cli::parse_list(v, "--processor-formats", [](std::string_view f) {
               if (f == "fp32") return stile::LinearFormat::kF32;
               if (f == "fp16") return stile::LinearFormat::kF16;
               if (f == "int8") return stile::LinearFormat::kInt8;
               throw stile_cli::UsageError("--processor-formats: '" + std::string(f) + "' is not fp32, fp16 or int8");
             });
             if (processor_formats.size() != 2) throw stile_cli::UsageError("--processor-formats takes two formats");
           });
  cli.flag("--split", "auto|P",
           "with --processors: processor 0's share of each linear layer's output channels (0..1, rounded to the "
           "processors' panel width), or auto: the split predictor's p per request shape (default auto)",
           [&](std::string_view v) {
             if (v == "auto") {
               split_auto = true;
               return;
             }
             const double p = stile_cli::parse_number(v, "--split");
             if (!(p >= 0 && p <= 1)) throw stile_cli::UsageError("--split must be auto or a number in [0, 1]");
             split_p = p;
           });
  cli.flag("--split-profile", "FILE",
           "with --split auto: the split predictor's profile (plan/split_predictor.hpp); read when it exists, else "
           "profiled on the first layer and written there",
           split_profile_path);
  cli.flag("--mapping", "FILE",
           "execute an operator-to-processor mapping file (tools/search_mapping) instead of --precision and "
           "--processors: each node on its processor (cpu:CORES, opencl:N) in its format, each layer's shards "
           "decoded once into its linear nodes' formats and kept",
           mapping_path);
  cli.flag("--processor-trace", "FILE",
           "with --processors or --mapping: write what each processor ran during the last request as Chrome trace "
           "JSON, one lane per processor",
           processor_trace);
  cli.example(
      "run --storage emmc --target-ms 60 --preload-kb 1024 --word-cache-kb 128 minilm.stile \"a charming and often "
      "affecting journey\"");
  cli.example("run --trace trace.json minilm.stile \"some text\"",
              "then scripts/plot_timeline.py trace.json timeline.svg");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (processors.empty() && (split_p || split_auto || !split_profile_path.empty())) {
    cli.fail("--split and --split-profile go with --processors");
  }
  if (processors.empty() && mapping_path.empty() && !processor_trace.empty()) {
    cli.fail("--processor-trace goes with --processors or --mapping");
  }
  if (!mapping_path.empty() &&
      (!processors.empty() || precision != "fp32" || options.shard_linear != stile::LinearFormat::kF32)) {
    cli.fail(
        "--mapping gives every operator's processor and format: it goes without --processors, --precision "
        "and --shard-gemm");
  }
  if (split_p && !split_profile_path.empty()) cli.fail("--split-profile goes with --split auto");
  if (!processors.empty() && processors[0].opencl) {
    cli.fail("--processors: the first processor runs on the engine's compute thread and must be a cpu:CORES");
  }
  if (!processors.empty() && processors[1].opencl) {
    if (!stile::opencl_available()) {
      std::fprintf(stderr, "run: %s: the OpenCL backend is absent in this build (no OpenCL headers or CLBlast)\n",
                   processors[1].name.c_str());
      return 1;
    }
    // The device takes the CPU's int8 bytes and converts them on the device: both int8, one copy.
    processor_formats = {stile::LinearFormat::kInt8, stile::LinearFormat::kInt8};
  }
  if (positional.size() < 2) cli.fail("a store and at least one text are needed");
  if ((layers || shards) && !bits) cli.fail("--layers and --shards go with --bits");
  options.preload_bytes = preload_kb * 1024;
  options.word_cache_bytes = word_cache_kb * 1024;
  options.ops = stile::precision_preset(precision).uniform.ops;
  std::shared_ptr<stile::FaultInjector> faults;
  if (!inject.empty()) {
    try {
      faults = std::make_shared<stile::FaultInjector>(stile::parse_fault_script(inject));
    } catch (const stile::Error& e) {
      cli.fail(std::string("--inject: ") + e.what());
    }
    options.faults = faults;
  }

  try {
    const std::filesystem::path store = positional[0];
    if (!profile_path) profile_path = stile_cli::existing_sidecar(store, Sidecar::profile);
    if (!importance_path) importance_path = stile_cli::existing_sidecar(store, Sidecar::importance);
    if (importance_path) {
      stile::ShardImportance importance = stile::load_importance(*importance_path);
      options.ranking = std::move(importance.ranking);
      options.importance = std::move(importance.order);
    }
    if (!heads_path) heads_path = stile_cli::existing_sidecar(store, Sidecar::heads);
    std::optional<stile::HeadsFile> heads;
    if (heads_path) heads = stile::HeadsFile::load(*heads_path);
    if (!task_head_path && std::filesystem::exists(stile::head_path_for(store))) task_head_path = stile::head_path_for(store);

    std::optional<stile::DeviceProfile> profile;
    if (profile_path) profile = stile::DeviceProfile::load(*profile_path);
    // The processors outlive the engines (one per text); each engine gets its own split layer,
    // handed the predictor's profile once there is one.
    std::vector<std::unique_ptr<stile::Processor>> clusters;
    for (std::size_t i = 0; i < processors.size(); ++i) {
      if (processors[i].opencl) {
#if defined(STILE_HAVE_OPENCL)
        auto dev = stile::OpenClDevice::open(processors[i].device, processor_formats[i], processors[i].name);
        fmt::print("device   {} = {}; GEMM {}; host-unified memory {}\n", processors[i].name, dev->device_name(),
                   dev->gemm_note(), dev->host_unified() ? "yes" : "no");
        clusters.push_back(std::move(dev));
#endif
        continue;
      }
      clusters.push_back(std::make_unique<stile::CpuCluster>(
          processors[i].name, processors[i].cores, processor_formats[i],
          i == 0 ? stile::CpuCluster::Mode::kCallerThread : stile::CpuCluster::Mode::kOwnThread));
    }
    // A mapping: its processors (as the file names them, opened with the first engine, whose store
    // gives the shape to check) and, per engine, a mapped layer.
    std::optional<stile::OpMappingFile> mapping;
    if (!mapping_path.empty()) {
      mapping = stile::OpMappingFile::load(mapping_path);
      options.embedding_layer_norm =
          stile::mapped_embedding_norm(stile::bert_op_graph(mapping->shape), mapping->mapping.format);
    }
    std::optional<stile::SplitProfile> split_profile;
    if (!split_profile_path.empty() && std::filesystem::exists(split_profile_path)) {
      split_profile = stile::SplitProfile::load(split_profile_path);
    }
    stile::ProcessorTrace lanes;
    stile::SplitLayerCompute* split = nullptr;
    const stile::MappedLayerCompute* mapped = nullptr;
    auto open_engine = [&] {
      auto e = std::make_unique<stile::Engine>(store, options, profile);
      if (heads) e->set_heads(*heads);
      if (task_head_path) e->set_task_head(stile::load_head_sidecar(*task_head_path, e->config()));
      if (mapping) {
        if (clusters.empty()) {
          const stile::EncoderConfig& config = e->store().config();
          stile::check_mapping_shape(*mapping, config, mapping_path.string());
          clusters = stile::open_mapping_processors(mapping->processors, stile::op_graph_of(config), mapping->mapping,
                                                    mapping_path.string())
                         .owned;
        }
        std::vector<stile::Processor*> procs;
        for (const auto& c : clusters) procs.push_back(c.get());
        auto compute = std::make_unique<stile::MappedLayerCompute>(e->store().config(), mapping->mapping, procs);
        mapped = compute.get();
        e->set_layer_compute(std::move(compute));
      } else if (!clusters.empty()) {
        if (split != nullptr && split->profile()) split_profile = split->profile();
        auto compute = std::make_unique<stile::SplitLayerCompute>(*clusters[0], *clusters[1], options.ops, split_p,
                                                                  split_profile);
        split = compute.get();
        e->set_layer_compute(std::move(compute));
      }
      return e;
    };
    auto engine_ptr = open_engine();
    stile::Engine& engine = *engine_ptr;
    fmt::print("store    {} ({:.1f} MB, {} layers x {} shards, bits {})\n", store.string(),
               static_cast<double>(engine.store().file_size()) / 1e6, engine.store().num_layers(),
               engine.store().shards_per_layer(), fmt::join(engine.store().bits(), ","));
    fmt::print(
        "storage  {}{}\n", engine.backend_description(),
        engine.backend_description().find("emulat") != std::string::npos ? " (delays emulated; real bytes read)" : "");
    if (!engine.backend_note().empty()) fmt::print("note     {}\n", engine.backend_note());
    if (precision != "fp32" || options.shard_linear != stile::LinearFormat::kF32) {
      fmt::print("formats  {}: LayerNorm {}, GELU {}, softmax {}; GEMMs on the store's dictionary shards ({})\n",
                 precision, stile::to_string(options.ops.layer_norm), stile::to_string(options.ops.gelu),
                 stile::to_string(options.ops.softmax),
                 options.shard_linear == stile::LinearFormat::kInt8 ? "decoded to int8, int8 GEMM"
                                                                    : "dequantized in the fp32 GEMM");
    }
    if (mapping) {
      std::map<std::string, std::size_t> formats;
      for (const stile::NumberFormat f : mapping->mapping.format) ++formats[stile::to_string(f)];
      std::string counts;
      for (const auto& [f, count] : formats) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", count, f);
      fmt::print("mapping  {}: {} nodes on {} ({}); the layers' shards decoded into their nodes' formats\n",
                 mapping_path.string(), mapping->mapping.format.size(), fmt::join(mapping->processors, ", "), counts);
    } else if (!clusters.empty()) {
      const auto where = [&](std::size_t i) {
        return processors[i].opencl ? std::string("OpenCL device ") + std::to_string(processors[i].device)
                                    : fmt::format("cores {}", fmt::join(processors[i].cores, "+"));
      };
      fmt::print("split    {} ({}, {}) + {} ({}, {} weights), p {}\n", clusters[0]->name(), where(0),
                 stile::to_string(clusters[0]->format()), clusters[1]->name(), where(1),
                 stile::to_string(clusters[1]->format()),
                 split_p ? fmt::format("{:.3f} (fixed)", *split_p)
                         : std::string(split_profile ? "auto (predictor, " + split_profile_path + ")"
                                                     : "auto (predictor, profiled on the first layer)"));
    }
    fmt::print("profile  {}\n",
               profile_path ? profile_path->string() : std::string("none (no latency target possible)"));
    if (profile && options.target_ms > 0 && !bits && (mapping || clusters.empty())) {
      // The planner costs each layer with the profile's compute times: right only for the layer
      // compute the profile timed (a mapped layer is faster on held weights, slower on a slow device).
      const std::string timed = profile->layer_compute();
      const bool int8_shards = options.shard_linear == stile::LinearFormat::kInt8;
      const std::string runs = mapping       ? mapping->layer_compute_name()
                               : int8_shards ? std::string(stile::kCpuInt8LayerCompute)
                                             : std::string(stile::kCpuLayerCompute);
      const auto said = [](const std::string& compute) {
        return compute == stile::kCpuLayerCompute       ? std::string("the CPU engine's layer")
               : compute == stile::kCpuInt8LayerCompute ? std::string("the CPU engine's layer in int8")
                                                        : compute;
      };
      if (timed == runs) {
        if (mapping) fmt::print("         compute times measured on this mapping ({})\n", timed);
      } else {
        fmt::print(
            "note     the profile's compute times are of {}, not of {}: the plans for the target assume "
            "those ({})\n",
            said(timed), said(runs),
            mapping       ? "profile --mapping times the mapping's"
            : int8_shards ? "profile --shard-gemm int8 times this one"
                          : "profile without --mapping times the CPU engine's");
      }
    }
    fmt::print("shards   {}\n",
               importance_path ? "by importance, " + importance_path->string() : std::string("in shard order"));
    fmt::print("heads    {}\n", heads_path ? fmt::format("{} ({} shapes)", heads_path->string(), heads->heads.size())
                                           : std::string("none (no class)"));
    fmt::print("target   {}   preload budget {:.2f} MB   word-row cache {:.2f} MB   mode {}\n",
               options.target_ms > 0 ? fmt::format("{:.1f} ms", options.target_ms) : std::string("none"),
               static_cast<double>(options.preload_bytes) / 1e6, static_cast<double>(options.word_cache_bytes) / 1e6,
               stile::to_string(options.mode));

    std::optional<stile::SubmodelPlan> fixed;
    if (bits) {
      fixed = stile::SubmodelPlan::uniform(layers.value_or(engine.store().num_layers()),
                                           shards.value_or(engine.store().shards_per_layer()), *bits);
    }
    // Cold: a fresh engine (empty preload buffer; O_DIRECT reads skip the page cache). Warm: the
    // same engine's next request, its preload buffer filled by the cold one.
    stile::EngineResult last;
    std::size_t failed = 0;
    for (std::size_t i = 1; i < positional.size(); ++i) {
      if (i > 1) engine_ptr = open_engine();
      stile::Engine& fresh = *engine_ptr;
      const stile::Encoding tokens = fresh.tokenizer().encode(positional[i]);
      fmt::print("\n\"{}\" ({} tokens)\n", positional[i], tokens.size());
      std::string previous_note;
      for (std::size_t request = 0; request <= warm_requests; ++request) {
        const bool cold = request == 0;
        const char* label = cold ? "cold" : "warm";
        const bool traced = !processor_trace.empty() && i + 1 == positional.size() && request == warm_requests;
        for (auto& c : clusters) c->set_trace(traced ? &lanes : nullptr);
        try {
          last = fixed ? fresh.run(tokens, *fixed) : fresh.run(tokens);
        } catch (const stile::Error& e) {
          if (!faults) throw;
          ++failed;
          fmt::print("  {:<5} failed: {}\n", label, e.what());
          continue;
        }
        // The warm request may get another plan: its word rows may be cached (fewer reads first).
        if (cold || last.plan_note != previous_note) {
          fmt::print("  plan  {}{}\n", plan_summary(last.plan), cold ? "" : " (warm)");
          if (!last.plan_note.empty()) fmt::print("        {}\n", last.plan_note);
          if (options.reprofile) {
            fmt::print("        reprofiled: the profile's IO x {:.2f}, compute x {:.2f}\n", last.io_scale,
                       last.compute_scale);
          }
        }
        previous_note = last.plan_note;
        print_result(label, last, heads ? &*heads : nullptr, verbose);
        if (last.deadline_missed) fmt::print("        deadline missed: {}\n", last.deadline_note);
        if (split != nullptr) fmt::print("        split p {:.3f} (last layer)\n", split->last_p());
        if (mapped != nullptr) {
          fmt::print(
              "        converted layers held {:.2f} MB (each layer's shards in its nodes' formats); converting took "
              "{:.2f} ms of this request's compute\n",
              static_cast<double>(mapped->converted_bytes()) / 1e6, last.timeline.conversion_ms());
        }
      }
    }
    if (faults) {
      const std::vector<stile::InjectedFault> log = faults->log();
      fmt::print("\nfaults   {} injected over {} reads; {} requests failed\n", log.size(), faults->reads(), failed);
      for (const stile::InjectedFault& f : log) {
        fmt::print("         read {}: {} (offset {}, {} bytes{})\n", f.read, stile::to_string(f.kind), f.offset, f.bytes,
                   f.kind == stile::FaultKind::late ? fmt::format(", {:.1f} ms late", f.delay_ms) : std::string());
      }
    }
    for (auto& c : clusters) c->set_trace(nullptr);
    if (split != nullptr && split_auto && !split_profile_path.empty() && split->profile() &&
        !std::filesystem::exists(split_profile_path)) {
      split->profile()->save(split_profile_path);
      fmt::print("\nsplit profile written to {}\n", split_profile_path);
    }
    if (!processor_trace.empty()) {
      stile::write_file_atomically(processor_trace, lanes.chrome_trace().dump(1) + "\n");
      fmt::print("\nprocessor lanes of the last request written to {} (one lane per processor)\n", processor_trace);
    }
    if (!trace.empty()) {
      // Through a temporary file and a rename: a run killed meanwhile leaves no half-written trace.
      stile::write_file_atomically(trace, stile::to_chrome_trace(last.timeline).dump(1) + "\n");
      fmt::print("\ntrace of the last request written to {} (open in chrome://tracing or Perfetto)\n", trace);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "run: %s\n", e.what());
    return 1;
  }
  return 0;
}
