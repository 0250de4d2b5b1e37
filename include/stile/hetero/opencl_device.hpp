#pragma once
// An OpenCL device as a processor (hetero/processor.hpp): a context and an in-order queue on one
// device, the GEMMs through CLBlast, and the element-wise and row-wise operators as small OpenCL
// kernels of our own (hetero/opencl_kernels.hpp). Tested here on PoCL (OpenCL on the CPU), a
// functional stand-in for a GPU such as a Mali.
//
//   * Weights: handed as the CPU's packed bytes (a LinearView in the device's declared format:
//     the int8 panels with their scales and zero point, or fp16 / fp32 panels) and converted on
//     the device at first use into a row-major fp32 matrix, kept for later calls (keyed by the
//     bytes' address): the model is stored once, in the CPU's form; the device's working copy is
//     made from the same bytes.
//   * GEMM: CLBlast's Sgemm. Hgemm where the device has cl_khr_fp16 is not built yet: every device
//     runs fp32, and gemm_note() says so (PoCL here has no cl_khr_fp16).
//   * Buffers: allocated host-visible (CL_MEM_ALLOC_HOST_PTR) where the device shares memory with
//     the host (CL_DEVICE_HOST_UNIFIED_MEMORY, as Mali), so transfers are copies within DRAM;
//     activations move with non-blocking writes and reads (the caller keeps them alive until
//     wait(), which the processor contract requires anyway).
//   * Trace (Processor::set_trace): two lanes, "opencl:0" with what the device ran, when (the
//     times of markers enqueued around each call, from the queue's profiling clock, moved onto the
//     trace's clock by one marker timed against the host when the trace is first used), and
//     "opencl:0 (host)" with the host's time to enqueue each call.
//   * Errors: every OpenCL and CLBlast call is checked; a failure (a kernel that does not build, an
//     error code) becomes "processor 'opencl:0': <the call>: OpenCL device '<device>': <what>"
//     at wait(), and the device is usable again after it.
//
// Optional at build time: without OpenCL headers and CLBlast (CMake: STILE_OPENCL, found or not)
// STILE_HAVE_OPENCL is not defined, opencl_available() is false and open() says the backend is
// absent.
#include <memory>
#include <string>

#include "stile/core/error.hpp"
#include "stile/hetero/processor.hpp"

#if defined(STILE_HAVE_OPENCL)
#include <CL/cl.h>
#include <clblast.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <utility>
#include <vector>

#include "stile/core/fnv1a.hpp"
#include "stile/hetero/opencl_kernels.hpp"
#include "stile/hetero/processor_trace.hpp"
#endif

namespace stile {

inline bool opencl_available() {
#if defined(STILE_HAVE_OPENCL)
  return true;
#else
  return false;
#endif
}

#if !defined(STILE_HAVE_OPENCL)

class OpenClDevice {
 public:
  static std::unique_ptr<Processor> open(std::size_t, LinearFormat, std::string name) {
    throw Error("stile: " + name + ": the OpenCL backend is absent in this build (no OpenCL headers or CLBlast)");
  }
};

#else

class OpenClDevice final : public Processor {
 public:
  // The index-th device over all platforms (in the ICD loader's order). `weights`: the format of
  // the LinearViews it is handed (converted on load).
  static std::unique_ptr<OpenClDevice> open(std::size_t index, LinearFormat weights, std::string name) {
    return std::unique_ptr<OpenClDevice>(new OpenClDevice(index, weights, std::move(name)));
  }
  OpenClDevice(const OpenClDevice&) = delete;
  OpenClDevice& operator=(const OpenClDevice&) = delete;
  ~OpenClDevice() override {
    if (queue_ != nullptr) clFinish(queue_);
    release_pending_spans();
    for (auto& [key, w] : weights_) clReleaseMemObject(w);
    for (cl_mem* m : {&a_, &c_, &r_, &bias_, &scores_, &qkv_, &ctx_}) {
      if (*m != nullptr) clReleaseMemObject(*m);
    }
    for (auto& [n, k] : kernels_) clReleaseKernel(k);
    if (program_ != nullptr) clReleaseProgram(program_);
    if (queue_ != nullptr) clReleaseCommandQueue(queue_);
    if (context_ != nullptr) clReleaseContext(context_);
  }

