// Conversions between f32 and the 16-bit storage types, as uint16_t bit patterns.
// Bit manipulation and a few float operations with selects instead of branches or tables,
// so loops over them auto-vectorise on plain x86-64 (no F16C). Rounding is to nearest, ties
// to even, done by the FPU: this assumes the default rounding mode and no FTZ/DAZ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvcache/kvcache.h"

namespace kvc {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Picks if_true or if_false by masks, not by a ternary: GCC (with the default
// -ftrapping-math) would sink a float operation used by only one arm of a ternary into a
// branch, and a loop with a branch does not vectorise.
// Compares below are on int32_t: the magnitudes fit, and SSE2 has only signed compares.
inline uint32_t blend(bool condition, uint32_t if_true, uint32_t if_false) {
  const uint32_t mask = 0u - uint32_t(condition);
  return (if_true & mask) | (if_false & ~mask);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t magnitude = h & 0x7fffu;
  // Normal, inf and nan: exponent and mantissa moved under the f32 ones, then rebiased by
  // the multiply by 2^-112; the offset 0x70000000 makes half exponent 31 land on 255.
  const float normal = bits_float((magnitude << 13) + 0x70000000u) * 0x1.0p-112f;
  // A subnormal's mantissa m means m * 2^-24: placed under 0.5f (whose ulp is 2^-24), the
  // subtraction of 0.5f is exact.
  const float subnormal = bits_float(0x3f000000u | magnitude) - 0.5f;
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const bool is_subnormal = int32_t(magnitude) < 0x0400;
  return bits_float(sign | blend(is_subnormal, float_bits(subnormal), float_bits(normal)));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  // Scaling up then down turns values past the largest half into inf and leaves others as
  // they were (times 4).
  const float scaled = (bits_float(magnitude) * 0x1.0p+112f) * 0x1.0p-110f;
  // Adding 2^(e+15), e being the exponent (at least -14, the least normal half's), leaves
  // an f32 ulp equal to the half's ulp at e, scaled by 4 likewise: the add rounds to nearest
  // even, and the low bits of the sum are the half's exponent and mantissa.
  const uint32_t exponent = magnitude & 0x7f800000u;
  const uint32_t bias = int32_t(exponent) < 0x38800000 ? 0x38800000u : exponent;
  const uint32_t sum = float_bits(bits_float(bias + 0x07800000u) + scaled);
  const uint32_t finite = ((sum >> 13) & 0x7c00u) + (sum & 0x0fffu);
  return uint16_t(sign | blend(int32_t(magnitude) > 0x7f800000, 0x7e00u, finite));
}

inline float bf16_to_f32(uint16_t b) { return bits_float(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  // Rounding could carry a nan's payload into the exponent or sign; keep it a quiet nan.
  const uint32_t nan = (x >> 16) | 0x0040u;
  return uint16_t(int32_t(x & 0x7fffffffu) > 0x7f800000 ? nan : rounded);
}

/** Bytes per element of @p dtype; 0 for a value outside ::kvc_dtype. */
inline size_t dtype_size(kvc_dtype dtype) {
  switch (dtype) {
    case KVC_DTYPE_F32:
      return 4;
    case KVC_DTYPE_F16:
    case KVC_DTYPE_BF16:
      return 2;
  }
  return 0;
}

}  // namespace kvc
