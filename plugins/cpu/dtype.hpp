// f16/bf16 conversions for the CPU kernels, from the public header only (plugins never reach
// into the core); sizes are the format table's (kvcache_format.h).
#pragma once

#include <cstdint>

#include "kvcache/kvcache_half.h"
#include "kvcache/kvcache_plugin.h"

namespace kvc::cpu {

inline float f16_to_f32(uint16_t h) { return kvc_f16_to_f32(h); }
inline uint16_t f32_to_f16(float f) { return kvc_f32_to_f16(f); }
inline float bf16_to_f32(uint16_t b) { return kvc_bf16_to_f32(b); }
inline uint16_t f32_to_bf16(float f) { return kvc_f32_to_bf16(f); }

}  // namespace kvc::cpu