  const std::string& name() const override { return name_; }
  LinearFormat format() const override { return weights_format_; }
  std::size_t channel_granule() const override { return 1; }  // device matrices are row-major
  const std::string& device_name() const noexcept { return device_name_; }
  bool host_unified() const noexcept { return host_unified_; }
  bool has_fp16() const noexcept { return has_fp16_; }
  std::string gemm_note() const {
    return has_fp16_ ? "fp32 (CLBlast Sgemm; the device has cl_khr_fp16, but the Hgemm path is not built yet)"
                     : "fp32 (CLBlast Sgemm: the device has no cl_khr_fp16)";
  }

  // Builds an OpenCL C program on this device: a build failure throws naming the device and
  // carrying the build log (the constructor builds the device's own kernels this way).
  cl_program build_program(const std::string& source) const {
    const char* text = source.c_str();
    cl_int err = CL_SUCCESS;
    cl_program p = clCreateProgramWithSource(context_, 1, &text, nullptr, &err);
    check(err, "clCreateProgramWithSource");
    err = clBuildProgram(p, 1, &device_, "-cl-std=CL1.2", nullptr, nullptr);
    if (err != CL_SUCCESS) {
      std::size_t size = 0;
      clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
      std::string log(size, '\0');
      clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
      clReleaseProgram(p);
      throw Error(where() + "clBuildProgram: error " + std::to_string(err) + "; build log:\n" + log);
    }
    return p;
  }

  void enqueue(const OpCall& call) override {
    // Events: the device's queue cannot wait on the host's atomics, so both run here, on the
    // enqueuing thread (processor.hpp's contract): a signal after the device has finished its queue.
    if (const auto* s = std::get_if<SignalCall>(&call)) {
      const bool ok = !failed_ && clFinish(queue_) == CL_SUCCESS;
      if (!ok && !failed_) {
        failed_ = true;
        error_ = std::make_exception_ptr(processor_error(name_, call, where() + "clFinish failed (a queued call)"));
      }
      signal_event(*s->event, s->request, !ok);
      return;
    }
    if (failed_) return;  // the rest of the queue is skipped after a failure
    if (const auto* w = std::get_if<WaitCall>(&call)) {
      try {
        wait_event(*w->event, w->request);
      } catch (const std::exception& e) {
        failed_ = true;
        error_ = std::make_exception_ptr(processor_error(name_, call, e.what()));
      }
      return;
    }
    const double start = trace_ != nullptr ? trace_->now_ms() : 0.0;
    cl_event begin = nullptr;
    try {
      if (trace_ != nullptr) begin = marker();
      if (fail_next_) {  // tests: an OpenCL error from a real call (a zero-sized range)
        fail_next_ = false;
        cl_kernel k = kernel("gelu_inplace");
        const std::size_t zero = 0;
        check(clEnqueueNDRangeKernel(queue_, k, 1, nullptr, &zero, nullptr, 0, nullptr, nullptr),
              "clEnqueueNDRangeKernel(gelu_inplace)");
      }
      if (const auto* l = std::get_if<LinearCall>(&call)) {
        run_linear(*l);
      } else if (const auto* a = std::get_if<AttentionCall>(&call)) {
        run_attention(*a);
      } else if (const auto* n = std::get_if<LayerNormCall>(&call)) {
        run_layer_norm(*n);
      } else {
        run_gelu(std::get<GeluCall>(call));
      }
      if (begin != nullptr) pending_spans_.push_back({op_name(call), begin, marker()});
      begin = nullptr;
      check(clFlush(queue_), "clFlush");
    } catch (const std::exception& e) {
      failed_ = true;
      clFinish(queue_);
      error_ = std::make_exception_ptr(processor_error(name_, call, e.what()));
    }
    if (begin != nullptr) clReleaseEvent(begin);
    if (trace_ != nullptr) trace_->record(name_ + " (host)", op_name(call), start, trace_->now_ms());
  }

