// The OpenCL processor (hetero/opencl_device.hpp) on PoCL, OpenCL on this CPU: each of its calls
// (the weights' conversion from the CPU's int8 / fp16 / fp32 bytes, the CLBlast GEMM with our bias,
// GELU and residual kernels, attention with our softmax, LayerNorm, GELU) against a naive
// reference; a kernel that does not build and an OpenCL error fail with the device and the call;
// the split layer with the device as processor 1; the engine going on with the CPU after the
// device failed a request; and mappings with nodes on the device, in memory and behind the engine.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hetero/random_layer.hpp"
#include "stile/engine.hpp"
#include "stile/hetero/cpu_cluster.hpp"
#include "stile/hetero/opencl_device.hpp"
#include "stile/hetero/mapped_forward.hpp"
#include "stile/hetero/mapped_layer_compute.hpp"
#include "stile/hetero/processor_trace.hpp"
#include "stile/model/bert_model.hpp"
#include "stile/hetero/split_layer.hpp"
#include "stile/hetero/split_layer_compute.hpp"
#include "stile/kernels/gelu_erf_approx.hpp"
#include "stile/ops/encoder_layer.hpp"
#include "support/converted_store.hpp"
#include "support/error_of.hpp"
#include "support/rng.hpp"
#include "support/row_cosine.hpp"
#include "support/temp_dir.hpp"
#include "support/tiny_bert.hpp"

namespace {

using stile::LinearFormat;

std::unique_ptr<stile::OpenClDevice> device(LinearFormat f) { return stile::OpenClDevice::open(0, f, "opencl:0"); }

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  stile_test::Rng rng{seed};
  std::vector<float> v(n);
  for (float& x : v) x = rng.unit() * scale;
  return v;
}

// The weight the device must see: the CPU's stored value, dequantized (int8), or as stored.
float stored_weight(const stile::LinearView& w, const std::vector<float>& dense, std::size_t n, std::size_t k) {
  if (w.format == LinearFormat::kInt8) return w.i8.dequantized(n, k);
  const float x = dense[n * w.cols() + k];
  return w.format == LinearFormat::kF16 ? stile::half_to_float(stile::float_to_half(x)) : x;
}

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

TEST_CASE("the OpenCL device's linear calls equal the naive product of the weights it converts", "[opencl]") {
  const std::size_t M = 5, N = 70, K = 48, n0 = 16, n1 = 61;
  const std::vector<float> dense = random_vector(N * K, 1, 0.2f), A = random_vector(M * (K + 3), 2),
                           bias = random_vector(N, 3), R0 = random_vector(M * (N + 1), 4);
  for (const LinearFormat f : {LinearFormat::kInt8, LinearFormat::kF16, LinearFormat::kF32}) {
    auto dev = device(f);
    INFO(dev->device_name() << "; " << dev->gemm_note());
    const stile::LinearWeights w =
        stile::LinearWeights::make(stile::DenseF32(dense.data(), N, K), f, stile::Int8Scheme::kAsymmetricPerTensor, "w");
    for (const auto epi : {stile::LinearEpilogue::kBias, stile::LinearEpilogue::kBiasGelu, stile::LinearEpilogue::kBiasResidual}) {
      for (const auto gelu : {stile::GeluFormat::kExact, stile::GeluFormat::kErfApprox}) {
        std::vector<float> C = R0;  // the residual is C itself, in place, as the layer uses it
        stile::LinearCall c;
        c.M = M;
        c.A = A.data();
        c.lda = K + 3;
        c.w = w.view();
        c.n0 = n0;
        c.n1 = n1;
        c.C = C.data();
        c.ldc = N + 1;
        c.epilogue = epi;
        c.bias = bias.data();
        c.residual = C.data();
        c.residual_ld = N + 1;
        c.gelu = gelu;
        dev->enqueue(c);
        dev->wait();
        double worst = 0;
        for (std::size_t m = 0; m < M; ++m) {
          for (std::size_t n = 0; n < N + 1; ++n) {
            const float got = C[m * (N + 1) + n];
            if (n < n0 || n >= n1) {
              REQUIRE(got == R0[m * (N + 1) + n]);  // outside the slice: untouched
              continue;
            }
            double acc = bias[n];
            for (std::size_t k = 0; k < K; ++k) acc += double(A[m * (K + 3) + k]) * stored_weight(c.w, dense, n, k);
            if (epi == stile::LinearEpilogue::kBiasGelu) {
              acc = gelu == stile::GeluFormat::kExact ? gelu_exact(acc) : stile::gelu_erf_approx(float(acc));
            }
            if (epi == stile::LinearEpilogue::kBiasResidual) acc += R0[m * (N + 1) + n];
            worst = std::max(worst, std::abs(got - acc) / (1 + std::abs(acc)));
          }
        }
        INFO(stile::to_string(f) << " epilogue " << int(epi) << " gelu " << int(gelu));
        CHECK(worst < 1e-5);
      }
    }
  }
}

