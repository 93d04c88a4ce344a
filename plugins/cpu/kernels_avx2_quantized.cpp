// The AVX2 kernels over rows of the formats with scales (q8_0, q4_0) where they are stored:
// logits as integer dot products of the rounded queries with each group of a key row
// (vpmaddubsw, vpmaddwd), scaled by the two groups' scales and summed in f32; value rows
// dequantized in registers on their way into the weighted sum; and rows quantized eight
// values at a time with the reference encoding's arithmetic (the same bytes).
#include "kernels.hpp"

#ifdef KVC_CPU_HAVE_AVX2_KERNELS

#include <algorithm>
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

// The 32 values of group g of a key row as signed bytes: where they are stored (q8_0), or
// widened into `scratch` (q4_0).
struct Q8Keys {
  static constexpr size_t kGroupBytes = kQ8GroupBytes;
  KVC_AVX2_INLINE static const int8_t* values(const unsigned char* group, int8_t*) {
    return reinterpret_cast<const int8_t*>(group + 2);
  }
};
struct Q4Keys {
  static constexpr size_t kGroupBytes = kQ4GroupBytes;
  KVC_AVX2_INLINE static const int8_t* values(const unsigned char* group, int8_t* scratch) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(group + 2));
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(packed, nibble);                      // values 0-15
    const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);  // values 16-31
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(scratch),
                        _mm256_sub_epi8(_mm256_set_m128i(high, low), _mm256_set1_epi8(8)));
    return scratch;
  }
};

// Keys scored together: the eight dot products of a query row's group with eight keys' are
// summed across lanes into one register, and scaled there.
constexpr size_t kKeyBlock = 8;
alignas(32) constexpr int8_t kZeroGroup[kGroup] = {};

// Group g of every key of a tile: its 32 values as signed bytes, and the keys' scales side
// by side. Keys from n_keys up to the next whole block read zeros.
struct KeyGroup {
  const int8_t* values[kTileKeys];
  alignas(32) float scales[kTileKeys];
  alignas(32) int8_t widened[kTileKeys][kGroup];

  template <class Keys>
  KVC_AVX2_INLINE void load(const void* const* k, size_t n_keys, size_t padded, size_t g) {
    for (size_t t = 0; t < n_keys; ++t) {
      const auto* group = static_cast<const unsigned char*>(k[t]) + g * Keys::kGroupBytes;
      scales[t] = group_scale(group);
      values[t] = Keys::values(group, widened[t]);
    }
    for (size_t t = n_keys; t < padded; ++t) {
      scales[t] = 0.0f;
      values[t] = kZeroGroup;
    }
  }
};

// The lane sums of a[0..8) as the lanes of one register, in order.
KVC_AVX2_INLINE __m256i sum_lanes8_epi32(const __m256i* a) {
  const __m256i low = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  const __m256i high = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(low, high, 0x20),
                          _mm256_permute2x128_si256(low, high, 0x31));
}

// Group by group, each query row against eight keys at a time: per key, the 32 byte products
// summed exactly into 32-bit lanes, the eight keys' sums gathered into one register, then
// scaled by both scales and added to the row's logits in f32 (in group order).
template <class Keys>
KVC_AVX2 void logits_as(const QuantizedQueries& q, size_t rows, const void* const* k,
                        size_t n_keys, float* out, Prefetch& ahead) {
  const size_t groups = q.dim / kGroup;
  const size_t padded = (n_keys + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  ahead.spread_over(groups * rows);
  for (size_t r = 0; r < rows; ++r) std::fill_n(out + r * kTileKeys, padded, 0.0f);
  const __m256i ones = _mm256_set1_epi16(1);
  KeyGroup keys;
  for (size_t g = 0; g < groups; ++g) {
    keys.load<Keys>(k, n_keys, padded, g);
    for (size_t r = 0; r < rows; ++r) {
      ahead.step();
      const size_t at = r * q.dim + g * kGroup;
      const __m256i values = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.values + at));
      const __m256i magnitudes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.magnitudes + at));
      const __m256 query_scale = _mm256_broadcast_ss(q.scales + r * groups + g);
      float* row = out + r * kTileKeys;
      for (size_t b = 0; b < padded; b += kKeyBlock) {
        __m256i sums[kKeyBlock];
        for (size_t t = 0; t < kKeyBlock; ++t) {
          const __m256i key = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys.values[b + t]));
          // |q| times k with q's sign is q * k; both are within [-127, 127] (the reference
          // encoding's range), so a pair of products fits vpmaddubsw's 16 bits.
          sums[t] = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(key, values)), ones);
        }
        const __m256 dots = _mm256_cvtepi32_ps(sum_lanes8_epi32(sums));
        const __m256 scales = _mm256_mul_ps(_mm256_load_ps(keys.scales + b), query_scale);
        _mm256_storeu_ps(row + b, _mm256_fmadd_ps(dots, scales, _mm256_loadu_ps(row + b)));
      }
    }
  }
  ahead.rest();
}

