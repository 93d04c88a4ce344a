/**
 * @file kvcache_format.h
 * @brief The storage formats of K and V rows: the one table of each ::kvc_dtype's name, group
 * size and bytes per row, with the reference conversion of a row to and from f32.
 * Header-only, for C99 and C++17 (and CUDA device code: the size functions are
 * `__host__ __device__` under nvcc).
 *
 * A row is the `head_dim` values of one token's K (or V) for one KV head. A format stores its
 * values in groups of `group_size` values taking `group_bytes` bytes each, scales included,
 * so a row of n values (n a multiple of group_size) takes n / group_size * group_bytes bytes.
 * f32, f16 and bf16 have no scales: a group is one value in host byte order (f16 is IEEE
 * binary16, bf16 the upper half of an f32); sequence images store them little-endian.
 *
 * The quantized formats hold 32 values a group, symmetric around zero, each group's scale an
 * f16 stored little-endian in its first two bytes on every host (so their rows are the same
 * bytes everywhere):
 * - q8_0 (34 bytes a group): the scale d, then 32 int8 values q; value i is q[i] * d.
 * - q4_0 (18 bytes a group): the scale d, then 16 bytes; byte j holds value j in its low four
 *   bits and value j + 16 in its high four bits, each an unsigned u; the value is (u - 8) * d.
 * They are storage formats only: the tensors an engine passes are f32, f16 or bf16.
 * The reference encoding rounds the scale to f16 first (saturating at 65504), then each value
 * times the scale's inverse to the nearest integer (halves away from zero), clamped to the
 * format's range. q8_0's d is the group's largest magnitude / 127, so each value comes back
 * within |d| / 2. q4_0's d is the group's value of largest magnitude / -8, which comes back
 * exactly; the others within |d| / 2, but for values of the other sign beyond 7.5 |d|, which
 * clamp to 7 d.
 * Language wrappers that cannot use these inline functions read the same table through
 * kvc_format_describe() (kvcache.h).
 *
 * Every function takes the format as an int, so any value a caller holds may be passed: for
 * one outside the table the size functions return 0 and kvc_format_name() "unknown".
 */
#ifndef KVCACHE_KVCACHE_FORMAT_H
#define KVCACHE_KVCACHE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_half.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @cond internal */
#ifdef __CUDACC__
#define KVC_FORMAT_FN __host__ __device__ static inline
#else
#define KVC_FORMAT_FN static inline
#endif
/** @endcond */

/** @brief One past the largest format code: every format is a code in [0, this). */
#define KVC_FORMAT_CODE_END 5

/** @cond internal */
/* The quantized formats' values per group; each group starts with its 2-byte scale. */
#define KVC_QUANT_GROUP_ 32

/* The table: one entry per format; group_size 0 marks a value outside it. A new format adds
 * its case here (and its conversions below). */
typedef struct kvc_format_entry_ {
  const char *name;
  uint32_t group_size;
  uint32_t group_bytes;
} kvc_format_entry_;

KVC_FORMAT_FN kvc_format_entry_ kvc_format_entry_of_(int format) {
  kvc_format_entry_ entry = {"unknown", 0, 0};
  switch (format) {
    case KVC_DTYPE_F32: entry.name = "f32"; entry.group_size = 1; entry.group_bytes = 4; break;
    case KVC_DTYPE_F16: entry.name = "f16"; entry.group_size = 1; entry.group_bytes = 2; break;
    case KVC_DTYPE_BF16: entry.name = "bf16"; entry.group_size = 1; entry.group_bytes = 2; break;
    case KVC_DTYPE_Q8_0:
      entry.name = "q8_0";
      entry.group_size = KVC_QUANT_GROUP_;
      entry.group_bytes = 2 + KVC_QUANT_GROUP_;
      break;
    case KVC_DTYPE_Q4_0:
      entry.name = "q4_0";
      entry.group_size = KVC_QUANT_GROUP_;
      entry.group_bytes = 2 + KVC_QUANT_GROUP_ / 2;
      break;
    default: break;
  }
  return entry;
}
/** @endcond */

/** @brief Nonzero when @p format is a ::kvc_dtype of the table. */
KVC_FORMAT_FN int kvc_format_is_valid(int format) {
  return kvc_format_entry_of_(format).group_size != 0;
}

/** @brief Values sharing one scale (1 for a format without scales); 0 for an unknown format. */
KVC_FORMAT_FN uint32_t kvc_format_group_size(int format) {
  return kvc_format_entry_of_(format).group_size;
}