TEST_CASE("the OpenCL device's attention, LayerNorm and GELU equal naive references", "[opencl]") {
  auto dev = device(LinearFormat::kInt8);
  const std::size_t H = 4, hd = 8, d = H * hd;
  const std::vector<std::size_t> offsets{0, 5, 12};
  const std::size_t T = offsets.back();
  const std::vector<float> qkv = random_vector(T * 3 * d, 5);
  std::vector<float> ctx(T * d, -3.0f);
  const std::vector<std::uint16_t> heads{1, 3};
  stile::AttentionCall a;
  a.qkv = qkv.data();
  a.ld_qkv = 3 * d;
  a.seq_offsets = offsets;
  a.heads = heads;
  a.heads_total = H;
  a.head_dim = hd;
  a.ctx = ctx.data();
  a.ld_ctx = d;
  a.scale = 0.35f;
  dev->enqueue(a);
  dev->wait();
  double worst = 0;
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    const std::size_t b = offsets[s], L = offsets[s + 1] - b;
    for (std::size_t h = 0; h < H; ++h) {
      const bool mine = h == 1 || h == 3;
      for (std::size_t i = 0; i < L; ++i) {
        std::vector<double> p(L);
        double mx = -1e300, sum = 0;
        for (std::size_t j = 0; j < L; ++j) {
          double dot = 0;
          for (std::size_t e = 0; e < hd; ++e) dot += double(qkv[(b + i) * 3 * d + h * hd + e]) * qkv[(b + j) * 3 * d + d + h * hd + e];
          mx = std::max(mx, p[j] = 0.35 * dot);
        }
        for (double& v : p) sum += (v = std::exp(v - mx));
        for (std::size_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (std::size_t j = 0; j < L; ++j) acc += p[j] / sum * qkv[(b + j) * 3 * d + 2 * d + h * hd + e];
          const float got = ctx[(b + i) * d + h * hd + e];
          if (!mine) {
            REQUIRE(got == -3.0f);
          } else {
            worst = std::max(worst, std::abs(got - acc));
          }
        }
      }
    }
  }
  CHECK(worst < 1e-5);

  std::vector<float> x = random_vector(6 * 20, 6, 3.0f), want = x;
  const std::vector<float> g = random_vector(20, 7), be = random_vector(20, 8);
  dev->enqueue(stile::LayerNormCall{x.data(), 1, 5, 20, 20, g.data(), be.data(), 1e-12f, stile::NormFormat::kF32});
  dev->wait();
  worst = 0;
  for (std::size_t r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (std::size_t i = 0; i < 20; ++i) mean += want[r * 20 + i] / 20.0;
    for (std::size_t i = 0; i < 20; ++i) var += (want[r * 20 + i] - mean) * (want[r * 20 + i] - mean) / 20.0;
    for (std::size_t i = 0; i < 20; ++i) {
      const double ref = (r >= 1 && r < 5) ? (want[r * 20 + i] - mean) / std::sqrt(var + 1e-12) * g[i] + be[i] : want[r * 20 + i];
      worst = std::max(worst, std::abs(x[r * 20 + i] - ref));
    }
  }
  CHECK(worst < 1e-5);

  std::vector<float> y = random_vector(33, 9, 4.0f);
  const std::vector<float> y0 = y;
  dev->enqueue(stile::GeluCall{y.data(), y.size(), stile::GeluFormat::kExact});
  dev->wait();
  worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - gelu_exact(y0[i])));
  CHECK(worst < 1e-5);
  // What it cannot run is refused with the processor's name and the call.
  dev->enqueue(stile::LayerNormCall{x.data(), 0, 1, 20, 20, g.data(), be.data(), 1e-12f, stile::NormFormat::kInteger});
  CHECK_THAT(stile_test::error_of([&] { dev->wait(); }),
             Catch::Contains("processor 'opencl:0': layer_norm rows [0, 1)") && Catch::Contains("not on this device"));
}

