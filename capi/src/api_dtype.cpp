#include "handles.hpp"
#include "dtype.hpp"

namespace {

// A C caller may pass any int; only enumerators reach the C++ enum.
bool is_dtype(const kvc_dtype& dtype) {
  return kvc::enum_in(dtype, KVC_DTYPE_F32, KVC_DTYPE_BF16);
}

}  // namespace

extern "C" {

size_t kvc_dtype_size(kvc_dtype dtype) { return is_dtype(dtype) ? kvc::dtype_size(dtype) : 0; }

const char* kvc_dtype_name(kvc_dtype dtype) {
  return is_dtype(dtype) ? kvc::dtype_name(dtype) : "unknown";
}

}  // extern "C"
