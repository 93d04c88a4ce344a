// The portable tile kernels: plain loops written so that GCC -O3 vectorises them with the
// baseline ISA (SSE2 on x86-64). They read f32 K/V rows only (max_rows_in_place is 0).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels.hpp"
#include "dtype.hpp"
#include "kvcache/kvcache_format.h"

namespace kvc::cpu {
namespace {

void convert(const void* src, kvc_dtype dtype, float* __restrict dst, size_t n) {
  const auto* __restrict h = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case KVC_DTYPE_F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KVC_DTYPE_F16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    case KVC_DTYPE_BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    case KVC_DTYPE_Q8_0:
    case KVC_DTYPE_Q4_0:
      kvc_format_row_to_f32(dtype, src, dst, n);
      return;
  }
}

// Sixteen independent partial sums: without -ffast-math GCC vectorises no float reduction
// (it may not reassociate), but it does vectorise these lanes, and four SSE accumulators
// hide the latency of the adds.
float dot(const float* __restrict a, const float* __restrict b, size_t n) {
  constexpr size_t kLanes = 16;
  float partial[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t lane = 0; lane < kLanes; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (size_t lane = 0; lane < kLanes; ++lane) sum += partial[lane];
  return sum;
}

// The portable set asks for the next tile's rows up front: its loops are left to the compiler.
void logits(const float* q, size_t rows, const void* const* k, kvc_dtype, size_t n_keys,
            size_t dim, float* out, float* row_max, Prefetch& ahead) {
  ahead.rest();
  for (size_t r = 0; r < rows; ++r)
    for (size_t t = 0; t < n_keys; ++t)
      out[r * kTileKeys + t] = dot(q + r * dim, static_cast<const float*>(k[t]), dim);
  max_of_rows(out, rows, n_keys, row_max);
}

// y += sum over j of w[j] * x[j] (rows of n floats): four rows per pass, so y is loaded and
// stored a quarter as often as with one pass per row.
void weighted_sum(float* __restrict y, const float* w, const void* const* x, size_t n_rows,
                  size_t n) {
  size_t j = 0;
  for (; j + 4 <= n_rows; j += 4) {
    const auto* __restrict x0 = static_cast<const float*>(x[j]);
    const auto* __restrict x1 = static_cast<const float*>(x[j + 1]);
    const auto* __restrict x2 = static_cast<const float*>(x[j + 2]);
    const auto* __restrict x3 = static_cast<const float*>(x[j + 3]);
    const float w0 = w[j], w1 = w[j + 1], w2 = w[j + 2], w3 = w[j + 3];
    for (size_t i = 0; i < n; ++i) y[i] += w0 * x0[i] + w1 * x1[i] + w2 * x2[i] + w3 * x3[i];
  }
  for (; j < n_rows; ++j) {
    const auto* __restrict xj = static_cast<const float*>(x[j]);
    for (size_t i = 0; i < n; ++i) y[i] += w[j] * xj[i];
  }
}

void accumulate(float* acc, size_t rows, const float* weights, const void* const* v, kvc_dtype,
                size_t n_keys, size_t dim, Prefetch& ahead) {
  ahead.rest();
  for (size_t r = 0; r < rows; ++r)
    weighted_sum(acc + r * dim, weights + r * kTileKeys, v, n_keys, dim);
}

float softmax_weights(const float* logits, size_t n, float max, float* weights) {
  float sum = 0.0f;
  for (size_t t = 0; t < n; ++t) {
    weights[t] = std::exp(logits[t] - max);
    sum += weights[t];
  }
  return sum;
}

}  // namespace

void max_of_rows(const float* logits, size_t rows, size_t n_keys, float* row_max) {
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits + r * kTileKeys;
    row_max[r] = *std::max_element(row, row + n_keys);
  }
}

// The portable set converts quantized rows a tile at a time (quantized: null).
const TileKernels portable_kernels = {"portable", 0,          convert,
                                      logits,     accumulate, softmax_weights,
                                      nullptr};

}  // namespace kvc::cpu
