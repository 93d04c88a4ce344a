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
#define KVC_FORMAT_CODE_END 3

/** @cond internal */
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

/**
 * @brief Bytes of a row of @p n_values values of @p format, scales included; 0 for an unknown
 * format or when @p n_values is not a multiple of its group size.
 */
KVC_FORMAT_FN size_t kvc_format_row_bytes(int format, size_t n_values) {
  const uint32_t group = kvc_format_group_size(format);
  if (group == 0 || n_values % group != 0) return 0;
  return n_values / group * kvc_format_group_bytes(format);
}

/** @brief The name as written in YAML ("f32", "f16", "bf16"), or "unknown"; static storage. */
static inline const char *kvc_format_name(int format) { return kvc_format_entry_of_(format).name; }

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
  for (i = 0; i < n_values; ++i) {
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
 * @p format at @p row (rounded to nearest even). Returns 0, writing nothing, for an unknown
 * format or a bad n_values; 1 otherwise.
 */
static inline int kvc_format_row_from_f32(int format, const float *values, void *row,
                                          size_t n_values) {
  unsigned char *bytes = (unsigned char *)row;
  size_t i;
  if (!kvc_format_is_valid(format) || n_values % kvc_format_group_size(format) != 0) return 0;
  for (i = 0; i < n_values; ++i) {
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
