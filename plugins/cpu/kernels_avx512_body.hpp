// The AVX-512 tile kernels (TileKernels' contract, kernels.hpp), 16 f32 lanes per register.
// Included by kernels_avx512.cpp, with <immintrin.h> and target attributes, and by a test
// that compiles the same code against SIMDe's portable intrinsics. The includer defines
//   KVC_AVX512_NAMESPACE  the namespace (in kvc::cpu) that receives the kernels,
//   KVC_AVX512            the attributes of a kernel entry point,
//   KVC_AVX512_INLINE     those of the blocks inlined into it (their accumulators stay in
//                         registers).
// Rows are kDimAlign (8) floats apart, so a row's last 16-lane chunk may hold only 8
// elements: those chunks are read and written with masks, never past the row.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels.hpp"

namespace kvc::cpu::KVC_AVX512_NAMESPACE {
namespace {

constexpr size_t kLanes = 16;
constexpr __mmask16 kAllLanes = 0xFFFF;

// Decode's GQA groups read f16/bf16 rows where they are stored, as the AVX2 set does.
constexpr size_t kMaxRowsInPlace = 8;

// The first min(n, 16) lanes.
KVC_AVX512_INLINE __mmask16 lanes_below(size_t n) {
  return __mmask16((1u << std::min(n, kLanes)) - 1);
}

// Sixteen consecutive elements of a row, from element i on, as f32; load_masked reads only
// the lanes of `lanes` (the others are 0).
struct F32 {
  // Where element i of a row starts.
  KVC_AVX512_INLINE static const void* at(const void* row, size_t i) {
    return static_cast<const float*>(row) + i;
  }
  KVC_AVX512_INLINE static __m512 load(const void* rows, size_t i) {
    return _mm512_loadu_ps(static_cast<const float*>(rows) + i);
  }
  KVC_AVX512_INLINE static __m512 load_masked(const void* rows, size_t i, __mmask16 lanes) {
    return _mm512_maskz_loadu_ps(lanes, static_cast<const float*>(rows) + i);
  }
};
struct F16 {
  KVC_AVX512_INLINE static const void* at(const void* row, size_t i) {
    return static_cast<const uint16_t*>(row) + i;
  }
  KVC_AVX512_INLINE static __m512 load(const void* rows, size_t i) {
    const auto* h = static_cast<const uint16_t*>(rows) + i;
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
  }
  KVC_AVX512_INLINE static __m512 load_masked(const void* rows, size_t i, __mmask16 lanes) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes, static_cast<const uint16_t*>(rows) + i));
  }
};
struct BF16 {
  KVC_AVX512_INLINE static __m512 widen(__m256i bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  KVC_AVX512_INLINE static const void* at(const void* row, size_t i) {
    return static_cast<const uint16_t*>(row) + i;
  }
  KVC_AVX512_INLINE static __m512 load(const void* rows, size_t i) {
    const auto* b = static_cast<const uint16_t*>(rows) + i;
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
  }
  KVC_AVX512_INLINE static __m512 load_masked(const void* rows, size_t i, __mmask16 lanes) {
    return widen(_mm256_maskz_loadu_epi16(lanes, static_cast<const uint16_t*>(rows) + i));
  }
};

template <class Fn>
Fn* for_elements(kvc_dtype dtype, Fn* f32, Fn* f16, Fn* bf16) {
  return dtype == KVC_DTYPE_F16 ? f16 : dtype == KVC_DTYPE_BF16 ? bf16 : f32;
}

template <class Element>
KVC_AVX512 void convert_as(const void* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(dst + i, Element::load(src, i));
  if (i < n) {
    const __mmask16 lanes = lanes_below(n - i);
    _mm512_mask_storeu_ps(dst + i, lanes, Element::load_masked(src, i, lanes));
  }
}

void convert_f32(const void* src, float* dst, size_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}

KVC_AVX512 void convert(const void* src, kvc_dtype dtype, float* dst, size_t n) {
  for_elements(dtype, convert_f32, convert_as<F16>, convert_as<BF16>)(src, dst, n);
}

// Lane i = the sum of the lanes of x[i]: 15 adds for 16 sums, where one sum at a time would
// take 4 shuffles and 4 adds each. The first two levels pair registers with in-lane unpacks,
// the last two with 128-bit lane shuffles, cheaper than the same tree built of blends and
// two-source permutes (docs/performance.md).
KVC_AVX512_INLINE __m512 sum_each(const __m512* x) {
  // pairs[i], in each 128-bit lane: partial sums of x[2i], x[2i + 1], x[2i], x[2i + 1].
  __m512 pairs[8];
  for (size_t i = 0; i < 8; ++i) {
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]),
                             _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]));
  }
  // quads[i], in each 128-bit lane: partial sums of x[4i] .. x[4i + 3].
  __m512 quads[4];
  for (size_t i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(pairs[2 * i]), b = _mm512_castps_pd(pairs[2 * i + 1]);
    quads[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Then 128-bit lanes (0, 2) plus (1, 3) of two registers, twice: halves[i]'s lanes hold
  // quads[2i] in lanes 0-1 and quads[2i + 1] in lanes 2-3, each summed over half its lanes.
  constexpr int kEven = 0x88, kOdd = 0xDD;
  __m512 halves[2];
  for (size_t i = 0; i < 2; ++i) {
    halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], kEven),
                              _mm512_shuffle_f32x4(quads[2 * i], quads[2 * i + 1], kOdd));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(halves[0], halves[1], kEven),
                       _mm512_shuffle_f32x4(halves[0], halves[1], kOdd));
}