KVC_AVX2 void logits(const QuantizedQueries& q, size_t rows, const void* const* k,
                     kvc_dtype k_dtype, size_t n_keys, float* out, float* row_max,
                     Prefetch& ahead) {
  (k_dtype == KVC_DTYPE_Q4_0 ? logits_as<Q4Keys> : logits_as<Q8Keys>)(q, rows, k, n_keys, out,
                                                                      ahead);
  max_of_rows(out, rows, n_keys, row_max);
}

// Values i to i + 7 of a value row (i a multiple of 8) as integers in f32, and the scale of
// their group (load_chunks, kernels_avx2_blocks.hpp).
struct Q8Values {
  static constexpr bool kGroupScaled = true;
  KVC_AVX2_INLINE static const unsigned char* group_of(const void* row, size_t i) {
    return static_cast<const unsigned char*>(row) + i / kGroup * kQ8GroupBytes;
  }
  KVC_AVX2_INLINE static __m256 scale(const void* row, size_t i) {
    return _mm256_set1_ps(group_scale(group_of(row, i)));
  }
  KVC_AVX2_INLINE static __m256 unscaled(const void* row, size_t i) {
    const __m128i bytes =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(group_of(row, i) + 2 + i % kGroup));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
  }
};
struct Q4Values {
  static constexpr bool kGroupScaled = true;
  KVC_AVX2_INLINE static const unsigned char* group_of(const void* row, size_t i) {
    return static_cast<const unsigned char*>(row) + i / kGroup * kQ4GroupBytes;
  }
  KVC_AVX2_INLINE static __m256 scale(const void* row, size_t i) {
    return _mm256_set1_ps(group_scale(group_of(row, i)));
  }
  KVC_AVX2_INLINE static __m256 unscaled(const void* row, size_t i) {
    const size_t j = i % kGroup;  // value j is in byte j % 16, low nibble for j < 16
    const __m128i bytes =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(group_of(row, i) + 2 + j % (kGroup / 2)));
    __m256i wide = _mm256_cvtepu8_epi32(bytes);
    wide = j < kGroup / 2 ? _mm256_and_si256(wide, _mm256_set1_epi32(0x0F))
                          : _mm256_srli_epi32(wide, 4);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(wide, _mm256_set1_epi32(8)));
  }
};

KVC_AVX2 void accumulate(float* acc, size_t rows, const float* weights, const void* const* v,
                         kvc_dtype v_dtype, size_t n_keys, size_t dim, Prefetch& ahead) {
  (v_dtype == KVC_DTYPE_Q4_0 ? accumulate_as<Q4Values> : accumulate_as<Q8Values>)(
      acc, rows, weights, v, n_keys, dim, ahead);
}

// The group's largest magnitude, NaNs left out as the reference leaves them (vmaxps returns
// its second operand when either is NaN, and the running maximum never is).
KVC_AVX2_INLINE float largest_magnitude(const __m256* x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 largest = _mm256_setzero_ps();
  for (size_t i = 0; i < kGroup / 8; ++i) largest = _mm256_max_ps(_mm256_andnot_ps(sign, x[i]), largest);
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(largest), _mm256_extractf128_ps(largest, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// x times inverse rounded to the nearest integer, halves away from zero, clamped to [low,
// high]: round_clamped (quantized_rows.hpp) eight lanes at a time.
KVC_AVX2_INLINE __m256i round_clamped8(__m256 x, __m256 inverse, int low, int high) {
  __m256 v = _mm256_mul_ps(x, inverse);
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN: 0
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-256.0f)), _mm256_set1_ps(256.0f));
  __m256i t = _mm256_cvttps_epi32(v);
  const __m256 rest = _mm256_sub_ps(v, _mm256_cvtepi32_ps(t));
  t = _mm256_sub_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(rest, _mm256_set1_ps(0.5f), _CMP_GE_OQ)));
  t = _mm256_add_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(rest, _mm256_set1_ps(-0.5f), _CMP_LE_OQ)));
  return _mm256_min_epi32(_mm256_max_epi32(t, _mm256_set1_epi32(low)), _mm256_set1_epi32(high));
}

