// The AVX2 kernels over rows of the formats with scales (q8_0, q4_0) where they are stored:
// logits as integer dot products of the rounded queries with each group of a key row
// (vpmaddubsw, vpmaddwd), scaled by the two groups' scales and summed in f32; value rows
// dequantized in registers on their way into the weighted sum.
#include "kernels.hpp"

#ifdef KVC_CPU_HAVE_AVX2_KERNELS

#include <cstdint>
#include <cstring>

#include "kernels_avx2_blocks.hpp"

namespace kvc::cpu {
namespace {

constexpr size_t kGroup = 32;  // values per group of both formats (kvcache_format.h)
constexpr size_t kQ8GroupBytes = 2 + kGroup;
constexpr size_t kQ4GroupBytes = 2 + kGroup / 2;

// A group's scale: the little-endian f16 of its first two bytes (x86 is little-endian).
KVC_AVX2_INLINE float group_scale(const unsigned char* group) {
  uint16_t bits;
  std::memcpy(&bits, group, sizeof bits);
  return _cvtsh_ss(bits);
}

// The 32 values of a key group as signed bytes.
struct Q8Keys {
  static constexpr size_t kGroupBytes = kQ8GroupBytes;
  KVC_AVX2_INLINE static __m256i values(const unsigned char* group) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 2));
  }
};
struct Q4Keys {
  static constexpr size_t kGroupBytes = kQ4GroupBytes;
  KVC_AVX2_INLINE static __m256i values(const unsigned char* group) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(group + 2));
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(packed, nibble);                        // values 0-15
    const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);    // values 16-31
    return _mm256_sub_epi8(_mm256_set_m128i(high, low), _mm256_set1_epi8(8));
  }
};

// Dots of rounded query rows [row, row + R) with key rows [key, key + T): per group, the
// byte products summed exactly in 32-bit lanes, then scaled by both scales into R * T f32
// accumulators.
template <size_t R, size_t T, class Keys>
KVC_AVX2_INLINE void dot_block(const QuantizedQueries& q, size_t row, const void* const* k,
                               size_t key, float* out, Prefetch& ahead) {
  const size_t groups = q.dim / kGroup;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R * T];
  for (size_t i = 0; i < R * T; ++i) acc[i] = _mm256_setzero_ps();
  for (size_t g = 0; g < groups; ++g) {
    ahead.step();
    __m256i keys[T];
    __m256 key_scale[T];
    for (size_t t = 0; t < T; ++t) {
      const auto* group = static_cast<const unsigned char*>(k[key + t]) + g * Keys::kGroupBytes;
      keys[t] = Keys::values(group);
      key_scale[t] = _mm256_set1_ps(group_scale(group));
    }
    for (size_t r = 0; r < R; ++r) {
      const size_t at = (row + r) * q.dim + g * kGroup;
      const __m256i values = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.values + at));
      const __m256i magnitudes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.magnitudes + at));
      const __m256 query_scale = _mm256_broadcast_ss(q.scales + (row + r) * groups + g);
      for (size_t t = 0; t < T; ++t) {
        // |q| times k with q's sign is q * k; both are within [-127, 127] (the reference
        // encoding's range), so a pair of products fits vpmaddubsw's 16 bits.
        const __m256i pairs = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(keys[t], values));
        const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        acc[r * T + t] =
            _mm256_fmadd_ps(sums, _mm256_mul_ps(query_scale, key_scale[t]), acc[r * T + t]);
      }
    }
  }
  store_dots<R, T>(acc, out + key);
}

template <size_t R, class Keys>
KVC_AVX2_INLINE void dot_rows(const QuantizedQueries& q, size_t row, const void* const* k,
                              size_t n_keys, float* out, Prefetch& ahead) {
  size_t t = 0;
  for (; t + 2 <= n_keys; t += 2) dot_block<R, 2, Keys>(q, row, k, t, out, ahead);
  if (t < n_keys) dot_block<R, 1, Keys>(q, row, k, t, out, ahead);
}

template <class Keys>
KVC_AVX2 void logits_as(const QuantizedQueries& q, size_t rows, const void* const* k,
                        size_t n_keys, float* out, Prefetch& ahead) {
  const size_t row_blocks = rows / 4 + rows % 4;
  ahead.spread_over(row_blocks * ((n_keys + 1) / 2) * (q.dim / kGroup));
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) dot_rows<4, Keys>(q, r, k, n_keys, out + r * kTileKeys, ahead);
  for (; r < rows; ++r) dot_rows<1, Keys>(q, r, k, n_keys, out + r * kTileKeys, ahead);
  ahead.rest();
}

KVC_AVX2 void logits(const QuantizedQueries& q, size_t rows, const void* const* k,
                     kvc_dtype k_dtype, size_t n_keys, float* out, float* row_max,
                     Prefetch& ahead) {
  (k_dtype == KVC_DTYPE_Q4_0 ? logits_as<Q4Keys> : logits_as<Q8Keys>)(q, rows, k, n_keys, out,
                                                                      ahead);
  max_of_rows(out, rows, n_keys, row_max);
}

// Values i to i + 7 of a value row (i a multiple of 8), dequantized.
struct Q8Values {
  KVC_AVX2_INLINE static __m256 load(const void* row, size_t i) {
    const auto* group = static_cast<const unsigned char*>(row) + i / kGroup * kQ8GroupBytes;
    const __m128i bytes =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(group + 2 + i % kGroup));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)),
                         _mm256_set1_ps(group_scale(group)));
  }
};
struct Q4Values {
  KVC_AVX2_INLINE static __m256 load(const void* row, size_t i) {
    const auto* group = static_cast<const unsigned char*>(row) + i / kGroup * kQ4GroupBytes;
    const size_t j = i % kGroup;  // value j is in byte j % 16, low nibble for j < 16
    const __m128i bytes =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(group + 2 + j % (kGroup / 2)));
    __m256i wide = _mm256_cvtepu8_epi32(bytes);
    wide = j < kGroup / 2 ? _mm256_and_si256(wide, _mm256_set1_epi32(0x0F))
                          : _mm256_srli_epi32(wide, 4);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(wide, _mm256_set1_epi32(8))),
                         _mm256_set1_ps(group_scale(group)));
  }
};

KVC_AVX2 void accumulate(float* acc, size_t rows, const float* weights, const void* const* v,
                         kvc_dtype v_dtype, size_t n_keys, size_t dim, Prefetch& ahead) {
  (v_dtype == KVC_DTYPE_Q4_0 ? accumulate_as<Q4Values> : accumulate_as<Q8Values>)(
      acc, rows, weights, v, n_keys, dim, ahead);
}

}  // namespace

const QuantizedKernels avx2_quantized_kernels = {logits, accumulate};

}  // namespace kvc::cpu

#endif  // KVC_CPU_HAVE_AVX2_KERNELS
