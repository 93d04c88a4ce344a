// The AVX-512 intrinsics of kernels_avx512_body.hpp that SIMDe 0.7.4 (Debian 12) does not
// emulate, written with ones it does. Each is defined only where SIMDe has not (its aliases
// are macros). The masked loads and stores touch only the lanes of their mask, as the
// instructions do (fault suppression), so ASan sees any access the mask does not cover.
#pragma once

#include <cstdint>

#ifndef SIMDE_ENABLE_NATIVE_ALIASES
#error "include <simde/x86/avx512.h> with SIMDE_ENABLE_NATIVE_ALIASES first"
#endif
#include <simde/x86/f16c.h>

#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif

typedef simde__mmask16 __mmask16;

#ifndef _mm512_maskz_loadu_ps
inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void* p) {
  float lanes[16] = {};
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) lanes[i] = static_cast<const float*>(p)[i];
  return _mm512_loadu_ps(lanes);
}
#endif

#ifndef _mm512_mask_storeu_ps
inline void _mm512_mask_storeu_ps(void* p, __mmask16 k, __m512 a) {
  float lanes[16];
  _mm512_storeu_ps(lanes, a);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) static_cast<float*>(p)[i] = lanes[i];
}
#endif

#ifndef _mm256_maskz_loadu_epi16
inline __m256i _mm256_maskz_loadu_epi16(__mmask16 k, const void* p) {
  uint16_t lanes[16] = {};
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) lanes[i] = static_cast<const uint16_t*>(p)[i];
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes));
}
#endif

#ifndef _mm512_cvtepu16_epi32
inline __m512i _mm512_cvtepu16_epi32(__m256i a) {
  uint16_t narrow[16];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(narrow), a);
  uint32_t wide[16];
  for (int i = 0; i < 16; ++i) wide[i] = narrow[i];
  return _mm512_loadu_si512(wide);
}
#endif

// Two F16C conversions of 8 (SIMDe's own f16 decoding, not the library's).
#ifndef _mm512_cvtph_ps
inline __m512 _mm512_cvtph_ps(__m256i a) {
  float lanes[16];
  _mm256_storeu_ps(lanes, _mm256_cvtph_ps(_mm256_castsi256_si128(a)));
  _mm256_storeu_ps(lanes + 8, _mm256_cvtph_ps(_mm256_extractf128_si256(a, 1)));
  return _mm512_loadu_ps(lanes);
}
#endif

// SIMDe emulates this one but names no native alias for it.
#ifndef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm8) simde_mm512_shuffle_f32x4(a, b, imm8)
#endif
