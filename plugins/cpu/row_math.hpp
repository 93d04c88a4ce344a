// The f32 inner loops of attention, written so that GCC -O3 vectorises them.
#pragma once

#include <cstddef>

namespace kvc::cpu {

// Sixteen independent partial sums: without -ffast-math GCC vectorises no float reduction
// (it may not reassociate), but it does vectorise these lanes, and four SSE accumulators
// hide the latency of the adds.
inline float dot(const float* __restrict a, const float* __restrict b, size_t n) {
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

// y += a * x
inline void axpy(float* __restrict y, float a, const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// y += sum over j of w[j] * x[j]: four rows per pass, so y is loaded and stored a quarter
// as often as with one axpy per row.
inline void axpy_rows(float* __restrict y, const float* w, const float* const* x, size_t n_rows,
                      size_t n) {
  size_t j = 0;
  for (; j + 4 <= n_rows; j += 4) {
    const float* __restrict x0 = x[j];
    const float* __restrict x1 = x[j + 1];
    const float* __restrict x2 = x[j + 2];
    const float* __restrict x3 = x[j + 3];
    const float w0 = w[j], w1 = w[j + 1], w2 = w[j + 2], w3 = w[j + 3];
    for (size_t i = 0; i < n; ++i) y[i] += w0 * x0[i] + w1 * x1[i] + w2 * x2[i] + w3 * x3[i];
  }
  for (; j < n_rows; ++j) axpy(y, w[j], x[j], n);
}

inline void scale(float* __restrict y, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] *= a;
}

}  // namespace kvc::cpu
