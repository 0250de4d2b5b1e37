#pragma once
// A processor: something that runs one operator of a layer on a slice of its output (a range of
// output channels of a linear layer, a set of attention heads, a range of rows of a LayerNorm) in
// its own number format, asynchronously, and reports when done. The cooperative layer
// (hetero/split_layer.hpp) and any per-operator mapping (a search that puts each operator on a
// processor) drive processors through this one interface; a backend is a CPU cluster
// (hetero/cpu_cluster.hpp) or, later, an OpenCL or CUDA device.
//
// Contract of every backend:
//   * enqueue(call) starts `call` and may return before it is done; calls run in the order they
//     were enqueued (an in-order queue, like an OpenCL command queue). A backend that runs on the
//     caller's own thread finishes the call inside enqueue().
//   * wait() returns when every enqueued call has finished. If one failed, wait() throws a
//     stile::Error naming the processor and the call ("processor 'cpu:1': linear ffn_in channels
//     [384, 1536) of 32 rows: ..."); the calls after it in the queue are skipped, and the
//     processor is usable again after wait() returns or throws.
//   * One thread drives a processor at a time (enqueue and wait are not for concurrent callers).
//   * The caller keeps every buffer a call points at alive and untouched (but by that call) until
//     wait() returns. Calls on different processors that run at once must write disjoint memory:
//     that is what a slice is for.
//   * Events order calls across processors without the driving thread waiting (a mapped forward,
//     hetero/mapped_forward.hpp): SignalCall marks a point of one queue, WaitCall holds another
//     queue until that point is reached. A SignalCall runs even after a failure skipped the calls
//     before it (so no queue waits forever), marking the event failed; a WaitCall on a failed event
//     fails its own processor ("an input from another processor failed"). A backend that cannot
//     wait inside its queue (an OpenCL device) waits on the enqueuing thread: the driver enqueues
//     in topological order, so every event it waits for is already enqueued and never blocks on it.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <variant>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/ops/linear.hpp"
#include "stile/ops/precision.hpp"

namespace stile {

// What a linear call fuses after its GEMM.
enum class LinearEpilogue : std::uint8_t {
  kBias,          // C = A W^T + b
  kBiasGelu,      // C = GELU(A W^T + b), GELU in the call's GeluFormat (element-wise ones only)
  kBiasResidual,  // C = A W^T + b + R (R may be C itself)
};

// C[:, n0:n1) = epilogue(A W[n0:n1)^T): output channels [n0, n1) of a linear layer whose whole
// weight (all N channels) `w` is in the processor's format. Pointers are to the whole layer's
// buffers (column 0); the processor offsets them by n0. @pre n0 is a multiple of the processor's
// channel_granule() (its weights' panel width), n0 <= n1 <= w.rows().
struct LinearCall {
  const char* op = "linear";  // names the call in errors and traces ("q", "ffn_in", ...)
  std::size_t M = 0;          // rows (tokens)
  const float* A = nullptr;
  std::size_t lda = 0;
  LinearView w;
  std::size_t n0 = 0, n1 = 0;
  float* C = nullptr;
  std::size_t ldc = 0;
  LinearEpilogue epilogue = LinearEpilogue::kBias;
  const float* bias = nullptr;  // [N]
  const float* residual = nullptr;
  std::size_t residual_ld = 0;
  GeluFormat gelu = GeluFormat::kExact;
};

// Self-attention for the heads listed (each over every sequence): ctx columns of those heads only.
// qkv: [tokens x 3d] (Q at column 0, K at d, V at 2d, d = heads_total x head_dim).
struct AttentionCall {
  const float* qkv = nullptr;
  std::size_t ld_qkv = 0;
  std::span<const std::size_t> seq_offsets;
  std::span<const std::uint16_t> heads;  // which heads this processor computes
  std::size_t heads_total = 0;
  std::size_t head_dim = 0;
  float* ctx = nullptr;
  std::size_t ld_ctx = 0;
  float scale = 1.0f;
  SoftmaxFormat softmax = SoftmaxFormat::kF32;
};

// LayerNorm of rows [r0, r1) of x [rows x cols] (row stride ld), in place.
struct LayerNormCall {
  float* x = nullptr;
  std::size_t r0 = 0, r1 = 0, cols = 0, ld = 0;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float eps = 1e-12f;
  NormFormat format = NormFormat::kF32;
};

// GELU over n contiguous values (a GELU whose result depends on the whole tensor, as the integer
// one's per-tensor scale, runs as one call over the whole tensor).
struct GeluCall {
  float* x = nullptr;
  std::size_t n = 0;
  GeluFormat format = GeluFormat::kExact;
};

// A point of one processor's queue that calls on other processors can wait for. `count` is the
// number of the last request that reached it (requests are numbered from 1, so an event needs no
// reset between them); `failed` the last request whose producer failed.
struct ProcessorEvent {
  alignas(64) std::atomic<std::uint32_t> count{0};
  std::atomic<std::uint32_t> failed{0};
};

// Marks `event` reached by request `request` (every call before it on this processor is done).
struct SignalCall {
  ProcessorEvent* event = nullptr;
  std::uint32_t request = 0;
  const char* op = "signal";  // the node it follows (errors, traces)
};

// Holds this processor's queue until `event` is reached by request `request`.
struct WaitCall {
  const ProcessorEvent* event = nullptr;
  std::uint32_t request = 0;
  const char* op = "wait";  // the node that waits (errors, traces)
};

using OpCall = std::variant<LinearCall, AttentionCall, LayerNormCall, GeluCall, SignalCall, WaitCall>;

// Signals `e` for `request`; `failed`: this processor failed before reaching it.
inline void signal_event(ProcessorEvent& e, std::uint32_t request, bool failed) noexcept {
  if (failed) e.failed.store(request, std::memory_order_relaxed);
  e.count.store(request, std::memory_order_release);
  e.count.notify_all();
}

// Waits until `e` is reached by `request` (spinning a while, then sleeping; thread_pool.hpp's
// spin_then_wait); throws when its producer failed.
inline void wait_event(const ProcessorEvent& e, std::uint32_t request) {
  // Requests count up by one and a queue waits only for earlier nodes of the same request, so
  // `count` is request - 1 or request here: equality is the test (no wrap-around issue).
  // A processor waiting for its input keeps its core awake for up to kAwake: spinning, with a
  // yield every 64 pauses (so that a thread sharing the core, such as the driver enqueueing, gets
  // it), then sleeps. A core that sleeps through a wait of a few hundred microseconds is slow to
  // wake under a hypervisor (a halted vCPU; docs/design-notes.md), which spin_then_wait's
  // short spin does not cover.
  constexpr auto kAwake = std::chrono::milliseconds(5);
  const auto reached = [&] { return e.count.load(std::memory_order_acquire) == request; };
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t i = 1; !reached(); ++i) {
    if (i % 64 != 0) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
      continue;
    }
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() - start > kAwake) {
      spin_then_wait(e.count, [request](std::uint32_t now) { return now == request; });
      break;
    }
  }
  if (e.failed.load(std::memory_order_relaxed) == request) throw Error("an input from another processor failed");
}

