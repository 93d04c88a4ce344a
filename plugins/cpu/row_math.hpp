// The f32 inner loops of attention, written so that GCC -O3 vectorises them.
#pragma once

#include <cstddef>

namespace kvc::cpu {

// Eight independent partial sums: without -ffast-math GCC vectorises no float reduction
// (it may not reassociate), but it does vectorise these lanes.
inline float dot(const float* __restrict a, const float* __restrict b, size_t n) {
  constexpr size_t kLanes = 8;
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

inline void scale(float* __restrict y, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] *= a;
}

}  // namespace kvc::cpu