TEST_CASE("the OpenCL device's trace lane holds what the device ran, in order, within the host's window", "[opencl]") {
  auto dev = device(LinearFormat::kF32);
  stile::ProcessorTrace trace;
  dev->set_trace(&trace);
  std::vector<float> x = random_vector(64 * 256, 21);
  const std::vector<float> g = random_vector(256, 22), be = random_vector(256, 23);
  const double before = trace.now_ms();
  for (int i = 0; i < 3; ++i) {
    dev->enqueue(stile::LayerNormCall{x.data(), 0, 64, 256, 256, g.data(), be.data(), 1e-12f, stile::NormFormat::kF32});
    dev->enqueue(stile::GeluCall{x.data(), x.size(), stile::GeluFormat::kExact});
  }
  dev->wait();
  const double after = trace.now_ms();
  std::vector<stile::ProcessorSpan> device_lane, host_lane;
  for (const stile::ProcessorSpan& s : trace.spans()) (s.processor == "opencl:0" ? device_lane : host_lane).push_back(s);
  REQUIRE(device_lane.size() == 6);
  REQUIRE(host_lane.size() == 6);
  CHECK(host_lane[0].processor == "opencl:0 (host)");
  // The device clock is moved onto the trace's by one marker timed from the host: allow its
  // half-round-trip at the edges (well under a millisecond on an idle machine; a few under a
  // loaded one, as under ctest -j, where the marker's host timestamp can be late). The check still
  // catches a lane in another clock domain (seconds off) or out of order.
  const double slack = 25.0;
  for (std::size_t i = 0; i < device_lane.size(); ++i) {
    const stile::ProcessorSpan& s = device_lane[i];
    CHECK(s.op == (i % 2 == 0 ? "layer_norm" : "gelu"));
    CHECK(s.start_ms <= s.end_ms);
    CHECK(s.start_ms >= before - slack);
    CHECK(s.end_ms <= after + slack);
    if (i > 0) CHECK(s.start_ms >= device_lane[i - 1].end_ms - 1e-6);  // an in-order queue
  }
  // Each call finishes on the device after the host began to enqueue it.
  for (std::size_t i = 0; i < device_lane.size(); ++i) CHECK(device_lane[i].end_ms >= host_lane[i].start_ms - slack);
  const auto json = trace.chrome_trace();
  CHECK(json["traceEvents"].size() == 2 + 12);  // two lanes' names and twelve spans
}

TEST_CASE("a kernel that does not build and an OpenCL error fail with the device and the call", "[opencl]") {
  auto dev = device(LinearFormat::kF32);
  const std::string build = stile_test::error_of([&] { dev->build_program("__kernel void broken( {"); });
  CHECK_THAT(build, Catch::Contains("OpenCL device '" + dev->device_name() + "'") &&
                        Catch::Contains("clBuildProgram") && Catch::Contains("build log"));
  std::vector<float> y{1.0f, -1.0f};
  dev->fail_next_call_for_testing();
  dev->enqueue(stile::GeluCall{y.data(), y.size(), stile::GeluFormat::kExact});
  const std::string e = stile_test::error_of([&] { dev->wait(); });
  CHECK_THAT(e, Catch::Contains("processor 'opencl:0': gelu of 2 values") && Catch::Contains("clEnqueueNDRangeKernel") &&
                    Catch::Contains("error -"));
  CHECK(y[0] == 1.0f);  // the failed call's work was skipped
  dev->enqueue(stile::GeluCall{y.data(), y.size(), stile::GeluFormat::kExact});
  dev->wait();  // usable again
  CHECK(std::abs(y[0] - gelu_exact(1.0)) < 1e-6);
}