/** @brief Bytes of one group of values, its scale included; 0 for an unknown format. */
KVC_FORMAT_FN uint32_t kvc_format_group_bytes(int format) {
  return kvc_format_entry_of_(format).group_bytes;
}

/** @brief Nonzero when @p format stores scales (its groups hold more than one value). */
KVC_FORMAT_FN int kvc_format_has_scales(int format) {
  return kvc_format_entry_of_(format).group_size > 1;
}

/**
 * @brief Nonzero when rows of format @p input may be stored as @p storage: the storage format
 * itself, f32, and for a format with scales f16 and bf16 too (which it quantizes). An
 * engine's tensors are never of a format with scales (kvc_tensor); the library itself passes
 * such rows to a backend, as stored ones, when it imports a sequence.
 */
KVC_FORMAT_FN int kvc_format_takes_input(int storage, int input) {
  if (!kvc_format_is_valid(storage) || !kvc_format_is_valid(input)) return 0;
  if (input == storage) return 1;
  return !kvc_format_has_scales(input) &&
         (input == KVC_DTYPE_F32 || kvc_format_has_scales(storage));
}

/**
 * @brief The format a query row is rounded to before it is scored against keys stored as
 * @p k_format: q8_0 for a format with scales, so that a backend may score with integer dot
 * products, else f32 (the query as given). The rounding is the reference encoding of this
 * file, applied to each head's query row after it is multiplied (in f32) by the attention
 * scale; attention's logits are then the dot products of the rounded query with the stored
 * keys. -1 for an unknown format.
 */
KVC_FORMAT_FN int kvc_format_query_format(int k_format) {
  if (!kvc_format_is_valid(k_format)) return -1;
  return kvc_format_has_scales(k_format) ? KVC_DTYPE_Q8_0 : KVC_DTYPE_F32;
}

/**
 * @brief Bytes of a row of @p n_values values of @p format, scales included; 0 for an unknown
 * format or when @p n_values is not a multiple of its group size.
 */
KVC_FORMAT_FN size_t kvc_format_row_bytes(int format, size_t n_values) {
  const uint32_t group = kvc_format_group_size(format);
  if (group == 0 || n_values % group != 0) return 0;
  return n_values / group * kvc_format_group_bytes(format);
}

/** @brief The name as written in YAML ("f32", "f16", "bf16", "q8_0", "q4_0"), or "unknown";
 * static storage. */
static inline const char *kvc_format_name(int format) { return kvc_format_entry_of_(format).name; }

/** @cond internal */
#define KVC_F16_MAX_ 65504.0f

KVC_FORMAT_FN float kvc_quant_abs_(float x) { return x < 0 ? -x : x; }

/* x rounded to the nearest integer, halves away from zero, for |x| < 2^23 (exact: x - t). */
KVC_FORMAT_FN int kvc_quant_round_(float x) {
  int t = (int)x;
  const float rest = x - (float)t;
  if (rest >= 0.5f) ++t;
  if (rest <= -0.5f) --t;
  return t;
}

KVC_FORMAT_FN int kvc_quant_clamp_(int x, int low, int high) {
  return x < low ? low : x > high ? high : x;
}

/* The group's scale as stored (little-endian f16) and as the f32 the values are quantized
 * against. */
static inline float kvc_quant_put_scale_(float d, unsigned char *group) {
  uint16_t bits;
  if (kvc_quant_abs_(d) > KVC_F16_MAX_) d = d < 0 ? -KVC_F16_MAX_ : KVC_F16_MAX_;
  bits = kvc_f32_to_f16(d);
  group[0] = (unsigned char)(bits & 0xff);
  group[1] = (unsigned char)(bits >> 8);
  return kvc_f16_to_f32(bits);
}

static inline float kvc_quant_scale_(const unsigned char *group) {
  return kvc_f16_to_f32((uint16_t)(group[0] | (group[1] << 8)));
}

static inline void kvc_q8_0_encode_(const float *x, unsigned char *group) {
  float amax = 0, d, inverse;
  int i;
  for (i = 0; i < KVC_QUANT_GROUP_; ++i) {
    if (kvc_quant_abs_(x[i]) > amax) amax = kvc_quant_abs_(x[i]);
  }
  d = kvc_quant_put_scale_(amax / 127.0f, group);
  inverse = d != 0 ? 1.0f / d : 0.0f;
  for (i = 0; i < KVC_QUANT_GROUP_; ++i) {
    const int q = kvc_quant_clamp_(kvc_quant_round_(x[i] * inverse), -127, 127);
    group[2 + i] = (unsigned char)(signed char)q;
  }
}