  void wait() override {
    const cl_int err = clFinish(queue_);
    record_pending_spans();
    if (!failed_ && err != CL_SUCCESS) {
      failed_ = true;
      error_ = std::make_exception_ptr(Error("processor '" + name_ + "': " + where() + "clFinish: error " +
                                             std::to_string(err) + " (a queued call failed)"));
    }
    if (failed_) {
      failed_ = false;
      std::exception_ptr e = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  // Tests: the next enqueued call meets an OpenCL error.
  void fail_next_call_for_testing() noexcept { fail_next_ = true; }

 private:
  OpenClDevice(std::size_t index, LinearFormat weights, std::string name)
      : name_(std::move(name)), weights_format_(weights) {
    cl_uint platforms = 0;
    check(clGetPlatformIDs(0, nullptr, &platforms), "clGetPlatformIDs");
    std::vector<cl_platform_id> ids(platforms);
    if (platforms > 0) check(clGetPlatformIDs(platforms, ids.data(), nullptr), "clGetPlatformIDs");
    std::vector<cl_device_id> devices;
    for (cl_platform_id p : ids) {
      cl_uint n = 0;
      if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
      std::vector<cl_device_id> d(n);
      check(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, d.data(), nullptr), "clGetDeviceIDs");
      devices.insert(devices.end(), d.begin(), d.end());
    }
    if (index >= devices.size()) {
      throw Error("stile: " + name_ + ": no OpenCL device " + std::to_string(index) + " (" +
                  std::to_string(devices.size()) + " found; is an ICD such as pocl-opencl-icd installed?)");
    }
    device_ = devices[index];
    device_name_ = info_string(CL_DEVICE_NAME);
    has_fp16_ = info_string(CL_DEVICE_EXTENSIONS).find("cl_khr_fp16") != std::string::npos;
    cl_bool unified = CL_FALSE;
    clGetDeviceInfo(device_, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, nullptr);
    host_unified_ = unified == CL_TRUE;
    cl_int err = CL_SUCCESS;
    context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
    check(err, "clCreateContext");
    // Profiling on: the trace's device lane reads the markers' times (a timestamp per command).
    queue_ = clCreateCommandQueue(context_, device_, CL_QUEUE_PROFILING_ENABLE, &err);
    check(err, "clCreateCommandQueue");
    program_ = build_program(kOpenClKernels);
  }

  std::string where() const { return "OpenCL device '" + device_name_ + "': "; }
  void check(cl_int err, const char* call) const {
    if (err != CL_SUCCESS) throw Error(where() + call + ": error " + std::to_string(err));
  }
  void check_blast(clblast::StatusCode s, const char* call) const {
    if (s != clblast::StatusCode::kSuccess) {
      throw Error(where() + call + ": CLBlast status " + std::to_string(static_cast<int>(s)));
    }
  }
  std::string info_string(cl_device_info what) const {
    std::size_t size = 0;
    clGetDeviceInfo(device_, what, 0, nullptr, &size);
    std::string s(size, '\0');
    clGetDeviceInfo(device_, what, size, s.data(), nullptr);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
  }

  cl_kernel kernel(const char* name) {
    auto it = kernels_.find(name);
    if (it != kernels_.end()) return it->second;
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program_, name, &err);
    check(err, "clCreateKernel");
    kernels_.emplace(name, k);
    return k;
  }
  template <class... Args>
  void launch(const char* name, std::size_t g0, std::size_t g1, const Args&... args) {
    cl_kernel k = kernel(name);
    cl_uint i = 0;
    (check(clSetKernelArg(k, i++, sizeof(Args), &args), "clSetKernelArg"), ...);
    const std::size_t global[2] = {g0, g1};
    check(clEnqueueNDRangeKernel(queue_, k, g1 == 0 ? 1 : 2, nullptr, global, nullptr, 0, nullptr, nullptr),
          "clEnqueueNDRangeKernel");
  }