// Four registers of eight 32-bit integers in [-128, 127] as 32 bytes, in order.
KVC_AVX2_INLINE __m256i narrow_to_bytes(const __m256i* t) {
  const __m256i bytes =
      _mm256_packs_epi16(_mm256_packs_epi32(t[0], t[1]), _mm256_packs_epi32(t[2], t[3]));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// put_scale (quantized_rows.hpp) by F16C's conversion, which rounds to nearest even as the
// reference's does; the inverse of the scale stored, as the values are quantized against it.
KVC_AVX2_INLINE float inverse_of_scale(float d, unsigned char* group) {
  const uint16_t bits = _cvtss_sh(std::clamp(d, -65504.0f, 65504.0f), _MM_FROUND_TO_NEAREST_INT);
  std::memcpy(group, &bits, sizeof bits);
  const float stored = _cvtsh_ss(bits);
  return stored != 0.0f ? 1.0f / stored : 0.0f;
}

KVC_AVX2_INLINE void q8_0_group(const float* x, unsigned char* group) {
  __m256 values[kGroup / 8];
  for (size_t i = 0; i < kGroup / 8; ++i) values[i] = _mm256_loadu_ps(x + 8 * i);
  const __m256 inverse = _mm256_set1_ps(inverse_of_scale(largest_magnitude(values) / 127.0f, group));
  __m256i q[kGroup / 8];
  for (size_t i = 0; i < kGroup / 8; ++i) q[i] = round_clamped8(values[i], inverse, -127, 127);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(group + 2), narrow_to_bytes(q));
}

KVC_AVX2_INLINE void q4_0_group(const float* x, unsigned char* group) {
  __m256 values[kGroup / 8];
  for (size_t i = 0; i < kGroup / 8; ++i) values[i] = _mm256_loadu_ps(x + 8 * i);
  // The first value of the largest magnitude, with its sign (0 when all are zero).
  const float largest = largest_magnitude(values);
  float extreme = 0.0f;
  if (largest != 0.0f) {
    const __m256 sign = _mm256_set1_ps(-0.0f), target = _mm256_set1_ps(largest);
    uint32_t hits = 0;
    for (size_t i = 0; i < kGroup / 8; ++i) {
      const __m256 equal = _mm256_cmp_ps(_mm256_andnot_ps(sign, values[i]), target, _CMP_EQ_OQ);
      hits |= uint32_t(_mm256_movemask_ps(equal)) << (8 * i);
    }
    extreme = x[__builtin_ctz(hits)];
  }
  const __m256 inverse = _mm256_set1_ps(inverse_of_scale(extreme / -8.0f, group));
  __m256i q[kGroup / 8];
  for (size_t i = 0; i < kGroup / 8; ++i)
    q[i] = _mm256_add_epi32(round_clamped8(values[i], inverse, -8, 7), _mm256_set1_epi32(8));
  const __m256i bytes = narrow_to_bytes(q);  // values 0-15 below, 16-31 above
  const __m128i packed = _mm_or_si128(_mm256_castsi256_si128(bytes),
                                      _mm_slli_epi16(_mm256_extracti128_si256(bytes, 1), 4));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(group + 2), packed);
}

KVC_AVX2 void quantize(const float* x, kvc_dtype dtype, unsigned char* row, size_t n) {
  if (dtype == KVC_DTYPE_Q4_0) {
    for (size_t g = 0; g < n / kGroup; ++g) q4_0_group(x + g * kGroup, row + g * kQ4GroupBytes);
  } else {
    for (size_t g = 0; g < n / kGroup; ++g) q8_0_group(x + g * kGroup, row + g * kQ8GroupBytes);
  }
}

}  // namespace

const QuantizedKernels avx2_quantized_kernels = {logits, accumulate, quantize};

}  // namespace kvc::cpu

#endif  // KVC_CPU_HAVE_AVX2_KERNELS
