// Errors, kvc_status checking and dtype helpers shared by kvc-bench subcommands.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kvcache/kvcache.h"
#include "kvcache/kvcache_format.h"
#include "kvcache/kvcache_half.h"

namespace kvc_bench {

/// A failure while running a benchmark: printed, exit status 1.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Bad command-line input: printed with the usage, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throws Error("<what>: <CODE>: <message>") for a non-NULL status, which it frees.
inline void check(kvc_status* status, const char* what) {
  if (status == nullptr) return;
  std::string msg = std::string(what) + ": " + kvc_status_code_name(kvc_status_get_code(status)) +
                    ": " + kvc_status_message(status);
  kvc_status_free(status);
  throw Error(msg);
}

inline const char* dtype_name(kvc_dtype dtype) { return kvc_dtype_name(dtype); }

/// Parses a format name of the table (kvcache_format.h); throws UsageError naming @p option
/// and the names otherwise.
inline kvc_dtype parse_dtype(const std::string& text, const char* option) {
  std::string names;
  for (int code = 0; code < KVC_FORMAT_CODE_END; ++code) {
    if (!kvc_format_is_valid(code)) continue;
    if (text == kvc_format_name(code)) return static_cast<kvc_dtype>(code);
    names += std::string(names.empty() ? "" : ", ") + kvc_format_name(code);
  }
  throw UsageError(std::string("--") + option + ": expected one of " + names + ", got '" + text +
                   "'");
}

/// The dtype a benchmark passes its K/V in for storage `dtype`: the storage format itself, or
/// f16 for a quantized one (which tensors cannot have).
inline kvc_dtype input_dtype_for(kvc_dtype dtype) {
  return kvc_format_has_scales(dtype) ? KVC_DTYPE_F16 : dtype;
}

/// Converts @p n floats to @p dtype at @p dst.
inline void convert_from_f32(const float* src, void* dst, size_t n, kvc_dtype dtype) {
  if (dtype == KVC_DTYPE_F32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  if (dtype == KVC_DTYPE_F16) {
    for (size_t i = 0; i < n; ++i) out[i] = kvc_f32_to_f16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = kvc_f32_to_bf16(src[i]);
  }
}

}  // namespace kvc_bench