KVC_AVX512_INLINE float sum_lanes(__m512 x) {
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(x), high);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// acc[r * T + t] += query row r times key row t over the 16 elements from c (the lanes of
// `lanes` when Masked): each key chunk is loaded (and converted) once for the R rows.
template <size_t R, size_t T, class Element, bool Masked>
KVC_AVX512_INLINE void dot_chunk(__m512* acc, const float* q, const void* const* key_row,
                                 size_t dim, size_t c, __mmask16 lanes, Prefetch& ahead) {
  ahead.step();
  __m512 keys[T];
  for (size_t t = 0; t < T; ++t)
    keys[t] = Masked ? Element::load_masked(key_row[t], c, lanes) : Element::load(key_row[t], c);
  for (size_t r = 0; r < R; ++r) {
    const float* query = q + r * dim + c;
    const __m512 x = Masked ? _mm512_maskz_loadu_ps(lanes, query) : _mm512_loadu_ps(query);
    for (size_t t = 0; t < T; ++t) acc[r * T + t] = _mm512_fmadd_ps(x, keys[t], acc[r * T + t]);
  }
}

// Logits of query rows [0, R) with keys [key, key + T), R * T = 16 accumulators summed
// together at the end; `maxes` takes their lane-wise max. Keys from n_keys on repeat the last
// one and are not stored.
template <size_t R, class Element>
KVC_AVX512_INLINE void dot_block(const float* q, const void* const* k, size_t key, size_t n_keys,
                                 size_t dim, float* out, Prefetch& ahead, __m512& maxes) {
  constexpr size_t T = kLanes / R;
  const void* key_row[T];
  for (size_t t = 0; t < T; ++t) key_row[t] = k[std::min(key + t, n_keys - 1)];
  __m512 acc[kLanes];
  for (size_t i = 0; i < kLanes; ++i) acc[i] = _mm512_setzero_ps();
  size_t c = 0;
  for (; c + kLanes <= dim; c += kLanes)
    dot_chunk<R, T, Element, false>(acc, q, key_row, dim, c, kAllLanes, ahead);
  if (c < dim)
    dot_chunk<R, T, Element, true>(acc, q, key_row, dim, c, lanes_below(dim - c), ahead);
  const __m512 sums = sum_each(acc);  // row r's logits in lanes [r * T, r * T + T)
  maxes = _mm512_max_ps(maxes, sums);
  const __mmask16 stored = lanes_below(std::min(T, n_keys - key));
  // Row r's lanes are stored from out + r * kTileKeys + key: the register is placed r * T
  // floats earlier, still within row 0 as T <= kTileKeys, and its other lanes are masked.
  for (size_t r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(out + r * (kTileKeys - T) + key, __mmask16(stored << (r * T)), sums);
}

template <size_t R, class Element>
KVC_AVX512_INLINE void dot_rows(const float* q, const void* const* k, size_t n_keys, size_t dim,
                                float* out, float* row_max, Prefetch& ahead) {
  constexpr size_t T = kLanes / R;
  __m512 maxes = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (size_t key = 0; key < n_keys; key += T)
    dot_block<R, Element>(q, k, key, n_keys, dim, out, ahead, maxes);
  // Row r's maximum, over its T lanes, into lane r * T; then into lane r.
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (size_t width = T / 2; width > 0; width /= 2) {
    const __m512i partner = _mm512_xor_si512(lane, _mm512_set1_epi32(int(width)));
    maxes = _mm512_max_ps(maxes, _mm512_permutexvar_ps(partner, maxes));
  }
  const __m512i firsts = _mm512_mullo_epi32(lane, _mm512_set1_epi32(int(T)));
  _mm512_mask_storeu_ps(row_max, lanes_below(R), _mm512_permutexvar_ps(firsts, maxes));
}

size_t chunks_of(size_t dim) { return (dim + kLanes - 1) / kLanes; }

// Blocks of 4 query rows by 4 keys (decode's GQA groups share each K chunk), the rows left
// over as 2 by 8 and 1 by 16.
template <class Element>
KVC_AVX512 void logits_as(const float* q, size_t rows, const void* const* k, size_t n_keys,
                          size_t dim, float* out, float* row_max, Prefetch& ahead) {
  const size_t blocks = rows / 4 * ((n_keys + 3) / 4) + rows % 4 / 2 * ((n_keys + 7) / 8) +
                        rows % 2 * ((n_keys + 15) / 16);
  ahead.spread_over(blocks * chunks_of(dim));
  size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    dot_rows<4, Element>(q + r * dim, k, n_keys, dim, out + r * kTileKeys, row_max + r, ahead);
  if (r + 2 <= rows) {
    dot_rows<2, Element>(q + r * dim, k, n_keys, dim, out + r * kTileKeys, row_max + r, ahead);
    r += 2;
  }
  if (r < rows)
    dot_rows<1, Element>(q + r * dim, k, n_keys, dim, out + r * kTileKeys, row_max + r, ahead);
  ahead.rest();
}

KVC_AVX512 void logits(const float* q, size_t rows, const void* const* k, kvc_dtype k_dtype,
                       size_t n_keys, size_t dim, float* out, float* row_max, Prefetch& ahead) {
  for_elements(k_dtype, logits_as<F32>, logits_as<F16>, logits_as<BF16>)(q, rows, k, n_keys, dim,
                                                                         out, row_max, ahead);
}

// Adds the weighted V rows to R rows of acc over C chunks of 16 from element c, the last
// chunk holding the lanes of `last`: R * C accumulators, each V chunk loaded (and
// converted) once for the R rows.
template <size_t R, size_t C, class Element>
KVC_AVX512_INLINE void accumulate_block(float* acc, const float* weights, const void* const* v,
                                        size_t n_keys, size_t dim, size_t c, __mmask16 last,
                                        Prefetch& ahead) {
  __m512 sums[R * C];
  for (size_t i = 0; i < R * C; ++i) sums[i] = _mm512_setzero_ps();
  for (size_t t = 0; t < n_keys; ++t) {
    ahead.step();
    const void* row = Element::at(v[t], c);
    __m512 values[C];
    for (size_t i = 0; i + 1 < C; ++i) values[i] = Element::load(row, i * kLanes);
    values[C - 1] = Element::load_masked(row, (C - 1) * kLanes, last);
    for (size_t r = 0; r < R; ++r) {
      const __m512 w = _mm512_set1_ps(weights[r * kTileKeys + t]);
      for (size_t i = 0; i < C; ++i)
        sums[r * C + i] = _mm512_fmadd_ps(w, values[i], sums[r * C + i]);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    for (size_t i = 0; i < C; ++i) {
      float* y = acc + r * dim + c + i * kLanes;
      const __mmask16 lanes = i + 1 < C ? kAllLanes : last;
      _mm512_mask_storeu_ps(y, lanes,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, y), sums[r * C + i]));
    }
  }
}