// The call as errors and traces name it.
inline std::string describe(const OpCall& call) {
  struct Describe {
    std::string operator()(const LinearCall& c) const {
      return std::string("linear ") + c.op + " channels [" + std::to_string(c.n0) + ", " + std::to_string(c.n1) +
             ") of " + std::to_string(c.M) + " rows in " + to_string(c.w.format);
    }
    std::string operator()(const AttentionCall& c) const {
      return "attention " + std::to_string(c.heads.size()) + " of " + std::to_string(c.heads_total) + " heads";
    }
    std::string operator()(const LayerNormCall& c) const {
      return "layer_norm rows [" + std::to_string(c.r0) + ", " + std::to_string(c.r1) + ")";
    }
    std::string operator()(const GeluCall& c) const { return "gelu of " + std::to_string(c.n) + " values"; }
    std::string operator()(const SignalCall& c) const { return std::string("signal after ") + c.op; }
    std::string operator()(const WaitCall& c) const { return std::string("wait before ") + c.op; }
  };
  return std::visit(Describe{}, call);
}

// The short name of the call's operator (trace events).
inline std::string op_name(const OpCall& call) {
  if (const auto* l = std::get_if<LinearCall>(&call)) return l->op;
  if (std::holds_alternative<AttentionCall>(call)) return "attention";
  if (std::holds_alternative<LayerNormCall>(call)) return "layer_norm";
  if (std::holds_alternative<SignalCall>(call)) return "signal";
  if (std::holds_alternative<WaitCall>(call)) return "wait";
  return "gelu";
}

// The error a failed call becomes: the processor, the call, and what went wrong.
inline Error processor_error(const std::string& processor, const OpCall& call, const std::string& what) {
  return Error("processor '" + processor + "': " + describe(call) + ": " + what);
}

class ProcessorTrace;  // hetero/processor_trace.hpp

class Processor {
 public:
  virtual ~Processor() = default;
  // "cpu:0", "opencl:0": what errors, traces and the CLI call it.
  virtual const std::string& name() const = 0;
  // The format its linear layers run in (the weights a LinearCall hands it are in this format).
  virtual LinearFormat format() const = 0;
  // Slices of output channels must start at a multiple of this (the panel width of its weights).
  virtual std::size_t channel_granule() const = 0;
  // True when its linear calls may carry weights in any format (a CPU cluster runs stile's
  // kernels of every format); false when they must be in format() (an OpenCL device).
  virtual bool runs_any_format() const { return false; }
  virtual void enqueue(const OpCall& call) = 0;
  // Enqueues `calls` in order; a backend may hand them over at once (one lock, one wake-up).
  virtual void enqueue_batch(std::span<const OpCall> calls) {
    for (const OpCall& c : calls) enqueue(c);
  }
  // True when a WaitCall waits inside its queue (its own thread), so enqueueing one never blocks
  // the caller; false when the enqueuing thread waits (an OpenCL device, a caller-thread cluster).
  virtual bool waits_in_queue() const { return false; }
  virtual void wait() = 0;
  // When set, every call records its span (processor, op, start, end) there.
  void set_trace(ProcessorTrace* trace) noexcept { trace_ = trace; }

 protected:
  ProcessorTrace* trace_ = nullptr;
};

}  // namespace stile