TEST_CASE("the split layer with the OpenCL device as processor 1", "[opencl]") {
  const stile_test::RandomLayer l(64, 4, 128, 31);
  const stile_test::FormattedLayer f8(l, LinearFormat::kInt8);
  // The device's reference: the fp32 layer on the int8 weights it converts (dequantized).
  stile_test::RandomLayer deq = l;
  for (std::size_t i = 0; i < 5; ++i) {
    const stile::LinearView& v = std::array{&f8.view.q, &f8.view.kv, &f8.view.attn_out, &f8.view.ffn_in, &f8.view.ffn_out}[i][0];
    for (std::size_t n = 0; n < l.rows(i); ++n) {
      for (std::size_t k = 0; k < l.cols(i); ++k) deq.w[i][n * l.cols(i) + k] = v.i8.dequantized(n, k);
    }
  }
  const stile_test::FormattedLayer f32(deq, LinearFormat::kF32);
  const std::vector<std::size_t> offsets{0, 6, 15};
  const std::vector<float> x0 = random_vector(15 * 64, 11);
  stile::EncoderWorkspace ws;
  stile::ThreadPool one(1);
  std::vector<float> want_dev = x0, want_cpu = x0;
  stile::encoder_layer(f32.view, l.config, want_dev.data(), offsets, ws, one);
  stile::encoder_layer(f8.view, l.config, want_cpu.data(), offsets, ws, one);

  stile::CpuCluster cpu("cpu:0", {}, LinearFormat::kInt8, stile::CpuCluster::Mode::kCallerThread);
  auto dev = device(LinearFormat::kInt8);  // the same int8 bytes as the CPU: converted on the device
  stile::SplitLayer split(cpu, *dev);
  for (const double p : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    std::vector<float> x = x0;
    split.run(f8.view, f8.view, stile::SplitPlan::uniform(p), l.config, x.data(), offsets, ws);
    double to_dev = 0, to_cpu = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      to_dev = std::max(to_dev, std::abs(double(x[i]) - want_dev[i]));
      to_cpu = std::max(to_cpu, std::abs(double(x[i]) - want_cpu[i]));
    }
    INFO("p " << p << " to the device's fp32 layer " << to_dev << ", to the CPU's int8 layer " << to_cpu);
    if (p == 0.0) CHECK(to_dev < 1e-4);
    if (p == 1.0) CHECK(to_cpu < 1e-5);
    CHECK(to_cpu < 0.1);  // int8 activations on the CPU's share: within the format's error
  }
}

TEST_CASE("a device that fails a request fails it by name; the engine's next requests run on the CPU", "[opencl]") {
  static const stile_test::ConvertedStore store(
      "opencl_engine.stile", [](const std::filesystem::path& dir) { stile_test::write_tiny_bert(dir, 2, 99); }, {32});
  const stile::Encoding e = stile_test::tiny_tokens(9);
  const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, 4, 32);
  stile::CpuCluster cpu("cpu:0", {}, LinearFormat::kInt8, stile::CpuCluster::Mode::kCallerThread);
  auto dev = device(LinearFormat::kInt8);
  stile::Engine engine(store.store);
  auto compute = std::make_unique<stile::SplitLayerCompute>(cpu, *dev, stile::OpFormats{}, 0.5);
  const stile::SplitLayerCompute* c = compute.get();
  engine.set_layer_compute(std::move(compute));
  const std::vector<float> first = engine.run(e, plan).embedding;
  dev->fail_next_call_for_testing();
  CHECK_THAT(stile_test::error_of([&] { engine.run(e, plan); }),
             Catch::Contains("processor 'opencl:0'") && Catch::Contains("clEnqueueNDRangeKernel"));
  CHECK(c->fallen_back());
  const std::vector<float> after = engine.run(e, plan).embedding;  // on the CPU alone
  REQUIRE(after.size() == first.size());
  double dot = 0;
  for (std::size_t i = 0; i < after.size(); ++i) dot += double(after[i]) * first[i];
  CHECK(dot > 0.99);  // unit vectors: the CPU's int8 result is close to the split one
}