// Column blocks of 4 chunks (64 floats), the last of 1 to 4 chunks.
constexpr size_t kBlockChunks = 4;

template <size_t R, class Element>
KVC_AVX512_INLINE void accumulate_rows(float* acc, const float* weights, const void* const* v,
                                       size_t n_keys, size_t dim, Prefetch& ahead) {
  const size_t chunks = chunks_of(dim);
  const __mmask16 last = lanes_below(dim - (chunks - 1) * kLanes);
  size_t i = 0;
  for (; chunks - i > kBlockChunks; i += kBlockChunks)
    accumulate_block<R, kBlockChunks, Element>(acc, weights, v, n_keys, dim, i * kLanes,
                                               kAllLanes, ahead);
  const size_t c = i * kLanes;
  switch (chunks - i) {
    case 4: accumulate_block<R, 4, Element>(acc, weights, v, n_keys, dim, c, last, ahead); break;
    case 3: accumulate_block<R, 3, Element>(acc, weights, v, n_keys, dim, c, last, ahead); break;
    case 2: accumulate_block<R, 2, Element>(acc, weights, v, n_keys, dim, c, last, ahead); break;
    default: accumulate_block<R, 1, Element>(acc, weights, v, n_keys, dim, c, last, ahead);
  }
}

template <class Element>
KVC_AVX512 void accumulate_as(float* acc, size_t rows, const float* weights, const void* const* v,
                              size_t n_keys, size_t dim, Prefetch& ahead) {
  const size_t row_blocks = rows / 4 + rows % 4 / 2 + rows % 2;
  const size_t column_blocks = (chunks_of(dim) + kBlockChunks - 1) / kBlockChunks;
  ahead.spread_over(row_blocks * column_blocks * n_keys);
  size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    accumulate_rows<4, Element>(acc + r * dim, weights + r * kTileKeys, v, n_keys, dim, ahead);
  if (r + 2 <= rows) {
    accumulate_rows<2, Element>(acc + r * dim, weights + r * kTileKeys, v, n_keys, dim, ahead);
    r += 2;
  }
  if (r < rows)
    accumulate_rows<1, Element>(acc + r * dim, weights + r * kTileKeys, v, n_keys, dim, ahead);
  ahead.rest();
}

