// Conversion of one row of head_dim f32 values to a storage dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_half.h"

namespace kvc::cpu {

inline void store_row_f32(const float* __restrict src, void* dst, kvc_dtype dtype, size_t n) {
  switch (dtype) {
    case KVC_DTYPE_F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case KVC_DTYPE_F16: {
      auto* __restrict h = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) h[i] = kvc_f32_to_f16(src[i]);
      return;
    }
    case KVC_DTYPE_BF16: {
      auto* __restrict b = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) b[i] = kvc_f32_to_bf16(src[i]);
      return;
    }
  }
}

}  // namespace kvc::cpu
