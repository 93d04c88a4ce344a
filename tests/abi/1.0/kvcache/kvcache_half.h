/**
 * @file kvcache_half.h
 * @brief Conversions between f32 and the 16-bit storage types (`KVC_DTYPE_F16`, IEEE binary16,
 * and `KVC_DTYPE_BF16`), as `uint16_t` bit patterns. Header-only, for C99 and C++17.
 *
 * Rounding is to nearest, ties to even, done by the FPU: this assumes the default rounding
 * mode and no flush-to-zero. A nan stays a (quiet) nan, values past the largest f16 become
 * infinities. The code uses bit operations and selects instead of branches or tables, so
 * loops over these functions auto-vectorise on plain x86-64 (no F16C needed).
 */
#ifndef KVCACHE_KVCACHE_HALF_H
#define KVCACHE_KVCACHE_HALF_H

#include <stdint.h>
#include <string.h>

/** @cond internal */
static inline uint32_t kvc_half_float_bits_(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float kvc_half_bits_float_(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Picks if_true or if_false by masks, not by a ternary: GCC (with the default
 * -ftrapping-math) would sink a float operation used by only one arm of a ternary into a
 * branch, and a loop with a branch does not vectorise. */
static inline uint32_t kvc_half_select_(int condition, uint32_t if_true, uint32_t if_false) {
  const uint32_t mask = 0u - (uint32_t)condition;
  return (if_true & mask) | (if_false & ~mask);
}
/** @endcond */

/* Compares below are on int32_t: the magnitudes fit, and SSE2 has only signed compares. */

/** @brief The f32 value of the f16 bit pattern @p h (exact). */
static inline float kvc_f16_to_f32(uint16_t h) {
  const uint32_t magnitude = h & 0x7fffu;
  /* Normal, inf and nan: exponent and mantissa moved under the f32 ones, then rebiased by
   * the multiply by 2^-112; the offset 0x70000000 makes half exponent 31 land on 255. */
  const float normal = kvc_half_bits_float_((magnitude << 13) + 0x70000000u) * 0x1.0p-112f;
  /* A subnormal's mantissa m means m * 2^-24: placed under 0.5f (whose ulp is 2^-24), the
   * subtraction of 0.5f is exact. */
  const float subnormal = kvc_half_bits_float_(0x3f000000u | magnitude) - 0.5f;
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const int is_subnormal = (int32_t)magnitude < 0x0400;
  return kvc_half_bits_float_(sign | kvc_half_select_(is_subnormal, kvc_half_float_bits_(subnormal),
                                                      kvc_half_float_bits_(normal)));
}

/** @brief @p f rounded to the nearest f16, as its bit pattern. */
static inline uint16_t kvc_f32_to_f16(float f) {
  const uint32_t x = kvc_half_float_bits_(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  /* Scaling up then down turns values past the largest half into inf and leaves others as
   * they were (times 4). */
  const float scaled = (kvc_half_bits_float_(magnitude) * 0x1.0p+112f) * 0x1.0p-110f;
  /* Adding 2^(e+15), e being the exponent (at least -14, the least normal half's), leaves
   * an f32 ulp equal to the half's ulp at e, scaled by 4 likewise: the add rounds to nearest
   * even, and the low bits of the sum are the half's exponent and mantissa. */
  const uint32_t exponent = magnitude & 0x7f800000u;
  const uint32_t bias = (int32_t)exponent < 0x38800000 ? 0x38800000u : exponent;
  const uint32_t sum =
      kvc_half_float_bits_(kvc_half_bits_float_(bias + 0x07800000u) + scaled);
  const uint32_t finite = ((sum >> 13) & 0x7c00u) + (sum & 0x0fffu);
  return (uint16_t)(sign | kvc_half_select_((int32_t)magnitude > 0x7f800000, 0x7e00u, finite));
}

/** @brief The f32 value of the bf16 bit pattern @p b (exact). */
static inline float kvc_bf16_to_f32(uint16_t b) { return kvc_half_bits_float_((uint32_t)b << 16); }

/** @brief @p f rounded to the nearest bf16, as its bit pattern. */
static inline uint16_t kvc_f32_to_bf16(float f) {
  const uint32_t x = kvc_half_float_bits_(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  /* Rounding could carry a nan's payload into the exponent or sign; keep it a quiet nan. */
  const uint32_t nan = (x >> 16) | 0x0040u;
  return (uint16_t)((int32_t)(x & 0x7fffffffu) > 0x7f800000 ? nan : rounded);
}

#endif /* KVCACHE_KVCACHE_HALF_H */