KVC_AVX512 void accumulate(float* acc, size_t rows, const float* weights, const void* const* v,
                           kvc_dtype v_dtype, size_t n_keys, size_t dim, Prefetch& ahead) {
  for_elements(v_dtype, accumulate_as<F32>, accumulate_as<F16>, accumulate_as<BF16>)(
      acc, rows, weights, v, n_keys, dim, ahead);
}

// exp(x) for x <= 0, and 0 below -87 (where exp(x) leaves the normal floats) or for NaN.
// Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by a degree-7 polynomial, scaled
// by 2^n with scalef; within 2 ulp.
KVC_AVX512_INLINE __m512 exp_nonpositive(__m512 x) {
  const __m512 lowest = _mm512_set1_ps(-87.0f);
  const __mmask16 in_range = _mm512_cmp_ps_mask(x, lowest, _CMP_GE_OQ);
  x = _mm512_max_ps(x, lowest);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(in_range, _mm512_scalef_ps(p, n));
}

KVC_AVX512 float softmax_weights(const float* logits, size_t n, float max, float* weights) {
  const __m512 shift = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  // Rows are kTileKeys long: a chunk's lanes from n on read nothing and store 0.
  for (size_t t = 0; t < n; t += kLanes) {
    const __mmask16 valid = lanes_below(n - t);
    const __m512 x = _mm512_maskz_loadu_ps(valid, logits + t);
    const __m512 w = _mm512_maskz_mov_ps(valid, exp_nonpositive(_mm512_sub_ps(x, shift)));
    _mm512_storeu_ps(weights + t, w);
    sum = _mm512_add_ps(sum, w);
  }
  return sum_lanes(sum);
}

}  // namespace
}  // namespace kvc::cpu::KVC_AVX512_NAMESPACE
