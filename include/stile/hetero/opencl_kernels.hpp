#pragma once
// The OpenCL C source of the OpenCL processor's own kernels (hetero/opencl_device.hpp): the
// weights' conversion on load (the same packed bytes the CPU computes from: int8 panels with
// their scales and zero point, fp16 or fp32 panels, into a row-major fp32 matrix for CLBlast), and
// the element-wise and row-wise operators around the GEMMs (bias, GELU, residual, softmax,
// LayerNorm). One work-item per element or per row: these are small next to the GEMMs.
namespace stile {

inline constexpr const char* kOpenClKernels = R"CLC(
// out[n * K + k] = scale[n] * (stored(n, k) - zero_point), stored in quant/int8_weights.hpp's panels.
__kernel void unpack_int8(__global const char* packed, __global const float* scales, int zero_point,
                          uint N, uint K, uint nr, __global float* out) {
  const uint n = get_global_id(0), k = get_global_id(1);
  if (n >= N || k >= K) return;
  const uint kp = (K + 3) / 4 * 4;
  const uint p = n / nr, j = n % nr, g = k / 4, i = k % 4;
  const char s = packed[((p * (kp / 4) + g) * nr + j) * 4 + i];
  out[n * K + k] = scales[n] * (float)((int)s - zero_point);
}

// PackedF32 / PackedF16 panels (kernels/codec.hpp): data[(n / nr) * K * nr + k * nr + n % nr].
__kernel void unpack_f32(__global const float* data, uint N, uint K, uint nr, __global float* out) {
  const uint n = get_global_id(0), k = get_global_id(1);
  if (n >= N || k >= K) return;
  out[n * K + k] = data[(n / nr) * K * nr + k * nr + n % nr];
}
__kernel void unpack_f16(__global const half* data, uint N, uint K, uint nr, __global float* out) {
  const uint n = get_global_id(0), k = get_global_id(1);
  if (n >= N || k >= K) return;
  out[n * K + k] = vload_half((n / nr) * K * nr + k * nr + n % nr, data);
}

// GELU: act 1 = exact (erf), 2 = erf from Abramowitz and Stegun 7.1.27 (kernels/gelu_erf_approx.hpp).
float gelu(float x, int act) {
  const float t = x * 0.70710678118654752f;
  if (act == 1) return 0.5f * x * (1.0f + erf(t));
  const float a = fabs(t);
  const float p = 1.0f + a * (0.278393f + a * (0.230389f + a * (0.000972f + a * 0.078108f)));
  const float p2 = p * p;
  return 0.5f * x * (1.0f + copysign(1.0f - 1.0f / (p2 * p2), t));
}

// c [M x n] += bias; then GELU (act 1, 2) or + residual [M x n] (has_residual).
__kernel void bias_act(__global float* c, __global const float* bias, __global const float* residual,
                       int has_residual, int act, uint M, uint n) {
  const uint m = get_global_id(0), j = get_global_id(1);
  if (m >= M || j >= n) return;
  float v = c[m * n + j] + bias[j];
  if (act != 0) v = gelu(v, act);
  if (has_residual) v += residual[m * n + j];
  c[m * n + j] = v;
}

__kernel void gelu_inplace(__global float* x, uint count, int act) {
  const uint i = get_global_id(0);
  if (i < count) x[i] = gelu(x[i], act);
}

// Row-wise softmax of scale * x over `cols` (row stride ld), one work-item per row.
__kernel void softmax_rows(__global float* x, uint rows, uint cols, uint ld, float scale) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  __global float* row = x + r * ld;
  float mx = -INFINITY;
  for (uint i = 0; i < cols; ++i) mx = fmax(mx, row[i] * scale);
  float sum = 0.0f;
  for (uint i = 0; i < cols; ++i) {
    const float e = exp(row[i] * scale - mx);
    row[i] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (uint i = 0; i < cols; ++i) row[i] *= inv;
}

// LayerNorm of each row of x [rows x cols] (contiguous), one work-item per row; gamma_beta: gamma
// [cols], then beta [cols].
__kernel void layer_norm_rows(__global float* x, __global const float* gamma_beta, uint rows, uint cols, float eps) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  __global const float* gamma = gamma_beta;
  __global const float* beta = gamma_beta + cols;
  __global float* row = x + r * cols;
  float mean = 0.0f;
  for (uint i = 0; i < cols; ++i) mean += row[i];
  mean /= (float)cols;
  float var = 0.0f;
  for (uint i = 0; i < cols; ++i) var += (row[i] - mean) * (row[i] - mean);
  var /= (float)cols;
  const float inv = rsqrt(var + eps);
  for (uint i = 0; i < cols; ++i) row[i] = (row[i] - mean) * inv * gamma[i] + beta[i];
}
)CLC";

}  // namespace stile
