// libFuzzer target for the readers of the mapping search's files, all outside bytes: the op
// latency profile (plan/op_latency_profile.hpp), the op accuracy model (plan/op_accuracy_model.hpp)
// and the mapping file (plan/mapping_file.hpp). Each must refuse an input with a stile::Error or
// accept it, and what it accepts must answer its users' lookups (the emulator's cost table, a
// prediction, the ModelPrecision). Seeds: tests/plan/fuzz_seeds_mapping/.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "stile/plan/mapping_file.hpp"
#include "stile/plan/op_accuracy_model.hpp"
#include "stile/plan/op_latency_profile.hpp"
#include "stile/plan/schedule_emulator.hpp"

namespace {
template <class Read>
void refused_or_read(Read&& read) {
  try {
    read();
  } catch (const stile::Error&) {
  }
}
// Graphs the fuzzer may make the readers build stay small, so an input runs in milliseconds.
bool small(const stile::OpGraphShape& s) { return s.layers <= 8 && s.heads <= 16; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  refused_or_read([&] {
    const nlohmann::json j = stile::parse_strict_json(text, stile::op_latency_profile_detail::kMaxJsonDepth,
                                                      "fuzz.ops.json", "the op latency profile");
    const stile::OpLatencyProfile p = stile::OpLatencyProfile::from_json(j, "fuzz.ops.json");
    if (small(p.shape)) {
      stile::OpGraphShape s = p.shape;
      s.tokens = p.tokens.front();
      const stile::OpGraph g = stile::bert_op_graph(s);
      const stile::OpCostTable c = stile::OpCostTable::from_profile(g, p);
      (void)stile::predict_latency_us(g, c, stile::OpMapping::uniform(g.size(), 0));
    }
    (void)p.request_cost_us(p.processors.size() + 1, p.tokens.back());  // the last row, at another length
    if (p.processors.size() > 1) (void)p.transfer_us(0, 1, 64, p.tokens.back() + 1);
    (void)p.to_json().dump();
  });
  refused_or_read([&] {
    const nlohmann::json j = stile::parse_strict_json(text, stile::op_accuracy_model_detail::kMaxJsonDepth,
                                                      "fuzz.accuracy.json", "the op accuracy model");
    if (j.is_object() && j.contains("shape") && j["shape"].is_object()) {
      // Bound the graph the reader builds before it builds it (the reader itself allows up to 1024 layers).
      const auto& s = j["shape"];
      if (s.contains("layers") && s["layers"].is_number_unsigned() && s["layers"].get<std::uint64_t>() > 8) return;
      if (s.contains("heads") && s["heads"].is_number_unsigned() && s["heads"].get<std::uint64_t>() > 16) return;
    }
    const stile::OpAccuracyModel m = stile::OpAccuracyModel::from_json(j, "fuzz.accuracy.json");
    (void)m.predict(std::vector<stile::NumberFormat>(m.loss.size(), stile::NumberFormat::kF32));
    (void)m.to_json().dump();
  });
  refused_or_read([&] {
    const nlohmann::json j =
        stile::parse_strict_json(text, 16, "fuzz.mapping.json", "the op mapping");
    if (j.is_object() && j.contains("shape") && j["shape"].is_object()) {
      const auto& s = j["shape"];
      if (s.contains("layers") && s["layers"].is_number_unsigned() && s["layers"].get<std::uint64_t>() > 8) return;
      if (s.contains("heads") && s["heads"].is_number_unsigned() && s["heads"].get<std::uint64_t>() > 16) return;
    }
    const stile::OpMappingFile m = stile::OpMappingFile::from_json(j, "fuzz.mapping.json");
    stile::EncoderConfig c;
    c.num_layers = m.shape.layers;
    c.hidden = m.shape.hidden;
    c.num_heads = m.shape.heads;
    c.intermediate = m.shape.ffn;
    (void)stile::model_precision_of(m, c, "fuzz.mapping.json");
    (void)m.to_json().dump();
  });
  return 0;
}