  cl_mem make_buffer(std::size_t bytes) {
    cl_int err = CL_SUCCESS;
    const cl_mem_flags flags = CL_MEM_READ_WRITE | (host_unified_ ? CL_MEM_ALLOC_HOST_PTR : 0);
    cl_mem m = clCreateBuffer(context_, flags, std::max<std::size_t>(bytes, 4), nullptr, &err);
    check(err, "clCreateBuffer");
    return m;
  }
  // A scratch buffer of at least `bytes` (grown, never shrunk; the old one is released once the
  // queued commands that use it are done, as OpenCL defers it).
  cl_mem scratch(cl_mem& m, std::size_t& size, std::size_t bytes) {
    if (m == nullptr || size < bytes) {
      if (m != nullptr) clReleaseMemObject(m);
      m = make_buffer(bytes);
      size = bytes;
    }
    return m;
  }
  void write(cl_mem m, const void* host, std::size_t bytes, std::size_t offset = 0) {
    check(clEnqueueWriteBuffer(queue_, m, CL_FALSE, offset, bytes, host, 0, nullptr, nullptr), "clEnqueueWriteBuffer");
  }
  // rows x cols floats between a strided host matrix (row stride ld floats) and a contiguous buffer.
  void write_rect(cl_mem m, const float* host, std::size_t rows, std::size_t cols, std::size_t ld) {
    const std::size_t origin[3] = {0, 0, 0}, region[3] = {cols * 4, rows, 1};
    check(clEnqueueWriteBufferRect(queue_, m, CL_FALSE, origin, origin, region, cols * 4, 0, ld * 4, 0, host, 0,
                                   nullptr, nullptr),
          "clEnqueueWriteBufferRect");
  }
  void read_rect(cl_mem m, std::size_t buffer_ld, float* host, std::size_t rows, std::size_t cols, std::size_t ld,
                 std::size_t buffer_col = 0) {
    const std::size_t borigin[3] = {buffer_col * 4, 0, 0}, horigin[3] = {0, 0, 0}, region[3] = {cols * 4, rows, 1};
    check(clEnqueueReadBufferRect(queue_, m, CL_FALSE, borigin, horigin, region, buffer_ld * 4, 0, ld * 4, 0, host, 0,
                                  nullptr, nullptr),
          "clEnqueueReadBufferRect");
  }

  // A fingerprint of w's contents, so that a matrix freed and another allocated at the same
  // address is not taken for it: its shape and format, the int8 scales and zero point (one per
  // channel), or a strided sample of the fp16 / fp32 values.
  static std::uint64_t fingerprint(const LinearView& w) {
    std::uint64_t h = kFnv1aOffset;
    const auto mix = [&](const void* p, std::size_t bytes) { h = fnv1a(h, p, bytes); };
    const std::size_t shape[3] = {w.rows(), w.cols(), static_cast<std::size_t>(w.format)};
    mix(shape, sizeof shape);
    if (w.format == LinearFormat::kInt8) {
      mix(w.i8.scales, w.rows() * sizeof(float));
      mix(&w.i8.zero_point, sizeof w.i8.zero_point);
      const std::size_t bytes = w.i8.panels() * w.i8.nr * w.i8.padded_cols();
      for (std::size_t i = 0; i < bytes; i += 4093) mix(w.i8.packed + i, 1);
    } else {
      const std::size_t nr = w.format == LinearFormat::kF16 ? w.f16.nr : w.f32.nr;
      const std::size_t count = (w.rows() + nr - 1) / nr * nr * w.cols();
      for (std::size_t i = 0; i < count; i += 4093) {
        if (w.format == LinearFormat::kF16) {
          mix(w.f16.data + i, 2);
        } else {
          mix(w.f32.data + i, 4);
        }
      }
    }
    return h;
  }

