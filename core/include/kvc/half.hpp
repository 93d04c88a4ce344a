// Conversions between f32 and the 16-bit storage types, as uint16_t bit patterns.
// Integer bit manipulation with selects instead of branches or tables, so loops over them
// auto-vectorise on plain x86-64 (no F16C). Rounding is to nearest, ties to even; the
// subnormal paths use one float add and assume the default rounding mode and no FTZ/DAZ.
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
inline uint32_t blend(bool condition, uint32_t if_true, uint32_t if_false) {
  const uint32_t mask = 0u - uint32_t(condition);
  return (if_true & mask) | (if_false & ~mask);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  // Rebias the exponent from 15 to 127; inf/nan (exponent 31) must land on 255.
  const uint32_t rebiased = (magnitude << 13) + 0x38000000u;
  const uint32_t normal = magnitude >= 0x7c00u ? rebiased + 0x38000000u : rebiased;
  // A subnormal's mantissa m means m * 2^-24: placed under 0.5f (whose ulp is 2^-24), the
  // subtraction of 0.5f is exact.
  const uint32_t subnormal = float_bits(bits_float(0x3f000000u | magnitude) - 0.5f);
  return bits_float(sign | blend(magnitude < 0x0400u, subnormal, normal));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  // Normal range: rebias 127 -> 15 and round the 13 dropped bits to nearest even. Values
  // that round past the largest finite half (and inf) clamp to inf.
  const uint32_t rounded = (magnitude - 0x38000000u + 0x0fffu + ((magnitude >> 13) & 1u)) >> 13;
  const uint32_t normal = rounded < 0x7c00u ? rounded : 0x7c00u;
  // Below 2^-14: adding 0.5f (ulp 2^-24, the half subnormal step) rounds to the nearest
  // subnormal step; the sum's low bits are the half's mantissa (1024 means the least normal).
  const uint32_t subnormal = float_bits(bits_float(magnitude) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x03ffu);
  const uint32_t finite = blend(magnitude < 0x38800000u, subnormal, normal);
  return uint16_t(sign | blend(magnitude > 0x7f800000u, nan, finite));
}

inline float bf16_to_f32(uint16_t b) { return bits_float(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  // Rounding could carry a nan's payload into the exponent or sign; keep it a quiet nan.
  const uint32_t nan = (x >> 16) | 0x0040u;
  return uint16_t((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
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
