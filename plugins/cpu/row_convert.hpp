// Conversion of one row of head_dim values between formats: stored from an engine's tensor,
// and read back as f32 (the quantized formats by quantized_rows.hpp, which matches the format
// table's reference conversion).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels.hpp"
#include "kvcache/kvcache.h"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_half.h"
#include "kvcache/kvcache_rotation.h"
#include "quantized_rows.hpp"

namespace kvc::cpu {

inline void store_row_f32(const TileKernels& kernels, const float* __restrict src, void* dst,
                          kvc_dtype dtype, size_t n) {
  if (kvc_format_has_scales(dtype) && kernels.quantized) {
    kernels.quantized->quantize(src, dtype, static_cast<unsigned char*>(dst), n);
    return;
  }
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
    case KVC_DTYPE_Q8_0:
      q8_0_from_f32(src, static_cast<unsigned char*>(dst), n);
      return;
    case KVC_DTYPE_Q4_0:
      q4_0_from_f32(src, static_cast<unsigned char*>(dst), n);
      return;
  }
}

// The n values of a row of `dtype` as f32 into dst.
inline void load_row_f32(const TileKernels& kernels, const void* src, kvc_dtype dtype,
                         float* dst, size_t n) {
  if (dtype == KVC_DTYPE_Q8_0)
    q8_0_to_f32(static_cast<const unsigned char*>(src), dst, n);
  else if (dtype == KVC_DTYPE_Q4_0)
    q4_0_to_f32(static_cast<const unsigned char*>(src), dst, n);
  else
    kernels.convert(src, dtype, dst, n);
}

// A row of n values of src_dtype stored as `storage` (kvc_format_takes_input(storage,
// src_dtype)), through f32 where the source is not f32 or the row is rotated
// (kvcache_rotation.h): the rotation comes before any quantization, which it is there to help.
inline void store_row(const TileKernels& kernels, const void* src, kvc_dtype src_dtype,
                      void* dst, kvc_dtype storage, size_t n,
                      kvc_rotation rotation = KVC_ROTATION_NONE) {
  if (src_dtype == KVC_DTYPE_F32 && rotation == KVC_ROTATION_NONE) {
    store_row_f32(kernels, static_cast<const float*>(src), dst, storage, n);
    return;
  }
  thread_local std::vector<float> row;
  row.resize(n);
  load_row_f32(kernels, src, src_dtype, row.data(), n);
  kvc_rotation_apply(rotation, row.data(), int32_t(n));
  store_row_f32(kernels, row.data(), dst, storage, n);
}

}  // namespace kvc::cpu
