#pragma once
// Measures one processor's entries of an op latency profile (plan/op_latency_profile.hpp) from the
// processor's own trace (hetero/processor_trace.hpp): the whole model mapped onto it is executed by
// the mapped forward (hetero/mapped_forward.hpp) and each call's span on its lane is read back. For
// an OpenCL device (opencl:N) the spans are the device's (queue markers): a call's copies in and
// out are part of it, as they are of every call the mapped forward makes there. This is how
// profile_ops profiles processors it cannot run a kernel on directly, such as PoCL's device.
//
// Per linear format given (the device is opened in that format; each format one execution): the
// linear nodes in it, attention heads, LayerNorms and the embedding in fp32 (what an OpenCL device
// runs besides). A kind's cost is the median over layers and runs of its calls' spans (qkv: q + kv;
// the embedding: its LayerNorm, the row gather being the driver's). Pooling and the classifier run
// on the driving thread whatever the mapping says: they are given `host`'s entries (a CPU core of
// the profile). Median of `repeats` traced runs after 4 untraced ones, at each of the profile's
// token counts.
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "stile/calibrate/request_cost_profiler.hpp"
#include "stile/core/error.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/hetero/mapped_forward.hpp"
#include "stile/hetero/processor_set.hpp"
#include "stile/hetero/processor_trace.hpp"
#include "stile/plan/op_latency_profile.hpp"

namespace stile {

inline void measure_traced_op_latency(OpLatencyProfile& prof, std::size_t proc, std::size_t host,
                                      const std::filesystem::path& model_dir, const std::vector<NumberFormat>& linear,
                                      std::size_t repeats, ProgressBar* progress = nullptr) {
  require(proc < prof.processors.size() && host < prof.processors.size(), "traced op profiler: no such processor");
  const EncoderConfig c = read_encoder_config((model_dir / "config.json").string());
  const OpGraph g1 = op_graph_of(c, prof.shape.classes);
  const std::string& name = prof.processors[proc];
  std::size_t step = 0;
  for (const NumberFormat lf : linear) {
    OpMapping m = OpMapping::uniform(g1.size(), static_cast<std::uint8_t>(proc));
    for (std::size_t n = 0; n < g1.size(); ++n) {
      m.format[n] = is_linear(g1.nodes[n].kind) ? lf : NumberFormat::kF32;
    }
    const ProcessorSet procs = open_mapping_processors(prof.processors, g1, m, "the op latency profile");
    MappedForward f(BertWeights::load(model_dir, mapped_weights_precision(g1, m.format)), m, procs.pointers());
    for (std::size_t ti = 0; ti < prof.tokens.size(); ++ti) {
      const std::size_t t = prof.tokens[ti];
      (void)mapped_forward_us(f, t, 1);  // warm-up, untraced (the device converts its weights)
      ProcessorTrace trace;
      procs.owned[proc]->set_trace(&trace);
      (void)mapped_forward_us(f, t, repeats);
      procs.owned[proc]->set_trace(nullptr);
      std::map<std::string, std::vector<double>> us;
      for (const ProcessorSpan& sp : trace.spans()) {
        if (sp.processor == name) us[sp.op].push_back(1000.0 * (sp.end_ms - sp.start_ms));
      }
      const auto median = [&](const char* op) {
        std::vector<double>& v = us[op];
        require(!v.empty(), concat("traced op profiler: ", name, " recorded no ", op, " call"));
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const auto set = [&](OpNodeKind k, NumberFormat fmt, double value) {
        std::vector<double>& e = prof.entry(proc, k, fmt);
        if (e.empty()) e.assign(prof.tokens.size(), 0.0);
        e[ti] = value;
      };
      set(OpNodeKind::kQkv, lf, median("q") + median("kv"));
      set(OpNodeKind::kAttnOut, lf, median("attn_out"));
      set(OpNodeKind::kFfnIn, lf, median("ffn_in"));
      set(OpNodeKind::kFfnOut, lf, median("ffn_out"));
      set(OpNodeKind::kAttentionHead, NumberFormat::kF32, median("attention"));
      set(OpNodeKind::kLayerNorm, NumberFormat::kF32, median("layer_norm"));
      set(OpNodeKind::kEmbedding, NumberFormat::kF32, median("layer_norm"));
      for (const OpNodeKind k : {OpNodeKind::kPooling, OpNodeKind::kClassifier}) {
        set(k, NumberFormat::kF32, prof.latency_us(host, k, NumberFormat::kF32, t));
      }
      if (progress) progress->update(++step, linear.size() * prof.tokens.size());
    }
  }
  prof.settings["traced"][name] = {
      {"how", "the whole model mapped onto it, executed by the mapped forward; the median of each call's span on its "
              "trace lane (OpenCL: device markers, copies in and out included)"},
      {"repeats", repeats},
      {"pooling_and_classifier", "the driving thread's: " + prof.processors[host] + "'s entries"}};
}

}  // namespace stile