  // The row-major fp32 matrix of w on the device, converted from the handed bytes at first use
  // (kept by their address and fingerprint).
  cl_mem device_weights(const LinearView& w) {
    require(w.format == weights_format_, "weights in " + std::string(to_string(w.format)) + ", but the device takes " +
                                             to_string(weights_format_));
    const void* address = w.format == LinearFormat::kInt8 ? static_cast<const void*>(w.i8.packed)
                          : w.format == LinearFormat::kF16 ? static_cast<const void*>(w.f16.data)
                                                           : static_cast<const void*>(w.f32.data);
    const std::pair<const void*, std::uint64_t> key{address, fingerprint(w)};
    if (auto it = weights_.find(key); it != weights_.end()) return it->second;
    if (auto stale = weights_.lower_bound({address, 0}); stale != weights_.end() && stale->first.first == address) {
      clReleaseMemObject(stale->second);  // other weights lived here before
      weights_.erase(stale);
    }
    const std::size_t N = w.rows(), K = w.cols();
    cl_mem out = make_buffer(N * K * 4);
    const auto N32 = static_cast<cl_uint>(N), K32 = static_cast<cl_uint>(K);
    cl_int err = CL_SUCCESS;
    // The handed bytes, copied in as they are (blocking: they are the model's, but a load must
    // not depend on the caller keeping a temporary alive).
    const auto upload = [&](const void* data, std::size_t bytes) {
      cl_mem m = clCreateBuffer(context_, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, std::max<std::size_t>(bytes, 4),
                                const_cast<void*>(data), &err);
      check(err, "clCreateBuffer(weights)");
      return m;
    };
    if (w.format == LinearFormat::kInt8) {
      const std::size_t panels = w.i8.panels(), nr = w.i8.nr;
      cl_mem packed = upload(w.i8.packed, panels * nr * w.i8.padded_cols());
      cl_mem scales = upload(w.i8.scales, panels * nr * 4);
      const cl_int zp = w.i8.zero_point;
      const auto nr32 = static_cast<cl_uint>(nr);
      launch("unpack_int8", N, K, packed, scales, zp, N32, K32, nr32, out);
      clReleaseMemObject(packed);
      clReleaseMemObject(scales);
    } else {
      const std::size_t nr = w.format == LinearFormat::kF16 ? w.f16.nr : w.f32.nr, panels = (N + nr - 1) / nr;
      const std::size_t elem = w.format == LinearFormat::kF16 ? 2 : 4;
      cl_mem data = upload(w.format == LinearFormat::kF16 ? static_cast<const void*>(w.f16.data)
                                                          : static_cast<const void*>(w.f32.data),
                           panels * nr * K * elem);
      const auto nr32 = static_cast<cl_uint>(nr);
      launch(w.format == LinearFormat::kF16 ? "unpack_f16" : "unpack_f32", N, K, data, N32, K32, nr32, out);
      clReleaseMemObject(data);
    }
    weights_.emplace(key, out);
    return out;
  }