static inline void kvc_q8_0_decode_(const unsigned char *group, float *out) {
  const float d = kvc_quant_scale_(group);
  int i;
  for (i = 0; i < KVC_QUANT_GROUP_; ++i) out[i] = (float)(signed char)group[2 + i] * d;
}

static inline void kvc_q4_0_encode_(const float *x, unsigned char *group) {
  float extreme = 0, d, inverse;
  int i;
  for (i = 0; i < KVC_QUANT_GROUP_; ++i) {
    if (kvc_quant_abs_(x[i]) > kvc_quant_abs_(extreme)) extreme = x[i];
  }
  d = kvc_quant_put_scale_(extreme / -8.0f, group);
  inverse = d != 0 ? 1.0f / d : 0.0f;
  for (i = 0; i < KVC_QUANT_GROUP_ / 2; ++i) {
    const int low = kvc_quant_clamp_(kvc_quant_round_(x[i] * inverse) + 8, 0, 15);
    const int high =
        kvc_quant_clamp_(kvc_quant_round_(x[i + KVC_QUANT_GROUP_ / 2] * inverse) + 8, 0, 15);
    group[2 + i] = (unsigned char)(low | (high << 4));
  }
}

static inline void kvc_q4_0_decode_(const unsigned char *group, float *out) {
  const float d = kvc_quant_scale_(group);
  int i;
  for (i = 0; i < KVC_QUANT_GROUP_ / 2; ++i) {
    out[i] = (float)((group[2 + i] & 0x0f) - 8) * d;
    out[i + KVC_QUANT_GROUP_ / 2] = (float)((group[2 + i] >> 4) - 8) * d;
  }
}
/** @endcond */

/**
 * @brief The reference decoding: the @p n_values values of the row at @p row (of @p format,
 * kvc_format_row_bytes(format, n_values) bytes, any alignment) as f32 into @p out. Writes
 * nothing and returns 0 for an unknown format or a bad n_values; 1 otherwise.
 */
static inline int kvc_format_row_to_f32(int format, const void *row, float *out,
                                        size_t n_values) {
  const unsigned char *bytes = (const unsigned char *)row;
  size_t i;
  if (!kvc_format_is_valid(format) || n_values % kvc_format_group_size(format) != 0) return 0;
  for (i = 0; kvc_format_has_scales(format) && i < n_values; i += KVC_QUANT_GROUP_) {
    const unsigned char *group = bytes + i / KVC_QUANT_GROUP_ * kvc_format_group_bytes(format);
    if (format == KVC_DTYPE_Q8_0) {
      kvc_q8_0_decode_(group, out + i);
    } else {
      kvc_q4_0_decode_(group, out + i);
    }
  }
  for (i = 0; !kvc_format_has_scales(format) && i < n_values; ++i) {
    if (format == KVC_DTYPE_F32) {
      memcpy(&out[i], bytes + 4 * i, 4);
    } else {
      uint16_t bits;
      memcpy(&bits, bytes + 2 * i, 2);
      out[i] = format == KVC_DTYPE_F16 ? kvc_f16_to_f32(bits) : kvc_bf16_to_f32(bits);
    }
  }
  return 1;
}

/**
 * @brief The reference encoding: @p n_values f32 values at @p values stored as a row of
 * @p format at @p row (f16 and bf16 rounded to nearest even; the quantized formats as the
 * file's comment says). Returns 0, writing nothing, for an unknown
 * format or a bad n_values; 1 otherwise.
 */
static inline int kvc_format_row_from_f32(int format, const float *values, void *row,
                                          size_t n_values) {
  unsigned char *bytes = (unsigned char *)row;
  size_t i;
  if (!kvc_format_is_valid(format) || n_values % kvc_format_group_size(format) != 0) return 0;
  for (i = 0; kvc_format_has_scales(format) && i < n_values; i += KVC_QUANT_GROUP_) {
    unsigned char *group = bytes + i / KVC_QUANT_GROUP_ * kvc_format_group_bytes(format);
    if (format == KVC_DTYPE_Q8_0) {
      kvc_q8_0_encode_(values + i, group);
    } else {
      kvc_q4_0_encode_(values + i, group);
    }
  }
  for (i = 0; !kvc_format_has_scales(format) && i < n_values; ++i) {
    if (format == KVC_DTYPE_F32) {
      memcpy(bytes + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits =
          format == KVC_DTYPE_F16 ? kvc_f32_to_f16(values[i]) : kvc_f32_to_bf16(values[i]);
      memcpy(bytes + 2 * i, &bits, 2);
    }
  }
  return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_KVCACHE_FORMAT_H */