TEST_CASE("a mapping with nodes on the OpenCL device and on a CPU cluster", "[opencl]") {
  stile_test::TempDir dir;
  stile_test::write_tiny_bert(dir.path, 2);
  const stile::BertModel fp32 = stile::BertModel::load(dir.path);
  const stile::OpGraph g = stile::op_graph_of(fp32.config());
  const std::vector<stile::Encoding> batch{stile_test::tiny_tokens(12), stile_test::tiny_tokens(7, 3)};
  std::vector<float> want, got;
  stile::ThreadPool one(1);
  fp32.encode(batch, want, &one);
  stile::CpuCluster cpu("cpu:0", {}, LinearFormat::kF32);
  auto dev = device(LinearFormat::kF32);
  const auto run = [&](const stile::OpMapping& m, std::vector<float>& out) {
    stile::MappedForward f(stile::BertWeights::load(dir.path, stile::mapped_weights_precision(g, m.format)), m,
                           {&cpu, dev.get()});
    f.encode(batch, out);
  };
  stile_test::Rng rng{5};
  for (int k = 0; k < 3; ++k) {
    stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
    for (std::size_t n = 0; n < g.size(); ++n) m.processor[n] = rng.unit() > 0 ? 1 : 0;
    run(m, got);
    double diff = 0;
    for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::abs(double(got[i]) - want[i]));
    INFO("mapping " << k << ": max |diff| to the fp32 model " << diff);
    CHECK(diff < 1e-4);  // the device's fp32 GEMMs sum in another order
  }
  // int8 nodes on the CPU, fp32 on the device: close to the same formats on the CPU alone.
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  std::vector<float> alone;
  for (std::size_t n = 0; n < g.size(); ++n) {
    if (n % 2 == 1) m.processor[n] = 1;
    else if (stile::has_format(g.nodes[n].kind, stile::NumberFormat::kInt8)) m.format[n] = stile::NumberFormat::kInt8;
  }
  run(m, got);
  stile::OpMapping on_cpu = m;
  on_cpu.processor.assign(g.size(), 0);
  run(on_cpu, alone);
  CHECK(stile_test::min_row_cosine(got, alone, fp32.config().hidden) > 0.999);
  // A node in a format the device does not take is refused, naming both.
  stile::OpMapping bad = stile::OpMapping::uniform(g.size(), 1);
  bad.format[1] = stile::NumberFormat::kInt8;
  CHECK_THAT(stile_test::error_of([&] { run(bad, got); }),
             Catch::Matchers::Contains("layer0.qkv is mapped to int8 on 'opencl:0'"));
  // A device that fails a call fails the request by name; the next one succeeds.
  stile::OpMapping half = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 0; n < g.size(); n += 2) half.processor[n] = 1;
  stile::MappedForward f(stile::BertWeights::load(dir.path), half, {&cpu, dev.get()});
  dev->fail_next_call_for_testing();
  CHECK_THAT(stile_test::error_of([&] { f.encode(batch, got); }), Catch::Matchers::Contains("processor 'opencl:0'"));
  f.encode(batch, got);
  double diff = 0;
  for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::abs(double(got[i]) - want[i]));
  CHECK(diff < 1e-4);
}

TEST_CASE("a mapping behind the engine with nodes on the OpenCL device, whole and partial", "[opencl]") {
  static const stile_test::ConvertedStore store(
      "opencl_mapped_engine.stile", [](const std::filesystem::path& dir) { stile_test::write_tiny_bert(dir, 2, 77); },
      {4, 32});
  const stile::Encoding e = stile_test::tiny_tokens(10);
  stile::CpuCluster cpu("cpu:0", {}, LinearFormat::kF32);
  auto dev = device(LinearFormat::kF32);
  const stile::OpGraph g = stile::op_graph_of(stile::Engine(store.store).store().config());
  stile::OpMapping m = stile::OpMapping::uniform(g.size(), 0);
  for (std::size_t n = 1; n < g.size(); n += 2) m.processor[n] = 1;  // every other node on the device
  stile::ProcessorTrace trace;
  dev->set_trace(&trace);
  for (const std::size_t shards : {4u, 3u}) {
    const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(2, shards, 4);
    const std::vector<float> want = stile::Engine(store.store).run(e, plan).embedding;
    stile::Engine engine(store.store);
    engine.set_layer_compute(std::make_unique<stile::MappedLayerCompute>(engine.store().config(), m,
                                                                         std::vector<stile::Processor*>{&cpu, dev.get()}));
    for (int request = 0; request < 2; ++request) {  // the second on the converted layers kept
      const std::vector<float> got = engine.run(e, plan).embedding;
      REQUIRE(got.size() == want.size());
      double diff = 0;
      for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::abs(double(got[i]) - want[i]));
      INFO(shards << " shards, request " << request << ": max |diff| to the default engine " << diff);
      CHECK(diff < 1e-4);  // the device's fp32 GEMMs sum in another order
    }
  }
  dev->set_trace(nullptr);
  // The device ran its FFN output layers: one per such node, per request (2 plans x 2 requests).
  std::size_t mapped = 0, ran = 0;
  for (std::size_t n = 0; n < g.size(); ++n) {
    mapped += m.processor[n] == 1 && g.nodes[n].kind == stile::OpNodeKind::kFfnOut;
  }
  for (const stile::ProcessorSpan& s : trace.spans()) ran += s.processor == "opencl:0" && s.op == "ffn_out";
  CHECK(mapped > 0);
  CHECK(ran == 4 * mapped);
}
