// The tile kernels for CPUs with AVX2, FMA and F16C. Only the functions marked KVC_AVX2 are
// compiled for them, so nothing else in the library can end up needing these instructions.
#include "kernels.hpp"

#ifdef KVC_CPU_HAVE_AVX2_KERNELS

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dtype.hpp"
#include "kernels_avx2_blocks.hpp"

namespace kvc::cpu {
namespace {

// Loads eight consecutive elements of a row, from element i on, as f32.
struct F32 {
  KVC_AVX2_INLINE static __m256 load(const void* rows, size_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(rows) + i);
  }
};
struct F16 {
  KVC_AVX2_INLINE static __m256 load(const void* rows, size_t i) {
    const auto* h = static_cast<const uint16_t*>(rows) + i;
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  }
};
struct BF16 {
  KVC_AVX2_INLINE static __m256 load(const void* rows, size_t i) {
    const auto* b = static_cast<const uint16_t*>(rows) + i;
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};

// The instantiation of a kernel template for the elements of `dtype`.
template <class Fn>
Fn* for_elements(kvc_dtype dtype, Fn* f32, Fn* f16, Fn* bf16) {
  return dtype == KVC_DTYPE_F16 ? f16 : dtype == KVC_DTYPE_BF16 ? bf16 : f32;
}

template <class Element>
KVC_AVX2 void convert_as(const void* src, float* dst, size_t n) {
  const size_t whole = n / kDimAlign * kDimAlign;
  for (size_t i = 0; i < whole; i += kDimAlign) _mm256_storeu_ps(dst + i, Element::load(src, i));
  const auto* h = static_cast<const uint16_t*>(src);
  for (size_t i = whole; i < n; ++i)
    dst[i] = std::is_same_v<Element, F16> ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
}

void convert_f32(const void* src, float* dst, size_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}

KVC_AVX2 void convert(const void* src, kvc_dtype dtype, float* dst, size_t n) {
  for_elements(dtype, convert_f32, convert_as<F16>, convert_as<BF16>)(src, dst, n);
}

// Dots of query rows [0, R) with key rows [key, key + T): R * T accumulators, each key chunk
// loaded (and converted) once for R rows and each query chunk once for T keys.
template <size_t R, size_t T, class Element>
KVC_AVX2_INLINE void dot_block(const float* q, const void* const* k, size_t key, size_t dim,
                               float* out, Prefetch& ahead) {
  __m256 acc[R * T];
  for (size_t i = 0; i < R * T; ++i) acc[i] = _mm256_setzero_ps();
  for (size_t c = 0; c < dim; c += kDimAlign) {
    ahead.step();
    __m256 keys[T];
    for (size_t t = 0; t < T; ++t) keys[t] = Element::load(k[key + t], c);
    for (size_t r = 0; r < R; ++r) {
      const __m256 query = _mm256_loadu_ps(q + r * dim + c);
      for (size_t t = 0; t < T; ++t)
        acc[r * T + t] = _mm256_fmadd_ps(query, keys[t], acc[r * T + t]);
    }
  }
  store_dots<R, T>(acc, out + key);
}

template <size_t R, class Element>
KVC_AVX2_INLINE void dot_rows(const float* q, const void* const* k, size_t n_keys, size_t dim,
                              float* out, Prefetch& ahead) {
  size_t t = 0;
  for (; t + 2 <= n_keys; t += 2) dot_block<R, 2, Element>(q, k, t, dim, out, ahead);
  if (t < n_keys) dot_block<R, 1, Element>(q, k, t, dim, out, ahead);
}

template <class Element>
KVC_AVX2 void logits_as(const float* q, size_t rows, const void* const* k, size_t n_keys,
                        size_t dim, float* out, Prefetch& ahead) {
  const size_t row_blocks = rows / 4 + rows % 4;
  ahead.spread_over(row_blocks * ((n_keys + 1) / 2) * (dim / kDimAlign));
  size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    dot_rows<4, Element>(q + r * dim, k, n_keys, dim, out + r * kTileKeys, ahead);
  for (; r < rows; ++r)
    dot_rows<1, Element>(q + r * dim, k, n_keys, dim, out + r * kTileKeys, ahead);
  ahead.rest();
}

KVC_AVX2 void logits(const float* q, size_t rows, const void* const* k, kvc_dtype k_dtype,
                     size_t n_keys, size_t dim, float* out, float* row_max, Prefetch& ahead) {
  for_elements(k_dtype, logits_as<F32>, logits_as<F16>, logits_as<BF16>)(q, rows, k, n_keys, dim,
                                                                         out, ahead);
  max_of_rows(out, rows, n_keys, row_max);
}

KVC_AVX2 void accumulate(float* acc, size_t rows, const float* weights, const void* const* v,
                         kvc_dtype v_dtype, size_t n_keys, size_t dim, Prefetch& ahead) {
  for_elements(v_dtype, accumulate_as<F32>, accumulate_as<F16>, accumulate_as<BF16>)(
      acc, rows, weights, v, n_keys, dim, ahead);
}

// exp(x) for x <= 0, and 0 below -87 (where exp(x) leaves the normal floats) or for NaN.
// Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by a degree-7 polynomial, 2^n
// built in the exponent field; within 2 ulp.
KVC_AVX2_INLINE __m256 exp_nonpositive(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.0f);
  const __m256 in_range = _mm256_cmp_ps(x, lowest, _CMP_GE_OQ);
  x = _mm256_max_ps(x, lowest);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(in_range, _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n)));
}

KVC_AVX2 float softmax_weights(const float* logits, size_t n, float max, float* weights) {
  const __m256 shift = _mm256_set1_ps(max);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 sum = _mm256_setzero_ps();
  // Rows of logits and weights are kTileKeys long: the last chunk may run past n, and its
  // extra lanes are masked out.
  for (size_t t = 0; t < n; t += kDimAlign) {
    const __m256 valid =
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - t)), lane));
    const __m256 x = _mm256_loadu_ps(logits + t);
    const __m256 w = _mm256_and_ps(valid, exp_nonpositive(_mm256_sub_ps(x, shift)));
    _mm256_storeu_ps(weights + t, w);
    sum = _mm256_add_ps(sum, w);
  }
  return sum_lanes(sum);
}

}  // namespace

const TileKernels avx2_kernels = {"avx2",     8,          convert,
                                   logits,     accumulate, softmax_weights,
                                   &avx2_quantized_kernels};

}  // namespace kvc::cpu

#endif  // KVC_CPU_HAVE_AVX2_KERNELS
