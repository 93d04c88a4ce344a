/**
 * @file kvcache_rotation.h
 * @brief The rotations of K (::kvc_rotation): the one definition of each transform, which
 * backends apply to K rows before storing them and to query rows at attention, and which
 * tests use as their reference. Header-only, for C99 and C++17.
 *
 * KVC_ROTATION_HADAMARD splits a row of head_dim values into blocks of b values, b the largest
 * power of two dividing head_dim (the whole row for 64 or 128), and replaces each block x by
 * H x / sqrt(b), H the b x b Sylvester-Hadamard matrix (entry (i, j) is (-1)^popcount(i & j)),
 * computed by the fast Walsh-Hadamard butterflies. The transform is orthonormal (norms and dot
 * products are preserved, up to f32 rounding) and its own inverse. A head_dim that is odd has
 * blocks of one value: the transform is then the identity.
 */
#ifndef KVCACHE_KVCACHE_ROTATION_H
#define KVCACHE_KVCACHE_ROTATION_H

#include <stdint.h>

#include "kvcache/kvcache.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Whether @p rotation is a ::kvc_rotation. */
static inline int kvc_rotation_is_valid(int rotation) {
  return rotation == KVC_ROTATION_NONE || rotation == KVC_ROTATION_HADAMARD;
}

/** @brief The name of @p rotation as the YAML writes it ("none", "hadamard"), or "unknown". */
static inline const char *kvc_rotation_name(int rotation) {
  return rotation == KVC_ROTATION_NONE       ? "none"
         : rotation == KVC_ROTATION_HADAMARD ? "hadamard"
                                             : "unknown";
}

/** @brief Values per Hadamard block of a row of @p head_dim values (>= 1): the largest power
 * of two dividing it. */
static inline int32_t kvc_rotation_block(int32_t head_dim) {
  const uint32_t n = (uint32_t)head_dim;
  return (int32_t)(n & (0u - n));
}

/** @cond internal */
/* The first three butterfly stages of the eight values at y: H_8 y, unnormalised. */
static inline void kvc_rotation_h8_(float *y) {
  const float a0 = y[0] + y[1], a1 = y[0] - y[1], a2 = y[2] + y[3], a3 = y[2] - y[3];
  const float a4 = y[4] + y[5], a5 = y[4] - y[5], a6 = y[6] + y[7], a7 = y[6] - y[7];
  const float b0 = a0 + a2, b1 = a1 + a3, b2 = a0 - a2, b3 = a1 - a3;
  const float b4 = a4 + a6, b5 = a5 + a7, b6 = a4 - a6, b7 = a5 - a7;
  y[0] = b0 + b4;
  y[1] = b1 + b5;
  y[2] = b2 + b6;
  y[3] = b3 + b7;
  y[4] = b0 - b4;
  y[5] = b1 - b5;
  y[6] = b2 - b6;
  y[7] = b3 - b7;
}
/** @endcond */

/** @brief Rotates @p row (@p head_dim f32 values, head_dim >= 1) in place by @p rotation;
 * KVC_ROTATION_NONE, or a value outside ::kvc_rotation, leaves it as it is. */
static inline void kvc_rotation_apply(int rotation, float *row, int32_t head_dim) {
  int32_t block, start, half, i, j, doublings = 0;
  float scale = 1.0f;
  if (rotation != KVC_ROTATION_HADAMARD) return;
  block = kvc_rotation_block(head_dim);
  /* 1 / sqrt(block) for block = 2^doublings, without libm: a power of two, times 1/sqrt(2)
   * when doublings is odd. */
  for (i = block; i > 1; i >>= 1) ++doublings;
  for (i = 0; i + 1 < doublings; i += 2) scale *= 0.5f;
  if (doublings % 2) scale *= 0.70710678118654752440f;
  for (start = 0; start < head_dim; start += block) {
    float *x = row + start;
    half = 1;
    /* The same butterflies in the same order, the first three stages eight values at a time
     * (the later ones are loops over contiguous halves, which compilers vectorise). */
    if (block >= 8) {
      for (i = 0; i < block; i += 8) kvc_rotation_h8_(x + i);
      half = 8;
    }
    for (; half < block; half *= 2) {
      for (i = 0; i < block; i += 2 * half) {
        for (j = i; j < i + half; ++j) {
          const float a = x[j], b = x[j + half];
          x[j] = a + b;
          x[j + half] = a - b;
        }
      }
    }
    for (i = 0; i < block; ++i) x[i] *= scale;
  }
}

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_KVCACHE_ROTATION_H */
