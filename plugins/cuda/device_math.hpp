// The per-element and per-row math of the CUDA kernels, written once as __host__ __device__
// functions: the kernels run them on the GPU and tests/cuda/test_cuda_math.cpp runs the same
// code on the CPU against the naive double-precision reference. Nothing here includes a CUDA
// header, so the normal (gcc-only) build compiles it.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kvcache/kvcache_format.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define KVC_HD __host__ __device__ __forceinline__
#else
#define KVC_HD inline
#endif

namespace kvc::cuda {

// ------------------------------------------------------------------ dtypes
// Codes as kvc_dtype: 0 f32, 1 f16, 2 bf16.
enum DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

KVC_HD float bits_to_f32(uint32_t bits) {
  union {
    uint32_t u;
    float f;
  } x{bits};
  return x.f;
}

KVC_HD uint32_t f32_to_bits(float f) {
  union {
    float f;
    uint32_t u;
  } x{f};
  return x.u;
}

// IEEE half to float, exact for every input (subnormals, infinities, NaN payloads).
KVC_HD float f16_to_f32_bits(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_to_f32(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_f32(sign);
    exponent = 113;  // normalise the subnormal: 127 - 15 + 1
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    return bits_to_f32(sign | (exponent << 23) | (mantissa << 13));
  }
  return bits_to_f32(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Float to IEEE half, round to nearest even; overflow gives infinity, NaN stays NaN.
KVC_HD uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past the largest half
  const int32_t exponent = int32_t(abs >> 23) - 127 + 15;
  uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  int32_t shift;  // bits of the 24-bit mantissa dropped
  if (exponent <= 0) {
    if (exponent < -10) return sign;  // below half the smallest subnormal
    shift = 14 - exponent;
  } else {
    shift = 13;
  }
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;  // a carry bumps the exponent
  if (exponent > 0) half = (uint32_t(exponent) << 10) + (half - 0x400u);
  return uint16_t(sign | half);
}

// The conversions the kernels use: the device's conversion instructions, which compute the
// same functions as the bit versions above (those are what the CPU tests check).
KVC_HD float f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  return f16_to_f32_bits(h);
#endif
}

KVC_HD uint16_t f32_to_f16(float f) {
#ifdef __CUDA_ARCH__
  return __half_as_ushort(__float2half_rn(f));
#else
  return f32_to_f16_bits(f);
#endif
}

KVC_HD float bf16_to_f32(uint16_t b) { return bits_to_f32(uint32_t(b) << 16); }

// Float to bfloat16, round to nearest even; NaN stays a quiet NaN.
KVC_HD uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Element i of an array of `dtype` as f32.
KVC_HD float load_as_f32(const void* data, int dtype, size_t i) {
  if (dtype == kF32) return static_cast<const float*>(data)[i];
  const uint16_t raw = static_cast<const uint16_t*>(data)[i];
  return dtype == kF16 ? f16_to_f32(raw) : bf16_to_f32(raw);
}

// Stores element i of `src_dtype` at src as element i of `dst_dtype` at dst (f32 or the same
// dtype as the source: storage never converts between f16 and bf16).
KVC_HD void convert_element(const void* src, int src_dtype, void* dst, int dst_dtype, size_t i) {
  if (src_dtype == dst_dtype) {
    if (dst_dtype == kF32)
      static_cast<float*>(dst)[i] = static_cast<const float*>(src)[i];
    else
      static_cast<uint16_t*>(dst)[i] = static_cast<const uint16_t*>(src)[i];
    return;
  }
  const float value = load_as_f32(src, src_dtype, i);
  if (dst_dtype == kF32)
    static_cast<float*>(dst)[i] = value;
  else
    static_cast<uint16_t*>(dst)[i] = dst_dtype == kF16 ? f32_to_f16(value) : f32_to_bf16(value);
}

// ------------------------------------------------------------------ which keys a query sees
// A query at q_pos sees keys at positions (q_pos - window, q_pos] (window > 0), else <= q_pos.
KVC_HD bool key_visible(int32_t q_pos, int32_t window, int32_t key_pos) {
  if (key_pos > q_pos) return false;
  return window <= 0 || int64_t(key_pos) > int64_t(q_pos) - window;
}

// ------------------------------------------------------------------ logits
// The logit of a scaled dot product: soft-capped when softcap > 0, and -infinity for a key the
// query does not see (it then gets weight 0).
KVC_HD float final_logit(float dot, float softcap, bool visible) {
  if (!visible) return -__builtin_huge_valf();
  return softcap > 0.0f ? softcap * tanhf(dot / softcap) : dot;
}

// ------------------------------------------------------------------ online softmax
// The running softmax of one (query, head) row over the keys seen so far: the output is
// acc / sum with acc = sum over keys of exp(logit - max) * v. A row that saw no visible key
// has max = -infinity and sum = 0.
struct RowState {
  float max;
  float sum;
};

KVC_HD RowState empty_row() { return {-__builtin_huge_valf(), 0.0f}; }

// e^x in the online softmax's fold, which runs for every (row, key): on the device the fast
// exponential (ex2.approx of x log2(e): a few ulp for the x <= 0 it is given, where accurate
// expf costs about ten instructions more); expf on the host.
KVC_HD float fold_exp(float x) {
#ifdef __CUDA_ARCH__
  return __expf(x);
#else
  return expf(x);
#endif
}

// Folds n logits into the row: writes each one's weight exp(logit - max) to weights (0 for
// -infinity) and returns the factor the row's acc must be multiplied by before the weighted
// values are added.
KVC_HD float fold_logits(RowState& row, const float* logits, int n, float* weights) {
  float tile_max = row.max;
  for (int i = 0; i < n; ++i) tile_max = logits[i] > tile_max ? logits[i] : tile_max;
  if (tile_max == -__builtin_huge_valf()) {
    for (int i = 0; i < n; ++i) weights[i] = 0.0f;
    return 1.0f;
  }
  const float correction =
      row.max == -__builtin_huge_valf() ? 0.0f : fold_exp(row.max - tile_max);
  float sum = row.sum * correction;
  for (int i = 0; i < n; ++i) {
    weights[i] = logits[i] == -__builtin_huge_valf() ? 0.0f : fold_exp(logits[i] - tile_max);
    sum += weights[i];
  }
  row.max = tile_max;
  row.sum = sum;
  return correction;
}

// Combines the states of n parts of one row (split-K, or the lanes and warps of one block):
// writes the factor each part's acc is multiplied by in weights and returns the combined
// state. Parts that saw no key get weight 0.
KVC_HD RowState merge_rows(const RowState* parts, int n, float* weights) {
  RowState merged = empty_row();
  for (int p = 0; p < n; ++p) merged.max = parts[p].max > merged.max ? parts[p].max : merged.max;
  for (int p = 0; p < n; ++p) {
    weights[p] = parts[p].max == -__builtin_huge_valf() ? 0.0f : expf(parts[p].max - merged.max);
    merged.sum += parts[p].sum * weights[p];
  }
  return merged;
}

// 1 / sum of a finished row, 0 for a row that saw no key (its output is zeros).
KVC_HD float output_factor(RowState row) { return row.sum > 0.0f ? 1.0f / row.sum : 0.0f; }

// The softmax probability of a key with this logit in a finished row.
KVC_HD float probability(RowState row, float logit) {
  if (row.sum <= 0.0f || logit == -__builtin_huge_valf()) return 0.0f;
  return expf(logit - row.max) / row.sum;
}

// ------------------------------------------------------------------ statistics
// Which statistics the query at index `query` of a job with n_queries queries feeds: every
// query feeds attn_sum; the last one attn_last (as a mean over the group's heads); the last
// `window` ones attn_window.
struct StatTargets {
  bool last;
  bool window;
};

KVC_HD StatTargets stat_targets(int32_t query, int32_t n_queries, int32_t observation_window) {
  const int32_t window = observation_window > 0 ? observation_window : 0;
  return {query + 1 == n_queries, query >= n_queries - window};
}

// ------------------------------------------------------------------ addressing
// The index of the range holding `index`, given the ranges' first indices `begins[0..n)`
// (increasing, begins[0] = 0): the last r with begins[r] <= index. Finds the segment of a key
// (begins = each segment's first key), or the job of a flattened token (begins = each job's
// first token); empty ranges are skipped.
KVC_HD int32_t find_range(const int64_t* begins, int32_t n, int64_t index) {
  int32_t low = 0, high = n - 1;
  while (low < high) {
    const int32_t mid = low + (high - low + 1) / 2;
    if (begins[mid] <= index)
      low = mid;
    else
      high = mid - 1;
  }
  return low;
}

}  // namespace kvc::cuda