  void run_linear(const LinearCall& c) {
    require(c.n0 <= c.n1 && c.n1 <= c.w.rows(), "linear call: channels outside the layer");
    const std::size_t M = c.M, n = c.n1 - c.n0, K = c.w.cols();
    if (M == 0 || n == 0) return;
    int act = 0;
    if (c.epilogue == LinearEpilogue::kBiasGelu) {
      require(c.gelu != GeluFormat::kInteger, "the integer GELU is not on this device");
      act = c.gelu == GeluFormat::kExact ? 1 : 2;
    }
    cl_mem W = device_weights(c.w);
    cl_mem A = scratch(a_, a_size_, M * K * 4), C = scratch(c_, c_size_, M * n * 4);
    cl_mem B = scratch(bias_, bias_size_, n * 4), R = scratch(r_, r_size_, M * n * 4);
    write_rect(A, c.A, M, K, c.lda);
    write(B, c.bias + c.n0, n * 4);
    const bool residual = c.epilogue == LinearEpilogue::kBiasResidual;
    if (residual) write_rect(R, c.residual + c.n0, M, n, c.residual_ld);
    check_blast(clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kYes, M,
                                     n, K, 1.0f, A, 0, K, W, c.n0 * K, K, 0.0f, C, 0, n, &queue_, nullptr),
                "clblast::Gemm<float>");
    const cl_int has_res = residual ? 1 : 0, a32 = act;
    const auto M32 = static_cast<cl_uint>(M), n32 = static_cast<cl_uint>(n);
    launch("bias_act", M, n, C, B, R, has_res, a32, M32, n32);
    read_rect(C, n, c.C + c.n0, M, n, c.ldc);
  }

