#pragma once
// Whether a request's IO overlaps its compute (STI's pipeline) or all reads come first (the
// Load&Exec baseline).

namespace stile {

enum class PipelineMode { pipelined, load_then_execute };

inline const char* to_string(PipelineMode m) noexcept {
  return m == PipelineMode::pipelined ? "pipelined" : "load-then-execute";
}

}  // namespace stile
