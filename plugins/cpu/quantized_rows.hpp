// Rows of the quantized formats (q8_0, q4_0) to and from f32 in loops the compiler
// vectorises, with the same arithmetic as the format table's reference conversion
// (kvcache_format.h), so the bytes and values are the reference's exactly; tests compare them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_half.h"

namespace kvc::cpu {

constexpr size_t kQuantGroup = 32;
static_assert(kQuantGroup == KVC_QUANT_GROUP_, "the format table's group size");

// The group's scale, stored little-endian as f16 (saturating at f16's largest finite value),
// and the f32 the values are quantized against.
inline float put_scale(float d, unsigned char* group) {
  d = std::clamp(d, -65504.0f, 65504.0f);
  const uint16_t bits = kvc_f32_to_f16(d);
  group[0] = static_cast<unsigned char>(bits & 0xff);
  group[1] = static_cast<unsigned char>(bits >> 8);
  return kvc_f16_to_f32(bits);
}

inline float scale_of(const unsigned char* group) {
  return kvc_f16_to_f32(static_cast<uint16_t>(group[0] | group[1] << 8));
}

// v rounded to the nearest integer, halves away from zero, then clamped to [low, high]: the
// reference's steps (a NaN as 0, magnitudes beyond 256 as 256) without branches.
inline int32_t round_clamped(float v, int32_t low, int32_t high) {
  v = std::clamp(v == v ? v : 0.0f, -256.0f, 256.0f);
  int32_t t = static_cast<int32_t>(v);
  const float rest = v - static_cast<float>(t);
  t += int32_t(rest >= 0.5f) - int32_t(rest <= -0.5f);
  return std::clamp(t, low, high);
}

inline void q8_0_from_f32(const float* __restrict x, unsigned char* __restrict row, size_t n) {
  for (size_t g = 0; g < n / kQuantGroup; ++g, x += kQuantGroup, row += 2 + kQuantGroup) {
    float amax = 0.0f;
    for (size_t i = 0; i < kQuantGroup; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = put_scale(amax / 127.0f, row);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    auto* __restrict q = reinterpret_cast<int8_t*>(row + 2);
    for (size_t i = 0; i < kQuantGroup; ++i)
      q[i] = static_cast<int8_t>(round_clamped(x[i] * inverse, -127, 127));
  }
}

inline void q8_0_to_f32(const unsigned char* __restrict row, float* __restrict out, size_t n) {
  for (size_t g = 0; g < n / kQuantGroup; ++g, row += 2 + kQuantGroup, out += kQuantGroup) {
    const float d = scale_of(row);
    const auto* __restrict q = reinterpret_cast<const int8_t*>(row + 2);
    for (size_t i = 0; i < kQuantGroup; ++i) out[i] = static_cast<float>(q[i]) * d;
  }
}

inline void q4_0_from_f32(const float* __restrict x, unsigned char* __restrict row, size_t n) {
  constexpr size_t kHalf = kQuantGroup / 2;
  for (size_t g = 0; g < n / kQuantGroup; ++g, x += kQuantGroup, row += 2 + kHalf) {
    float extreme = 0.0f;
    for (size_t i = 0; i < kQuantGroup; ++i)
      if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
    const float d = put_scale(extreme / -8.0f, row);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    for (size_t i = 0; i < kHalf; ++i) {
      const int32_t low = round_clamped(x[i] * inverse, -8, 7) + 8;
      const int32_t high = round_clamped(x[i + kHalf] * inverse, -8, 7) + 8;
      row[2 + i] = static_cast<unsigned char>(low | high << 4);
    }
  }
}

inline void q4_0_to_f32(const unsigned char* __restrict row, float* __restrict out, size_t n) {
  constexpr size_t kHalf = kQuantGroup / 2;
  for (size_t g = 0; g < n / kQuantGroup; ++g, row += 2 + kHalf, out += kQuantGroup) {
    const float d = scale_of(row);
    for (size_t i = 0; i < kHalf; ++i) {
      out[i] = static_cast<float>(int32_t(row[2 + i] & 0x0f) - 8) * d;
      out[i + kHalf] = static_cast<float>(int32_t(row[2 + i] >> 4) - 8) * d;
    }
  }
}

}  // namespace kvc::cpu