  void run_attention(const AttentionCall& a) {
    require(a.softmax == SoftmaxFormat::kF32, "the integer softmax is not on this device");
    require(a.seq_offsets.size() >= 2, "attention call: no sequences");
    const std::size_t T = a.seq_offsets.back(), d = a.heads_total * a.head_dim, hd = a.head_dim;
    if (T == 0 || a.heads.empty()) return;
    std::size_t longest = 0;
    for (std::size_t s = 0; s + 1 < a.seq_offsets.size(); ++s) {
      longest = std::max(longest, a.seq_offsets[s + 1] - a.seq_offsets[s]);
    }
    cl_mem qkv = scratch(qkv_, qkv_size_, T * 3 * d * 4), ctx = scratch(ctx_, ctx_size_, T * d * 4);
    cl_mem scores = scratch(scores_, scores_size_, longest * longest * 4);
    write_rect(qkv, a.qkv, T, 3 * d, a.ld_qkv);
    for (std::size_t s = 0; s + 1 < a.seq_offsets.size(); ++s) {
      const std::size_t b = a.seq_offsets[s], L = a.seq_offsets[s + 1] - b;
      if (L == 0) continue;
      for (const std::uint16_t h : a.heads) {
        require(h < a.heads_total, "attention call: head index out of range");
        const std::size_t q = b * 3 * d + h * hd;
        check_blast(clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kYes,
                                         L, L, hd, 1.0f, qkv, q, 3 * d, qkv, q + d, 3 * d, 0.0f, scores, 0, L, &queue_,
                                         nullptr),
                    "clblast::Gemm<float>(scores)");
        const auto L32 = static_cast<cl_uint>(L);
        const float scale = a.scale;
        launch("softmax_rows", L, 0, scores, L32, L32, L32, scale);
        check_blast(clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kNo,
                                         L, hd, L, 1.0f, scores, 0, L, qkv, q + 2 * d, 3 * d, 0.0f, ctx, b * d + h * hd,
                                         d, &queue_, nullptr),
                    "clblast::Gemm<float>(context)");
      }
    }
    for (const std::uint16_t h : a.heads) read_rect(ctx, d, a.ctx + h * hd, T, hd, a.ld_ctx, h * hd);
  }

  void run_layer_norm(const LayerNormCall& c) {
    require(c.format == NormFormat::kF32, std::string("the ") + to_string(c.format) + " LayerNorm is not on this device");
    require(c.r0 <= c.r1, "layer_norm call: rows");
    const std::size_t rows = c.r1 - c.r0;
    if (rows == 0) return;
    cl_mem X = scratch(a_, a_size_, rows * c.cols * 4), G = scratch(bias_, bias_size_, 2 * c.cols * 4);
    write_rect(X, c.x + c.r0 * c.ld, rows, c.cols, c.ld);
    write(G, c.gamma, c.cols * 4);
    write(G, c.beta, c.cols * 4, c.cols * 4);
    const auto r32 = static_cast<cl_uint>(rows), c32 = static_cast<cl_uint>(c.cols);
    const float eps = c.eps;
    launch("layer_norm_rows", rows, 0, X, G, r32, c32, eps);
    read_rect(X, c.cols, c.x + c.r0 * c.ld, rows, c.cols, c.ld);
  }

  void run_gelu(const GeluCall& g) {
    require(g.format != GeluFormat::kInteger, "the integer GELU is not on this device");
    if (g.n == 0) return;
    cl_mem X = scratch(a_, a_size_, g.n * 4);
    write(X, g.x, g.n * 4);
    const auto n32 = static_cast<cl_uint>(g.n);
    const cl_int act = g.format == GeluFormat::kExact ? 1 : 2;
    launch("gelu_inplace", g.n, 0, X, n32, act);
    check(clEnqueueReadBuffer(queue_, X, CL_FALSE, 0, g.n * 4, g.x, 0, nullptr, nullptr), "clEnqueueReadBuffer");
  }

  cl_event marker() {
    cl_event e = nullptr;
    check(clEnqueueMarkerWithWaitList(queue_, 0, nullptr, &e), "clEnqueueMarkerWithWaitList");
    return e;
  }
  // A marker completes when every command before it in the (in-order) queue has: its end time is
  // the end of what came before.
  static double marker_end_ms(cl_event e) {
    cl_ulong ns = 0;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof ns, &ns, nullptr);
    return static_cast<double>(ns) * 1e-6;
  }
  // Device clock -> trace clock: a marker run on an idle queue, timed from the host on both sides.
  void calibrate_trace_clock() {
    clFinish(queue_);
    const double host0 = trace_->now_ms();
    cl_event e = marker();
    clFinish(queue_);
    const double host1 = trace_->now_ms();
    device_to_trace_ms_ = 0.5 * (host0 + host1) - marker_end_ms(e);
    clReleaseEvent(e);
    calibrated_for_ = trace_;
  }
  void record_pending_spans() {
    if (trace_ != nullptr && !pending_spans_.empty()) {
      if (calibrated_for_ != trace_) calibrate_trace_clock();
      for (const PendingSpan& p : pending_spans_) {
        trace_->record(name_, p.op, marker_end_ms(p.begin) + device_to_trace_ms_,
                       marker_end_ms(p.end) + device_to_trace_ms_);
      }
    }
    release_pending_spans();
  }
  void release_pending_spans() {
    for (const PendingSpan& p : pending_spans_) {
      clReleaseEvent(p.begin);
      clReleaseEvent(p.end);
    }
    pending_spans_.clear();
  }

  struct PendingSpan {
    std::string op;
    cl_event begin, end;
  };

  std::string name_;
  LinearFormat weights_format_;
  cl_device_id device_ = nullptr;
  std::string device_name_;
  bool has_fp16_ = false, host_unified_ = false;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  cl_program program_ = nullptr;
  std::map<std::string, cl_kernel> kernels_;
  std::map<std::pair<const void*, std::uint64_t>, cl_mem> weights_;
  cl_mem a_ = nullptr, c_ = nullptr, r_ = nullptr, bias_ = nullptr, scores_ = nullptr, qkv_ = nullptr, ctx_ = nullptr;
  std::size_t a_size_ = 0, c_size_ = 0, r_size_ = 0, bias_size_ = 0, scores_size_ = 0, qkv_size_ = 0, ctx_size_ = 0;
  bool failed_ = false, fail_next_ = false;
  std::exception_ptr error_;
  std::vector<PendingSpan> pending_spans_;  // traced calls not yet waited for
  const ProcessorTrace* calibrated_for_ = nullptr;
  double device_to_trace_ms_ = 0;
};

#endif  // STILE_HAVE_OPENCL

}  // namespace stile
