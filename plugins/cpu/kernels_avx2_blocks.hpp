// What the AVX2 kernel files share: their target attributes, horizontal sums, and the
// accumulation of weighted value rows over any row format that loads eight values as f32
// (`Element::load(row, i)`: values i to i + 7 of the row). Included by kernels_avx2*.cpp only.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "kernels.hpp"

#define KVC_AVX2 __attribute__((target("avx2,fma,f16c")))
// The blocks of the kernels, inlined so that their accumulators stay in registers.
#define KVC_AVX2_INLINE inline __attribute__((target("avx2,fma,f16c"), always_inline))

namespace kvc::cpu {
namespace {

KVC_AVX2_INLINE float sum_lanes(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The lane sums of a[0..8), in order, in one register.
KVC_AVX2_INLINE __m256 sum_lanes8(const __m256* a) {
  const __m256 lo = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 hi = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

// Stores the lane sums of acc[r * T + t] as out[r * kTileKeys + t], r < R, t < T.
template <size_t R, size_t T>
KVC_AVX2_INLINE void store_dots(const __m256* acc, float* out) {
  if constexpr (R * T == 8) {
    const __m256 sums = sum_lanes8(acc);  // row r's T sums in lanes [r * T, r * T + T)
    static_assert(T == 2, "rows are stored as lane pairs");
    const __m128 rows01 = _mm256_castps256_ps128(sums);
    const __m128 rows23 = _mm256_extractf128_ps(sums, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(out), rows01);
    _mm_storeh_pi(reinterpret_cast<__m64*>(out + kTileKeys), rows01);
    _mm_storel_pi(reinterpret_cast<__m64*>(out + 2 * kTileKeys), rows23);
    _mm_storeh_pi(reinterpret_cast<__m64*>(out + 3 * kTileKeys), rows23);
  } else {
    for (size_t r = 0; r < R; ++r)
      for (size_t t = 0; t < T; ++t) out[r * kTileKeys + t] = sum_lanes(acc[r * T + t]);
  }
}

// Adds the weighted V rows to R rows of acc, over C chunks of 8 from element c: R * C
// accumulators, each V chunk loaded (and converted) once for R rows.
template <size_t R, size_t C, class Element>
KVC_AVX2_INLINE void accumulate_block(float* acc, const float* weights, const void* const* v,
                                      size_t n_keys, size_t dim, size_t c, Prefetch& ahead) {
  __m256 sums[R * C];
  for (size_t i = 0; i < R * C; ++i) sums[i] = _mm256_setzero_ps();
  for (size_t t = 0; t < n_keys; ++t) {
    ahead.step();
    __m256 values[C];
    for (size_t i = 0; i < C; ++i) values[i] = Element::load(v[t], c + i * kDimAlign);
    for (size_t r = 0; r < R; ++r) {
      const __m256 w = _mm256_set1_ps(weights[r * kTileKeys + t]);
      for (size_t i = 0; i < C; ++i)
        sums[r * C + i] = _mm256_fmadd_ps(w, values[i], sums[r * C + i]);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    for (size_t i = 0; i < C; ++i) {
      float* y = acc + r * dim + c + i * kDimAlign;
      _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), sums[r * C + i]));
    }
  }
}

template <size_t R, class Element>
KVC_AVX2_INLINE void accumulate_rows(float* acc, const float* weights, const void* const* v,
                                     size_t n_keys, size_t dim, Prefetch& ahead) {
  size_t c = 0;
  for (; c + 2 * kDimAlign <= dim; c += 2 * kDimAlign)
    accumulate_block<R, 2, Element>(acc, weights, v, n_keys, dim, c, ahead);
  if (c < dim) accumulate_block<R, 1, Element>(acc, weights, v, n_keys, dim, c, ahead);
}

template <class Element>
KVC_AVX2 void accumulate_as(float* acc, size_t rows, const float* weights, const void* const* v,
                            size_t n_keys, size_t dim, Prefetch& ahead) {
  const size_t row_blocks = rows / 4 + rows % 4;
  const size_t column_blocks = (dim / kDimAlign + 1) / 2;
  ahead.spread_over(row_blocks * column_blocks * n_keys);
  size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    accumulate_rows<4, Element>(acc + r * dim, weights + r * kTileKeys, v, n_keys, dim, ahead);
  for (; r < rows; ++r)
    accumulate_rows<1, Element>(acc + r * dim, weights + r * kTileKeys, v, n_keys, dim, ahead);
  ahead.rest();
}

}  // namespace
}  // namespace kvc::cpu
