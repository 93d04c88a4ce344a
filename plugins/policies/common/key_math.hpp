// Small vector kernels over f32 key rows (knorm, keydiff).
#pragma once

#include <cstddef>

namespace kvc::policies {

// sum a[d] * b[d]; the reduction is vectorised (OpenMP SIMD reduction, no runtime needed).
inline float dot(const float* __restrict a, const float* __restrict b, size_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (size_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// acc[d] += scale * row[d]
inline void add_scaled(float* __restrict acc, const float* __restrict row, float scale, size_t n) {
  for (size_t d = 0; d < n; ++d) acc[d] += scale * row[d];
}

}  // namespace kvc::policies
