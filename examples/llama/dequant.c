/*
 * ggml tensor types to f32. Block formats (32 elements a block, little-endian):
 *   Q8_0: f16 d, int8 q[32]                x[i] = d * q[i]
 *   Q4_0: f16 d, u8 qs[16]                 x[i] = d * (nibble(i) - 8)
 *   Q4_1: f16 d, f16 m, u8 qs[16]          x[i] = d * nibble(i) + m
 * where nibble(i) is the low half of qs[i] for i < 16 and the high half of qs[i - 16] after.
 */
#include <math.h>
#include <string.h>

#include "gguf.h"

#define QK 32

float kvl_half_to_float(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float v;
  if (exponent == 0) {
    v = ldexpf((float)mantissa, -24); /* zero and subnormals */
  } else if (exponent == 31) {
    v = mantissa == 0 ? INFINITY : NAN;
  } else {
    v = ldexpf((float)(mantissa | 0x400), exponent - 25);
  }
  return sign ? -v : v;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

const char *kvl_ggml_type_name(uint32_t type) {
  static const char *const names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2 (removed)",
                                      "Q4_3 (removed)", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  if (type < sizeof names / sizeof names[0]) return names[type];
  if (type == 30) return "BF16";
  return "unknown";
}

uint64_t kvl_ggml_bytes(uint32_t type, uint64_t n) {
  switch (type) {
    case KVL_GGML_F32: return 4 * n;
    case KVL_GGML_F16: return 2 * n;
    case KVL_GGML_Q8_0: return n % QK == 0 ? n / QK * 34 : 0;
    case KVL_GGML_Q4_0: return n % QK == 0 ? n / QK * 18 : 0;
    case KVL_GGML_Q4_1: return n % QK == 0 ? n / QK * 20 : 0;
    default: return 0;
  }
}

void kvl_ggml_dequantize(uint32_t type, const uint8_t *src, float *dst, uint64_t n) {
  uint64_t i, b;
  int j;
  switch (type) {
    case KVL_GGML_F32:
      memcpy(dst, src, (size_t)n * 4); /* the file is little-endian, as is every target here */
      return;
    case KVL_GGML_F16:
      for (i = 0; i < n; ++i) dst[i] = kvl_half_to_float(le16(src + 2 * i));
      return;
    case KVL_GGML_Q8_0:
      for (b = 0; b < n / QK; ++b, src += 34, dst += QK) {
        const float d = kvl_half_to_float(le16(src));
        for (j = 0; j < QK; ++j) dst[j] = d * (float)(int8_t)src[2 + j];
      }
      return;
    case KVL_GGML_Q4_0:
      for (b = 0; b < n / QK; ++b, src += 18, dst += QK) {
        const float d = kvl_half_to_float(le16(src));
        for (j = 0; j < QK / 2; ++j) {
          dst[j] = d * (float)((src[2 + j] & 0x0f) - 8);
          dst[j + QK / 2] = d * (float)((src[2 + j] >> 4) - 8);
        }
      }
      return;
    case KVL_GGML_Q4_1:
      for (b = 0; b < n / QK; ++b, src += 20, dst += QK) {
        const float d = kvl_half_to_float(le16(src)), m = kvl_half_to_float(le16(src + 2));
        for (j = 0; j < QK / 2; ++j) {
          dst[j] = d * (float)(src[4 + j] & 0x0f) + m;
          dst[j + QK / 2] = d * (float)(src[4 + j] >> 4) + m;
        }
      }
      return;
    default:
      return;
  }
}
