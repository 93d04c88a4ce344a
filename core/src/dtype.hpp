// The size and name of a storage dtype, for the core and the C API.
#pragma once

#include <cstddef>

#include "kvcache/kvcache.h"

namespace kvc {

// Bytes per element of `dtype`; 0 for a value outside kvc_dtype.
inline size_t dtype_size(kvc_dtype dtype) {
  switch (dtype) {
    case KVC_DTYPE_F32: return 4;
    case KVC_DTYPE_F16:
    case KVC_DTYPE_BF16: return 2;
  }
  return 0;
}

// "f32", "f16", "bf16"; "unknown" for a value outside kvc_dtype.
inline const char* dtype_name(kvc_dtype dtype) {
  switch (dtype) {
    case KVC_DTYPE_F32: return "f32";
    case KVC_DTYPE_F16: return "f16";
    case KVC_DTYPE_BF16: return "bf16";
  }
  return "unknown";
}

}  // namespace kvc
